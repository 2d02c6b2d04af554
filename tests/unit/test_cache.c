/*
 * test_cache.c - the prompt-cache and context metrics: the reason labels of
 * switchboard_prompt_cache_breaks_total are the turn's break reasons, in
 * order, and the counters a run adds are rendered with their values.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "agents/turn.h"
#include "gateway/core/buf.h"
#include "gateway/core/err.h"
#include "gateway/obs/metrics.h"

static void test_reasons_match(void **state)
{
	(void)state;
	assert_int_equal(METRICS_CACHE_BREAK_REASONS, TURN_CACHE_BREAK_COUNT);
	for (int i = 0; i < TURN_CACHE_BREAK_COUNT; i++)
		assert_string_equal(metrics_cache_break_reasons[i],
		                    turn_cache_break_name((enum turn_cache_break)i));
	assert_string_equal(turn_cache_break_name(TURN_CACHE_COMPACTION), "compaction");
}

static void test_render(void **state)
{
	struct metrics m;
	struct buf out;

	(void)state;
	metrics_init(&m);
	m.prompt_cache_breaks[TURN_CACHE_SYSTEM] = 2;
	m.prompt_cache_breaks[TURN_CACHE_COMPACTION] = 5;
	m.prompt_cache_read_tokens = 12345;
	m.prompt_cache_write_tokens = 678;
	m.context_compactions[2] = 3;
	m.context_reactive_retries = 1;
	m.tool_results_persisted = 9;
	buf_init(&out, 1 << 20);
	assert_int_equal(metrics_render(&m, &out), SB_OK);
	assert_non_null(strstr(out.data, "# TYPE switchboard_prompt_cache_breaks_total counter\n"));
	assert_non_null(
	    strstr(out.data,
	           "switchboard_prompt_cache_breaks_total{reason=\"system_prompt_changed\"} 2\n"));
	assert_non_null(
	    strstr(out.data, "switchboard_prompt_cache_breaks_total{reason=\"compaction\"} 5\n"));
	assert_non_null(strstr(
	    out.data, "switchboard_prompt_cache_breaks_total{reason=\"tools_changed\"} 0\n"));
	assert_non_null(strstr(out.data, "switchboard_prompt_cache_read_tokens_total 12345\n"));
	assert_non_null(strstr(out.data, "switchboard_prompt_cache_write_tokens_total 678\n"));
	assert_non_null(
	    strstr(out.data, "switchboard_context_compactions_total{level=\"summary\"} 3\n"));
	assert_non_null(
	    strstr(out.data, "switchboard_context_compactions_total{level=\"trim\"} 0\n"));
	assert_non_null(strstr(out.data, "switchboard_context_reactive_retries_total 1\n"));
	assert_non_null(strstr(out.data, "switchboard_tool_results_persisted_total 9\n"));
	buf_free(&out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_reasons_match),
	    cmocka_unit_test(test_render),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
