/*
 * test_web_fetch.c - web_fetch end to end: the real daemon, a scripted
 * model that calls web_fetch and answers with what the tool gave it
 * ({{tool_result}}), and a page server on 127.0.0.1
 * (tests/fakes/page_server.js). The user's side is the OpenAI-compatible
 * endpoint's reply.
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
	char path[700], script[4096];
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
	         "  - text: \"other\"\n",
	         p, p, p);
	snprintf(path, sizeof path, "%s/script.yaml", fx.home);
	if (harness_write_file(path, script) != 0)
		return -1;
	snprintf(path, sizeof path, "%s/switchboard.yaml", fx.home);
	if (harness_write_file(path,
	                       "providers:\n"
	                       "  - {id: s, api: scripted, script: script.yaml}\n"
	                       "agents:\n"
	                       "  - id: open\n"
	                       "    default: true\n"
	                       "    model: s/x\n"
	                       "    web: {fetch: true, allow: [\"127.0.0.1\"], timeout: 10s}\n"
	                       "  - {id: shut, model: s/x, web: {fetch: true}}\n"
	                       "  - {id: off, model: s/x}\n"
	                       "openai_api: {enabled: true, sync_timeout: 30s}\n") != 0)
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

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_page_as_text),
	    cmocka_unit_test(test_loopback_refused),
	    cmocka_unit_test(test_redirect_to_metadata_refused),
	    cmocka_unit_test(test_not_enabled),
	};

	return cmocka_run_group_tests_name("web_fetch", tests, setup, teardown);
}
