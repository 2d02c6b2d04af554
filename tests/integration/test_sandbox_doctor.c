/*
 * test_sandbox_doctor.c - the sandbox through the real binary: `switchboard
 * agent run` with a scripted model whose bash commands look around from
 * inside (the runner's policy: the gateway's home hidden, the workspace
 * writable, .git read-only, no network, no capabilities) and the hard deny
 * list refusing a read of the home's config; then `switchboard doctor`.
 *
 * Without bwrap the sandboxed part is skipped (with a message) and doctor
 * must report the failure; with a broken bwrap the test fails, as the
 * gateway would refuse its tools there.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "agents/safety/sandbox.h"
#include "harness.h"

struct fixture {
	char home[512];
	bool have_bwrap;
	bool works;
	int port;
};

static struct fixture fx;

/* The home's path and .git are computed inside the command (printf), so
 * the gates cannot see them: only the sandbox hides the home and keeps .git
 * read-only. */
#define SCRIPT_FMT                                                                                 \
	"steps:\n"                                                                                 \
	"  - match: look\n"                                                                        \
	"    tool_calls:\n"                                                                        \
	"      - name: bash\n"                                                                     \
	"        input:\n"                                                                         \
	"          command: >-\n"                                                                  \
	"            echo uid=$(id -u);\n"                                                         \
	"            grep CapEff /proc/self/status;\n"                                             \
	"            echo ifaces=$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ');\n"         \
	"            echo home=$(ls -A \"$(printf %%s/%%s %s %s)\" | tr '\\n' ,);\n"               \
	"            touch written.txt && echo wrote;\n"                                           \
	"            touch \"$(printf %%s .gi)t/hooked\" 2>&1 || echo git-ro\n"                    \
	"  - text: looked\n"                                                                       \
	"  - match: peek\n"                                                                        \
	"    tool_calls:\n"                                                                        \
	"      - {name: bash, input: {command: \"cat ../../switchboard.yaml\"}}\n"                 \
	"  - text: refused as expected\n"

static int setup(void **state)
{
	const char *init[] = {"init", NULL};
	char path[1024], cfg[1024], why[512], bwrap[512], script[4096], parent[512];
	const char *name;
	struct sandbox_policy p;

	(void)state;
	memset(&fx, 0, sizeof fx);
	memset(&p, 0, sizeof p);
	fx.have_bwrap = sandbox_find_bwrap(&p, bwrap, sizeof bwrap) == 0;
	if (fx.have_bwrap && sandbox_probe(&p, why, sizeof why) != 0) {
		fprintf(stderr, "test_sandbox_doctor: %s is installed but broken: %s\n", bwrap,
		        why);
		return -1;
	}
	fx.works = fx.have_bwrap;
	if (!fx.have_bwrap)
		fprintf(stderr, "test_sandbox_doctor: no bubblewrap here; sandboxed runs are "
		                "skipped, doctor must say so\n");
	if (harness_tmpdir(fx.home, sizeof fx.home) != 0)
		return -1;
	fx.port = harness_free_port();
	snprintf(cfg, sizeof cfg,
	         "gateway: {port: %d}\n"
	         "providers:\n"
	         "  - {id: s, api: scripted, script: script.yaml}\n"
	         "agents:\n"
	         "  - {id: main, default: true, model: s/m}\n"
	         "  - {id: open, model: s/m, sandbox: full}\n",
	         fx.port);
	snprintf(path, sizeof path, "%s/switchboard.yaml", fx.home);
	if (harness_write_file(path, cfg) != 0)
		return -1;
	snprintf(parent, sizeof parent, "%s", fx.home);
	name = strrchr(fx.home, '/') + 1;
	*strrchr(parent, '/') = '\0';
	snprintf(script, sizeof script, SCRIPT_FMT, parent, name);
	snprintf(path, sizeof path, "%s/script.yaml", fx.home);
	if (harness_write_file(path, script) != 0)
		return -1;
	if (harness_cli(fx.home, NULL, init) != 0)
		return -1;
	snprintf(path, sizeof path, "%s/workspaces/main/.git", fx.home);
	mkdir(path, 0755);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	harness_rmrf(fx.home);
	return 0;
}

/* The tool results of the last run of agent main, as one string. */
static char *last_tool_results(void)
{
	char dir[1024], path[2048];
	struct buf t;
	char *dump = NULL;

	snprintf(dir, sizeof dir, "%s/agents/main/sessions", fx.home);
	/* the main session's transcript: the only file there */
	{
		FILE *p;
		char cmd[1200], name[512] = "";

		snprintf(cmd, sizeof cmd, "ls %s", dir);
		p = popen(cmd, "r");
		assert_non_null(p);
		if (!fgets(name, sizeof name, p))
			name[0] = '\0';
		pclose(p);
		name[strcspn(name, "\n")] = '\0';
		snprintf(path, sizeof path, "%s/%s", dir, name);
	}
	buf_init(&t, 16 << 20);
	assert_int_equal(harness_read_file(path, &t), 0);
	dump = strdup(t.data ? t.data : "");
	buf_free(&t);
	return dump;
}

static void test_run_inside_the_sandbox(void **state)
{
	char *tr, seen[600];
	struct buf out;
	const char *look[] = {"agent", "run", "--agent", "main", "look around", NULL};
	const char *peek[] = {"agent", "run", "--agent", "main", "peek at the config", NULL};

	(void)state;
	if (!fx.works)
		HARNESS_SKIP("bubblewrap is not installed (scripts/deps.sh installs it)");
	buf_init(&out, 1 << 20);
	assert_int_equal(harness_cli(fx.home, &out, look), 0);
	assert_non_null(strstr(out.data, "looked"));
	buf_free(&out);
	tr = last_tool_results();
	if (geteuid() == 0)
		assert_non_null(strstr(tr, "uid=65534"));
	assert_non_null(strstr(tr, "CapEff:\\t0000000000000000"));
	assert_non_null(strstr(tr, "ifaces=lo\\n"));
	assert_non_null(strstr(tr, "wrote"));
	assert_non_null(strstr(tr, "git-ro"));
	/* the home, seen from inside: only the way to the workspace */
	snprintf(seen, sizeof seen, "home=workspaces,");
	assert_non_null(strstr(tr, seen));
	assert_null(strstr(tr, "switchboard.yaml,"));
	assert_null(strstr(tr, "gateway.token"));
	free(tr);

	buf_init(&out, 1 << 20);
	assert_int_equal(harness_cli(fx.home, &out, peek), 0);
	assert_non_null(strstr(out.data, "refused as expected"));
	buf_free(&out);
	tr = last_tool_results();
	assert_non_null(strstr(tr, "permission denied"));
	assert_non_null(strstr(tr, "home directory"));
	free(tr);
}

static void test_doctor(void **state)
{
	struct buf out;
	const char *doctor[] = {"doctor", NULL};
	int code;

	(void)state;
	buf_init(&out, 1 << 20);
	code = harness_cli(fx.home, &out, doctor);
	if (fx.works) {
		assert_int_equal(code, 0);
		assert_non_null(strstr(out.data, "ok    sandbox: "));
		assert_non_null(strstr(out.data, "ok    agent main: sandbox: workspace-write"));
	} else {
		assert_int_equal(code, 1);
		assert_non_null(
		    strstr(out.data, "fail  sandbox: bubblewrap (bwrap) is not installed"));
		assert_non_null(strstr(out.data, "fail  agent main"));
	}
	assert_non_null(strstr(out.data, "warn  agent open: sandbox: full"));
	assert_non_null(strstr(out.data, "ok    workspace: every agent's workspace"));
	assert_non_null(strstr(out.data, "ok    port: 127.0.0.1:"));
	assert_non_null(strstr(out.data, "  limits: open files"));
	buf_free(&out);

	/* --json: one object a line, the same findings */
	{
		const char *dj[] = {"doctor", "--json", NULL};
		char *line, *save = NULL;
		int n = 0;

		buf_init(&out, 1 << 20);
		(void)harness_cli(fx.home, &out, dj);
		for (line = strtok_r(out.data, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
			json_t *o = json_loads(line, 0, NULL);

			if (!o)
				continue; /* what stderr added */
			assert_non_null(json_string_value(json_object_get(o, "level")));
			assert_non_null(json_string_value(json_object_get(o, "area")));
			assert_non_null(json_string_value(json_object_get(o, "text")));
			n++;
			json_decref(o);
		}
		assert_true(n >= 6);
		buf_free(&out);
	}

	/* the port held by another program: the gateway would not start */
	{
		struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)fx.port)};
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

		a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		assert_true(fd >= 0);
		assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
		assert_int_equal(listen(fd, 4), 0);
		buf_init(&out, 1 << 20);
		code = harness_cli(fx.home, &out, doctor);
		close(fd);
		assert_int_equal(code, 1);
		if (!strstr(out.data, "fail  port: 127.0.0.1:") ||
		    !strstr(out.data, "is held by another program"))
			fail_msg("doctor with the port taken:\n%s", out.data);
		buf_free(&out);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_run_inside_the_sandbox),
	    cmocka_unit_test(test_doctor),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
