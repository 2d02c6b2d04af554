/*
 * commands.h - the chat commands a user types in any channel: /help,
 * /status, /stop, /compact, /model (docs/commands.md). /new and /reset are
 * the session's reset triggers (bindings_reset_trigger) and stay theirs.
 *
 * A command is answered by the gateway itself, through the outbox, without
 * a model turn and without entering the transcript; the dispatcher decides
 * what each one does to its session. This file holds what needs no state:
 * recognising a command and the texts of the replies.
 *
 * Any thread unless said otherwise.
 */
#ifndef SB_GATEWAY_COMMANDS_H
#define SB_GATEWAY_COMMANDS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gateway/core/buf.h"

/* The longest command name, and the longest argument /model accepts. */
#define COMMANDS_NAME_MAX 32
#define COMMANDS_ARG_MAX 256

enum command_kind {
	COMMAND_NONE = 0, /* not a command the gateway answers: the agent gets the text */
	COMMAND_HELP,
	COMMAND_STATUS,
	COMMAND_STOP,
	COMMAND_COMPACT,
	COMMAND_MODEL,
};

struct command {
	enum command_kind kind;
	char name[COMMANDS_NAME_MAX + 1]; /* lower case, without "/" and "@bot" */
	const char *addressed;            /* the "bot" of "/cmd@bot" (inside text); NULL */
	size_t addressed_len;
	const char *args; /* what follows, blanks trimmed at both ends (inside text) */
	size_t args_len;
};

/* Reads text as a command: leading blanks, "/", a name of letters, digits
 * and "_" (1 to COMMANDS_NAME_MAX, any case), optionally "@botname", then
 * the end or a blank and the arguments. Fills *out (kind COMMAND_NONE for a
 * name that is no command of the gateway's, such as "/etc/hosts" or
 * "/foo"). A command that takes no arguments (all but /model) is a command
 * only when it stands alone: "/stop the server" is a message for the agent.
 * Returns the kind. */
enum command_kind commands_parse(const char *text, struct command *out);

/* A copy of s[0, n) fit to show in a reply: at most size - 1 bytes, cut on
 * a character boundary, control characters (line breaks included) as "?". */
void commands_quote(const char *s, size_t n, char *out, size_t size);

/* The command's name without its "/" ("status"). */
const char *commands_name(enum command_kind kind);

/* The reply to /help: every command, with the session's reset triggers
 * (borrowed; n may be 0 when they are off). Appends to out. */
int commands_help(struct buf *out, const char *const *triggers, size_t n);

/* The agent's configured models, primary first then the fallbacks in
 * order, each once (borrowed strings). */
struct commands_models {
	const char *v[33];
	size_t n;
};

void commands_models_of(struct commands_models *m, const char *primary,
                        const char *const *fallbacks, size_t n_fallbacks);

/* Which of m a typed name means: the exact "provider/model", or the part
 * after the "/" when only one model has it (compared without regard to
 * case). The index, or -1 (unknown or ambiguous). */
int commands_models_find(const struct commands_models *m, const char *name, size_t len);

/* The list for /model: one line a model, the current one (NULL: the
 * primary) marked. Appends to out. */
int commands_models_list(struct buf *out, const struct commands_models *m, const char *current);

/* The model a session chose with /model, from its stored meta (JSON text;
 * may be NULL). Caller frees; NULL when none. */
char *commands_session_model(const char *meta);

/* meta with "model" set to model (NULL: removed), as new JSON text (caller
 * frees; NULL when out of memory). Other keys stay. */
char *commands_session_meta_with(const char *meta, const char *model);

/* What /status reports about a session's transcript, read off the loop
 * (commands_status_read). */
struct commands_status_facts {
	bool found;           /* the transcript exists */
	size_t messages;      /* messages in the history (after compaction) */
	size_t user_turns;    /* user messages with text */
	int64_t tokens;       /* the context's size, estimated (see below) */
	bool tokens_reported; /* anchored on the last request's figure */
	int64_t window;       /* the last run's context window; 0 unknown */
	int compactions;      /* compaction entries */
	char commit[64];      /* the workspace version of the last turn */
	char hash[20];        /* its content hash, first 16 hex digits */
	bool dirty;
	char last_model[256]; /* "provider/model" of the last answer */
	char last_at[40];     /* its time, RFC 3339 */
};

/* Reads the transcript at path (blocking: the thread pool). The context's
 * size is the last request's estimate (the "prompt" event, which counts the
 * system prompt and tools too) plus the messages added since, scaled by its
 * calibration; without one, the history's estimate alone. SB_OK (also when
 * the file does not exist: found false), or transcript_load's codes. */
int commands_status_read(const char *path, struct commands_status_facts *f);

#endif
