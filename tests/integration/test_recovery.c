/*
 * test_recovery.c - the seams a crash or a bad start used to break, each
 * asserted from the side of who receives the answer:
 *
 *  1. a kill -9 while a tool runs leaves a tool_use without its result; the
 *     session must still answer (the model server refuses a history with an
 *     unanswered tool call, as providers do);
 *  2. a transcript left empty (made, header never written) is a new session,
 *     not a session broken for good;
 *  4. a retry with the same Idempotency-Key on the OpenAI endpoint, after a
 *     kill and the re-run that committed the reply (or after a kill past the
 *     commit), gets that reply from the store (not 504), and no further run;
 *     a retry during the re-run waits for it;
 * 10. a Telegram user who is not paired receives the pairing code, read from
 *     the Telegram emulator;
 *     An outbox entry that would send nothing (its payload lost its text) is
 *     a failure with a log line, never recorded as sent;
 * 11. a gateway whose port is taken exits 78 (EX_CONFIG), naming the port and
 *     what holds it, and never says it is ready.
 *
 * SWITCHBOARD_TEST_BINARY=<path> runs them against another build (an older
 * commit, to see them fail).
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <cmocka.h>
#include <jansson.h>
#include <sqlite3.h>

#include "agents/message.h"
#include "agents/transcript.h"
#include "harness.h"
#include "harness_oai.h"

#define TOKEN "123456:TEST-token"

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void write_home(const char *home, const char *name, const char *text)
{
	char path[1024];

	snprintf(path, sizeof path, "%s/%s", home, name);
	assert_int_equal(harness_write_file(path, text), 0);
}

static void dump_log(const struct harness_daemon *d)
{
	struct buf log;

	buf_init(&log, 64 << 20);
	harness_daemon_log(d, &log);
	fprintf(stderr, "gateway log:\n%s\n", log.data ? log.data : "");
	buf_free(&log);
}

/* ---- the OpenAI endpoint over the scripted model server ---- */

struct oai_fx {
	char home[512];
	char token[256];
	struct harness_peer llm;
	struct harness_daemon d;
};

static void oai_setup_sync(struct oai_fx *f, const char *sync_timeout)
{
	const char *init[] = {"init", NULL};
	char cfg[2048];

	memset(f, 0, sizeof *f);
	assert_int_equal(harness_tmpdir(f->home, sizeof f->home), 0);
	assert_int_equal(harness_peer_start(&f->llm, "fake_llm.js", NULL), 0);
	snprintf(cfg, sizeof cfg,
	         "providers:\n"
	         "  - {id: oa, api: openai-chat, base_url: \"http://127.0.0.1:%d/v1\", "
	         "api_key: k1, max_retries: 0, timeout: 20s}\n"
	         "agents:\n"
	         "  - {id: main, default: true, model: oa/gpt-test, sandbox: full, "
	         "timezone: UTC}\n"
	         "openai_api: {enabled: true, sync_timeout: %s}\n",
	         f->llm.port, sync_timeout);
	write_home(f->home, "switchboard.yaml", cfg);
	assert_int_equal(harness_cli(f->home, NULL, init), 0);
	assert_int_equal(harness_oai_token(f->home, f->token, sizeof f->token), 0);
}

static void oai_setup(struct oai_fx *f)
{
	oai_setup_sync(f, "60s");
}

static void oai_start(struct oai_fx *f)
{
	if (harness_daemon_start(&f->d, f->home, NULL) != 0 || harness_wait_ready(&f->d, 20000)) {
		dump_log(&f->d);
		fail_msg("the gateway did not start");
	}
}

static void oai_teardown(struct oai_fx *f)
{
	int code = harness_daemon_stop(&f->d, SIGTERM, 20000);

	if (code != 0)
		dump_log(&f->d);
	harness_peer_stop(&f->llm);
	harness_rmrf(f->home);
	assert_int_equal(code, 0);
}

static void llm_script(struct oai_fx *f, const char *json)
{
	assert_int_equal(harness_http(f->llm.port, "POST", "/__reset", NULL, "{}", NULL), 200);
	assert_int_equal(harness_http(f->llm.port, "POST", "/__script", NULL, json, NULL), 200);
}

/* One chat completion for user as the SDK would send it, with an
 * Idempotency-Key when key is not NULL; the reply's text (caller frees), or
 * NULL with the status in *status. */
static char *oai_ask_key(struct oai_fx *f, const char *user, const char *text, const char *key,
                         long *status)
{
	char auth[400], idem[300], *body;
	const char *h[] = {auth, "Content-Type: application/json", key ? idem : NULL, NULL};
	struct buf resp;
	json_t *req, *res;
	char *out = NULL;

	snprintf(auth, sizeof auth, "Authorization: Bearer %s", f->token);
	snprintf(idem, sizeof idem, "Idempotency-Key: %s", key ? key : "");
	req = json_pack("{sssss[{ssss}]}", "model", "switchboard/main", "user", user, "messages",
	                "role", "user", "content", text);
	body = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	buf_init(&resp, 16 << 20);
	*status = harness_http(f->d.port, "POST", "/v1/chat/completions", h, body, &resp);
	free(body);
	res = resp.data ? json_loads(resp.data, 0, NULL) : NULL;
	if (*status == 200) {
		const char *c = json_string_value(json_object_get(
		    json_object_get(json_array_get(json_object_get(res, "choices"), 0), "message"),
		    "content"));

		out = c ? strdup(c) : NULL;
	}
	json_decref(res);
	buf_free(&resp);
	return out;
}

static char *oai_ask(struct oai_fx *f, const char *user, const char *text, long *status)
{
	return oai_ask_key(f, user, text, NULL, status);
}

/* The path of the only transcript of agent main (NULL when none). */
static int main_transcript(const struct oai_fx *f, char *out, size_t size)
{
	char dir[700];
	struct dirent *de;
	DIR *d;
	int n = 0;

	snprintf(dir, sizeof dir, "%s/agents/main/sessions", f->home);
	d = opendir(dir);
	if (!d)
		return 0;
	while ((de = readdir(d)))
		if (strstr(de->d_name, ".jsonl") && !strstr(de->d_name, ".archive-") &&
		    !strstr(de->d_name, ".new")) {
			snprintf(out, size, "%s/%s", dir, de->d_name);
			n++;
		}
	closedir(d);
	return n;
}

struct asker {
	pid_t pid;
};

/* Sends the request from a child process (it dies with the gateway). */
static void ask_key_in_background(struct oai_fx *f, struct asker *a, const char *user,
                                  const char *text, const char *key)
{
	a->pid = fork();
	assert_true(a->pid >= 0);
	if (a->pid == 0) {
		long st;

		free(oai_ask_key(f, user, text, key, &st));
		_exit(0);
	}
}

static void ask_in_background(struct oai_fx *f, struct asker *a, const char *user, const char *text)
{
	ask_key_in_background(f, a, user, text, NULL);
}

/* How many requests the model server received. */
static size_t llm_requests(struct oai_fx *f)
{
	struct buf resp;
	json_t *r;
	size_t n = 0;

	buf_init(&resp, 64 << 20);
	if (harness_http(f->llm.port, "GET", "/__requests", NULL, NULL, &resp) == 200 &&
	    resp.data && (r = json_loads(resp.data, 0, NULL)) != NULL) {
		n = json_array_size(r);
		json_decref(r);
	}
	buf_free(&resp);
	return n;
}

/* Waits until the model server has received n requests. */
static void wait_llm_requests(struct oai_fx *f, size_t n)
{
	int64_t deadline = now_ms() + 20000;

	while (llm_requests(f) < n) {
		if (now_ms() > deadline) {
			dump_log(&f->d);
			fail_msg("the model never got request %zu", n);
		}
		usleep(50000);
	}
}

/* How many inbox entries are done, and how many are not. */
static void inbox_counts(const char *home, int *done, int *open)
{
	char path[1024];
	sqlite3 *db;
	sqlite3_stmt *st;

	*done = *open = 0;
	snprintf(path, sizeof path, "%s/state.db", home);
	if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
		sqlite3_close(db);
		return;
	}
	sqlite3_busy_timeout(db, 5000);
	if (sqlite3_prepare_v2(db,
	                       "SELECT count(*) FILTER (WHERE state = 'done'), "
	                       "count(*) FILTER (WHERE state != 'done') FROM inbox",
	                       -1, &st, NULL) == SQLITE_OK &&
	    sqlite3_step(st) == SQLITE_ROW) {
		*done = sqlite3_column_int(st, 0);
		*open = sqlite3_column_int(st, 1);
	}
	sqlite3_finalize(st);
	sqlite3_close(db);
}

/* 4: the OpenAI endpoint, killed while the model answers; the message runs
 * again after the restart and commits its reply. A retry with the same
 * Idempotency-Key then gets that reply, found in the store by its key (the
 * answers remembered in memory died with the process), not a 504, and no
 * third run. */
static void test_idempotency_after_restart(void **state)
{
	struct oai_fx f;
	struct asker a;
	char *reply;
	int64_t deadline;
	int done = 0, open = 0;
	long st = 0;

	(void)state;
	oai_setup_sync(&f, "5s");
	llm_script(&f, "[{\"match\": \"idem\", \"delay_ms\": 3000, \"text\": \"lost\"},"
	               " {\"match\": \"idem\", \"text\": \"the committed answer\"},"
	               " {\"match\": \"idem\", \"text\": \"a third run\"}]");
	oai_start(&f);
	ask_key_in_background(&f, &a, "u4", "an idem question", "key-4");
	wait_llm_requests(&f, 1);
	assert_int_equal(harness_daemon_stop(&f.d, SIGKILL, 10000), 128 + SIGKILL);
	harness_wait(a.pid, 10000);
	oai_start(&f);
	/* the message runs again and its reply is committed */
	deadline = now_ms() + 30000;
	for (;;) {
		inbox_counts(f.home, &done, &open);
		if (done == 1 && open == 0)
			break;
		if (now_ms() > deadline) {
			dump_log(&f.d);
			fail_msg(
			    "the message did not run again after the restart (%d done, %d open)",
			    done, open);
		}
		usleep(50000);
	}
	reply = oai_ask_key(&f, "u4", "an idem question", "key-4", &st);
	if (!reply || strcmp(reply, "the committed answer") != 0) {
		dump_log(&f.d);
		fail_msg("the retry with the key: status %ld, reply \"%s\"", st,
		         reply ? reply : "(none)");
	}
	free(reply);
	assert_int_equal(llm_requests(&f), 2);
	/* killed again now that the reply is committed: the retry gets it from
	 * the store, and the model is not asked again */
	assert_int_equal(harness_daemon_stop(&f.d, SIGKILL, 10000), 128 + SIGKILL);
	oai_start(&f);
	reply = oai_ask_key(&f, "u4", "an idem question", "key-4", &st);
	if (!reply || strcmp(reply, "the committed answer") != 0) {
		dump_log(&f.d);
		fail_msg("the retry after a kill past the commit: status %ld, reply \"%s\"", st,
		         reply ? reply : "(none)");
	}
	free(reply);
	assert_int_equal(llm_requests(&f), 2);
	inbox_counts(f.home, &done, &open);
	assert_int_equal(done, 1);
	assert_int_equal(open, 0);

	/* a retry that comes while the re-run is still going waits for it (the
	 * new script starts the model's count of requests again) */
	llm_script(
	    &f, "[{\"match\": \"second\", \"delay_ms\": 3000, \"text\": \"lost\"},"
	        " {\"match\": \"second\", \"delay_ms\": 1500, \"text\": \"the re-run's answer\"},"
	        " {\"match\": \"second\", \"text\": \"a third run\"}]");
	ask_key_in_background(&f, &a, "u4b", "a second idem question", "key-4b");
	wait_llm_requests(&f, 1);
	assert_int_equal(harness_daemon_stop(&f.d, SIGKILL, 10000), 128 + SIGKILL);
	harness_wait(a.pid, 10000);
	oai_start(&f);
	wait_llm_requests(&f, 2);
	reply = oai_ask_key(&f, "u4b", "a second idem question", "key-4b", &st);
	if (!reply || strcmp(reply, "the re-run's answer") != 0) {
		dump_log(&f.d);
		fail_msg("the retry during the re-run: status %ld, reply \"%s\"", st,
		         reply ? reply : "(none)");
	}
	free(reply);
	assert_int_equal(llm_requests(&f), 2);
	inbox_counts(f.home, &done, &open);
	assert_int_equal(done, 2);
	assert_int_equal(open, 0);
	oai_teardown(&f);
}

/* 1: killed while a tool runs; the session answers afterwards. */
static void test_kill_during_tool(void **state)
{
	struct oai_fx f;
	struct asker a;
	char path[1200], *reply;
	struct buf data;
	int64_t deadline;
	long st = 0;

	(void)state;
	oai_setup(&f);
	llm_script(&f, "[{\"match\": \"slow tool\", \"tool_calls\": [{\"name\": \"bash\", "
	               "\"input\": {\"command\": \"sleep 30\"}}]},"
	               " {\"match\": \"slow tool\", \"text\": \"the tool was cut\"},"
	               " {\"match\": \"and now\", \"text\": \"still here\"},"
	               " {\"match\": \"one more\", \"text\": \"again\"}]");
	oai_start(&f);
	ask_in_background(&f, &a, "u1", "run the slow tool");
	/* The tool call is in the transcript: the tool runs. */
	deadline = now_ms() + 30000;
	buf_init(&data, 64 << 20);
	for (;;) {
		buf_reset(&data);
		if (main_transcript(&f, path, sizeof path) == 1 &&
		    harness_read_file(path, &data) == 0 && data.data &&
		    strstr(data.data, "\"tool_use\"") && strstr(data.data, "tool_start"))
			break;
		if (now_ms() > deadline) {
			dump_log(&f.d);
			fail_msg("the tool call never started");
		}
		usleep(50000);
	}
	buf_free(&data);
	assert_int_equal(harness_daemon_stop(&f.d, SIGKILL, 10000), 128 + SIGKILL);
	harness_wait(a.pid, 10000);
	oai_start(&f);
	/* A further message is answered by the model, not refused. */
	deadline = now_ms() + 60000;
	reply = oai_ask(&f, "u1", "and now?", &st);
	if (!reply || strcmp(reply, "still here") != 0) {
		dump_log(&f.d);
		fail_msg("after the kill: status %ld, reply \"%s\"", st, reply ? reply : "(none)");
	}
	free(reply);
	/* And one more: the repair is written once, not at every run. */
	reply = oai_ask(&f, "u1", "one more", &st);
	if (!reply || strcmp(reply, "again") != 0) {
		dump_log(&f.d);
		fail_msg("the second message after the kill: status %ld, reply \"%s\"", st,
		         reply ? reply : "(none)");
	}
	free(reply);
	/* Every transcript loads with every tool_use paired, and with nothing
	 * left to repair: the resumed run wrote the results of the cut call
	 * into the file, once, as a "repair" event. */
	{
		char dir[700], why[512];
		struct dirent *de;
		size_t repaired = 0;
		int repair_events = 0;
		DIR *dd;

		snprintf(dir, sizeof dir, "%s/agents/main/sessions", f.home);
		dd = opendir(dir);
		assert_non_null(dd);
		while ((de = readdir(dd))) {
			struct transcript_loaded tl;

			if (!strstr(de->d_name, ".jsonl") || strstr(de->d_name, ".archive-"))
				continue;
			snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
			assert_int_equal(transcript_load(path, &tl), 0);
			repaired += tl.repaired;
			if (msg_check_pairing(tl.messages, why, sizeof why) != 0)
				fail_msg("pairing broken in %s: %s", path, why);
			for (size_t i = 0; i < json_array_size(tl.entries); i++) {
				const char *ev = json_string_value(
				    json_object_get(json_array_get(tl.entries, i), "event"));

				repair_events += ev && strcmp(ev, "repair") == 0;
			}
			transcript_loaded_free(&tl);
		}
		closedir(dd);
		if (repaired != 0 || repair_events != 1)
			fail_msg("%zu tool calls still repaired at load, %d repair events in the "
			         "file (want 0 and 1)",
			         repaired, repair_events);
	}
	oai_teardown(&f);
}

/* 2: a transcript of 0 bytes (created, header never written) is a new
 * session. */
static void test_empty_transcript(void **state)
{
	struct oai_fx f;
	char path[1200], *reply;
	long st = 0;

	(void)state;
	oai_setup(&f);
	llm_script(&f, "[{\"match\": \"first\", \"text\": \"one\"},"
	               " {\"match\": \"second\", \"text\": \"two\"}]");
	oai_start(&f);
	reply = oai_ask(&f, "u2", "first", &st);
	assert_non_null(reply);
	assert_string_equal(reply, "one");
	free(reply);
	assert_int_equal(harness_daemon_stop(&f.d, SIGKILL, 10000), 128 + SIGKILL);
	assert_int_equal(main_transcript(&f, path, sizeof path), 1);
	assert_int_equal(harness_write_file(path, ""), 0);
	oai_start(&f);
	reply = oai_ask(&f, "u2", "second", &st);
	if (!reply || strcmp(reply, "two") != 0) {
		dump_log(&f.d);
		fail_msg("after emptying the transcript: status %ld, reply \"%s\"", st,
		         reply ? reply : "(none)");
	}
	free(reply);
	oai_teardown(&f);
}

/* ---- 10: the pairing code reaches the Telegram user ---- */

static json_t *emu_post(int port, const char *path, json_t *body_take)
{
	static const char *const h[] = {"Content-Type: application/json", NULL};
	char *text = json_dumps(body_take, JSON_COMPACT);
	struct buf resp;
	json_t *out = NULL;

	json_decref(body_take);
	buf_init(&resp, 16 << 20);
	if (harness_http(port, "POST", path, h, text, &resp) == 200 && resp.data)
		out = json_loads(resp.data, 0, NULL);
	free(text);
	buf_free(&resp);
	return out;
}

static void test_pairing_code_reaches_telegram(void **state)
{
	const char *init[] = {"init", NULL};
	struct harness_peer emu;
	struct harness_daemon d;
	char home[512], cfg[2048];
	json_t *r, *m, *msg = NULL;
	int64_t deadline;
	size_t i;

	(void)state;
	assert_int_equal(harness_tmpdir(home, sizeof home), 0);
	assert_int_equal(harness_peer_start(&emu, "telegram_emulator.js", NULL), 0);
	write_home(home, "script.yaml", "steps:\n  - text: \"echo {{user_text}}\"\n");
	snprintf(cfg, sizeof cfg,
	         "providers:\n"
	         "  - {id: s, api: scripted, script: script.yaml}\n"
	         "agents:\n"
	         "  - {id: main, default: true, model: s/echo}\n"
	         "channels:\n"
	         "  telegram:\n"
	         "    dm_policy: pairing\n"
	         "    accounts:\n"
	         "      - id: emu\n"
	         "        token: \"%s\"\n"
	         "        api_base: http://127.0.0.1:%d\n"
	         "        poll_timeout: 0s\n"
	         "        poll_interval: 200ms\n"
	         "        typing: false\n",
	         TOKEN, emu.port);
	write_home(home, "switchboard.yaml", cfg);
	assert_int_equal(harness_cli(home, NULL, init), 0);
	if (harness_daemon_start(&d, home, NULL) != 0 || harness_wait_ready(&d, 20000)) {
		dump_log(&d);
		fail_msg("the gateway did not start");
	}
	r = emu_post(emu.port, "/sendMessage",
	             json_pack("{sss{sisbssss}s{siss}sIss}", "botToken", TOKEN, "from", "id", 77,
	                       "is_bot", 0, "first_name", "Mallory", "username", "mallory", "chat",
	                       "id", 77, "type", "private", "date", (json_int_t)time(NULL), "text",
	                       "let me in"));
	assert_non_null(r);
	json_decref(r);
	deadline = now_ms() + 30000;
	while (!msg && now_ms() < deadline) {
		r = emu_post(emu.port, "/getUpdates",
		             json_pack("{sssi}", "token", TOKEN, "chatId", 77));
		json_array_foreach(json_object_get(r, "result"), i, m)
		{
			json_t *bm = json_object_get(m, "message");

			if (!msg && json_is_string(json_object_get(bm, "text")))
				msg = json_deep_copy(bm);
		}
		json_decref(r);
		if (!msg)
			usleep(100000);
	}
	if (!msg) {
		dump_log(&d);
		fail_msg("no pairing reply reached the Telegram user");
	}
	{
		const char *text = json_string_value(json_object_get(msg, "text"));
		const char *code = strstr(text, "pairing code is ");

		assert_non_null(code);
		assert_non_null(strstr(text, "switchboard pairing approve telegram "));
		/* the agent never saw the stranger's text */
		assert_null(strstr(text, "echo"));
	}
	json_decref(msg);
	assert_int_equal(harness_daemon_stop(&d, SIGTERM, 20000), 0);
	harness_peer_stop(&emu);
	harness_rmrf(home);
}

/* Outbox entries as a reply whose payload lost its text would leave them,
 * put into the store while the gateway is stopped; the last one has text,
 * so once it reached the user the others were tried before it. */
static void put_outbox(const char *home, const char *key, const char *payload)
{
	char path[1024], *sql;
	sqlite3 *db;

	snprintf(path, sizeof path, "%s/state.db", home);
	assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
	sqlite3_busy_timeout(db, 5000);
	sql = sqlite3_mprintf("INSERT INTO outbox (idempotency_key, channel, account, target, "
	                      "payload, due_at, created_at) VALUES (%Q, 'telegram', 'emu', '77', "
	                      "%Q, 0, 0)",
	                      key, payload);
	assert_non_null(sql);
	assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
	sqlite3_free(sql);
	sqlite3_close(db);
}

static void outbox_state(const char *home, const char *key, char *state, size_t n, char *err,
                         size_t en)
{
	char path[1024];
	sqlite3 *db;
	sqlite3_stmt *st;

	snprintf(path, sizeof path, "%s/state.db", home);
	assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	sqlite3_busy_timeout(db, 5000);
	assert_int_equal(sqlite3_prepare_v2(db,
	                                    "SELECT state, coalesce(last_error, '') FROM outbox "
	                                    "WHERE idempotency_key = ?1",
	                                    -1, &st, NULL),
	                 SQLITE_OK);
	sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	snprintf(state, n, "%s", (const char *)sqlite3_column_text(st, 0));
	snprintf(err, en, "%s", (const char *)sqlite3_column_text(st, 1));
	sqlite3_finalize(st);
	sqlite3_close(db);
}

static void test_empty_entry_not_sent(void **state)
{
	const char *init[] = {"init", NULL};
	struct harness_peer emu;
	struct harness_daemon d;
	char home[512], cfg[2048], st[32], err[512];
	json_t *r, *m;
	int64_t deadline;
	size_t i;
	int texts = 0, after = 0;
	struct buf log;

	(void)state;
	assert_int_equal(harness_tmpdir(home, sizeof home), 0);
	assert_int_equal(harness_peer_start(&emu, "telegram_emulator.js", NULL), 0);
	write_home(home, "script.yaml", "steps:\n  - text: \"hi\"\n");
	snprintf(cfg, sizeof cfg,
	         "providers:\n"
	         "  - {id: s, api: scripted, script: script.yaml}\n"
	         "agents:\n"
	         "  - {id: main, default: true, model: s/echo}\n"
	         "channels:\n"
	         "  telegram:\n"
	         "    accounts:\n"
	         "      - id: emu\n"
	         "        token: \"%s\"\n"
	         "        api_base: http://127.0.0.1:%d\n"
	         "        poll_timeout: 0s\n"
	         "        poll_interval: 200ms\n"
	         "        typing: false\n",
	         TOKEN, emu.port);
	write_home(home, "switchboard.yaml", cfg);
	assert_int_equal(harness_cli(home, NULL, init), 0);
	/* a first start makes the store */
	if (harness_daemon_start(&d, home, NULL) != 0 || harness_wait_ready(&d, 20000)) {
		dump_log(&d);
		fail_msg("the gateway did not start");
	}
	assert_int_equal(harness_daemon_stop(&d, SIGTERM, 20000), 0);
	put_outbox(home, "empty:nofield", "{}");
	put_outbox(home, "empty:text", "{\"text\":\"\"}");
	put_outbox(home, "after", "{\"text\":\"after the empty ones\"}");
	if (harness_daemon_start(&d, home, NULL) != 0 || harness_wait_ready(&d, 20000)) {
		dump_log(&d);
		fail_msg("the gateway did not start");
	}
	deadline = now_ms() + 30000;
	while (!after && now_ms() < deadline) {
		texts = 0;
		r = emu_post(emu.port, "/getUpdates",
		             json_pack("{sssi}", "token", TOKEN, "chatId", 77));
		json_array_foreach(json_object_get(r, "result"), i, m)
		{
			const char *t = json_string_value(
			    json_object_get(json_object_get(m, "message"), "text"));

			if (t) {
				texts++;
				after += strcmp(t, "after the empty ones") == 0;
			}
		}
		json_decref(r);
		if (!after)
			usleep(100000);
	}
	if (!after) {
		dump_log(&d);
		fail_msg("the entry with text never reached the Telegram user");
	}
	assert_int_equal(texts, 1);
	/* the outcome of the empty ones is recorded before the next claim */
	deadline = now_ms() + 10000;
	do {
		outbox_state(home, "empty:text", st, sizeof st, err, sizeof err);
		if (strcmp(st, "claimed") != 0 && strcmp(st, "pending") != 0)
			break;
		usleep(100000);
	} while (now_ms() < deadline);
	buf_init(&log, 64 << 20);
	harness_daemon_log(&d, &log);
	assert_int_equal(harness_daemon_stop(&d, SIGTERM, 20000), 0);
	{
		const char *keys[] = {"empty:nofield", "empty:text"};

		for (i = 0; i < 2; i++) {
			outbox_state(home, keys[i], st, sizeof st, err, sizeof err);
			if (strcmp(st, "failed") != 0)
				fail_msg("%s: state %s (want failed), error '%s'\n%s", keys[i], st,
				         err, log.data ? log.data : "");
			assert_non_null(strstr(err, "no text to send"));
		}
	}
	outbox_state(home, "after", st, sizeof st, err, sizeof err);
	assert_string_equal(st, "sent");
	/* and the log says so, for each */
	{
		const char *p = log.data ? log.data : "";
		int n = 0;

		while ((p = strstr(p, "msg=\"an outbox entry has no text to send")) != NULL) {
			n++;
			p++;
		}
		assert_int_equal(n, 2);
	}
	buf_free(&log);
	harness_peer_stop(&emu);
	harness_rmrf(home);
}

/* ---- 5: a reply in several messages resumes after a crash ---- */

/* Appends the texts the Telegram user received since the last call (the
 * emulator's client getUpdates gives each once) to out, one per line;
 * returns how many the user has received in all. */
static int tg_texts(int port, char *out, size_t size)
{
	static int total;
	json_t *r = emu_post(port, "/getUpdates", json_pack("{sssi}", "token", TOKEN, "chatId", 77));
	json_t *m;
	size_t i, len = strlen(out);

	if (!*out)
		total = 0;
	json_array_foreach(json_object_get(r, "result"), i, m)
	{
		const char *t =
		    json_string_value(json_object_get(json_object_get(m, "message"), "text"));

		if (!t)
			continue;
		total++;
		if (len < size)
			len += (size_t)snprintf(out + len, size - len, "%s\n", t);
	}
	json_decref(r);
	return total;
}

static void test_reply_pieces_resume(void **state)
{
	const char *init[] = {"init", NULL};
	struct harness_peer emu;
	struct harness_daemon d;
	char home[512], cfg[2048], text[1024], seen[8192], st[32], err[512], *payload;
	int64_t deadline;
	int n = 0, k;

	(void)state;
	seen[0] = '\0';
	assert_int_equal(harness_tmpdir(home, sizeof home), 0);
	assert_int_equal(harness_peer_start(&emu, "telegram_emulator.js", NULL), 0);
	write_home(home, "script.yaml", "steps:\n  - text: \"hi\"\n");
	/* chunks of at most 64 characters, one every 300 ms */
	snprintf(cfg, sizeof cfg,
	         "providers:\n"
	         "  - {id: s, api: scripted, script: script.yaml}\n"
	         "agents:\n"
	         "  - {id: main, default: true, model: s/echo}\n"
	         "channels:\n"
	         "  telegram:\n"
	         "    accounts:\n"
	         "      - id: emu\n"
	         "        token: \"%s\"\n"
	         "        api_base: http://127.0.0.1:%d\n"
	         "        poll_timeout: 0s\n"
	         "        poll_interval: 200ms\n"
	         "        typing: false\n"
	         "        parse_mode: plain\n"
	         "        chunk_limit: 64\n"
	         "        rate_limit: {chat_per_minute: 200, chat_burst: 1}\n",
	         TOKEN, emu.port);
	write_home(home, "switchboard.yaml", cfg);
	assert_int_equal(harness_cli(home, NULL, init), 0);
	if (harness_daemon_start(&d, home, NULL) != 0 || harness_wait_ready(&d, 20000)) {
		dump_log(&d);
		fail_msg("the gateway did not start");
	}
	assert_int_equal(harness_daemon_stop(&d, SIGTERM, 20000), 0);
	/* six paragraphs of 50 characters: six messages */
	text[0] = '\0';
	for (k = 1; k <= 6; k++)
		snprintf(text + strlen(text), sizeof text - strlen(text),
		         "%spiece %d of the long reply ..........................", k > 1 ? "\n\n" : "",
		         k);
	{
		json_t *o = json_pack("{ss}", "text", text);

		payload = o ? json_dumps(o, JSON_COMPACT) : NULL;
		json_decref(o);
	}
	assert_non_null(payload);
	put_outbox(home, "long", payload);
	free(payload);
	if (harness_daemon_start(&d, home, NULL) != 0) {
		dump_log(&d);
		fail_msg("the gateway did not start");
	}
	/* killed once the user has four of the six */
	deadline = now_ms() + 30000;
	while ((n = tg_texts(emu.port, seen, sizeof seen)) < 4 && now_ms() < deadline)
		usleep(20000);
	assert_int_not_equal(harness_daemon_stop(&d, SIGKILL, 20000), -1);
	if (n < 4 || n >= 6) {
		harness_peer_stop(&emu);
		fail_msg("%d messages before the kill (want 4 or 5):\n%s", n, seen);
	}
	if (harness_daemon_start(&d, home, NULL) != 0 || harness_wait_ready(&d, 20000)) {
		dump_log(&d);
		fail_msg("the gateway did not start again");
	}
	deadline = now_ms() + 30000;
	do {
		outbox_state(home, "long", st, sizeof st, err, sizeof err);
		if (strcmp(st, "sent") == 0)
			break;
		usleep(100000);
	} while (now_ms() < deadline);
	n = tg_texts(emu.port, seen, sizeof seen);
	/* stopped before any check, so that a failure leaves no gateway behind */
	assert_int_equal(harness_daemon_stop(&d, SIGTERM, 20000), 0);
	harness_peer_stop(&emu);
	assert_string_equal(st, "sent");
	/* Every piece reached the user, in order, and at most the one piece
	 * accepted in the instant before the kill came twice (it was 4 + 6
	 * messages when the progress was kept in memory). */
	{
		const char *p = seen;

		for (k = 1; k <= 6; k++) {
			char want[32];

			snprintf(want, sizeof want, "piece %d of", k);
			p = strstr(p, want);
			if (!p)
				fail_msg("piece %d missing or out of order in:\n%s", k, seen);
		}
	}
	if (n > 7)
		fail_msg("%d messages for a reply of 6:\n%s", n, seen);
	harness_rmrf(home);
}

/* ---- 9: a delivery that waits for its own answer gets it, whatever the
 * queue mode ---- */

#define CB9_SECRET "whsec_Y2FsbGJhY2stc2VjcmV0LWZvci1yZXBsaWVzLTAxMjM0NQ=="
#define HOOK9_TOKEN "own-reply-bearer-token-0123456789"

/* The callback bodies the receiver accepted, as one JSON array. */
static json_t *cb_bodies(int port)
{
	struct buf resp;
	json_t *j, *d, *out = json_array();
	size_t i;

	buf_init(&resp, 16 << 20);
	if (harness_http(port, "GET", "/__received", NULL, NULL, &resp) == 200 && resp.data &&
	    (j = json_loads(resp.data, 0, NULL)) != NULL) {
		json_array_foreach(json_object_get(j, "deliveries"), i, d)
		if (json_integer_value(json_object_get(d, "status")) / 100 == 2)
			json_array_append(out, json_object_get(d, "body"));
		json_decref(j);
	}
	buf_free(&resp);
	return out;
}

static void test_own_reply_under_steer(void **state)
{
	const char *init[] = {"init", NULL};
	const char *rargs[] = {CB9_SECRET, NULL};
	struct harness_peer rcv;
	struct oai_fx f;
	struct asker ask[3];
	char cfg[2048], auth[128], idem[64], body[256], path[1024], want[64];
	const char *h[] = {auth, idem, "Content-Type: application/json", NULL};
	json_t *bodies = NULL;
	int64_t deadline;
	int k;

	(void)state;
	memset(&f, 0, sizeof f);
	assert_int_equal(harness_tmpdir(f.home, sizeof f.home), 0);
	assert_int_equal(harness_peer_start(&rcv, "callback_receiver.js", rargs), 0);
	/* slow enough that every delivery arrives while the first runs */
	write_home(f.home, "script.yaml",
	           "steps:\n  - delay_ms: 700\n    text: \"reply to: {{user_text}}\"\n");
	/* the agent keeps the default queue mode (steer) */
	snprintf(cfg, sizeof cfg,
	         "providers:\n"
	         "  - {id: s, api: scripted, script: script.yaml}\n"
	         "agents:\n"
	         "  - {id: main, default: true, model: s/x}\n"
	         "session: {dm_scope: main}\n"
	         "openai_api: {enabled: true, sync_timeout: 30s}\n"
	         "channels:\n"
	         "  webhook:\n"
	         "    dm_policy: open\n"
	         "    allow_from: [\"*\"]\n"
	         "    group_policy: open\n"
	         "    hooks:\n"
	         "      - {name: cb, verify: bearer, secret: \"%s\", mode: callback, "
	         "callback_url: \"http://127.0.0.1:%d/replies\", callback_secret: \"%s\"}\n",
	         HOOK9_TOKEN, rcv.port, CB9_SECRET);
	write_home(f.home, "switchboard.yaml", cfg);
	assert_int_equal(harness_cli(f.home, NULL, init), 0);
	assert_int_equal(harness_oai_token(f.home, f.token, sizeof f.token), 0);
	oai_start(&f);
	/* Four callback deliveries to one conversation, back to back. */
	snprintf(auth, sizeof auth, "Authorization: Bearer %s", HOOK9_TOKEN);
	for (k = 1; k <= 4; k++) {
		long st;

		snprintf(idem, sizeof idem, "Idempotency-Key: own-%d", k);
		snprintf(body, sizeof body,
		         "{\"text\":\"delivery %d\",\"sender\":\"bot-a\",\"conversation\":\"room\"}", k);
		st = harness_http(f.d.port, "POST", "/hooks/cb", h, body, NULL);
		if (st != 202 && st != 200) {
			harness_daemon_stop(&f.d, SIGTERM, 20000);
			harness_peer_stop(&rcv);
			fail_msg("delivery %d answered %ld", k, st);
		}
	}
	/* Three completions for one OpenAI user, at once: each its own answer
	 * (written by the child that asked). */
	for (k = 0; k < 3; k++) {
		ask[k].pid = fork();
		assert_true(ask[k].pid >= 0);
		if (ask[k].pid == 0) {
			char q[32], *reply;
			long st;

			snprintf(q, sizeof q, "question %d", k);
			reply = oai_ask(&f, "one-user", q, &st);
			snprintf(path, sizeof path, "%s/answer-%d", f.home, k);
			(void)harness_write_file(path, reply ? reply : "(none)");
			free(reply);
			_exit(0);
		}
	}
	for (k = 0; k < 3; k++)
		waitpid(ask[k].pid, NULL, 0);
	deadline = now_ms() + 20000;
	do {
		json_decref(bodies);
		bodies = cb_bodies(rcv.port);
		if (json_array_size(bodies) >= 4)
			break;
		usleep(100000);
	} while (now_ms() < deadline);
	usleep(500000); /* a fifth would show up now */
	json_decref(bodies);
	bodies = cb_bodies(rcv.port);
	assert_int_equal(harness_daemon_stop(&f.d, SIGTERM, 20000), 0);
	harness_peer_stop(&rcv);
	if (json_array_size(bodies) != 4) {
		char *dump = json_dumps(bodies, JSON_INDENT(1));

		fail_msg("%zu callbacks for 4 deliveries:\n%s", json_array_size(bodies),
		         dump ? dump : "");
	}
	/* Each callback answers its own delivery. */
	for (k = 1; k <= 4; k++) {
		bool found = false;
		json_t *b;
		size_t i;

		snprintf(want, sizeof want, "delivery %d", k);
		json_array_foreach(bodies, i, b)
		{
			const char *t = json_string_value(json_object_get(b, "text"));
			char *dump = json_dumps(b, JSON_COMPACT);
			char key[32];

			snprintf(key, sizeof key, "own-%d\"", k);
			if (t && strstr(t, want) && dump && strstr(dump, key))
				found = true;
			free(dump);
		}
		if (!found)
			fail_msg("no callback answers \"%s\" under its own id", want);
	}
	json_decref(bodies);
	for (k = 0; k < 3; k++) {
		struct buf a;

		snprintf(path, sizeof path, "%s/answer-%d", f.home, k);
		snprintf(want, sizeof want, "reply to: question %d", k);
		buf_init(&a, 1 << 20);
		assert_int_equal(harness_read_file(path, &a), 0);
		if (!a.data || strcmp(a.data, want) != 0)
			fail_msg("the completion for \"question %d\" was \"%s\"", k,
			         a.data ? a.data : "");
		buf_free(&a);
	}
	harness_rmrf(f.home);
}

/* ---- 8: a steered message the run never carried is carried into the next
 * one ---- */

static void test_steered_carried_past_timeout(void **state)
{
	const char *init[] = {"init", NULL};
	struct oai_fx f;
	struct asker slow;
	char cfg[1024], *reply;
	long st;

	(void)state;
	memset(&f, 0, sizeof f);
	assert_int_equal(harness_tmpdir(f.home, sizeof f.home), 0);
	write_home(f.home, "script.yaml",
	           "steps:\n"
	           "  - match: \"slow\"\n    delay_ms: 4000\n    text: \"slow done\"\n"
	           "  - text: \"reply to: {{user_text}}\"\n");
	snprintf(cfg, sizeof cfg,
	         "providers:\n"
	         "  - {id: s, api: scripted, script: script.yaml}\n"
	         "agents:\n"
	         "  - {id: main, default: true, model: s/x, queue_mode: steer, run_timeout: 1s}\n"
	         "openai_api: {enabled: true, sync_timeout: 30s}\n");
	write_home(f.home, "switchboard.yaml", cfg);
	assert_int_equal(harness_cli(f.home, NULL, init), 0);
	assert_int_equal(harness_oai_token(f.home, f.token, sizeof f.token), 0);
	oai_start(&f);
	/* The first run waits on its model past run_timeout; the second
	 * message is steered in meanwhile and never reaches a model call. */
	ask_in_background(&f, &slow, "u", "slow one");
	usleep(300000);
	reply = oai_ask(&f, "u", "quick two", &st);
	waitpid(slow.pid, NULL, 0);
	assert_int_equal(harness_daemon_stop(&f.d, SIGTERM, 20000), 0);
	if (st != 200 || !reply || strcmp(reply, "reply to: quick two") != 0)
		fail_msg("the steered message was answered %ld \"%s\"", st, reply ? reply : "");
	free(reply);
	harness_rmrf(f.home);
}

/* ---- 11: a taken port is an exit, not a silent gateway ---- */

/* A stop while a store operation of the dispatcher's is in flight: the
 * store's close runs its last callbacks after the dispatcher is freed, and
 * a claim's callback then dispatched into freed memory (found by the crash
 * enumeration: a heartbeat accepted as the stop began). Here each batch of
 * the store waits 400 ms, and the agent's heartbeat (about once a second on
 * the test clock) puts a message in the inbox; the stop comes once that put
 * is committed, while the claim that follows it is still in the writer.
 * The stop must end cleanly (0, no sanitizer report), and the start after
 * it must find the message (still claimed) and run it. */
static void test_stop_with_claim_in_flight(void **state)
{
	const char *init[] = {"init", NULL};
	struct harness_daemon d;
	char home[512], path[700];
	int code, done = 0, open = 0;
	int64_t deadline;

	(void)state;
	assert_int_equal(harness_tmpdir(home, sizeof home), 0);
	write_home(home, "script.yaml", "steps:\n  - text: \"HEARTBEAT_OK\"\n");
	write_home(home, "switchboard.yaml",
	           "providers:\n  - {id: s, api: scripted, script: script.yaml}\nagents:\n"
	           "  - {id: main, default: true, model: s/x, heartbeat: {every: 30m}}\n");
	assert_int_equal(harness_cli(home, NULL, init), 0);
	snprintf(path, sizeof path, "workspaces/main/HEARTBEAT.md");
	write_home(home, path, "- Check that all is well.\n");
	setenv("SWITCHBOARD_TEST_STORE_DELAY_MS", "400", 1);
	setenv("SWITCHBOARD_TEST_CLOCK_RATE", "1800", 1);
	code = harness_daemon_start(&d, home, NULL);
	unsetenv("SWITCHBOARD_TEST_STORE_DELAY_MS");
	unsetenv("SWITCHBOARD_TEST_CLOCK_RATE");
	assert_int_equal(code, 0);
	if (harness_wait_ready(&d, 20000) != 0) {
		dump_log(&d);
		fail_msg("the gateway did not start");
	}
	deadline = now_ms() + 20000;
	for (;;) {
		inbox_counts(home, &done, &open);
		if (open >= 1)
			break;
		if (now_ms() > deadline) {
			dump_log(&d);
			fail_msg("no heartbeat reached the inbox");
		}
		usleep(5000);
	}
	code = harness_daemon_stop(&d, SIGTERM, 20000);
	if (code != 0) {
		dump_log(&d);
		fail_msg("the stop with a claim in flight ended with %d", code);
	}
	if (harness_daemon_start(&d, home, NULL) != 0 || harness_wait_ready(&d, 20000) != 0) {
		dump_log(&d);
		fail_msg("the gateway did not start again");
	}
	deadline = now_ms() + 30000;
	for (;;) {
		inbox_counts(home, &done, &open);
		if (done >= 1 && open == 0)
			break;
		if (now_ms() > deadline) {
			dump_log(&d);
			fail_msg("the heartbeat was not run after the restart (%d done, %d open)",
			         done, open);
		}
		usleep(50000);
	}
	code = harness_daemon_stop(&d, SIGTERM, 20000);
	harness_rmrf(home);
	assert_int_equal(code, 0);
}

static void test_port_taken(void **state)
{
	const char *init[] = {"init", NULL};
	struct sockaddr_in sa;
	socklen_t len = sizeof sa;
	char home[512], out[700], portarg[16];
	struct buf log;
	pid_t pid;
	int fd, yes = 1, port, code;

	(void)state;
	assert_int_equal(harness_tmpdir(home, sizeof home), 0);
	write_home(home, "script.yaml", "steps:\n  - text: \"hi\"\n");
	write_home(home, "switchboard.yaml",
	           "providers:\n  - {id: s, api: scripted, script: script.yaml}\nagents:\n"
	           "  - {id: main, default: true, model: s/echo}\n");
	assert_int_equal(harness_cli(home, NULL, init), 0);
	/* Another program listens on the port (as servers do, SO_REUSEADDR). */
	fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(fd >= 0);
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
	memset(&sa, 0, sizeof sa);
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
	assert_int_equal(listen(fd, 4), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
	port = ntohs(sa.sin_port);
	snprintf(portarg, sizeof portarg, "%d", port);
	snprintf(out, sizeof out, "%s/gateway.out", home);
	{
		const char *args[] = {"gateway", "--port", portarg, NULL};

		pid = harness_cli_start(home, out, args);
	}
	assert_true(pid > 0);
	code = harness_wait(pid, 15000);
	buf_init(&log, 16 << 20);
	harness_read_file(out, &log);
	if (code != 78)
		fail_msg("exit %d (want 78, EX_CONFIG); output:\n%s", code,
		         log.data ? log.data : "");
	/* It names the port and what holds it (this test's process). */
	{
		char want[64];

		snprintf(want, sizeof want, "port=%d", port);
		assert_non_null(strstr(log.data, want));
		snprintf(want, sizeof want, "held_by=\"pid %ld ", (long)getpid());
		assert_non_null(strstr(log.data, want));
	}
	/* and never claimed to be ready or listening */
	assert_null(strstr(log.data, "msg=ready"));
	assert_null(strstr(log.data, "is listening on"));
	buf_free(&log);
	close(fd);
	harness_rmrf(home);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_port_taken),
	    cmocka_unit_test(test_stop_with_claim_in_flight),
	    cmocka_unit_test(test_own_reply_under_steer),
	    cmocka_unit_test(test_steered_carried_past_timeout),
	    cmocka_unit_test(test_pairing_code_reaches_telegram),
	    cmocka_unit_test(test_reply_pieces_resume),
	    cmocka_unit_test(test_empty_entry_not_sent),
	    cmocka_unit_test(test_empty_transcript),
	    cmocka_unit_test(test_kill_during_tool),
	    cmocka_unit_test(test_idempotency_after_restart),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
