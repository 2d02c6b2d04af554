/*
 * test_lazylib.c - gateway/core/lazylib.c: a library opened by its soname,
 * a table filled from it; a missing library and a missing function are told
 * apart.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "gateway/core/err.h"
#include "gateway/core/lazylib.h"

struct zlib_table {
	const char *(*version)(void);
	unsigned long (*crc32)(unsigned long crc, const unsigned char *buf, unsigned len);
};

static void test_loads_and_fills(void **state)
{
	static const struct lazylib_symbol syms[] = {
	    {"zlibVersion", offsetof(struct zlib_table, version)},
	    {"crc32", offsetof(struct zlib_table, crc32)},
	};
	struct zlib_table t;

	(void)state;
	memset(&t, 0, sizeof t);
	assert_int_equal(lazylib_load("libz.so.1", syms, 2, &t), SB_OK);
	assert_non_null(t.version);
	assert_non_null(t.crc32);
	assert_true(t.version()[0] == '1');
	/* crc32("a") */
	assert_int_equal(t.crc32(0, (const unsigned char *)"a", 1), 0xe8b7be43ul);
}

static void test_missing_library(void **state)
{
	static const struct lazylib_symbol syms[] = {{"f", 0}};
	void *table[1] = {NULL};

	(void)state;
	assert_int_equal(lazylib_load("libnot-there-at-all.so.9", syms, 1, table), SB_ERR_NOTFOUND);
	assert_null(table[0]);
}

static void test_missing_function(void **state)
{
	static const struct lazylib_symbol syms[] = {
	    {"zlibVersion", offsetof(struct zlib_table, version)},
	    {"no_such_function_in_zlib", offsetof(struct zlib_table, crc32)},
	};
	struct zlib_table t;

	(void)state;
	memset(&t, 0, sizeof t);
	assert_int_equal(lazylib_load("libz.so.1", syms, 2, &t), SB_ERR_PROTO);
	assert_null(t.crc32);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_loads_and_fills),
	    cmocka_unit_test(test_missing_library),
	    cmocka_unit_test(test_missing_function),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
