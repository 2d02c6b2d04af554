/*
 * test_jsonw.c - the compact JSON writer against jansson's own json_dumps:
 * the same bytes for every kind of value (escapes, UTF-8, integers at
 * their limits, reals, key order after removals), the same refusals
 * (invalid UTF-8, a cycle), keys sorted as jansson sorts them (shared
 * prefixes, more than 16 keys), and 20,000 random values compared byte for
 * byte; a buffer's maximum and the nesting bound.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "gateway/core/buf.h"
#include "gateway/core/err.h"
#include "gateway/core/jsonw.h"

#define DUMP_FLAGS (JSON_COMPACT | JSON_ENCODE_ANY)

/* Both writers give the same text, or both refuse; keys in insertion
 * order, then sorted. */
static void same_as_jansson_flags(const json_t *v, bool sorted)
{
	char *want = json_dumps(v, DUMP_FLAGS | (sorted ? JSON_SORT_KEYS : 0));
	size_t len = 0;
	char *got = jsonw_dumps(v, sorted ? JSONW_SORT_KEYS : 0, &len);

	if (!want) {
		if (got)
			fail_msg("jansson refused what jsonw wrote: %s", got);
		return;
	}
	assert_non_null(got);
	if (strcmp(want, got) != 0)
		fail_msg("jansson: %s\njsonw:   %s", want, got);
	assert_int_equal(len, strlen(want));
	free(want);
	free(got);
}

static void same_as_jansson(const json_t *v)
{
	same_as_jansson_flags(v, false);
	same_as_jansson_flags(v, true);
}

static void test_each_kind(void **state)
{
	char all_controls[0x21];
	json_t *o;

	(void)state;
	for (int c = 1; c < 0x20; c++)
		all_controls[c - 1] = (char)c;
	all_controls[0x1f] = '\x7f';
	all_controls[0x20] = '\0';
	o = json_object();
	json_object_set_new(o, "null", json_null());
	json_object_set_new(o, "t", json_true());
	json_object_set_new(o, "f", json_false());
	json_object_set_new(o, "zero", json_integer(0));
	json_object_set_new(o, "min", json_integer(INT64_MIN));
	json_object_set_new(o, "max", json_integer(INT64_MAX));
	json_object_set_new(o, "neg", json_integer(-42));
	json_object_set_new(o, "controls", json_string(all_controls));
	json_object_set_new(o, "quotes \" and \\ and /", json_string("a\"b\\c/d"));
	json_object_set_new(o, "utf8", json_string("é€𝄞 naïve ☃ \xef\xbf\xbf"));
	json_object_set_new(o, "nul", json_stringn("a\0b", 3));
	json_object_set_new(o, "", json_string(""));
	json_object_set_new(o, "empty_a", json_array());
	json_object_set_new(o, "empty_o", json_object());
	json_object_set_new(o, "nested", json_pack("[[{s:[i,s,n]}],{}]", "k", 1, "x"));
	same_as_jansson(o);
	/* Insertion order survives a removal and an overwrite. */
	json_object_del(o, "t");
	json_object_set_new(o, "zero", json_string("again"));
	json_object_set_new(o, "t", json_true());
	same_as_jansson(o);
	json_decref(o);

	const double reals[] = {0.0,     -0.0,     1.0,    0.1,
	                        -2.5,    1e300,    1e-300, 1e-7,
	                        123.456, 1e16,     1e17,   123456789012345678.0,
	                        3.0e21,  2.2e-308, 5e-324, 0.30000000000000004};
	for (size_t i = 0; i < sizeof reals / sizeof *reals; i++) {
		json_t *r = json_real(reals[i]), *a = json_pack("[o,{s:O}]", r, "r", r);

		same_as_jansson(r);
		same_as_jansson(a);
		json_decref(a);
	}
	for (int c = 0; c < 0x20; c++) {
		char one[2] = {(char)c, 0};
		json_t *s = json_stringn(one, 1);

		same_as_jansson(s);
		json_decref(s);
	}
}

static void test_sorted_keys(void **state)
{
	json_t *o = json_object();
	char key[8];

	(void)state;
	for (int i = 40; i > 0; i--) { /* more than the writer's 16 on the stack */
		snprintf(key, sizeof key, "k%d", i);
		json_object_set_new(o, key, json_integer(i));
	}
	json_object_set_new(o, "k", json_true());
	json_object_setn_new(o, "k\0", 2, json_false()); /* a key with a NUL in it */
	json_object_set_new(o, "K", json_null());
	json_object_set_new(o, "é", json_pack("{s:i,s:i,s:i}", "b", 1, "a", 2, "ab", 3));
	same_as_jansson(o);
	json_decref(o);
}

static void test_refusals(void **state)
{
	static const char *const bad[] = {
	    "\x80",             /* a continuation byte alone */
	    "\xc0\xaf",         /* overlong '/' */
	    "\xc2",             /* cut short */
	    "\xe0\x80\xaf",     /* overlong, three bytes */
	    "\xed\xa0\x80",     /* U+D800, a surrogate */
	    "\xf0\x80\x80\xaf", /* overlong, four bytes */
	    "\xf4\x90\x80\x80", /* past U+10FFFF */
	    "\xf5\x80\x80\x80",
	    "\xff",
	    "ok\xe2\x82",
	    "\xe2\x28\xa1",
	};
	json_t *a, *o;

	(void)state;
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		json_t *s = json_stringn_nocheck(bad[i], strlen(bad[i]));
		json_t *w = json_pack("{s:[O]}", "k", s);

		assert_null(jsonw_dumps(s, 0, NULL));
		assert_null(jsonw_dumps(w, 0, NULL));
		same_as_jansson(s);
		same_as_jansson(w);
		json_decref(w);
		json_decref(s);
	}
	/* A key that is not UTF-8 is refused too (jansson writes it out as
	 * it is: it does not check the result of a key's dump). */
	o = json_object();
	json_object_setn_nocheck(o, "\xc3\x28", 2, json_true());
	assert_null(jsonw_dumps(o, 0, NULL));
	json_decref(o);
	/* A cycle: jansson detects it, the writer's depth bound stops it. */
	a = json_array();
	o = json_object();
	assert_int_equal(json_array_append(a, o), 0);
	assert_int_equal(json_object_set(o, "back", a), 0);
	assert_null(jsonw_dumps(a, 0, NULL));
	assert_null(json_dumps(a, DUMP_FLAGS));
	json_object_clear(o);
	json_decref(o);
	json_decref(a);
	assert_null(jsonw_dumps(NULL, 0, NULL));
}

static void test_depth_bound(void **state)
{
	json_t *deep = json_array(), *inner = deep;
	char *t;

	(void)state;
	for (int i = 1; i < JSONW_DEPTH_MAX; i++) {
		json_t *next = json_array();

		json_array_append_new(inner, next);
		inner = next;
	}
	t = jsonw_dumps(deep, 0, NULL); /* JSONW_DEPTH_MAX levels: written */
	assert_non_null(t);
	assert_int_equal(strlen(t), 2 * JSONW_DEPTH_MAX);
	free(t);
	json_array_append_new(inner, json_array()); /* one more: refused */
	assert_null(jsonw_dumps(deep, 0, NULL));
	json_decref(deep);
}

static void test_buffer_limits(void **state)
{
	json_t *v = json_pack("{s:s}", "key", "a value of some length \n");
	struct buf b;

	(void)state;
	buf_init(&b, 1 << 20);
	assert_int_equal(buf_puts(&b, "prefix "), SB_OK);
	assert_int_equal(jsonw_append(&b, v, 0), SB_OK);
	assert_string_equal(b.data, "prefix {\"key\":\"a value of some length \\n\"}");
	buf_free(&b);
	/* Past the maximum: refused, and the buffer is as it was. */
	buf_init(&b, 20);
	assert_int_equal(buf_puts(&b, "prefix "), SB_OK);
	assert_int_equal(jsonw_append(&b, v, 0), SB_ERR_TOOBIG);
	assert_int_equal(b.len, 7);
	assert_string_equal(b.data, "prefix ");
	buf_free(&b);
	/* An invalid value in the middle leaves nothing of itself either. */
	buf_init(&b, 1 << 20);
	json_object_set_new(v, "bad", json_stringn_nocheck("\xff", 1));
	assert_int_equal(buf_puts(&b, "x"), SB_OK);
	assert_int_equal(jsonw_append(&b, v, 0), SB_ERR_INVAL);
	assert_string_equal(b.data, "x");
	buf_free(&b);
	json_decref(v);
}

/* ---- random values ---- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t rnd(uint32_t n)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (uint32_t)(rng_state % n);
}

/* A string of random code points, UTF-8 encoded: mostly ASCII (controls,
 * quotes and backslashes among them), some of 2, 3 and 4 bytes. */
static json_t *rnd_string(void)
{
	char s[256];
	size_t n = 0, want = rnd(40);

	while (n < want && n + 4 < sizeof s) {
		uint32_t kind = rnd(10), cp;

		if (kind < 6)
			cp = rnd(0x80);
		else if (kind < 7)
			cp = "\"\\/\n\t\x01\x1f"[rnd(7)];
		else if (kind < 8)
			cp = 0x80 + rnd(0x800 - 0x80);
		else if (kind < 9) {
			cp = 0x800 + rnd(0x10000 - 0x800);
			if (cp >= 0xd800 && cp <= 0xdfff)
				cp = 0xe000;
		} else
			cp = 0x10000 + rnd(0x110000 - 0x10000);
		if (cp < 0x80) {
			s[n++] = (char)cp;
		} else if (cp < 0x800) {
			s[n++] = (char)(0xc0 | cp >> 6);
			s[n++] = (char)(0x80 | (cp & 0x3f));
		} else if (cp < 0x10000) {
			s[n++] = (char)(0xe0 | cp >> 12);
			s[n++] = (char)(0x80 | ((cp >> 6) & 0x3f));
			s[n++] = (char)(0x80 | (cp & 0x3f));
		} else {
			s[n++] = (char)(0xf0 | cp >> 18);
			s[n++] = (char)(0x80 | ((cp >> 12) & 0x3f));
			s[n++] = (char)(0x80 | ((cp >> 6) & 0x3f));
			s[n++] = (char)(0x80 | (cp & 0x3f));
		}
	}
	return json_stringn(s, n);
}

static json_t *rnd_value(int depth)
{
	uint32_t kind = rnd(depth > 4 ? 6 : 8);

	switch (kind) {
	case 0:
		return json_null();
	case 1:
		return json_boolean(rnd(2));
	case 2:
		return json_integer((json_int_t)(((int64_t)rnd(UINT32_MAX) << (rnd(4) ? 0 : 31)) *
		                                 (rnd(2) ? 1 : -1)));
	case 3:
		return json_real(((double)rnd(UINT32_MAX) - 2147483648.0) /
		                 (double)(1u << rnd(31)) * (rnd(8) ? 1.0 : 1e200));
	case 4:
	case 5:
		return rnd_string();
	case 6: {
		json_t *a = json_array();

		for (uint32_t i = rnd(6); i > 0; i--)
			json_array_append_new(a, rnd_value(depth + 1));
		return a;
	}
	default: {
		json_t *o = json_object();

		for (uint32_t i = rnd(6); i > 0; i--) {
			json_t *k = rnd_string();

			json_object_setn_new(o, json_string_value(k), json_string_length(k),
			                     rnd_value(depth + 1));
			json_decref(k);
		}
		if (rnd(4) == 0 && json_object_size(o))
			json_object_deln(o, json_object_iter_key(json_object_iter(o)),
			                 json_object_iter_key_len(json_object_iter(o)));
		return o;
	}
	}
}

static void test_random_values(void **state)
{
	(void)state;
	for (int i = 0; i < 20000; i++) {
		json_t *v = rnd_value(0);

		same_as_jansson(v);
		json_decref(v);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_each_kind),     cmocka_unit_test(test_sorted_keys),
	    cmocka_unit_test(test_refusals),      cmocka_unit_test(test_depth_bound),
	    cmocka_unit_test(test_buffer_limits), cmocka_unit_test(test_random_values),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
