/*
 * spawn.h - every process a tool starts goes through tool_spawn.
 *
 * One function, so that the sandbox (bubblewrap, sandbox.h) wraps every
 * child in one place. The child runs in cwd with a clean environment (only
 * what env lists, plus PATH, HOME=cwd, LANG), stdin from /dev/null, stdout
 * and stderr captured together up to max_output bytes (and, if keep_tail is
 * set, the last keep_tail bytes as well; what lies between is counted, not
 * kept), in its own process group (a new session), killed (the whole group,
 * SIGKILL) when timeout_ms passes or the spawn is cancelled.
 *
 * The callback runs once the child has exited and its output pipe is closed.
 * A background process that keeps the pipe open after the child exited gets
 * TOOL_SPAWN_DRAIN_MS to finish; then its group is killed too, so nothing a
 * tool started outlives the call.
 *
 * Loop thread only.
 */
#ifndef SB_AGENTS_SPAWN_H
#define SB_AGENTS_SPAWN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "agents/safety/sandbox.h"
#include "agents/tool.h"

#define TOOL_SPAWN_DRAIN_MS 2000
/* The PATH of every tool process (skills' requires.bins are looked for
 * on it: workspaces/skills.h). */
#define SPAWN_PATH "/usr/local/bin:/usr/bin:/bin"

struct tool_spawn;

struct tool_spawn_options {
	const char *const *argv; /* argv[0] is looked up in PATH */
	const char *cwd;
	const char *const *env; /* extra "NAME=value" entries, NULL-terminated, or NULL */
	int64_t timeout_ms;     /* > 0 */
	size_t max_output;      /* head bytes kept */
	size_t keep_tail;       /* also keep the last keep_tail bytes (0 = none) */
	/* The sandbox the child runs in (sandbox.h); NULL or mode
	 * SANDBOX_FULL: none. The caller decides: the runner always sets the
	 * agent's policy, so only code that runs no model-chosen command
	 * (tests of this module) leaves it NULL. */
	const struct sandbox_policy *sandbox;
	char *why; /* when not NULL: a sentence on why nothing started */
	size_t why_size;
};

struct tool_spawn_result {
	int exit_code;   /* -1 when killed by a signal */
	int term_signal; /* 0 when it exited */
	bool timed_out;
	bool cancelled;
	const char *output; /* stdout+stderr, up to max_output bytes */
	size_t output_len;
	size_t output_dropped; /* bytes between output and tail, not kept */
	const char *tail;      /* the last bytes after those dropped (keep_tail) */
	size_t tail_len;       /* 0 when everything fitted in output */
	double seconds;
	bool sandboxed; /* it ran under bwrap */
};

/* res is borrowed for the callback's duration. Exactly once. rc: SB_OK when
 * the child exited or was killed by a signal of its own, SB_ERR_TIMEOUT when
 * timeout_ms passed (res->timed_out), SB_ERR_ABORTED when cancelled. */
typedef void (*tool_spawn_cb)(void *ud, int rc, const struct tool_spawn_result *res);

/* Starts the process. opt is borrowed for this call only. SB_OK: cb runs
 * later (never from inside this call) and *out (if not NULL) may be
 * cancelled until then. SB_ERR_NOTFOUND: argv[0] cannot be run, or the sandbox
 * is asked for and bwrap is missing (opt->why says so: never a silent
 * fallback to no sandbox);
 * SB_ERR_INVAL, SB_ERR_IO, SB_ERR_NOMEM: nothing started, cb never runs. */
int tool_spawn(uv_loop_t *loop, const struct tool_spawn_options *opt, tool_spawn_cb cb, void *ud,
               struct tool_spawn **out);

/* Kills the process group; cb runs (rc SB_ERR_ABORTED, cancelled = true)
 * once the child is reaped, which may be after this returns. Only before cb
 * ran. */
void tool_spawn_cancel(struct tool_spawn *sp);

/* Whether a command under policy first needs the ownership pass
 * (sandbox_own): the gateway is root and policy is a sandbox. Any thread. */
bool tool_spawn_needs_own(const struct sandbox_policy *policy);

/* Gives workspace (absolute) to policy's uid (sandbox_own) in a tool job on
 * loop's thread pool (agents/tools/common.h, tool_job_start), so that the
 * walk, however long, never holds the loop; the command starts once done
 * says it is over, with a copy of policy whose owned is set. What the walk
 * reads is copied (workspace and policy are borrowed for this call only).
 * done(ud, rc, content, is_error) runs on the loop thread, never from inside
 * this call: SB_OK with is_error false when the workspace is the sandbox's;
 * is_error with a sentence in content when it cannot be given, the job was
 * cancelled (rc SB_ERR_ABORTED, at once, from inside the cancel) or did not
 * end within timeout_ms and a second more; content is done's to free. *run
 * (if not NULL) cancels until done ran. SB_OK, SB_ERR_NOMEM (done never
 * runs). Loop thread only. */
int tool_spawn_own(uv_loop_t *loop, const char *workspace, const struct sandbox_policy *policy,
                   int64_t timeout_ms, tool_done_cb done, void *ud, struct tool_run **run);

/* Marks every descriptor above stderr close-on-exec in this process, just
 * before a uv_spawn of a child that must inherit nothing else (tool_spawn
 * does it; so does a long-lived MCP server's start). Loop thread only. */
void tool_spawn_cloexec_all(void);

#endif
