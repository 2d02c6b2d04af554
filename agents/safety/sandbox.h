/*
 * sandbox.h - runs tool processes under bubblewrap.
 *
 * tool_spawn (spawn.h) turns every child into
 *
 *   bwrap --unshare-all --unshare-user --disable-userns [--share-net]
 *         --die-with-parent --new-session --cap-drop ALL --uid 65534 --gid 65534
 *         [--seccomp 5]   (without network: sandbox_seccomp_bpf)
 *         --ro-bind /usr /usr --symlink usr/bin /bin ...   (system directories)
 *         --ro-bind /etc/ld.so.cache /etc/ld.so.cache ...   (a curated /etc)
 *         --ro-bind-data 3 /etc/passwd --ro-bind-data 4 /etc/group
 *         --proc /proc --dev /dev
 *         --tmpfs /tmp --tmpfs /var/tmp --tmpfs /run --tmpfs /var/run --tmpfs /home
 *         --bind|--ro-bind <workspace> <workspace> [--ro-bind <ws>/.git <ws>/.git]
 *         [--tmpfs DIR | --ro-bind /dev/null FILE]   (hidden paths inside the view)
 *         --clearenv --setenv PATH ... --chdir <workspace>
 *         -- /bin/sh -c 'ulimit -v KB; ulimit -u N; exec "$@"' sh argv...
 * When the gateway is root, that bwrap is started through
 *   unshare --mount --propagation private -- /bin/sh -c '<join the pids
 *         cgroup>; mount --rbind <workspace> /sys' ...
 *         setpriv --reuid=U --regid=G --clear-groups -- bwrap ...
 *         --bind /sys <workspace> [--ro-bind /sys/.git <workspace>/.git] ...
 * so that the command is the sandbox's uid U (SANDBOX_UID,
 * security.sandbox_uid) outside its user namespace too, after sandbox_own
 * gave it the workspace; bwrap then runs unprivileged and reaches the
 * workspace at /sys of a mount namespace of the command's own, as U cannot
 * walk the gateway's 0700 home. A gateway that is not root keeps its uid.
 *
 * The view is an allow-list: bwrap starts from an empty root, so nothing of
 * the host exists inside but what is listed (no /run and its sockets, no
 * /var, no /root or /home, nothing of the gateway's home, config, store or
 * secret files wherever they are). Paths the caller hides are covered only
 * where they would appear in that view (inside the workspace, say).
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
#define SANDBOX_FDS_MAX 4
#define SANDBOX_NOBODY 65534
/* The uid and gid a root gateway's commands run as outside their user
 * namespace by default (security.sandbox_uid): reserved by Debian's policy
 * (65000-65533), below nobody, outside systemd's dynamic users
 * (61184-65519 are handed out by hash, so any of them may be taken). */
#define SANDBOX_UID 65533
#define SANDBOX_PROCESSES 256 /* RLIMIT_NPROC of a command by default */

enum sandbox_mode {
	SANDBOX_READ_ONLY = 0,
	SANDBOX_WORKSPACE_WRITE,
	SANDBOX_FULL, /* no sandbox */
};

struct sandbox_policy {
	enum sandbox_mode mode;
	bool network;         /* keep the host's network */
	int64_t memory_bytes; /* address-space limit (RLIMIT_AS); 0 = none */
	int max_processes;    /* RLIMIT_NPROC in the sandbox; 0 = SANDBOX_PROCESSES */
	/* Paths the child must not see (the gateway's home, its config,
	 * store and secret files, ...). Outside the view they are not there
	 * anyway; inside it (under the workspace, say) a directory is
	 * covered by an empty one and a file by /dev/null. A hidden path
	 * that is the workspace or an ancestor of it does not hide it. */
	const char *hide[SANDBOX_HIDE_MAX];
	size_t n_hide;
	/* More of them, borrowed (the config's private paths) */
	const char *const *hide_more;
	size_t n_hide_more;
	const char *bwrap; /* the bwrap program; NULL = looked up in PATH */
	/* Host paths shown read-only at their own place besides the system
	 * directories (an MCP server's program, agents/mcp/mcp.h): absolute;
	 * borrowed. Hidden paths inside them stay hidden; one that would show
	 * a hidden directory holding the workspace (the gateway's home), or
	 * lie in one outside the workspace, fails sandbox_argv (SB_ERR_PERM). */
	const char *const *read_only;
	size_t n_read_only;
	/* When the gateway runs as root: the uid and gid the command runs as
	 * outside its user namespace (0 = SANDBOX_UID); never root, never the
	 * gateway's. A gateway that is not root cannot change uid: its own,
	 * unprivileged, is kept, and these are ignored. */
	unsigned uid, gid;
	/* No pids cgroup even where one could be made: RLIMIT_NPROC alone
	 * limits processes (the tests check that it holds by itself). */
	bool no_cgroup;
	/* The caller has run sandbox_own for this workspace just before (on
	 * a pool thread, the bash tool): sandbox_argv does not again. */
	bool owned;
};

const char *sandbox_mode_name(enum sandbox_mode m);

/* Finds bwrap: policy->bwrap, else the first bwrap in PATH (or the usual
 * places). Writes its path into out. SB_OK or SB_ERR_NOTFOUND. Any thread. */
int sandbox_find_bwrap(const struct sandbox_policy *policy, char *out, size_t size);

/* Descriptors the child must hold when bwrap starts: fd[i] becomes the
 * child's descriptor 3 + i (the command line names them so). Memory files
 * with the sandbox's passwd and group (and its seccomp program); bwrap
 * reads and closes each, so the command inherits none. */
struct sandbox_fds {
	int fd[SANDBOX_FDS_MAX];
	size_t n;
	/* the command's pids cgroup ("" when none could be made): the
	 * caller removes it with sandbox_cgroup_remove once the command and
	 * everything it started are gone */
	char cgroup[512];
};

void sandbox_fds_init(struct sandbox_fds *f);
void sandbox_fds_close(struct sandbox_fds *f); /* closes the parent's copies; NULL ok */

/* Builds the bwrap command line for argv (NULL-terminated) run in workspace
 * (absolute) with env ("NAME=value", NULL-terminated, may be NULL). *out is
 * a NULL-terminated array the caller frees with sandbox_argv_free; fds (the
 * caller's, closed with sandbox_fds_close once the child started) holds
 * what the child must inherit. mode must not be SANDBOX_FULL. SB_OK,
 * SB_ERR_NOTFOUND (no bwrap, or no workspace: why says so), SB_ERR_PERM (a
 * read_only path the view may not show: why says so), SB_ERR_INVAL,
 * SB_ERR_IO, SB_ERR_NOMEM; on error fds is empty. When the gateway is
 * root, first gives the workspace to the sandbox's uid (sandbox_own).
 * Any thread. */
int sandbox_argv(const struct sandbox_policy *policy, const char *workspace,
                 const char *const *argv, const char *const *env, char ***out,
                 struct sandbox_fds *fds, char *why, size_t why_size);

void sandbox_argv_free(char **argv);

/* Gives the workspace (absolute) to uid:gid, as a root gateway's commands
 * run as that uid and must read and write it: every directory and file
 * beneath it not owned so is chowned, except the top-level .git (commands
 * see it read-only; its objects are world-readable), the paths policy
 * hides (by device and inode), what lies on another filesystem, and
 * regular files with more than one link (one may be a file outside). The
 * walk opens each directory beneath its parent's fd without following
 * links, so a command swapping a directory for a symlink meanwhile only
 * stops it there; at most SANDBOX_OWN_DEPTH directories deep. Its counts
 * into *seen and *changed (either may be NULL). SB_OK, SB_ERR_NOTFOUND
 * (no workspace), SB_ERR_NOMEM. Blocking; any thread. */
#define SANDBOX_OWN_DEPTH 256
int sandbox_own(const struct sandbox_policy *policy, const char *workspace, unsigned uid,
                unsigned gid, size_t *seen, size_t *changed);

/* The uid and gid a root gateway's commands run as under policy (its own,
 * or SANDBOX_UID). */
unsigned sandbox_uid_of(const struct sandbox_policy *policy);
unsigned sandbox_gid_of(const struct sandbox_policy *policy);

#ifdef SB_CRASH_POINTS
/* Tests only: fn runs at the start of every sandbox_own (NULL: none). And
 * while the file named by the environment's SB_TEST_OWN_HOLD exists, every
 * sandbox_own waits at its start, after appending a line to that name with
 * ".held" added (a gateway's test holds its walks so). */
void sandbox_test_on_own(void (*fn)(void));
#endif

/* Makes a pids cgroup below this process's own (cgroup v1's pids
 * hierarchy, or v2 where the pids controller is enabled for children) with
 * pids.max = max_processes; its path into out. SB_OK; SB_ERR_NOTFOUND when
 * none can be made here (no pids controller, no right to write it). */
int sandbox_cgroup_new(int max_processes, char *out, size_t size);

/* Removes a cgroup made by sandbox_cgroup_new ("" or NULL: nothing). SB_OK;
 * SB_ERR_AGAIN while processes are still in it; SB_ERR_IO. */
int sandbox_cgroup_remove(const char *path);

/* The seccomp program of a sandbox without network, as BPF for bwrap
 * --seccomp (malloc'd into *out): socket and socketpair of any family but
 * AF_UNIX fail with EAFNOSUPPORT; connect, and sendto with an address,
 * with EACCES (a filter cannot read the address, and the only sockets left
 * are unix ones); unix sockets that send by address (SOCK_DGRAM, SOCK_RAW,
 * SOCK_SEQPACKET from socket, datagram ones from socketpair too) with
 * EACCES; io_uring with ENOSYS. SB_OK, SB_ERR_NOMEM, SB_ERR_IO. Any
 * thread. */
int sandbox_seccomp_bpf(char **out, size_t *len);

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
