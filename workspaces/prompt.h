/*
 * prompt.h - the agent's system prompt, assembled from its workspace.
 *
 * A fixed preamble, then a "Project Context" part with the bootstrap files in
 * this order: AGENTS.md, SOUL.md, TOOLS.md, IDENTITY.md, USER.md,
 * HEARTBEAT.md, BOOTSTRAP.md (only while the workspace is new), MEMORY.md
 * (only in the agent's private main session). A missing file gets one short
 * line; a blank one is skipped; one that is not a regular file (a
 * symlink, whatever its target) gets a line saying it was refused. Each file is capped
 * (file_max_chars); an over-long one keeps its first 70% and last 20% around a marker naming the
 * file to read for the rest. The total is capped too: once it is spent, the
 * remaining files are listed, not included.
 *
 * The output is a pure function of the files' bytes and the options: no
 * clock, no random ids, so the prompt is byte-identical from turn to turn
 * while no file changes (provider prompt caches hit). Sizes are counted in
 * bytes of UTF-8 and cuts never split a character.
 *
 * Blocking (reads files): call from the CLI or the libuv thread pool.
 */
#ifndef SB_WORKSPACES_PROMPT_H
#define SB_WORKSPACES_PROMPT_H

#include <stdbool.h>
#include <stddef.h>

#include "gateway/core/buf.h"

#define PROMPT_FILE_MAX_DEFAULT 20000
#define PROMPT_TOTAL_MAX_DEFAULT 150000
#define PROMPT_FILES_MAX 8
#define PROMPT_HASH_BYTES 32

struct prompt_options {
	const char *agent_id;
	size_t file_max_chars;  /* 0 = PROMPT_FILE_MAX_DEFAULT */
	size_t total_max_chars; /* 0 = PROMPT_TOTAL_MAX_DEFAULT */
	bool main_session;      /* include MEMORY.md */
	bool new_workspace;     /* include BOOTSTRAP.md */
};

struct prompt_file {
	const char *name; /* "AGENTS.md", ... (static) */
	bool present;
	bool included; /* some of it is in the prompt */
	bool truncated;
	bool blank;    /* present, but only white space: skipped */
	bool refused;  /* not a regular file (a symlink, a FIFO): never read */
	bool left_out; /* present, not blank, but the total cap was spent: only named */
	/* truncated: the cap it was cut to (bytes), whether that was what was
	 * left of the total cap rather than the per-file one, and what of it
	 * the prompt holds: bytes [0, head_bytes) and [tail_from, bytes). */
	size_t cap;
	bool cut_by_total;
	size_t head_bytes;
	size_t tail_from;
	size_t bytes;                          /* the file's size */
	unsigned char hash[PROMPT_HASH_BYTES]; /* BLAKE2b-256 of the bytes (present only) */
};

struct prompt_info {
	struct prompt_file files[PROMPT_FILES_MAX];
	size_t n_files;
};

/* Appends the system prompt for the workspace at dir to out and describes
 * each file in info (may be NULL). Returns SB_OK, SB_ERR_NOTFOUND when dir is
 * not a directory, SB_ERR_IO, SB_ERR_TOOBIG (out's bound). */
int workspace_prompt_build(const char *dir, const struct prompt_options *opt, struct buf *out,
                           struct prompt_info *info);

/* Where the bytes of the bootstrap files come from. get gives the file
 * name (path is dir/name) as text/len with its BLAKE2b-256 hash, lent until
 * the build returns; SB_OK, SB_ERR_NOTFOUND (absent), SB_ERR_PERM (not a
 * regular file: a symlink is never followed; the prompt says it was
 * refused), or another error that ends the build. Both sources read the
 * files beneath the workspace's directory fd (gateway/core/beneath.h). The default source reads
 * each file; workspace_snapshot (workspace.h) gives cached bytes checked with stat. */
struct prompt_source {
	int (*get)(void *ud, size_t index, const char *name, const char *path, const char **text,
	           size_t *len, const unsigned char **hash);
	void *ud;
};

/* workspace_prompt_build with the files' bytes from src. dir is only used
 * in the text (and checked to be a directory). */
int workspace_prompt_build_from(const char *dir, const struct prompt_options *opt,
                                const struct prompt_source *src, struct buf *out,
                                struct prompt_info *info);

/* The bootstrap files in prompt order, PROMPT_FILES_MAX of them. */
extern const char *const prompt_file_names[PROMPT_FILES_MAX];

/* The bytes of text that fit in max without splitting a UTF-8 character. */
size_t prompt_utf8_cut(const char *text, size_t len, size_t max);

#endif
