/*
 * test_httpc.c - the shared HTTP client against tests/fakes/http_fake.js,
 * on a real libuv loop.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests/integration/harness.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gateway/core/buf.h"
#include "gateway/core/err.h"
#include "gateway/core/httpc.h"
#include "gateway/core/num.h"

#define WATCHDOG_MS 15000

/* cmocka's asserts longjmp; from inside a libuv or curl callback that would
 * leave both in a broken state. Callbacks record their first failure here
 * instead and the test body asserts it after the loop returns. */
static char check_failure[512];

#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond) && !check_failure[0])                                                  \
			snprintf(check_failure, sizeof(check_failure), "%s:%d: %s", __FILE__,      \
			         __LINE__, #cond);                                                 \
	} while (0)

static void assert_no_check_failure(void)
{
	if (check_failure[0])
		fail_msg("in a callback: %s", check_failure);
}
/* The fake peer process (tests/fakes/http_fake.js), shared by the group. */
static struct harness_peer fake;

static int fake_start(void **state)
{
	(void)state;
	return harness_peer_start(&fake, "http_fake.js", NULL);
}

static int fake_stop(void **state)
{
	(void)state;
	harness_peer_stop(&fake);
	httpc_global_cleanup();
	return 0;
}

/* ---- per-test loop and client ----------------------------------------- */

struct tctx {
	uv_loop_t loop;
	struct httpc *c;
	uv_timer_t timer; /* for tests that act later */
	int timer_used;
};

static const struct httpc_options default_opts = {
    .timeout_ms = 5000,
    .connect_timeout_ms = 2000,
    .max_connections = 8,
    .max_host_connections = 0,
    .max_response_bytes = 1024 * 1024,
};

static int setup(void **state)
{
	struct tctx *t = calloc(1, sizeof(*t));
	check_failure[0] = '\0';
	if (!t || uv_loop_init(&t->loop) != 0)
		return -1;
	if (httpc_new(&t->c, &t->loop, &default_opts) != SB_OK)
		return -1;
	*state = t;
	return 0;
}

static int teardown(void **state)
{
	struct tctx *t = *state;
	int rc;

	httpc_close(t->c);
	if (t->timer_used)
		uv_close((uv_handle_t *)&t->timer, NULL);
	uv_run(&t->loop, UV_RUN_DEFAULT);
	rc = uv_loop_close(&t->loop);
	free(t);
	return rc == 0 ? 0 : -1;
}

static void url_of(char *out, size_t size, const char *path)
{
	int n = snprintf(out, size, "http://127.0.0.1:%d%s", fake.port, path);

	CHECK(n > 0 && (size_t)n < size);
}

/* ---- results ---------------------------------------------------------- */

struct result {
	int calls;
	int rc;
	long status;
	struct buf body;
	char error[256];
	char ctype[128];
	int64_t retry_after;
	int names_lower;
	int has_link;
	char x_final[16];
	double total_s;
	/* streaming */
	struct buf stream;
	int chunks;
	int stop_at_chunk; /* on_data returns 1 at this chunk (1-based); 0 = never */
	int calls_at_data; /* calls when on_data last returned */
	/* hooks: run from done / on_data */
	void (*done_hook)(struct result *r);
	void (*data_hook)(struct result *r);
	struct tctx *t;
	struct httpc_call *call;
	struct result *other;
	struct result *other2;
};

static void result_init(struct result *r, struct tctx *t)
{
	memset(r, 0, sizeof(*r));
	buf_init(&r->body, 4 * 1024 * 1024);
	buf_init(&r->stream, 4 * 1024 * 1024);
	r->t = t;
	r->rc = -1;
	r->retry_after = -2;
}

static void result_free(struct result *r)
{
	buf_free(&r->body);
	buf_free(&r->stream);
}

static void on_done(void *ud, int rc, const struct httpc_response *resp)
{
	struct result *r = ud;
	const char *ct;
	size_t i;

	r->calls++;
	r->rc = rc;
	r->status = resp->status;
	r->total_s = resp->total_s;
	buf_reset(&r->body);
	if (resp->body.len)
		CHECK(buf_append(&r->body, resp->body.data, resp->body.len) == SB_OK);
	r->error[0] = '\0';
	if (resp->error)
		snprintf(r->error, sizeof(r->error), "%s", resp->error);
	CHECK(rc == SB_OK ? resp->error == NULL : resp->error != NULL);
	ct = httpc_response_header(resp, "Content-Type");
	r->ctype[0] = '\0';
	if (ct)
		snprintf(r->ctype, sizeof(r->ctype), "%s", ct);
	r->retry_after = httpc_retry_after_ms(resp);
	r->has_link = httpc_response_header(resp, "link") != NULL;
	ct = httpc_response_header(resp, "x-final");
	r->x_final[0] = '\0';
	if (ct)
		snprintf(r->x_final, sizeof(r->x_final), "%s", ct);
	r->names_lower = 1;
	for (i = 0; i < resp->n_headers; i++)
		for (const char *p = resp->headers[i].name; *p; p++)
			if (*p >= 'A' && *p <= 'Z')
				r->names_lower = 0;
	r->call = NULL;
	if (r->done_hook)
		r->done_hook(r);
}

static int on_data(void *ud, const char *data, size_t len)
{
	struct result *r = ud;
	CHECK(len > 0);
	CHECK(buf_append(&r->stream, data, len) == SB_OK);
	r->chunks++;
	if (r->data_hook)
		r->data_hook(r);
	r->calls_at_data = r->calls;
	return r->stop_at_chunk && r->chunks >= r->stop_at_chunk;
}

static void run_until(struct tctx *t, const int *counter, int target)
{
	uint64_t start;

	uv_update_time(&t->loop);
	start = uv_now(&t->loop);
	while (*counter < target) {
		uv_run(&t->loop, UV_RUN_ONCE);
		assert_no_check_failure();
		if (uv_now(&t->loop) - start > WATCHDOG_MS)
			fail_msg("timed out waiting for %d completions (have %d)", target,
			         *counter);
	}
	assert_no_check_failure();
}

static int start(struct tctx *t, struct result *r, const char *path, const char *method,
                 const char *body, const char *const *headers)
{
	char url[256];
	struct httpc_request req = {0};

	url_of(url, sizeof(url), path);
	req.url = url;
	req.method = method;
	req.headers = headers;
	if (body) {
		req.body = body;
		req.body_len = strlen(body);
	}
	return httpc_request(t->c, &req, on_done, r, &r->call);
}

static void get(struct tctx *t, struct result *r, const char *path)
{
	assert_int_equal(start(t, r, path, NULL, NULL, NULL), SB_OK);
	run_until(t, &r->calls, 1);
}

/* ---- basic requests --------------------------------------------------- */

static void test_get_hello(void **state)
{
	struct tctx *t = *state;
	struct result r;

	result_init(&r, t);
	get(t, &r, "/hello");
	assert_int_equal(r.calls, 1);
	assert_int_equal(r.rc, SB_OK);
	assert_int_equal(r.status, 200);
	assert_int_equal(r.body.len, 5);
	assert_string_equal(r.body.data, "hello");
	assert_string_equal(r.ctype, "text/plain");
	assert_true(r.names_lower);
	assert_int_equal(r.retry_after, -1);
	assert_true(r.total_s > 0);
	assert_int_equal(httpc_in_flight(t->c), 0);
	result_free(&r);
}

static json_t *parse_echo(const struct result *r)
{
	json_error_t err;
	json_t *j = json_loadb(r->body.data, r->body.len, 0, &err);

	assert_non_null(j);
	return j;
}

static void test_post_echo(void **state)
{
	struct tctx *t = *state;
	const char *hdrs[] = {"Content-Type: application/json", "X-Test-Header: a b  c", NULL};
	const char *body = "{\"text\":\"h\\u00e9llo \\u2603\",\"n\":[1,2,3]}";
	struct result r;
	json_t *j, *h;

	result_init(&r, t);
	assert_int_equal(start(t, &r, "/echo", NULL, body, hdrs), SB_OK);
	assert_int_equal(httpc_in_flight(t->c), 1);
	run_until(t, &r.calls, 1);
	assert_int_equal(r.rc, SB_OK);
	assert_int_equal(r.status, 200);
	j = parse_echo(&r);
	h = json_object_get(j, "headers");
	assert_string_equal(json_string_value(json_object_get(j, "method")), "POST");
	assert_string_equal(json_string_value(json_object_get(j, "body")), body);
	assert_string_equal(json_string_value(json_object_get(h, "x-test-header")), "a b  c");
	assert_string_equal(json_string_value(json_object_get(h, "content-type")),
	                    "application/json");
	assert_string_equal(json_string_value(json_object_get(h, "content-length")), "40");
	assert_null(json_object_get(h, "expect"));
	assert_string_equal(json_string_value(json_object_get(h, "user-agent")),
	                    "switchboard/" SB_VERSION);
	json_decref(j);
	result_free(&r);
}

static void test_put_and_delete(void **state)
{
	struct tctx *t = *state;
	struct result r;
	json_t *j;

	result_init(&r, t);
	assert_int_equal(start(t, &r, "/echo", "PUT", "put-body", NULL), SB_OK);
	run_until(t, &r.calls, 1);
	assert_int_equal(r.rc, SB_OK);
	j = parse_echo(&r);
	assert_string_equal(json_string_value(json_object_get(j, "method")), "PUT");
	assert_string_equal(json_string_value(json_object_get(j, "body")), "put-body");
	json_decref(j);

	r.calls = 0;
	assert_int_equal(start(t, &r, "/echo", "DELETE", NULL, NULL), SB_OK);
	run_until(t, &r.calls, 1);
	assert_int_equal(r.rc, SB_OK);
	j = parse_echo(&r);
	assert_string_equal(json_string_value(json_object_get(j, "method")), "DELETE");
	assert_string_equal(json_string_value(json_object_get(j, "body")), "");
	json_decref(j);

	/* A body the caller frees right after the call still arrives. */
	{
		char *tmp = strdup("transient");
		struct httpc_request req = {.method = "PATCH", .body = tmp, .body_len = 9};
		char url[256];

		assert_non_null(tmp);
		url_of(url, sizeof(url), "/echo");
		req.url = url;
		r.calls = 0;
		assert_int_equal(httpc_request(t->c, &req, on_done, &r, NULL), SB_OK);
		memset(tmp, '!', 9);
		free(tmp);
		memset(url, 0, sizeof(url));
		run_until(t, &r.calls, 1);
		j = parse_echo(&r);
		assert_string_equal(json_string_value(json_object_get(j, "method")), "PATCH");
		assert_string_equal(json_string_value(json_object_get(j, "body")), "transient");
		json_decref(j);
	}
	result_free(&r);
}

static void test_large_post_no_expect(void **state)
{
	struct tctx *t = *state;
	size_t n = 1536 * 1024;
	char *big = malloc(n);
	struct httpc_request req = {.body = big, .body_len = n, .max_response_bytes = 4 << 20};
	char url[256];
	struct result r;
	json_t *j;
	const char *echoed;

	assert_non_null(big);
	memset(big, 'a', n);
	result_init(&r, t);
	url_of(url, sizeof(url), "/echo");
	req.url = url;
	assert_int_equal(httpc_request(t->c, &req, on_done, &r, NULL), SB_OK);
	free(big);
	run_until(t, &r.calls, 1);
	assert_int_equal(r.rc, SB_OK);
	j = parse_echo(&r);
	/* curl would ask for 100-continue above 1 MiB unless told not to. */
	assert_null(json_object_get(json_object_get(j, "headers"), "expect"));
	echoed = json_string_value(json_object_get(j, "body"));
	assert_non_null(echoed);
	assert_int_equal(strlen(echoed), n);
	assert_int_equal(strspn(echoed, "a"), n);
	json_decref(j);
	result_free(&r);
}

static void test_headers_of_final_response(void **state)
{
	struct tctx *t = *state;
	struct result r;

	result_init(&r, t);
	get(t, &r, "/early-hints");
	assert_int_equal(r.rc, SB_OK);
	assert_int_equal(r.status, 200);
	assert_string_equal(r.body.data, "final");
	/* The 103's Link header is gone, the 200's headers are there. */
	assert_int_equal(r.has_link, 0);
	assert_string_equal(r.x_final, "yes");
	assert_true(r.names_lower);
	result_free(&r);
}

static void test_status_404(void **state)
{
	struct tctx *t = *state;
	struct result r;

	result_init(&r, t);
	get(t, &r, "/status/404");
	assert_int_equal(r.rc, SB_OK);
	assert_int_equal(r.status, 404);
	assert_string_equal(r.body.data, "status 404");
	assert_string_equal(r.error, "");
	result_free(&r);
}

static void test_invalid_args(void **state)
{
	struct tctx *t = *state;
	struct result r;
	struct httpc *c2 = NULL;
	struct httpc_options bad = default_opts;
	const char *crlf[] = {"X-A: b\r\nX-Injected: 1", NULL};
	struct httpc_request req = {0};

	result_init(&r, t);
	assert_int_equal(httpc_request(t->c, &req, on_done, &r, NULL), SB_ERR_INVAL);
	req.url = "http://127.0.0.1:1/";
	assert_int_equal(httpc_request(t->c, &req, NULL, &r, NULL), SB_ERR_INVAL);
	req.method = "GE T";
	assert_int_equal(httpc_request(t->c, &req, on_done, &r, NULL), SB_ERR_INVAL);
	req.method = "get";
	assert_int_equal(httpc_request(t->c, &req, on_done, &r, NULL), SB_ERR_INVAL);
	req.method = NULL;
	req.body_len = 3;
	assert_int_equal(httpc_request(t->c, &req, on_done, &r, NULL), SB_ERR_INVAL);
	req.body_len = 0;
	req.headers = crlf;
	assert_int_equal(httpc_request(t->c, &req, on_done, &r, NULL), SB_ERR_INVAL);
	assert_int_equal(httpc_in_flight(t->c), 0);

	bad.timeout_ms = 0;
	assert_int_equal(httpc_new(&c2, &t->loop, &bad), SB_ERR_INVAL);
	bad = default_opts;
	bad.max_response_bytes = 0;
	assert_int_equal(httpc_new(&c2, &t->loop, &bad), SB_ERR_INVAL);
	bad = default_opts;
	bad.max_connections = 0;
	assert_int_equal(httpc_new(&c2, &t->loop, &bad), SB_ERR_INVAL);
	assert_null(c2);
	httpc_close(NULL);
	httpc_cancel(NULL);
	assert_int_equal(httpc_in_flight(NULL), 0);

	/* Synchronous failures never call done, even after the loop runs. */
	uv_run(&t->loop, UV_RUN_NOWAIT);
	assert_int_equal(r.calls, 0);
	result_free(&r);
}

/* ---- failures --------------------------------------------------------- */

static void test_timeout(void **state)
{
	struct tctx *t = *state;
	struct result r;
	struct httpc_request req = {.timeout_ms = 200};
	char url[256];
	uint64_t t0, ms;

	result_init(&r, t);
	url_of(url, sizeof(url), "/slow/2000");
	req.url = url;
	t0 = uv_hrtime();
	assert_int_equal(httpc_request(t->c, &req, on_done, &r, NULL), SB_OK);
	run_until(t, &r.calls, 1);
	ms = (uv_hrtime() - t0) / 1000000;
	assert_int_equal(r.rc, SB_ERR_TIMEOUT);
	assert_true(r.error[0] != '\0');
	assert_true(ms >= 150);
	assert_true(ms < 1500);
	result_free(&r);
}

static void test_body_cap(void **state)
{
	struct tctx *t = *state;
	struct result r;
	struct httpc_request req = {.max_response_bytes = 1000};
	char url[256];

	result_init(&r, t);
	req.url = url;

	/* Content-Length above the cap. */
	url_of(url, sizeof(url), "/big/100000");
	assert_int_equal(httpc_request(t->c, &req, on_done, &r, NULL), SB_OK);
	run_until(t, &r.calls, 1);
	assert_int_equal(r.rc, SB_ERR_TOOBIG);
	assert_int_equal(r.body.len, 0);

	/* Exactly at the cap is fine. */
	url_of(url, sizeof(url), "/big/1000");
	r.calls = 0;
	assert_int_equal(httpc_request(t->c, &req, on_done, &r, NULL), SB_OK);
	run_until(t, &r.calls, 1);
	assert_int_equal(r.rc, SB_OK);
	assert_int_equal(r.body.len, 1000);
	assert_int_equal(r.body.data[0], 'x');
	assert_int_equal(r.body.data[999], 'x');

	/* Chunked, no length known up front: the buffer's cap stops it. */
	url_of(url, sizeof(url), "/stream");
	req.max_response_bytes = 20;
	r.calls = 0;
	assert_int_equal(httpc_request(t->c, &req, on_done, &r, NULL), SB_OK);
	run_until(t, &r.calls, 1);
	assert_int_equal(r.rc, SB_ERR_TOOBIG);

	/* The cap also bounds what is streamed. */
	req.on_data = on_data;
	r.calls = 0;
	assert_int_equal(httpc_request(t->c, &req, on_done, &r, NULL), SB_OK);
	run_until(t, &r.calls, 1);
	assert_int_equal(r.rc, SB_ERR_TOOBIG);
	assert_true(r.stream.len <= 20);
	assert_int_equal(r.calls, 1);
	result_free(&r);
}

static void test_refused(void **state)
{
	struct tctx *t = *state;
	struct result r;
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t len = sizeof(sa);
	char path[64];
	struct httpc_request req = {0};
	int fd;

	/* A bound socket that never listens: its port refuses connections and
	 * nobody else can take it meanwhile. */
	fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(fd >= 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
	snprintf(path, sizeof(path), "http://127.0.0.1:%d/hello", ntohs(sa.sin_port));

	result_init(&r, t);
	req.url = path;
	assert_int_equal(httpc_request(t->c, &req, on_done, &r, NULL), SB_OK);
	run_until(t, &r.calls, 1);
	close(fd);
	assert_int_equal(r.rc, SB_ERR_HTTP);
	assert_int_equal(r.status, 0);
	assert_true(strlen(r.error) > 0);
	result_free(&r);

	/* Only http and https are allowed. */
	result_init(&r, t);
	req.url = "file:///etc/passwd";
	assert_int_equal(httpc_request(t->c, &req, on_done, &r, NULL), SB_OK);
	run_until(t, &r.calls, 1);
	assert_int_equal(r.rc, SB_ERR_HTTP);
	assert_int_equal(r.body.len, 0);
	result_free(&r);
}

static void test_reset(void **state)
{
	struct tctx *t = *state;
	struct result r;

	result_init(&r, t);
	get(t, &r, "/reset");
	assert_int_equal(r.rc, SB_ERR_HTTP);
	assert_int_equal(r.status, 200);
	assert_true(strlen(r.error) > 0);
	result_free(&r);
}

/* ---- streaming -------------------------------------------------------- */

static const char stream_all[] = "data: 1\n\ndata: 2\n\ndata: 3\n\ndata: 4\n\ndata: 5\n\n"
                                 "data: [DONE]\n\n";

static void test_stream(void **state)
{
	struct tctx *t = *state;
	struct result r;
	struct httpc_request req = {.on_data = on_data};
	char url[256];

	result_init(&r, t);
	url_of(url, sizeof(url), "/stream");
	req.url = url;
	assert_int_equal(httpc_request(t->c, &req, on_done, &r, NULL), SB_OK);
	run_until(t, &r.calls, 1);
	assert_int_equal(r.rc, SB_OK);
	assert_int_equal(r.status, 200);
	assert_string_equal(r.ctype, "text/event-stream");
	/* Sent 30 ms apart, so it arrived in pieces, in order. */
	assert_true(r.chunks >= 3);
	assert_int_equal(r.stream.len, strlen(stream_all));
	assert_memory_equal(r.stream.data, stream_all, strlen(stream_all));
	assert_int_equal(r.body.len, 0);
	result_free(&r);
}

static void test_stream_stop(void **state)
{
	struct tctx *t = *state;
	struct result r;
	struct httpc_request req = {.on_data = on_data};
	char url[256];

	result_init(&r, t);
	r.stop_at_chunk = 2;
	url_of(url, sizeof(url), "/stream");
	req.url = url;
	assert_int_equal(httpc_request(t->c, &req, on_done, &r, NULL), SB_OK);
	run_until(t, &r.calls, 1);
	assert_int_equal(r.rc, SB_ERR_ABORTED);
	assert_int_equal(r.chunks, 2);
	assert_true(r.stream.len < strlen(stream_all));
	assert_memory_equal(r.stream.data, stream_all, r.stream.len);

	/* Nothing more arrives later. */
	{
		struct result r2;

		result_init(&r2, t);
		get(t, &r2, "/slow/300");
		assert_int_equal(r2.rc, SB_OK);
		result_free(&r2);
	}
	assert_int_equal(r.calls, 1);
	assert_int_equal(r.chunks, 2);
	result_free(&r);
}

/* ---- Retry-After ------------------------------------------------------ */

static void test_retry_after_delta(void **state)
{
	struct tctx *t = *state;
	struct result r;

	result_init(&r, t);
	get(t, &r, "/retry-after/7");
	assert_int_equal(r.rc, SB_OK);
	assert_int_equal(r.status, 429);
	assert_int_equal(r.retry_after, 7000);
	result_free(&r);
}

static int64_t retry_after_of(const char *value)
{
	char name[] = "retry-after";
	char val[128];
	struct httpc_header h = {.name = name, .value = val};
	struct httpc_response resp = {.headers = &h, .n_headers = 1};

	snprintf(val, sizeof(val), "%s", value);
	return httpc_retry_after_ms(&resp);
}

static void http_date(char *out, size_t size, time_t when)
{
	struct tm tm;

	assert_non_null(gmtime_r(&when, &tm));
	assert_true(strftime(out, size, "%a, %d %b %Y %H:%M:%S GMT", &tm) > 0);
}

static void test_retry_after_parse(void **state)
{
	char date[64];
	int64_t ms;
	struct httpc_response empty = {0};

	http_date(date, sizeof(date), time(NULL) + 30);
	ms = retry_after_of(date);
	assert_true(ms > 28000 && ms <= 30000);

	http_date(date, sizeof(date), time(NULL) - 3600);
	assert_int_equal(retry_after_of(date), 0);

	assert_int_equal(retry_after_of("120"), 120000);
	assert_int_equal(retry_after_of("0"), 0);
	assert_int_equal(retry_after_of("-5"), -1);
	assert_int_equal(retry_after_of("soon"), -1);
	assert_int_equal(retry_after_of("12abc"), -1);
	assert_int_equal(retry_after_of(""), -1);
	assert_int_equal(retry_after_of("99999999999999999999999"), 365LL * 24 * 3600 * 1000);
	assert_int_equal(httpc_retry_after_ms(&empty), -1);
	assert_int_equal(httpc_retry_after_ms(NULL), -1);
}

/* ---- concurrency ------------------------------------------------------ */

static int64_t stats_field(struct tctx *t, const char *path, const char *field)
{
	struct result r;
	json_t *j;
	int64_t v;

	result_init(&r, t);
	get(t, &r, path);
	assert_int_equal(r.rc, SB_OK);
	j = parse_echo(&r);
	v = json_integer_value(json_object_get(j, field));
	json_decref(j);
	result_free(&r);
	return v;
}

#define N_CONC 50

static void test_concurrent(void **state)
{
	struct tctx *t = *state;
	struct httpc_options opts = default_opts;
	struct result *rs = calloc(N_CONC, sizeof(*rs));
	char bodies[N_CONC][16];
	int done_count = 0, i;
	int64_t base, peak;
	uint64_t t0;
	assert_non_null(rs);
	/* A client limited to 4 connections. */
	httpc_close(t->c);
	opts.max_connections = 4;
	assert_int_equal(httpc_new(&t->c, &t->loop, &opts), SB_OK);

	base = stats_field(t, "/stats/reset", "inflight");
	for (i = 0; i < N_CONC; i++) {
		result_init(&rs[i], t);
		snprintf(bodies[i], sizeof(bodies[i]), "req-%d", i);
		assert_int_equal(start(t, &rs[i], "/echo?delay=40", "POST", bodies[i], NULL),
		                 SB_OK);
	}
	assert_int_equal(httpc_in_flight(t->c), N_CONC);
	uv_update_time(&t->loop);
	t0 = uv_now(&t->loop);
	while (done_count < N_CONC) {
		uv_run(&t->loop, UV_RUN_ONCE);
		assert_no_check_failure();
		assert_true(uv_now(&t->loop) - t0 < WATCHDOG_MS);
		done_count = 0;
		for (i = 0; i < N_CONC; i++)
			done_count += rs[i].calls;
	}
	for (i = 0; i < N_CONC; i++) {
		json_t *j;

		assert_int_equal(rs[i].calls, 1);
		assert_int_equal(rs[i].rc, SB_OK);
		assert_int_equal(rs[i].status, 200);
		j = parse_echo(&rs[i]);
		assert_string_equal(json_string_value(json_object_get(j, "body")), bodies[i]);
		json_decref(j);
		result_free(&rs[i]);
	}
	assert_int_equal(httpc_in_flight(t->c), 0);
	peak = stats_field(t, "/stats", "peak") - base;
	/* The connection cap held, and requests did overlap. */
	assert_true(peak <= 4);
	assert_true(peak >= 2);
	free(rs);
}

/* ---- cancel ----------------------------------------------------------- */

static void cancel_timer_cb(uv_timer_t *tm)
{
	struct result *r = tm->data;
	struct httpc_call *call = r->call;
	CHECK(call != NULL);
	CHECK(r->calls == 0);
	httpc_cancel(call);
	/* done ran before httpc_cancel returned. */ CHECK(r->calls == 1);
	CHECK(r->rc == SB_ERR_ABORTED);
}

static void test_cancel(void **state)
{
	struct tctx *t = *state;
	struct result r, r2;

	result_init(&r, t);
	assert_int_equal(start(t, &r, "/slow/2000", NULL, NULL, NULL), SB_OK);
	assert_int_equal(uv_timer_init(&t->loop, &t->timer), 0);
	t->timer_used = 1;
	t->timer.data = &r;
	assert_int_equal(uv_timer_start(&t->timer, cancel_timer_cb, 100, 0), 0);
	run_until(t, &r.calls, 1);
	assert_int_equal(httpc_in_flight(t->c), 0);

	/* The client still works and the cancelled call never completes again. */
	result_init(&r2, t);
	get(t, &r2, "/hello");
	assert_int_equal(r2.rc, SB_OK);
	assert_string_equal(r2.body.data, "hello");
	assert_int_equal(r.calls, 1);
	assert_int_equal(r.rc, SB_ERR_ABORTED);
	result_free(&r2);
	result_free(&r);
}

static void cancel_self_hook(struct result *r)
{
	if (r->chunks == 1) {
		httpc_cancel(r->call);
		CHECK(r->calls == 1);
	}
}

static void cancel_other_hook(struct result *r)
{
	httpc_cancel(r->other->call);
	CHECK(r->other->calls == 1);
}

static void test_cancel_from_callbacks(void **state)
{
	struct tctx *t = *state;
	struct result a, b, c;
	struct httpc_request req = {.on_data = on_data};
	char url[256];

	/* on_data cancels its own request. */
	result_init(&a, t);
	a.data_hook = cancel_self_hook;
	url_of(url, sizeof(url), "/stream");
	req.url = url;
	assert_int_equal(httpc_request(t->c, &req, on_done, &a, &a.call), SB_OK);
	run_until(t, &a.calls, 1);
	assert_int_equal(a.rc, SB_ERR_ABORTED);

	/* A done callback cancels another request in flight. */
	result_init(&b, t);
	result_init(&c, t);
	b.done_hook = cancel_other_hook;
	b.other = &c;
	assert_int_equal(start(t, &c, "/slow/2000", NULL, NULL, NULL), SB_OK);
	assert_int_equal(start(t, &b, "/hello", NULL, NULL, NULL), SB_OK);
	run_until(t, &b.calls, 1);
	assert_int_equal(b.rc, SB_OK);
	assert_int_equal(c.calls, 1);
	assert_int_equal(c.rc, SB_ERR_ABORTED);
	assert_int_equal(httpc_in_flight(t->c), 0);

	/* Let the loop turn a few times: still exactly once each. */
	{
		struct result d;

		result_init(&d, t);
		get(t, &d, "/slow/200");
		result_free(&d);
	}
	assert_int_equal(a.calls, 1);
	assert_int_equal(a.chunks, 1);
	assert_int_equal(c.calls, 1);
	result_free(&a);
	result_free(&b);
	result_free(&c);
}

/* ---- requests started from callbacks ---------------------------------- */

static void chain_hook(struct result *r)
{
	/* Started from inside done: must work and not complete re-entrantly. */ CHECK(
	    start(r->t, r->other, "/hello", NULL, NULL, NULL) == SB_OK);
	CHECK(r->other->calls == 0);
}

static void start_from_data_hook(struct result *r)
{
	if (r->chunks == 1) {
		CHECK(start(r->t, r->other, "/echo", "POST", "from-data", NULL) == SB_OK);
		CHECK(r->other->calls == 0);
	}
}

static void test_request_from_callbacks(void **state)
{
	struct tctx *t = *state;
	struct result a, b, s, e;
	struct httpc_request req = {.on_data = on_data};
	char url[256];
	json_t *j;

	result_init(&a, t);
	result_init(&b, t);
	a.done_hook = chain_hook;
	a.other = &b;
	get(t, &a, "/status/201");
	assert_int_equal(a.status, 201);
	run_until(t, &b.calls, 1);
	assert_int_equal(b.rc, SB_OK);
	assert_string_equal(b.body.data, "hello");
	assert_int_equal(a.calls, 1);

	/* From on_data, while curl itself is on the stack. */
	result_init(&s, t);
	result_init(&e, t);
	s.data_hook = start_from_data_hook;
	s.other = &e;
	url_of(url, sizeof(url), "/stream");
	req.url = url;
	assert_int_equal(httpc_request(t->c, &req, on_done, &s, NULL), SB_OK);
	run_until(t, &s.calls, 1);
	run_until(t, &e.calls, 1);
	assert_int_equal(s.rc, SB_OK);
	assert_memory_equal(s.stream.data, stream_all, strlen(stream_all));
	assert_int_equal(e.rc, SB_OK);
	j = parse_echo(&e);
	assert_string_equal(json_string_value(json_object_get(j, "body")), "from-data");
	json_decref(j);
	result_free(&a);
	result_free(&b);
	result_free(&s);
	result_free(&e);
}

/* ---- close ------------------------------------------------------------ */

struct close_ctx {
	struct tctx *t;
	struct result *rs;
	int n;
	int after_close_rc;
};

static void close_timer_cb(uv_timer_t *tm)
{
	struct close_ctx *cc = tm->data;
	struct result extra;
	int i;
	CHECK(httpc_in_flight(cc->t->c) == (size_t)cc->n);
	httpc_close(cc->t->c);
	for (i = 0; i < cc->n; i++) {
		CHECK(cc->rs[i].calls == 1);
		CHECK(cc->rs[i].rc == SB_ERR_CLOSED);
	}
	CHECK(httpc_in_flight(cc->t->c) == 0);
	/* Not yet freed (the loop has not run): new requests are refused. */
	result_init(&extra, cc->t);
	cc->after_close_rc = start(cc->t, &extra, "/hello", NULL, NULL, NULL);
	result_free(&extra);
	httpc_close(cc->t->c); /* second close: no-op */
	cc->t->c = NULL;
	uv_close((uv_handle_t *)tm, NULL);
}

static void test_close_in_flight(void **state)
{
	struct tctx *t = *state;
	struct result rs[3];
	struct close_ctx cc = {.t = t, .rs = rs, .n = 3};
	int i;

	for (i = 0; i < 3; i++) {
		result_init(&rs[i], t);
		assert_int_equal(
		    start(t, &rs[i], i == 2 ? "/stream" : "/slow/2000", NULL, NULL, NULL), SB_OK);
	}
	assert_int_equal(uv_timer_init(&t->loop, &t->timer), 0);
	t->timer.data = &cc;
	assert_int_equal(uv_timer_start(&t->timer, close_timer_cb, 100, 0), 0);
	/* Runs until every handle (client's and the timer) is closed. */ assert_int_equal(
	    uv_run(&t->loop, UV_RUN_DEFAULT), 0);
	assert_no_check_failure();
	assert_null(t->c);
	assert_int_equal(cc.after_close_rc, SB_ERR_CLOSED);
	for (i = 0; i < 3; i++) {
		assert_int_equal(rs[i].calls, 1);
		assert_int_equal(rs[i].rc, SB_ERR_CLOSED);
		result_free(&rs[i]);
	}
	assert_int_equal(uv_loop_alive(&t->loop), 0);
}

static void close_hook(struct result *r)
{
	httpc_close(r->t->c);
	r->t->c = NULL;
	CHECK(r->other->calls == 1);
	CHECK(r->other->rc == SB_ERR_CLOSED);
	CHECK(r->other2->calls == 1);
	CHECK(r->other2->rc == SB_ERR_CLOSED);
}

static void close_from_data_hook(struct result *r)
{
	if (r->chunks == 1)
		close_hook(r);
}

static void test_close_from_done(void **state)
{
	struct tctx *t = *state;
	struct result a, b, c;

	result_init(&a, t);
	result_init(&b, t);
	result_init(&c, t);
	a.done_hook = close_hook;
	a.other = &b;
	a.other2 = &c;
	assert_int_equal(start(t, &b, "/slow/2000", NULL, NULL, NULL), SB_OK);
	assert_int_equal(start(t, &c, "/slow/2000", NULL, NULL, NULL), SB_OK);
	assert_int_equal(start(t, &a, "/hello", NULL, NULL, NULL), SB_OK);
	assert_int_equal(uv_run(&t->loop, UV_RUN_DEFAULT), 0);
	assert_no_check_failure();
	assert_null(t->c);
	assert_int_equal(a.calls, 1);
	assert_int_equal(a.rc, SB_OK);
	assert_string_equal(a.body.data, "hello");
	assert_int_equal(b.calls, 1);
	assert_int_equal(c.calls, 1);
	result_free(&a);
	result_free(&b);
	result_free(&c);
}

static void test_close_from_data(void **state)
{
	struct tctx *t = *state;
	struct result a, b, c;
	struct httpc_request req = {.on_data = on_data};
	char url[256];

	result_init(&a, t);
	result_init(&b, t);
	result_init(&c, t);
	a.data_hook = close_from_data_hook;
	a.other = &b;
	a.other2 = &c;
	assert_int_equal(start(t, &b, "/slow/2000", NULL, NULL, NULL), SB_OK);
	assert_int_equal(start(t, &c, "/stream", NULL, NULL, NULL), SB_OK);
	url_of(url, sizeof(url), "/stream");
	req.url = url;
	assert_int_equal(httpc_request(t->c, &req, on_done, &a, NULL), SB_OK);
	assert_int_equal(uv_run(&t->loop, UV_RUN_DEFAULT), 0);
	assert_no_check_failure();
	assert_null(t->c);
	assert_int_equal(a.calls, 1);
	assert_int_equal(a.rc, SB_ERR_CLOSED);
	assert_int_equal(a.chunks, 1);
	assert_int_equal(b.calls, 1);
	assert_int_equal(c.calls, 1);
	result_free(&a);
	result_free(&b);
	result_free(&c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_get_hello, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_post_echo, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_put_and_delete, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_large_post_no_expect, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_headers_of_final_response, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_status_404, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_invalid_args, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_timeout, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_body_cap, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_refused, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_reset, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_stream, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_stream_stop, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_retry_after_delta, setup, teardown),
	    cmocka_unit_test(test_retry_after_parse),
	    cmocka_unit_test_setup_teardown(test_concurrent, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_cancel, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_cancel_from_callbacks, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_request_from_callbacks, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_close_in_flight, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_close_from_done, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_close_from_data, setup, teardown),
	};

	return cmocka_run_group_tests(tests, fake_start, fake_stop);
}
