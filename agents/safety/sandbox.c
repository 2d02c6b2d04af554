/*
 * sandbox.c - the bubblewrap command line, and the probe doctor runs (see
 * sandbox.h).
 */
#include "agents/safety/sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gateway/core/err.h"
#include "gateway/core/fmt.h"

#define SANDBOX_ARGS_MAX 160
#define SANDBOX_PROBE_MS 10000

/* Files that stay unreadable even though the sandbox user maps to the
 * gateway's own uid. */
static const char *const sandbox_secret_files[] = {"/etc/shadow", "/etc/gshadow", NULL};

const char *sandbox_mode_name(enum sandbox_mode m)
{
	switch (m) {
	case SANDBOX_READ_ONLY:
		return "read-only";
	case SANDBOX_WORKSPACE_WRITE:
		return "workspace-write";
	case SANDBOX_FULL:
		return "full";
	}
	return "unknown";
}

static bool sandbox_executable(const char *p)
{
	struct stat st;

	return stat(p, &st) == 0 && S_ISREG(st.st_mode) && access(p, X_OK) == 0;
}

int sandbox_find_bwrap(const struct sandbox_policy *policy, char *out, size_t size)
{
	static const char *const usual[] = {"/usr/bin/bwrap", "/usr/local/bin/bwrap", "/bin/bwrap",
	                                    NULL};
	const char *path = getenv("PATH");
	char cand[4096];

	if (policy && policy->bwrap) {
		if (!sandbox_executable(policy->bwrap))
			return SB_ERR_NOTFOUND;
		snprintf(out, size, "%s", policy->bwrap);
		return SB_OK;
	}
	while (path && *path) {
		const char *e = strchr(path, ':');
		size_t n = e ? (size_t)(e - path) : strlen(path);

		if (n && n < sizeof cand - 8) {
			snprintf(cand, sizeof cand, "%.*s/bwrap", (int)n, path);
			if (sandbox_executable(cand)) {
				snprintf(out, size, "%s", cand);
				return SB_OK;
			}
		}
		path = e ? e + 1 : NULL;
	}
	for (size_t i = 0; usual[i]; i++)
		if (sandbox_executable(usual[i])) {
			snprintf(out, size, "%s", usual[i]);
			return SB_OK;
		}
	return SB_ERR_NOTFOUND;
}

struct sandbox_args {
	char *v[SANDBOX_ARGS_MAX + 1];
	size_t n;
	bool nomem, full;
};

static void sa_add(struct sandbox_args *a, const char *s)
{
	if (a->n >= SANDBOX_ARGS_MAX) {
		a->full = true;
		return;
	}
	if (!(a->v[a->n] = strdup(s)))
		a->nomem = true;
	else
		a->n++;
}

static void sa_add2(struct sandbox_args *a, const char *opt, const char *x)
{
	sa_add(a, opt);
	sa_add(a, x);
}

static void sa_add3(struct sandbox_args *a, const char *opt, const char *x, const char *y)
{
	sa_add(a, opt);
	sa_add(a, x);
	sa_add(a, y);
}

void sandbox_argv_free(char **argv)
{
	if (!argv)
		return;
	for (size_t i = 0; argv[i]; i++)
		free(argv[i]);
	free(argv);
}

int sandbox_argv(const struct sandbox_policy *policy, const char *workspace,
                 const char *const *argv, const char *const *env, char ***out, char *why,
                 size_t why_size)
{
	struct sandbox_args a;
	char bwrap[4096], path[4096], num[32];
	struct stat st;
	char **v;
	int rc;

	*out = NULL;
	if (!policy || policy->mode == SANDBOX_FULL || !workspace || !argv || !argv[0])
		return SB_ERR_INVAL;
	if ((rc = sandbox_find_bwrap(policy, bwrap, sizeof bwrap)) != SB_OK) {
		snprintf(
		    why, why_size,
		    "the sandbox is not available: bubblewrap (bwrap) is not installed, so "
		    "sandboxed tools cannot run (install bubblewrap, or set `sandbox: full` "
		    "for this agent to run tools without a sandbox; see `switchboard doctor`)");
		return rc;
	}
	memset(&a, 0, sizeof a);
	sa_add(&a, bwrap);
	sa_add(&a, "--unshare-all");
	if (policy->network)
		sa_add(&a, "--share-net");
	sa_add(&a, "--die-with-parent");
	sa_add(&a, "--new-session");
	sa_add2(&a, "--cap-drop", "ALL");
	if (geteuid() == 0) {
		snprintf(num, sizeof num, "%d", SANDBOX_NOBODY);
		sa_add2(&a, "--uid", num);
		sa_add2(&a, "--gid", num);
	}
	sa_add3(&a, "--ro-bind", "/", "/");
	sa_add2(&a, "--proc", "/proc");
	sa_add2(&a, "--dev", "/dev");
	sa_add2(&a, "--tmpfs", "/tmp");
	sa_add2(&a, "--tmpfs", "/var/tmp");
	for (size_t i = 0; sandbox_secret_files[i]; i++)
		if (stat(sandbox_secret_files[i], &st) == 0)
			sa_add3(&a, "--ro-bind", "/dev/null", sandbox_secret_files[i]);
	for (size_t i = 0; i < policy->n_hide && i < SANDBOX_HIDE_MAX; i++) {
		const char *h = policy->hide[i];

		/* never hide / or the workspace's own ancestors by accident:
		 * the workspace is bound back below in every case */
		if (h && h[0] == '/' && h[1] && stat(h, &st) == 0 && S_ISDIR(st.st_mode))
			sa_add2(&a, "--tmpfs", h);
	}
	sa_add3(&a, policy->mode == SANDBOX_WORKSPACE_WRITE ? "--bind" : "--ro-bind", workspace,
	        workspace);
	/* A cut path would find no .git and leave the real one writable. */
	if (FMT(path, "%s/.git", workspace) != SB_OK)
		a.full = true;
	else if (policy->mode == SANDBOX_WORKSPACE_WRITE && lstat(path, &st) == 0 &&
	    !S_ISLNK(st.st_mode))
		sa_add3(&a, "--ro-bind", path, path);
	sa_add(&a, "--clearenv");
	for (size_t i = 0; env && env[i]; i++) {
		const char *eq = strchr(env[i], '=');
		char name[256];

		if (!eq || (size_t)(eq - env[i]) >= sizeof name)
			continue;
		snprintf(name, sizeof name, "%.*s", (int)(eq - env[i]), env[i]);
		sa_add3(&a, "--setenv", name, eq + 1);
	}
	sa_add2(&a, "--chdir", workspace);
	sa_add(&a, "--");
	if (policy->memory_bytes > 0) {
		char script[128];

		/* RLIMIT_AS in the child, where the kernel allows it; a shell
		 * that cannot set it carries on (the limit is best effort). */
		snprintf(script, sizeof script, "ulimit -v %lld 2>/dev/null; exec \"$@\"",
		         (long long)(policy->memory_bytes / 1024));
		sa_add(&a, "/bin/sh");
		sa_add(&a, "-c");
		sa_add(&a, script);
		sa_add(&a, "sh");
	}
	for (size_t i = 0; argv[i]; i++)
		sa_add(&a, argv[i]);
	if (a.nomem || a.full) {
		for (size_t i = 0; i < a.n; i++)
			free(a.v[i]);
		snprintf(why, why_size, "%s",
		         a.nomem ? "out of memory" : "the sandboxed command line is too long");
		return a.nomem ? SB_ERR_NOMEM : SB_ERR_INVAL;
	}
	v = calloc(a.n + 1, sizeof *v);
	if (!v) {
		for (size_t i = 0; i < a.n; i++)
			free(a.v[i]);
		return SB_ERR_NOMEM;
	}
	memcpy(v, a.v, a.n * sizeof *v);
	*out = v;
	return SB_OK;
}

const char *sandbox_failure(int exit_code, const char *output, size_t len)
{
	if (exit_code == 1 && output && len >= 7 && strncmp(output, "bwrap: ", 7) == 0)
		return "the sandbox could not start on this host (bubblewrap failed: see its "
		       "message above); sandboxed tools cannot run here until it works — run "
		       "`switchboard doctor`";
	return NULL;
}

int sandbox_probe(const struct sandbox_policy *policy, char *why, size_t why_size)
{
	struct sandbox_policy p;
	const char *argv[] = {"/bin/true", NULL};
	char **v = NULL, *tmp = NULL, out[1024];
	int fds[2] = {-1, -1}, st = 0, rc;
	size_t got = 0;
	pid_t pid;
	struct timespec t0, t1;

	memset(&p, 0, sizeof p);
	if (policy)
		p = *policy;
	p.mode = SANDBOX_WORKSPACE_WRITE;
	tmp = strdup("/tmp/sb-probe-XXXXXX");
	if (!tmp || !mkdtemp(tmp)) {
		snprintf(why, why_size, "cannot create a directory to probe the sandbox in");
		rc = SB_ERR_IO;
		goto out;
	}
	rc = sandbox_argv(&p, tmp, argv, NULL, &v, why, why_size);
	if (rc != SB_OK)
		goto out;
	rc = SB_ERR_IO;
	if (pipe(fds) != 0)
		goto out;
	pid = fork();
	if (pid < 0)
		goto out;
	if (pid == 0) {
		int dn = open("/dev/null", O_RDONLY);

		if (dn >= 0)
			dup2(dn, 0);
		dup2(fds[1], 1);
		dup2(fds[1], 2);
		close(fds[0]);
		close(fds[1]);
		execv(v[0], v);
		_exit(127);
	}
	close(fds[1]);
	fds[1] = -1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		struct pollfd pf = {.fd = fds[0], .events = POLLIN};
		ssize_t n;

		clock_gettime(CLOCK_MONOTONIC, &t1);
		if ((t1.tv_sec - t0.tv_sec) * 1000 > SANDBOX_PROBE_MS) {
			kill(pid, SIGKILL);
			break;
		}
		if (poll(&pf, 1, 200) <= 0)
			continue;
		n = read(fds[0], out + got, sizeof out - 1 - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
		if (got == sizeof out - 1)
			break;
	}
	out[got] = '\0';
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
		rc = SB_OK;
		goto out;
	}
	while (got && (out[got - 1] == '\n' || out[got - 1] == '\r'))
		out[--got] = '\0';
	snprintf(why, why_size,
	         "bubblewrap is installed but cannot build a sandbox here (%s); user namespaces "
	         "may be disabled (kernel.unprivileged_userns_clone, "
	         "user.max_user_namespaces) or blocked by a container or AppArmor",
	         got ? out : "no message");
	rc = SB_ERR_PERM;
out:
	if (fds[0] >= 0)
		close(fds[0]);
	if (fds[1] >= 0)
		close(fds[1]);
	if (tmp) {
		rmdir(tmp);
		free(tmp);
	}
	sandbox_argv_free(v);
	return rc;
}
