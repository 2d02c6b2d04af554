/*
 * fuzz_mcp.c - libFuzzer harness for what an MCP server sends that the
 * gateway turns into text for the model (agents/mcp/tools.c): a tools/call
 * result and a tool name.
 *
 * Properties checked on every input:
 *  - a result that parses as JSON renders to a non-empty string (never
 *    NULL but for memory), the same one twice;
 *  - the input as a tool name gives a name of 1 to 64 bytes, all of
 *    [A-Za-z0-9_-], starting with "mcp__s__" (or cut inside it for a long
 *    server name), the same one twice.
 * Built by `make fuzz` (clang, -fsanitize=fuzzer,address,undefined).
 */
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agents/mcp/mcp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_name(const char *tool)
{
	char a[MCP_NAME_MAX + 1], b[MCP_NAME_MAX + 1];
	size_t n;

	mcp_tool_name("s", tool, a);
	mcp_tool_name("s", tool, b);
	n = strlen(a);
	if (n == 0 || n > MCP_NAME_MAX || strcmp(a, b) != 0 || strncmp(a, "mcp__s__", 8) != 0)
		abort();
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)a[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '-'))
			abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *name = malloc(size + 1);
	json_t *r = json_loadb((const char *)data, size, 0, NULL);

	if (name) {
		memcpy(name, data, size);
		name[size] = '\0'; /* (cut at the first NUL, as a JSON string never holds one) */
		check_name(name);
		free(name);
	}
	if (r) {
		bool e1, e2;
		char *a = mcp_result_text(r, &e1), *b = mcp_result_text(r, &e2);

		if (a && b && (strcmp(a, b) != 0 || e1 != e2 || !*a))
			abort();
		free(a);
		free(b);
		json_decref(r);
	}
	return 0;
}
