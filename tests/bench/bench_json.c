/*
 * bench_json.c - compact JSON text of the message path's values, jansson's
 * json_dumps against the gateway's writer (gateway/core/jsonw.h): a
 * transcript line (an assistant message with a tool call, about 500
 * bytes) and a model request (a system prompt, ten messages and eight tool
 * schemas, about 14 KB). CPU time of the process (CLOCK_PROCESS_CPUTIME_ID),
 * so other work on the machine counts less; the ratio is the figure.
 * Prints name: value lines for tests/bench/run.sh.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "gateway/core/jsonw.h"

static double cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static json_t *transcript_line(void)
{
	return json_pack("{s:s,s:s,s:s,s:s,s:{s:s,s:[{s:s,s:s},{s:s,s:s,s:s,s:{s:s,s:i}}]},"
	                 "s:{s:i,s:i,s:i},s:s}",
	                 "type", "message", "id", "cc126d360287b6c37d4f9c24", "parent_id",
	                 "19a84d827f297ff902826c13", "ts", "2026-12-04T18:46:34.158Z", "message",
	                 "role", "assistant", "content", "type", "text", "text",
	                 "Let me look at the workspace first.\nOne moment.", "type", "tool_use",
	                 "id", "toolu_01HXYZ", "name", "ls", "input", "path", ".", "depth", 2,
	                 "usage", "input", 1834, "output", 52, "cache_read", 1024, "model",
	                 "scripted/bench");
}

static json_t *model_request(void)
{
	json_t *req = json_object(), *msgs = json_array(), *tools = json_array();
	char text[1200];

	for (size_t i = 0; i + 1 < sizeof text; i++)
		text[i] = "abcdefghij klmnopqrst uvwxyz.\n\"quoted\" and more"[i % 47];
	text[sizeof text - 1] = '\0';
	json_object_set_new(req, "model", json_string("bench-model"));
	json_object_set_new(req, "system", json_string(text));
	for (int i = 0; i < 10; i++)
		json_array_append_new(msgs,
		                      json_pack("{s:s,s:s}", "role", i % 2 ? "assistant" : "user",
		                                "content", text + (i * 97) % 600));
	json_object_set_new(req, "messages", msgs);
	for (int i = 0; i < 8; i++)
		json_array_append_new(
		    tools,
		    json_pack("{s:s,s:s,s:{s:s,s:{s:{s:s,s:s},s:{s:s,s:s,s:i}},s:[s]}}", "name",
		              "tool", "description",
		              "Reads a file beneath the workspace; give a path relative to it.",
		              "input_schema", "type", "object", "properties", "path", "type",
		              "string", "description", "The file's path", "limit", "type",
		              "integer", "description", "At most this many lines", "minimum", 1,
		              "required", "path"));
	json_object_set_new(req, "tools", tools);
	json_object_set_new(req, "max_tokens", json_integer(4096));
	json_object_set_new(req, "temperature", json_real(0.2));
	return req;
}

static void run(const char *name, json_t *v, long rounds)
{
	double t0, jansson_s, jsonw_s;
	size_t bytes = 0, len = 0;
	char *a = json_dumps(v, JSON_COMPACT), *b = jsonw_dumps(v, 0, &len);

	if (!a || !b || strcmp(a, b) != 0) {
		fprintf(stderr, "bench_json: %s: the two writers differ\n", name);
		exit(1);
	}
	bytes = strlen(a);
	free(a);
	free(b);
	t0 = cpu_s();
	for (long i = 0; i < rounds; i++)
		free(json_dumps(v, JSON_COMPACT));
	jansson_s = cpu_s() - t0;
	t0 = cpu_s();
	for (long i = 0; i < rounds; i++)
		free(jsonw_dumps(v, 0, NULL));
	jsonw_s = cpu_s() - t0;
	printf("json_%s_bytes: %zu\n", name, bytes);
	printf("json_%s_jansson_ns: %.0f\n", name, jansson_s / (double)rounds * 1e9);
	printf("json_%s_jsonw_ns: %.0f\n", name, jsonw_s / (double)rounds * 1e9);
	printf("json_%s_speedup: %.1f\n", name, jansson_s / jsonw_s);
}

int main(void)
{
	json_t *line = transcript_line(), *req = model_request();

	run("transcript_line", line, 200000);
	run("model_request", req, 5000);
	json_decref(line);
	json_decref(req);
	return 0;
}
