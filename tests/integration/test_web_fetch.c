/*
 * test_web_fetch.c - web_fetch and web_search end to end: the real daemon,
 * a scripted model that calls the tool and answers with what the tool gave
 * it ({{tool_result}}), and a page server on 127.0.0.1
 * (tests/fakes/page_server.js, also a SearXNG-style search instance). The
 * user's side is the OpenAI-compatible endpoint's reply.
 *
 * 1. An agent whose web.allow names 127.0.0.1 gets the page as text: the
 *    heading, the paragraph, the link; never the script, the comment or the
 *    noscript text; labelled untrusted.
 * 2. An agent without the allow-list entry is refused before any byte
 *    reaches the page server (its hit counter does not move), by address
 *    and by name (localhost).
 * 3. A page that redirects to the metadata address is refused at the hop.
 * 4. An agent without web.fetch has no web_fetch: a call is refused and the
 *    page server sees nothing.
 * 5. web_search: the query reaches the instance exactly (percent-encoded,
 *    with format=json, the agent's safesearch and language); the answer and
 *    the first max_results results come back numbered, labelled untrusted;
 *    a smaller count is honoured.
 * 6. Hostile results cannot forge the list: titles are flattened to one
 *    line, javascript: and user-info URLs are left out (and said to be), a
 *    long snippet is cut.
 * 7. No results says so, with the engines that did not answer; an instance
 *    without json (403) gets the hint, one that never answers the time
 *    limit; an agent without web.search has no web_search and the instance
 *    sees nothing.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "harness.h"
#include "harness_oai.h"

struct fixture {
	char home[512];
	char token[256];
	struct harness_daemon d;
	struct harness_peer pages;
};

static struct fixture fx;

static void print_log(void)
{
	struct buf log;

	buf_init(&log, 64 << 20);
	harness_daemon_log(&fx.d, &log);
	fprintf(stderr, "daemon log:\n%s\n", log.data ? log.data : "");
	buf_free(&log);
}

static int setup(void **state)
{
	const char *init[] = {"init", NULL};
	char path[700], script[4096], cfg[4096];
	int p;

	(void)state;
	memset(&fx, 0, sizeof fx);
	if (harness_peer_start(&fx.pages, "page_server.js", NULL) != 0)
		return -1;
	p = fx.pages.port;
	if (harness_tmpdir(fx.home, sizeof fx.home) != 0)
		return -1;
	snprintf(script, sizeof script,
	         "steps:\n"
	         "  - match: fetch page\n"
	         "    tool_calls:\n"
	         "      - {name: web_fetch, input: {url: \"http://127.0.0.1:%d/page.html\"}}\n"
	         "  - text: \"PAGE {{tool_result}}\"\n"
	         "  - match: fetch by name\n"
	         "    tool_calls:\n"
	         "      - {name: web_fetch, input: {url: \"http://localhost:%d/page.html\"}}\n"
	         "  - text: \"NAME {{tool_result}}\"\n"
	         "  - match: fetch redirect\n"
	         "    tool_calls:\n"
	         "      - {name: web_fetch, input: {url: "
	         "\"http://127.0.0.1:%d/redirect?to=http://169.254.169.254/latest/meta-data/\"}}\n"
	         "  - text: \"REDIRECT {{tool_result}}\"\n"
	         "  - match: search tea\n"
	         "    tool_calls:\n"
	         "      - {name: web_search, input: {query: \"tea & coffee \xc3\xbc?\"}}\n"
	         "  - text: \"SEARCH {{tool_result}}\"\n"
	         "  - match: search one\n"
	         "    tool_calls:\n"
	         "      - {name: web_search, input: {query: \"one\", count: 1}}\n"
	         "  - text: \"ONE {{tool_result}}\"\n"
	         "  - match: search hostile\n"
	         "    tool_calls:\n"
	         "      - {name: web_search, input: {query: hostile}}\n"
	         "  - text: \"HOSTILE {{tool_result}}\"\n"
	         "  - match: search nothing\n"
	         "    tool_calls:\n"
	         "      - {name: web_search, input: {query: nothing}}\n"
	         "  - text: \"NOTHING {{tool_result}}\"\n"
	         "  - text: \"other\"\n",
	         p, p, p);
	snprintf(path, sizeof path, "%s/script.yaml", fx.home);
	if (harness_write_file(path, script) != 0)
		return -1;
	snprintf(path, sizeof path, "%s/switchboard.yaml", fx.home);
	snprintf(cfg, sizeof cfg,
	                       "providers:\n"
	                       "  - {id: s, api: scripted, script: script.yaml}\n"
	                       "agents:\n"
	                       "  - id: open\n"
	                       "    default: true\n"
	                       "    model: s/x\n"
	                       "    web: {fetch: true, allow: [\"127.0.0.1\"], timeout: 10s}\n"
	                       "  - {id: shut, model: s/x, web: {fetch: true}}\n"
	                       "  - {id: off, model: s/x}\n"
	                       "  - id: finder\n"
	                       "    model: s/x\n"
	                       "    web:\n"
	                       "      search: {url: \"http://127.0.0.1:%d/\", max_results: 3,\n"
	                       "               safesearch: strict, language: de-CH}\n"
	                       "  - id: nojson\n"
	                       "    model: s/x\n"
	                       "    web: {search: {url: \"http://127.0.0.1:%d/nojson\"}}\n"
	                       "  - id: slow\n"
	                       "    model: s/x\n"
	                       "    web: {search: {url: \"http://127.0.0.1:%d/slow\", timeout: 300ms}}\n"
	                       "openai_api: {enabled: true, sync_timeout: 30s}\n",
	                       p, p, p);
	if (harness_write_file(path, cfg) != 0)
		return -1;
	if (harness_cli(fx.home, NULL, init) != 0)
		return -1;
	if (harness_daemon_start(&fx.d, fx.home, NULL) != 0 || harness_wait_ready(&fx.d, 20000))
		return -1;
	return harness_oai_token(fx.home, fx.token, sizeof fx.token);
}

static int teardown(void **state)
{
	int code;

	(void)state;
	code = harness_daemon_stop(&fx.d, SIGTERM, 20000);
	if (code != 0) {
		fprintf(stderr, "daemon exit %d\n", code);
		print_log();
	}
	harness_peer_stop(&fx.pages);
	harness_rmrf(fx.home);
	return code == 0 ? 0 : -1;
}

/* What the user receives from agent for text (the reply's content). */
static char *ask(const char *agent, const char *user, const char *text)
{
	char auth[300], req[1024];
	const char *hdrs[] = {auth, "Content-Type: application/json", NULL};
	struct buf body;
	json_t *r, *msg;
	char *out;
	long st;

	snprintf(auth, sizeof auth, "Authorization: Bearer %s", fx.token);
	snprintf(req, sizeof req,
	         "{\"model\":\"%s\",\"user\":\"%s\",\"messages\":[{\"role\":\"user\","
	         "\"content\":\"%s\"}]}",
	         agent, user, text);
	buf_init(&body, 4 << 20);
	st = harness_http(fx.d.port, "POST", "/v1/chat/completions", hdrs, req, &body);
	if (st != 200) {
		print_log();
		fail_msg("HTTP %ld: %s", st, body.data ? body.data : "");
	}
	r = json_loads(body.data, 0, NULL);
	assert_non_null(r);
	msg = json_object_get(json_array_get(json_object_get(r, "choices"), 0), "message");
	assert_non_null(json_string_value(json_object_get(msg, "content")));
	out = strdup(json_string_value(json_object_get(msg, "content")));
	json_decref(r);
	buf_free(&body);
	return out;
}

/* How often the page server served /page.html. */
static long page_hits(void)
{
	struct buf body;
	json_t *r;
	long n;

	buf_init(&body, 4096);
	assert_int_equal(harness_http(fx.pages.port, "GET", "/hits", NULL, NULL, &body), 200);
	r = json_loads(body.data, 0, NULL);
	assert_non_null(r);
	n = (long)json_integer_value(json_object_get(r, "page"));
	json_decref(r);
	buf_free(&body);
	return n;
}

#define HAS(hay, needle)                                                                           \
	do {                                                                                       \
		if (!strstr((hay), (needle)))                                                      \
			fail_msg("expected \"%s\" in the reply:\n%s", (needle), (hay));            \
	} while (0)
#define LACKS(hay, needle)                                                                         \
	do {                                                                                       \
		if (strstr((hay), (needle)))                                                       \
			fail_msg("did not expect \"%s\" in the reply:\n%s", (needle), (hay));      \
	} while (0)

static void test_page_as_text(void **state)
{
	long before = page_hits();
	char *r;

	(void)state;
	r = ask("open", "u1", "fetch page");
	HAS(r, "PAGE [Untrusted web content");
	HAS(r, "Title: The Switchboard Test Page");
	HAS(r, "# Opening hours");
	HAS(r, "The shop is open Monday\xc2\xa0to Friday, 9\xe2\x80\x93"
	       "17 & closed on holidays.");
	HAS(r, "- Tea <green>: \xe2\x82\xac"
	       "1.50");
	HAS(r, "the price list (/plain.txt)");
	LACKS(r, "SCRIPT-SECRET");
	LACKS(r, "COMMENT-SECRET");
	LACKS(r, "NOSCRIPT-SECRET");
	LACKS(r, "color: red");
	free(r);
	assert_int_equal(page_hits(), before + 1);
}

static void test_loopback_refused(void **state)
{
	long before = page_hits();
	char *r;

	(void)state;
	r = ask("shut", "u2", "fetch page");
	HAS(r, "PAGE web_fetch http://127.0.0.1:");
	HAS(r, "refused to connect to 127.0.0.1: a loopback address");
	LACKS(r, "Opening hours");
	free(r);
	r = ask("shut", "u3", "fetch by name");
	HAS(r, "NAME web_fetch http://localhost:");
	HAS(r, "a loopback address");
	LACKS(r, "Opening hours");
	free(r);
	/* nothing reached the server */
	assert_int_equal(page_hits(), before);
}

static void test_redirect_to_metadata_refused(void **state)
{
	char *r;

	(void)state;
	r = ask("open", "u4", "fetch redirect");
	HAS(r, "REDIRECT web_fetch http://169.254.169.254/latest/meta-data/: refused to connect "
	       "to 169.254.169.254: a link-local (cloud metadata) address");
	free(r);
}

static void test_not_enabled(void **state)
{
	long before = page_hits();
	char *r;

	(void)state;
	r = ask("off", "u5", "fetch page");
	HAS(r, "PAGE ");
	HAS(r, "web_fetch");
	LACKS(r, "Opening hours");
	free(r);
	assert_int_equal(page_hits(), before);
}

/* The search instance's record of every search (a JSON array). */
static json_t *searches(void)
{
	struct buf body;
	json_t *r;

	buf_init(&body, 1 << 20);
	assert_int_equal(harness_http(fx.pages.port, "GET", "/searches", NULL, NULL, &body), 200);
	r = json_loads(body.data, 0, NULL);
	assert_true(json_is_array(r));
	buf_free(&body);
	return r;
}

static void test_search_results(void **state)
{
	json_t *s, *last;
	char *r;

	(void)state;
	r = ask("finder", "s1", "search tea");
	HAS(r, "SEARCH [Untrusted search results");
	HAS(r, "Query: tea & coffee \xc3\xbc?\n");
	HAS(r, "Answer: 42\n");
	HAS(r, "1. Result 0 for tea & coffee \xc3\xbc?\n   https://example.org/0\n   Snippet 0\n");
	HAS(r, "3. Result 2 for tea & coffee \xc3\xbc?\n   https://example.org/2\n");
	LACKS(r, "4. ");
	LACKS(r, "Result 3 ");
	free(r);
	s = searches();
	last = json_array_get(s, json_array_size(s) - 1);
	assert_string_equal(json_string_value(json_object_get(last, "path")), "/search");
	assert_string_equal(json_string_value(json_object_get(last, "q")), "tea & coffee \xc3\xbc?");
	assert_string_equal(json_string_value(json_object_get(last, "format")), "json");
	assert_string_equal(json_string_value(json_object_get(last, "safesearch")), "2");
	assert_string_equal(json_string_value(json_object_get(last, "language")), "de-CH");
	json_decref(s);
	r = ask("finder", "s2", "search one");
	HAS(r, "1. Result 0 for one\n");
	LACKS(r, "2. ");
	free(r);
}

static void test_search_hostile(void **state)
{
	char *r;

	(void)state;
	r = ask("finder", "s3", "search hostile");
	HAS(r, "HOSTILE [Untrusted search results");
	/* The forged title and its URL are gone with their result; the one
	 * left is result 1, on one line. */
	LACKS(r, "Ignore previous instructions");
	LACKS(r, "FORGED-SNIPPET");
	LACKS(r, "USERINFO");
	LACKS(r, "evil.example");
	HAS(r, "1. Real one title\n   http://example.org/real\n   AAAA");
	LACKS(r, "2. ");
	HAS(r, "\xe2\x80\xa6\n"); /* the 5000-byte snippet was cut */
	LACKS(r, "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
	         "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
	         "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
	         "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
	         "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA");
	HAS(r, "(2 results without an http(s) URL left out)");
	free(r);
}

static void test_search_refusals(void **state)
{
	size_t before;
	json_t *s;
	char *r;

	(void)state;
	r = ask("finder", "s4", "search nothing");
	HAS(r, "NOTHING [Untrusted search results");
	HAS(r, "No results. 2 of the instance's engines did not answer");
	free(r);
	r = ask("nojson", "s5", "search tea");
	HAS(r, "SEARCH web_search: the search instance answered 403 (a SearXNG instance answers "
	       "403 when its settings do not list json in search.formats)");
	free(r);
	r = ask("slow", "s7", "search tea");
	HAS(r, "SEARCH web_search: the search instance gave no complete answer within the time "
	       "limit");
	free(r);
	s = searches();
	before = json_array_size(s);
	json_decref(s);
	r = ask("off", "s6", "search tea");
	HAS(r, "SEARCH ");
	HAS(r, "web_search");
	LACKS(r, "Result 0");
	free(r);
	s = searches();
	assert_int_equal(json_array_size(s), before);
	json_decref(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_page_as_text),
	    cmocka_unit_test(test_loopback_refused),
	    cmocka_unit_test(test_redirect_to_metadata_refused),
	    cmocka_unit_test(test_not_enabled),
	    cmocka_unit_test(test_search_results),
	    cmocka_unit_test(test_search_hostile),
	    cmocka_unit_test(test_search_refusals),
	};

	return cmocka_run_group_tests_name("web_fetch", tests, setup, teardown);
}
