/*
 * test_sandbox_uid.c - a root gateway's commands run as the sandbox's uid
 * (SANDBOX_UID, security.sandbox_uid) outside their user namespace too
 * (agents/safety/sandbox.c), seen from outside: the command's processes and
 * the files it makes belong to that uid, a root-only file in its view is not
 * readable, the workspace stays writable (also what the gateway's `write`
 * tool just made), git works inside, the process limit holds without a pids
 * cgroup, and the ownership pass leaves the hidden paths, .git and
 * hard-linked files alone.
 *
 * Runs only as root (CI and this project's test machines are); elsewhere the
 * gateway keeps its own uid and the tests are skipped with a message.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include "agents/safety/sandbox.h"
#include "agents/safety/spawn.h"
#include "agents/tool.h"
#include "gateway/core/err.h"
#include "tests/integration/harness.h"
#include "workspaces/memory.h"
#include "workspaces/workspace.h"

struct fixture {
	char root[64];
	char home[PATH_MAX]; /* the gateway's home: 0700, root's */
	char ws[PATH_MAX];   /* the workspace, inside it */
	char ro[64];         /* a read-only path in the view */
	uv_loop_t loop;
};

static struct fixture fx;

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st;
	(void)flag;
	(void)f;
	return remove(p);
}

static void put_mode(const char *dir, const char *name, const char *text, mode_t mode)
{
	char path[PATH_MAX + 64];
	int fd;

	snprintf(path, sizeof path, "%s/%s", dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	assert_int_equal(fchmod(fd, mode), 0);
	assert_int_equal(close(fd), 0);
}

static void path_in(char *out, size_t size, const char *dir, const char *name)
{
	snprintf(out, size, "%s/%s", dir, name);
}

static int setup(void **state)
{
	char p[PATH_MAX + 64], bwrap[PATH_MAX];
	struct sandbox_policy probe;

	(void)state;
	memset(&fx, 0, sizeof fx);
	uv_loop_init(&fx.loop);
	snprintf(fx.root, sizeof fx.root, "/tmp/sb-uid-XXXXXX");
	snprintf(fx.ro, sizeof fx.ro, "/tmp/sb-uid-ro-XXXXXX");
	if (!mkdtemp(fx.root) || !mkdtemp(fx.ro))
		return -1;
	chmod(fx.ro, 0755);
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
	memset(&probe, 0, sizeof probe);
	if (sandbox_find_bwrap(&probe, bwrap, sizeof bwrap) != SB_OK)
		fprintf(stderr, "test_sandbox_uid: bubblewrap is not installed here; skipped\n");
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	uv_run(&fx.loop, UV_RUN_DEFAULT);
	uv_loop_close(&fx.loop);
	nftw(fx.root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	nftw(fx.ro, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	return 0;
}

static void need_root_and_bwrap(void)
{
	struct sandbox_policy probe;
	char bwrap[PATH_MAX];

	memset(&probe, 0, sizeof probe);
	if (sandbox_find_bwrap(&probe, bwrap, sizeof bwrap) != SB_OK)
		HARNESS_SKIP("bubblewrap is not installed (scripts/deps.sh installs it)");
	if (geteuid() != 0)
		HARNESS_SKIP("not root: a gateway that is not root keeps its own uid");
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
	char out[8192];
};

static void on_spawned(void *ud, int rc, const struct tool_spawn_result *r)
{
	struct outcome *o = ud;

	o->done = true;
	o->rc = rc;
	o->exit_code = r->exit_code;
	snprintf(o->out, sizeof o->out, "%.*s", (int)r->output_len, r->output);
}

static int start(const struct sandbox_policy *p, const char *script, int64_t timeout_ms,
                 struct outcome *o)
{
	const char *argv[] = {"/bin/sh", "-c", script, NULL};
	struct tool_spawn_options opt;
	char why[512];
	int rc;

	memset(o, 0, sizeof *o);
	memset(&opt, 0, sizeof opt);
	opt.argv = argv;
	opt.cwd = fx.ws;
	opt.timeout_ms = timeout_ms;
	opt.max_output = sizeof o->out - 1;
	opt.sandbox = p;
	opt.why = why;
	opt.why_size = sizeof why;
	rc = tool_spawn(&fx.loop, &opt, on_spawned, o, NULL);
	if (rc != SB_OK)
		snprintf(o->out, sizeof o->out, "%s", why);
	return rc;
}

/* Runs `sh -c script` in the workspace under p; returns spawn's rc. */
static int run(const struct sandbox_policy *p, const char *script, struct outcome *o)
{
	int rc = start(p, script, 20000, o);

	if (rc != SB_OK)
		return rc;
	while (!o->done)
		uv_run(&fx.loop, UV_RUN_ONCE);
	return o->rc;
}

/* The uids (real, effective, saved, filesystem) of every process whose
 * command line holds marker, into uids (up to 16 processes); their number. */
static size_t uids_of(const char *marker, unsigned uids[][4])
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	size_t n = 0;

	assert_non_null(d);
	while ((de = readdir(d)) && n < 16) {
		char path[300], buf[4096], line[256];
		size_t len;
		FILE *f;

		if (de->d_name[0] < '0' || de->d_name[0] > '9')
			continue;
		snprintf(path, sizeof path, "/proc/%s/cmdline", de->d_name);
		if (!(f = fopen(path, "re")))
			continue;
		len = fread(buf, 1, sizeof buf - 1, f);
		fclose(f);
		for (size_t i = 0; i < len; i++)
			if (buf[i] == '\0')
				buf[i] = ' ';
		buf[len] = '\0';
		if (!strstr(buf, marker) || strstr(buf, "test_sandbox_uid"))
			continue;
		snprintf(path, sizeof path, "/proc/%s/status", de->d_name);
		if (!(f = fopen(path, "re")))
			continue;
		while (fgets(line, sizeof line, f))
			if (sscanf(line, "Uid: %u %u %u %u", &uids[n][0], &uids[n][1], &uids[n][2],
			           &uids[n][3]) == 4) {
				n++;
				break;
			}
		fclose(f);
	}
	closedir(d);
	return n;
}

static void test_command_is_the_sandbox_uid(void **state)
{
	struct sandbox_policy p;
	struct outcome o;
	char path[PATH_MAX + 64];
	unsigned uids[16][4];
	struct stat st;
	size_t n;

	(void)state;
	need_root_and_bwrap();
	policy_init(&p, SANDBOX_WORKSPACE_WRITE);
	/* the process, seen from outside while it runs: bwrap and the
	 * command's shell (both hold the marker in their command line) */
	path_in(path, sizeof path, fx.ws, "started");
	unlink(path);
	assert_int_equal(start(&p,
	                       ": sbuidmark; touch started; "
	                       "while [ ! -e stop ]; do sleep 0.05; done; echo stopped",
	                       20000, &o),
	                 SB_OK);
	while (!o.done && access(path, F_OK) != 0)
		uv_run(&fx.loop, UV_RUN_NOWAIT);
	assert_false(o.done);
	n = uids_of("sbuidmark", uids);
	assert_true(n >= 2);
	for (size_t i = 0; i < n; i++)
		for (int k = 0; k < 4; k++)
			if (uids[i][k] != SANDBOX_UID)
				fail_msg(
				    "a process of the command has uid %u outside its namespace, "
				    "not %u",
				    uids[i][k], SANDBOX_UID);
	put_mode(fx.ws, "stop", "", 0644);
	while (!o.done)
		uv_run(&fx.loop, UV_RUN_ONCE);
	assert_int_equal(o.rc, SB_OK);
	assert_string_equal(o.out, "stopped\n");
	/* a file it makes is the sandbox's uid's, not root's */
	assert_int_equal(run(&p, "echo mine > byme.txt && id -u", &o), SB_OK);
	assert_string_equal(o.out, "65534\n");
	path_in(path, sizeof path, fx.ws, "byme.txt");
	assert_int_equal(lstat(path, &st), 0);
	assert_int_equal(st.st_uid, SANDBOX_UID);
	assert_int_equal(st.st_gid, SANDBOX_UID);
	/* another uid given by the policy (security.sandbox_uid) */
	p.uid = 61000;
	p.gid = 61001;
	assert_int_equal(run(&p, "echo other > other.txt", &o), SB_OK);
	path_in(path, sizeof path, fx.ws, "other.txt");
	assert_int_equal(lstat(path, &st), 0);
	assert_int_equal(st.st_uid, 61000);
	assert_int_equal(st.st_gid, 61001);
	/* the whole workspace went to it, including byme.txt */
	path_in(path, sizeof path, fx.ws, "byme.txt");
	assert_int_equal(lstat(path, &st), 0);
	assert_int_equal(st.st_uid, 61000);
}

static void test_root_only_file_unreadable(void **state)
{
	struct sandbox_policy p;
	struct outcome o;
	const char *ro[1];
	char git[PATH_MAX + 16], script[2 * PATH_MAX];

	(void)state;
	need_root_and_bwrap();
	policy_init(&p, SANDBOX_WORKSPACE_WRITE);
	/* root's 0600 files where the ownership pass does not go: the
	 * workspace's .git (read-only inside) and a read-only path */
	path_in(git, sizeof git, fx.ws, ".git");
	mkdir(git, 0755);
	put_mode(git, "root-only", "root's own\n", 0600);
	put_mode(git, "HEAD", "ref: refs/heads/main\n", 0644);
	put_mode(fx.ro, "root-only", "root's own too\n", 0600);
	put_mode(fx.ro, "public", "for everyone\n", 0644);
	ro[0] = fx.ro;
	p.read_only = ro;
	p.n_read_only = 1;
	snprintf(script, sizeof script,
	         "cat .git/root-only; cat %s/root-only; cat .git/HEAD %s/public", fx.ro, fx.ro);
	assert_int_equal(run(&p, script, &o), SB_OK);
	assert_null(strstr(o.out, "root's own"));
	assert_non_null(strstr(o.out, ".git/root-only: Permission denied"));
	assert_non_null(strstr(o.out, "/root-only: Permission denied"));
	assert_non_null(strstr(o.out, "ref: refs/heads/main\nfor everyone\n"));
	path_in(script, sizeof script, git, "root-only");
	unlink(script);
	path_in(script, sizeof script, git, "HEAD");
	unlink(script);
	rmdir(git);
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

/* The gateway's own write tool (running as root, in the gateway). */
static void gateway_write(const char *path, const char *content)
{
	struct tool_ctx ctx;
	struct tool_outcome t = {0};
	struct tool_run *r = NULL;
	json_t *in = json_pack("{s:s,s:s}", "path", path, "content", content);

	memset(&ctx, 0, sizeof ctx);
	ctx.loop = &fx.loop;
	ctx.workspace = fx.ws;
	ctx.timeout_ms = 20000;
	ctx.agent_id = "main";
	assert_non_null(in);
	assert_int_equal(tool_write.call(&ctx, in, on_tool_done, &t, &r), SB_OK);
	while (!t.done)
		uv_run(&fx.loop, UV_RUN_ONCE);
	json_decref(in);
	if (t.rc != SB_OK || t.is_error)
		fail_msg("write %s: %s", path, t.content ? t.content : "");
	free(t.content);
}

static void test_gateway_writes_stay_writable(void **state)
{
	struct sandbox_policy p;
	struct outcome o;
	mode_t old = umask(077);

	(void)state;
	need_root_and_bwrap();
	policy_init(&p, SANDBOX_WORKSPACE_WRITE);
	/* made as root, under a strict umask: a new directory and a file */
	gateway_write("made/by/gateway.txt", "from the gateway\n");
	umask(old);
	assert_int_equal(run(&p,
	                     "cat made/by/gateway.txt && echo more >> made/by/gateway.txt && "
	                     "echo beside > made/by/mine.txt && mkdir made/new && "
	                     "cat made/by/gateway.txt made/by/mine.txt",
	                     &o),
	                 SB_OK);
	assert_int_equal(o.exit_code, 0);
	assert_string_equal(o.out, "from the gateway\nfrom the gateway\nmore\nbeside\n");
	/* and the gateway writes it again after the command */
	gateway_write("made/by/gateway.txt", "again\n");
	assert_int_equal(run(&p, "echo x >> made/by/gateway.txt && cat made/by/gateway.txt", &o),
	                 SB_OK);
	assert_string_equal(o.out, "again\nx\n");
}

static void test_git_inside(void **state)
{
	struct sandbox_policy p;
	struct outcome o;
	const char *mem[] = {"memory/notes.md"};
	char cmd[3 * PATH_MAX], why[512], commit[41] = "";
	size_t created = 0;

	(void)state;
	need_root_and_bwrap();
	/* the gateway's own repository: scaffolded and committed by root */
	assert_int_equal(workspace_init(fx.ws, "main", &created, commit, why, sizeof why), SB_OK);
	assert_true(commit[0]);
	policy_init(&p, SANDBOX_WORKSPACE_WRITE);
	assert_int_equal(run(&p,
	                     "echo more >> AGENTS.md && git status --porcelain AGENTS.md && "
	                     "git diff --stat && mkdir -p memory && echo learnt > memory/notes.md",
	                     &o),
	                 SB_OK);
	assert_int_equal(o.exit_code, 0);
	assert_non_null(strstr(o.out, " M AGENTS.md\n"));
	assert_non_null(strstr(o.out, "1 file changed, 1 insertion(+)"));
	/* the work tree is the sandbox's uid's now; the gateway (libgit2, as
	 * root) still commits in it, and a command reads the commit */
	commit[0] = '\0';
	assert_int_equal(memory_commit(fx.ws, mem, 1, "a note", commit, why, sizeof why), SB_OK);
	assert_true(commit[0]);
	assert_int_equal(run(&p, "git log -1 --format=%H%n%s && git status --porcelain memory", &o),
	                 SB_OK);
	assert_int_equal(o.exit_code, 0);
	snprintf(cmd, sizeof cmd, "%s\na note\n", commit);
	assert_string_equal(o.out, cmd);
	/* the operator's own git, as root on the host and with no
	 * safe.directory, still takes the work tree: its top is the
	 * gateway's (the sandbox's group writes it) */
	{
		struct stat st;

		assert_int_equal(stat(fx.ws, &st), 0);
		assert_int_equal(st.st_uid, getuid());
		assert_int_equal(st.st_gid, sandbox_gid_of(&p));
		assert_int_equal(st.st_mode & 0070, 0070);
	}
	snprintf(cmd, sizeof cmd,
	         "cd %s && HOME=/nonexistent GIT_CONFIG_NOSYSTEM=1 git status --porcelain "
	         ">/dev/null 2>&1",
	         fx.ws);
	if (system(cmd) != 0)
		fail_msg("the operator's git refuses the workspace: %s", cmd);
	snprintf(cmd, sizeof cmd, "rm -rf %s/.git", fx.ws);
	assert_int_equal(system(cmd), 0);
}

static void test_process_limit_without_cgroup(void **state)
{
	struct sandbox_policy p;
	struct outcome o;
	int rc;

	(void)state;
	need_root_and_bwrap();
	policy_init(&p, SANDBOX_WORKSPACE_WRITE);
	p.max_processes = 24;
	p.no_cgroup = true;
	/* first a bounded probe: 40 sleeps against a limit of 24; only if
	 * the limit holds does the fork bomb run */
	assert_int_equal(run(&p,
	                     "i=0; while [ $i -lt 40 ]; do sleep 2 & i=$((i+1)); done 2>&1; "
	                     "echo started; wait",
	                     &o),
	                 SB_OK);
	if (!strstr(o.out, "fork") && !strstr(o.out, "Resource temporarily unavailable"))
		fail_msg("40 processes started under a limit of 24 without a cgroup (the fork "
		         "bomb is not run): %s",
		         o.out);
	rc = start(&p,
	           "exec bash -c 'sbubomb() { sbubomb | sbubomb & }; sbubomb; sleep 1; echo still "
	           "here'",
	           4000, &o);
	assert_int_equal(rc, SB_OK);
	while (!o.done)
		uv_run(&fx.loop, UV_RUN_ONCE);
	assert_true(o.rc == SB_OK || o.rc == SB_ERR_TIMEOUT);
	if (!strstr(o.out, "Resource temporarily unavailable"))
		fail_msg("the bomb did not hit the limit: %s", o.out);
	assert_int_equal(system("true"), 0);
	assert_int_equal(
	    system("sleep 1; ! grep -l 'sb[u]bomb' /proc/[0-9]*/cmdline >/dev/null 2>&1"), 0);
}

static pthread_t own_thread;
static int own_calls;

static void on_own(void)
{
	own_thread = pthread_self();
	own_calls++;
}

/* The bash tool, as a root gateway's run calls it: the workspace walk runs
 * once, on a pool thread, not on the loop thread, and then the command;
 * a cancel while the walk runs answers once and runs nothing. */
static void test_bash_walks_off_the_loop(void **state)
{
	struct sandbox_policy p;
	struct tool_ctx ctx;
	struct tool_outcome t = {0};
	struct tool_run *r = NULL;
	char path[PATH_MAX + 64];
	json_t *in;

	(void)state;
	need_root_and_bwrap();
	policy_init(&p, SANDBOX_WORKSPACE_WRITE);
	memset(&ctx, 0, sizeof ctx);
	ctx.loop = &fx.loop;
	ctx.workspace = fx.ws;
	ctx.timeout_ms = 20000;
	ctx.agent_id = "main";
	ctx.sandbox = &p;
	gateway_write("walked/by/tool.txt", "tool\n");
	sandbox_test_on_own(on_own);
	own_calls = 0;
	in = json_pack("{s:s}", "command",
	               "echo bash >> walked/by/tool.txt && cat walked/by/tool.txt");
	assert_non_null(in);
	assert_int_equal(tool_bash.call(&ctx, in, on_tool_done, &t, &r), SB_OK);
	json_decref(in);
	while (!t.done)
		uv_run(&fx.loop, UV_RUN_ONCE);
	assert_int_equal(t.rc, SB_OK);
	assert_false(t.is_error);
	assert_non_null(strstr(t.content, "tool\nbash\n"));
	assert_non_null(strstr(t.content, "exit code 0"));
	free(t.content);
	assert_int_equal(own_calls, 1);
	assert_false(pthread_equal(own_thread, pthread_self()));
	/* cancelled before the command starts */
	memset(&t, 0, sizeof t);
	in = json_pack("{s:s}", "command", "touch cancelled-ran");
	assert_non_null(in);
	assert_int_equal(tool_bash.call(&ctx, in, on_tool_done, &t, &r), SB_OK);
	json_decref(in);
	r->cancel(r);
	assert_true(t.done);
	assert_int_equal(t.rc, SB_ERR_ABORTED);
	free(t.content);
	uv_run(&fx.loop, UV_RUN_DEFAULT);
	path_in(path, sizeof path, fx.ws, "cancelled-ran");
	assert_int_not_equal(access(path, F_OK), 0);
	sandbox_test_on_own(NULL);
}

static void test_ownership_pass_leaves(void **state)
{
	struct sandbox_policy p;
	char path[PATH_MAX + 64], link2[PATH_MAX + 64], sub[PATH_MAX + 16];
	const char *more[1];
	size_t seen = 0, changed = 0;
	struct stat st;

	(void)state;
	if (geteuid() != 0)
		HARNESS_SKIP("not root: chown needs root");
	policy_init(&p, SANDBOX_WORKSPACE_WRITE);
	/* a private file of the gateway's inside the workspace (hidden),
	 * .git, a file with a second link, a symlink out, a nested dir */
	put_mode(fx.ws, "private.yaml", "secret: 1\n", 0600);
	path_in(path, sizeof path, fx.ws, "private.yaml");
	more[0] = path;
	p.hide_more = more;
	p.n_hide_more = 1;
	path_in(sub, sizeof sub, fx.ws, ".git");
	mkdir(sub, 0700);
	put_mode(sub, "config", "[core]\n", 0600);
	put_mode(fx.ws, "linked.txt", "two names\n", 0600);
	path_in(link2, sizeof link2, fx.root, "linked-elsewhere.txt");
	path_in(sub, sizeof sub, fx.ws, "linked.txt");
	assert_int_equal(link(sub, link2), 0);
	path_in(sub, sizeof sub, fx.ws, "out");
	unlink(sub);
	assert_int_equal(symlink(fx.home, sub), 0);
	path_in(sub, sizeof sub, fx.ws, "deep");
	mkdir(sub, 0700);
	put_mode(sub, "leaf.txt", "leaf\n", 0600);
	assert_int_equal(sandbox_own(&p, fx.ws, 62000, 62000, &seen, &changed), SB_OK);
	assert_true(changed >= 4); /* the workspace's group, deep, leaf.txt, the link out */
	assert_int_equal(lstat(path, &st), 0);
	assert_int_equal(st.st_uid, 0); /* hidden */
	path_in(sub, sizeof sub, fx.ws, ".git/config");
	assert_int_equal(lstat(sub, &st), 0);
	assert_int_equal(st.st_uid, 0);
	path_in(sub, sizeof sub, fx.ws, ".git");
	assert_int_equal(lstat(sub, &st), 0);
	assert_int_equal(st.st_uid, 0);
	assert_int_equal(lstat(link2, &st), 0);
	assert_int_equal(st.st_uid, 0); /* two links: left */
	assert_int_equal(lstat(fx.home, &st), 0);
	assert_int_equal(st.st_uid, 0); /* the symlink's target */
	path_in(sub, sizeof sub, fx.ws, "out");
	assert_int_equal(lstat(sub, &st), 0);
	assert_int_equal(st.st_uid, 62000); /* the link itself */
	path_in(sub, sizeof sub, fx.ws, "deep/leaf.txt");
	assert_int_equal(lstat(sub, &st), 0);
	assert_int_equal(st.st_uid, 62000);
	/* the workspace itself stays the gateway's; its group is the
	 * sandbox's and may write */
	assert_int_equal(lstat(fx.ws, &st), 0);
	assert_int_equal(st.st_uid, 0);
	assert_int_equal(st.st_gid, 62000);
	assert_int_equal(st.st_mode & 0070, 0070);
	/* a second pass finds nothing to change */
	assert_int_equal(sandbox_own(&p, fx.ws, 62000, 62000, &seen, &changed), SB_OK);
	assert_int_equal(changed, 0);
	unlink(link2);
	path_in(sub, sizeof sub, fx.ws, "linked.txt");
	unlink(sub);
	unlink(path);
	path_in(sub, sizeof sub, fx.ws, "out");
	unlink(sub);
	path_in(sub, sizeof sub, fx.ws, ".git/config");
	unlink(sub);
	path_in(sub, sizeof sub, fx.ws, ".git");
	rmdir(sub);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_command_is_the_sandbox_uid),
	    cmocka_unit_test(test_root_only_file_unreadable),
	    cmocka_unit_test(test_gateway_writes_stay_writable),
	    cmocka_unit_test(test_git_inside),
	    cmocka_unit_test(test_process_limit_without_cgroup),
	    cmocka_unit_test(test_bash_walks_off_the_loop),
	    cmocka_unit_test(test_ownership_pass_leaves),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
