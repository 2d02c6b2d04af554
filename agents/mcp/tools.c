/*
 * tools.c - what the model sees of an MCP server's tools: their names and
 * the text of their results (see mcp.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agents/mcp/mcp.h"
#include "gateway/core/buf.h"
#include "gateway/core/err.h"

#define MCP_RESULT_MAX (64u << 20) /* the budgets cut it far below this */

static bool mcp_name_char(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '_' || c == '-';
}

void mcp_tool_name(const char *server, const char *tool, char *out)
{
	char full[4096];
	size_t n = 0, len;
	uint64_t h = 14695981039346656037ULL;
	bool changed = false;

	len = (size_t)snprintf(full, sizeof full, "%s%s__", MCP_PREFIX, server);
	if (len >= sizeof full)
		len = sizeof full - 1;
	n = len;
	for (const char *p = tool; *p && n < sizeof full - 1; p++) {
		unsigned char c = (unsigned char)*p;

		h ^= c;
		h *= 1099511628211ULL;
		if (!mcp_name_char(c))
			changed = true;
		full[n++] = mcp_name_char(c) ? (char)c : '_';
	}
	full[n] = '\0';
	if (n <= MCP_NAME_MAX && !changed) {
		memcpy(out, full, n + 1);
		return;
	}
	if (n <= MCP_NAME_MAX - 9) {
		/* A name that had to change carries a hash of the original, so
		 * "a.b" and "a_b" stay two tools. */
		snprintf(out, MCP_NAME_MAX + 1, "%.*s_%08x", MCP_NAME_MAX - 9, full,
		         (unsigned)(h & 0xffffffffu));
		return;
	}
	snprintf(out, MCP_NAME_MAX + 1, "%.*s_%08x", MCP_NAME_MAX - 9, full,
	         (unsigned)(h & 0xffffffffu));
}

static void mcp_put(struct buf *b, const char *s)
{
	if (b->len)
		(void)buf_puts(b, "\n");
	(void)buf_puts(b, s);
}

static void mcp_put_part(struct buf *b, const json_t *part)
{
	const char *type = json_string_value(json_object_get(part, "type"));
	const char *mime = json_string_value(json_object_get(part, "mimeType"));
	char line[1200];

	if (!type)
		return;
	if (strcmp(type, "text") == 0) {
		const char *text = json_string_value(json_object_get(part, "text"));

		if (text)
			mcp_put(b, text);
	} else if (strcmp(type, "image") == 0 || strcmp(type, "audio") == 0) {
		const char *data = json_string_value(json_object_get(part, "data"));

		snprintf(line, sizeof line, "[%s: %.100s, %zu bytes, not shown]", type,
		         mime ? mime : "unknown type", data ? strlen(data) / 4 * 3 : 0);
		mcp_put(b, line);
	} else if (strcmp(type, "resource") == 0) {
		const json_t *r = json_object_get(part, "resource");
		const char *uri = json_string_value(json_object_get(r, "uri"));
		const char *text = json_string_value(json_object_get(r, "text"));
		const char *blob = json_string_value(json_object_get(r, "blob"));
		const char *rmime = json_string_value(json_object_get(r, "mimeType"));

		if (text) {
			snprintf(line, sizeof line, "[resource %.900s]", uri ? uri : "");
			mcp_put(b, line);
			mcp_put(b, text);
		} else {
			snprintf(line, sizeof line,
			         "[resource %.900s: %.100s, %zu bytes, not shown]", uri ? uri : "",
			         rmime ? rmime : "binary", blob ? strlen(blob) / 4 * 3 : 0);
			mcp_put(b, line);
		}
	} else if (strcmp(type, "resource_link") == 0) {
		const char *uri = json_string_value(json_object_get(part, "uri"));
		const char *name = json_string_value(json_object_get(part, "name"));

		snprintf(line, sizeof line, "[resource link %.900s%s%.200s]", uri ? uri : "",
		         name ? ": " : "", name ? name : "");
		mcp_put(b, line);
	} else {
		snprintf(line, sizeof line, "[%.100s content, not shown]", type);
		mcp_put(b, line);
	}
}

char *mcp_result_text(const json_t *result, bool *is_error)
{
	struct buf b;
	const json_t *content = json_object_get(result, "content"), *part;
	const json_t *structured = json_object_get(result, "structuredContent");
	size_t i;
	char *out;

	buf_init(&b, MCP_RESULT_MAX);
	*is_error = json_is_true(json_object_get(result, "isError"));
	json_array_foreach(content, i, part) mcp_put_part(&b, part);
	if (!b.len && structured) {
		char *s = json_dumps(structured, JSON_COMPACT | JSON_ENCODE_ANY);

		if (s)
			mcp_put(&b, s);
		free(s);
	}
	if (!b.len)
		(void)buf_puts(&b,
		               *is_error ? "(the tool failed and said nothing)" : "(no output)");
	out = b.data ? strndup(b.data, b.len) : NULL;
	buf_free(&b);
	return out;
}
