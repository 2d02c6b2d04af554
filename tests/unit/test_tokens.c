/*
 * test_tokens.c - the token estimates (agents/context/tokens.c) against real
 * tokenizers (o200k_base and cl100k_base, counted by gpt-tokenizer through
 * tests/fakes/count_tokens.js) on English prose, C, JSON, a list of numbers,
 * Chinese and Russian, and the ledger's calibration from reported usage.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agents/context/tokens.h"
#include "agents/message.h"
#include "gateway/core/buf.h"
#include "gateway/core/err.h"
#include "tests/integration/harness.h"

/* The real counts of a file. */
static void real_counts(const char *path, long *o200k, long *cl100k)
{
	char cmd[2048];
	FILE *p;

	snprintf(cmd, sizeof cmd, "node %s/tests/fakes/count_tokens.js '%s'", SB_SOURCE_DIR, path);
	p = popen(cmd, "r");
	assert_non_null(p);
	if (fscanf(p, "o200k %ld cl100k %ld", o200k, cl100k) != 2)
		fail_msg("count_tokens.js said nothing for %s (is tests/fakes installed?)", path);
	assert_int_equal(pclose(p), 0);
}

static char *slurp(const char *path, size_t *len)
{
	struct buf b;

	buf_init(&b, 64 << 20);
	if (harness_read_file(path, &b) != 0)
		fail_msg("cannot read %s", path);
	*len = b.len;
	return buf_steal(&b);
}

/* The estimate of the file lies within [lo, hi] times each real count;
 * prints the figures. */
static void check_file(const char *path, double lo, double hi, int64_t *est_out, size_t *bytes_out)
{
	long o, c;
	size_t len;
	char *text = slurp(path, &len);
	int64_t est = tokens_estimate_text(text, len);

	real_counts(path, &o, &c);
	printf("  %-40s %8zu bytes  o200k %7ld  cl100k %7ld  estimate %7lld (%.2f, %.2f)  "
	       "bytes/4 %7zu (%.2f)\n",
	       strrchr(path, '/') + 1, len, o, c, (long long)est, (double)est / (double)o,
	       (double)est / (double)c, (len + 3) / 4, (double)((len + 3) / 4) / (double)o);
	if ((double)est < lo * (double)o || (double)est > hi * (double)o ||
	    (double)est < lo * (double)c || (double)est > hi * (double)c)
		fail_msg("%s: estimate %lld, o200k %ld, cl100k %ld: outside [%.2f, %.2f]", path,
		         (long long)est, o, c, lo, hi);
	if (est_out)
		*est_out = est;
	if (bytes_out)
		*bytes_out = len;
	free(text);
}

static void test_latin_code_json_numbers(void **state)
{
	char path[1024], tmp[] = "/tmp/sb-tokens-XXXXXX";
	int fd;
	FILE *f;

	(void)state;
	snprintf(path, sizeof path, "%s/docs/context.md", SB_SOURCE_DIR);
	check_file(path, 0.8, 1.25, NULL, NULL);
	snprintf(path, sizeof path, "%s/agents/turn.c", SB_SOURCE_DIR);
	check_file(path, 0.8, 1.25, NULL, NULL);
	snprintf(path, sizeof path, "%s/tests/fakes/package-lock.json", SB_SOURCE_DIR);
	check_file(path, 0.8, 1.25, NULL, NULL);
	/* The output of `seq 1 3000`, where a quarter of the bytes is less
	 * than half the tokens. */
	fd = mkstemp(tmp);
	assert_true(fd >= 0);
	f = fdopen(fd, "w");
	for (int i = 1; i <= 3000; i++)
		fprintf(f, "%d\n", i);
	fclose(f);
	check_file(tmp, 0.8, 1.25, NULL, NULL);
	unlink(tmp);
}

/* Chinese: a quarter of the bytes counts it at about 0.75 a character;
 * tokenizers differ (o200k about 0.75, cl100k about 1.1). The estimate sits
 * between them, above the bytes rule. */
static void test_cjk_and_cyrillic(void **state)
{
	char path[1024];
	int64_t est;
	size_t bytes;

	(void)state;
	snprintf(path, sizeof path, "%s/tests/unit/data/zh.txt", SB_SOURCE_DIR);
	check_file(path, 0.6, 1.6, &est, &bytes);
	assert_true((double)est > 1.2 * (double)((bytes + 3) / 4));
	snprintf(path, sizeof path, "%s/tests/unit/data/ru.txt", SB_SOURCE_DIR);
	check_file(path, 0.6, 1.8, NULL, NULL);
}

/* A JSON value counts the text the model reads: the newlines of a string
 * are line breaks, not "\n" escapes. */
static void test_json_reads_text(void **state)
{
	struct buf lines;
	json_t *m;
	int64_t text_est, json_est;

	(void)state;
	buf_init(&lines, 1 << 20);
	for (int i = 1; i <= 500; i++)
		buf_printf(&lines, "%d\n", i);
	text_est = tokens_estimate_text(lines.data, lines.len);
	m = msg_user_new();
	msg_add_tool_result(m, "call_1", lines.data, false);
	json_est = tokens_estimate_json(m);
	assert_true(json_est > text_est);
	assert_true(json_est < text_est + 30); /* the structure costs a few tokens */
	json_decref(m);
	buf_free(&lines);
	assert_int_equal(tokens_estimate_json(NULL), 0);
	assert_int_equal(tokens_estimate_text("", 0), 0);
	assert_int_equal(tokens_estimate_text("hello", 5), 1);
	assert_int_equal(tokens_estimate_text("\xE4\xBD\xA0\xE5\xA5\xBD", 6), 2);
	/* Invalid bytes are characters of their own, never a crash. */
	assert_true(tokens_estimate_text("\xFF\xFE\xC3", 3) >= 3);
}

/* The ledger: a reported prompt wins for what it covered, and calibrates
 * what comes after; the scale is bounded; a history changed before the
 * report's end drops it. */
static void test_ledger_calibration(void **state)
{
	struct tokens_ledger l;
	json_t *h = json_array(), *big;
	int64_t before, est1, after;
	struct buf text;

	(void)state;
	buf_init(&text, 1 << 20);
	for (int i = 0; i < 400; i++)
		buf_puts(&text, "word ");
	tokens_ledger_init(&l);
	tokens_ledger_set_fixed(&l, "You are a test agent.", NULL);
	json_array_append_new(h, msg_user_text_new(text.data));
	assert_int_equal(tokens_ledger_sync(&l, h), SB_OK);
	before = tokens_ledger_total(&l);
	assert_true(before > 400 && before < 450);
	/* The provider says the prompt was twice as large. */
	tokens_ledger_report(&l, 1, 2 * before, 7);
	assert_true(l.scale > 1.9 && l.scale < 2.1);
	json_array_append_new(h, json_pack("{ss s[{ssss}]}", "role", "assistant", "content", "type",
	                                   "text", "text", "ok"));
	json_array_append_new(h, msg_user_text_new(text.data));
	assert_int_equal(tokens_ledger_sync(&l, h), SB_OK);
	est1 = tokens_ledger_message(&l, 2);
	after = tokens_ledger_total(&l);
	/* reported + the reply's reported output + the new message, scaled */
	assert_int_equal(after, 2 * before + 7 + est1);
	assert_true(est1 > 800);
	/* A report far off is bounded. */
	tokens_ledger_report(&l, 3, 1, 1);
	assert_true(l.scale >= TOKENS_SCALE_MIN);
	tokens_ledger_set_scale(&l, 100.0); /* ignored */
	assert_true(l.scale < TOKENS_SCALE_MAX);
	tokens_ledger_set_scale(&l, 1.5);
	assert_true(l.scale == 1.5);
	/* An edit inside the reported part drops the report. */
	big = msg_user_text_new("changed");
	json_array_set_new(h, 0, big);
	assert_int_equal(tokens_ledger_sync(&l, h), SB_OK);
	assert_int_equal(l.reported, -1);
	assert_int_equal(tokens_ledger_total(&l), tokens_ledger_estimate(&l, h));
	tokens_ledger_free(&l);
	json_decref(h);
	buf_free(&text);
}

/* The cache gives each text its own estimate: a text seen before from the
 * cache, a changed text of the same length afresh, and the least recently
 * used text makes way for a new one. */
static void test_text_cache(void **state)
{
	struct tokens_text_cache *c;
	const char *a = "You are a helpful agent. Answer briefly.";
	char b[64], name[32];
	bool hit;
	int64_t ea = tokens_estimate_text(a, strlen(a)), eb;

	(void)state;
	assert_int_equal(tokens_text_cache_new(&c), SB_OK);
	assert_int_equal(tokens_text_cache_estimate(c, a, strlen(a), &hit), ea);
	assert_false(hit);
	assert_int_equal(tokens_text_cache_estimate(c, a, strlen(a), &hit), ea);
	assert_true(hit);
	/* Same length, other text: estimated, not the cached figure. */
	snprintf(b, sizeof b, "%s", a);
	memcpy(b, "1234567890 1234567890 1234", 26);
	eb = tokens_estimate_text(b, strlen(b));
	assert_true(eb != ea);
	assert_int_equal(tokens_text_cache_estimate(c, b, strlen(b), &hit), eb);
	assert_false(hit);
	assert_int_equal(tokens_text_cache_estimate(c, a, strlen(a), &hit), ea);
	assert_true(hit);
	/* A prefix is another text. */
	assert_int_equal(tokens_text_cache_estimate(c, a, 10, &hit), tokens_estimate_text(a, 10));
	assert_false(hit);
	/* Filled past its size, the least recently used text (b) goes. */
	for (int i = 0; i < TOKENS_TEXT_CACHE_MAX; i++) {
		snprintf(name, sizeof name, "prompt number %d", i);
		assert_int_equal(tokens_text_cache_estimate(c, a, strlen(a), NULL), ea);
		assert_int_equal(tokens_text_cache_estimate(c, name, strlen(name), NULL),
		                 tokens_estimate_text(name, strlen(name)));
	}
	assert_int_equal(tokens_text_cache_estimate(c, a, strlen(a), &hit), ea);
	assert_true(hit);
	assert_int_equal(tokens_text_cache_estimate(c, b, strlen(b), &hit), eb);
	assert_false(hit);
	/* Without a cache, the estimate. */
	assert_int_equal(tokens_text_cache_estimate(NULL, a, strlen(a), &hit), ea);
	assert_false(hit);
	tokens_text_cache_free(c);
	tokens_text_cache_free(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_latin_code_json_numbers),
	    cmocka_unit_test(test_cjk_and_cyrillic),
	    cmocka_unit_test(test_json_reads_text),
	    cmocka_unit_test(test_ledger_calibration),
	    cmocka_unit_test(test_text_cache),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
