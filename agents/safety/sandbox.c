/*
 * sandbox.c - the bubblewrap command line, and the probe doctor runs (see
 * sandbox.h).
 */
#include "agents/safety/sandbox.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <seccomp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gateway/core/err.h"
#include "gateway/core/fmt.h"

#define SANDBOX_ARGS_MAX 400
#define SANDBOX_PROBE_MS 10000
/* Where a root gateway's workspace is bound, in a mount namespace of the
 * command's own, for bwrap to find as the sandbox's uid */
#define SANDBOX_WS_MOUNT "/sys"

/* The system part of the view: bound read-only where it is a directory,
 * recreated where it is a symlink (merged /usr: /bin -> usr/bin). */
static const char *const sandbox_system_dirs[] = {"/usr",   "/bin",   "/sbin",  "/lib",
                                                  "/lib32", "/lib64", "/libx32", NULL};

/* The curated /etc: what the dynamic loader, a shell, the C library's name
 * services, TLS clients and the common tools read. Nothing with a secret in
 * it (no shadow, no ssl/private, no ssh, no pip/npm credentials, no
 * machine-id); passwd and group are written for the sandbox's own users. */
static const char *const sandbox_etc[] = {
    "/etc/ld.so.cache",   "/etc/ld.so.conf",    "/etc/ld.so.conf.d",   "/etc/nsswitch.conf",
    "/etc/localtime",     "/etc/timezone",      "/etc/hosts",          "/etc/host.conf",
    "/etc/gai.conf",      "/etc/services",      "/etc/protocols",      "/etc/networks",
    "/etc/mime.types",    "/etc/magic",         "/etc/magic.mime",     "/etc/inputrc",
    "/etc/gitconfig",     "/etc/shells",        "/etc/locale.alias",   "/etc/os-release",
    "/etc/debian_version", "/etc/alternatives", "/etc/ssl/certs",      "/etc/ssl/openssl.cnf",
    "/etc/ca-certificates", "/etc/ca-certificates.conf", "/etc/perl",  "/etc/terminfo",
    "/etc/bash.bashrc",   NULL};

/* Only with the network: where to find a name server. */
static const char *const sandbox_etc_net[] = {"/etc/resolv.conf", NULL};

/* Empty and private in every sandbox. */
static const char *const sandbox_tmpfs[] = {"/tmp", "/var/tmp", "/run", "/var/run", "/home",
                                            NULL};

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

void sandbox_fds_init(struct sandbox_fds *f)
{
	for (size_t i = 0; i < SANDBOX_FDS_MAX; i++)
		f->fd[i] = -1;
	f->n = 0;
	f->cgroup[0] = '\0';
}

void sandbox_fds_close(struct sandbox_fds *f)
{
	if (!f)
		return;
	for (size_t i = 0; i < f->n; i++)
		if (f->fd[i] >= 0)
			close(f->fd[i]);
	for (size_t i = 0; i < SANDBOX_FDS_MAX; i++)
		f->fd[i] = -1;
	f->n = 0;
}

/* A sealed-in-place memory file holding len bytes of data, at offset 0, for
 * bwrap to read (--ro-bind-data, --seccomp). Its number in the child is
 * 3 + its index in f, written into num. */
static int sandbox_fds_add(struct sandbox_fds *f, const void *data, size_t len, char *num,
                           size_t num_size)
{
	const char *p = data;
	int fd;

	if (f->n == SANDBOX_FDS_MAX)
		return SB_ERR_INVAL;
	fd = memfd_create("switchboard-sandbox", MFD_CLOEXEC);
	if (fd < 0)
		return SB_ERR_IO;
	while (len) {
		ssize_t w = write(fd, p, len);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			close(fd);
			return SB_ERR_IO;
		}
		p += w;
		len -= (size_t)w;
	}
	if (lseek(fd, 0, SEEK_SET) != 0) {
		close(fd);
		return SB_ERR_IO;
	}
	f->fd[f->n] = fd;
	snprintf(num, num_size, "%zu", 3 + f->n);
	f->n++;
	return SB_OK;
}

/* What the sandbox shows of the host: each bound source (resolved) and
 * where it appears inside. A hidden path is covered only where it falls
 * under one of them; elsewhere it is not in the view at all. */
#define SANDBOX_VIEW_MAX 64

struct sandbox_view {
	char *real[SANDBOX_VIEW_MAX];
	char *dst[SANDBOX_VIEW_MAX];
	size_t n;
	bool nomem, full;
};

static void view_add(struct sandbox_view *v, const char *src, const char *dst)
{
	char *r;

	if (v->n == SANDBOX_VIEW_MAX) {
		v->full = true;
		return;
	}
	r = realpath(src, NULL);
	if (!r) {
		if (errno == ENOMEM)
			v->nomem = true;
		return;
	}
	v->real[v->n] = r;
	if (!(v->dst[v->n] = strdup(dst))) {
		free(r);
		v->nomem = true;
		return;
	}
	v->n++;
}

static void view_free(struct sandbox_view *v)
{
	for (size_t i = 0; i < v->n; i++) {
		free(v->real[i]);
		free(v->dst[i]);
	}
	v->n = 0;
}

/* Whether path is dir or lies beneath it; *rest is what follows dir. */
static bool path_under(const char *path, const char *dir, const char **rest)
{
	size_t n = strlen(dir);

	if (n == 1 && dir[0] == '/') {
		*rest = path;
		return true;
	}
	if (strncmp(path, dir, n) != 0 || (path[n] != '\0' && path[n] != '/'))
		return false;
	*rest = path + n;
	return true;
}

/* Binds a system path into the view as it is on the host: a directory or
 * file read-only, a symlink as the same symlink (merged /usr). Missing:
 * nothing. */
static void sandbox_bind_system(struct sandbox_args *a, struct sandbox_view *v, const char *p)
{
	struct stat st;
	char target[4096];
	ssize_t n;

	if (lstat(p, &st) != 0)
		return;
	if (S_ISLNK(st.st_mode) && strncmp(p, "/etc/", 5) != 0) {
		n = readlink(p, target, sizeof target - 1);
		if (n <= 0)
			return;
		target[n] = '\0';
		sa_add3(a, "--symlink", target, p);
		return;
	}
	/* /etc/localtime and friends are symlinks into /usr: bind what they
	 * name, at their own place */
	if (stat(p, &st) != 0 || !(S_ISDIR(st.st_mode) || S_ISREG(st.st_mode)))
		return;
	sa_add3(a, "--ro-bind", p, p);
	view_add(v, p, p);
}

/* passwd and group for the users a command can meet: root (who owns the
 * system files), the sandbox's own user, nobody. */
static int sandbox_user_db(struct sandbox_args *a, struct sandbox_fds *fds, unsigned uid,
                           unsigned gid, const char *workspace)
{
	char passwd[1024], group[512], num[16];
	const char *home = strpbrk(workspace, ":\n") ? "/" : workspace;
	int rc;

	snprintf(passwd, sizeof passwd,
	         "root:x:0:0:root:/root:/usr/sbin/nologin\n"
	         "nobody:x:%u:%u:nobody:%.600s:/bin/sh\n",
	         uid, gid, home);
	snprintf(group, sizeof group, "root:x:0:\nnogroup:x:%u:\n", gid);
	if ((rc = sandbox_fds_add(fds, passwd, strlen(passwd), num, sizeof num)) != SB_OK)
		return rc;
	sa_add3(a, "--ro-bind-data", num, "/etc/passwd");
	if ((rc = sandbox_fds_add(fds, group, strlen(group), num, sizeof num)) != SB_OK)
		return rc;
	sa_add3(a, "--ro-bind-data", num, "/etc/group");
	return SB_OK;
}

/* Covers a hidden path where the view shows it: a directory with an empty
 * tmpfs, anything else with /dev/null. A hidden path that is the workspace
 * or one of its ancestors is left: the workspace was asked for (the
 * private files inside it are listed on their own). */
static void sandbox_cover_one(struct sandbox_args *a, const struct sandbox_view *v, const char *h,
                              const char *ws_real)
{
	const char *rest;
	char *real, target[8192];
	struct stat st;

	if (!h || h[0] != '/' || lstat(h, &st) != 0)
		return;
	real = realpath(h, NULL);
	if (!real) {
		if (errno == ENOMEM)
			a->nomem = true;
		return;
	}
	if (stat(real, &st) != 0 || path_under(ws_real, real, &rest)) {
		free(real);
		return;
	}
	for (size_t j = 0; j < v->n; j++) {
		if (!path_under(real, v->real[j], &rest))
			continue;
		if (fmt(target, sizeof target, "%s%s", v->dst[j], rest) != SB_OK) {
			a->full = true;
			break;
		}
		if (S_ISDIR(st.st_mode))
			sa_add2(a, "--tmpfs", target);
		else
			sa_add3(a, "--ro-bind", "/dev/null", target);
	}
	free(real);
}

/* A read-only path must not show what the cover cannot hide: a hidden
 * directory that holds the workspace (the gateway's home, say) is left in
 * the view for the workspace's sake, so a read-only path that holds it, or
 * lies in it outside the workspace (its other agents' transcripts), would
 * show the rest of it. SB_OK, or SB_ERR_PERM with why. */
static int sandbox_read_only_one(const char *ro_real, const char *h, const char *ws_real,
                                 const char *ro, char *why, size_t why_size)
{
	const char *rest;
	char *real;
	int rc = SB_OK;

	if (!h || h[0] != '/' || !(real = realpath(h, NULL)))
		return SB_OK;
	if (path_under(ws_real, real, &rest) &&
	    (path_under(real, ro_real, &rest) ||
	     (path_under(ro_real, real, &rest) && !path_under(ro_real, ws_real, &rest)))) {
		snprintf(why, why_size,
		         "the read-only path %s would show %s, which the sandbox hides: choose a "
		         "directory outside it",
		         ro, real);
		rc = SB_ERR_PERM;
	}
	free(real);
	return rc;
}

static int sandbox_read_only_ok(const struct sandbox_policy *policy, const char *ro,
                                const char *ws_real, char *why, size_t why_size)
{
	char *ro_real = realpath(ro, NULL);
	int rc = SB_OK;

	if (!ro_real)
		return errno == ENOMEM ? SB_ERR_NOMEM : SB_OK;
	for (size_t i = 0; rc == SB_OK && i < policy->n_hide && i < SANDBOX_HIDE_MAX; i++)
		rc = sandbox_read_only_one(ro_real, policy->hide[i], ws_real, ro, why, why_size);
	for (size_t i = 0; rc == SB_OK && policy->hide_more && i < policy->n_hide_more; i++)
		rc = sandbox_read_only_one(ro_real, policy->hide_more[i], ws_real, ro, why,
		                           why_size);
	free(ro_real);
	return rc;
}

static void sandbox_cover(struct sandbox_args *a, const struct sandbox_view *v,
                          const struct sandbox_policy *policy, const char *ws_real)
{
	for (size_t i = 0; i < policy->n_hide && i < SANDBOX_HIDE_MAX; i++)
		sandbox_cover_one(a, v, policy->hide[i], ws_real);
	for (size_t i = 0; policy->hide_more && i < policy->n_hide_more; i++)
		sandbox_cover_one(a, v, policy->hide_more[i], ws_real);
}

/* The directory of this process's cgroup in the pids hierarchy, where
 * child cgroups with a pids.max can be made: cgroup v1's pids controller,
 * or cgroup v2 where the pids controller is enabled for children. SB_OK or
 * SB_ERR_NOTFOUND. */
static int sandbox_pids_base(char *out, size_t size)
{
	char line[4096], mnt[2048] = "", rel[2048] = "", path[4096 + 64];
	bool v2 = false;
	FILE *f;

	/* the mount: a v1 hierarchy with the pids option, else cgroup2 */
	if (!(f = fopen("/proc/self/mountinfo", "re")))
		return SB_ERR_NOTFOUND;
	while (fgets(line, sizeof line, f)) {
		char m[2048], *sep = strstr(line, " - ");
		const char *type, *opts;

		if (!sep || sscanf(line, "%*s %*s %*s %*s %2047s", m) != 1)
			continue;
		type = sep + 3;
		opts = strchr(type, ' ') ? strchr(strchr(type, ' ') + 1, ' ') : NULL;
		if (strncmp(type, "cgroup ", 7) == 0 && opts &&
		    (strstr(opts, ",pids") || strstr(opts, " pids"))) {
			snprintf(mnt, sizeof mnt, "%s", m);
			v2 = false;
			break;
		}
		if (strncmp(type, "cgroup2 ", 8) == 0 && !mnt[0]) {
			snprintf(mnt, sizeof mnt, "%s", m);
			v2 = true;
		}
	}
	fclose(f);
	if (!mnt[0] || !(f = fopen("/proc/self/cgroup", "re")))
		return SB_ERR_NOTFOUND;
	while (fgets(line, sizeof line, f)) {
		char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;

		if (!c2)
			continue;
		*c2 = '\0';
		if ((v2 && strcmp(c1 + 1, "") == 0) || (!v2 && strstr(c1 + 1, "pids"))) {
			c2[1 + strcspn(c2 + 1, "\n")] = '\0';
			snprintf(rel, sizeof rel, "%s", c2 + 1);
			break;
		}
	}
	fclose(f);
	if (!rel[0] || fmt(out, size, "%s%s", mnt, strcmp(rel, "/") ? rel : "") != SB_OK)
		return SB_ERR_NOTFOUND;
	if (v2) {
		/* children get the pids controller only where it is enabled */
		char ctl[256] = "";
		FILE *c;

		if (fmt(path, sizeof path, "%s/cgroup.subtree_control", out) != SB_OK ||
		    !(c = fopen(path, "re")))
			return SB_ERR_NOTFOUND;
		if (!fgets(ctl, sizeof ctl, c))
			ctl[0] = '\0';
		fclose(c);
		if (!strstr(ctl, "pids"))
			return SB_ERR_NOTFOUND;
	}
	return SB_OK;
}

/* Removes the empty cgroups that gateways no longer running left behind
 * (one that exits right after its last command cannot wait for the kernel
 * to empty it). A cgroup of a live process is never touched. */
static void sandbox_cgroup_sweep(const char *base)
{
	static const char prefix[] = "switchboard-sandbox-";
	DIR *d = opendir(base);
	struct dirent *de;
	char path[4096 + 300];

	if (!d)
		return;
	while ((de = readdir(d))) {
		char *end;
		long pid;

		if (strncmp(de->d_name, prefix, sizeof prefix - 1) != 0)
			continue;
		pid = strtol(de->d_name + sizeof prefix - 1, &end, 10);
		if (pid <= 0 || *end != '-' || pid == (long)getpid() ||
		    kill((pid_t)pid, 0) == 0 || errno != ESRCH)
			continue;
		if (fmt(path, sizeof path, "%s/%s", base, de->d_name) == SB_OK)
			(void)rmdir(path);
	}
	closedir(d);
}

int sandbox_cgroup_new(int max_processes, char *out, size_t size)
{
	static const char *const files[] = {"pids.max", NULL};
	char base[4096], path[4096 + 64], num[32];
	int rc, fd;

	out[0] = '\0';
	if ((rc = sandbox_pids_base(base, sizeof base)) != SB_OK)
		return rc;
	sandbox_cgroup_sweep(base);
	/* unique per command: pid, time, a counter of this process */
	for (unsigned tries = 0; tries < 8; tries++) {
		struct timespec ts;

		clock_gettime(CLOCK_MONOTONIC, &ts);
		if (fmt(out, size, "%s/switchboard-sandbox-%ld-%lld%09ld", base, (long)getpid(),
		        (long long)ts.tv_sec, ts.tv_nsec) != SB_OK)
			return SB_ERR_NOTFOUND;
		if (mkdir(out, 0700) == 0)
			break;
		if (errno != EEXIST) {
			out[0] = '\0';
			return SB_ERR_NOTFOUND;
		}
	}
	snprintf(num, sizeof num, "%d\n", max_processes);
	for (size_t i = 0; files[i]; i++) {
		ssize_t w;

		if (fmt(path, sizeof path, "%s/%s", out, files[i]) != SB_OK ||
		    (fd = open(path, O_WRONLY | O_CLOEXEC)) < 0) {
			rmdir(out);
			out[0] = '\0';
			return SB_ERR_NOTFOUND;
		}
		w = write(fd, num, strlen(num));
		close(fd);
		if (w != (ssize_t)strlen(num)) {
			rmdir(out);
			out[0] = '\0';
			return SB_ERR_NOTFOUND;
		}
	}
	return SB_OK;
}

int sandbox_cgroup_remove(const char *path)
{
	if (!path || !path[0])
		return SB_OK;
	if (rmdir(path) == 0 || errno == ENOENT)
		return SB_OK;
	return errno == EBUSY ? SB_ERR_AGAIN : SB_ERR_IO;
}

/* A rule refusing a unix socket of one type (EACCES), its flags masked out
 * (the kernel's SOCK_TYPE_MASK). */
static int sock_type_rule(scmp_filter_ctx ctx, int syscall, int type)
{
	return seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EACCES), syscall, 2,
	                        SCMP_A0(SCMP_CMP_EQ, AF_UNIX),
	                        SCMP_A1(SCMP_CMP_MASKED_EQ, 0xf, (scmp_datum_t)type));
}

int sandbox_seccomp_bpf(char **out, size_t *len)
{
	scmp_filter_ctx ctx;
	int fd = -1, rc = SB_ERR_NOMEM;
	struct stat st;
	char *bpf = NULL;

	*out = NULL;
	*len = 0;
	ctx = seccomp_init(SCMP_ACT_ALLOW);
	if (!ctx)
		return SB_ERR_NOMEM;
	/* The x86 and x32 ABIs of an x86-64 kernel (socketcall(2), a second
	 * syscall table) are not in this filter: a process using them is
	 * killed (libseccomp's default for a foreign architecture). */
	if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socket), 1,
	                     SCMP_A0(SCMP_CMP_NE, AF_UNIX)) != 0 ||
	    seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socketpair), 1,
	                     SCMP_A0(SCMP_CMP_NE, AF_UNIX)) != 0 ||
	    /* Only unix sockets are left, and a filter cannot read the address:
	     * no connect at all (abstract names are the sandbox's own network
	     * namespace's anyway), no sendto with an address. */
	    seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(connect), 0) != 0 ||
	    seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(sendto), 1,
	                     SCMP_A4(SCMP_CMP_NE, 0)) != 0 ||
	    /* A unix datagram socket needs no connect: sendmsg with an address
	     * (behind a pointer, out of the filter's sight) reaches any
	     * datagram socket in view, a host's /dev/log-style one. So no unix
	     * socket of a type that sends by address: SOCK_DGRAM, SOCK_RAW
	     * (which the kernel makes a datagram socket) and SOCK_SEQPACKET
	     * (harmless unconnected, refused to keep the rule simple), from
	     * socket() or socketpair() alike; a datagram pair's sendmsg takes an
	     * address too. The type's low bits are compared
	     * (SOCK_TYPE_MASK), so SOCK_NONBLOCK and SOCK_CLOEXEC do not
	     * hide it. Stream sockets and pairs (and seqpacket pairs, whose
	     * sendmsg ignores an address) stay. */
	    sock_type_rule(ctx, SCMP_SYS(socket), SOCK_DGRAM) != 0 ||
	    sock_type_rule(ctx, SCMP_SYS(socket), SOCK_RAW) != 0 ||
	    sock_type_rule(ctx, SCMP_SYS(socket), SOCK_SEQPACKET) != 0 ||
	    sock_type_rule(ctx, SCMP_SYS(socketpair), SOCK_DGRAM) != 0 ||
	    sock_type_rule(ctx, SCMP_SYS(socketpair), SOCK_RAW) != 0 ||
	    /* io_uring makes sockets and connects without these calls */
	    seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(io_uring_setup), 0) != 0 ||
	    seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(io_uring_enter), 0) != 0 ||
	    seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(io_uring_register), 0) != 0)
		goto out;
	rc = SB_ERR_IO;
	fd = memfd_create("switchboard-seccomp", MFD_CLOEXEC);
	if (fd < 0 || seccomp_export_bpf(ctx, fd) != 0 || fstat(fd, &st) != 0 || st.st_size <= 0 ||
	    lseek(fd, 0, SEEK_SET) != 0)
		goto out;
	rc = SB_ERR_NOMEM;
	bpf = malloc((size_t)st.st_size);
	if (!bpf)
		goto out;
	rc = SB_ERR_IO;
	if (read(fd, bpf, (size_t)st.st_size) != (ssize_t)st.st_size)
		goto out;
	*out = bpf;
	*len = (size_t)st.st_size;
	bpf = NULL;
	rc = SB_OK;
out:
	free(bpf);
	if (fd >= 0)
		close(fd);
	seccomp_release(ctx);
	return rc;
}

/* ---- a root gateway's commands run as the sandbox's uid ---- */

struct own_walk {
	uid_t uid;
	gid_t gid;
	dev_t dev;
	struct stat *skip; /* the hidden paths */
	size_t n_skip, seen, changed;
};

static bool own_skipped(const struct own_walk *w, const struct stat *st)
{
	for (size_t i = 0; i < w->n_skip; i++)
		if (w->skip[i].st_dev == st->st_dev && w->skip[i].st_ino == st->st_ino)
			return true;
	return false;
}

static void own_skip_add(struct own_walk *w, const char *h)
{
	if (h && h[0] == '/' && stat(h, &w->skip[w->n_skip]) == 0)
		w->n_skip++;
}

/* One entry that is not a directory: opened as a path (the link itself
 * for a symlink), so that what is chowned is what was looked at. */
static void own_entry(struct own_walk *w, int dfd, const char *name)
{
	struct stat st;
	int fd = openat(dfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);

	if (fd < 0)
		return;
	if (fstat(fd, &st) == 0 && st.st_dev == w->dev && !own_skipped(w, &st) &&
	    !(S_ISREG(st.st_mode) && st.st_nlink > 1) &&
	    (st.st_uid != w->uid || st.st_gid != w->gid) &&
	    fchownat(fd, "", w->uid, w->gid, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0)
		w->changed++;
	close(fd);
}

static int own_dir(struct own_walk *w, int dfd, int depth)
{
	int dup = fcntl(dfd, F_DUPFD_CLOEXEC, 0);
	struct dirent *de;
	DIR *d;

	if (dup < 0 || !(d = fdopendir(dup))) {
		if (dup >= 0)
			close(dup);
		return errno == ENOMEM ? SB_ERR_NOMEM : SB_OK;
	}
	while ((de = readdir(d))) {
		const char *name = de->d_name;
		struct stat st, st2;
		int fd;

		if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0 ||
		    (depth == 0 && strcmp(name, ".git") == 0))
			continue;
		w->seen++;
		if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 || st.st_dev != w->dev ||
		    own_skipped(w, &st))
			continue;
		if (!S_ISDIR(st.st_mode)) {
			if (st.st_uid != w->uid || st.st_gid != w->gid)
				own_entry(w, dfd, name);
			continue;
		}
		if (depth + 1 >= SANDBOX_OWN_DEPTH)
			continue;
		fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			continue;
		if (fstat(fd, &st2) == 0 && st2.st_dev == st.st_dev && st2.st_ino == st.st_ino) {
			if ((st2.st_uid != w->uid || st2.st_gid != w->gid) &&
			    fchown(fd, w->uid, w->gid) == 0)
				w->changed++;
			if (own_dir(w, fd, depth + 1) == SB_ERR_NOMEM) {
				close(fd);
				closedir(d);
				return SB_ERR_NOMEM;
			}
		}
		close(fd);
	}
	closedir(d);
	return SB_OK;
}

#ifdef SB_CRASH_POINTS
static void (*sandbox_own_hook)(void);

void sandbox_test_on_own(void (*fn)(void))
{
	sandbox_own_hook = fn;
}

/* Tests of the gateway, a process of its own (SB_TEST_OWN_HOLD, see
 * sandbox.h): the walk waits while the file is there, after a line in
 * "<file>.held" says it does. */
static void sandbox_own_hold(void)
{
	const char *hold = getenv("SB_TEST_OWN_HOLD");
	char held[PATH_MAX];
	int fd;

	if (!hold || !*hold || access(hold, F_OK) != 0 ||
	    fmt(held, sizeof held, "%s.held", hold) != SB_OK)
		return;
	fd = open(held, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	if (fd >= 0) {
		ssize_t w = write(fd, "held\n", 5);

		(void)w;
		close(fd);
	}
	while (access(hold, F_OK) == 0)
		usleep(10000);
}
#endif

unsigned sandbox_uid_of(const struct sandbox_policy *policy)
{
	return policy && policy->uid ? policy->uid : SANDBOX_UID;
}

unsigned sandbox_gid_of(const struct sandbox_policy *policy)
{
	return policy && policy->gid ? policy->gid : SANDBOX_UID;
}

int sandbox_own(const struct sandbox_policy *policy, const char *workspace, unsigned uid,
                unsigned gid, size_t *seen, size_t *changed)
{
	struct own_walk w;
	struct stat st;
	size_t n = SANDBOX_HIDE_MAX + (policy ? policy->n_hide_more : 0);
	int fd, rc;

#ifdef SB_CRASH_POINTS
	if (sandbox_own_hook)
		sandbox_own_hook();
	sandbox_own_hold();
#endif
	memset(&w, 0, sizeof w);
	w.uid = (uid_t)uid;
	w.gid = (gid_t)gid;
	if (!(w.skip = calloc(n ? n : 1, sizeof *w.skip)))
		return SB_ERR_NOMEM;
	for (size_t i = 0; policy && i < policy->n_hide && i < SANDBOX_HIDE_MAX; i++)
		own_skip_add(&w, policy->hide[i]);
	for (size_t i = 0; policy && policy->hide_more && i < policy->n_hide_more; i++)
		own_skip_add(&w, policy->hide_more[i]);
	/* The workspace is a real path: a symlink there now was put in its
	 * place since (while the walk waited for the pool, say), and what it
	 * points to is not the workspace. */
	fd = open(workspace, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) != 0) {
		rc = SB_ERR_NOTFOUND;
		goto out;
	}
	w.dev = st.st_dev;
	/* The workspace directory itself stays the gateway's, and the
	 * sandbox's group may write in it: git (the operator's, as root)
	 * refuses a work tree whose top another uid owns, and looks at no
	 * other file's owner. */
	if (st.st_gid != w.gid && fchown(fd, (uid_t)-1, w.gid) == 0)
		w.changed++;
	if ((st.st_mode & 0070) != 0070 && fchmod(fd, (st.st_mode & 07777) | 0070) == 0)
		w.changed++;
	rc = own_dir(&w, fd, 0);
out:
	if (fd >= 0)
		close(fd);
	free(w.skip);
	if (seen)
		*seen = w.seen;
	if (changed)
		*changed = w.changed;
	return rc;
}

/* A program of the base system (util-linux's setpriv and unshare, mount)
 * at its usual place. */
static int sandbox_find_system(const char *name, char *out, size_t size)
{
	static const char *const dirs[] = {"/usr/bin", "/bin", "/usr/sbin", "/sbin", NULL};

	for (size_t i = 0; dirs[i]; i++)
		if (fmt(out, size, "%s/%s", dirs[i], name) == SB_OK && sandbox_executable(out))
			return SB_OK;
	return SB_ERR_NOTFOUND;
}

int sandbox_argv(const struct sandbox_policy *policy, const char *workspace,
                 const char *const *argv, const char *const *env, char ***out,
                 struct sandbox_fds *fds, char *why, size_t why_size)
{
	struct sandbox_args a;
	struct sandbox_view view;
	char bwrap[4096], path[4096], num[32], setpriv[64], unshare[64], mount[64];
	char *ws_real = NULL;
	unsigned uid, gid, box_uid = 0, box_gid = 0;
	bool as_root;
	struct stat st;
	char **v;
	int rc;

	*out = NULL;
	sandbox_fds_init(fds);
	if (!policy || policy->mode == SANDBOX_FULL || !workspace || workspace[0] != '/' ||
	    !argv || !argv[0])
		return SB_ERR_INVAL;
	if ((rc = sandbox_find_bwrap(policy, bwrap, sizeof bwrap)) != SB_OK) {
		snprintf(
		    why, why_size,
		    "the sandbox is not available: bubblewrap (bwrap) is not installed, so "
		    "sandboxed tools cannot run (install bubblewrap, or set `sandbox: full` "
		    "for this agent to run tools without a sandbox; see `switchboard doctor`)");
		return rc;
	}
	if (!(ws_real = realpath(workspace, NULL))) {
		snprintf(why, why_size, "the workspace %s cannot be opened: %s", workspace,
		         strerror(errno));
		return errno == ENOMEM ? SB_ERR_NOMEM : SB_ERR_NOTFOUND;
	}
	memset(&a, 0, sizeof a);
	memset(&view, 0, sizeof view);
	as_root = geteuid() == 0;
	if (as_root) {
		/* A root gateway's command runs as the sandbox's uid outside its
		 * user namespace too, and must read and write the workspace as
		 * that uid (see docs/security.md). */
		box_uid = sandbox_uid_of(policy);
		box_gid = sandbox_gid_of(policy);
		if (sandbox_find_system("setpriv", setpriv, sizeof setpriv) != SB_OK ||
		    sandbox_find_system("unshare", unshare, sizeof unshare) != SB_OK ||
		    sandbox_find_system("mount", mount, sizeof mount) != SB_OK) {
			snprintf(why, why_size,
			         "the sandbox cannot run commands as its own uid: util-linux's "
			         "setpriv and unshare, and mount, must be installed");
			rc = SB_ERR_NOTFOUND;
			goto fail;
		}
		if (!policy->owned &&
		    (rc = sandbox_own(policy, ws_real, box_uid, box_gid, NULL, NULL)) != SB_OK) {
			snprintf(why, why_size, "the workspace %s cannot be given to the sandbox",
			         workspace);
			goto fail;
		}
	}
	/* The process limit that holds whatever uid the sandbox maps to (the
	 * kernel does not apply RLIMIT_NPROC to root's uid): a pids cgroup of
	 * its own, joined by a shell outside before it becomes bwrap, so that
	 * nothing the command forks escapes it. Where no pids cgroup can be
	 * made, RLIMIT_NPROC alone (below), which holds for a root gateway
	 * too since its commands are the sandbox's uid. */
	if (!policy->no_cgroup &&
	    sandbox_cgroup_new(policy->max_processes > 0 ? policy->max_processes
	                                                 : SANDBOX_PROCESSES,
	                       fds->cgroup, sizeof fds->cgroup) != SB_OK)
		fds->cgroup[0] = '\0';
	if (as_root) {
		/* Root joins the cgroup, then, in a mount namespace of its own,
		 * binds the workspace over /sys (never in the view), where the
		 * sandbox's uid reaches it without walking the gateway's 0700
		 * home (bwrap resolves every source path as the uid it runs
		 * as); then drops to that uid, with no supplementary groups and
		 * no capabilities, and becomes bwrap. */
		sa_add(&a, unshare);
		sa_add(&a, "--mount");
		sa_add2(&a, "--propagation", "private");
		sa_add(&a, "--");
		sa_add(&a, "/bin/sh");
		sa_add(&a, "-c");
		sa_add(&a, "{ [ -z \"$1\" ] || echo $$ > \"$1/cgroup.procs\"; } || exit 126; "
		           "\"$2\" --rbind -- \"$0\" " SANDBOX_WS_MOUNT " || exit 126; "
		           "shift 2; exec \"$@\"");
		sa_add(&a, ws_real);
		sa_add(&a, fds->cgroup);
		sa_add(&a, mount);
		sa_add(&a, setpriv);
		snprintf(num, sizeof num, "--reuid=%u", box_uid);
		sa_add(&a, num);
		snprintf(num, sizeof num, "--regid=%u", box_gid);
		sa_add(&a, num);
		sa_add(&a, "--clear-groups");
		sa_add(&a, "--");
	} else if (fds->cgroup[0]) {
		sa_add(&a, "/bin/sh");
		sa_add(&a, "-c");
		sa_add(&a, "echo $$ > \"$0/cgroup.procs\" || exit 126; exec \"$@\"");
		sa_add(&a, fds->cgroup);
	}
	sa_add(&a, bwrap);
	sa_add(&a, "--unshare-all");
	/* a user namespace always (--unshare-all only tries one as root), and
	 * none inside it: no namespaces of the command's own */
	sa_add(&a, "--unshare-user");
	sa_add(&a, "--disable-userns");
	if (policy->network)
		sa_add(&a, "--share-net");
	sa_add(&a, "--die-with-parent");
	sa_add(&a, "--new-session");
	sa_add2(&a, "--cap-drop", "ALL");
	/* Inside, the command is nobody, never the gateway's uid; outside, a
	 * user namespace made without privilege maps that one uid to the
	 * gateway's (see docs/security.md for what that does and does not
	 * separate). */
	uid = gid = SANDBOX_NOBODY;
	snprintf(num, sizeof num, "%u", uid);
	sa_add2(&a, "--uid", num);
	sa_add2(&a, "--gid", num);
	if (!policy->network) {
		char *bpf = NULL;
		size_t blen = 0;

		if ((rc = sandbox_seccomp_bpf(&bpf, &blen)) == SB_OK)
			rc = sandbox_fds_add(fds, bpf, blen, num, sizeof num);
		free(bpf);
		if (rc != SB_OK) {
			snprintf(why, why_size, "cannot build the sandbox's seccomp filter");
			goto fail;
		}
		sa_add2(&a, "--seccomp", num);
	}
	/* The view is built from nothing (bwrap starts from an empty tmpfs):
	 * only what is listed here exists inside. */
	for (size_t i = 0; sandbox_system_dirs[i]; i++)
		sandbox_bind_system(&a, &view, sandbox_system_dirs[i]);
	for (size_t i = 0; sandbox_etc[i]; i++)
		sandbox_bind_system(&a, &view, sandbox_etc[i]);
	if (policy->network)
		for (size_t i = 0; sandbox_etc_net[i]; i++)
			sandbox_bind_system(&a, &view, sandbox_etc_net[i]);
	sa_add3(&a, "--symlink", "/proc/self/mounts", "/etc/mtab");
	if ((rc = sandbox_user_db(&a, fds, uid, gid, workspace)) != SB_OK) {
		snprintf(why, why_size, "cannot prepare the sandbox's user database");
		goto fail;
	}
	sa_add2(&a, "--proc", "/proc");
	sa_add2(&a, "--dev", "/dev");
	for (size_t i = 0; sandbox_tmpfs[i]; i++)
		sa_add2(&a, "--tmpfs", sandbox_tmpfs[i]);
	sa_add3(&a, policy->mode == SANDBOX_WORKSPACE_WRITE ? "--bind" : "--ro-bind",
	        as_root ? SANDBOX_WS_MOUNT : workspace, workspace);
	view_add(&view, workspace, workspace);
	/* A cut path would find no .git and leave the real one writable. */
	if (FMT(path, "%s/.git", workspace) != SB_OK)
		a.full = true;
	else if (policy->mode == SANDBOX_WORKSPACE_WRITE && lstat(path, &st) == 0 &&
	         !S_ISLNK(st.st_mode))
		sa_add3(&a, "--ro-bind", as_root ? SANDBOX_WS_MOUNT "/.git" : path, path);
	for (size_t i = 0; i < policy->n_read_only; i++) {
		const char *ro = policy->read_only[i];

		if (!ro || ro[0] != '/' || stat(ro, &st) != 0)
			continue; /* (a missing one is simply not there) */
		if ((rc = sandbox_read_only_ok(policy, ro, ws_real, why, why_size)) != SB_OK)
			goto fail;
		sa_add3(&a, "--ro-bind", ro, ro);
		view_add(&view, ro, ro);
	}
	sandbox_cover(&a, &view, policy, ws_real);
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
	{
		char script[256], mem[64] = "";

		/* The limits, set by a shell in the child before the command:
		 * RLIMIT_AS where the kernel allows it (best effort); RLIMIT_NPROC
		 * always (bash says -u, dash -p), or the command does not run. The
		 * process count is kept per user of a user namespace, so it
		 * bounds this command's processes, not the gateway's. */
		if (policy->memory_bytes > 0)
			snprintf(mem, sizeof mem, "ulimit -v %lld 2>/dev/null; ",
			         (long long)(policy->memory_bytes / 1024));
		snprintf(script, sizeof script,
		         "%s{ ulimit -u %d || ulimit -p %d; } 2>/dev/null || "
		         "{ echo 'sandbox: cannot limit processes' >&2; exit 126; }; exec \"$@\"",
		         mem, policy->max_processes > 0 ? policy->max_processes : SANDBOX_PROCESSES,
		         policy->max_processes > 0 ? policy->max_processes : SANDBOX_PROCESSES);
		sa_add(&a, "/bin/sh");
		sa_add(&a, "-c");
		sa_add(&a, script);
		sa_add(&a, "sh");
	}
	for (size_t i = 0; argv[i]; i++)
		sa_add(&a, argv[i]);
	if (view.nomem)
		a.nomem = true;
	if (view.full)
		a.full = true;
	if (a.nomem || a.full) {
		snprintf(why, why_size, "%s",
		         a.nomem ? "out of memory" : "the sandboxed command line is too long");
		rc = a.nomem ? SB_ERR_NOMEM : SB_ERR_INVAL;
		goto fail;
	}
	v = calloc(a.n + 1, sizeof *v);
	if (!v) {
		rc = SB_ERR_NOMEM;
		goto fail;
	}
	memcpy(v, a.v, a.n * sizeof *v);
	*out = v;
	view_free(&view);
	free(ws_real);
	return SB_OK;
fail:
	for (size_t i = 0; i < a.n; i++)
		free(a.v[i]);
	view_free(&view);
	free(ws_real);
	sandbox_fds_close(fds);
	(void)sandbox_cgroup_remove(fds->cgroup);
	fds->cgroup[0] = '\0';
	return rc;
}

const char *sandbox_failure(int exit_code, const char *output, size_t len)
{
	/* bwrap's own error; for a root gateway also the steps before it
	 * (no right to make a mount namespace, in a container say) */
	if (output && ((exit_code == 1 && ((len >= 7 && strncmp(output, "bwrap: ", 7) == 0) ||
	                                   (len >= 9 && strncmp(output, "unshare: ", 9) == 0) ||
	                                   (len >= 9 && strncmp(output, "setpriv: ", 9) == 0))) ||
	               (exit_code == 126 && len >= 7 && strncmp(output, "mount: ", 7) == 0)))
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
	struct sandbox_fds box;
	size_t got = 0;
	pid_t pid;
	struct timespec t0, t1;

	sandbox_fds_init(&box);
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
	rc = sandbox_argv(&p, tmp, argv, NULL, &v, &box, why, why_size);
	if (rc != SB_OK)
		goto out;
	rc = SB_ERR_IO;
	if (pipe2(fds, O_CLOEXEC) != 0)
		goto out;
	pid = fork();
	if (pid < 0)
		goto out;
	if (pid == 0) {
		int dn = open("/dev/null", O_RDONLY | O_CLOEXEC);

		if (dn >= 0)
			dup2(dn, 0);
		dup2(fds[1], 1);
		dup2(fds[1], 2);
		/* bwrap's inputs as 3, 4, ...: moved above them first, so that
		 * no dup2 overwrites one not yet placed */
		for (size_t i = 0; i < box.n; i++)
			box.fd[i] = fcntl(box.fd[i], F_DUPFD_CLOEXEC, 3 + SANDBOX_FDS_MAX);
		for (size_t i = 0; i < box.n; i++)
			if (box.fd[i] < 0 || dup2(box.fd[i], 3 + (int)i) < 0)
				_exit(127);
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
	sandbox_fds_close(&box);
	for (int i = 0; i < 50 && sandbox_cgroup_remove(box.cgroup) == SB_ERR_AGAIN; i++)
		usleep(20000);
	return rc;
}
