/*
 * test_operator_cli.c - the operator's CLI against the real daemon and a
 * scripted model server (tests/fakes/fake_llm.js) on 127.0.0.1:
 *
 *   - `switchboard prompt` prints, byte for byte, the system prompt and the
 *     tool list that the model then receives on the session's next turn
 *     (a new session, one with history, after an edit of a workspace file,
 *     another session without MEMORY.md); its header names each file's
 *     version, size and cut (a file over the cap, a symlink refused, a
 *     change not committed); it creates no session and writes nothing.
 *   - `switchboard chat` outlives a gateway restart: it says the gateway
 *     went away and that it reconnected, and a line typed while the
 *     gateway was down is answered once it is back.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "harness.h"

#define SOUL_BYTES 5000
#define FILE_CAP 2000

struct fixture {
	struct harness_peer llm;
	struct harness_daemon d;
	char home[512];
	char ws[700]; /* the main agent's workspace */
	pid_t chat;   /* a `switchboard chat` the test started */
	int chat_in;  /* its standard input */
};

static struct fixture fx;

static void write_file(const char *dir, const char *rel, const char *text)
{
	char path[1200];

	snprintf(path, sizeof path, "%s/%s", dir, rel);
	assert_int_equal(harness_write_file(path, text), 0);
}

static void script(const char *json)
{
	assert_int_equal(harness_http(fx.llm.port, "POST", "/__reset", NULL, "{}", NULL), 200);
	assert_int_equal(harness_http(fx.llm.port, "POST", "/__script", NULL, json, NULL), 200);
}

/* The requests the fake received (new reference). */
static json_t *llm_requests(void)
{
	struct buf body;
	json_t *j;

	buf_init(&body, 64 << 20);
	assert_int_equal(harness_http(fx.llm.port, "GET", "/__requests", NULL, NULL, &body), 200);
	j = json_loadb(body.data, body.len, 0, NULL);
	buf_free(&body);
	assert_true(json_is_array(j));
	return j;
}

/* Runs the CLI; its exit code, its output (stdout and stderr) in out. */
static int cli(struct buf *out, const char *const *args)
{
	buf_init(out, 64 << 20);
	return harness_cli(fx.home, out, args);
}

/* `switchboard prompt ARGS --json`, parsed (new reference). */
static json_t *prompt_json(const char *const *more)
{
	const char *args[12] = {"prompt", "--json"};
	size_t n = 2;
	struct buf out;
	json_t *j;
	int code;

	for (size_t i = 0; more && more[i]; i++)
		args[n++] = more[i];
	args[n] = NULL;
	code = cli(&out, args);
	if (code != 0)
		fail_msg("prompt --json exited %d: %s", code, out.data ? out.data : "");
	j = json_loadb(out.data, out.len, 0, NULL);
	if (!j)
		fail_msg("prompt --json printed no JSON: %s", out.data);
	buf_free(&out);
	return j;
}

/* `switchboard prompt ARGS --raw`: the bytes it printed (the caller frees
 * out). */
static void prompt_raw(const char *const *more, struct buf *out)
{
	const char *args[12] = {"prompt", "--raw"};
	size_t n = 2;

	for (size_t i = 0; more && more[i]; i++)
		args[n++] = more[i];
	args[n] = NULL;
	assert_int_equal(cli(out, args), 0);
}

/* Sends text to session (NULL: main) and checks the reply. */
static void send_text(const char *session, const char *text, const char *want)
{
	const char *args[8] = {"send"};
	size_t n = 1;
	struct buf out;
	int code;

	if (session) {
		args[n++] = "--session";
		args[n++] = session;
	}
	args[n++] = text;
	args[n] = NULL;
	code = cli(&out, args);
	if (code != 0 || !out.data || !strstr(out.data, want))
		fail_msg("send exited %d: %s", code, out.data ? out.data : "");
	buf_free(&out);
}

/* The last request the model got: its system prompt must be the bytes
 * `prompt` printed, its tools the list `prompt` showed. */
static void assert_next_turn_matches(const json_t *p, const struct buf *raw)
{
	json_t *reqs = llm_requests();
	const json_t *body =
	    json_object_get(json_array_get(reqs, json_array_size(reqs) - 1), "body");
	const json_t *msgs = json_object_get(body, "messages");
	const json_t *sys = json_object_get(json_array_get(msgs, 0), "content");
	const json_t *tools = json_object_get(body, "tools");
	const json_t *shown = json_object_get(p, "toolList");
	size_t i;
	const json_t *t;

	assert_string_equal(json_string_value(json_object_get(json_array_get(msgs, 0), "role")),
	                    "system");
	assert_true(json_is_string(sys));
	/* byte for byte, both ways of asking */
	assert_int_equal(json_string_length(sys), raw->len);
	assert_memory_equal(json_string_value(sys), raw->data, raw->len);
	assert_int_equal(json_string_length(json_object_get(p, "system")), raw->len);
	assert_memory_equal(json_string_value(json_object_get(p, "system")), raw->data, raw->len);
	assert_int_equal(json_integer_value(json_object_get(p, "systemBytes")), raw->len);
	/* the same tools, in the same order, with the same schemas */
	assert_int_equal(json_array_size(tools), json_array_size(shown));
	assert_true(json_array_size(tools) > 0);
	json_array_foreach(tools, i, t)
	{
		const json_t *fn = json_object_get(t, "function");
		const json_t *mine = json_array_get(shown, i);

		assert_string_equal(json_string_value(json_object_get(fn, "name")),
		                    json_string_value(json_object_get(mine, "name")));
		assert_true(json_equal(json_object_get(fn, "parameters"),
		                       json_object_get(mine, "input_schema")));
		assert_string_equal(json_string_value(json_object_get(
		                        json_array_get(json_object_get(p, "tools"), i), "name")),
		                    json_string_value(json_object_get(mine, "name")));
	}
	json_decref(reqs);
}

static const json_t *file_of(const json_t *p, const char *name)
{
	size_t i;
	const json_t *f;

	json_array_foreach(json_object_get(p, "files"), i, f)
	{
		if (strcmp(json_string_value(json_object_get(f, "name")), name) == 0)
			return f;
	}
	fail_msg("no file %s in the prompt's header", name);
	return NULL;
}

/* How many files in dir hold needle. */
static int files_holding(const char *dir, const char *needle)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;

	if (!d)
		return 0;
	while ((de = readdir(d))) {
		char path[1500];
		struct buf b;

		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
		buf_init(&b, 64 << 20);
		if (harness_read_file(path, &b) == 0 && b.data && strstr(b.data, needle))
			n++;
		buf_free(&b);
	}
	closedir(d);
	return n;
}

/* ---- fixture ---- */

static int setup(void **state)
{
	const char *init[] = {"init", NULL};
	char cfg[2048], soul[SOUL_BYTES + 1], note[64], path[1200], target[1200];
	time_t now = time(NULL);
	struct tm tm;

	(void)state;
	memset(&fx, 0, sizeof fx);
	fx.chat = -1;
	fx.chat_in = -1;
	if (harness_peer_start(&fx.llm, "fake_llm.js", NULL) != 0)
		return -1;
	if (harness_tmpdir(fx.home, sizeof fx.home) != 0)
		return -1;
	snprintf(cfg, sizeof cfg,
	         "providers:\n"
	         "  - {id: oa, api: openai-chat, base_url: \"http://127.0.0.1:%d/v1\", "
	         "api_key: test-key, max_retries: 0, timeout: 10s}\n"
	         "agents:\n"
	         "  - {id: main, default: true, model: oa/gpt-test, sandbox: full, "
	         "bootstrap_max_chars: %d}\n",
	         fx.llm.port, FILE_CAP);
	write_file(fx.home, "switchboard.yaml", cfg);
	if (harness_cli(fx.home, NULL, init) != 0)
		return -1;
	snprintf(fx.ws, sizeof fx.ws, "%s/workspaces/main", fx.home);
	/* SOUL.md over the cap, changed and not committed; TOOLS.md a
	 * symlink to a file outside; MEMORY.md and today's daily note, which
	 * only the main session gets. */
	for (size_t i = 0; i < SOUL_BYTES; i++)
		soul[i] = (char)('a' + i % 26);
	memcpy(soul, "SOUL-HEAD", 9);
	memcpy(soul + SOUL_BYTES - 9, "SOUL-TAIL", 9);
	soul[SOUL_BYTES] = '\0';
	write_file(fx.ws, "SOUL.md", soul);
	write_file(fx.home, "outside-secret.txt", "OUTSIDE-SECRET-CONTENT\n");
	snprintf(path, sizeof path, "%s/TOOLS.md", fx.ws);
	snprintf(target, sizeof target, "%s/outside-secret.txt", fx.home);
	unlink(path);
	if (symlink(target, path) != 0)
		return -1;
	write_file(fx.ws, "MEMORY.md", "MEMORY-MARKER: the operator likes tea.\n");
	localtime_r(&now, &tm);
	strftime(note, sizeof note, "memory/%Y-%m-%d.md", &tm);
	snprintf(path, sizeof path, "%s/memory", fx.ws);
	mkdir(path, 0700);
	write_file(fx.ws, note, "DAILY-NOTE-MARKER\n");
	if (harness_daemon_start(&fx.d, fx.home, NULL) != 0 || harness_wait_ready(&fx.d, 20000))
		return -1;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	if (fx.chat > 0) {
		kill(fx.chat, SIGKILL);
		harness_wait(fx.chat, 5000);
	}
	if (fx.chat_in >= 0)
		close(fx.chat_in);
	if (fx.d.pid > 0)
		assert_int_equal(harness_daemon_stop(&fx.d, SIGTERM, 20000), 0);
	harness_peer_stop(&fx.llm);
	harness_rmrf(fx.home);
	return 0;
}

/* ---- prompt ---- */

/* What `prompt` prints is what the model receives next: for a session
 * that does not exist yet, for the same one with history, and after a
 * workspace file changed. */
static void test_prompt_is_the_next_turn(void **state)
{
	const char *main_args[] = {NULL};
	struct buf raw;
	json_t *p;

	(void)state;
	script("[{\"text\":\"first answer\"},{\"text\":\"second answer\"},"
	       "{\"text\":\"third answer\"}]");

	p = prompt_json(main_args);
	assert_true(json_is_true(json_object_get(p, "newSession")));
	assert_string_equal(json_string_value(json_object_get(p, "sessionKey")), "agent:main:main");
	prompt_raw(main_args, &raw);
	send_text(NULL, "hello one", "first answer");
	assert_next_turn_matches(p, &raw);
	/* the main session's own context is in it */
	assert_non_null(memmem(raw.data, raw.len, "MEMORY-MARKER", 13));
	assert_non_null(memmem(raw.data, raw.len, "DAILY-NOTE-MARKER", 17));
	{
		const json_t *note = json_array_get(json_object_get(p, "notes"), 0);

		assert_int_equal(json_array_size(json_object_get(p, "notes")), 1);
		assert_true(
		    strncmp(json_string_value(json_object_get(note, "name")), "memory/", 7) == 0);
		assert_int_equal(json_integer_value(json_object_get(note, "bytes")), 18);
		assert_false(json_is_true(json_object_get(note, "truncated")));
	}
	json_decref(p);
	buf_free(&raw);

	/* The session now has a history; the prompt still matches. */
	p = prompt_json(main_args);
	assert_false(json_is_true(json_object_get(p, "newSession")));
	assert_int_equal(json_integer_value(json_object_get(p, "historyMessages")), 2);
	assert_true(json_integer_value(json_object_get(json_object_get(p, "tokens"), "history")) >
	            0);
	prompt_raw(main_args, &raw);
	send_text("main", "hello two", "second answer");
	assert_next_turn_matches(p, &raw);
	json_decref(p);
	buf_free(&raw);

	/* An edit shows up at once, in prompt and in the turn alike. */
	write_file(fx.ws, "AGENTS.md", "# AGENTS.md\n\nEDITED-AGENTS-MARKER\n");
	p = prompt_json(main_args);
	prompt_raw(main_args, &raw);
	assert_non_null(memmem(raw.data, raw.len, "EDITED-AGENTS-MARKER", 20));
	assert_false(json_is_true(json_object_get(file_of(p, "AGENTS.md"), "committed")));
	send_text(NULL, "hello three", "third answer");
	assert_next_turn_matches(p, &raw);
	json_decref(p);
	buf_free(&raw);
}

/* Another session of the agent: no MEMORY.md, no daily notes, and still
 * what its turn receives. */
static void test_prompt_other_session(void **state)
{
	const char *args[] = {"main", "--session", "desk", NULL};
	struct buf raw;
	json_t *p;
	size_t i;
	const json_t *f;

	(void)state;
	script("[{\"text\":\"desk answer\"}]");
	p = prompt_json(args);
	assert_string_equal(json_string_value(json_object_get(p, "sessionKey")), "agent:main:desk");
	json_array_foreach(json_object_get(p, "files"), i, f)
	    assert_string_not_equal(json_string_value(json_object_get(f, "name")), "MEMORY.md");
	assert_int_equal(json_array_size(json_object_get(p, "notes")), 0);
	prompt_raw(args, &raw);
	assert_null(memmem(raw.data, raw.len, "MEMORY-MARKER", 13));
	assert_null(memmem(raw.data, raw.len, "DAILY-NOTE-MARKER", 17));
	send_text("desk", "hello desk", "desk answer");
	assert_next_turn_matches(p, &raw);
	json_decref(p);
	buf_free(&raw);
}

/* The header: each file's version, size and cut; a symlink is refused and
 * its target's bytes appear nowhere. */
static void test_prompt_header(void **state)
{
	const char *none[] = {NULL};
	const char *text_args[] = {"prompt", NULL};
	struct buf out;
	json_t *p;
	const json_t *soul, *cut, *tools, *ws;

	(void)state;
	p = prompt_json(none);
	ws = json_object_get(p, "workspace");
	assert_true(json_is_true(json_object_get(ws, "git")));
	assert_true(json_is_true(json_object_get(ws, "dirty")));
	assert_int_equal(strlen(json_string_value(json_object_get(ws, "commit"))), 40);

	soul = file_of(p, "SOUL.md");
	assert_int_equal(json_integer_value(json_object_get(soul, "bytes")), SOUL_BYTES);
	assert_false(json_is_true(json_object_get(soul, "committed")));
	assert_int_equal(strlen(json_string_value(json_object_get(soul, "blob"))), 40);
	assert_true(json_integer_value(json_object_get(soul, "mtimeMs")) > 0);
	cut = json_object_get(soul, "truncated");
	assert_non_null(cut);
	assert_int_equal(json_integer_value(json_object_get(cut, "cap")), FILE_CAP);
	assert_string_equal(json_string_value(json_object_get(cut, "by")), "file");
	assert_int_equal(json_integer_value(json_object_get(cut, "headBytes")), FILE_CAP * 7 / 10);
	assert_int_equal(json_integer_value(json_object_get(cut, "tailFrom")),
	                 SOUL_BYTES - FILE_CAP * 2 / 10);
	/* the kept ends are there, the middle is not */
	assert_non_null(strstr(json_string_value(json_object_get(p, "system")), "SOUL-HEAD"));
	assert_non_null(strstr(json_string_value(json_object_get(p, "system")), "SOUL-TAIL"));

	assert_true(json_is_true(json_object_get(file_of(p, "TOOLS.md"), "refused")));
	assert_true(json_is_true(json_object_get(file_of(p, "IDENTITY.md"), "committed")));
	tools = json_object_get(p, "tools");
	assert_true(json_array_size(tools) > 0);
	assert_true(json_integer_value(json_object_get(json_array_get(tools, 0), "schemaBytes")) >
	            0);
	assert_true(json_integer_value(json_object_get(json_object_get(p, "tokens"), "total")) >
	            json_integer_value(json_object_get(json_object_get(p, "tokens"), "system")));
	json_decref(p);

	assert_int_equal(cli(&out, text_args), 0);
	assert_null(strstr(out.data, "OUTSIDE-SECRET-CONTENT"));
	assert_null(strstr(out.data, "test-key"));
	assert_non_null(strstr(out.data, "SOUL.md"));
	assert_non_null(strstr(out.data, "5000 bytes  blob "));
	assert_non_null(strstr(out.data, "(not committed; modified "));
	assert_non_null(strstr(out.data, "truncated to 2000 bytes by the per-file cap "
	                                 "(bootstrap_max_chars): bytes 0-1399 and 4600-4999 kept"));
	assert_non_null(strstr(out.data, "TOOLS.md     refused: not a regular file"));
	assert_non_null(strstr(out.data, "      18 bytes  daily note  included whole"));
	assert_non_null(strstr(out.data, "--- system prompt: "));
	assert_non_null(strstr(out.data, "--- end of system prompt ---\ntools ("));
	assert_non_null(strstr(out.data, "tokens (estimate): system "));
	buf_free(&out);
}

/* prompt changes nothing: a session it looks at is not created, its
 * transcript not written; bad names get clear errors. */
static void test_prompt_side_effects_and_errors(void **state)
{
	const char *fresh[] = {"main", "--session", "never-used", NULL};
	const char *list[] = {"sessions", "--json", NULL};
	const char *unknown[] = {"prompt", "nobody", NULL};
	const char *mismatch[] = {"prompt", "main", "--session", "agent:other:x", NULL};
	const char *both[] = {"prompt", "--raw", "--json", NULL};
	const char *bad_key[] = {"prompt", "--session", "agent:main", NULL};
	char dir[1200];
	struct buf out;
	json_t *p;

	(void)state;
	p = prompt_json(fresh);
	assert_true(json_is_true(json_object_get(p, "newSession")));
	json_decref(p);
	assert_int_equal(cli(&out, list), 0);
	assert_null(strstr(out.data, "never-used"));
	buf_free(&out);
	snprintf(dir, sizeof dir, "%s/agents/main/sessions", fx.home);
	assert_int_equal(files_holding(dir, "never-used"), 0);

	assert_int_equal(cli(&out, unknown), 1);
	assert_non_null(
	    strstr(out.data, "no agent \"nobody\" is configured (the agents are: main)"));
	buf_free(&out);
	assert_int_equal(cli(&out, mismatch), 2);
	assert_non_null(strstr(out.data, "belongs to agent \"other\", not \"main\""));
	buf_free(&out);
	assert_int_equal(cli(&out, both), 2);
	assert_non_null(strstr(out.data, "--raw and --json do not go together"));
	buf_free(&out);
	assert_int_equal(cli(&out, bad_key), 1);
	assert_non_null(strstr(out.data, "sessionKey is"));
	buf_free(&out);
}

/* ---- chat across a restart ---- */

/* Starts `switchboard chat ARGS` with a pipe for its standard input and
 * its output (stdout and stderr) in out_path. */
static void chat_start(const char *out_path, const char *const *more)
{
	const char *argv[16];
	size_t n = 0;
	int in[2], out;

	argv[n++] = harness_binary();
	argv[n++] = "chat";
	for (size_t i = 0; more && more[i]; i++)
		argv[n++] = more[i];
	argv[n] = NULL;
	assert_int_equal(pipe2(in, O_CLOEXEC), 0); /* a gateway started later must not hold it */
	out = open(out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	assert_true(out >= 0);
	fx.chat = fork();
	assert_true(fx.chat >= 0);
	if (fx.chat == 0) {
		setenv("SWITCHBOARD_HOME", fx.home, 1);
		dup2(in[0], STDIN_FILENO);
		dup2(out, STDOUT_FILENO);
		dup2(out, STDERR_FILENO);
		close(in[0]);
		close(in[1]);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	close(in[0]);
	close(out);
	fx.chat_in = in[1];
}

static void chat_type(const char *line)
{
	size_t n = strlen(line);

	assert_int_equal(write(fx.chat_in, line, n), (ssize_t)n);
	assert_int_equal(write(fx.chat_in, "\n", 1), 1);
}

static int count_of(const char *text, const char *needle)
{
	int n = 0;

	for (const char *p = strstr(text, needle); p; p = strstr(p + 1, needle))
		n++;
	return n;
}

/* Waits up to timeout_ms until path holds needle (at least want times). */
static void wait_output(const char *path, const char *needle, int want, int timeout_ms)
{
	struct buf b;

	for (int waited = 0;; waited += 50) {
		buf_init(&b, 16 << 20);
		if (harness_read_file(path, &b) == 0 && b.data &&
		    count_of(b.data, needle) >= want) {
			buf_free(&b);
			return;
		}
		if (waited >= timeout_ms) {
			char got[8192];

			snprintf(got, sizeof got, "%s", b.data ? b.data : "");
			buf_free(&b);
			fail_msg("chat did not print \"%s\" (x%d); it printed:\n%s", needle, want,
			         got);
		}
		buf_free(&b);
		usleep(50 * 1000);
	}
}

static void gateway_stop(void)
{
	assert_int_equal(harness_daemon_stop(&fx.d, SIGTERM, 20000), 0);
	fx.d.pid = 0;
}

/* A new gateway on the same home and port. */
static void gateway_restart(int port)
{
	char p[16];
	const char *extra[] = {"--port", p, NULL};

	snprintf(p, sizeof p, "%d", port);
	assert_int_equal(harness_daemon_start(&fx.d, fx.home, extra), 0);
	fx.d.port = port;
	assert_int_equal(harness_wait_ready(&fx.d, 20000), 0);
}

/* How many requests to the model carried text in their last user message. */
static int requests_with(const char *text)
{
	json_t *reqs = llm_requests();
	size_t i;
	const json_t *r;
	int n = 0;

	json_array_foreach(reqs, i, r)
	{
		const json_t *msgs = json_object_get(json_object_get(r, "body"), "messages");
		char *dump = json_dumps(json_array_get(msgs, json_array_size(msgs) - 1), 0);

		n += dump && strstr(dump, text) ? 1 : 0;
		free(dump);
	}
	json_decref(reqs);
	return n;
}

/* The gateway restarts under a chat: the chat says so, stays, and a line
 * typed while the gateway was down is answered once it is back, once. */
static void test_chat_survives_restart(void **state)
{
	const char *more[] = {"--session", "chatty", NULL};
	char out_path[700];
	int port = fx.d.port;
	struct buf b;

	(void)state;
	script("[{\"match\":\"before\",\"text\":\"answer-before\"},"
	       "{\"match\":\"while\",\"text\":\"answer-while\"},"
	       "{\"match\":\"after\",\"text\":\"answer-after\"}]");
	snprintf(out_path, sizeof out_path, "%s/chat.out", fx.home);
	chat_start(out_path, more);
	chat_type("before the restart");
	wait_output(out_path, "answer-before\n", 1, 15000); /* its final event too */

	gateway_stop();
	wait_output(out_path, "gateway went away; reconnecting", 1, 10000);
	/* still there: it did not exit with the connection */
	assert_int_equal(waitpid(fx.chat, NULL, WNOHANG), 0);
	chat_type("typed while the gateway was away");
	wait_output(out_path, "(the gateway is away: this line is sent once it is back)", 1, 5000);
	usleep(700 * 1000); /* a few failed attempts */
	gateway_restart(port);
	wait_output(out_path, "reconnected to ws://127.0.0.1:", 1, 15000);
	wait_output(out_path, "answer-while\n", 1, 15000);

	chat_type("after the restart");
	wait_output(out_path, "answer-after", 1, 15000);
	close(fx.chat_in);
	fx.chat_in = -1;
	buf_init(&b, 16 << 20);
	if (harness_wait(fx.chat, 15000) != 0) {
		fx.chat = -1;
		harness_read_file(out_path, &b);
		fail_msg("chat did not end with its input; it printed:\n%s", b.data);
	}
	fx.chat = -1;

	assert_int_equal(harness_read_file(out_path, &b), 0);
	if (count_of(b.data, "answer-while") != 1)
		fail_msg("the reply to the line typed while away is not there once:\n%s", b.data);
	assert_int_equal(count_of(b.data, "gateway went away"), 1);
	buf_free(&b);
	/* the model got the line typed while away once */
	assert_int_equal(requests_with("typed while the gateway was away"), 1);
}

/* The gateway does not come back and the input ends: chat says which
 * lines were not sent and exits 1 after --timeout, instead of waiting for
 * ever or dropping them in silence. */
static void test_chat_gives_up_when_input_ends(void **state)
{
	const char *more[] = {"--timeout", "2", NULL};
	char out_path[700];
	int port = fx.d.port, code;
	time_t t0;

	(void)state;
	script("[{\"text\":\"hello back\"}]");
	snprintf(out_path, sizeof out_path, "%s/chat2.out", fx.home);
	chat_start(out_path, more);
	chat_type("hi");
	wait_output(out_path, "hello back\n", 1, 15000);
	gateway_stop();
	wait_output(out_path, "gateway went away; reconnecting", 1, 10000);
	chat_type("this one cannot go");
	close(fx.chat_in);
	fx.chat_in = -1;
	t0 = time(NULL);
	code = harness_wait(fx.chat, 15000);
	fx.chat = -1;
	assert_int_equal(code, 1);
	assert_true(time(NULL) - t0 <= 6);
	wait_output(out_path, "the gateway did not come back within 2 s; 1 line was not sent", 1,
	            1000);
	gateway_restart(port);
}

/* Lines piped in at once (the later ones steered into the first run, with
 * no final event of their own): chat answers and ends with its input. */
static void test_chat_piped_lines_end(void **state)
{
	const char *more[] = {"--session", "piped", NULL};
	char out_path[700];
	const char *all = "one\ntwo\nthree\n";

	(void)state;
	script("[{\"text\":\"piped-answer\"},{\"text\":\"piped-answer\"},"
	       "{\"text\":\"piped-answer\"}]");
	snprintf(out_path, sizeof out_path, "%s/chat3.out", fx.home);
	chat_start(out_path, more);
	assert_int_equal(write(fx.chat_in, all, strlen(all)), (ssize_t)strlen(all));
	close(fx.chat_in);
	fx.chat_in = -1;
	if (harness_wait(fx.chat, 20000) != 0) {
		struct buf b;

		fx.chat = -1;
		buf_init(&b, 1 << 20);
		harness_read_file(out_path, &b);
		fail_msg("chat did not end after its piped input; it printed:\n%s", b.data);
	}
	fx.chat = -1;
	wait_output(out_path, "piped-answer", 1, 1000);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_prompt_is_the_next_turn),
	    cmocka_unit_test(test_prompt_other_session),
	    cmocka_unit_test(test_prompt_header),
	    cmocka_unit_test(test_prompt_side_effects_and_errors),
	    cmocka_unit_test(test_chat_piped_lines_end),
	    cmocka_unit_test(test_chat_survives_restart),
	    cmocka_unit_test(test_chat_gives_up_when_input_ends),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
