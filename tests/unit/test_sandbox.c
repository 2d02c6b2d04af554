/*
 * test_sandbox.c - the bubblewrap sandbox (agents/safety/sandbox.c) through the one
 * place tools start processes (agents/safety/spawn.c), with its properties checked
 * from inside: the user (65534 when the tests run as root), no
 * capabilities, no network unless allowed, the workspace writable and its
 * .git read-only (or everything read-only), the gateway's home and the
 * host's /tmp out of sight, a clean environment, the memory limit, and the
 * time limit killing the command. Also: a missing bwrap refuses the command
 * (the bash tool answers with an error and nothing runs unsandboxed).
 *
 * Hosts differ: without bwrap the tests that need it are skipped with a
 * message; with a bwrap that cannot build a sandbox (user namespaces off)
 * they fail and say so, since the gateway would refuse its tools there.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <ftw.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <uv.h>

#include "agents/safety/sandbox.h"
#include "agents/safety/spawn.h"
#include "agents/tool.h"
#include "gateway/core/err.h"
#include "tests/integration/harness.h"

struct fixture {
	char root[64];
	char home[PATH_MAX]; /* stands for the gateway's home (hidden) */
	char ws[PATH_MAX];   /* the workspace, inside it */
	char host_tmp[PATH_MAX];
	uv_loop_t loop;
	bool have_bwrap;
};

static struct fixture fx;

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st;
	(void)flag;
	(void)f;
	return remove(p);
}

static void put(const char *dir, const char *name, const char *text)
{
	char path[PATH_MAX + 64];
	FILE *f;

	snprintf(path, sizeof path, "%s/%s", dir, name);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
}

static int setup(void **state)
{
	char p[PATH_MAX + 64], why[1024], bwrap[PATH_MAX];
	struct sandbox_policy probe;

	(void)state;
	memset(&fx, 0, sizeof fx);
	snprintf(fx.root, sizeof fx.root, "/tmp/sb-box-XXXXXX");
	if (!mkdtemp(fx.root))
		return -1;
	snprintf(p, sizeof p, "%s/home", fx.root);
	mkdir(p, 0700);
	if (!realpath(p, fx.home))
		return -1;
	snprintf(p, sizeof p, "%s/workspaces", fx.home);
	mkdir(p, 0700);
	snprintf(p, sizeof p, "%s/workspaces/main", fx.home);
	mkdir(p, 0755);
	if (!realpath(p, fx.ws))
		return -1;
	snprintf(p, sizeof p, "%s/.git", fx.ws);
	mkdir(p, 0755);
	put(fx.home, "secret.txt", "the gateway's secret\n");
	put(fx.ws, "notes.txt", "workspace notes\n");
	snprintf(p, sizeof p, "%s/.git", fx.ws);
	put(p, "HEAD", "ref: refs/heads/main\n");
	snprintf(fx.host_tmp, sizeof fx.host_tmp, "%s/host-only-marker", fx.root);
	put(fx.root, "host-only-marker", "x");
	uv_loop_init(&fx.loop);
	memset(&probe, 0, sizeof probe);
	fx.have_bwrap = sandbox_find_bwrap(&probe, bwrap, sizeof bwrap) == SB_OK;
	if (!fx.have_bwrap) {
		fprintf(stderr, "test_sandbox: bubblewrap is not installed here; the tests that "
		                "need it are skipped\n");
	} else if (sandbox_probe(&probe, why, sizeof why) != SB_OK) {
		fprintf(stderr, "test_sandbox: %s is installed but cannot build a sandbox: %s\n",
		        bwrap, why);
		return -1;
	}
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	uv_run(&fx.loop, UV_RUN_DEFAULT);
	uv_loop_close(&fx.loop);
	nftw(fx.root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	return 0;
}

static void need_bwrap(void)
{
	if (!fx.have_bwrap)
		HARNESS_SKIP("bubblewrap is not installed (scripts/deps.sh installs it)");
}

static void policy_init(struct sandbox_policy *p, enum sandbox_mode mode)
{
	memset(p, 0, sizeof *p);
	p->mode = mode;
	p->memory_bytes = (int64_t)1 << 30;
	p->hide[p->n_hide++] = fx.home;
}

struct outcome {
	bool done;
	int rc, exit_code;
	bool timed_out, sandboxed;
	char out[8192];
};

static void on_spawned(void *ud, int rc, const struct tool_spawn_result *r)
{
	struct outcome *o = ud;

	o->done = true;
	o->rc = rc;
	o->exit_code = r->exit_code;
	o->timed_out = r->timed_out;
	o->sandboxed = r->sandboxed;
	snprintf(o->out, sizeof o->out, "%.*s", (int)r->output_len, r->output);
}

/* Runs `sh -c script` in the workspace under p; returns spawn's rc. */
static int run(const struct sandbox_policy *p, const char *script, int64_t timeout_ms,
               struct outcome *o)
{
	const char *argv[] = {"/bin/sh", "-c", script, NULL};
	const char *env[] = {"SB_EXTRA=given", NULL};
	struct tool_spawn_options opt;
	char why[512];
	int rc;

	memset(o, 0, sizeof *o);
	memset(&opt, 0, sizeof opt);
	opt.argv = argv;
	opt.cwd = fx.ws;
	opt.env = env;
	opt.timeout_ms = timeout_ms;
	opt.max_output = sizeof o->out - 1;
	opt.sandbox = p;
	opt.why = why;
	opt.why_size = sizeof why;
	rc = tool_spawn(&fx.loop, &opt, on_spawned, o, NULL);
	if (rc != SB_OK) {
		snprintf(o->out, sizeof o->out, "%s", why);
		return rc;
	}
	while (!o->done)
		uv_run(&fx.loop, UV_RUN_ONCE);
	return o->rc;
}

static void test_command_line(void **state)
{
	struct sandbox_policy p;
	const char *argv[] = {"/bin/true", NULL};
	const char *env[] = {"PATH=/usr/bin:/bin", NULL};
	char **v = NULL, why[512], joined[8192] = "", gitro[3 * PATH_MAX];
	struct sandbox_fds fds;

	(void)state;
	need_bwrap();
	policy_init(&p, SANDBOX_WORKSPACE_WRITE);
	assert_int_equal(sandbox_argv(&p, fx.ws, argv, env, &v, &fds, why, sizeof why), SB_OK);
	for (size_t i = 0; v[i]; i++) {
		strncat(joined, v[i], sizeof joined - strlen(joined) - 2);
		strncat(joined, " ", sizeof joined - strlen(joined) - 1);
	}
	assert_non_null(strstr(joined, "--unshare-all "));
	assert_null(strstr(joined, "--share-net"));
	assert_non_null(strstr(joined, "--die-with-parent "));
	assert_non_null(strstr(joined, "--cap-drop ALL "));
	assert_non_null(strstr(joined, "--clearenv "));
	assert_non_null(strstr(joined, "--tmpfs /tmp "));
	assert_non_null(strstr(joined, "--uid 65534 --gid 65534 "));
	assert_non_null(strstr(joined, "--disable-userns "));
	assert_non_null(strstr(joined, "--seccomp "));
	/* a root gateway binds the workspace over /sys in a mount namespace
	 * of the command's own and drops to the sandbox's uid before bwrap
	 * (test_sandbox_uid checks what that does) */
	if (geteuid() == 0) {
		snprintf(gitro, sizeof gitro, "--ro-bind /sys/.git %s/.git ", fx.ws);
		assert_non_null(strstr(joined, "--reuid=65533 --regid=65533 --clear-groups -- "));
	} else {
		snprintf(gitro, sizeof gitro, "--ro-bind %s/.git %s/.git ", fx.ws, fx.ws);
		assert_null(strstr(joined, "--reuid="));
	}
	assert_non_null(strstr(joined, gitro));
	sandbox_argv_free(v);
	sandbox_fds_close(&fds);
	assert_int_equal(sandbox_cgroup_remove(fds.cgroup), SB_OK);
	p.network = true;
	assert_int_equal(sandbox_argv(&p, fx.ws, argv, env, &v, &fds, why, sizeof why), SB_OK);
	joined[0] = '\0';
	for (size_t i = 0; v[i]; i++) {
		strncat(joined, v[i], sizeof joined - strlen(joined) - 2);
		strncat(joined, " ", sizeof joined - strlen(joined) - 1);
	}
	assert_non_null(strstr(joined, "--share-net"));
	assert_null(strstr(joined, "--seccomp "));
	sandbox_argv_free(v);
	sandbox_fds_close(&fds);
	assert_int_equal(sandbox_cgroup_remove(fds.cgroup), SB_OK);
	/* read-only host paths (an MCP server's code): bound where they exist,
	 * at their own place; a missing or relative one is not there */
	{
		const char *ro[] = {"/etc/hostname", "/no/such/dir-for-sandbox-test", "rel/path"};

		p.network = false;
		p.read_only = ro;
		p.n_read_only = 3;
		assert_int_equal(sandbox_argv(&p, fx.ws, argv, env, &v, &fds, why, sizeof why),
		                 SB_OK);
		joined[0] = '\0';
		for (size_t i = 0; v[i]; i++) {
			strncat(joined, v[i], sizeof joined - strlen(joined) - 2);
			strncat(joined, " ", sizeof joined - strlen(joined) - 1);
		}
		if (access("/etc/hostname", F_OK) == 0)
			assert_non_null(strstr(joined, "--ro-bind /etc/hostname /etc/hostname "));
		assert_null(strstr(joined, "/no/such/dir-for-sandbox-test"));
		assert_null(strstr(joined, " rel/path "));
		sandbox_argv_free(v);
		sandbox_fds_close(&fds);
		assert_int_equal(sandbox_cgroup_remove(fds.cgroup), SB_OK);
		/* not the directory that holds the hidden home, nor a part of
		 * the home beside the workspace; a part of the workspace is fine */
		{
			char agents[PATH_MAX + 16], sub[PATH_MAX + 16];
			const char *bad1[] = {fx.root}, *bad2[] = {agents}, *good[] = {sub};

			snprintf(agents, sizeof agents, "%s/agents", fx.home);
			mkdir(agents, 0700);
			snprintf(sub, sizeof sub, "%s/tools", fx.ws);
			mkdir(sub, 0755);
			p.read_only = bad1;
			p.n_read_only = 1;
			assert_int_equal(
			    sandbox_argv(&p, fx.ws, argv, env, &v, &fds, why, sizeof why),
			    SB_ERR_PERM);
			assert_non_null(strstr(why, "which the sandbox hides"));
			p.read_only = bad2;
			assert_int_equal(
			    sandbox_argv(&p, fx.ws, argv, env, &v, &fds, why, sizeof why),
			    SB_ERR_PERM);
			p.read_only = good;
			assert_int_equal(
			    sandbox_argv(&p, fx.ws, argv, env, &v, &fds, why, sizeof why), SB_OK);
			sandbox_argv_free(v);
			sandbox_fds_close(&fds);
			assert_int_equal(sandbox_cgroup_remove(fds.cgroup), SB_OK);
			rmdir(sub);
			rmdir(agents);
		}
		p.read_only = NULL;
		p.n_read_only = 0;
	}
	/* "full" is no sandbox: nothing to build */
	p.mode = SANDBOX_FULL;
	assert_int_equal(sandbox_argv(&p, fx.ws, argv, env, &v, &fds, why, sizeof why), SB_ERR_INVAL);
}

static void test_properties_from_inside(void **state)
{
	struct sandbox_policy p;
	struct outcome o;
	char script[PATH_MAX * 4];

	(void)state;
	need_bwrap();
	policy_init(&p, SANDBOX_WORKSPACE_WRITE);
	setenv("SB_GATEWAY_SECRET", "hunter2", 1);

	/* it really ran in the sandbox, as an unprivileged user */
	assert_int_equal(run(&p, "id -u", 10000, &o), SB_OK);
	assert_true(o.sandboxed);
	assert_string_equal(o.out, "65534\n");
	/* no capabilities */
	assert_int_equal(run(&p, "grep -E '^Cap(Eff|Prm|Bnd):' /proc/self/status", 10000, &o),
	                 SB_OK);
	assert_non_null(strstr(o.out, "CapEff:\t0000000000000000"));
	assert_non_null(strstr(o.out, "CapPrm:\t0000000000000000"));
	assert_non_null(strstr(o.out, "CapBnd:\t0000000000000000"));
	/* no network: only a loopback of its own */
	assert_int_equal(run(&p, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '", 10000, &o),
	                 SB_OK);
	assert_string_equal(o.out, "lo\n");
	/* its own PID namespace: it is nearly alone */
	assert_int_equal(run(&p, "ls /proc | grep -c '^[0-9]'", 10000, &o), SB_OK);
	assert_true(strtol(o.out, NULL, 10) < 6);
	/* the workspace is writable, its .git is not */
	assert_int_equal(run(&p, "echo new > made.txt && cat notes.txt", 10000, &o), SB_OK);
	assert_int_equal(o.exit_code, 0);
	assert_string_equal(o.out, "workspace notes\n");
	assert_int_equal(run(&p, "echo evil > .git/HEAD", 10000, &o), SB_OK);
	assert_int_not_equal(o.exit_code, 0);
	assert_non_null(strstr(o.out, "Read-only file system"));
	assert_int_equal(run(&p, "cat .git/HEAD", 10000, &o), SB_OK);
	assert_string_equal(o.out, "ref: refs/heads/main\n");
	/* the gateway's home is out of sight, the workspace inside it is not */
	snprintf(script, sizeof script, "cat %s/secret.txt; ls -a %s; ls %s/workspaces", fx.home,
	         fx.home, fx.home);
	assert_int_equal(run(&p, script, 10000, &o), SB_OK);
	assert_null(strstr(o.out, "the gateway's secret"));
	assert_null(strstr(o.out, "secret.txt\n"));
	assert_non_null(strstr(o.out, "main"));
	assert_int_equal(run(&p, "cat /etc/shadow 2>/dev/null | wc -c", 10000, &o), SB_OK);
	assert_string_equal(o.out, "0\n");
	/* a private /tmp: the host's files are not there, ours do not leak out */
	snprintf(script, sizeof script, "ls %s 2>&1; echo inside > /tmp/from-sandbox; ls /tmp",
	         fx.host_tmp);
	assert_int_equal(run(&p, script, 10000, &o), SB_OK);
	assert_non_null(strstr(o.out, "No such file"));
	assert_non_null(strstr(o.out, "from-sandbox"));
	assert_int_not_equal(access("/tmp/from-sandbox", F_OK), 0);
	/* a clean environment: what the tool gave, nothing of the gateway's */
	assert_int_equal(run(&p, "env | sort", 10000, &o), SB_OK);
	assert_null(strstr(o.out, "SB_GATEWAY_SECRET"));
	assert_null(strstr(o.out, "hunter2"));
	assert_non_null(strstr(o.out, "SB_EXTRA=given\n"));
	assert_non_null(strstr(o.out, "PATH=/usr/local/bin:/usr/bin:/bin\n"));
	/* the memory limit */
	assert_int_equal(run(&p, "ulimit -v", 10000, &o), SB_OK);
	assert_string_equal(o.out, "1048576\n");
	/* the time limit kills the command and what it started */
	assert_int_equal(run(&p, "sleep 30 & sleep 30", 500, &o), SB_ERR_TIMEOUT);
	assert_true(o.timed_out);
	unsetenv("SB_GATEWAY_SECRET");
}

/* The view is an allow-list: the root holds only the system directories,
 * a curated /etc and the private mounts; the tools a shell needs work in
 * it (the dynamic loader, awk through /etc/alternatives, name lookups of
 * the sandbox's own users, the CA store), and what a host keeps in /etc
 * besides (shadow, ssl/private, machine-id) is not there. */
static void test_view_allow_list(void **state)
{
	struct sandbox_policy p;
	struct outcome o;

	(void)state;
	need_bwrap();
	policy_init(&p, SANDBOX_WORKSPACE_WRITE);
	assert_int_equal(run(&p, "ls / | tr '\n' ' '", 10000, &o), SB_OK);
	{
		static const char *const allowed[] = {"bin", "dev", "etc", "home", "lib", "lib32",
		                                      "lib64", "libx32", "proc", "run", "sbin",
		                                      "tmp", "usr", "var", NULL};
		const char *w = o.out;

		while (*w) {
			size_t n = strcspn(w, " ");
			bool ok = false;

			for (size_t i = 0; allowed[i]; i++)
				ok = ok || (strlen(allowed[i]) == n && strncmp(w, allowed[i], n) == 0);
			if (!ok)
				fail_msg("unexpected /%.*s in the view: %s", (int)n, w, o.out);
			w += n;
			w += strspn(w, " ");
		}
	}
	assert_int_equal(run(&p, "ls -A /run /var/run /home /var | tr -s '\n' ' '", 10000, &o), SB_OK);
	assert_string_equal(o.out, "/home: /run: /var: run tmp /var/run: ");
	assert_int_equal(run(&p, "ls /etc/shadow /etc/ssl/private /etc/machine-id 2>&1 | wc -l; "
	                         "grep -c . /etc/passwd",
	                         10000, &o),
	                 SB_OK);
	assert_string_equal(o.out, "3\n2\n");
	assert_int_equal(run(&p, "echo a b | awk '{print $2}'; id -un; test -s "
	                         "/etc/ssl/certs/ca-certificates.crt && echo certs",
	                         10000, &o),
	                 SB_OK);
	assert_string_equal(o.out, "b\nnobody\ncerts\n");
	/* no user namespace of its own (--disable-userns) */
	assert_int_equal(run(&p, "unshare -U true 2>/dev/null; echo rc=$?", 10000, &o), SB_OK);
	assert_string_equal(o.out, "rc=1\n");
}

/* Without network, the seccomp filter: sockets of any family but AF_UNIX
 * are refused, and so is connect, even to a unix socket the command can
 * see (one in the workspace, made by this test, standing for any host
 * socket that a view might show); a socketpair still works. With network,
 * no filter. perl is the client (it is in /usr). */
static void test_seccomp_without_network(void **state)
{
	static const char *const probe =
	    "perl -MSocket -e '"
	    "socket(my $s, PF_INET, SOCK_STREAM, 0) ? print(\"inet ok\\n\") : print(\"inet: $!\\n\");"
	    "socket(my $s6, PF_INET6, SOCK_DGRAM, 0) ? print(\"inet6 ok\\n\") : print(\"inet6: $!\\n\");"
	    "socket(my $n, 16, SOCK_RAW, 0) ? print(\"netlink ok\\n\") : print(\"netlink: $!\\n\");"
	    "socketpair(my $a, my $b, PF_UNIX, SOCK_STREAM, 0) ? print(\"pair ok\\n\") : "
	    "print(\"pair: $!\\n\");"
	    "socket(my $u, PF_UNIX, SOCK_STREAM, 0) or die;"
	    "connect($u, pack_sockaddr_un(\"host.sock\")) ? print(\"connect ok\\n\") : "
	    "print(\"connect: $!\\n\");'";
	struct sandbox_policy p;
	struct outcome o;
	struct sockaddr_un sa;
	char cwd[PATH_MAX];
	int lfd;

	(void)state;
	need_bwrap();
	/* a listening socket in the workspace, which anyone may connect to */
	memset(&sa, 0, sizeof sa);
	sa.sun_family = AF_UNIX;
	assert_true(snprintf(sa.sun_path, sizeof sa.sun_path, "%s/host.sock", fx.ws) <
	            (int)sizeof sa.sun_path);
	lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(lfd >= 0);
	assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof sa), 0);
	assert_int_equal(chmod(sa.sun_path, 0777), 0);
	assert_int_equal(listen(lfd, 8), 0);
	assert_non_null(getcwd(cwd, sizeof cwd));

	policy_init(&p, SANDBOX_WORKSPACE_WRITE);
	assert_int_equal(run(&p, probe, 10000, &o), SB_OK);
	if (!strstr(o.out, "inet: Address family not supported") ||
	    !strstr(o.out, "inet6: Address family not supported") ||
	    !strstr(o.out, "netlink: Address family not supported") || !strstr(o.out, "pair ok") ||
	    !strstr(o.out, "connect: Permission denied"))
		fail_msg("without network: %s", o.out);
	assert_int_equal(run(&p, "grep Seccomp: /proc/self/status", 10000, &o), SB_OK);
	assert_string_equal(o.out, "Seccomp:\t2\n");
	/* with network: sockets and connect work (the filter is off) */
	p.network = true;
	assert_int_equal(run(&p, probe, 10000, &o), SB_OK);
	if (!strstr(o.out, "inet ok") || !strstr(o.out, "connect ok"))
		fail_msg("with network: %s", o.out);
	close(lfd);
	unlink(sa.sun_path);
}

/* Datagrams to a unix socket of the host's that the command can see (here:
 * one the test binds in the workspace; on a host, a `/dev/log`-style
 * socket in view). No connect is needed for a datagram, and sendmsg's
 * address is behind a pointer the filter cannot read: without network the
 * command cannot make a unix socket that sends by address at all. */
static void test_unix_datagrams_without_network(void **state)
{
	static const char probe[] =
	    "import socket\n"
	    "U, A = socket.AF_UNIX, 'host.dgram'\n"
	    "def t(name, f):\n"
	    "    try:\n"
	    "        f()\n"
	    "        print(name, 'ok')\n"
	    "    except OSError as e:\n"
	    "        print(name + ':', e.strerror)\n"
	    "def sock(ty):\n"
	    "    return lambda: socket.socket(U, ty).sendmsg([b'from inside'], [], 0, A)\n"
	    "def pair(ty):\n"
	    "    def f():\n"
	    "        a, b = socket.socketpair(U, ty)\n"
	    "        if ty == socket.SOCK_DGRAM:\n"
	    "            a.sendmsg([b'from a pair'], [], 0, A)\n"
	    "        else:\n"
	    "            a.sendall(b'to b')\n"
	    "            assert b.recv(64) == b'to b'\n"
	    "    return f\n"
	    "t('dgram', sock(socket.SOCK_DGRAM))\n"
	    "t('dgram-flags', sock(socket.SOCK_DGRAM | socket.SOCK_NONBLOCK | "
	    "socket.SOCK_CLOEXEC))\n"
	    "t('raw', sock(socket.SOCK_RAW))\n"
	    "t('seqpacket', lambda: socket.socket(U, socket.SOCK_SEQPACKET))\n"
	    "t('stream', lambda: socket.socket(U, socket.SOCK_STREAM))\n"
	    "t('pair-dgram', pair(socket.SOCK_DGRAM))\n"
	    "t('pair-stream', pair(socket.SOCK_STREAM))\n"
	    "t('pair-seqpacket', pair(socket.SOCK_SEQPACKET))\n";
	static const char *const refused[] = {"dgram: Permission denied",
	                                      "dgram-flags: Permission denied",
	                                      "raw: Permission denied",
	                                      "seqpacket: Permission denied",
	                                      "pair-dgram: Permission denied",
	                                      "stream ok",
	                                      "pair-stream ok",
	                                      "pair-seqpacket ok"};
	struct sandbox_policy p;
	struct outcome o;
	struct sockaddr_un sa;
	char got[64];
	ssize_t n;
	int lfd;

	(void)state;
	need_bwrap();
	if (access("/usr/bin/python3", X_OK) != 0)
		fail_msg("/usr/bin/python3 is needed (scripts/deps.sh)");
	put(fx.ws, "probe.py", probe);
	memset(&sa, 0, sizeof sa);
	sa.sun_family = AF_UNIX;
	assert_true(snprintf(sa.sun_path, sizeof sa.sun_path, "%s/host.dgram", fx.ws) <
	            (int)sizeof sa.sun_path);
	lfd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	assert_true(lfd >= 0);
	assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof sa), 0);
	assert_int_equal(chmod(sa.sun_path, 0777), 0);

	policy_init(&p, SANDBOX_WORKSPACE_WRITE);
	assert_int_equal(run(&p, "/usr/bin/python3 probe.py 2>&1", 20000, &o), SB_OK);
	for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
		if (!strstr(o.out, refused[i]))
			fail_msg("without network, no \"%s\": %s", refused[i], o.out);
	n = recv(lfd, got, sizeof got, MSG_DONTWAIT);
	if (n >= 0)
		fail_msg("the host's datagram socket received \"%.*s\" from the sandbox", (int)n,
		         got);
	/* with network the filter is off, and the same datagram arrives: the
	 * listener is in reach of the command, so the silence above is the
	 * filter's */
	p.network = true;
	assert_int_equal(run(&p, "/usr/bin/python3 probe.py 2>&1", 20000, &o), SB_OK);
	if (!strstr(o.out, "dgram ok"))
		fail_msg("with network: %s", o.out);
	n = recv(lfd, got, sizeof got, MSG_DONTWAIT);
	assert_true(n > 0);
	assert_memory_equal(got, "from inside", 11);
	while (recv(lfd, got, sizeof got, MSG_DONTWAIT) > 0)
		;
	close(lfd);
	unlink(sa.sun_path);
	assert_true(snprintf(sa.sun_path, sizeof sa.sun_path, "%s/probe.py", fx.ws) <
	            (int)sizeof sa.sun_path);
	unlink(sa.sun_path);
}

/* The process limit: RLIMIT_NPROC of the sandbox's user, counted in the
 * sandbox's own user namespace. A fork bomb fails to fork past it and is
 * killed with its sandbox at the time limit; the test process (the same
 * uid outside) can still start processes meanwhile, and nothing of the
 * bomb is left afterwards. */
static void test_process_limit(void **state)
{
	struct sandbox_policy p;
	struct outcome o;
	int rc;

	(void)state;
	need_bwrap();
	policy_init(&p, SANDBOX_WORKSPACE_WRITE);
	p.max_processes = 24;
	assert_int_equal(run(&p, "ulimit -u 2>/dev/null || ulimit -p", 10000, &o), SB_OK);
	assert_string_equal(o.out, "24\n");
	/* First a bounded probe: 40 sleeps against a limit of 24. Only if the
	 * limit holds does the fork bomb run: an unlimited one would take the
	 * whole host down with it. */
	assert_int_equal(run(&p,
	                     "i=0; while [ $i -lt 40 ]; do sleep 2 & i=$((i+1)); done 2>&1; "
	                     "echo started; wait",
	                     10000, &o),
	                 SB_OK);
	if (!strstr(o.out, "fork") && !strstr(o.out, "Resource temporarily unavailable"))
		fail_msg("40 processes started under a limit of 24 (the fork bomb is not run): %s",
		         o.out);
	/* it dies out, or the time limit ends it */
	rc = run(&p, "exec bash -c 'sbbomb() { sbbomb | sbbomb & }; sbbomb; sleep 1; echo still here'",
	         4000, &o);
	assert_true(rc == SB_OK || rc == SB_ERR_TIMEOUT);
	if (!strstr(o.out, "fork") || !strstr(o.out, "Resource temporarily unavailable"))
		fail_msg("the bomb did not hit the limit: %s", o.out);
	/* the host still forks, and no bomb process is left */
	assert_int_equal(system("true"), 0);
	assert_int_equal(system("sleep 1; ! grep -l 'sb[b]omb' /proc/[0-9]*/cmdline >/dev/null 2>&1"),
	                 0);
}

static void test_read_only_and_network(void **state)
{
	struct sandbox_policy p;
	struct outcome o;

	(void)state;
	need_bwrap();
	policy_init(&p, SANDBOX_READ_ONLY);
	assert_int_equal(run(&p, "echo x > ro.txt", 10000, &o), SB_OK);
	assert_int_not_equal(o.exit_code, 0);
	assert_non_null(strstr(o.out, "Read-only file system"));
	assert_int_equal(run(&p, "cat notes.txt", 10000, &o), SB_OK);
	assert_string_equal(o.out, "workspace notes\n");
	/* network allowed: the host's interfaces are there */
	policy_init(&p, SANDBOX_WORKSPACE_WRITE);
	p.network = true;
	assert_int_equal(run(&p, "tail -n +3 /proc/net/dev | wc -l", 10000, &o), SB_OK);
	assert_true(strtol(o.out, NULL, 10) >= 1);
}

struct tool_outcome {
	bool done;
	int rc;
	bool is_error;
	char *content;
};

static void on_tool_done(void *ud, int rc, char *content, bool is_error)
{
	struct tool_outcome *t = ud;

	t->done = true;
	t->rc = rc;
	t->is_error = is_error;
	t->content = content;
}

static void test_missing_bwrap_refuses(void **state)
{
	struct sandbox_policy p;
	struct outcome o;
	struct tool_ctx ctx;
	struct tool_outcome t;
	json_t *in;
	char marker[PATH_MAX + 64];

	(void)state;
	policy_init(&p, SANDBOX_WORKSPACE_WRITE);
	p.bwrap = "/nonexistent/bwrap";
	assert_int_equal(run(&p, "touch ran-anyway", 10000, &o), SB_ERR_NOTFOUND);
	assert_non_null(strstr(o.out, "bubblewrap (bwrap) is not installed"));
	/* the bash tool says so to the model, and nothing ran */
	memset(&ctx, 0, sizeof ctx);
	ctx.loop = &fx.loop;
	ctx.workspace = fx.ws;
	ctx.timeout_ms = 10000;
	ctx.sandbox = &p;
	memset(&t, 0, sizeof t);
	in = json_pack("{ss}", "command", "touch ran-anyway");
	assert_int_equal(tool_bash.call(&ctx, in, on_tool_done, &t, NULL), SB_OK);
	while (!t.done)
		uv_run(&fx.loop, UV_RUN_ONCE);
	assert_true(t.is_error);
	assert_non_null(strstr(t.content, "sandbox is not available"));
	free(t.content);
	json_decref(in);
	snprintf(marker, sizeof marker, "%s/ran-anyway", fx.ws);
	assert_int_not_equal(access(marker, F_OK), 0);
	/* and the probe says why */
	{
		char why[512];

		assert_int_equal(sandbox_probe(&p, why, sizeof why), SB_ERR_NOTFOUND);
	}
	/* bwrap's own failure is recognised and explained */
	assert_non_null(sandbox_failure(1, "bwrap: No permissions to create new namespace\n", 46));
	assert_null(sandbox_failure(1, "grep: x: No such file\n", 22));
	/* a root gateway's steps before bwrap */
	assert_non_null(
	    sandbox_failure(1, "unshare: unshare failed: Operation not permitted\n", 49));
	assert_non_null(sandbox_failure(126, "mount: /sys: permission denied.\n", 32));
	assert_null(sandbox_failure(126, "sh: 1: x: Permission denied\n", 28));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_command_line),
	    cmocka_unit_test(test_properties_from_inside),
	    cmocka_unit_test(test_view_allow_list),
	    cmocka_unit_test(test_seccomp_without_network),
	    cmocka_unit_test(test_unix_datagrams_without_network),
	    cmocka_unit_test(test_process_limit),
	    cmocka_unit_test(test_read_only_and_network),
	    cmocka_unit_test(test_missing_bwrap_refuses),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
