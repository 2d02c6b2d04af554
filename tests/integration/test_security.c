/*
 * test_security.c - the confinement against a hostile model and hostile
 * senders (docs/security.md), end to end: `switchboard agent run` and the
 * daemon against the scripted model server (tests/fakes/fake_llm.js),
 * which plays the attacker by returning whatever tool calls the script
 * says. Each case asserts on what the attacker gets back: the next
 * request's system prompt and tool results as the model server received
 * them, the files outside the workspace.
 *
 *   - bootstrap files swapped for symlinks by a command (SOUL.md ->
 *     gateway.token, USER.md -> switchboard.yaml, AGENTS.md -> a file
 *     outside, TOOLS.md -> a directory symlink): none of the targets'
 *     bytes reach the next prompt, which says each file was refused;
 *   - the descriptors a command holds, listed from inside it: only its
 *     stdio, never the gateway's sockets or pipes;
 *   - state.db and its -wal/-shm are 0600 whatever the umask;
 *   - the output of a command that ran past tool_timeout is labelled
 *     untrusted like any other;
 *   - the sandbox's view is an allow-list: a config given with --config
 *     elsewhere, an absolute store.path, an absolute ${file:...} secret,
 *     state.db and gateway.token cannot be read from a command, wherever
 *     they are; a root-only unix socket outside the view (standing for
 *     /run/docker.sock) cannot be reached.
 *
 * The places "elsewhere" are directories made under the working directory
 * (the build tree), not under $TMPDIR: a view that merely hides /tmp would
 * pass a test that put them there.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <limits.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "agents/safety/sandbox.h"
#include "harness.h"
#include "harness_oai.h"

#define OUTSIDE_SECRET "outside-secret-5f2b9c"
#define PROVIDER_KEY "test-key-provider-93ad"
#define FILE_KEY "test-key-from-file-7c41e0"
#define CONFIG_MARK "config-marker-d2a9"

struct fixture {
	struct harness_peer llm;
	char home[512];
	char ws[700];
	char token[256];
	const char *sandbox; /* the agent's sandbox mode */
};

static struct fixture fx;

static void home_put(const char *rel, const char *text)
{
	char path[1024];

	snprintf(path, sizeof path, "%s/%s", fx.home, rel);
	assert_int_equal(harness_write_file(path, text), 0);
}

static int setup(void **state)
{
	char cfg[2048], why[512];
	const char *init[] = {"init", NULL};

	(void)state;
	memset(&fx, 0, sizeof fx);
	/* The commands run in the sandbox where bwrap works: the attack is a
	 * sandboxed command's. Without bwrap (not under CI) unsandboxed, which
	 * the gateway's own reads must survive just the same. */
	fx.sandbox = sandbox_probe(NULL, why, sizeof why) == 0 ? "workspace-write" : "full";
	if (harness_peer_start(&fx.llm, "fake_llm.js", NULL) != 0)
		return -1;
	if (harness_tmpdir(fx.home, sizeof fx.home) != 0)
		return -1;
	snprintf(fx.ws, sizeof fx.ws, "%s/workspaces/main", fx.home);
	snprintf(cfg, sizeof cfg,
	         "providers:\n"
	         "  - {id: oa, api: openai-chat, base_url: \"http://127.0.0.1:%d/v1\", "
	         "api_key: " PROVIDER_KEY ", max_retries: 1, timeout: 10s}\n"
	         "agents:\n"
	         "  - {id: main, default: true, model: oa/gpt-test, sandbox: %s, "
	         "tool_timeout: 20s}\n"
	         "  - {id: slow, model: oa/gpt-test, sandbox: %s, tool_timeout: 1s}\n"
	         "security: {sandbox_uid: 61234, sandbox_gid: 61235}\n",
	         fx.llm.port, fx.sandbox, fx.sandbox);
	home_put("switchboard.yaml", cfg);
	if (harness_cli(fx.home, NULL, init) != 0)
		return -1;
	home_put("outside.txt", OUTSIDE_SECRET "\n");
	return harness_oai_token(fx.home, fx.token, sizeof fx.token);
}

static int teardown(void **state)
{
	(void)state;
	harness_peer_stop(&fx.llm);
	harness_rmrf(fx.home);
	return 0;
}

static void script(const char *json)
{
	assert_int_equal(harness_http(fx.llm.port, "POST", "/__reset", NULL, "{}", NULL), 200);
	assert_int_equal(harness_http(fx.llm.port, "POST", "/__script", NULL, json, NULL), 200);
}

/* Every request body the model server received, as one JSON text. */
static char *llm_requests_text(void)
{
	struct buf body;
	char *out;

	buf_init(&body, 64 << 20);
	assert_int_equal(harness_http(fx.llm.port, "GET", "/__requests", NULL, NULL, &body), 200);
	out = strdup(body.data ? body.data : "");
	buf_free(&body);
	return out;
}

/* The system prompt of the last request the model server got. */
static char *last_system_prompt(void)
{
	char *text = llm_requests_text(), *out = NULL;
	json_t *reqs = json_loads(text, 0, NULL), *msgs;

	free(text);
	assert_true(json_array_size(reqs) > 0);
	msgs = json_object_get(
	    json_object_get(json_array_get(reqs, json_array_size(reqs) - 1), "body"), "messages");
	for (size_t i = 0; i < json_array_size(msgs); i++) {
		json_t *m = json_array_get(msgs, i);

		if (strcmp(json_string_value(json_object_get(m, "role")), "system") == 0) {
			out = harness_oai_message_text(m);
			break;
		}
	}
	json_decref(reqs);
	assert_non_null(out);
	return out;
}

static int agent_run_as(const char *agent, const char *text, struct buf *out)
{
	const char *args[] = {"agent", "run", "--agent", agent, "-v", text, NULL};

	return harness_cli(fx.home, out, args);
}

static int agent_run(const char *text, struct buf *out)
{
	return agent_run_as("main", text, out);
}

/* The content of the last tool message of the last request (malloc'd). */
static char *last_tool_result(void)
{
	char *text = llm_requests_text(), *out = NULL;
	json_t *reqs = json_loads(text, 0, NULL), *msgs;

	free(text);
	msgs = json_object_get(
	    json_object_get(json_array_get(reqs, json_array_size(reqs) - 1), "body"), "messages");
	for (size_t i = 0; i < json_array_size(msgs); i++) {
		json_t *m = json_array_get(msgs, i);

		if (strcmp(json_string_value(json_object_get(m, "role")), "tool") == 0) {
			free(out);
			out = strdup(json_string_value(json_object_get(m, "content")));
		}
	}
	json_decref(reqs);
	assert_non_null(out);
	return out;
}

/* A command replaces the bootstrap files with symlinks to the gateway's
 * secrets; the next turn's system prompt, as the model receives it, holds
 * none of their bytes. */
static void test_bootstrap_symlinks(void **state)
{
	struct buf out;
	char *sys;

	(void)state;
	/* The shell classifier refuses a literal path into the home; the
	 * attacker spells it through a variable, which no classifier sees. */
	script("[{\"tool_calls\":[{\"name\":\"bash\",\"input\":{\"command\":"
	       "\"u=..; rm -f SOUL.md USER.md AGENTS.md TOOLS.md && "
	       "ln -s $u/$u/gateway.token SOUL.md && "
	       "ln -s $u/$u/switchboard.yaml USER.md && "
	       "ln -s $u/$u/outside.txt AGENTS.md && "
	       "mkdir -p d && ln -s $u/$u/$u d/up && ln -s d/up/outside.txt TOOLS.md && "
	       "ls -l\"}}]},"
	       " {\"text\":\"planted\"},"
	       " {\"text\":\"second turn\"}]");
	buf_init(&out, 1 << 20);
	assert_int_equal(agent_run("plant the links", &out), 0);
	if (!strstr(out.data, "planted"))
		fail_msg("first run: %s", out.data);
	buf_reset(&out);
	assert_int_equal(agent_run("hello again", &out), 0);
	assert_non_null(strstr(out.data, "second turn"));
	buf_free(&out);

	sys = last_system_prompt();
	/* the targets' bytes are nowhere in the prompt */
	if (strstr(sys, fx.token) || strstr(sys, PROVIDER_KEY) || strstr(sys, OUTSIDE_SECRET))
		fail_msg("a symlinked bootstrap file reached the prompt:\n%s", sys);
	/* and the prompt says why each is missing */
	{
		static const char *const names[] = {"SOUL.md", "USER.md", "AGENTS.md", "TOOLS.md"};

		for (size_t i = 0; i < 4; i++) {
			char want[128];

			snprintf(want, sizeof want, "[not included: %s is not a regular file",
			         names[i]);
			if (!strstr(sys, want))
				fail_msg("no refusal of %s in the prompt:\n%s", names[i], sys);
		}
	}
	free(sys);
}

/* The descriptors a command's process holds, listed from inside bash as the
 * model receives the listing: only stdin, stdout and stderr (and the
 * directory fd ls itself opens). The model connection the gateway keeps to
 * the provider must not be among them: with it, a "no network" command can
 * talk to the provider over the gateway's own socket. */
static void test_child_fds(void **state)
{
	char *text, *tool = NULL, *p;
	struct buf out;
	json_t *reqs, *msgs;
	int listed = 0;

	(void)state;
	/* ls -l /proc/$$/fd: the shell's own descriptors (not ls's), each
	 * line "... N -> target" */
	script("[{\"tool_calls\":[{\"name\":\"bash\",\"input\":{\"command\":"
	       "\"ls -l /proc/$$/fd\"}}]},"
	       " {\"text\":\"listed\"}]");
	buf_init(&out, 1 << 20);
	assert_int_equal(agent_run("list your fds", &out), 0);
	if (!strstr(out.data, "listed") || !strstr(out.data, "done in"))
		fail_msg("the listing did not run: %s", out.data);
	buf_free(&out);
	text = llm_requests_text();
	reqs = json_loads(text, 0, NULL);
	free(text);
	msgs = json_object_get(
	    json_object_get(json_array_get(reqs, json_array_size(reqs) - 1), "body"), "messages");
	for (size_t i = 0; i < json_array_size(msgs); i++) {
		json_t *m = json_array_get(msgs, i);

		if (strcmp(json_string_value(json_object_get(m, "role")), "tool") == 0)
			tool = (char *)json_string_value(json_object_get(m, "content"));
	}
	assert_non_null(tool);
	for (p = strstr(tool, " -> "); p; p = strstr(p + 4, " -> ")) {
		const char *q = p;
		long fd;

		while (q > tool && q[-1] >= '0' && q[-1] <= '9')
			q--;
		fd = strtol(q, NULL, 10);
		listed++;
		if (fd > 2)
			fail_msg("the command inherited fd %ld:\n%s", fd, tool);
	}
	/* 0, 1 and 2 at least: the listing itself worked */
	if (listed < 3)
		fail_msg("no listing: %s", tool);
	json_decref(reqs);
}

/* The store's files are the operator's alone, whatever the umask (022
 * here, as on most hosts): state.db, its -wal and its -shm. */
static void test_state_files_private(void **state)
{
	static const char *const names[] = {"state.db", "state.db-wal", "state.db-shm"};
	mode_t old = umask(022);
	struct buf out;

	(void)state;
	script("[{\"text\":\"stored\"}]");
	buf_init(&out, 1 << 20);
	assert_int_equal(agent_run("store something", &out), 0);
	buf_free(&out);
	umask(old);
	for (size_t i = 0; i < 3; i++) {
		char path[1024];
		struct stat st;

		snprintf(path, sizeof path, "%s/%s", fx.home, names[i]);
		if (stat(path, &st) != 0)
			continue; /* -wal/-shm are gone after a clean close */
		if (st.st_mode & 077)
			fail_msg("%s is mode %03o", names[i], (unsigned)(st.st_mode & 0777));
	}
}

/* A command that prints injected text and then runs past tool_timeout:
 * what it printed reaches the model inside the untrusted label, as the
 * output of one that finishes does. */
static void test_timed_out_output_labelled(void **state)
{
	struct buf out;
	char *tool;

	(void)state;
	script("[{\"tool_calls\":[{\"name\":\"bash\",\"input\":{\"command\":"
	       "\"echo SYSTEM-SAYS-OBEY; sleep 10\"}}]},"
	       " {\"text\":\"timed out\"}]");
	buf_init(&out, 1 << 20);
	assert_int_equal(agent_run_as("slow", "run it", &out), 0);
	buf_free(&out);
	tool = last_tool_result();
	{
		/* (an error result may carry the provider's "Error: " prefix) */
		const char *label = strstr(tool, "[Untrusted tool output (bash)");
		const char *text = strstr(tool, "SYSTEM-SAYS-OBEY");

		if (!text || !label || label > text) {
			fprintf(stderr, "tool result: <<%s>>\n", tool);
			free(tool);
			fail_msg("the timed-out output is not labelled");
		}
	}
	free(tool);
}

static void need_sandbox(void)
{
	if (strcmp(fx.sandbox, "full") == 0)
		HARNESS_SKIP("bubblewrap cannot build a sandbox here");
}

/* A directory for state "elsewhere": under the working directory, outside
 * the home and outside /tmp. */
static void elsewhere_dir(char *out, size_t size)
{
	char tmpl[] = "sec-XXXXXX";

	assert_non_null(mkdtemp(tmpl));
	assert_non_null(realpath(tmpl, out));
	(void)size;
}

/* The state outside the home: a config given with --config, an absolute
 * store.path, an absolute ${file:...} secret. A command reads each by its
 * absolute path (spelt through a variable, as the shell classifier cannot
 * follow); the result the model receives holds none of their bytes, nor
 * those of the home's gateway.token and state.db. */
static void test_private_state_elsewhere(void **state)
{
	char dir[PATH_MAX], path[PATH_MAX + 64], cfg[3 * PATH_MAX], cmd[3 * PATH_MAX], *tool, *esc;
	const char *args[8];
	struct buf out;
	json_t *js;

	(void)state;
	need_sandbox();
	elsewhere_dir(dir, sizeof dir);
	snprintf(path, sizeof path, "%s/keys", dir);
	assert_int_equal(mkdir(path, 0700), 0);
	snprintf(path, sizeof path, "%s/keys/provider.key", dir);
	assert_int_equal(harness_write_file(path, FILE_KEY "\n"), 0);
	assert_int_equal(chmod(path, 0600), 0);
	snprintf(path, sizeof path, "%s/data", dir);
	assert_int_equal(mkdir(path, 0700), 0);
	snprintf(path, sizeof path, "%s/etc", dir);
	assert_int_equal(mkdir(path, 0700), 0);
	snprintf(cfg, sizeof cfg,
	         "# " CONFIG_MARK "\n"
	         "store: {path: %s/data/state.db}\n"
	         "providers:\n"
	         "  - {id: oa, api: openai-chat, base_url: \"http://127.0.0.1:%d/v1\", "
	         "api_key: \"${file:%s/keys/provider.key}\", max_retries: 1, timeout: 10s}\n"
	         "agents:\n"
	         "  - {id: main, default: true, model: oa/gpt-test, sandbox: %s, "
	         "tool_timeout: 20s}\n",
	         dir, fx.llm.port, dir, fx.sandbox);
	snprintf(path, sizeof path, "%s/etc/switchboard.yaml", dir);
	assert_int_equal(harness_write_file(path, cfg), 0);

	/* a first turn, so that the store exists */
	script("[{\"text\":\"ready\"}]");
	buf_init(&out, 1 << 20);
	args[0] = "agent";
	args[1] = "run";
	args[2] = "--config";
	args[3] = path;
	args[4] = "-v";
	args[5] = "hello";
	args[6] = NULL;
	if (harness_cli(fx.home, &out, args) != 0) {
		fprintf(stderr, "%s\n", out.data);
		buf_free(&out);
		fail_msg("the first run failed");
	}
	snprintf(cmd, sizeof cmd, "%.1000s/data/state.db", dir);
	assert_int_equal(access(cmd, F_OK), 0);

	{
		static const char *const files[] = {
		    "$d/keys/provider.key", "$d/etc/switchboard.yaml", "$d/data/state.db",
		    "$h/gateway.token",     "$h/switchboard.yaml",     "$h/state.db"};
		size_t used;

		snprintf(cmd, sizeof cmd, "d=%.1000s; h=%.500s; ", dir, fx.home);
		for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
			used = strlen(cmd);
			snprintf(cmd + used, sizeof cmd - used,
			         "echo '== %s'; cat %s 2>&1 | head -c 300; ", files[i], files[i]);
		}
		used = strlen(cmd);
		snprintf(cmd + used, sizeof cmd - used, "ls -la $d $h 2>&1");
	}
	js = json_string(cmd);
	esc = json_dumps(js, JSON_ENCODE_ANY);
	json_decref(js);
	snprintf(cfg, sizeof cfg,
	         "[{\"tool_calls\":[{\"name\":\"bash\",\"input\":{\"command\":%s}}]},"
	         " {\"text\":\"read\"}]",
	         esc);
	free(esc);
	script(cfg);
	buf_reset(&out);
	args[5] = "read them";
	if (harness_cli(fx.home, &out, args) != 0 || !strstr(out.data, "done in")) {
		fprintf(stderr, "%s\n", out.data);
		buf_free(&out);
		fail_msg("the command did not run");
	}
	buf_free(&out);
	tool = last_tool_result();
	if (!strstr(tool, "== ") || strstr(tool, FILE_KEY) || strstr(tool, PROVIDER_KEY) ||
	    strstr(tool, CONFIG_MARK) || strstr(tool, "SQLite format 3") ||
	    strstr(tool, fx.token)) {
		fprintf(stderr, "tool result: <<%s>>\n", tool);
		free(tool);
		harness_rmrf(dir);
		fail_msg("a command read the gateway's private state");
	}
	free(tool);
	harness_rmrf(dir);
}

/* A root-only (0600) unix socket in a directory outside the view, standing
 * for /run/docker.sock or D-Bus: a command cannot connect to it (perl is
 * the client: it is in /usr). The test's listening socket then has no
 * connection waiting. */
static void test_host_socket_unreachable(void **state)
{
	char dir[PATH_MAX], cmd[2048], body[8192], *tool, *esc;
	struct sockaddr_un sa;
	struct buf out;
	json_t *js;
	int lfd, cfd;

	(void)state;
	need_sandbox();
	elsewhere_dir(dir, sizeof dir);
	memset(&sa, 0, sizeof sa);
	sa.sun_family = AF_UNIX;
	assert_true(snprintf(sa.sun_path, sizeof sa.sun_path, "%s/docker.sock", dir) <
	            (int)sizeof sa.sun_path);
	lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	assert_true(lfd >= 0);
	assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof sa), 0);
	assert_int_equal(chmod(sa.sun_path, 0600), 0);
	assert_int_equal(listen(lfd, 8), 0);

	snprintf(cmd, sizeof cmd,
	         "s=%s; perl -MIO::Socket::UNIX -e '$c = IO::Socket::UNIX->new(Peer => $ARGV[0]) "
	         "or die \"REFUSED: $!\\n\"; print \"CONNECTED\\n\"' $s 2>&1",
	         sa.sun_path);
	js = json_string(cmd);
	esc = json_dumps(js, JSON_ENCODE_ANY);
	json_decref(js);
	snprintf(body, sizeof body,
	         "[{\"tool_calls\":[{\"name\":\"bash\",\"input\":{\"command\":%s}}]},"
	         " {\"text\":\"tried\"}]",
	         esc);
	free(esc);
	script(body);
	buf_init(&out, 1 << 20);
	if (agent_run("connect", &out) != 0 || !strstr(out.data, "done in")) {
		fprintf(stderr, "%s\n", out.data);
		buf_free(&out);
		fail_msg("the command did not run");
	}
	buf_free(&out);
	tool = last_tool_result();
	cfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	if (cfd >= 0 || strstr(tool, "CONNECTED") || !strstr(tool, "REFUSED")) {
		fprintf(stderr, "tool result: <<%s>>\n", tool);
		if (cfd >= 0)
			close(cfd);
		close(lfd);
		free(tool);
		harness_rmrf(dir);
		fail_msg("a command reached a root-only socket outside the view");
	}
	free(tool);
	close(lfd);
	harness_rmrf(dir);
}

/* A fresh home whose one agent (no sandbox) talks to the model server,
 * with more config text after it, made with `switchboard init` under the
 * given umask. */
static void fresh_home(char *home, size_t size, const char *more, mode_t mask)
{
	char cfg[4096], path[1024];
	const char *init[] = {"init", NULL};
	mode_t old;

	assert_int_equal(harness_tmpdir(home, size), 0);
	snprintf(cfg, sizeof cfg,
	         "providers:\n"
	         "  - {id: oa, api: openai-chat, base_url: \"http://127.0.0.1:%d/v1\", "
	         "api_key: k, max_retries: 1, timeout: 10s}\n"
	         "agents:\n"
	         "  - {id: main, default: true, model: oa/gpt-test, sandbox: full}\n%s",
	         fx.llm.port, more);
	snprintf(path, sizeof path, "%s/switchboard.yaml", home);
	assert_int_equal(harness_write_file(path, cfg), 0);
	/* the operator's own file: theirs to keep private */
	assert_int_equal(chmod(path, 0600), 0);
	old = umask(mask);
	assert_int_equal(harness_cli(home, NULL, init), 0);
	umask(old);
}

#define WEBHOOK_TOKEN "tok-webhook-sender-5521ab"
#define PRIVATE_MARK "operator-private-note-3f9e"

/* The default dm_scope (main) keeps the agent's main session for the
 * operator: a webhook sender, who holds only its hook's secret, gets a
 * session of its own, and its run's history (as the model server receives
 * it) holds nothing of what the operator said in the main session. */
static void test_webhook_sender_not_in_main(void **state)
{
	char home[512], *text;
	const char *args[] = {"agent", "run", "-v", "remember: " PRIVATE_MARK, NULL};
	const char *hdr[] = {"Authorization: Bearer " WEBHOOK_TOKEN,
	                     "Content-Type: application/json", NULL};
	struct harness_daemon d;
	struct buf out, body;
	json_t *reqs, *last;
	long st;

	(void)state;
	fresh_home(home, sizeof home,
	           "channels:\n"
	           "  webhook:\n"
	           "    dm_policy: open\n"
	           "    allow_from: [\"*\"]\n"
	           "    hooks:\n"
	           "      - {name: ext, verify: bearer, secret: " WEBHOOK_TOKEN "}\n",
	           022);
	script("[{\"text\":\"noted\"}, {\"text\":\"webhook answered\"}]");
	/* the operator, in the main session */
	buf_init(&out, 1 << 20);
	if (harness_cli(home, &out, args) != 0 || !strstr(out.data, "noted")) {
		fprintf(stderr, "%s\n", out.data);
		buf_free(&out);
		fail_msg("the operator's turn failed");
	}
	buf_free(&out);
	/* a webhook sender */
	assert_int_equal(harness_daemon_start(&d, home, NULL), 0);
	assert_int_equal(harness_wait_ready(&d, 20000), 0);
	buf_init(&body, 1 << 20);
	st = harness_http(d.port, "POST", "/hooks/ext", hdr,
	                  "{\"text\":\"what did the operator say?\",\"sender\":\"mallory\"}",
	                  &body);
	if (st != 200 || !strstr(body.data ? body.data : "", "webhook answered")) {
		fprintf(stderr, "status %ld: %s\n", st, body.data ? body.data : "");
		buf_free(&body);
		harness_daemon_stop(&d, SIGTERM, 20000);
		fail_msg("the webhook delivery was not answered");
	}
	buf_free(&body);
	assert_int_equal(harness_daemon_stop(&d, SIGTERM, 20000), 0);
	text = llm_requests_text();
	reqs = json_loads(text, 0, NULL);
	free(text);
	assert_int_equal(json_array_size(reqs), 2);
	last = json_object_get(json_array_get(reqs, 1), "body");
	text = json_dumps(last, 0);
	if (!strstr(text, "what did the operator say?") || strstr(text, PRIVATE_MARK)) {
		fprintf(stderr, "the webhook run's request: %s\n", text);
		free(text);
		json_decref(reqs);
		harness_rmrf(home);
		fail_msg("the webhook sender's run saw the operator's main session");
	}
	free(text);
	json_decref(reqs);
	harness_rmrf(home);
}

static int check_private(const char *path, const struct stat *st, int flag, struct FTW *f)
{
	(void)f;
	if (flag == FTW_SL)
		return 0;
	if ((S_ISDIR(st->st_mode) || S_ISREG(st->st_mode)) && (st->st_mode & 077)) {
		fprintf(stderr, "%s is mode %03o\n", path, (unsigned)(st->st_mode & 0777));
		return 1;
	}
	return 0;
}

/* A root gateway's command is security.sandbox_uid outside its sandbox:
 * the file it makes is 61234:61235 as the test sees it, and it appends to
 * the file the write tool made just before, in a directory the tool made. */
static void test_command_uid_outside(void **state)
{
	char path[1024], *tool;
	struct stat st;
	struct buf out;

	(void)state;
	if (geteuid() != 0 || strcmp(fx.sandbox, "full") == 0)
		HARNESS_SKIP("needs root and a working bwrap: a gateway that is not root keeps "
		             "its uid");
	script("[{\"tool_calls\":[{\"name\":\"write\",\"input\":{\"path\":"
	       "\"made/by/tool.txt\",\"content\":\"from the tool\\n\"}}]},"
	       " {\"tool_calls\":[{\"name\":\"bash\",\"input\":{\"command\":"
	       "\"echo more >> made/by/tool.txt && echo mine > made/by/command.txt && "
	       "cat made/by/tool.txt\"}}]},"
	       " {\"text\":\"written\"}]");
	buf_init(&out, 1 << 20);
	assert_int_equal(agent_run("write and append", &out), 0);
	if (!strstr(out.data, "written"))
		fail_msg("the run did not finish: %s", out.data);
	buf_free(&out);
	tool = last_tool_result();
	if (!strstr(tool, "from the tool\nmore"))
		fail_msg("the command could not append to the tool's file: %s", tool);
	free(tool);
	snprintf(path, sizeof path, "%s/made/by/command.txt", fx.ws);
	assert_int_equal(lstat(path, &st), 0);
	assert_int_equal(st.st_uid, 61234);
	assert_int_equal(st.st_gid, 61235);
}

/* The home and everything the gateway writes in it (config, token,
 * store, transcripts, the scaffolded workspace) are the operator's alone
 * whatever the umask (022 here, as on most hosts): directories 0700,
 * files 0600 or tighter. */
static void test_home_private(void **state)
{
	char home[512];
	const char *args[] = {"agent", "run", "-v", "hello", NULL};
	struct buf out;
	mode_t old;
	int rc;

	(void)state;
	fresh_home(home, sizeof home, "", 022);
	script("[{\"text\":\"hi\"}]");
	old = umask(022);
	buf_init(&out, 1 << 20);
	rc = harness_cli(home, &out, args);
	umask(old);
	buf_free(&out);
	assert_int_equal(rc, 0);
	/* harness_tmpdir made the top 0700 itself; what is under it is ours */
	rc = nftw(home, check_private, 16, FTW_PHYS);
	harness_rmrf(home);
	if (rc)
		fail_msg("a file or directory of the home is readable by others");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_timed_out_output_labelled),
	    cmocka_unit_test(test_state_files_private),
	    cmocka_unit_test(test_bootstrap_symlinks),
	    cmocka_unit_test(test_child_fds),
	    cmocka_unit_test(test_private_state_elsewhere),
	    cmocka_unit_test(test_host_socket_unreachable),
	    cmocka_unit_test(test_webhook_sender_not_in_main),
	    cmocka_unit_test(test_home_private),
	    cmocka_unit_test(test_command_uid_outside),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
