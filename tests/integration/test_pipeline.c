/*
 * test_pipeline.c - the message pipeline's behaviour with a slow scripted
 * turn, driven through the OpenAI-compatible endpoint by the official SDK
 * (tests/fakes/openai_client.js): the queue modes (followup, collect,
 * steer, interrupt), queue_cap with each drop policy, the run_timeout
 * watchdog (the queue behind a stopped run still runs), sessions running
 * side by side while each stays serial, and restart recovery (SIGKILL in
 * the middle of a run: the message runs again and is answered once). The
 * evidence is what the clients got, the session transcripts (what the
 * model was sent) and /metrics.
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
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "harness.h"
#include "harness_oai.h"

/* "slow" turns take SLOW_MS, "sleepy" ones 10 s, "crashy" ones 3 s;
 * everything else echoes at once. */
#define SLOW_MS 2500
#define SCRIPT                                                                                     \
	"steps:\n"                                                                                 \
	"  - match: slow\n"                                                                        \
	"    delay_ms: 2500\n"                                                                     \
	"    text: \"done with {{user_text}}\"\n"                                                  \
	"  - match: sleepy\n"                                                                      \
	"    delay_ms: 10000\n"                                                                    \
	"    text: \"woke up after {{user_text}}\"\n"                                              \
	"  - match: crashy\n"                                                                      \
	"    delay_ms: 3000\n"                                                                     \
	"    text: \"survived {{user_text}}\"\n"                                                   \
	"  - text: \"echo {{user_text}}\"\n"

#define CONFIG                                                                                     \
	"providers:\n"                                                                             \
	"  - {id: s, api: scripted, script: script.yaml}\n"                                        \
	"agents:\n"                                                                                \
	"  - {id: main, default: true, model: s/echo}\n"                                           \
	"  - {id: fu, model: s/echo, queue_mode: followup}\n"                                      \
	"  - {id: co, model: s/echo, queue_mode: collect}\n"                                       \
	"  - {id: st, model: s/echo, queue_mode: steer}\n"                                         \
	"  - {id: in, model: s/echo, queue_mode: interrupt}\n"                                     \
	"  - {id: capold, model: s/echo, queue_mode: followup, queue_cap: 1, queue_drop: "         \
	"oldest}\n"                                                                                \
	"  - {id: capnew, model: s/echo, queue_mode: followup, queue_cap: 1, queue_drop: "         \
	"newest}\n"                                                                                \
	"  - {id: wd, model: s/echo, queue_mode: followup, run_timeout: 1s}\n"                     \
	"  - {id: rec, model: s/echo, queue_mode: followup}\n"                                     \
	"openai_api: {enabled: true, sync_timeout: 30s}\n"

struct fixture {
	char home[512];
	char token[256];
	struct harness_daemon d;
};

static struct fixture fx;

static int prepare_home(const char *home)
{
	const char *init[] = {"init", NULL};
	char path[700];

	snprintf(path, sizeof path, "%s/switchboard.yaml", home);
	if (harness_write_file(path, CONFIG) != 0)
		return -1;
	snprintf(path, sizeof path, "%s/script.yaml", home);
	if (harness_write_file(path, SCRIPT) != 0)
		return -1;
	return harness_cli(home, NULL, init) == 0 ? 0 : -1;
}

static void print_log(const struct harness_daemon *d)
{
	struct buf log;

	buf_init(&log, 64 << 20);
	harness_daemon_log(d, &log);
	fprintf(stderr, "daemon log:\n%s\n", log.data ? log.data : "");
	buf_free(&log);
}

static int setup(void **state)
{
	(void)state;
	memset(&fx, 0, sizeof fx);
	if (harness_tmpdir(fx.home, sizeof fx.home) != 0 || prepare_home(fx.home) != 0)
		return -1;
	if (harness_daemon_start(&fx.d, fx.home, NULL) != 0 || harness_wait_ready(&fx.d, 20000))
		return -1;
	return harness_oai_token(fx.home, fx.token, sizeof fx.token);
}

static int teardown(void **state)
{
	int code;

	(void)state;
	code = harness_daemon_stop(&fx.d, SIGTERM, 20000);
	if (code != 0) {
		fprintf(stderr, "daemon exit %d\n", code);
		print_log(&fx.d);
	}
	harness_rmrf(fx.home);
	return code == 0 ? 0 : -1;
}

static json_t *finish(struct harness_oai_client *c)
{
	json_t *r = NULL;

	if (harness_oai_finish(c, 90000, &r) != 0)
		print_log(&fx.d);
	assert_non_null(r);
	return r;
}

static void session_of(char *out, size_t size, const char *agent, const char *user)
{
	snprintf(out, size, "agent:%s:http:user:%s", agent, user);
}

/* Waits until the session's transcript shows text: its turn is running. */
static void wait_turn(const char *agent, const char *user, const char *text)
{
	char key[256];

	session_of(key, sizeof key, agent, user);
	if (harness_oai_wait_message(fx.home, agent, key, text, 30000) != 0) {
		print_log(&fx.d);
		fail_msg("no turn with \"%s\" started in %s", text, key);
	}
}

/* Up to three messages to one session, in order: a at once; b when a's turn
 * is running; c once b is in the inbox (or, with wait_b, once b's own turn
 * runs). Returns the clients' results. */
static json_t *in_sequence(const char *agent, const char *user, const char *a, const char *b,
                           const char *c, bool wait_b, bool stream_b)
{
	struct harness_oai_client cl;
	char plan[2048], out[700];
	long long accepted = harness_oai_metric(fx.d.port, "switchboard_ingest_accepted_total");

	snprintf(plan, sizeof plan,
	         "{\"ops\":["
	         "{\"op\":\"chat\",\"model\":\"switchboard/%s\",\"user\":\"%s\",\"text\":\"%s\"},"
	         "{\"op\":\"chat\",\"model\":\"switchboard/%s\",\"user\":\"%s\",\"text\":\"%s\","
	         "\"gate\":\"b\",\"stream\":%s}%s%s%s%s%s%s%s]}",
	         agent, user, a, agent, user, b, stream_b ? "true" : "false",
	         c ? ",{\"op\":\"chat\",\"model\":\"switchboard/" : "", c ? agent : "",
	         c ? "\",\"user\":\"" : "", c ? user : "", c ? "\",\"text\":\"" : "", c ? c : "",
	         c ? "\",\"gate\":\"c\"}" : "");
	snprintf(out, sizeof out, "%s/client.out", fx.home);
	assert_int_equal(harness_oai_start(&cl, fx.d.port, fx.token, plan, out), 0);
	wait_turn(agent, user, a);
	assert_int_equal(harness_oai_open_gate(&cl, "b"), 0);
	if (c) {
		if (wait_b)
			wait_turn(agent, user, b);
		else
			assert_int_equal(
			    harness_oai_wait_metric(fx.d.port, "switchboard_ingest_accepted_total",
			                            accepted + 2, 30000),
			    0);
		assert_int_equal(harness_oai_open_gate(&cl, "c"), 0);
	}
	return finish(&cl);
}

static const char *text_of(const json_t *results, size_t i)
{
	const json_t *r = json_array_get(results, i);

	if (!json_is_true(json_object_get(r, "ok"))) {
		char *dump = json_dumps(r, JSON_COMPACT);

		fprintf(stderr, "result %zu failed: %s\n", i, dump);
		free(dump);
		return "";
	}
	return json_string_value(json_object_get(r, "text"));
}

static const char *error_code(const json_t *results, size_t i)
{
	const json_t *e = json_object_get(json_array_get(results, i), "error");
	const char *c = json_string_value(json_object_get(e, "code"));

	return c ? c : "";
}

static long long end_ms(const json_t *results, size_t i)
{
	return json_integer_value(json_object_get(json_array_get(results, i), "end_ms"));
}

/* The session's history, as the model was sent it. */
static json_t *history(const char *agent, const char *user)
{
	char key[256];

	session_of(key, sizeof key, agent, user);
	return harness_oai_transcript(fx.home, agent, key);
}

/* Text of message i of a history (static buffer, for asserts). */
static const char *msg_at(const json_t *msgs, size_t i)
{
	static char out[4096];
	char *t = harness_oai_message_text(json_array_get(msgs, i));

	snprintf(out, sizeof out, "%s", t ? t : "");
	free(t);
	return out;
}

static const char *role_at(const json_t *msgs, size_t i)
{
	const char *r = json_string_value(json_object_get(json_array_get(msgs, i), "role"));

	return r ? r : "";
}

static void test_followup(void **state)
{
	json_t *r, *h;

	(void)state;
	r = in_sequence("fu", "u1", "slow one", "two", "three", false, false);
	/* each its own reply, in order, after the slow turn */
	assert_string_equal(text_of(r, 0), "done with slow one");
	assert_string_equal(text_of(r, 1), "echo two");
	assert_string_equal(text_of(r, 2), "echo three");
	assert_true(end_ms(r, 0) <= end_ms(r, 1));
	assert_true(end_ms(r, 1) <= end_ms(r, 2));
	json_decref(r);
	h = history("fu", "u1");
	assert_int_equal(json_array_size(h), 6);
	assert_string_equal(msg_at(h, 0), "slow one");
	assert_string_equal(msg_at(h, 1), "done with slow one");
	assert_string_equal(msg_at(h, 2), "two");
	assert_string_equal(msg_at(h, 3), "echo two");
	assert_string_equal(msg_at(h, 4), "three");
	assert_string_equal(msg_at(h, 5), "echo three");
	json_decref(h);
}

static void test_collect(void **state)
{
	json_t *r, *h;

	(void)state;
	r = in_sequence("co", "u1", "slow one", "two", "three", false, false);
	assert_string_equal(text_of(r, 0), "done with slow one");
	/* the two that waited became one turn, and its reply answers both */
	assert_string_equal(text_of(r, 1), "echo two\n\nthree");
	assert_string_equal(text_of(r, 2), "echo two\n\nthree");
	json_decref(r);
	h = history("co", "u1");
	/* two turns; the model's second request holds both texts */
	assert_int_equal(json_array_size(h), 4);
	assert_string_equal(role_at(h, 2), "user");
	assert_string_equal(msg_at(h, 2), "two\n\nthree");
	json_decref(h);
}

static void test_steer(void **state)
{
	json_t *r, *h;

	(void)state;
	r = in_sequence("st", "u1", "slow one", "also this", NULL, false, true);
	/* one run answers both: the steered message reached the running turn */
	assert_string_equal(text_of(r, 0), "done with slow one\n\necho also this");
	assert_string_equal(text_of(r, 1), text_of(r, 0));
	json_decref(r);
	h = history("st", "u1");
	/* the turn's next model call had the new message in its history */
	assert_int_equal(json_array_size(h), 4);
	assert_string_equal(msg_at(h, 1), "done with slow one");
	assert_string_equal(role_at(h, 2), "user");
	assert_string_equal(msg_at(h, 2), "also this");
	assert_string_equal(msg_at(h, 3), "echo also this");
	json_decref(h);
}

static void test_interrupt(void **state)
{
	json_t *r, *h;

	(void)state;
	r = in_sequence("in", "u1", "slow one", "slow two", "three", true, false);
	/* each newer message aborted the run before it; the newest ran */
	assert_string_equal(error_code(r, 0), "interrupted");
	assert_string_equal(json_string_value(json_object_get(
	                        json_object_get(json_array_get(r, 0), "error"), "class")),
	                    "ConflictError");
	assert_string_equal(error_code(r, 1), "interrupted");
	assert_string_equal(text_of(r, 2), "echo three");
	json_decref(r);
	h = history("in", "u1");
	assert_true(json_array_size(h) >= 2);
	assert_string_equal(msg_at(h, json_array_size(h) - 1), "echo three");
	/* no aborted turn left an answer behind */
	for (size_t i = 0; i < json_array_size(h); i++)
		assert_null(strstr(msg_at(h, i), "done with"));
	json_decref(h);
}

static void test_queue_cap(void **state)
{
	json_t *r, *h;
	long long dropped = harness_oai_metric(fx.d.port, "switchboard_queue_dropped_total");

	(void)state;
	/* cap 1, drop oldest: "two" waits, "three" pushes it out */
	r = in_sequence("capold", "u1", "slow one", "two", "three", false, false);
	assert_string_equal(text_of(r, 0), "done with slow one");
	assert_string_equal(error_code(r, 1), "queue_full");
	assert_int_equal(json_integer_value(json_object_get(
	                     json_object_get(json_array_get(r, 1), "error"), "status")),
	                 429);
	assert_string_equal(text_of(r, 2), "echo three");
	json_decref(r);
	h = history("capold", "u1");
	assert_int_equal(json_array_size(h), 4);
	assert_string_equal(msg_at(h, 2), "three");
	json_decref(h);
	/* cap 1, drop newest: "three" is refused, "two" runs */
	r = in_sequence("capnew", "u1", "slow one", "two", "three", false, false);
	assert_string_equal(text_of(r, 0), "done with slow one");
	assert_string_equal(text_of(r, 1), "echo two");
	assert_string_equal(error_code(r, 2), "queue_full");
	json_decref(r);
	h = history("capnew", "u1");
	assert_int_equal(json_array_size(h), 4);
	assert_string_equal(msg_at(h, 2), "two");
	json_decref(h);
	assert_int_equal(harness_oai_metric(fx.d.port, "switchboard_queue_dropped_total"),
	                 dropped + 2);
}

static void test_watchdog(void **state)
{
	json_t *r, *h;
	long long timed_out = harness_oai_metric(fx.d.port, "switchboard_runs_timed_out_total");

	(void)state;
	r = in_sequence("wd", "u1", "sleepy one", "after it", NULL, false, false);
	/* the 10 s step was stopped at run_timeout (1 s), and said so */
	assert_non_null(strstr(text_of(r, 0), "Stopped"));
	assert_non_null(strstr(text_of(r, 0), "1 s limit"));
	assert_true(end_ms(r, 0) < 8000);
	/* the message queued behind it still ran */
	assert_string_equal(text_of(r, 1), "echo after it");
	assert_true(end_ms(r, 1) < 9000);
	json_decref(r);
	assert_int_equal(harness_oai_metric(fx.d.port, "switchboard_runs_timed_out_total"),
	                 timed_out + 1);
	h = history("wd", "u1");
	assert_string_equal(msg_at(h, json_array_size(h) - 1), "echo after it");
	for (size_t i = 0; i < json_array_size(h); i++)
		assert_null(strstr(msg_at(h, i), "woke up"));
	json_decref(h);
}

/* Two sessions run side by side; within one session, one run at a time. */
static void test_sessions_in_parallel(void **state)
{
	struct harness_oai_client cl;
	char out[700];
	json_t *r;
	long long x, y, z;

	(void)state;
	snprintf(out, sizeof out, "%s/client.out", fx.home);
	assert_int_equal(harness_oai_start(&cl, fx.d.port, fx.token,
	                                   "{\"ops\":["
	                                   "{\"op\":\"chat\",\"model\":\"switchboard/fu\","
	                                   "\"user\":\"p1\",\"text\":\"slow x\"},"
	                                   "{\"op\":\"chat\",\"model\":\"switchboard/fu\","
	                                   "\"user\":\"p2\",\"text\":\"slow y\"},"
	                                   "{\"op\":\"chat\",\"model\":\"switchboard/fu\","
	                                   "\"user\":\"p1\",\"text\":\"slow z\",\"gate\":\"z\"}]}",
	                                   out),
	                 0);
	wait_turn("fu", "p1", "slow x");
	assert_int_equal(harness_oai_open_gate(&cl, "z"), 0);
	r = finish(&cl);
	assert_string_equal(text_of(r, 0), "done with slow x");
	assert_string_equal(text_of(r, 1), "done with slow y");
	assert_string_equal(text_of(r, 2), "done with slow z");
	x = end_ms(r, 0);
	y = end_ms(r, 1);
	z = end_ms(r, 2);
	/* x and y overlapped (one after the other, they would end a slow turn
	 * apart); z waited for x in its session: a whole slow turn after it */
	assert_true(llabs(x - y) < SLOW_MS / 2);
	assert_true(z - x >= SLOW_MS - 100);
	json_decref(r);
}

/* The recovery test's own daemon and home (removed by its teardown even
 * when an assertion fails). */
static struct harness_daemon rec_d;
static char rec_home[512];

static int recovery_teardown(void **state)
{
	(void)state;
	if (rec_d.pid > 0)
		harness_daemon_stop(&rec_d, SIGKILL, 5000);
	if (rec_home[0])
		harness_rmrf(rec_home);
	rec_home[0] = '\0';
	return 0;
}

/* SIGKILL in the middle of a run: after the restart the message runs again
 * and is answered once; a retry with its Idempotency-Key gets that answer
 * and is not a second message. */
static void test_restart_recovery(void **state)
{
	static const char plan[] = "{\"ops\":[{\"op\":\"chat\",\"model\":\"switchboard/rec\","
	                           "\"user\":\"dave\",\"idempotency_key\":\"crash-key-1\","
	                           "\"text\":\"crashy please\",\"gate\":\"go\"}]}";
	static const char key[] = "agent:rec:http:user:dave";
	struct harness_oai_client c;
	char token[256], out[700];
	json_t *r, *h;
	struct buf log;

	(void)state;
	assert_int_equal(harness_tmpdir(rec_home, sizeof rec_home), 0);
	assert_int_equal(prepare_home(rec_home), 0);
	assert_int_equal(harness_oai_token(rec_home, token, sizeof token), 0);
	assert_int_equal(harness_daemon_start(&rec_d, rec_home, NULL), 0);
	assert_int_equal(harness_wait_ready(&rec_d, 20000), 0);
	snprintf(out, sizeof out, "%s/first.out", rec_home);
	assert_int_equal(harness_oai_start(&c, rec_d.port, token, plan, out), 0);
	assert_int_equal(harness_oai_open_gate(&c, "go"), 0);
	/* the run is under way (its message is in the transcript): kill the
	 * daemon in the middle of the 3 s step */
	assert_int_equal(harness_oai_wait_message(rec_home, "rec", key, "crashy please", 30000), 0);
	usleep(300000);
	assert_int_equal(harness_daemon_stop(&rec_d, SIGKILL, 5000), 128 + SIGKILL);
	assert_int_equal(harness_oai_finish(&c, 30000, &r), 0);
	assert_false(json_is_true(json_object_get(json_array_get(r, 0), "ok")));
	json_decref(r);
	h = harness_oai_transcript(rec_home, "rec", key);
	assert_int_equal(json_array_size(h), 1); /* no answer yet */
	json_decref(h);

	/* restart: the unfinished message is dispatched again; the client
	 * retries it with the same Idempotency-Key as soon as the gateway is up */
	assert_int_equal(harness_daemon_start(&rec_d, rec_home, NULL), 0);
	snprintf(out, sizeof out, "%s/second.out", rec_home);
	assert_int_equal(harness_oai_start(&c, rec_d.port, token, plan, out), 0);
	assert_int_equal(harness_wait_ready(&rec_d, 20000), 0);
	assert_int_equal(harness_oai_open_gate(&c, "go"), 0);
	assert_int_equal(harness_oai_finish(&c, 60000, &r), 0);
	assert_string_equal(text_of(r, 0), "survived crashy please");
	json_decref(r);
	/* the retry was recognised as the same message, not a new one */
	assert_int_equal(harness_oai_metric(rec_d.port, "switchboard_ingest_duplicates_total"), 1);
	assert_int_equal(harness_oai_metric(rec_d.port, "switchboard_ingest_accepted_total"), 0);
	/* the reply went through the outbox once */
	assert_int_equal(
	    harness_oai_wait_metric(rec_d.port, "switchboard_outbox_sent_total", 1, 10000), 0);
	assert_int_equal(harness_oai_metric(rec_d.port, "switchboard_outbox_sent_total"), 1);
	buf_init(&log, 64 << 20);
	harness_daemon_log(&rec_d, &log);
	assert_non_null(strstr(log.data, "recovered work left by the last run\" inbox=1"));
	buf_free(&log);

	/* answered once: the message entered the session once (the second run
	 * resumed the first one's history) and got one reply */
	h = harness_oai_transcript(rec_home, "rec", key);
	assert_int_equal(json_array_size(h), 2);
	assert_string_equal(role_at(h, 0), "user");
	assert_string_equal(msg_at(h, 0), "crashy please");
	assert_string_equal(role_at(h, 1), "assistant");
	assert_string_equal(msg_at(h, 1), "survived crashy please");
	json_decref(h);
	/* nothing left in the inbox (the gauge is refreshed every second) */
	usleep(1200000);
	assert_int_equal(harness_oai_metric(rec_d.port, "switchboard_inbox_depth"), 0);
	assert_int_equal(harness_daemon_stop(&rec_d, SIGTERM, 20000), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_followup),
	    cmocka_unit_test(test_collect),
	    cmocka_unit_test(test_steer),
	    cmocka_unit_test(test_interrupt),
	    cmocka_unit_test(test_queue_cap),
	    cmocka_unit_test(test_watchdog),
	    cmocka_unit_test(test_sessions_in_parallel),
	    cmocka_unit_test_teardown(test_restart_recovery, recovery_teardown),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
