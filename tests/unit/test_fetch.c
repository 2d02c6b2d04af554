/*
 * test_fetch.c - web_fetch and what it stands on: which addresses a fetch
 * may reach (gateway/core/netaddr.c), the strict URL parser and redirect
 * joins (gateway/core/url.c), the HTML reducer (agents/tools/html.c), and
 * the tool itself on a real loop and HTTP client against
 * tests/fakes/page_server.js on 127.0.0.1: allowed only through an explicit
 * allow-list, refused for loopback by address and by name, for redirects to
 * metadata and private addresses, for endless redirects, binary and
 * oversized bodies.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests/integration/harness.h"

#include <arpa/inet.h>
#include <jansson.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agents/tool.h"
#include "agents/tools/html.h"
#include "gateway/core/err.h"
#include "gateway/core/httpc.h"
#include "gateway/core/netaddr.h"
#include "gateway/core/url.h"

/* ---- netaddr ---------------------------------------------------------- */

static const char *special_of(const char *text)
{
	struct sockaddr_storage ss;

	memset(&ss, 0, sizeof ss);
	if (strchr(text, ':')) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;

		s6->sin6_family = AF_INET6;
		assert_int_equal(inet_pton(AF_INET6, text, &s6->sin6_addr), 1);
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;

		s4->sin_family = AF_INET;
		assert_int_equal(inet_pton(AF_INET, text, &s4->sin_addr), 1);
	}
	return netaddr_special((const struct sockaddr *)&ss);
}

static void test_netaddr_special(void **state)
{
	static const char *const refused[] = {
	    "127.0.0.1",
	    "127.255.255.254",
	    "0.0.0.0",
	    "10.1.2.3",
	    "172.16.0.1",
	    "172.31.255.255",
	    "192.168.1.1",
	    "169.254.169.254",
	    "100.64.0.1",
	    "224.0.0.1",
	    "255.255.255.255",
	    "192.0.2.7",
	    "::1",
	    "::",
	    "::ffff:127.0.0.1",
	    "::ffff:10.0.0.1",
	    "64:ff9b::a9fe:a9fe",
	    "2002:7f00:1::",
	    "fe80::1",
	    "fc00::1",
	    "fd00:ec2::254",
	    "ff02::1",
	    "::127.0.0.1",
	    "2001:db8::1",
	};
	static const char *const public[] = {"1.1.1.1",        "8.8.8.8",         "172.32.0.1",
	                                     "192.169.0.1",    "100.128.0.1",     "2606:4700::1111",
	                                     "::ffff:8.8.8.8", "2002:0808:0808::"};

	(void)state;
	for (size_t i = 0; i < sizeof refused / sizeof *refused; i++)
		if (!special_of(refused[i]))
			fail_msg("%s was taken for a public address", refused[i]);
	for (size_t i = 0; i < sizeof public / sizeof *public; i++)
		if (special_of(public[i]))
			fail_msg("%s was refused: %s", public[i], special_of(public[i]));
	assert_string_equal(special_of("169.254.169.254"), "link-local (cloud metadata)");
	assert_string_equal(special_of("::ffff:127.0.0.1"), "loopback");
}

static void test_netaddr_allow(void **state)
{
	char *list[] = {"127.0.0.1", "10.1.2.0/24"};
	char *bad[] = {"127.0.0.1", "10.1.2.3/24"};
	char *junk[] = {"localhost"};
	struct netaddr_policy p;
	struct sockaddr_in s4 = {.sin_family = AF_INET};
	struct sockaddr_in6 s6 = {.sin6_family = AF_INET6};
	const char *why;
	size_t at = 99;

	(void)state;
	assert_int_equal(netaddr_policy_init(&p, list, 2, NULL), SB_OK);
	inet_pton(AF_INET, "127.0.0.1", &s4.sin_addr);
	assert_true(netaddr_allowed(&p, (struct sockaddr *)&s4, &why));
	inet_pton(AF_INET, "127.0.0.2", &s4.sin_addr);
	assert_false(netaddr_allowed(&p, (struct sockaddr *)&s4, &why));
	assert_string_equal(why, "loopback");
	inet_pton(AF_INET, "10.1.2.200", &s4.sin_addr);
	assert_true(netaddr_allowed(&p, (struct sockaddr *)&s4, NULL));
	inet_pton(AF_INET, "10.1.3.1", &s4.sin_addr);
	assert_false(netaddr_allowed(&p, (struct sockaddr *)&s4, NULL));
	/* the mapped form of an allowed address is allowed, and only it */
	inet_pton(AF_INET6, "::ffff:127.0.0.1", &s6.sin6_addr);
	assert_true(netaddr_allowed(&p, (struct sockaddr *)&s6, NULL));
	inet_pton(AF_INET6, "::1", &s6.sin6_addr);
	assert_false(netaddr_allowed(&p, (struct sockaddr *)&s6, NULL));
	/* no policy: public only */
	inet_pton(AF_INET, "127.0.0.1", &s4.sin_addr);
	assert_false(netaddr_allowed(NULL, (struct sockaddr *)&s4, NULL));
	inet_pton(AF_INET, "93.184.216.34", &s4.sin_addr);
	assert_true(netaddr_allowed(NULL, (struct sockaddr *)&s4, NULL));
	/* bits past the prefix, and names, are config errors */
	assert_int_equal(netaddr_policy_init(&p, bad, 2, &at), SB_ERR_INVAL);
	assert_int_equal(at, 1);
	assert_int_equal(netaddr_policy_init(&p, junk, 1, &at), SB_ERR_INVAL);
	assert_int_equal(at, 0);
}

/* ---- url -------------------------------------------------------------- */

static void test_url_parse(void **state)
{
	static const struct {
		const char *in, *href, *host;
		int port;
	} good[] = {
	    {"http://example.com", "http://example.com/", "example.com", 80},
	    {"HTTPS://Example.COM:8443/a/b?c=d#frag", "https://example.com:8443/a/b?c=d",
	     "example.com", 8443},
	    {"http://example.com?q=1", "http://example.com/?q=1", "example.com", 80},
	    {"http://127.0.0.1:9/x", "http://127.0.0.1:9/x", "127.0.0.1", 9},
	    {"http://[::1]:8080/", "http://[::1]:8080/", "::1", 8080},
	    {"https://example.com:443/", "https://example.com/", "example.com", 443},
	    {"http://example.com./", "http://example.com./", "example.com.", 80},
	};
	static const char *const bad[] = {
	    "ftp://example.com/",
	    "file:///etc/passwd",
	    "http://user:pw@example.com/",
	    "http://example.com@evil/",
	    "http://exa mple.com/",
	    "http://example.com/a b",
	    "http://\xc3\xa9xample.com/",
	    "http://example.com\\@evil/",
	    "http://2130706433/",
	    "http://0x7f.1/",
	    "http://127.1/",
	    "http://0177.0.0.1/",
	    "http://:80/",
	    "http://example.com:0/",
	    "http://example.com:65536/",
	    "http://example.com:8x/",
	    "http://[::1/",
	    "http://[fe80::1%25eth0]/",
	    "http://-a.com/",
	    "http://a..com/",
	    "javascript:alert(1)",
	    "http:/example.com",
	    "http://exa_mple.com/",
	    "http://example.com\t/",
	};
	struct url u;
	char why[256];

	(void)state;
	for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
		if (url_parse(good[i].in, &u, why, sizeof why) != SB_OK)
			fail_msg("%s refused: %s", good[i].in, why);
		assert_string_equal(u.href, good[i].href);
		assert_string_equal(u.host, good[i].host);
		assert_int_equal(u.port, good[i].port);
	}
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		why[0] = '\0';
		if (url_parse(bad[i], &u, why, sizeof why) == SB_OK)
			fail_msg("%s accepted as %s", bad[i], u.href);
		assert_true(why[0] != '\0');
	}
}

static void test_url_join(void **state)
{
	static const struct {
		const char *ref, *out;
	} cases[] = {
	    {"/x", "http://h.example:81/x"},
	    {"y?z", "http://h.example:81/a/y?z"},
	    {"?q", "http://h.example:81/a/b?q"},
	    {"//other.example/p", "http://other.example/p"},
	    {"https://t.example/", "https://t.example/"},
	    {"http://169.254.169.254/latest", "http://169.254.169.254/latest"},
	};
	struct url base, out;
	char why[256];

	(void)state;
	assert_int_equal(url_parse("http://h.example:81/a/b?old", &base, why, sizeof why), SB_OK);
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		if (url_join(&base, cases[i].ref, &out, why, sizeof why) != SB_OK)
			fail_msg("%s: %s", cases[i].ref, why);
		assert_string_equal(out.href, cases[i].out);
	}
	assert_int_equal(url_join(&base, "gopher://x/", &out, why, sizeof why), SB_ERR_INVAL);
	assert_int_equal(url_join(&base, "file:///etc/passwd", &out, why, sizeof why),
	                 SB_ERR_INVAL);
	assert_int_equal(url_join(&base, "", &out, why, sizeof why), SB_ERR_INVAL);
}

/* ---- html ------------------------------------------------------------- */

static void test_html_reduce(void **state)
{
	const char *page =
	    "<!DOCTYPE html><html><head><title> A  &amp; B </title>"
	    "<style>p{color:red}</style><script>var s = '</p>SCRIPT';</script></head>"
	    "<body><h2>Head</h2><p>One&nbsp;two &lt;three&gt; &#x263A; &#9731; &bogus; & x</p>"
	    "<ul><li>first</li><li>second</li></ul><!-- HIDDEN --><noscript>NS</noscript>"
	    "<p>go <a href=\"https://example.com/x\">there</a> or <a href=\"javascript:x\">not</a>"
	    "</p><pre>  kept\n   as is</pre><SCRIPT type=x>UPPER</SCRIPT >end</body></html>";
	struct html_text t;

	(void)state;
	assert_int_equal(html_to_text(page, strlen(page), 10000, &t), SB_OK);
	assert_string_equal(t.title, "A & B");
	assert_null(strstr(t.text, "SCRIPT"));
	assert_null(strstr(t.text, "UPPER"));
	assert_null(strstr(t.text, "HIDDEN"));
	assert_null(strstr(t.text, "NS"));
	assert_null(strstr(t.text, "color"));
	assert_non_null(strstr(t.text,
	                       "## Head\n\nOne\xc2\xa0two <three> \xe2\x98\xba \xe2\x98\x83 "
	                       "&bogus; & x"));
	assert_non_null(strstr(t.text, "- first\n- second"));
	assert_non_null(strstr(t.text, "go there (https://example.com/x) or not"));
	assert_null(strstr(t.text, "javascript"));
	assert_non_null(strstr(t.text, "  kept\n   as is"));
	assert_non_null(strstr(t.text, "end"));
	assert_null(strstr(t.text, "\n\n\n"));
	assert_false(t.cut);
	html_text_free(&t);

	/* the bound, on a character boundary */
	assert_int_equal(html_to_text("<p>\xc3\xa9\xc3\xa9\xc3\xa9</p>", 13, 3, &t), SB_OK);
	assert_true(t.cut);
	assert_string_equal(t.text, "\xc3\xa9");
	html_text_free(&t);

	/* unclosed things end the document, never fail */
	assert_int_equal(html_to_text("a<script>never closed", 21, 100, &t), SB_OK);
	assert_string_equal(t.text, "a");
	html_text_free(&t);
	assert_int_equal(html_to_text("b<!-- open", 10, 100, &t), SB_OK);
	assert_string_equal(t.text, "b");
	html_text_free(&t);
	assert_int_equal(html_to_text("c<a href=\"x", 11, 100, &t), SB_OK);
	assert_string_equal(t.text, "c");
	html_text_free(&t);
	assert_int_equal(html_to_text("1 < 2 <", 7, 100, &t), SB_OK);
	assert_string_equal(t.text, "1 < 2 <");
	html_text_free(&t);
}

/* ---- the tool --------------------------------------------------------- */

static struct harness_peer pages;

static int pages_start(void **state)
{
	(void)state;
	return harness_peer_start(&pages, "page_server.js", NULL);
}

static int pages_stop(void **state)
{
	(void)state;
	harness_peer_stop(&pages);
	httpc_global_cleanup();
	return 0;
}

struct fetch_env {
	uv_loop_t loop;
	struct httpc *http;
	struct host host;
	struct netaddr_policy allow;
	struct tool_web web;
	struct tool_ctx ctx;
};

static struct httpc *env_http(void *ud)
{
	return ((struct fetch_env *)ud)->http;
}

static const struct httpc_options env_opts = {
    .timeout_ms = 10000,
    .max_connections = 8,
    .max_response_bytes = 8 << 20,
};

static void env_init(struct fetch_env *e, bool allow_loopback)
{
	char *nets[] = {"127.0.0.1/32"};

	memset(e, 0, sizeof *e);
	assert_int_equal(uv_loop_init(&e->loop), 0);
	assert_int_equal(httpc_new(&e->http, &e->loop, &env_opts), SB_OK);
	e->host.ctx = e;
	e->host.loop = &e->loop;
	e->host.http_client = env_http;
	assert_int_equal(netaddr_policy_init(&e->allow, nets, allow_loopback ? 1 : 0, NULL), SB_OK);
	e->web.allow = &e->allow;
	e->web.max_bytes = 64 << 10;
	e->web.timeout_ms = 3000;
	e->web.max_redirects = 3;
	e->ctx.loop = &e->loop;
	e->ctx.host = &e->host;
	e->ctx.workspace = "/nonexistent";
	e->ctx.web = &e->web;
}

static void env_free(struct fetch_env *e)
{
	httpc_close(e->http);
	uv_run(&e->loop, UV_RUN_DEFAULT);
	assert_int_equal(uv_loop_close(&e->loop), 0);
}

struct outcome {
	int calls, rc;
	char *content;
	bool is_error;
};

static void on_fetch(void *ud, int rc, char *content, bool is_error)
{
	struct outcome *o = ud;

	o->calls++;
	o->rc = rc;
	free(o->content);
	o->content = content;
	o->is_error = is_error;
}

/* Runs web_fetch(url) to its end. */
static void fetch(struct fetch_env *e, const char *url, struct outcome *o)
{
	json_t *in = json_pack("{ss}", "url", url);

	memset(o, 0, sizeof *o);
	assert_int_equal(tool_web_fetch.call(&e->ctx, in, on_fetch, o, NULL), SB_OK);
	assert_int_equal(o->calls, 0); /* never from inside call */
	while (o->calls == 0)
		uv_run(&e->loop, UV_RUN_ONCE);
	assert_int_equal(o->calls, 1);
	json_decref(in);
}

static void page_url(char *out, size_t size, const char *host, const char *path)
{
	snprintf(out, size, "http://%s:%d%s", host, pages.port, path);
}

static void test_fetch_allowed_page(void **state)
{
	struct fetch_env e;
	struct outcome o;
	char url[256];

	(void)state;
	env_init(&e, true);
	page_url(url, sizeof url, "127.0.0.1", "/page.html");
	fetch(&e, url, &o);
	assert_int_equal(o.rc, SB_OK);
	if (o.is_error)
		fail_msg("%s", o.content);
	assert_non_null(strstr(o.content, "[Untrusted web content"));
	assert_non_null(strstr(o.content, "Title: The Switchboard Test Page"));
	assert_non_null(strstr(o.content, "# Opening hours"));
	assert_non_null(strstr(o.content, "9\xe2\x80\x93"
	                                  "17 & closed"));
	assert_non_null(strstr(o.content, "the price list (/plain.txt)"));
	assert_null(strstr(o.content, "SCRIPT-SECRET"));
	assert_null(strstr(o.content, "COMMENT-SECRET"));
	assert_null(strstr(o.content, "NOSCRIPT-SECRET"));
	free(o.content);

	/* a redirect on the allowed host is followed */
	page_url(url, sizeof url, "127.0.0.1", "/redirect?to=/plain.txt");
	fetch(&e, url, &o);
	assert_false(o.is_error);
	assert_non_null(strstr(o.content, "Coffee 2 EUR"));
	assert_non_null(strstr(o.content, "/plain.txt\nStatus: 200"));
	free(o.content);
	env_free(&e);
}

static void test_fetch_refusals(void **state)
{
	struct fetch_env e;
	struct outcome o;
	char url[256];

	(void)state;
	/* without the allow-list entry: loopback by address and by name */
	env_init(&e, false);
	page_url(url, sizeof url, "127.0.0.1", "/page.html");
	fetch(&e, url, &o);
	assert_true(o.is_error);
	assert_non_null(strstr(o.content, "refused to connect to 127.0.0.1: a loopback address"));
	free(o.content);
	page_url(url, sizeof url, "localhost", "/page.html");
	fetch(&e, url, &o);
	assert_true(o.is_error);
	assert_non_null(strstr(o.content, "loopback address"));
	free(o.content);
	env_free(&e);

	/* with it: what the page redirects to is checked again */
	env_init(&e, true);
	page_url(url, sizeof url, "127.0.0.1",
	         "/redirect?to=http://169.254.169.254/latest/meta-data/");
	fetch(&e, url, &o);
	assert_true(o.is_error);
	assert_non_null(strstr(
	    o.content, "refused to connect to 169.254.169.254: a link-local (cloud metadata)"));
	free(o.content);
	page_url(url, sizeof url, "127.0.0.1", "/redirect?to=http://10.0.0.1/");
	fetch(&e, url, &o);
	assert_true(o.is_error);
	assert_non_null(strstr(o.content, "10.0.0.1: a private address"));
	free(o.content);
	page_url(url, sizeof url, "127.0.0.1", "/redirect?to=http://[::1]/");
	fetch(&e, url, &o);
	assert_true(o.is_error);
	assert_non_null(strstr(o.content, "::1: a loopback address"));
	free(o.content);
	page_url(url, sizeof url, "127.0.0.1", "/redirect?to=file:///etc/passwd");
	fetch(&e, url, &o);
	assert_true(o.is_error);
	assert_non_null(strstr(o.content, "a redirect to a URL that is refused"));
	free(o.content);
	page_url(url, sizeof url, "127.0.0.1", "/loop/0");
	fetch(&e, url, &o);
	assert_true(o.is_error);
	assert_non_null(strstr(o.content, "more than 3 redirects"));
	free(o.content);
	page_url(url, sizeof url, "127.0.0.1", "/binary");
	fetch(&e, url, &o);
	assert_true(o.is_error);
	assert_non_null(strstr(o.content, "image/png"));
	free(o.content);
	page_url(url, sizeof url, "127.0.0.1", "/big/100000");
	fetch(&e, url, &o);
	assert_true(o.is_error);
	assert_non_null(strstr(o.content, "larger than 65536 bytes"));
	free(o.content);
	page_url(url, sizeof url, "127.0.0.1", "/missing");
	fetch(&e, url, &o);
	assert_true(o.is_error);
	assert_non_null(strstr(o.content, "The server answered 404.\n# Not here"));
	free(o.content);
	e.web.timeout_ms = 300;
	page_url(url, sizeof url, "127.0.0.1", "/slow");
	fetch(&e, url, &o);
	assert_true(o.is_error);
	assert_non_null(strstr(o.content, "within the time limit"));
	free(o.content);
	/* a URL the parser refuses never reaches the client */
	fetch(&e, "http://user@127.0.0.1/", &o);
	assert_true(o.is_error);
	assert_non_null(strstr(o.content, "user info"));
	free(o.content);
	/* not enabled for the agent */
	e.ctx.web = NULL;
	page_url(url, sizeof url, "127.0.0.1", "/page.html");
	fetch(&e, url, &o);
	assert_true(o.is_error);
	assert_non_null(strstr(o.content, "not enabled"));
	free(o.content);
	env_free(&e);
}

static void test_fetch_cancel(void **state)
{
	struct fetch_env e;
	struct outcome o = {0};
	struct tool_run *run = NULL;
	char url[256];
	json_t *in;

	(void)state;
	env_init(&e, true);
	page_url(url, sizeof url, "127.0.0.1", "/slow");
	in = json_pack("{ss}", "url", url);
	assert_int_equal(tool_web_fetch.call(&e.ctx, in, on_fetch, &o, &run), SB_OK);
	assert_non_null(run);
	uv_run(&e.loop, UV_RUN_NOWAIT);
	run->cancel(run);
	assert_int_equal(o.calls, 1);
	assert_int_equal(o.rc, SB_ERR_ABORTED);
	free(o.content);
	json_decref(in);
	env_free(&e);
}

int main(void)
{
	const struct CMUnitTest pure[] = {
	    cmocka_unit_test(test_netaddr_special), cmocka_unit_test(test_netaddr_allow),
	    cmocka_unit_test(test_url_parse),       cmocka_unit_test(test_url_join),
	    cmocka_unit_test(test_html_reduce),
	};
	const struct CMUnitTest tool[] = {
	    cmocka_unit_test(test_fetch_allowed_page),
	    cmocka_unit_test(test_fetch_refusals),
	    cmocka_unit_test(test_fetch_cancel),
	};
	int failed = cmocka_run_group_tests_name("fetch_pure", pure, NULL, NULL);

	return failed + cmocka_run_group_tests_name("fetch_tool", tool, pages_start, pages_stop);
}
