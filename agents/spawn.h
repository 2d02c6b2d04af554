/*
 * spawn.h - every process a tool starts goes through tool_spawn.
 *
 * One function, so that the sandbox (bubblewrap, a later layer) wraps every
 * child in one place. The child runs in cwd with a clean environment (only
 * what env lists, plus PATH, HOME=cwd, LANG), stdin from /dev/null, stdout
 * and stderr captured together up to max_output bytes (the rest is counted,
 * not kept), in its own process group, killed (the whole group, SIGKILL)
 * when timeout_ms passes or the spawn is cancelled.
 *
 * Loop thread only.
 */
#ifndef SB_AGENTS_SPAWN_H
#define SB_AGENTS_SPAWN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

struct tool_spawn;

struct tool_spawn_options {
	const char *const *argv; /* argv[0] is looked up in PATH */
	const char *cwd;
	const char *const *env; /* extra "NAME=value" entries, NULL-terminated, or NULL */
	int64_t timeout_ms;
	size_t max_output;
};

struct tool_spawn_result {
	int exit_code;   /* -1 when killed by a signal */
	int term_signal; /* 0 when it exited */
	bool timed_out;
	bool cancelled;
	const char *output; /* stdout+stderr, up to max_output bytes */
	size_t output_len;
	size_t output_dropped; /* bytes beyond max_output */
	double seconds;
};

/* res is borrowed for the callback's duration. Exactly once. */
typedef void (*tool_spawn_cb)(void *ud, int rc, const struct tool_spawn_result *res);

/* Starts the process. SB_OK: cb runs later. Otherwise nothing started. */
int tool_spawn(uv_loop_t *loop, const struct tool_spawn_options *opt, tool_spawn_cb cb, void *ud,
               struct tool_spawn **out);

/* Kills the process group; cb runs (cancelled = true) once the child is
 * reaped, which may be after this returns. */
void tool_spawn_cancel(struct tool_spawn *sp);

#endif
