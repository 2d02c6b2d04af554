/*
 * skills.h - an agent's skills: folders holding a SKILL.md (YAML
 * frontmatter, then markdown instructions) and any files it refers to.
 *
 * Two places hold skills, highest precedence first:
 *
 *   <workspace>/skills/<name>/SKILL.md   the agent's own (versioned with the
 *                                        workspace; skill_save writes here)
 *   <home>/skills/<name>/SKILL.md        shared by every agent of the gateway
 *
 * A name found in both is the workspace's. The frontmatter has `name` (the
 * folder's name, SKILL_NAME_MAX bytes of [a-z0-9_-], starting with a letter
 * or digit), `description` (one line), and optional gates: `requires.bins`
 * (each found as an executable on the PATH tool processes run with),
 * `requires.any_bins` (at least one of them), `requires.env` (each set,
 * non-empty, in the gateway's environment), `os` (one or a list of linux,
 * darwin, win32), `always: true` (no gate applies). The same gates are read
 * from `metadata.<anything>` too (the folder format other gateways use,
 * where metadata is a one-line JSON object). `patches` counts the edits
 * skill_patch made.
 *
 * Every file is read beneath its source's directory fd (beneath.h): a
 * symlink anywhere on the way is refused, a path with ".." that climbs out of
 * the skill's folder or an absolute one is refused, SKILL.md is bounded by
 * SKILL_MD_MAX, the frontmatter by SKILL_FRONTMATTER_MAX, every other file
 * by SKILL_FILE_MAX, the YAML by a node count and a depth.
 *
 * Blocking (files): the thread pool or the CLI. Saves and patches in one
 * process are serialised.
 */
#ifndef SB_WORKSPACES_SKILLS_H
#define SB_WORKSPACES_SKILLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gateway/core/buf.h"

#define SKILLS_DIR "skills"
#define SKILL_FILE "SKILL.md"
#define SKILL_NAME_MAX 64
#define SKILL_DESC_MAX 1024                      /* bytes of a description */
#define SKILL_MD_MAX ((size_t)256 << 10)         /* a bigger SKILL.md is refused */
#define SKILL_FRONTMATTER_MAX ((size_t)16 << 10) /* the YAML between the --- lines */
#define SKILL_FILE_MAX ((size_t)256 << 10)       /* another file of a skill */
#define SKILL_BODY_MAX ((size_t)128 << 10)       /* what skill_save and skill_patch write */
#define SKILLS_SCAN_MAX 256                      /* folders looked at per source */
#define SKILLS_PROMPT_MAX 100                    /* skills listed in the prompt */
#define SKILL_FILES_LISTED 64                    /* files skill_load names */
#define SKILL_YAML_NODES_MAX 512
#define SKILL_YAML_DEPTH_MAX 8

enum skill_source { SKILL_SOURCE_WORKSPACE = 0, SKILL_SOURCE_HOME };

struct skill {
	char name[SKILL_NAME_MAX + 1];
	enum skill_source source;
	char *description; /* one line, white space folded; NULL when error */
	bool eligible;     /* every gate passes */
	char *failed;      /* the gates that failed ("bins: jq; env: TOKEN"), or NULL */
	char *error;       /* why the skill could not be read, or NULL (then not eligible) */
	bool shadowed;     /* a home skill hidden by the workspace's of the same name */
	int64_t patches;
};

struct skill_list {
	struct skill *v; /* sorted by name; a shadowed home skill follows its winner */
	size_t n;
	size_t left_out; /* folders past SKILLS_SCAN_MAX */
};

/* Where skills come from and what the gates check. */
struct skills_env {
	const char *workspace; /* absolute (trusted: config) */
	const char *home;      /* the shared skills directory (trusted), or NULL */
	const char *path;      /* the PATH for requires.bins; NULL: SKILLS_PATH_DEFAULT */
	const char *os;        /* "linux", ...; NULL: this system's */
};

/* The PATH tool processes get (agents/safety/spawn.c sets the same). */
#define SKILLS_PATH_DEFAULT "/usr/local/bin:/usr/bin:/bin"

/* Whether name is a valid skill name (as above). */
bool skill_name_ok(const char *name);

/* Reads both sources into *out (skill_list_free). A missing skills/
 * directory is no skill; one that is a symlink is refused (no skill from
 * it). SB_OK or SB_ERR_NOMEM. */
int skills_scan(const struct skills_env *e, struct skill_list *out);
void skill_list_free(struct skill_list *l);

/* Appends the prompt's skills section (the eligible, unshadowed skills'
 * names and descriptions, sorted by name; nothing when there is none) to
 * out. The bytes depend on the skills only. SB_OK or buf's codes. */
int skills_prompt(const struct skill_list *l, struct buf *out);

/* What skill_load gives the model: with file NULL, the skill's SKILL.md
 * after its frontmatter, under a line naming the skill, and the list of its
 * other files; otherwise that file of the skill's folder (a path relative to
 * it). *out is the caller's. SB_ERR_NOTFOUND (no such skill or file),
 * SB_ERR_PERM (gates fail, a symlink, a path out of the folder, not a
 * regular file, binary), SB_ERR_TOOBIG, SB_ERR_INVAL (a bad name or
 * frontmatter), SB_ERR_IO, SB_ERR_NOMEM; why says it for the model. */
int skills_load(const struct skills_env *e, const char *name, const char *file, char **out,
                char *why, size_t why_size);

/* Creates <workspace>/skills/<name>/SKILL.md with the frontmatter (name,
 * description, patches: 0) and body, then commits it (memory.h:
 * memory_commit_files) with a message naming label. SB_ERR_INVAL (a bad
 * name, description or body; why says so), SB_ERR_EXISTS (the workspace has
 * that skill: patch it), SB_ERR_TOOBIG, SB_ERR_PERM (a symlink on the way),
 * SB_ERR_IO. commit (41 bytes) receives the commit's id, or "" when none was
 * made (why then says why, with SB_OK: the workspace is not a git
 * repository, say). *shadows: a home skill of that name is now hidden. */
int skills_save(const char *workspace, const char *home, const char *name, const char *description,
                const char *body, const char *label, char *commit, bool *shadows, char *why,
                size_t why_size);

/* Replaces the one occurrence of old in the body of the workspace's skill
 * name with new, raises its frontmatter's `patches` by one (the rest of the
 * frontmatter is kept byte for byte), and commits it as skills_save does.
 * *patches receives the new count. SB_ERR_NOTFOUND (no such skill in the
 * workspace; a home skill says so), SB_ERR_INVAL (old is empty, missing, or
 * found more than once), other codes as skills_save. */
int skills_patch(const char *workspace, const char *home, const char *name, const char *old,
                 const char *new_text, const char *label, char *commit, int64_t *patches, char *why,
                 size_t why_size);

/* Parses text, the SKILL.md of the folder dirname, into sk (zeroed first;
 * release with skill_release): name, description, patches, the gates
 * against e (e->workspace unused), or sk->error saying why it cannot be
 * used. SB_OK or SB_ERR_NOMEM. For tests and fuzzing; the scan and
 * skills_load use the same parser. */
int skill_parse_text(struct skill *sk, const char *dirname, const char *text, size_t len,
                     const struct skills_env *e);
void skill_release(struct skill *sk);

const char *skill_source_name(enum skill_source s);

#endif
