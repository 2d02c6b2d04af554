/*
 * test_mcp_names.c - what the model sees of an MCP server's tools
 * (agents/mcp/tools.c): the names made from hostile ones, and the text of
 * results of every content type. The protocol, the transports and the
 * lifecycle are tested end to end in tests/integration/test_mcp.c.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <regex.h>
#include <stdlib.h>
#include <string.h>

#include "agents/mcp/mcp.h"

static void check_charset(const char *name)
{
	regex_t re;
	int rc;

	assert_int_equal(regcomp(&re, "^[A-Za-z0-9_-]{1,64}$", REG_EXTENDED | REG_NOSUB), 0);
	rc = regexec(&re, name, 0, NULL, 0);
	regfree(&re);
	if (rc != 0)
		fail_msg("\"%s\" is outside the providers' charset", name);
}

static void test_names(void **state)
{
	char a[MCP_NAME_MAX + 1], b[MCP_NAME_MAX + 1], longname[300];
	const char *hostile[] = {"../../etc/passwd",
	                         "a b",
	                         "\xe2\x9c\x93",
	                         "x;rm -rf /",
	                         "tab\there",
	                         "nul-free but \"quoted\"",
	                         "",
	                         NULL};

	(void)state;
	/* a plain name stays as it is */
	mcp_tool_name("files", "read_file", a);
	assert_string_equal(a, "mcp__files__read_file");
	mcp_tool_name("ev", "get-sum", a);
	assert_string_equal(a, "mcp__ev__get-sum");
	/* two names that sanitise alike stay apart */
	mcp_tool_name("s", "a.b", a);
	mcp_tool_name("s", "a_b", b);
	assert_string_equal(b, "mcp__s__a_b");
	assert_string_not_equal(a, b);
	assert_int_equal(strncmp(a, "mcp__s__a_b_", 12), 0);
	check_charset(a);
	/* hostile ones land in the charset, under the prefix */
	for (size_t i = 0; hostile[i]; i++) {
		mcp_tool_name("s", hostile[i], a);
		check_charset(a);
		assert_int_equal(strncmp(a, "mcp__s__", 8), 0);
	}
	/* long names are cut to 64 with a hash: two that share 60 characters differ */
	memset(longname, 'x', 200);
	longname[200] = '\0';
	mcp_tool_name("s", longname, a);
	longname[199] = 'y';
	mcp_tool_name("s", longname, b);
	assert_int_equal(strlen(a), MCP_NAME_MAX);
	assert_int_equal(strlen(b), MCP_NAME_MAX);
	assert_string_not_equal(a, b);
	check_charset(a);
	/* the same name always gives the same bytes */
	mcp_tool_name("s", "a.b", a);
	mcp_tool_name("s", "a.b", b);
	assert_string_equal(a, b);
}

static char *render(const char *json, bool *is_error)
{
	json_t *r = json_loads(json, 0, NULL);
	char *t;

	assert_non_null(r);
	t = mcp_result_text(r, is_error);
	json_decref(r);
	assert_non_null(t);
	return t;
}

static void test_results(void **state)
{
	bool err;
	char *t;

	(void)state;
	t = render("{\"content\":[{\"type\":\"text\",\"text\":\"one\"},{\"type\":\"text\",\"text\":"
	           "\"two\"}]}",
	           &err);
	assert_string_equal(t, "one\ntwo");
	assert_false(err);
	free(t);
	t = render(
	    "{\"content\":[{\"type\":\"image\",\"data\":\"AAAA\",\"mimeType\":\"image/png\"},"
	    "{\"type\":\"audio\",\"data\":\"AAAAAAAA\",\"mimeType\":\"audio/wav\"}]}",
	    &err);
	assert_string_equal(
	    t, "[image: image/png, 3 bytes, not shown]\n[audio: audio/wav, 6 bytes, not shown]");
	free(t);
	t = render("{\"content\":[{\"type\":\"resource\",\"resource\":{\"uri\":\"file:///"
	           "a\",\"text\":\"hi\"}},"
	           "{\"type\":\"resource\",\"resource\":{\"uri\":\"file:///b\",\"blob\":\"AAAA\"}},"
	           "{\"type\":\"resource_link\",\"uri\":\"file:///c\",\"name\":\"c\"},"
	           "{\"type\":\"hologram\"}]}",
	           &err);
	assert_string_equal(t,
	                    "[resource file:///a]\nhi\n[resource file:///b: binary, 3 bytes, not "
	                    "shown]\n[resource link file:///c: c]\n[hologram content, not shown]");
	free(t);
	/* structured content when there is nothing else */
	t = render("{\"content\":[],\"structuredContent\":{\"n\":1}}", &err);
	assert_string_equal(t, "{\"n\":1}");
	free(t);
	/* an error result says so, even when it says nothing */
	t = render("{\"content\":[],\"isError\":true}", &err);
	assert_true(err);
	assert_string_equal(t, "(the tool failed and said nothing)");
	free(t);
	t = render("{}", &err);
	assert_false(err);
	assert_string_equal(t, "(no output)");
	free(t);
	/* parts of the wrong shape are skipped, not trusted */
	t = render("{\"content\":[{\"type\":5},{\"text\":\"no "
	           "type\"},\"str\",{\"type\":\"text\",\"text\":7}]}",
	           &err);
	assert_string_equal(t, "(no output)");
	free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_names),
	    cmocka_unit_test(test_results),
	};

	return cmocka_run_group_tests_name("mcp", tests, NULL, NULL);
}
