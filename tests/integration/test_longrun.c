/*
 * test_longrun.c - a long, tool-heavy run in a small window: 200 tool
 * calls in one `switchboard agent run` with a 16k-token window, against the
 * fake model server with usage counted from the requests (gpt-tokenizer)
 * and a prompt cache that reads the longest prefix shared with the previous
 * request (tests/fakes/fake_llm.js, usage "auto").
 *
 * The model plans with the todo tool, then calls bash, read, grep and ls
 * (outputs of 1 to 3 KB) and updates its plan along the way; summary
 * requests get a summary, the silent memory turns before compaction
 * NO_REPLY. The run must end with the model's answer (not a
 * limit, not an error), every tool_use paired, a bounded number of cache
 * breaks, and the todo list intact: in the transcript, and put back into
 * the context after each compaction that removed messages. It prints the
 * cache breaks per 100 model calls and the share of prompt tokens the
 * provider read from its cache.
 */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "agents/message.h"
#include "agents/transcript.h"
#include "harness.h"

#define TOOL_CALLS 200

struct fixture {
	struct harness_peer llm;
	char home[512];
};

static struct fixture fx;

static int setup(void **state)
{
	char cfg[2048], path[1024];
	const char *init[] = {"init", NULL};

	(void)state;
	memset(&fx, 0, sizeof fx);
	if (harness_peer_start(&fx.llm, "fake_llm.js", NULL) != 0)
		return -1;
	if (harness_tmpdir(fx.home, sizeof fx.home) != 0)
		return -1;
	snprintf(cfg, sizeof cfg,
	         "providers:\n"
	         "  - {id: oa, api: openai-chat, base_url: \"http://127.0.0.1:%d/v1\", "
	         "api_key: k1, max_retries: 1, timeout: 30s}\n"
	         "agents:\n"
	         "  - {id: main, default: true, model: oa/gpt-test, max_turns: 260, budget: 400, "
	         "sandbox: full, context: {window: 16384}}\n",
	         fx.llm.port);
	snprintf(path, sizeof path, "%s/switchboard.yaml", fx.home);
	if (harness_write_file(path, cfg) != 0 || harness_cli(fx.home, NULL, init) != 0)
		return -1;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	harness_peer_stop(&fx.llm);
	harness_rmrf(fx.home);
	return 0;
}

/* The plan's items with their statuses at step k of the run. */
static void todo_step(struct buf *b, int phase)
{
	static const char *const items[] = {"survey the workspace", "count the records",
	                                    "search the notes", "write the answer"};

	buf_puts(b, "{\"usage\": \"auto\", \"tool_calls\": [{\"name\": \"todo\", \"input\": "
	            "{\"items\": [");
	for (int i = 0; i < 4; i++)
		buf_printf(b, "%s{\"text\": \"%s\", \"status\": \"%s\"}", i ? "," : "", items[i],
		           i < phase    ? "done"
		           : i == phase ? "in_progress"
		                        : "pending");
	buf_puts(b, "]}}]},");
}

static char *longrun_script(void)
{
	struct buf b;

	buf_init(&b, 8 << 20);
	buf_puts(&b, "[");
	/* Summaries, answered whenever one is asked for. */
	for (int i = 0; i < 40; i++)
		buf_printf(&b,
		           "{\"match\": \"<conversation>\", \"usage\": \"auto\", \"text\": "
		           "\"SUMMARY %d: the user asked for a survey of the workspace; the "
		           "assistant listed files, counted records with seq, read the notes and "
		           "searched them; the numbers so far are in the saved results.\"},",
		           i);
	/* The silent memory turn before each compaction cycle: nothing to
	 * keep. */
	for (int i = 0; i < 40; i++)
		buf_puts(&b, "{\"match\": \"Silent memory turn\", \"usage\": \"auto\", "
		             "\"text\": \"NO_REPLY\"},");
	todo_step(&b, 0);
	for (int k = 1; k < TOOL_CALLS; k++) {
		if (k == 50 || k == 100 || k == 150) {
			todo_step(&b, k / 50);
			continue;
		}
		switch (k % 4) {
		case 0:
			buf_printf(&b,
			           "{\"usage\": \"auto\", \"tool_calls\": [{\"name\": \"bash\", "
			           "\"input\": {\"command\": \"seq %d %d\"}}]},",
			           k * 1000, k * 1000 + 150 + (k * 37) % 250);
			break;
		case 1:
			buf_printf(&b,
			           "{\"usage\": \"auto\", \"tool_calls\": [{\"name\": \"read\", "
			           "\"input\": {\"path\": \"%s\"}}]},",
			           k % 3 ? "AGENTS.md" : "SOUL.md");
			break;
		case 2:
			buf_printf(&b,
			           "{\"usage\": \"auto\", \"tool_calls\": [{\"name\": \"grep\", "
			           "\"input\": {\"pattern\": \"%s\"}}]},",
			           k % 3 ? "the" : "a");
			break;
		default:
			buf_printf(&b,
			           "{\"usage\": \"auto\", \"text\": \"Step %d.\", \"tool_calls\": "
			           "[{\"name\": \"ls\", \"input\": {}}]},",
			           k);
			break;
		}
	}
	buf_puts(&b, "{\"usage\": \"auto\", \"text\": \"Survey done: 200 tool calls; the "
	             "records, the notes and the counts are summarised above, and the plan is "
	             "complete.\"}]");
	return buf_steal(&b);
}

static void load_one(struct transcript_loaded *tl)
{
	char dir[1024], path[2048] = "", why[512];
	struct dirent *de;
	DIR *d;

	snprintf(dir, sizeof dir, "%s/agents/main/sessions", fx.home);
	d = opendir(dir);
	assert_non_null(d);
	while ((de = readdir(d)))
		if (strstr(de->d_name, ".jsonl") && !strstr(de->d_name, ".archive-"))
			snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
	closedir(d);
	assert_true(path[0] != '\0');
	assert_int_equal(transcript_load(path, tl), 0);
	if (msg_check_pairing(tl->messages, why, sizeof why) != 0)
		fail_msg("pairing broken: %s", why);
}

static void test_200_tool_calls_in_16k(void **state)
{
	const char *args[] = {"agent", "run", "do the long survey", NULL};
	struct transcript_loaded tl;
	struct buf out;
	char *script;
	const json_t *e, *todo = NULL;
	size_t i;
	long breaks = 0, by_reason[4] = {0}, calls = 0, tools = 0, compactions[3] = {0};
	long long prompt = 0, cached = 0;
	int reinjected = 0, rc;
	static const char *const reasons[] = {"system_prompt_changed", "tools_changed",
	                                      "compaction", "history_changed"};

	(void)state;
	script = longrun_script();
	assert_int_equal(harness_http(fx.llm.port, "POST", "/__script", NULL, script, NULL), 200);
	free(script);
	buf_init(&out, 64 << 20);
	rc = harness_cli(fx.home, &out, args);
	load_one(&tl);
	json_array_foreach(tl.entries, i, e)
	{
		const char *type = json_string_value(json_object_get(e, "type"));
		const char *ev = json_string_value(json_object_get(e, "event"));

		if (strcmp(type, "compaction") == 0) {
			json_int_t lv = json_integer_value(json_object_get(e, "level"));

			if (lv >= 1 && lv <= 3)
				compactions[lv - 1]++;
		}
		if (ev && strcmp(ev, "cache_break") == 0) {
			breaks++;
			for (int k = 0; k < 4; k++)
				by_reason[k] +=
				    strcmp(json_string_value(json_object_get(e, "reason")),
				           reasons[k]) == 0;
		}
		if (ev && strcmp(ev, "todo") == 0)
			todo = json_object_get(e, "items");
		if (ev && strcmp(ev, "note") == 0 &&
		    strstr(json_string_value(json_object_get(e, "text")), "[Your todo list"))
			reinjected++;
		if (ev && strcmp(ev, "turn_end") == 0) {
			calls = (long)json_integer_value(json_object_get(e, "model_calls"));
			tools = (long)json_integer_value(json_object_get(e, "tool_calls"));
		}
		if (strcmp(type, "message") == 0 && json_object_get(e, "usage")) {
			const json_t *u = json_object_get(e, "usage");

			prompt += json_integer_value(json_object_get(u, "input_tokens")) +
			          json_integer_value(json_object_get(u, "cache_read_tokens")) +
			          json_integer_value(json_object_get(u, "cache_write_tokens"));
			cached += json_integer_value(json_object_get(u, "cache_read_tokens"));
		}
	}
	printf("  long run: %ld model calls, %ld tool calls, window 16384\n", calls, tools);
	printf("  cache breaks: %ld (%.1f per 100 model calls): system %ld, tools %ld, "
	       "compaction %ld, history %ld\n",
	       breaks, calls ? 100.0 * (double)breaks / (double)calls : 0.0, by_reason[0],
	       by_reason[1], by_reason[2], by_reason[3]);
	printf("  compactions: trim %ld, archive %ld, summary %ld; todo list put back %d times\n",
	       compactions[0], compactions[1], compactions[2], reinjected);
	printf("  prompt tokens read from the provider's cache: %lld of %lld (%.1f%%)\n", cached,
	       prompt, prompt ? 100.0 * (double)cached / (double)prompt : 0.0);
	fflush(stdout);
	if (rc != 0)
		fail_msg("agent run exited %d:\n%.3000s", rc,
		         out.len > 3000 ? out.data + out.len - 3000 : out.data);
	assert_non_null(strstr(out.data, "Survey done: 200 tool calls"));
	assert_int_equal(tools, TOOL_CALLS);
	assert_true(calls >= TOOL_CALLS + 1);
	/* Bounded: a batch of level 1 or an archive now and then, not a
	 * break at every call past the threshold. */
	assert_true(breaks * 100 <= 20 * calls);
	assert_int_equal(by_reason[3], 0); /* nothing unexplained */
	/* The plan is intact: the last list, all four items, and it came back
	 * after each compaction that removed messages. */
	assert_non_null(todo);
	assert_int_equal(json_array_size(todo), 4);
	assert_string_equal(json_string_value(json_object_get(json_array_get(todo, 3), "status")),
	                    "in_progress");
	if (compactions[1] + compactions[2] > 0)
		assert_true(reinjected >= 1);
	transcript_loaded_free(&tl);
	buf_free(&out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_200_tool_calls_in_16k),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
