/*
 * tool.h - the contract every tool meets (one tool per file in agents/tools/).
 *
 * A tool is a static const struct tool_def: its name, the description and the
 * JSON Schema of its input exactly as the model sees them (declared once, next
 * to the code), whether a given input only reads (read_only) and may run beside
 * other calls (concurrency_safe), the largest result it may put into the
 * context, and call. The executor validates the input against the schema
 * before call; a validation error goes back to the model as an error result,
 * and call never sees invalid input.
 *
 * Blocking work (file reads and writes, directory walks) runs on the libuv
 * thread pool (uv_queue_work); processes run with uv_spawn through
 * tool_spawn() (spawn.h), which the sandbox wraps. call never blocks the loop.
 *
 * Loop thread only.
 */
#ifndef SB_AGENTS_TOOL_H
#define SB_AGENTS_TOOL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "gateway/core/host.h"

#define TOOL_RESULT_MAX_DEFAULT 50000

/* What a tool call may use. Borrowed for the duration of the call. */
struct permissions;
struct sandbox_policy;

/* The session's todo list (the todo tool): items, an array of {"text",
 * "status"} that the run owns. set replaces it (items borrowed; the owner
 * copies and records it). Loop thread only. */
struct tool_plan {
	json_t *items;
	void (*set)(void *ud, const json_t *items);
	void *ud;
};

/* The messages the message tool has sent for one run, so that a run
 * replayed after a crash sends none of them twice. A message's idempotency
 * key derives from the run (the inbox entry it answers), what is sent and
 * where, and how many identical messages this run sent before it: the
 * replay of a call whose put landed before the kill gets the same key (the
 * outbox keeps one entry), while a message the model means to send again,
 * having seen it sent, gets the next one. The runner seeds it from the
 * resumed history (tool_sends_from_history). Loop thread only. */
struct tool_sends {
	int64_t run_id; /* the inbox entry the run answers; 0: none (random keys) */
	unsigned char (*sent)[16];
	size_t n, cap;
};

struct tool_ctx;
/* Counts, in history[from..], each message call whose result says it was
 * queued (not an error: a call a restart cut is one). */
int tool_sends_from_history(struct tool_sends *s, const struct tool_ctx *ctx,
                            const json_t *history, size_t from);
void tool_sends_free(struct tool_sends *s);

/* What web_fetch may do for this agent (the agent's `web` config). */
struct netaddr_policy;
struct tool_web {
	const struct netaddr_policy *allow; /* besides public addresses; may be NULL */
	size_t max_bytes;                   /* of one response body */
	int64_t timeout_ms;                 /* the whole fetch, redirects included */
	int max_redirects;
};

/* What web_search may do for this agent (web.search): the operator's
 * search instance (a SearXNG JSON API) and its limits. */
struct tool_web_search {
	const char *url;      /* the instance's base URL; NULL: off */
	int max_results;      /* a call's count is capped by this */
	int safesearch;       /* 0 off, 1 moderate, 2 strict */
	const char *language; /* e.g. "en"; NULL: the instance's default */
	int64_t timeout_ms;
};

/* The agent's memory (workspaces/memory.h, docs/memory.md): where its
 * index lives, today's daily note, and who may write. */
struct tool_memory {
	const char *index;    /* the FTS5 index file (in the gateway's home) */
	const char *sessions; /* transcripts to index too, or NULL */
	const char *today;    /* "memory/YYYY-MM-DD.md" in the agent's time zone */
	/* Whether this session may write memory: the operator's sessions only
	 * (a non-owner's fact never reaches the owner's prompt). */
	bool writable;
	/* The commit a memory write made (40 hex digits), on the loop thread;
	 * may be NULL. */
	void (*committed)(void *ud, const char *commit, const char *path);
	void *ud;
	const char *session_label; /* names the session and turn in commit messages */
};

/* The agent's skills (workspaces/skills.h, docs/skills.md): the shared
 * skills directory and the PATH the gates look for binaries on. Saving and
 * patching take who may write, the session's label and the commit hook
 * from tool_memory. */
struct tool_skills {
	const char *home; /* <home>/skills, or NULL */
	const char *path; /* NULL: SKILLS_PATH_DEFAULT */
};

struct tool_ctx {
	uv_loop_t *loop;
	const struct host *host;
	const char *agent_id;
	const char *session_key;
	const char *workspace; /* absolute, real path (symlinks resolved) */
	int64_t timeout_ms;    /* default time limit for this call */
	const char *channel;   /* where the run's message came from, or NULL */
	const char *account;
	const char *target; /* the conversation to answer, or NULL */
	/* Output budgets (budget.h): the session's store of persisted results
	 * ("@tool-results/..."), the directory of its transcript and archives
	 * ("@archive/...") and its id. NULL when the run has none. */
	const char *results_dir;
	const char *sessions_dir;
	const char *session_id;
	/* The gates (permissions.h) the executor runs before each call, and
	 * the sandbox (sandbox.h) processes run in. The runner always sets
	 * both; NULL (tests of a single tool) means no gate and no sandbox. */
	const struct permissions *perms;
	const struct sandbox_policy *sandbox;
	/* The session's todo list; NULL: the todo tool is not available. */
	struct tool_plan *plan;
	/* The run's sent messages (the message tool's keys); NULL: random
	 * keys (a run that cannot be replayed, tests of a single tool). */
	struct tool_sends *sends;
	/* web_fetch's limits; NULL: web_fetch is refused. */
	const struct tool_web *web;
	/* web_search's instance; NULL: web_search is refused. */
	const struct tool_web_search *search;
	/* The memory tools' scope; NULL: they are refused. */
	const struct tool_memory *memory;
	/* The skill tools' scope; NULL: they are refused. */
	const struct tool_skills *skills;
	/* The gateway's private paths (config.h: its configuration file,
	 * home, store, token and secret files), absolute: the file tools
	 * refuse those inside the workspace, reading and writing, as the
	 * sandbox hides them. NULL: none (tests of a single tool). */
	const char *const *private_paths;
	size_t n_private_paths;
};

/* The call's outcome, exactly once. content is handed over (the callee frees
 * it). is_error: the tool failed and content says why (goes to the model as
 * an error result). rc is SB_ERR_ABORTED when the call was cancelled. */
typedef void (*tool_done_cb)(void *ud, int rc, char *content, bool is_error);

/* A running call; tools embed it first in their own state. */
struct tool_run {
	/* Stops the call: its done runs (rc SB_ERR_ABORTED) before this
	 * returns; child processes are killed. */
	void (*cancel)(struct tool_run *run);
};

struct tool_def {
	const char *name;
	const char *description;
	const char *input_schema; /* JSON text of a JSON Schema object */
	bool (*read_only)(const json_t *input);
	bool (*concurrency_safe)(const json_t *input);
	size_t max_result_chars; /* 0 = TOOL_RESULT_MAX_DEFAULT */
	/* The tool reads a file: a result over max_result_chars is cut with a
	 * note to read on (offset/limit), never persisted (budget.h). */
	bool result_pages;
	/* The result carries text from outside the operator (file contents,
	 * command output, file names): the executor labels it untrusted when
	 * the gates are on. */
	bool untrusted_output;
	/* The tool runs code (bash): a round of the loop whose calls all run
	 * code is executed work rather than the model's thinking, and its
	 * iteration is refunded to the budget (the seeds' IterationBudget). */
	bool runs_code;
	/* Starts the call. input is valid per input_schema and borrowed for
	 * the call's duration. On SB_OK, done runs later (never from inside
	 * call) and *run (if out not NULL) may be used to cancel until then.
	 * Any other return: done never runs. */
	int (*call)(const struct tool_ctx *ctx, const json_t *input, tool_done_cb done, void *ud,
	            struct tool_run **run);
	/* Instead of call, for tools made at run time (an MCP server's,
	 * agents/mcp/mcp.h): the same contract, with the definition the call
	 * was looked up as, so that one function serves many tools. */
	int (*call_def)(const struct tool_def *def, const struct tool_ctx *ctx, const json_t *input,
	                tool_done_cb done, void *ud, struct tool_run **run);
};

/* The built-in tools, sorted by name. */
extern const struct tool_def tool_bash, tool_edit, tool_glob, tool_grep, tool_ls, tool_memory_get,
    tool_memory_search, tool_memory_write, tool_message, tool_read, tool_skill_load,
    tool_skill_patch, tool_skill_save, tool_todo, tool_web_fetch, tool_web_search, tool_write;

/* The compact form of a todo list, one line per item ("[x] text"), under a
 * heading; the caller frees it. NULL when items is empty or out of memory. */
char *tool_todo_render(const json_t *items, const char *heading);

/* Finds a built-in tool by name; NULL if none. */
const struct tool_def *tool_find(const char *name);

/* All built-in tools, sorted by name; *n receives the count. */
const struct tool_def *const *tool_all(size_t *n);

/* The tool list sent to the model: [{"name","description","input_schema"}]
 * sorted by name, for the given tools (NULL/0 = all). The same input always
 * serialises to the same bytes (so provider prompt caches hit). New
 * reference. Unknown names are skipped. */
json_t *tool_list_json_new(const char *const *names, size_t n);

/* tool_list_json_new, with more tools (extra, n_extra: sorted by name, none
 * named like a built-in one) merged into the sorted list. New reference. */
json_t *tool_list_json_merge(const char *const *names, size_t n,
                             const struct tool_def *const *extra, size_t n_extra);

#endif
