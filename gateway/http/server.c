/*
 * server.c - the HTTP server on libwebsockets, joined to the daemon's libuv
 * loop as a foreign loop. See server.h.
 *
 * Each HTTP transaction gets a heap struct server_request. The connection's
 * per-session data points at it; when the connection closes before the
 * handler answered, the request is detached (wsi = NULL) and freed when the
 * handler answers. Answers are always written from LWS_CALLBACK_HTTP_WRITEABLE
 * so that synchronous and late answers take one path.
 */
#include "gateway/http/server.h"
#include "gateway/http/server_stream.h"
#include "gateway/http/server_ws_internal.h"
#include "gateway/http/server_wsc.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <libwebsockets.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gateway/core/buf.h"
#include "gateway/core/err.h"
#include "gateway/core/log.h"
#include "gateway/obs/metrics.h"

#define SERVER_ROUTES_MAX 64
#define SERVER_PATH_MAX 2048
#define SERVER_CHUNK 16384
#define SERVER_HDRS_MAX 4096

struct server_route {
	const char *name;
	char *path;
	size_t path_len;
	unsigned flags;
	unsigned methods;
	server_handler fn;
	void *ud;
};

/* What a connection is doing, for the deadlines and for choosing which
 * one to close when the table is full. */
enum server_phase {
	SERVER_HEADERS, /* opened (or between requests): waiting for headers */
	SERVER_BODY,    /* headers in, the body arriving */
	SERVER_BUSY,    /* a whole request, being answered */
	SERVER_WS_NEW,  /* a WebSocket its endpoint has not yet accepted */
	SERVER_WS_HELD, /* a WebSocket its endpoint keeps (signed in) */
};

struct server_conn {
	struct server_conn *prev, *next;
	struct lws *wsi;
	unsigned char addr[16]; /* IPv4 in the first 4 bytes (mapped ones too) */
	int family;             /* AF_INET, AF_INET6, 0 unknown */
	bool loopback;
	bool evicting; /* being closed to make room or for a deadline */
	enum server_phase phase;
	uint64_t since; /* uv_now() when the phase began */
};

struct server {
	struct lws_context *ctx;
	uv_loop_t *loop;
	char *bind;
	size_t max_body;
	int port;
	int max_connections;
	int max_per_address;
	uint64_t header_timeout_ms, body_timeout_ms;
	int connections;
	int n_conns;  /* in the table (every accepted connection) */
	int evicting; /* of them being closed */
	struct server_conn *conns; /* every server connection, oldest first */
	struct server_conn *conns_tail;
	uv_timer_t *sweep; /* the deadlines, once a second */
	size_t pending; /* requests not yet freed */
	bool accepting;
	bool draining;
	bool closing;
	struct metrics *metrics;
	struct server_route routes[SERVER_ROUTES_MAX];
	size_t n_routes;
	struct server_ws_hub *ws;    /* WebSocket endpoints (server_ws.c) */
	struct lws_vhost *client_vh; /* made at the first client connection */
};

struct server_request {
	struct server *srv;
	struct lws *wsi; /* NULL once the connection closed */
	enum server_method method;
	char *path;
	char *query;
	struct buf body;
	char peer[64];
	const char *route_name;
	bool dispatched;
	bool answered;
	bool headers_sent;
	int status;
	char *content_type;
	char *extra_headers; /* "Name: value\n" lines */
	struct buf resp;
	size_t sent;
	bool close_after;  /* close the connection once answered (411) */
	bool streaming;    /* server_stream_start: resp holds the unsent chunks */
	bool stream_ended; /* server_stream_end was called */
};

struct server_pss {
	struct server_request *req;
	struct server_ws *ws; /* after an upgrade (server_ws.c) */
};

static struct server *server_of(struct lws *wsi)
{
	return lws_context_user(lws_get_context(wsi));
}

/* ---- the connection table: caps, room for new ones, deadlines ---- */

static struct server_conn *server_conn_of(struct lws *wsi)
{
	return wsi ? lws_get_opaque_user_data(wsi) : NULL;
}

/* The peer address ss; v4-mapped IPv6 addresses count as IPv4. */
static void server_addr_of(const struct sockaddr_storage *sa, struct server_conn *c)
{
	struct sockaddr_storage ss = *sa;

	c->family = 0;
	c->loopback = false;
	memset(c->addr, 0, sizeof c->addr);
	if (ss.ss_family == AF_INET) {
		const struct sockaddr_in *a = (const struct sockaddr_in *)&ss;

		c->family = AF_INET;
		memcpy(c->addr, &a->sin_addr, 4);
	} else if (ss.ss_family == AF_INET6) {
		const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&ss;

		if (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr)) {
			c->family = AF_INET;
			memcpy(c->addr, a->sin6_addr.s6_addr + 12, 4);
		} else {
			c->family = AF_INET6;
			memcpy(c->addr, &a->sin6_addr, 16);
			c->loopback = IN6_IS_ADDR_LOOPBACK(&a->sin6_addr);
		}
	}
	if (c->family == AF_INET)
		c->loopback = c->addr[0] == 127;
}

static bool server_same_addr(const struct server_conn *a, const struct server_conn *b)
{
	return a->family && a->family == b->family &&
	       memcmp(a->addr, b->addr, a->family == AF_INET ? 4 : 16) == 0;
}

static bool server_conn_idle(const struct server_conn *c)
{
	return !c->evicting && c->phase != SERVER_BUSY && c->phase != SERVER_WS_HELD;
}

static void server_conn_phase(struct lws *wsi, enum server_phase phase)
{
	struct server_conn *c = server_conn_of(wsi);

	if (c && c->phase != phase) {
		c->phase = phase;
		c->since = uv_now(server_of(wsi)->loop);
	}
}

/* Closes c: at once when now (outside any lws callback), else through
 * lws' own timeout within a second. It stops counting at once. */
static void server_evict(struct server *s, struct server_conn *c, bool now)
{
	if (c->evicting)
		return;
	c->evicting = true;
	s->evicting++;
	lws_set_timeout(c->wsi, PENDING_TIMEOUT_USER_OK, now ? LWS_TO_KILL_SYNC : 1);
}

/* The idle connection (of like's address when like is not NULL) that has
 * been idle longest; NULL when every one is busy. */
static struct server_conn *server_oldest_idle(struct server *s, const struct server_conn *like)
{
	struct server_conn *best = NULL;

	for (struct server_conn *c = s->conns; c; c = c->next)
		if (server_conn_idle(c) && (!like || server_same_addr(c, like)) &&
		    (!best || c->since < best->since))
			best = c;
	return best;
}

/* Whether a connection from the address in args may be taken, making room
 * when it can. */
static bool server_admit(struct server *s, const struct lws_filter_network_conn_args *args)
{
	struct server_conn peer, *victim;

	if (!s->accepting)
		return false;
	if (args)
		server_addr_of(&args->cli_addr, &peer);
	else
		memset(&peer, 0, sizeof peer);
	if (s->max_per_address > 0 && !peer.loopback && peer.family) {
		int n = 0;

		for (struct server_conn *c = s->conns; c; c = c->next)
			n += !c->evicting && server_same_addr(c, &peer);
		if (n >= s->max_per_address) {
			victim = server_oldest_idle(s, &peer);
			if (!victim)
				return false;
			server_evict(s, victim, false);
		}
	}
	if (s->n_conns - s->evicting >= s->max_connections) {
		victim = server_oldest_idle(s, NULL);
		if (!victim)
			return false;
		server_evict(s, victim, false);
	}
	return true;
}

static void server_conn_open(struct server *s, struct lws *wsi)
{
	struct server_conn *c = server_conn_of(wsi);
	struct sockaddr_storage ss;
	socklen_t len = sizeof ss;

	if (c || s->closing)
		return;
	/* Only connections with a peer: not the listener, nor lws' own. */
	memset(&ss, 0, sizeof ss);
	if (lws_get_socket_fd(wsi) < 0 ||
	    getpeername(lws_get_socket_fd(wsi), (struct sockaddr *)&ss, &len) != 0)
		return;
	c = calloc(1, sizeof *c);
	if (!c)
		return; /* untracked: not counted against any cap */
	c->wsi = wsi;
	server_addr_of(&ss, c);
	if (!c->family) {
		free(c);
		return;
	}
	c->phase = SERVER_HEADERS;
	c->since = uv_now(s->loop);
	c->prev = s->conns_tail;
	if (s->conns_tail)
		s->conns_tail->next = c;
	else
		s->conns = c;
	s->conns_tail = c;
	s->n_conns++;
	lws_set_opaque_user_data(wsi, c);
}

static void server_conn_close(struct server *s, struct lws *wsi)
{
	struct server_conn *c = server_conn_of(wsi);

	if (!c)
		return;
	lws_set_opaque_user_data(wsi, NULL);
	if (c->evicting && s->evicting > 0)
		s->evicting--;
	s->n_conns--;
	if (c->prev)
		c->prev->next = c->next;
	else
		s->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	else
		s->conns_tail = c->prev;
	free(c);
}

/* Slow headers or bodies (slowloris) are closed at their deadline. */
static void server_sweep(uv_timer_t *t)
{
	struct server *s = t->data;
	uint64_t now = uv_now(s->loop);
	int64_t closed = 0;

	for (struct server_conn *c = s->conns, *next; c; c = next) {
		uint64_t age = now - c->since;

		next = c->next; /* a synchronous close frees c */
		if (c->evicting)
			continue;
		if ((c->phase == SERVER_HEADERS && age > s->header_timeout_ms) ||
		    (c->phase == SERVER_BODY && age > s->body_timeout_ms)) {
			server_evict(s, c, true);
			closed++;
		}
	}
	if (closed)
		log_debug("server", "closed connections past their header or body deadline",
		          LOG_I("count", closed));
}

void server_conn_hold(struct lws *wsi)
{
	server_conn_phase(wsi, SERVER_WS_HELD);
}

static void server_req_free(struct server_request *r)
{
	if (!r)
		return;
	r->srv->pending--;
	free(r->path);
	free(r->query);
	free(r->content_type);
	free(r->extra_headers);
	buf_free(&r->body);
	buf_free(&r->resp);
	free(r);
}

static const struct {
	enum lws_token_indexes tok;
	enum server_method method;
} server_methods[] = {
    {WSI_TOKEN_GET_URI, SERVER_GET},     {WSI_TOKEN_POST_URI, SERVER_POST},
    {WSI_TOKEN_PUT_URI, SERVER_PUT},     {WSI_TOKEN_DELETE_URI, SERVER_DELETE},
    {WSI_TOKEN_PATCH_URI, SERVER_PATCH}, {WSI_TOKEN_OPTIONS_URI, SERVER_OPTIONS},
    {WSI_TOKEN_HEAD_URI, SERVER_HEAD},
};

static enum server_method server_method_of(struct lws *wsi)
{
	for (size_t i = 0; i < sizeof server_methods / sizeof *server_methods; i++)
		if (lws_hdr_total_length(wsi, server_methods[i].tok) > 0)
			return server_methods[i].method;
	return 0;
}

static const struct server_route *server_find(const struct server *s, const char *path)
{
	/* Later routes win, so a module can refine an earlier one. */
	for (size_t i = s->n_routes; i-- > 0;) {
		const struct server_route *r = &s->routes[i];

		if ((r->flags & SERVER_PREFIX) ? strncmp(path, r->path, r->path_len) == 0
		                               : strcmp(path, r->path) == 0)
			return r;
	}
	return NULL;
}

static void server_allow_header(unsigned methods, char *out, size_t size)
{
	static const char *const names[] = {"GET",   "POST", "PUT",    "DELETE",
	                                    "PATCH", "HEAD", "OPTIONS"};
	size_t used = 0;

	out[0] = '\0';
	for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
		if (!(methods & (1u << i)))
			continue;
		int n = snprintf(out + used, size - used, "%s%s", used ? ", " : "", names[i]);

		if (n < 0 || (size_t)n >= size - used)
			break;
		used += (size_t)n;
	}
}

static void server_json_error(struct server_request *r, int status, const char *msg,
                              const char *const *headers)
{
	char body[256];
	int n = snprintf(body, sizeof body, "{\"error\":\"%s\"}\n", msg);

	server_respond(r, status, "application/json", body, (size_t)n, headers);
}

static void server_dispatch(struct server_request *r)
{
	const struct server_route *route = server_find(r->srv, r->path);

	r->dispatched = true;
	if (!route) {
		r->route_name = "unmatched";
		server_json_error(r, 404, "not found", NULL);
		return;
	}
	r->route_name = route->name;
	if (r->srv->draining && !(route->flags & SERVER_DURING_DRAIN)) {
		static const char *const hdrs[] = {"Retry-After: 5", NULL};

		server_json_error(r, 503, "draining: the gateway is stopping", hdrs);
		return;
	}
	if (!(route->methods & r->method)) {
		char allow[128], hdr[160];
		const char *hdrs[] = {hdr, NULL};

		server_allow_header(route->methods, allow, sizeof allow);
		snprintf(hdr, sizeof hdr, "Allow: %s", allow);
		server_json_error(r, 405, "method not allowed", hdrs);
		return;
	}
	route->fn(route->ud, r);
}

static int server_begin(struct lws *wsi, struct server_pss *pss, const char *uri)
{
	struct server *s = server_of(wsi);
	struct server_request *r;
	char clen[32];
	int qlen;

	r = calloc(1, sizeof *r);
	if (!r)
		return -1;
	s->pending++;
	r->srv = s;
	r->wsi = wsi;
	r->route_name = "unmatched";
	pss->req = r;
	buf_init(&r->body, s->max_body);
	buf_init(&r->resp, SIZE_MAX / 2);
	r->method = server_method_of(wsi);
	r->path = strndup(uri ? uri : "/", SERVER_PATH_MAX);
	qlen = lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_URI_ARGS);
	r->query = calloc(1, qlen > 0 ? (size_t)qlen + 1 : 1);
	if (!r->path || !r->query)
		return -1;
	if (qlen > 0)
		lws_hdr_copy(wsi, r->query, qlen + 1, WSI_TOKEN_HTTP_URI_ARGS);
	lws_get_peer_simple(wsi, r->peer, sizeof r->peer);

	if (r->method & (SERVER_POST | SERVER_PUT | SERVER_PATCH)) {
		if (lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_TRANSFER_ENCODING) > 0) {
			/* libwebsockets 4.1 does not decode chunked request
			 * bodies: refused at once, and the connection closed
			 * (the chunks would be read as the next request). */
			static const char *const hdrs[] = {"Connection: close", NULL};

			r->route_name =
			    server_find(s, r->path) ? server_find(s, r->path)->name : "unmatched";
			r->dispatched = true;
			r->close_after = true;
			server_conn_phase(wsi, SERVER_BUSY);
			server_json_error(r, 411,
			                  "send the body with Content-Length (chunked request bodies "
			                  "are not accepted)",
			                  hdrs);
			return 0;
		}
		if (lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_CONTENT_LENGTH) <= 0) {
			/* No Content-Length and no Transfer-Encoding: no body
			 * (RFC 9112 6.3); lws would never report one. */
			server_conn_phase(wsi, SERVER_BUSY);
			server_dispatch(r);
			return 0;
		}
		if (lws_hdr_copy(wsi, clen, sizeof clen, WSI_TOKEN_HTTP_CONTENT_LENGTH) > 0 &&
		    strtoull(clen, NULL, 10) > s->max_body) {
			r->route_name =
			    server_find(s, r->path) ? server_find(s, r->path)->name : "unmatched";
			r->dispatched = true;
			server_conn_phase(wsi, SERVER_BUSY);
			server_json_error(r, 413, "request body too large", NULL);
			return 0;
		}
		/* The body arrives in LWS_CALLBACK_HTTP_BODY; dispatch at its end. */
		server_conn_phase(wsi, SERVER_BODY);
		return 0;
	}
	server_conn_phase(wsi, SERVER_BUSY);
	server_dispatch(r);
	return 0;
}

static int server_body(struct server_request *r, const void *in, size_t len)
{
	if (r->dispatched)
		return 0; /* already answered (413): drop the rest */
	if (buf_append(&r->body, in, len) == SB_ERR_TOOBIG) {
		r->dispatched = true;
		server_json_error(r, 413, "request body too large", NULL);
	}
	return 0;
}

/* What every answer on the port carries unless its handler set the header
 * itself (the web UI sets its own Content-Security-Policy): nothing served
 * here, an error page or a JSON answer included, may be rendered as a page
 * that runs anything, framed, sniffed into another type, or leak its
 * address in a Referer. */
static const char *const server_policy[][2] = {
    {"Content-Security-Policy:",
     "default-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"},
    {"X-Content-Type-Options:", "nosniff"},
    {"X-Frame-Options:", "DENY"},
    {"Referrer-Policy:", "no-referrer"},
    {"Cross-Origin-Resource-Policy:", "same-origin"},
};

/* Whether lines ("Name: value\n" ...) has a header called name ("Name:"). */
static bool server_has_header(const char *lines, const char *name)
{
	size_t n = strlen(name);

	for (const char *l = lines; l && *l;) {
		const char *nl = strchr(l, '\n');

		if (strncasecmp(l, name, n) == 0)
			return true;
		if (!nl)
			break;
		l = nl + 1;
	}
	return false;
}

/* Adds r->extra_headers ("Name: value\n" lines), then the policy headers
 * they do not override. Nonzero when they do not fit. */
static int server_add_extra_headers(struct lws *wsi, struct server_request *r, unsigned char **p,
                                    unsigned char *end)
{
	for (size_t i = 0; i < sizeof server_policy / sizeof *server_policy; i++) {
		const char *name = server_policy[i][0], *val = server_policy[i][1];

		if (!server_has_header(r->extra_headers, name) &&
		    lws_add_http_header_by_name(wsi, (const unsigned char *)name,
		                                (const unsigned char *)val, (int)strlen(val), p,
		                                end))
			return -1;
	}
	for (char *line = r->extra_headers; line && *line;) {
		char *nl = strchr(line, '\n'), *colon = strchr(line, ':');
		char name[128];
		const char *val;

		if (!nl || !colon || colon > nl || (size_t)(colon - line) + 2 > sizeof name)
			break;
		memcpy(name, line, (size_t)(colon - line) + 1);
		name[colon - line + 1] = '\0';
		val = colon + 1;
		while (*val == ' ')
			val++;
		if (lws_add_http_header_by_name(wsi, (const unsigned char *)name,
		                                (const unsigned char *)val, (int)(nl - val), p,
		                                end))
			return -1;
		line = nl + 1;
	}
	return 0;
}

static int server_stream_writeable(struct lws *wsi, struct server_pss *pss);

/* Writes headers, then body chunks; returns -1 to close the connection. */
static int server_write(struct lws *wsi, struct server_pss *pss)
{
	struct server_request *r = pss->req;
	unsigned char *start, *p, *end;
	unsigned char hdrs[LWS_PRE + SERVER_HDRS_MAX];
	size_t left;
	int done;

	if (!r || !r->answered)
		return 0;
	if (r->streaming)
		return server_stream_writeable(wsi, pss);
	if (!r->headers_sent) {
		start = p = hdrs + LWS_PRE;
		end = hdrs + sizeof hdrs - 1;
		if (lws_add_http_common_headers(wsi, (unsigned int)r->status, r->content_type,
		                                (lws_filepos_t)r->resp.len, &p, end))
			return -1;
		if (server_add_extra_headers(wsi, r, &p, end))
			return -1;
		if (r->resp.len && r->method != SERVER_HEAD &&
		    r->resp.len <= (size_t)(end - p) - 4 /* the blank line */) {
			/* A small body goes out with its headers in one write
			 * (a 202, an error, a JSON answer): one system call and
			 * no wait for the next writable callback. */
			if (lws_finalize_http_header(wsi, &p, end))
				return -1;
			memcpy(p, r->resp.data, r->resp.len);
			p += r->resp.len;
			if (lws_write(wsi, start, (size_t)(p - start), LWS_WRITE_HTTP_HEADERS) !=
			    (int)(p - start))
				return -1;
			r->headers_sent = true;
			r->sent = r->resp.len;
		} else {
			if (lws_finalize_write_http_header(wsi, start, &p, end))
				return -1;
			r->headers_sent = true;
			if (r->resp.len && r->method != SERVER_HEAD) {
				lws_callback_on_writable(wsi);
				return 0;
			}
		}
	} else {
		unsigned char chunk[LWS_PRE + SERVER_CHUNK];
		size_t n;

		left = r->resp.len - r->sent;
		n = left < SERVER_CHUNK ? left : SERVER_CHUNK;
		memcpy(chunk + LWS_PRE, r->resp.data + r->sent, n);
		if (lws_write(wsi, chunk + LWS_PRE, n,
		              n == left ? LWS_WRITE_HTTP_FINAL : LWS_WRITE_HTTP) != (int)n)
			return -1;
		r->sent += n;
		if (r->sent < r->resp.len) {
			lws_callback_on_writable(wsi);
			return 0;
		}
	}
	pss->req = NULL;
	if (r->close_after) {
		server_req_free(r);
		return -1;
	}
	server_req_free(r);
	done = lws_http_transaction_completed(wsi);
	if (!done)
		server_conn_phase(wsi, SERVER_HEADERS); /* keep-alive: the next request */
	return done ? -1 : 0;
}

static int server_cb(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                     size_t len)
{
	struct server_pss *pss = user;
	struct server *s;

	/* lws tells only the first protocol that a wsi is destroyed. */
	if (reason == LWS_CALLBACK_WSI_DESTROY && server_wsc_owns(wsi))
		return server_wsc_callback(wsi, reason, user, in, len);
	/* Every accepted connection is in the table from its first moment
	 * (lws binds the HTTP protocol only once headers arrive). */
	if (reason == LWS_CALLBACK_SERVER_NEW_CLIENT_INSTANTIATED) {
		server_conn_open(server_of(wsi), wsi);
		return 0;
	}
	if (reason == LWS_CALLBACK_WSI_DESTROY) {
		server_conn_close(server_of(wsi), wsi);
		return 0;
	}
	if (reason == LWS_CALLBACK_ESTABLISHED)
		server_conn_phase(wsi, SERVER_WS_NEW);
	if (server_ws_handles(reason))
		return server_ws_callback(server_of(wsi)->ws, wsi, reason, pss ? &pss->ws : NULL,
		                          in, len);
	switch (reason) {
	case LWS_CALLBACK_FILTER_NETWORK_CONNECTION:
		/* user: the peer (struct lws_filter_network_conn_args); wsi
		 * is the listener's */
		return server_admit(server_of(wsi), user) ? 0 : 1;
	case LWS_CALLBACK_HTTP_BIND_PROTOCOL:
	case LWS_CALLBACK_WS_SERVER_BIND_PROTOCOL:
		s = server_of(wsi);
		s->connections++;
		if (s->metrics)
			s->metrics->http_connections = s->connections;
		return 0;
	case LWS_CALLBACK_WS_SERVER_DROP_PROTOCOL:
		/* A WebSocket lws did not report closed is closed now. */
		if (pss && pss->ws)
			server_ws_callback(server_of(wsi)->ws, wsi, LWS_CALLBACK_CLOSED, &pss->ws,
			                   NULL, 0);
		/* fall through */
	case LWS_CALLBACK_HTTP_DROP_PROTOCOL:
		s = server_of(wsi);
		if (s->connections > 0)
			s->connections--;
		if (s->metrics)
			s->metrics->http_connections = s->connections;
		return 0;
	case LWS_CALLBACK_HTTP:
		if (pss->req) /* a pipelined request before the last was answered */
			return -1;
		return server_begin(wsi, pss, in);
	case LWS_CALLBACK_HTTP_BODY:
		return pss->req ? server_body(pss->req, in, len) : 0;
	case LWS_CALLBACK_HTTP_BODY_COMPLETION:
		server_conn_phase(wsi, SERVER_BUSY);
		if (pss->req && !pss->req->dispatched)
			server_dispatch(pss->req);
		return 0;
	case LWS_CALLBACK_HTTP_WRITEABLE:
		return server_write(wsi, pss);
	case LWS_CALLBACK_CLOSED_HTTP:
		if (pss && pss->req) {
			struct server_request *r = pss->req;

			pss->req = NULL;
			r->wsi = NULL;
			/* Answered ones are done; unanswered ones (and open
			 * streams) wait for their handler, which frees them in
			 * server_respond (server_stream_end). */
			if ((r->answered && !(r->streaming && !r->stream_ended)) || !r->dispatched)
				server_req_free(r);
		}
		return 0;
	default:
		break;
	}
	return lws_callback_http_dummy(wsi, reason, user, in, len);
}

static const struct lws_protocols server_protocols[] = {
    {.name = "http", .callback = server_cb, .per_session_data_size = sizeof(struct server_pss)},
    /* WebSocket client connections (server_wsc.c). */
    {.name = SERVER_WSC_PROTOCOL, .callback = server_wsc_callback, .per_session_data_size = 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

static void server_lws_log(int level, const char *line)
{
	char msg[512];
	size_t n;

	snprintf(msg, sizeof msg, "%s", line);
	n = strlen(msg);
	while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
		msg[--n] = '\0';
	if (level & LLL_ERR)
		log_error("lws", msg);
	else
		log_warn("lws", msg);
}

static bool server_is_ipv6(const char *bind)
{
	return strchr(bind, ':') != NULL;
}

/* Whether this process holds a listening TCP socket on port (any port when
 * 0): libwebsockets logs a failed bind but still returns a context, so the
 * listener is looked for where it must be, among our own descriptors. */
static bool server_listening(int port)
{
	DIR *dir = opendir("/proc/self/fd");
	struct dirent *de;
	bool found = false;

	if (!dir)
		return true; /* no /proc: cannot tell, trust the context */
	while (!found && (de = readdir(dir)) != NULL) {
		struct sockaddr_storage ss;
		socklen_t len = sizeof ss;
		int fd = (int)strtol(de->d_name, NULL, 10), yes = 0;
		socklen_t ylen = sizeof yes;
		struct stat st;
		int got;

		if (de->d_name[0] < '0' || de->d_name[0] > '9' || fd == dirfd(dir) ||
		    fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode))
			continue;
		if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &yes, &ylen) != 0 || !yes ||
		    getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
			continue;
		if (ss.ss_family == AF_INET)
			got = ntohs(((struct sockaddr_in *)&ss)->sin_port);
		else if (ss.ss_family == AF_INET6)
			got = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
		else
			continue;
		found = port == 0 || got == port;
	}
	closedir(dir);
	return found;
}

/* The socket inode listening on port, from /proc/net/tcp or tcp6; 0 when
 * none is found. */
static unsigned long server_port_inode(const char *table, int port)
{
	FILE *f = fopen(table, "re");
	char line[512];
	unsigned long inode = 0;

	if (!f)
		return 0;
	while (!inode && fgets(line, sizeof line, f)) {
		char local[128], remote[128];
		unsigned int st, lport;
		unsigned long ino;
		const char *colon;

		if (sscanf(line, " %*d: %127s %127s %x %*s %*s %*s %*s %*s %lu", local, remote, &st,
		           &ino) != 4)
			continue;
		colon = strrchr(local, ':');
		if (!colon || sscanf(colon + 1, "%x", &lport) != 1)
			continue;
		if (st == 0x0A && (int)lport == port) /* TCP_LISTEN */
			inode = ino;
	}
	fclose(f);
	return inode;
}

/* Names what holds port ("pid 123 (nginx)", or "another process" when
 * /proc does not say), for the error message. */
static void server_port_holder(int port, char *out, size_t size)
{
	unsigned long inode = server_port_inode("/proc/net/tcp", port);
	char want[64];
	DIR *procs;
	struct dirent *p;

	snprintf(out, size, "another process (not one this user can see)");
	if (!inode)
		inode = server_port_inode("/proc/net/tcp6", port);
	if (!inode) {
		snprintf(out, size,
		         "nothing listens there: the address may not exist on this host");
		return;
	}
	snprintf(want, sizeof want, "socket:[%lu]", inode);
	procs = opendir("/proc");
	while (procs && (p = readdir(procs)) != NULL) {
		char path[600], link[64];
		DIR *fds;
		struct dirent *fd;
		bool hit = false;

		if (p->d_name[0] < '1' || p->d_name[0] > '9')
			continue;
		snprintf(path, sizeof path, "/proc/%s/fd", p->d_name);
		fds = opendir(path);
		while (fds && !hit && (fd = readdir(fds)) != NULL) {
			ssize_t n;

			snprintf(path, sizeof path, "/proc/%s/fd/%s", p->d_name, fd->d_name);
			n = readlink(path, link, sizeof link - 1);
			if (n > 0) {
				link[n] = '\0';
				hit = strcmp(link, want) == 0;
			}
		}
		if (fds)
			closedir(fds);
		if (hit) {
			char comm[64] = "";
			FILE *f;

			snprintf(path, sizeof path, "/proc/%s/comm", p->d_name);
			f = fopen(path, "re");
			if (f) {
				if (fgets(comm, sizeof comm, f))
					comm[strcspn(comm, "\n")] = '\0';
				fclose(f);
			}
			snprintf(out, size, "pid %.20s (%.63s)", p->d_name, comm[0] ? comm : "?");
			break;
		}
	}
	if (procs)
		closedir(procs);
}

/* Whether bind:port can be bound now, as libwebsockets will bind it
 * (SO_REUSEADDR); errno-style reason in why when not. Checked before the
 * context exists: a context whose vhost failed cannot be torn down safely
 * on a foreign loop. */
static bool server_can_bind(const char *bind_addr, int port, char *why, size_t size)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int fd, yes = 1;
	bool ok;

	memset(&ss, 0, sizeof ss);
	if (strchr(bind_addr, ':')) {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;

		a->sin6_family = AF_INET6;
		a->sin6_port = htons((uint16_t)port);
		if (inet_pton(AF_INET6, bind_addr, &a->sin6_addr) != 1)
			return true; /* not a literal: libwebsockets resolves it */
		len = sizeof *a;
	} else {
		struct sockaddr_in *a = (struct sockaddr_in *)&ss;

		a->sin_family = AF_INET;
		a->sin_port = htons((uint16_t)port);
		if (inet_pton(AF_INET, bind_addr, &a->sin_addr) != 1)
			return true;
		len = sizeof *a;
	}
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return true;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
	ok = bind(fd, (struct sockaddr *)&ss, len) == 0;
	if (!ok)
		snprintf(why, size, "%s", strerror(errno));
	close(fd);
	return ok;
}

static void server_not_listening(const char *bind_addr, int port, const char *why)
{
	char holder[200];

	server_port_holder(port, holder, sizeof holder);
	log_error("server", "not listening: the port cannot be bound", LOG_S("bind", bind_addr),
	          LOG_I("port", port), LOG_S("error", why), LOG_S("held_by", holder),
	          LOG_S("hint", "stop what holds the port, or change gateway.port / gateway.bind, "
	                        "or pass --port"));
}

int server_start(struct server **out, uv_loop_t *loop, const struct server_options *opt)
{
	char why[128] = "";
	struct lws_context_creation_info info;
	void *loops[1] = {loop};
	struct server *s;
	int rc = SB_ERR_NOMEM;

	*out = NULL;
	s = calloc(1, sizeof *s);
	if (!s)
		goto out;
	s->loop = loop;
	s->max_body = opt->max_body_bytes;
	s->port = opt->port;
	s->max_connections = opt->max_connections > 0 ? opt->max_connections : 1024;
	s->max_per_address = opt->max_per_address > 0 ? opt->max_per_address : 0;
	s->header_timeout_ms =
	    (uint64_t)(opt->header_timeout_ms > 0 ? opt->header_timeout_ms : 10000);
	s->body_timeout_ms = (uint64_t)(opt->body_timeout_ms > 0 ? opt->body_timeout_ms : 30000);
	s->metrics = opt->metrics;
	s->accepting = true;
	s->bind = strdup(strcmp(opt->bind, "localhost") == 0 ? "127.0.0.1" : opt->bind);
	if (!s->bind || server_ws_hub_new(&s->ws, loop) != SB_OK)
		goto out;

	lws_set_log_level(LLL_ERR | LLL_WARN, server_lws_log);
	memset(&info, 0, sizeof info);
	info.port = opt->port;
	info.iface = s->bind;
	info.protocols = server_protocols;
	info.foreign_loops = loops;
	info.user = s;
	info.pcontext = &s->ctx;
	info.vhost_name = "switchboard";
	info.server_string = "switchboard";
	info.keepalive_timeout = 5;
	info.timeout_secs = 30;
	/* Room for the connections being closed to make room for new ones. */
	info.fd_limit_per_thread = (unsigned int)s->max_connections +
	                           (unsigned int)s->max_connections / 4 + 64;
	/* A header table for every connection that may be sending headers:
	 * with lws' default (a handful), a few slow senders would make every
	 * other connection wait. */
	info.max_http_header_pool = (unsigned short)(info.fd_limit_per_thread < 65535
	                                                 ? info.fd_limit_per_thread
	                                                 : 65535);
	info.options = LWS_SERVER_OPTION_LIBUV | LWS_SERVER_OPTION_VALIDATE_UTF8;
	if (!server_is_ipv6(s->bind))
		info.options |= LWS_SERVER_OPTION_DISABLE_IPV6;
	if (opt->port > 0 && !server_can_bind(s->bind, opt->port, why, sizeof why)) {
		server_not_listening(s->bind, opt->port, why);
		rc = SB_ERR_CONFIG;
		goto out;
	}
	s->ctx = lws_create_context(&info);
	if (!s->ctx) {
		log_error("server", "cannot listen", LOG_S("bind", s->bind),
		          LOG_I("port", opt->port),
		          LOG_S("hint", "is another process using the port? change gateway.port "
		                        "or pass --port"));
		rc = SB_ERR_IO;
		goto out;
	}
	if (!server_listening(opt->port)) {
		/* Taken between the check and the bind. The context is left as
		 * it is (tearing down a failed vhost on a foreign loop crashes
		 * libwebsockets 4.1); the process exits. */
		server_not_listening(s->bind, opt->port, "the bind failed (see the lws line)");
		s = NULL;
		rc = SB_ERR_CONFIG;
		goto out;
	}
	s->sweep = calloc(1, sizeof *s->sweep);
	if (s->sweep) {
		uv_timer_init(loop, s->sweep);
		s->sweep->data = s;
		uv_timer_start(s->sweep, server_sweep, 1000, 1000);
	}
	*out = s;
	s = NULL;
	rc = SB_OK;
out:
	if (s) {
		server_ws_hub_free(s->ws);
		free(s->bind);
		free(s);
	}
	return rc;
}

int server_route(struct server *s, const char *name, const char *path, unsigned flags,
                 unsigned methods, server_handler fn, void *ud)
{
	struct server_route *r;

	if (s->n_routes >= SERVER_ROUTES_MAX)
		return SB_ERR_TOOBIG;
	r = &s->routes[s->n_routes];
	r->path = strdup(path);
	if (!r->path)
		return SB_ERR_NOMEM;
	r->name = name;
	r->path_len = strlen(path);
	r->flags = flags;
	r->methods = methods;
	r->fn = fn;
	r->ud = ud;
	s->n_routes++;
	return SB_OK;
}

void server_drain(struct server *s)
{
	if (!s)
		return;
	s->draining = true;
	server_ws_hub_drain(s->ws);
}

int server_port(const struct server *s)
{
	return s ? s->port : 0;
}

size_t server_busy(const struct server *s)
{
	return s ? s->pending : 0;
}

static void server_sweep_closed(uv_handle_t *h)
{
	free(h);
}

void server_close(struct server *s)
{
	if (!s || s->closing)
		return;
	s->closing = true;
	s->accepting = false;
	if (s->sweep) {
		uv_timer_stop(s->sweep);
		uv_close((uv_handle_t *)s->sweep, server_sweep_closed);
		s->sweep = NULL;
	}
	server_ws_hub_close(s->ws);
	lws_context_destroy(s->ctx);
}

void server_free(struct server *s)
{
	if (!s)
		return;
	/* With a foreign loop the first destroy only starts closing lws'
	 * handles; once the loop has run them down, this one frees the rest
	 * (lws clears s->ctx through info.pcontext when it is all gone). */
	if (s->ctx)
		lws_context_destroy(s->ctx);
	while (s->conns) { /* any lws did not report dropped */
		struct server_conn *c = s->conns;

		s->conns = c->next;
		free(c);
	}
	for (size_t i = 0; i < s->n_routes; i++)
		free(s->routes[i].path);
	server_ws_hub_free(s->ws);
	free(s->bind);
	free(s);
}

struct lws_context *server_lws_context(const struct server *s)
{
	return s && !s->closing ? s->ctx : NULL;
}

uv_loop_t *server_loop(const struct server *s)
{
	return s ? s->loop : NULL;
}

/* Client connections (server_wsc.c) live on a vhost of their own that
 * does not listen, made when the first one is opened: its TLS client
 * context (the system's CA store) costs tens of milliseconds and several
 * megabytes, which a gateway without Slack Socket Mode never pays. */
static const struct lws_protocols server_client_protocols[] = {
    {.name = SERVER_WSC_PROTOCOL, .callback = server_wsc_callback, .per_session_data_size = 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

struct lws_vhost *server_client_vhost(struct server *s)
{
	struct lws_context_creation_info vi;

	if (!s || s->closing)
		return NULL;
	if (s->client_vh)
		return s->client_vh;
	memset(&vi, 0, sizeof vi);
	vi.port = CONTEXT_PORT_NO_LISTEN;
	vi.vhost_name = "switchboard-client";
	vi.protocols = server_client_protocols;
	vi.options = LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
	s->client_vh = lws_create_vhost(s->ctx, &vi);
	if (!s->client_vh)
		log_error("server", "cannot set up client connections (TLS client context)");
	return s->client_vh;
}

struct server_ws_hub *server_ws_hub_of(const struct server *s)
{
	return s ? s->ws : NULL;
}

enum server_method server_req_method(const struct server_request *r)
{
	return r->method;
}

const char *server_req_path(const struct server_request *r)
{
	return r->path;
}

const char *server_req_query(const struct server_request *r)
{
	return r->query;
}

const char *server_req_body(const struct server_request *r, size_t *len)
{
	if (len)
		*len = r->body.len;
	return r->body.data ? r->body.data : "";
}

const char *server_req_peer(const struct server_request *r)
{
	return r->peer;
}

int server_req_header(struct server_request *r, const char *name, char *out, size_t size)
{
	char key[128];
	size_t n = strlen(name);
	int got;

	if (!r->wsi || n + 2 > sizeof key)
		return -1;
	for (size_t i = 0; i < n; i++)
		key[i] = (char)((name[i] >= 'A' && name[i] <= 'Z') ? name[i] + 32 : name[i]);
	key[n] = ':';
	key[n + 1] = '\0';
	for (int tok = 0; tok < WSI_TOKEN_COUNT; tok++) {
		const unsigned char *t = lws_token_to_string((enum lws_token_indexes)tok);

		if (t && strcmp((const char *)t, key) == 0) {
			if (lws_hdr_total_length(r->wsi, (enum lws_token_indexes)tok) <= 0)
				return -1;
			got = lws_hdr_copy(r->wsi, out, (int)size, (enum lws_token_indexes)tok);
			return got < 0 ? -1 : got;
		}
	}
	got = lws_hdr_custom_copy(r->wsi, out, (int)size, key, (int)n + 1);
	return got < 0 ? -1 : got;
}

int server_respond(struct server_request *r, int status, const char *content_type, const void *body,
                   size_t len, const char *const *headers)
{
	struct buf hdrs;
	int rc = SB_ERR_NOMEM;

	if (r->answered)
		return SB_ERR_INVAL;
	r->answered = true;
	r->status = status;
	if (r->srv->metrics)
		metrics_http(r->srv->metrics, r->route_name, status);
	if (!r->wsi) {
		/* The client is gone; nothing to write. */
		server_req_free(r);
		return SB_ERR_CLOSED;
	}
	buf_init(&hdrs, SERVER_HDRS_MAX);
	for (; headers && *headers; headers++)
		if (buf_printf(&hdrs, "%s\n", *headers))
			goto out;
	r->extra_headers = buf_steal(&hdrs);
	r->content_type = strdup(content_type ? content_type : "text/plain");
	if (!r->extra_headers || !r->content_type)
		goto out;
	if (len && buf_append(&r->resp, body, len))
		goto out;
	lws_callback_on_writable(r->wsi);
	rc = SB_OK;
out:
	buf_free(&hdrs);
	if (rc)
		r->status = 500;
	if (rc && r->wsi)
		lws_callback_on_writable(r->wsi);
	return rc;
}

/* ---- streamed answers (server_stream.h) ----
 *
 * resp holds the bytes not yet written, from offset sent. Each writeable
 * callback sends the headers, then one chunk of at most SERVER_CHUNK bytes
 * with its chunked-encoding frame, and after server_stream_end the last,
 * empty chunk. */

static int server_stream_writeable(struct lws *wsi, struct server_pss *pss)
{
	struct server_request *r = pss->req;
	unsigned char hdrs[LWS_PRE + SERVER_HDRS_MAX];
	unsigned char *start = hdrs + LWS_PRE, *p = start, *end = hdrs + sizeof hdrs - 1;
	int done;

	if (!r->headers_sent) {
		if (!r->content_type || /* server_stream_start ran out of memory */
		    lws_add_http_common_headers(wsi, (unsigned int)r->status, r->content_type,
		                                LWS_ILLEGAL_HTTP_CONTENT_LEN, &p, end) ||
		    lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_TRANSFER_ENCODING,
		                                 (const unsigned char *)"chunked", 7, &p, end) ||
		    server_add_extra_headers(wsi, r, &p, end) ||
		    lws_finalize_write_http_header(wsi, start, &p, end))
			return -1;
		r->headers_sent = true;
		if (r->resp.len > r->sent || r->stream_ended)
			lws_callback_on_writable(wsi);
		return 0;
	}
	if (r->resp.len > r->sent) {
		/* "<hex size>\r\n" + data + "\r\n" */
		unsigned char chunk[LWS_PRE + 16 + SERVER_CHUNK + 2];
		size_t left = r->resp.len - r->sent, n = left < SERVER_CHUNK ? left : SERVER_CHUNK;
		int h = snprintf((char *)chunk + LWS_PRE, 16, "%zx\r\n", n);

		if (h < 0 || h >= 16)
			return -1;
		memcpy(chunk + LWS_PRE + h, r->resp.data + r->sent, n);
		memcpy(chunk + LWS_PRE + (size_t)h + n, "\r\n", 2);
		if (lws_write(wsi, chunk + LWS_PRE, (size_t)h + n + 2, LWS_WRITE_HTTP) !=
		    (int)((size_t)h + n + 2))
			return -1;
		r->sent += n;
		if (r->sent == r->resp.len) {
			buf_reset(&r->resp);
			r->sent = 0;
		}
		if (r->resp.len > r->sent || r->stream_ended)
			lws_callback_on_writable(wsi);
		return 0;
	}
	if (!r->stream_ended)
		return 0; /* nothing to write until the next server_stream_write */
	{
		unsigned char last[LWS_PRE + 8];

		memcpy(last + LWS_PRE, "0\r\n\r\n", 5);
		if (lws_write(wsi, last + LWS_PRE, 5, LWS_WRITE_HTTP_FINAL) != 5)
			return -1;
	}
	pss->req = NULL;
	server_req_free(r);
	done = lws_http_transaction_completed(wsi);
	if (!done)
		server_conn_phase(wsi, SERVER_HEADERS);
	return done ? -1 : 0;
}

int server_stream_start(struct server_request *r, int status, const char *content_type,
                        const char *const *headers)
{
	struct buf hdrs;
	int rc = SB_ERR_NOMEM;

	if (r->answered)
		return SB_ERR_INVAL;
	r->answered = true;
	r->streaming = true;
	r->status = status;
	if (r->srv->metrics)
		metrics_http(r->srv->metrics, r->route_name, status);
	buf_init(&hdrs, SERVER_HDRS_MAX);
	for (; headers && *headers; headers++)
		if (buf_printf(&hdrs, "%s\n", *headers))
			goto out;
	r->extra_headers = buf_steal(&hdrs);
	r->content_type = strdup(content_type ? content_type : "text/plain");
	if (!r->extra_headers || !r->content_type)
		goto out;
	buf_init(&r->resp, SERVER_STREAM_PENDING_MAX);
	rc = r->wsi ? SB_OK : SB_ERR_CLOSED;
	if (r->wsi)
		lws_callback_on_writable(r->wsi);
out:
	buf_free(&hdrs);
	return rc;
}

int server_stream_write(struct server_request *r, const void *data, size_t len)
{
	int rc;

	if (!r->streaming || r->stream_ended)
		return SB_ERR_INVAL;
	if (!r->wsi)
		return SB_ERR_CLOSED;
	if (!len)
		return SB_OK;
	rc = buf_append(&r->resp, data, len);
	if (rc)
		return rc;
	lws_callback_on_writable(r->wsi);
	return SB_OK;
}

int server_stream_end(struct server_request *r)
{
	if (!r->wsi) {
		server_req_free(r);
		return SB_ERR_CLOSED;
	}
	r->stream_ended = true;
	lws_callback_on_writable(r->wsi);
	return SB_OK;
}

bool server_stream_gone(const struct server_request *r)
{
	return r->wsi == NULL;
}
