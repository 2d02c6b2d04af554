/*
 * test_sse.c - the incremental Server-Sent Events parser.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agents/providers/sse.h"
#include "gateway/core/buf.h"
#include "gateway/core/err.h"

/* Every event, serialised as "name|id|data\x1e" so that two runs compare as
 * one string. */
struct rec {
	struct sse *s;
	struct buf log;
	int events;
	int stop_at; /* the callback returns SB_ERR_ABORTED at this event (1-based) */
};

static int rec_cb(void *ud, const char *name, const char *data, size_t len)
{
	struct rec *r = ud;

	r->events++;
	assert_int_equal(data[len], '\0');
	assert_int_equal(buf_printf(&r->log, "%s|%s|", name, sse_last_id(r->s)), SB_OK);
	assert_int_equal(buf_append(&r->log, data, len), SB_OK);
	assert_int_equal(buf_append(&r->log, "\x1e", 1), SB_OK);
	return r->stop_at && r->events == r->stop_at ? SB_ERR_ABORTED : SB_OK;
}

static void rec_init(struct rec *r, struct sse *s, size_t max)
{
	memset(r, 0, sizeof(*r));
	r->s = s;
	buf_init(&r->log, 1 << 24);
	sse_init(s, max, rec_cb, r);
}

static void rec_free(struct rec *r)
{
	sse_free(r->s);
	buf_free(&r->log);
}

/* Parses text in one feed; returns the log (caller frees) and the finish
 * code in *fin. */
static char *parse_whole(const char *text, size_t len, int *fin)
{
	struct sse s;
	struct rec r;
	char *out;

	rec_init(&r, &s, 0);
	assert_int_equal(sse_feed(&s, text, len), SB_OK);
	*fin = sse_finish(&s);
	out = strdup(r.log.data ? r.log.data : "");
	assert_non_null(out);
	rec_free(&r);
	return out;
}

static void expect_log(const char *text, const char *want)
{
	int fin;
	char *got = parse_whole(text, strlen(text), &fin);

	assert_string_equal(got, want);
	free(got);
}

/* A stream that uses every feature. */
static const char rich[] = "\xEF\xBB\xBF"
                           ": a comment first\n"
                           "data: hello\n"
                           "\n"
                           "event: content_block_delta\r\n"
                           "data: {\"text\":\"caf\xC3\xA9 \xF0\x9F\x8E\x89\"}\r\n"
                           "\r\n"
                           "id: 42\r"
                           "data:no-space\r"
                           "data:  two spaces\r"
                           "\r"
                           ": keep-alive\n"
                           "\n"
                           "event: x\n"
                           "data\n"
                           "\n"
                           "retry: 100\n"
                           "unknown: field\n"
                           "event\n"
                           "data: after empty event\n"
                           "\n"
                           "data: line1\n"
                           "data:\n"
                           "data: line3\n"
                           "\n"
                           "id: 7\n"
                           "id\n"
                           "data: [DONE]\n"
                           "\n";

static const char rich_log[] =
    "message||hello\x1e"
    "content_block_delta||{\"text\":\"caf\xC3\xA9 \xF0\x9F\x8E\x89\"}\x1e"
    "message|42|no-space\n two spaces\x1e"
    "x|42|\x1e"
    "message|42|after empty event\x1e"
    "message|42|line1\n\nline3\x1e"
    "message||[DONE]\x1e";

static void test_features(void **state)
{
	int fin;
	char *got = parse_whole(rich, sizeof(rich) - 1, &fin);

	assert_string_equal(got, rich_log);
	assert_int_equal(fin, SB_OK);
	free(got);
}

/* Every split into two feeds, and byte by byte, gives the same events. */
static void test_every_split(void **state)
{
	size_t n = sizeof(rich) - 1, cut, i;
	struct sse s;
	struct rec r;

	for (cut = 0; cut <= n; cut++) {
		rec_init(&r, &s, 0);
		assert_int_equal(sse_feed(&s, rich, cut), SB_OK);
		assert_int_equal(sse_feed(&s, rich + cut, n - cut), SB_OK);
		assert_int_equal(sse_finish(&s), SB_OK);
		if (strcmp(r.log.data ? r.log.data : "", rich_log) != 0)
			fail_msg("split at %zu gives a different result", cut);
		rec_free(&r);
	}

	rec_init(&r, &s, 0);
	for (i = 0; i < n; i++) {
		assert_int_equal(sse_feed(&s, rich + i, 1), SB_OK);
		assert_int_equal(sse_feed(&s, NULL, 0), SB_OK);
	}
	assert_int_equal(sse_finish(&s), SB_OK);
	assert_string_equal(r.log.data, rich_log);
	assert_int_equal(r.events, 7);
	rec_free(&r);

	/* Three-way splits around the CRLF and UTF-8 region. */
	for (cut = 60; cut < 120 && cut < n; cut++) {
		for (i = cut; i < cut + 7 && i <= n; i++) {
			rec_init(&r, &s, 0);
			assert_int_equal(sse_feed(&s, rich, cut), SB_OK);
			assert_int_equal(sse_feed(&s, rich + cut, i - cut), SB_OK);
			assert_int_equal(sse_feed(&s, rich + i, n - i), SB_OK);
			assert_string_equal(r.log.data, rich_log);
			rec_free(&r);
		}
	}
}

static void test_multiline_and_done(void **state)
{
	expect_log("data: a\ndata: b\ndata: c\n\n", "message||a\nb\nc\x1e");
	expect_log("data: {\"x\":1}\n\ndata: [DONE]\n\n", "message||{\"x\":1}\x1e"
	                                                  "message||[DONE]\x1e");
	/* "data" alone: an event with empty data. */
	expect_log("data\n\n", "message||\x1e");
	/* No data: no event, and the name does not leak into the next. */
	expect_log("event: ping\n\ndata: z\n\n", "message||z\x1e");
}

static void test_comments(void **state)
{
	expect_log(": ping\n\n: another\n:\n\n", "");
	expect_log(":c\ndata: x\n:c2\ndata: y\n\n", "message||x\ny\x1e");
	/* A colon after the first byte is a field separator, not a comment. */
	expect_log("data:: not a comment\n\n", "message||: not a comment\x1e");
}

static void test_line_ends(void **state)
{
	const char *want = "a||1\x1e"
	                   "message||2\n3\x1e";

	expect_log("event: a\ndata: 1\n\ndata: 2\ndata: 3\n\n", want);
	expect_log("event: a\r\ndata: 1\r\n\r\ndata: 2\r\ndata: 3\r\n\r\n", want);
	expect_log("event: a\rdata: 1\r\rdata: 2\rdata: 3\r\r", want);
	expect_log("event: a\r\ndata: 1\r\rdata: 2\ndata: 3\r\n\n", want);
	/* CR CR is two line ends, CR LF one. */
	expect_log("data: x\r\r", "message||x\x1e");
	expect_log("data: x\r\n", "");
}

static void test_unfinished_event(void **state)
{
	int fin;
	char *got;

	/* An event no blank line ended is discarded at the end. */
	got = parse_whole("data: a\n\ndata: b\n", 17, &fin);
	assert_string_equal(got, "message||a\x1e");
	assert_int_equal(fin, SB_ERR_PROTO);
	free(got);
	got = parse_whole("data: a\n\ndata: b", 16, &fin);
	assert_string_equal(got, "message||a\x1e");
	assert_int_equal(fin, SB_ERR_PROTO);
	free(got);
	got = parse_whole("", 0, &fin);
	assert_string_equal(got, "");
	assert_int_equal(fin, SB_OK);
	free(got);
}

static void test_oversize(void **state)
{
	struct sse s;
	struct rec r;
	char big[3000];

	/* One line beyond the bound. */
	memset(big, 'x', sizeof(big));
	memcpy(big, "data: ", 6);
	rec_init(&r, &s, 1024);
	assert_int_equal(sse_feed(&s, "data: ok\n\n", 10), SB_OK);
	assert_int_equal(sse_feed(&s, big, 500), SB_OK);
	assert_int_equal(sse_feed(&s, big + 500, sizeof(big) - 500), SB_ERR_TOOBIG);
	/* The error sticks, and nothing more is delivered. */
	assert_int_equal(sse_feed(&s, "\n\ndata: later\n\n", 15), SB_ERR_TOOBIG);
	assert_int_equal(sse_finish(&s), SB_ERR_TOOBIG);
	assert_int_equal(r.events, 1);
	assert_string_equal(r.log.data, "message||ok\x1e");
	rec_free(&r);

	/* Many short data lines that add up beyond the bound. */
	rec_init(&r, &s, 1024);
	{
		int i, rc = SB_OK;

		for (i = 0; i < 200 && rc == SB_OK; i++)
			rc = sse_feed(&s, "data: 0123456789\n", 17);
		assert_int_equal(rc, SB_ERR_TOOBIG);
		assert_true(i > 50 && i < 100);
	}
	assert_int_equal(r.events, 0);
	rec_free(&r);

	/* A line exactly at the bound is fine, one byte more is not. */
	rec_init(&r, &s, 1024);
	{
		char line[1100];

		memcpy(line, "data: ", 6);
		memset(line + 6, 'y', 1018);
		memcpy(line + 6 + 1018, "\n\n", 2);
		assert_int_equal(sse_feed(&s, line, 6 + 1018 + 2), SB_OK);
		assert_int_equal(r.events, 1);
		assert_int_equal(r.log.len, strlen("message||") + 1018 + 1);
		memset(line + 6, 'y', 1019);
		memcpy(line + 6 + 1019, "\n\n", 2);
		assert_int_equal(sse_feed(&s, line, 6 + 1019 + 2), SB_ERR_TOOBIG);
		assert_int_equal(r.events, 1);
	}
	rec_free(&r);

	/* Long comments are not kept, so they do not hit the bound. */
	rec_init(&r, &s, 1024);
	big[0] = ':';
	assert_int_equal(sse_feed(&s, big, sizeof(big)), SB_OK);
	assert_int_equal(sse_feed(&s, "\ndata: z\n\n", 10), SB_OK);
	assert_string_equal(r.log.data, "message||z\x1e");
	rec_free(&r);
}

static void test_utf8_split(void **state)
{
	static const char text[] = "data: \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E "
	                           "\xF0\x9F\x8E\x89 caf\xC3\xA9\n\n";
	size_t n = sizeof(text) - 1, i;
	struct sse s;
	struct rec r;

	rec_init(&r, &s, 0);
	for (i = 0; i < n; i++)
		assert_int_equal(sse_feed(&s, text + i, 1), SB_OK);
	assert_int_equal(r.events, 1);
	assert_string_equal(r.log.data, "message||\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E "
	                                "\xF0\x9F\x8E\x89 caf\xC3\xA9\x1e");
	rec_free(&r);
}

static void test_bom(void **state)
{
	struct sse s;
	struct rec r;

	/* A BOM split over three feeds is dropped. */
	rec_init(&r, &s, 0);
	assert_int_equal(sse_feed(&s, "\xEF", 1), SB_OK);
	assert_int_equal(sse_feed(&s, "\xBB", 1), SB_OK);
	assert_int_equal(sse_feed(&s,
	                          "\xBF"
	                          "data: a\n\n",
	                          10),
	                 SB_OK);
	assert_string_equal(r.log.data, "message||a\x1e");
	rec_free(&r);

	/* Only at the start: later it is content (here, an unknown field). */
	expect_log("data: a\n\n\xEF\xBB\xBF"
	           "data: b\n\n",
	           "message||a\x1e");
	/* Half a BOM is content. */
	expect_log("\xEF"
	           "data: c\n\ndata: d\n\n",
	           "message||d\x1e");
}

static void test_callback_stops(void **state)
{
	struct sse s;
	struct rec r;

	rec_init(&r, &s, 0);
	r.stop_at = 2;
	assert_int_equal(sse_feed(&s, "data: 1\n\ndata: 2\n\ndata: 3\n\n", 27), SB_ERR_ABORTED);
	assert_int_equal(r.events, 2);
	assert_int_equal(sse_feed(&s, "data: 4\n\n", 9), SB_ERR_ABORTED);
	assert_int_equal(r.events, 2);
	rec_free(&r);
}

static void test_ids_and_nul(void **state)
{
	struct sse s;
	struct rec r;
	static const char text[] = "id: 1\ndata: a\n\nid: x\0y\ndata: b\0c\n\nid:\ndata: c\n\n";

	rec_init(&r, &s, 0);
	assert_string_equal(sse_last_id(&s), "");
	assert_int_equal(sse_feed(&s, text, sizeof(text) - 1), SB_OK);
	/* An id holding NUL is ignored; data may hold NUL; "id:" clears. */
	assert_int_equal(r.log.len, strlen("message|1|a\x1e") + strlen("message|1|b") + 2 +
	                                strlen("\x1emessage||c\x1e"));
	assert_memory_equal(r.log.data, "message|1|a\x1emessage|1|b\0c\x1emessage||c\x1e",
	                    r.log.len);
	rec_free(&r);

	/* Free twice and re-init are fine. */
	sse_free(&s);
	rec_init(&r, &s, 0);
	rec_free(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_features),
	    cmocka_unit_test(test_every_split),
	    cmocka_unit_test(test_multiline_and_done),
	    cmocka_unit_test(test_comments),
	    cmocka_unit_test(test_line_ends),
	    cmocka_unit_test(test_unfinished_event),
	    cmocka_unit_test(test_oversize),
	    cmocka_unit_test(test_utf8_split),
	    cmocka_unit_test(test_bom),
	    cmocka_unit_test(test_callback_stops),
	    cmocka_unit_test(test_ids_and_nul),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
