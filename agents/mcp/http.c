/*
 * http.c - the MCP HTTP transports, through the gateway's HTTP client
 * (gateway/core/httpc.h: libcurl's multi interface on the loop, nothing
 * blocks).
 *
 * Streamable HTTP: every message is a POST to the server's one endpoint,
 * accepting JSON or an event stream; the answer is a JSON message (or a
 * batch), or a stream of events whose data are messages (the server's
 * requests and notifications may come in it before the response); 202 is
 * the answer to a notification. The Mcp-Session-Id the server gives is
 * repeated on every later request, with MCP-Protocol-Version; a 404 for a
 * session ends the transport (the session expired: the next use starts a
 * new one). Stopping sends DELETE for the session.
 *
 * The older HTTP+SSE transport: a GET opens an event stream whose first
 * event, `endpoint`, names where to POST (it must be on the same origin as
 * the stream, or the server could send the gateway's messages, headers
 * included, anywhere); the answers come back as `message` events.
 *
 * An event, a body, or a message over max_message bytes ends the transport.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agents/mcp/mcp_internal.h"
#include "gateway/core/buf.h"
#include "gateway/core/err.h"
#include "gateway/core/host.h"
#include "gateway/core/httpc.h"
#include "gateway/core/log.h"
#include "gateway/core/url.h"

#define MCP_HTTP_HEADERS_MAX 40
#define MCP_HTTP_SLACK_MS 5000
#define MCP_HTTP_STREAM_MS (24LL * 3600 * 1000)
#define MCP_HTTP_STREAM_BYTES ((size_t)1 << 34)
#define MCP_HTTP_DELETE_MS 2000
#define MCP_HTTP_SESSION_MAX 200

struct mcp_sse {
	struct buf line, data;
	char event[64];
};

struct mcp_http;

struct mcp_post {
	struct mcp_post *next;
	struct mcp_http *t;
	int64_t id;
	struct httpc_call *call;
};

struct mcp_http {
	struct mcp_server *s;
	struct httpc *http;
	bool sse; /* the older transport */
	bool closing, reported;
	char session[MCP_HTTP_SESSION_MAX + 1];
	struct mcp_post *posts;
	int64_t timeout_ms;
	size_t max_message;
	uv_timer_t timer; /* reports the end on the next turn of the loop */
	int handles;
	/* the older transport */
	struct httpc_call *stream;
	struct mcp_sse ev;
	char endpoint[URL_MAX + 1];
	struct buf waiting; /* messages (one a line) sent before the endpoint came */
	char why[300];
	struct httpc_call *del;
	/* streamable HTTP: the GET stream of the server's own messages */
	struct httpc_call *listen;
	struct mcp_sse lev;
	uv_timer_t relisten;
	int listens;
};

static void http_post_send(struct mcp_http *t, const char *msg, size_t len, int64_t id);

static void http_sse_init(struct mcp_sse *e, size_t max)
{
	buf_init(&e->line, max);
	buf_init(&e->data, max);
	e->event[0] = '\0';
}

static void http_sse_free(struct mcp_sse *e)
{
	buf_free(&e->line);
	buf_free(&e->data);
}

typedef void (*http_event_cb)(struct mcp_http *t, const char *event, const char *data, size_t len);

/* Feeds bytes of an event stream; each complete event goes to cb. SB_OK or
 * SB_ERR_TOOBIG (a line or an event over the limit). */
static int http_sse_feed(struct mcp_http *t, struct mcp_sse *e, const char *p, size_t n,
                         http_event_cb cb)
{
	const char *end = p + n;

	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t len;
		char *l;

		if (buf_append(&e->line, p, (size_t)((nl ? nl : end) - p)) != SB_OK)
			return SB_ERR_TOOBIG;
		if (!nl)
			break;
		p = nl + 1;
		l = e->line.data ? e->line.data : "";
		len = e->line.len;
		if (len && l[len - 1] == '\r')
			l[--len] = '\0';
		if (len == 0) {
			if (e->data.len || e->event[0])
				cb(t, e->event[0] ? e->event : "message",
				   e->data.data ? e->data.data : "", e->data.len);
			buf_reset(&e->data);
			e->event[0] = '\0';
		} else if (strncmp(l, "data:", 5) == 0) {
			const char *v = l + 5 + (l[5] == ' ');

			if ((e->data.len && buf_puts(&e->data, "\n") != SB_OK) ||
			    buf_puts(&e->data, v) != SB_OK)
				return SB_ERR_TOOBIG;
		} else if (strncmp(l, "event:", 6) == 0) {
			const char *v = l + 6 + (l[6] == ' ');

			snprintf(e->event, sizeof e->event, "%s", v);
		}
		/* id:, retry: and comments: nothing to keep */
		buf_reset(&e->line);
	}
	return SB_OK;
}

static void http_free(struct mcp_http *t)
{
	http_sse_free(&t->ev);
	http_sse_free(&t->lev);
	buf_free(&t->waiting);
	free(t);
}

static void http_timer_closed(uv_handle_t *h)
{
	struct mcp_http *t = h->data;

	if (--t->handles == 0)
		http_free(t);
}

static void http_report_cb(uv_timer_t *timer)
{
	struct mcp_http *t = timer->data;
	struct mcp_server *s = t->s;

	t->s = NULL;
	uv_close((uv_handle_t *)&t->timer, http_timer_closed);
	uv_close((uv_handle_t *)&t->relisten, http_timer_closed);
	mcp_server_closed(s, t->why[0] ? t->why : "closed");
}

/* Ends the transport: every request cancelled, the end reported later. */
static void http_end(struct mcp_http *t, const char *why)
{
	if (t->reported)
		return;
	t->reported = true;
	t->closing = true;
	if (why && !t->why[0])
		snprintf(t->why, sizeof t->why, "%s", why);
	while (t->posts)
		httpc_cancel(t->posts->call); /* its done unlinks and frees it */
	if (t->stream)
		httpc_cancel(t->stream);
	if (t->listen)
		httpc_cancel(t->listen);
	uv_timer_stop(&t->relisten);
	if (!t->del)
		uv_timer_start(&t->timer, http_report_cb, 0, 0);
}

#define MCP_ACCEPT_BOTH "Accept: application/json, text/event-stream"
#define MCP_ACCEPT_STREAM "Accept: text/event-stream"

static void http_headers(struct mcp_http *t, const char **h, size_t *n, bool post,
                         const char *accept, char *sess, size_t sess_size, char *proto,
                         size_t proto_size)
{
	const struct mcp_server_config *c = mcp_server_cfg(t->s);

	*n = 0;
	for (size_t i = 0; i < c->n_headers && *n < MCP_HTTP_HEADERS_MAX - 6; i++)
		h[(*n)++] = c->headers[i];
	if (post)
		h[(*n)++] = "Content-Type: application/json";
	h[(*n)++] = accept;
	if (t->session[0]) {
		snprintf(sess, sess_size, "Mcp-Session-Id: %s", t->session);
		h[(*n)++] = sess;
	}
	if (mcp_server_protocol(t->s)[0]) {
		snprintf(proto, proto_size, "MCP-Protocol-Version: %s", mcp_server_protocol(t->s));
		h[(*n)++] = proto;
	}
	h[*n] = NULL;
}

static void http_on_event(struct mcp_http *t, const char *event, const char *data, size_t len)
{
	if (!t->s || t->closing)
		return;
	if (strcmp(event, "message") == 0 && len)
		mcp_server_message(t->s, data, len);
}

static void http_take_session(struct mcp_http *t, const struct httpc_response *resp)
{
	const char *sid = httpc_response_header(resp, "mcp-session-id");
	bool ok = sid && *sid && strlen(sid) <= MCP_HTTP_SESSION_MAX;

	/* visible ASCII only: it goes back in a header */
	for (const char *p = sid; ok && *p; p++)
		ok = *p >= 0x21 && *p <= 0x7e;
	if (ok)
		snprintf(t->session, sizeof t->session, "%s", sid);
}

static void http_post_done(void *ud, int rc, const struct httpc_response *resp)
{
	struct mcp_post *p = ud;
	struct mcp_http *t = p->t;
	int64_t id = p->id;
	char why[400];
	const char *type;

	for (struct mcp_post **q = &t->posts; *q; q = &(*q)->next)
		if (*q == p) {
			*q = p->next;
			break;
		}
	free(p);
	if (t->closing || !t->s)
		return;
	if (rc != SB_OK) {
		snprintf(why, sizeof why, "HTTP request failed: %s%s%s", sb_strerror(rc),
		         resp && resp->error ? ": " : "", resp && resp->error ? resp->error : "");
		if (rc == SB_ERR_TOOBIG)
			snprintf(why, sizeof why,
			         "sent an answer over the limit of %zu bytes (max_message)",
			         t->max_message);
		if (id >= 0)
			mcp_server_request_failed(t->s, id, why);
		if (rc == SB_ERR_TOOBIG)
			http_end(t, why);
		return;
	}
	http_take_session(t, resp);
	if (resp->status == 404 && t->session[0]) {
		http_end(t, "its session expired (HTTP 404)");
		return;
	}
	if (resp->status < 200 || resp->status >= 300) {
		snprintf(why, sizeof why, "HTTP status %ld: %.200s", resp->status,
		         resp->body.data ? resp->body.data : "");
		if (id >= 0)
			mcp_server_request_failed(t->s, id, why);
		else
			log_warn("mcp", "the MCP server refused a notification",
			         LOG_S("server", mcp_server_label(t->s)), LOG_S("why", why));
		return;
	}
	if (!resp->body.len || t->sse)
		return; /* 202, or the older transport's answers come on its stream */
	type = httpc_response_header(resp, "content-type");
	if (type && strncmp(type, "text/event-stream", 17) == 0) {
		struct mcp_sse e;

		http_sse_init(&e, t->max_message);
		/* the whole stream is here: a last event without its blank
		 * line counts too */
		if (http_sse_feed(t, &e, resp->body.data, resp->body.len, http_on_event) == SB_OK &&
		    t->s && !t->closing)
			(void)http_sse_feed(t, &e, "\n\n", 2, http_on_event);
		http_sse_free(&e);
		return;
	}
	mcp_server_message(t->s, resp->body.data, resp->body.len);
}

static void http_post_send(struct mcp_http *t, const char *msg, size_t len, int64_t id)
{
	const char *h[MCP_HTTP_HEADERS_MAX];
	char sess[MCP_HTTP_SESSION_MAX + 40], proto[80];
	struct httpc_request req;
	struct mcp_post *p = calloc(1, sizeof *p);
	size_t n;
	char why[200];

	if (!p) {
		if (id >= 0)
			mcp_server_request_failed(t->s, id, "out of memory");
		return;
	}
	http_headers(t, h, &n, true, MCP_ACCEPT_BOTH, sess, sizeof sess, proto, sizeof proto);
	memset(&req, 0, sizeof req);
	req.method = "POST";
	req.url = t->sse ? t->endpoint : mcp_server_cfg(t->s)->url;
	req.headers = h;
	req.body = msg;
	req.body_len = len;
	req.timeout_ms = t->timeout_ms;
	req.max_response_bytes = t->max_message;
	p->t = t;
	p->id = id;
	p->next = t->posts;
	t->posts = p;
	if (httpc_request(t->http, &req, http_post_done, p, &p->call) != SB_OK) {
		t->posts = p->next;
		free(p);
		snprintf(why, sizeof why, "the HTTP request could not start");
		if (id >= 0)
			mcp_server_request_failed(t->s, id, why);
	}
}

static int http_send(void *tr, const char *msg, size_t len, int64_t id)
{
	struct mcp_http *t = tr;

	if (t->closing)
		return SB_ERR_CLOSED;
	if (t->sse && !t->endpoint[0]) {
		/* until the stream says where to post */
		if (buf_append(&t->waiting, msg, len) != SB_OK ||
		    buf_puts(&t->waiting, "\n") != SB_OK)
			return SB_ERR_TOOBIG;
		return SB_OK;
	}
	http_post_send(t, msg, len, id);
	return SB_OK;
}

/* ---- the older transport's stream ---- */

static void http_flush_waiting(struct mcp_http *t)
{
	char *all = buf_steal(&t->waiting), *p = all, *nl;

	while (p && *p && !t->closing && (nl = strchr(p, '\n'))) {
		json_t *m = json_loadb(p, (size_t)(nl - p), 0, NULL);
		const json_t *id = json_object_get(m, "id");

		http_post_send(t, p, (size_t)(nl - p),
		               json_is_integer(id) && json_object_get(m, "method")
		                   ? (int64_t)json_integer_value(id)
		                   : -1);
		json_decref(m);
		p = nl + 1;
	}
	free(all);
}

static void http_stream_event(struct mcp_http *t, const char *event, const char *data, size_t len)
{
	struct url base, to;
	char why[300], ref[URL_MAX + 1];

	if (!t->s || t->closing)
		return;
	if (strcmp(event, "endpoint") != 0) {
		http_on_event(t, event, data, len);
		return;
	}
	if (t->endpoint[0] || len > URL_MAX)
		return;
	snprintf(ref, sizeof ref, "%.*s", (int)len, data);
	if (url_parse(mcp_server_cfg(t->s)->url, &base, why, sizeof why) != SB_OK ||
	    url_join(&base, ref, &to, why, sizeof why) != SB_OK) {
		http_end(t, "its endpoint event names no usable URL");
		return;
	}
	if (to.https != base.https || to.port != base.port || strcmp(to.host, base.host) != 0) {
		snprintf(why, sizeof why, "its endpoint event names another origin (%.200s)",
		         to.href);
		http_end(t, why);
		return;
	}
	snprintf(t->endpoint, sizeof t->endpoint, "%s", to.href);
	http_flush_waiting(t);
}

static int http_stream_data(void *ud, const char *data, size_t len)
{
	struct mcp_http *t = ud;

	if (t->closing)
		return 1;
	if (http_sse_feed(t, &t->ev, data, len, http_stream_event) != SB_OK) {
		snprintf(t->why, sizeof t->why,
		         "sent an event over the limit of %zu bytes (max_message)", t->max_message);
		return 1;
	}
	return 0;
}

static void http_stream_done(void *ud, int rc, const struct httpc_response *resp)
{
	struct mcp_http *t = ud;
	char why[300];

	t->stream = NULL;
	if (t->closing)
		return;
	if (rc != SB_OK)
		snprintf(why, sizeof why, "its event stream ended: %s%s%s", sb_strerror(rc),
		         resp && resp->error ? ": " : "", resp && resp->error ? resp->error : "");
	else if (resp->status != 200)
		snprintf(why, sizeof why, "its event stream was refused (HTTP status %ld)",
		         resp->status);
	else
		snprintf(why, sizeof why, "its event stream ended");
	http_end(t, why);
}

/* ---- streamable HTTP: the server's own messages ---- */

#define MCP_HTTP_RELISTEN_MS 2000
#define MCP_HTTP_LISTENS_MAX 1000 /* reopened streams per session */

static void http_listen(struct mcp_http *t);

static void http_relisten_cb(uv_timer_t *timer)
{
	http_listen(timer->data);
}

static int http_listen_data(void *ud, const char *data, size_t len)
{
	struct mcp_http *t = ud;

	if (t->closing)
		return 1;
	if (http_sse_feed(t, &t->lev, data, len, http_on_event) != SB_OK) {
		log_warn("mcp",
		         "the MCP server's event stream sent an event over the limit; it is closed",
		         LOG_S("server", mcp_server_label(t->s)));
		return 1;
	}
	return 0;
}

static void http_listen_done(void *ud, int rc, const struct httpc_response *resp)
{
	struct mcp_http *t = ud;

	t->listen = NULL;
	if (t->closing || !t->s)
		return;
	/* 405: the server offers no such stream; anything but a stream that
	 * ran and ended: not again */
	if (rc == SB_OK && resp->status == 200 && t->listens < MCP_HTTP_LISTENS_MAX) {
		uv_timer_start(&t->relisten, http_relisten_cb, MCP_HTTP_RELISTEN_MS, 0);
		return;
	}
	if (rc != SB_OK || resp->status != 405)
		log_info("mcp", "the MCP server's event stream for its own messages is not open",
		         LOG_S("server", mcp_server_label(t->s)),
		         LOG_I("status", rc == SB_OK ? resp->status : 0),
		         LOG_S("why", rc == SB_OK ? "" : sb_strerror(rc)));
}

/* Opens the GET stream on which a streamable HTTP server sends what is no
 * answer to a request (a list_changed, say). */
static void http_listen(struct mcp_http *t)
{
	const char *h[MCP_HTTP_HEADERS_MAX];
	char sess[MCP_HTTP_SESSION_MAX + 40], proto[80];
	struct httpc_request req;
	size_t n;

	if (t->closing || t->listen || !t->s)
		return;
	http_sse_free(&t->lev);
	http_sse_init(&t->lev, t->max_message);
	http_headers(t, h, &n, false, MCP_ACCEPT_STREAM, sess, sizeof sess, proto, sizeof proto);
	memset(&req, 0, sizeof req);
	req.method = "GET";
	req.url = mcp_server_cfg(t->s)->url;
	req.headers = h;
	req.timeout_ms = MCP_HTTP_STREAM_MS;
	req.max_response_bytes = MCP_HTTP_STREAM_BYTES;
	req.on_data = http_listen_data;
	t->listens++;
	if (httpc_request(t->http, &req, http_listen_done, t, &t->listen) != SB_OK)
		t->listen = NULL;
}

static void http_ready(void *tr)
{
	struct mcp_http *t = tr;

	if (!t->sse)
		http_listen(t);
}

/* ---- open and close ---- */

static void http_delete_done(void *ud, int rc, const struct httpc_response *resp)
{
	struct mcp_http *t = ud;

	(void)rc;
	(void)resp;
	t->del = NULL;
	uv_timer_start(&t->timer, http_report_cb, 0, 0);
}

static void http_close(void *tr)
{
	struct mcp_http *t = tr;

	if (t->reported)
		return;
	if (!t->sse && t->session[0]) {
		/* the polite end of a session; its answer does not matter */
		const char *h[MCP_HTTP_HEADERS_MAX];
		char sess[MCP_HTTP_SESSION_MAX + 40], proto[80];
		struct httpc_request req;
		size_t n;

		http_headers(t, h, &n, false, MCP_ACCEPT_BOTH, sess, sizeof sess, proto,
		             sizeof proto);
		memset(&req, 0, sizeof req);
		req.method = "DELETE";
		req.url = mcp_server_cfg(t->s)->url;
		req.headers = h;
		req.timeout_ms = MCP_HTTP_DELETE_MS;
		if (httpc_request(t->http, &req, http_delete_done, t, &t->del) != SB_OK)
			t->del = NULL;
	}
	http_end(t, "stopped");
}

static int http_open(struct mcp_server *s, const struct mcp_env *env, void **out, char *why,
                     size_t why_size)
{
	const struct mcp_server_config *c = mcp_server_cfg(s);
	struct mcp_http *t;
	struct url u;

	if (!c->url) {
		snprintf(why, why_size, "no url");
		return SB_ERR_INVAL;
	}
	if (url_parse(c->url, &u, why, why_size) != SB_OK)
		return SB_ERR_INVAL;
	if (!env->host || !env->host->http_client) {
		snprintf(why, why_size, "no HTTP client");
		return SB_ERR_INVAL;
	}
	t = calloc(1, sizeof *t);
	if (!t)
		return SB_ERR_NOMEM;
	t->s = s;
	t->http = env->host->http_client(env->host->ctx);
	if (!t->http) {
		free(t);
		snprintf(why, why_size, "no HTTP client");
		return SB_ERR_INVAL;
	}
	t->sse = mcp_server_transport(c) == MCP_TRANSPORT_SSE;
	t->max_message = (size_t)(c->max_message > 0 ? c->max_message : (8 << 20));
	t->timeout_ms = c->call_timeout_ms > 0 ? c->call_timeout_ms : env->tool_timeout_ms;
	if (c->startup_timeout_ms > t->timeout_ms)
		t->timeout_ms = c->startup_timeout_ms;
	t->timeout_ms = (t->timeout_ms > 0 ? t->timeout_ms : 120000) + MCP_HTTP_SLACK_MS;
	http_sse_init(&t->ev, t->max_message);
	http_sse_init(&t->lev, t->max_message);
	buf_init(&t->waiting, t->max_message);
	uv_timer_init(mcp_server_loop(s), &t->timer);
	uv_timer_init(mcp_server_loop(s), &t->relisten);
	t->timer.data = t->relisten.data = t;
	t->handles = 2;
	if (t->sse) {
		const char *h[MCP_HTTP_HEADERS_MAX];
		char sess[MCP_HTTP_SESSION_MAX + 40], proto[80];
		struct httpc_request req;
		size_t n;

		http_headers(t, h, &n, false, MCP_ACCEPT_STREAM, sess, sizeof sess, proto,
		             sizeof proto);
		memset(&req, 0, sizeof req);
		req.method = "GET";
		req.url = c->url;
		req.headers = h;
		req.timeout_ms = MCP_HTTP_STREAM_MS;
		req.max_response_bytes = MCP_HTTP_STREAM_BYTES;
		req.on_data = http_stream_data;
		if (httpc_request(t->http, &req, http_stream_done, t, &t->stream) != SB_OK) {
			snprintf(why, why_size, "the HTTP request could not start");
			uv_close((uv_handle_t *)&t->timer, http_timer_closed);
			uv_close((uv_handle_t *)&t->relisten, http_timer_closed);
			return SB_ERR_IO;
		}
	}
	*out = t;
	return SB_OK;
}

const struct mcp_transport_ops mcp_http_ops = {
    .name = "http",
    .open = http_open,
    .send = http_send,
    .close = http_close,
    .ready = http_ready,
};
