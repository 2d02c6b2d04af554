/*
 * sandbox.h - runs tool processes under bubblewrap.
 *
 * tool_spawn (spawn.h) turns every child into
 *
 *   bwrap --unshare-all [--share-net] --die-with-parent --new-session
 *         --cap-drop ALL [--uid 65534 --gid 65534]  (when the gateway is root)
 *         --ro-bind / / --proc /proc --dev /dev --tmpfs /tmp
 *         --tmpfs <gateway home> --tmpfs <user home> ...   (hidden)
 *         --bind|--ro-bind <workspace> <workspace> [--ro-bind <ws>/.git <ws>/.git]
 *         --clearenv --setenv PATH ... --chdir <workspace>
 *         -- /bin/sh -c 'ulimit -v KB; exec "$0" "$@"' argv...
 *
 * Policies: read-only (the workspace read-only too), workspace-write (the
 * workspace read-write, its .git read-only), full (no sandbox at all; only
 * when the agent's config says `sandbox: full`).
 *
 * When bwrap is missing, sandboxed tools are refused with a clear error;
 * there is no silent fallback. `switchboard doctor` runs sandbox_probe to
 * say whether bwrap and user namespaces work on this machine.
 */
#ifndef SB_AGENTS_SANDBOX_H
#define SB_AGENTS_SANDBOX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SANDBOX_HIDE_MAX 8
#define SANDBOX_NOBODY 65534

enum sandbox_mode {
	SANDBOX_READ_ONLY = 0,
	SANDBOX_WORKSPACE_WRITE,
	SANDBOX_FULL, /* no sandbox */
};

struct sandbox_policy {
	enum sandbox_mode mode;
	bool network;         /* keep the host's network */
	int64_t memory_bytes; /* address-space limit (RLIMIT_AS); 0 = none */
	/* Directories the child must not see (the gateway's home, ...);
	 * replaced by empty ones. The workspace is bound back on top. */
	const char *hide[SANDBOX_HIDE_MAX];
	size_t n_hide;
	const char *bwrap; /* the bwrap program; NULL = looked up in PATH */
};

const char *sandbox_mode_name(enum sandbox_mode m);

/* Finds bwrap: policy->bwrap, else the first bwrap in PATH (or the usual
 * places). Writes its path into out. SB_OK or SB_ERR_NOTFOUND. Any thread. */
int sandbox_find_bwrap(const struct sandbox_policy *policy, char *out, size_t size);

/* Builds the bwrap command line for argv (NULL-terminated) run in workspace
 * with env ("NAME=value", NULL-terminated, may be NULL). *out is a
 * NULL-terminated array the caller frees with sandbox_argv_free. mode must
 * not be SANDBOX_FULL. SB_OK, SB_ERR_NOTFOUND (no bwrap: why says so),
 * SB_ERR_INVAL, SB_ERR_NOMEM. Any thread (stat only). */
int sandbox_argv(const struct sandbox_policy *policy, const char *workspace,
                 const char *const *argv, const char *const *env, char ***out, char *why,
                 size_t why_size);

void sandbox_argv_free(char **argv);

/* Whether bwrap can build a sandbox here: runs `bwrap ... true` with the
 * options tool_spawn uses and waits for it (blocking: the CLI, tests, or
 * the thread pool). SB_OK; SB_ERR_NOTFOUND (no bwrap); SB_ERR_PERM (bwrap
 * is there but cannot create namespaces: why has its message). */
int sandbox_probe(const struct sandbox_policy *policy, char *why, size_t why_size);

/* When a sandboxed child failed before the command ran (bwrap's own error,
 * such as "No permissions to creating new namespace"), a sentence saying
 * so; NULL otherwise. output is what the child printed. */
const char *sandbox_failure(int exit_code, const char *output, size_t len);

#endif
