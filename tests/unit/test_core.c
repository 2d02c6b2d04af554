/*
 * test_core.c - the small core library: buffers, number parsing, logging
 * (format, escaping, redaction), envelopes, metrics rendering.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "gateway/core/buf.h"
#include "gateway/core/envelope.h"
#include "gateway/core/err.h"
#include "gateway/core/fmt.h"
#include "gateway/core/invariant.h"
#include "gateway/core/log.h"
#include "gateway/core/num.h"
#include "gateway/core/resolve.h"
#include "gateway/core/secret.h"
#include "gateway/core/yamljson.h"
#include "gateway/obs/metrics.h"
#include "tests/integration/harness.h"

static void test_buf_bounds(void **state)
{
	struct buf b;

	(void)state;
	buf_init(&b, 8);
	assert_int_equal(buf_puts(&b, "abcd"), SB_OK);
	assert_int_equal(buf_printf(&b, "%d", 123), SB_OK);
	assert_string_equal(b.data, "abcd123");
	/* one byte left: a two-byte append fails and changes nothing */
	assert_int_equal(buf_puts(&b, "xy"), SB_ERR_TOOBIG);
	assert_string_equal(b.data, "abcd123");
	assert_int_equal(buf_puts(&b, "z"), SB_OK);
	assert_int_equal(b.len, 8);
	assert_int_equal(buf_printf(&b, "%s", "q"), SB_ERR_TOOBIG);
	buf_reset(&b);
	assert_int_equal(b.len, 0);
	assert_string_equal(b.data, "");
	char *s = buf_steal(&b);
	assert_string_equal(s, "");
	free(s);
	assert_null(b.data);
	buf_free(&b);
}

/* One pass into the free space, a second when it does not fit: long and
 * short texts, a text that fills the room to the byte, and at the limit an
 * error that leaves the text as it was. */
static void test_buf_printf_passes(void **state)
{
	struct buf b;
	char big[10001];

	(void)state;
	memset(big, 'x', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	buf_init(&b, 1 << 20);
	assert_int_equal(buf_printf(&b, "<%s>", big), SB_OK);
	assert_int_equal(b.len, 10002);
	assert_int_equal(b.data[0], '<');
	assert_int_equal(b.data[10001], '>');
	assert_int_equal(b.data[10002], '\0');
	for (size_t k = 1; k < 600; k += 7) {
		size_t before = b.len, room = b.cap - b.len - 1;

		/* exactly the room left, then one more than it */
		assert_int_equal(buf_printf(&b, "%.*s", (int)(room < k ? room : k), big), SB_OK);
		assert_int_equal(b.len, before + (room < k ? room : k));
		assert_int_equal(strlen(b.data), b.len);
	}
	buf_free(&b);

	buf_init(&b, 300);
	assert_int_equal(buf_printf(&b, "%.200s", big), SB_OK);
	assert_int_equal(buf_printf(&b, "%.150s", big), SB_ERR_TOOBIG);
	assert_int_equal(b.len, 200);
	assert_int_equal(strlen(b.data), 200);
	assert_int_equal(buf_printf(&b, "%.100s", big), SB_OK);
	assert_int_equal(b.len, 300);
	assert_int_equal(strlen(b.data), 300);
	buf_free(&b);
}

static void test_buf_grows(void **state)
{
	struct buf b;

	(void)state;
	buf_init(&b, 1 << 20);
	for (int i = 0; i < 10000; i++)
		assert_int_equal(buf_printf(&b, "%04d", i % 10000), SB_OK);
	assert_int_equal(b.len, 40000);
	assert_memory_equal(b.data + 39996, "9999", 4);
	buf_free(&b);
}

static void test_num_parse(void **state)
{
	int64_t v = 0;
	uint64_t u = 0;

	(void)state;
	assert_int_equal(num_parse_i64("8790", 1, 65535, &v), SB_OK);
	assert_int_equal(v, 8790);
	assert_int_equal(num_parse_i64("-5", -10, 10, &v), SB_OK);
	assert_int_equal(v, -5);
	assert_int_equal(num_parse_i64("70000", 1, 65535, &v), SB_ERR_TOOBIG);
	assert_int_equal(num_parse_i64("12x", 0, 100, &v), SB_ERR_INVAL);
	assert_int_equal(num_parse_i64("", 0, 100, &v), SB_ERR_INVAL);
	assert_int_equal(num_parse_i64(" 1", 0, 100, &v), SB_ERR_INVAL);
	assert_int_equal(num_parse_i64("99999999999999999999", 0, INT64_MAX, &v), SB_ERR_TOOBIG);
	assert_int_equal(num_parse_u64("-1", UINT64_MAX, &u), SB_ERR_INVAL);
	assert_int_equal(num_parse_u64("42", 100, &u), SB_OK);
	assert_int_equal(u, 42);

	assert_int_equal(num_parse_duration_ms("250ms", &v), SB_OK);
	assert_int_equal(v, 250);
	assert_int_equal(num_parse_duration_ms("30s", &v), SB_OK);
	assert_int_equal(v, 30000);
	assert_int_equal(num_parse_duration_ms("5m", &v), SB_OK);
	assert_int_equal(v, 300000);
	assert_int_equal(num_parse_duration_ms("2h", &v), SB_OK);
	assert_int_equal(v, 7200000);
	assert_int_equal(num_parse_duration_ms("1d", &v), SB_OK);
	assert_int_equal(v, 86400000);
	assert_int_equal(num_parse_duration_ms("1500", &v), SB_OK);
	assert_int_equal(v, 1500);
	assert_int_equal(num_parse_duration_ms("5 s", &v), SB_ERR_INVAL);
	assert_int_equal(num_parse_duration_ms("s", &v), SB_ERR_INVAL);
	assert_int_equal(num_parse_duration_ms("5y", &v), SB_ERR_INVAL);
	assert_int_equal(num_parse_size("64KiB", &v), SB_OK);
	assert_int_equal(v, 65536);
	assert_int_equal(num_parse_size("10MiB", &v), SB_OK);
	assert_int_equal(v, 10485760);
	assert_int_equal(num_parse_size("512", &v), SB_OK);
	assert_int_equal(v, 512);
	assert_int_equal(num_parse_size("99999999999GiB", &v), SB_ERR_TOOBIG);
}

/* Captures log lines through a memory FILE. */
static char *capture_log(void (*emit)(void))
{
	char *data = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&data, &len);

	assert_non_null(f);
	log_configure(LOG_DEBUG, LOG_FORMAT_LOGFMT, f);
	emit();
	log_configure(LOG_INFO, LOG_FORMAT_LOGFMT, NULL);
	fclose(f);
	return data;
}

static void emit_logfmt(void)
{
	log_info("store", "opened db", LOG_S("path", "/tmp/a b"), LOG_I("schema", 3),
	         LOG_S("plain", "x"), LOG_S("quote", "say \"hi\"\n"));
	log_debug("core", "second");
}

static void test_log_logfmt(void **state)
{
	char *out = capture_log(emit_logfmt);
	char *second;

	(void)state;
	assert_non_null(strstr(out, " level=info module=store msg=\"opened db\" path=\"/tmp/a b\" "
	                            "schema=3 plain=x quote=\"say \\\"hi\\\"\\n\"\n"));
	assert_true(strncmp(out, "ts=", 3) == 0);
	second = strchr(out, '\n') + 1;
	assert_non_null(strstr(second, "level=debug module=core msg=second\n"));
	/* exactly two lines */
	assert_null(strchr(strchr(second, '\n') + 1, '\n'));
	free(out);
}

static void emit_secret(void)
{
	static const char *const secrets[] = {"xoxb-SECRET-123", "abc", "tg:TOKEN"};

	log_set_secrets(secrets, 3);
	log_warn("slack", "auth failed for xoxb-SECRET-123 (again)", LOG_S("token", "tg:TOKEN"),
	         LOG_S("url", "https://api/bottg:TOKEN/getMe"), LOG_S("word", "abc"));
	log_set_secrets(NULL, 0);
	log_warn("slack", "after", LOG_S("token", "tg:TOKEN"));
}

static void test_log_redacts_secrets(void **state)
{
	char *out = capture_log(emit_secret);

	(void)state;
	assert_null(strstr(strchr(out, '\n') ? out : out, "xoxb-SECRET-123"));
	assert_non_null(strstr(out, "msg=\"auth failed for [REDACTED] (again)\""));
	assert_non_null(strstr(out, "token=[REDACTED]"));
	assert_non_null(strstr(out, "url=https://api/bot[REDACTED]/getMe"));
	/* values shorter than 4 bytes are not treated as secrets */
	assert_non_null(strstr(out, "word=abc"));
	/* cleared: the second line shows the value again */
	assert_non_null(strstr(out, "msg=after token=tg:TOKEN"));
	free(out);
}

static void test_log_json(void **state)
{
	char line[512];
	struct log_field f[] = {LOG_S("k", "v\"1"), LOG_I("n", -7), LOG_D("d", 0.5)};

	(void)state;
	log_configure(LOG_INFO, LOG_FORMAT_JSON, NULL);
	log_format_event(line, sizeof line, LOG_ERROR, "gw", "boom", f, 3);
	log_configure(LOG_INFO, LOG_FORMAT_LOGFMT, NULL);
	assert_true(strncmp(line, "{\"ts\":\"", 7) == 0);
	assert_non_null(strstr(line, "\",\"level\":\"error\",\"module\":\"gw\",\"msg\":\"boom\","
	                             "\"k\":\"v\\\"1\",\"n\":-7,\"d\":0.5}"));
}

static void test_log_parse(void **state)
{
	enum log_level l;
	enum log_format f;

	(void)state;
	assert_int_equal(log_level_parse("warn", &l), SB_OK);
	assert_int_equal(l, LOG_WARN);
	assert_int_equal(log_level_parse("verbose", &l), SB_ERR_INVAL);
	assert_int_equal(log_format_parse("json", &f), SB_OK);
	assert_int_equal(f, LOG_FORMAT_JSON);
	assert_int_equal(log_format_parse("xml", &f), SB_ERR_INVAL);
}

/* The compact JSON of log_line_json(line). */
static char *line_json(const char *line)
{
	json_t *o = log_line_json(line, strlen(line));
	char *t;

	assert_non_null(o);
	t = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(o);
	assert_non_null(t);
	return t;
}

static void test_log_line_json(void **state)
{
	struct log_field f[] = {LOG_S("text", "a \"quoted\" = \\ word\n\tnext\x01"), LOG_I("n", -7),
	                        LOG_D("d", 0.5), LOG_S("empty", ""), LOG_S("path", "/x/y")};
	char line[1024], *t;
	json_t *o;

	(void)state;
	/* What the writer writes reads back field for field, typed. */
	log_configure(LOG_INFO, LOG_FORMAT_LOGFMT, NULL);
	log_format_event(line, sizeof line, LOG_WARN, "gw", "two words", f, 5);
	o = log_line_json(line, strlen(line));
	assert_non_null(o);
	assert_string_equal(json_string_value(json_object_get(o, "level")), "warn");
	assert_string_equal(json_string_value(json_object_get(o, "module")), "gw");
	assert_string_equal(json_string_value(json_object_get(o, "msg")), "two words");
	assert_string_equal(json_string_value(json_object_get(o, "text")),
	                    "a \"quoted\" = \\ word\n\tnext\x01");
	assert_int_equal(json_integer_value(json_object_get(o, "n")), -7);
	assert_true(json_is_real(json_object_get(o, "d")));
	assert_string_equal(json_string_value(json_object_get(o, "empty")), "");
	assert_string_equal(json_string_value(json_object_get(o, "path")), "/x/y");
	assert_int_equal(strlen(json_string_value(json_object_get(o, "ts"))), 24);
	json_decref(o);

	/* A json line is the object itself. */
	log_configure(LOG_INFO, LOG_FORMAT_JSON, NULL);
	log_format_event(line, sizeof line, LOG_ERROR, "gw", "boom", f, 2);
	log_configure(LOG_INFO, LOG_FORMAT_LOGFMT, NULL);
	o = log_line_json(line, strlen(line));
	assert_string_equal(json_string_value(json_object_get(o, "msg")), "boom");
	assert_int_equal(json_integer_value(json_object_get(o, "n")), -7);
	json_decref(o);

	/* Field order is kept, a trailing newline is not a field, a bare key
	 * is a flag, a repeated key keeps its first value. */
	t = line_json("ts=T level=info module=m msg=x a=1 flag a=2\n");
	assert_string_equal(t, "{\"ts\":\"T\",\"level\":\"info\",\"module\":\"m\",\"msg\":\"x\","
	                       "\"a\":1,\"flag\":true}");
	free(t);
	/* Numbers too large for an integer, and number-like words, stay text. */
	t = line_json("ts=T msg=x big=99999999999999999999 v=1.2.3 h=0x1f neg=-");
	assert_string_equal(t, "{\"ts\":\"T\",\"msg\":\"x\",\"big\":\"99999999999999999999\","
	                       "\"v\":\"1.2.3\",\"h\":\"0x1f\",\"neg\":\"-\"}");
	free(t);
	/* Cut inside a quoted value (the writer's line limit). */
	t = line_json("ts=T level=info msg=\"cut here");
	assert_string_equal(t, "{\"ts\":\"T\",\"level\":\"info\",\"msg\":\"cut here\","
	                       "\"truncated\":true}");
	free(t);
	/* Not the gateway's: the line as text, with bad UTF-8 replaced. */
	t = line_json("Segmentation fault (core dumped)");
	assert_string_equal(t, "{\"raw\":\"Segmentation fault (core dumped)\"}");
	free(t);
	t = line_json("ts=T msg=\"x\"junk");
	assert_string_equal(t, "{\"raw\":\"ts=T msg=\\\"x\\\"junk\"}");
	free(t);
	t = line_json("=x");
	assert_string_equal(t, "{\"raw\":\"=x\"}");
	free(t);
	t = line_json("ts=T msg=\xff\xfe ok=\xc3\xa9");
	assert_string_equal(
	    t, "{\"ts\":\"T\",\"msg\":\"\xef\xbf\xbd\xef\xbf\xbd\",\"ok\":\"\xc3\xa9\"}");
	free(t);
	t = line_json("{not json");
	assert_string_equal(t, "{\"raw\":\"{not json\"}");
	free(t);
	t = line_json("");
	assert_string_equal(t, "{\"raw\":\"\"}");
	free(t);
}

/* Counts the files in dir whose name starts with "gateway.log". */
static int count_log_files(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;

	assert_non_null(d);
	while ((de = readdir(d)))
		if (strncmp(de->d_name, "gateway.log", 11) == 0)
			n++;
	closedir(d);
	return n;
}

/* Reads path's lines "... seq=N ..." in order, checking each is whole
 * (starts "ts=", ends with a newline) and that N follows *next. */
static void check_log_file(const char *path, long *next, long file_max)
{
	FILE *f = fopen(path, "r");
	char line[512];
	long size = 0;

	assert_non_null(f);
	while (fgets(line, sizeof line, f)) {
		const char *seq = strstr(line, " seq=");

		size += (long)strlen(line);
		assert_true(strncmp(line, "ts=", 3) == 0);
		assert_true(line[strlen(line) - 1] == '\n');
		assert_non_null(seq);
		assert_int_equal(strtol(seq + 5, NULL, 10), *next);
		(*next)++;
	}
	fclose(f);
	assert_true(size <= file_max);
}

static char rot_dir[] = "/tmp/sb-logrot-XXXXXX";

/* Removes what a failed test_log_file_rotation left behind. */
static int rotation_cleanup(void **state)
{
	char name[160];

	(void)state;
	log_file_close();
	log_configure(LOG_INFO, LOG_FORMAT_LOGFMT, NULL);
	for (int k = 0; k < 10; k++) {
		snprintf(name, sizeof name, k ? "%s/gateway.log.%d" : "%s/gateway.log", rot_dir, k);
		unlink(name);
	}
	rmdir(rot_dir);
	return 0;
}

static void test_log_file_rotation(void **state)
{
	char *dir = rot_dir, path[128], name[160], pad[101];
	FILE *sink = tmpfile();
	struct stat st;
	long next;
	int k;

	(void)state;
	assert_non_null(mkdtemp(dir));
	assert_non_null(sink);
	snprintf(path, sizeof path, "%s/gateway.log", dir);
	memset(pad, 'x', sizeof pad - 1);
	pad[sizeof pad - 1] = '\0';
	log_configure(LOG_INFO, LOG_FORMAT_LOGFMT, sink);
	assert_int_equal(log_file_open(path, 4096, 2), SB_OK);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	for (long i = 0; i < 400; i++) {
		log_info("test", "line", LOG_I("seq", i), LOG_S("pad", pad + (i % 50)));
		/* never more than keep + 1 files, at any moment */
		assert_true(count_log_files(dir) <= 3);
	}
	log_file_close();
	log_info("test", "after close", LOG_I("seq", 400));
	log_configure(LOG_INFO, LOG_FORMAT_LOGFMT, NULL);
	fclose(sink);
	assert_int_equal(count_log_files(dir), 3);
	/* the oldest kept file, then the newer ones: consecutive lines, none
	 * lost in between and none split across two files */
	snprintf(name, sizeof name, "%s.2", path);
	{
		FILE *f = fopen(name, "r");
		char first[512];

		assert_non_null(f);
		assert_non_null(fgets(first, sizeof first, f));
		fclose(f);
		assert_non_null(strstr(first, " seq="));
		next = strtol(strstr(first, " seq=") + 5, NULL, 10);
		assert_true(next > 0); /* older lines were dropped with older files */
	}
	for (k = 2; k >= 0; k--) {
		if (k)
			snprintf(name, sizeof name, "%s.%d", path, k);
		else
			snprintf(name, sizeof name, "%s", path);
		check_log_file(name, &next, 4096);
		unlink(name);
	}
	assert_int_equal(next, 400); /* nothing after log_file_close */
	/* max 0: no file at all */
	assert_int_equal(log_file_open(path, 0, 2), SB_OK);
	log_info("test", "no file");
	assert_int_equal(access(path, F_OK), -1);
	assert_int_equal(rmdir(dir), 0);
}

static void test_envelope_roundtrip(void **state)
{
	struct envelope in = {
	    .channel = "telegram",
	    .account = "default",
	    .event_id = "update:991",
	    .peer_kind = ENVELOPE_PEER_GROUP,
	    .peer_id = "-100123",
	    .thread_id = "42",
	    .sender_id = "777",
	    .sender_name = "Zoë \"Z\"",
	    .text = "hello\nworld ✓",
	    .mentioned = true,
	    .received_at = 1764464400123,
	    .raw = "{\"update_id\":991}",
	    .route_agent = "ops",
	    .route_session = "agent:ops:webchat:direct:me",
	};
	struct envelope out;
	char *json = envelope_to_json(&in);

	(void)state;
	assert_non_null(json);
	assert_int_equal(envelope_from_json(json, &out), SB_OK);
	assert_string_equal(out.channel, "telegram");
	assert_string_equal(out.event_id, "update:991");
	assert_int_equal(out.peer_kind, ENVELOPE_PEER_GROUP);
	assert_string_equal(out.peer_id, "-100123");
	assert_string_equal(out.thread_id, "42");
	assert_null(out.parent_id);
	assert_string_equal(out.sender_name, "Zoë \"Z\"");
	assert_string_equal(out.text, "hello\nworld ✓");
	assert_true(out.mentioned);
	assert_false(out.untrusted);
	assert_int_equal(out.received_at, 1764464400123);
	/* raw is embedded as JSON, not as an escaped string */
	assert_non_null(strstr(json, "\"raw\":{\"update_id\":991}"));
	assert_string_equal(out.raw, "{\"update_id\":991}");
	assert_string_equal(out.route_agent, "ops");
	assert_string_equal(out.route_session, "agent:ops:webchat:direct:me");
	assert_true(envelope_channel_trusted("webchat"));
	assert_true(envelope_channel_trusted("http"));
	assert_false(envelope_channel_trusted("telegram"));
	assert_false(envelope_channel_trusted(NULL));
	envelope_release(&out);
	free(json);

	assert_int_equal(envelope_from_json("{\"channel\":\"x\"}", &out), SB_ERR_INVAL);
	assert_int_equal(envelope_from_json("[1]", &out), SB_ERR_INVAL);
	assert_int_equal(envelope_from_json("{\"channel\":\"x\",\"event_id\":\"1\",\"peer_kind\":"
	                                    "\"room\"}",
	                                    &out),
	                 SB_ERR_INVAL);
	assert_int_equal(envelope_from_json("not json", &out), SB_ERR_INVAL);
}

/* Two envelopes hold the same: every string field (NULL or equal), the
 * kind, the flags and the time. */
static void assert_envelopes_equal(const struct envelope *a, const struct envelope *b)
{
	const char *const *fa[] = {
	    &a->channel,   &a->account,     &a->event_id, &a->peer_id,     &a->parent_id,
	    &a->thread_id, &a->guild_id,    &a->team_id,  &a->sender_id,   &a->sender_name,
	    &a->text,      &a->attachments, &a->raw,      &a->route_agent, &a->route_session};
	const char *const *fb[] = {
	    &b->channel,   &b->account,     &b->event_id, &b->peer_id,     &b->parent_id,
	    &b->thread_id, &b->guild_id,    &b->team_id,  &b->sender_id,   &b->sender_name,
	    &b->text,      &b->attachments, &b->raw,      &b->route_agent, &b->route_session};

	for (size_t i = 0; i < sizeof fa / sizeof *fa; i++) {
		if (!*fa[i] || !*fb[i])
			assert_ptr_equal(*fa[i], *fb[i]);
		else
			assert_string_equal(*fa[i], *fb[i]);
	}
	assert_int_equal(a->peer_kind, b->peer_kind);
	assert_int_equal(a->mentioned, b->mentioned);
	assert_int_equal(a->untrusted, b->untrusted);
	assert_int_equal(a->own_reply, b->own_reply);
	assert_int_equal(a->received_at, b->received_at);
}

/* The copy a claimed entry runs with is what reading its stored JSON back
 * gives: raw and attachments normalised (keys sorted, text that is not
 * JSON kept as a JSON string), a "null" raw dropped, empty strings kept. */
static void test_envelope_copy_is_read_back(void **state)
{
	const struct envelope cases[] = {
	    {.channel = "webhook",
	     .account = "bench",
	     .event_id = "e1",
	     .peer_id = "c",
	     .peer_kind = ENVELOPE_PEER_CHANNEL,
	     .sender_id = "s",
	     .text = "hi",
	     .untrusted = true,
	     .own_reply = true,
	     .received_at = 1796411030403,
	     .raw = "{\"z\":1,\"a\":{\"y\":[1,2],\"b\":null}}"},
	    {.channel = "telegram",
	     .event_id = "u:2",
	     .raw = "not json at all",
	     .attachments = "[{\"kind\":\"photo\",\"id\":\"x\"}]",
	     .sender_name = "Zoë",
	     .text = "",
	     .mentioned = true},
	    {.channel = "slack",
	     .event_id = "Ev1",
	     .raw = "null",
	     .team_id = "T1",
	     .thread_id = "1.2",
	     .parent_id = "C1",
	     .route_agent = "ops"},
	    {.channel = "webchat",
	     .event_id = "w",
	     .raw = "\"a string\"",
	     .route_agent = "main",
	     .route_session = "agent:main:main",
	     .peer_kind = ENVELOPE_PEER_DIRECT},
	};

	(void)state;
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		struct envelope copy, back;
		char *json = envelope_to_json_copy(&cases[i], &copy), *plain;

		assert_non_null(json);
		plain = envelope_to_json(&cases[i]);
		assert_string_equal(json, plain); /* the same text stored either way */
		assert_int_equal(envelope_from_json(json, &back), SB_OK);
		assert_envelopes_equal(&copy, &back);
		envelope_release(&copy);
		envelope_release(&back);
		free(json);
		free(plain);
	}
}

static void test_metrics_render(void **state)
{
	struct metrics m;
	struct buf out;

	(void)state;
	metrics_init(&m);
	metrics_http(&m, "/healthz", 200);
	metrics_http(&m, "/healthz", 200);
	metrics_http(&m, "unmatched", 404);
	metrics_commit(&m, 0.0007, 3, SB_OK);
	metrics_commit(&m, 0.02, 5, SB_OK);
	metrics_commit(&m, 9.0, 1, SB_ERR_STORE);
	m.inbox_depth = 4;
	buf_init(&out, 1 << 20);
	assert_int_equal(metrics_render(&m, &out), SB_OK);
	assert_non_null(strstr(out.data, "switchboard_http_requests_total{route=\"/healthz\","
	                                 "status=\"2xx\"} 2\n"));
	assert_non_null(strstr(out.data, "switchboard_http_requests_total{route=\"unmatched\","
	                                 "status=\"4xx\"} 1\n"));
	/* cumulative buckets */
	assert_non_null(
	    strstr(out.data, "switchboard_store_commit_seconds_bucket{le=\"0.0005\"} 0\n"));
	assert_non_null(
	    strstr(out.data, "switchboard_store_commit_seconds_bucket{le=\"0.001\"} 1\n"));
	assert_non_null(
	    strstr(out.data, "switchboard_store_commit_seconds_bucket{le=\"0.025\"} 2\n"));
	assert_non_null(
	    strstr(out.data, "switchboard_store_commit_seconds_bucket{le=\"2.5\"} 2\n"));
	assert_non_null(
	    strstr(out.data, "switchboard_store_commit_seconds_bucket{le=\"+Inf\"} 3\n"));
	assert_non_null(strstr(out.data, "switchboard_store_commit_seconds_count 3\n"));
	assert_non_null(strstr(out.data, "switchboard_store_commit_ops_total 9\n"));
	assert_non_null(strstr(out.data, "switchboard_store_commit_failures_total 1\n"));
	assert_non_null(strstr(out.data, "# TYPE switchboard_inbox_depth gauge\n"
	                                 "switchboard_inbox_depth 4\n"));
	buf_free(&out);
}

struct resolved {
	int calls;
	int rc;
	char addr[RESOLVE_ADDR_MAX];
};

static void on_resolved(void *ud, int rc, const char *addr)
{
	struct resolved *r = ud;

	r->calls++;
	r->rc = rc;
	snprintf(r->addr, sizeof r->addr, "%s", addr ? addr : "");
}

static void test_resolve(void **state)
{
	uv_loop_t loop;
	struct resolved a = {0}, b = {0};
	char long_name[300];
	int rc_a, rc_b;

	(void)state;

	assert_int_equal(uv_loop_init(&loop), 0);
	rc_a = resolve_host(&loop, "127.0.0.1", on_resolved, &a);
	rc_b = resolve_host(&loop, "localhost", on_resolved, &b);
	/* nothing is called back from inside the call */
	assert_int_equal(a.calls + b.calls, 0);
	/* The loop runs the look-ups started to their end before any check
	 * can leave this function (its stack holds the loop). */
	assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);
	assert_int_equal(rc_a, SB_OK);
	assert_int_equal(rc_b, SB_OK);
	assert_int_equal(a.calls, 1);
	assert_int_equal(a.rc, SB_OK);
	assert_string_equal(a.addr, "127.0.0.1");
	assert_int_equal(b.calls, 1);
	assert_int_equal(b.rc, SB_OK);
	assert_true(strcmp(b.addr, "127.0.0.1") == 0 || strcmp(b.addr, "::1") == 0);

	memset(long_name, 'a', sizeof long_name - 1);
	long_name[sizeof long_name - 1] = '\0';
	assert_int_equal(resolve_host(&loop, "", on_resolved, &a), SB_ERR_INVAL);
	assert_int_equal(resolve_host(&loop, long_name, on_resolved, &a), SB_ERR_INVAL);
	assert_int_equal(uv_loop_close(&loop), 0);
}

static void test_secrets(void **state)
{
	char dir[512], path[700];

	(void)state;
	assert_true(secret_equal("token-abc", "token-abc"));
	assert_false(secret_equal("token-abc", "token-abd"));
	assert_false(secret_equal("token-abc", "token-ab"));
	assert_false(secret_equal("", ""));
	assert_false(secret_equal(NULL, "x"));
	assert_string_equal(secret_bearer("Bearer  abc"), "abc");
	assert_string_equal(secret_bearer("bearer xyz"), "xyz");
	assert_null(secret_bearer("Basic abc"));
	assert_null(secret_bearer(NULL));
	assert_int_equal(harness_tmpdir(dir, sizeof dir), 0);
	snprintf(path, sizeof path, "%s/token", dir);
	assert_int_equal(harness_write_file(path, "s3cret-value \r\n"), 0);
	{
		char *t = secret_read_file(path, 100);

		assert_string_equal(t, "s3cret-value");
		free(t);
	}
	assert_int_equal(harness_write_file(path, "\n"), 0);
	assert_null(secret_read_file(path, 100));
	snprintf(path, sizeof path, "%s/absent", dir);
	assert_null(secret_read_file(path, 100));
	harness_rmrf(dir);
}

/* A cut result is an error, and leaves nothing that could be used as if it
 * were whole. */
static void test_fmt(void **state)
{
	char out[8];

	(void)state;
	assert_int_equal(FMT(out, "%s:%d", "ab", 12), SB_OK);
	assert_string_equal(out, "ab:12");
	assert_int_equal(FMT(out, "%s", "1234567"), SB_OK); /* 7 characters fit in 8 */
	assert_string_equal(out, "1234567");
	assert_int_equal(FMT(out, "%s", "12345678"), SB_ERR_TOOBIG);
	assert_string_equal(out, "");
	assert_int_equal(fmt(out, 0, "x"), SB_ERR_INVAL);
	assert_int_equal(fmt(NULL, 8, "x"), SB_ERR_INVAL);
}

/* A broken invariant aborts with a report: the condition, where, the state
 * named at the call, and a backtrace (stderr), the structured line also in
 * the log. */
static void test_invariant_report(void **state)
{
	char path[] = "/tmp/sb-assert-XXXXXX";
	int fd = mkstemp(path), status = 0;
	struct buf out;
	pid_t pid;

	(void)state;
	assert_true(fd >= 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int queued = 3;

		dup2(fd, STDERR_FILENO);
		log_configure(LOG_INFO, LOG_FORMAT_LOGFMT, NULL);
		SB_ASSERT(queued == 2, LOG_I("queued", queued), LOG_S("op", "inbox_put"));
		_exit(0); /* not reached */
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status));
	assert_int_equal(WTERMSIG(status), SIGABRT);
	buf_init(&out, 1 << 20);
	assert_int_equal(harness_read_file(path, &out), 0);
	assert_non_null(strstr(out.data, "invariant broken: queued == 2 at "));
	assert_non_null(strstr(out.data, "module=crash msg=\"invariant broken\""));
	assert_non_null(strstr(out.data, "queued=3"));
	assert_non_null(strstr(out.data, "op=inbox_put"));
	assert_non_null(strstr(out.data, "function=test_invariant_report"));
	assert_non_null(strstr(out.data, "backtrace:"));
	buf_free(&out);
	close(fd);
	unlink(path);
}

static void test_fmt_span(void **state)
{
	char b[32], tiny[4];

	(void)state;
	assert_string_equal(fmt_span(b, sizeof b, 1800000), "30m");
	assert_string_equal(fmt_span(b, sizeof b, 5400000), "1h30m");
	assert_string_equal(fmt_span(b, sizeof b, 45000), "45s");
	assert_string_equal(fmt_span(b, sizeof b, 0), "0s");
	assert_string_equal(fmt_span(b, sizeof b, 1500), "1500ms");
	assert_string_equal(fmt_span(b, sizeof b, 86400000LL * 2 + 3600000 * 4 + 1000), "2d4h1s");
	assert_string_equal(fmt_span(b, sizeof b, -90000), "-1m30s");
	assert_string_equal(fmt_span(b, sizeof b, INT64_MIN), "-9223372036854775808ms");
	/* cut, never past the buffer */
	assert_string_equal(fmt_span(tiny, sizeof tiny, 5400000), "1h");
}

/* yamljson: the two scalar schemas, the bounds, and errors with lines. */
static void test_yamljson(void **state)
{
	static const char doc[] = "a: 1.5\nb: null\nc: +5\nd: True\ne: \"7\"\nf: -3\ng: true\n";
	struct yamljson_opt core = {"the script", "line", 8, 100, true};
	struct yamljson_opt small = {"the frontmatter", "frontmatter line", 8, 100, false};
	char why[256];
	json_t *v;

	(void)state;
	assert_int_equal(yamljson_load(doc, sizeof doc - 1, &core, &v, why, sizeof why), SB_OK);
	assert_true(json_is_real(json_object_get(v, "a")));
	assert_true(json_is_null(json_object_get(v, "b")));
	assert_int_equal(json_integer_value(json_object_get(v, "c")), 5);
	assert_true(json_is_true(json_object_get(v, "d")));
	assert_string_equal(json_string_value(json_object_get(v, "e")), "7");
	json_decref(v);
	assert_int_equal(yamljson_load(doc, sizeof doc - 1, &small, &v, why, sizeof why), SB_OK);
	assert_string_equal(json_string_value(json_object_get(v, "a")), "1.5");
	assert_string_equal(json_string_value(json_object_get(v, "b")), "null");
	assert_string_equal(json_string_value(json_object_get(v, "c")), "+5");
	assert_string_equal(json_string_value(json_object_get(v, "d")), "True");
	assert_int_equal(json_integer_value(json_object_get(v, "f")), -3);
	assert_true(json_is_true(json_object_get(v, "g")));
	json_decref(v);
	/* an empty document is null */
	assert_int_equal(yamljson_load("", 0, &core, &v, why, sizeof why), SB_OK);
	assert_true(json_is_null(v));
	json_decref(v);
	/* aliases count at every visit: 10 x 10 x 10 nodes pass no budget of 100 */
	{
		static const char bomb[] = "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
		                           "b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
		                           "c: [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n";

		assert_int_equal(yamljson_load(bomb, sizeof bomb - 1, &core, &v, why, sizeof why),
		                 SB_ERR_INVAL);
		assert_null(v);
		assert_string_equal(why, "the script is too deep or too large");
	}
	assert_int_equal(yamljson_load("a: [1\nb: 2\n", 11, &small, &v, why, sizeof why),
	                 SB_ERR_INVAL);
	assert_true(strncmp(why, "frontmatter line ", 17) == 0);
	assert_int_equal(yamljson_load("? [k]\n: v\n", 10, &core, &v, why, sizeof why),
	                 SB_ERR_INVAL);
	assert_string_equal(why, "line 1: keys must be plain text");
	/* bytes that are not UTF-8: libyaml's reader refuses them (its reader
	 * errors carry no line) */
	assert_int_equal(yamljson_load("a: 1\nb: \xff\n", 11, &core, &v, why, sizeof why),
	                 SB_ERR_INVAL);
	assert_non_null(strstr(why, "UTF-8"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_buf_bounds),
	    cmocka_unit_test(test_buf_grows),
	    cmocka_unit_test(test_buf_printf_passes),
	    cmocka_unit_test(test_num_parse),
	    cmocka_unit_test(test_fmt_span),
	    cmocka_unit_test(test_log_logfmt),
	    cmocka_unit_test(test_log_redacts_secrets),
	    cmocka_unit_test(test_log_json),
	    cmocka_unit_test(test_log_parse),
	    cmocka_unit_test(test_log_line_json),
	    cmocka_unit_test(test_envelope_roundtrip),
	    cmocka_unit_test(test_envelope_copy_is_read_back),
	    cmocka_unit_test(test_metrics_render),
	    cmocka_unit_test(test_resolve),
	    cmocka_unit_test(test_secrets),
	    cmocka_unit_test(test_invariant_report),
	    cmocka_unit_test(test_fmt),
	    cmocka_unit_test(test_yamljson),
	    cmocka_unit_test_teardown(test_log_file_rotation, rotation_cleanup),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
