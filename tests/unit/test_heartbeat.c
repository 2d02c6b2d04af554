/*
 * test_heartbeat.c - the heartbeat's rules: HEARTBEAT_OK at the start or
 * the end (not the middle) with at most 300 other characters, effectively
 * empty HEARTBEAT.md files, and active-hours windows (across midnight, in
 * other time zones, through a DST change).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gateway/core/err.h"
#include "gateway/cron/cron.h"
#include "gateway/cron/scheduler_rules.h"

static int64_t T(const char *iso)
{
	int64_t ms = -1;

	assert_int_equal(cron_parse_time(iso, NULL, &ms), SB_OK);
	return ms / 1000;
}

static const struct cron_tz *zone(const char *name)
{
	const struct cron_tz *z = NULL;

	assert_int_equal(cron_tz_get(name, &z), SB_OK);
	return z;
}

/* "HEARTBEAT_OK" with n copies of fill before (at_end) or after it. */
static char *padded(size_t n, const char *fill, bool at_end)
{
	size_t fl = strlen(fill), len = n * fl + 32;
	char *s = malloc(len), *p = s;

	assert_non_null(s);
	if (!at_end) {
		p += snprintf(p, len, "HEARTBEAT_OK ");
	}
	for (size_t i = 0; i < n; i++) {
		memcpy(p, fill, fl);
		p += fl;
	}
	if (at_end)
		snprintf(p, len - (size_t)(p - s), " HEARTBEAT_OK");
	else
		*p = '\0';
	return s;
}

static void test_ack_rules(void **state)
{
	char *s;

	(void)state;
	assert_true(heartbeat_is_ack("HEARTBEAT_OK", 300));
	assert_true(heartbeat_is_ack("  HEARTBEAT_OK\n", 300));
	assert_true(heartbeat_is_ack("**HEARTBEAT_OK**", 300));
	assert_true(heartbeat_is_ack("HEARTBEAT_OK. Nothing new in the inbox.", 300));
	assert_true(heartbeat_is_ack("All quiet today. HEARTBEAT_OK", 300));
	assert_true(heartbeat_is_ack("All quiet today. `HEARTBEAT_OK`.", 300));
	/* in the middle it is an ordinary word: delivered */
	assert_false(heartbeat_is_ack("The disk is full, HEARTBEAT_OK was wrong, act now", 300));
	assert_false(heartbeat_is_ack("The disk is 97% full.", 300));
	assert_false(heartbeat_is_ack("", 300));
	assert_false(heartbeat_is_ack("HEARTBEAT_O", 300));
	/* exactly 300 other characters: an ack; 301: delivered */
	s = padded(300, "x", false);
	assert_true(heartbeat_is_ack(s, 300));
	free(s);
	s = padded(301, "x", false);
	assert_false(heartbeat_is_ack(s, 300));
	free(s);
	s = padded(300, "x", true);
	assert_true(heartbeat_is_ack(s, 300));
	free(s);
	s = padded(301, "x", true);
	assert_false(heartbeat_is_ack(s, 300));
	free(s);
	/* characters, not bytes */
	s = padded(300, "\xC3\xA9", false);
	assert_true(heartbeat_is_ack(s, 300));
	free(s);
	s = padded(301, "\xC3\xA9", true);
	assert_false(heartbeat_is_ack(s, 300));
	free(s);
}

static void test_empty_file(void **state)
{
	static const char *const empty[] = {
	    "",
	    "\n\n   \n",
	    "# Heartbeat\n\n## Checks\n",
	    "# Heartbeat\n- \n* [ ]\n+\n1.\n2)\n",
	    "<!-- add checks below -->\n# Tasks\n",
	    "<!--\nmulti-line\ncomment\n-->\n## Nothing\n",
	};
	static const char *const full[] = {
	    "# Heartbeat\n- Check the build server\n",
	    "Check the inbox.",
	    "## Tasks\n- [ ] renew the certificate\n",
	    "<!-- x --> look at the queue\n",
	    "1. call the bank\n",
	};

	(void)state;
	for (size_t i = 0; i < sizeof empty / sizeof *empty; i++)
		if (!heartbeat_file_empty(empty[i], strlen(empty[i])))
			fail_msg("should be empty: %s", empty[i]);
	for (size_t i = 0; i < sizeof full / sizeof *full; i++)
		if (heartbeat_file_empty(full[i], strlen(full[i])))
			fail_msg("should not be empty: %s", full[i]);
}

static void test_hhmm(void **state)
{
	int m = -1;

	(void)state;
	assert_int_equal(heartbeat_hhmm_parse("08:30", false, &m), SB_OK);
	assert_int_equal(m, 510);
	assert_int_equal(heartbeat_hhmm_parse("24:00", true, &m), SB_OK);
	assert_int_equal(m, 1440);
	assert_int_equal(heartbeat_hhmm_parse("24:00", false, &m), SB_ERR_INVAL);
	assert_int_equal(heartbeat_hhmm_parse("24:01", true, &m), SB_ERR_INVAL);
	assert_int_equal(heartbeat_hhmm_parse("8:00", true, &m), SB_ERR_INVAL);
	assert_int_equal(heartbeat_hhmm_parse("23:60", true, &m), SB_ERR_INVAL);
}

static void test_windows(void **state)
{
	const struct cron_tz *utc = zone("UTC"), *ny = zone("America/New_York"),
	                     *tokyo = zone("Asia/Tokyo");

	(void)state;
	/* 08:00-22:00 UTC: start inclusive, end exclusive */
	assert_false(heartbeat_in_window(480, 1320, utc, T("2025-06-01T07:59:00Z")));
	assert_true(heartbeat_in_window(480, 1320, utc, T("2025-06-01T08:00:00Z")));
	assert_true(heartbeat_in_window(480, 1320, utc, T("2025-06-01T21:59:00Z")));
	assert_false(heartbeat_in_window(480, 1320, utc, T("2025-06-01T22:00:00Z")));
	/* across midnight: 22:00-06:00 */
	assert_true(heartbeat_in_window(1320, 360, utc, T("2025-06-01T23:00:00Z")));
	assert_true(heartbeat_in_window(1320, 360, utc, T("2025-06-02T05:59:00Z")));
	assert_false(heartbeat_in_window(1320, 360, utc, T("2025-06-02T06:00:00Z")));
	assert_false(heartbeat_in_window(1320, 360, utc, T("2025-06-02T12:00:00Z")));
	/* an empty window is never active; 24:00 closes at midnight */
	assert_false(heartbeat_in_window(600, 600, utc, T("2025-06-01T10:00:00Z")));
	assert_true(heartbeat_in_window(1200, 1440, utc, T("2025-06-01T23:59:00Z")));
	assert_false(heartbeat_in_window(1200, 1440, utc, T("2025-06-02T00:00:00Z")));
	/* New York, 08:00-22:00 local, in winter (EST) and summer (EDT) */
	assert_false(heartbeat_in_window(480, 1320, ny, T("2025-01-15T12:30:00Z")));
	assert_true(heartbeat_in_window(480, 1320, ny, T("2025-01-15T13:00:00Z")));
	assert_true(heartbeat_in_window(480, 1320, ny, T("2025-07-15T12:00:00Z")));
	assert_false(heartbeat_in_window(480, 1320, ny, T("2025-07-16T02:00:00Z")));
	/* Tokyo, 22:00-07:00 local (13:00-22:00 UTC) */
	assert_true(heartbeat_in_window(1320, 420, tokyo, T("2025-06-01T14:00:00Z")));
	assert_false(heartbeat_in_window(1320, 420, tokyo, T("2025-06-01T23:00:00Z")));
	/* the day clocks go forward: 02:30 does not exist, 03:30 EDT is 07:30Z */
	assert_true(heartbeat_in_window(180, 240, ny, T("2025-03-09T07:30:00Z")));
	assert_false(heartbeat_in_window(120, 180, ny, T("2025-03-09T07:30:00Z")));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_ack_rules),
	    cmocka_unit_test(test_empty_file),
	    cmocka_unit_test(test_hhmm),
	    cmocka_unit_test(test_windows),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
