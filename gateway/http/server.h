/*
 * server.h - the gateway's HTTP server (libwebsockets on the libuv loop).
 *
 * Routes are registered by path (exact or prefix) and method. A handler gets
 * a struct server_request with the method, path, query, headers on demand
 * and the whole body (bounded by max_body_bytes: a larger body is answered
 * 413 before the handler sees it). The handler answers with server_respond,
 * at once or later (the request stays valid until it is answered; if the
 * client went away meanwhile the answer is dropped).
 *
 * Streamed answers: server_stream.h. WebSocket endpoints on the same port
 * (the control plane): server_ws.h.
 *
 * Loop thread only.
 */
#ifndef SB_GATEWAY_SERVER_H
#define SB_GATEWAY_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

struct server;
struct server_request;
struct metrics;

enum server_method {
	SERVER_GET = 1 << 0,
	SERVER_POST = 1 << 1,
	SERVER_PUT = 1 << 2,
	SERVER_DELETE = 1 << 3,
	SERVER_PATCH = 1 << 4,
	SERVER_HEAD = 1 << 5,
	SERVER_OPTIONS = 1 << 6,
};

enum server_route_flags {
	SERVER_PREFIX = 1u << 0,       /* path is a prefix, not an exact path */
	SERVER_DURING_DRAIN = 1u << 1, /* still served while draining (health, metrics) */
};

typedef void (*server_handler)(void *ud, struct server_request *req);

struct server_options {
	const char *bind; /* IPv4/IPv6 literal or "localhost" */
	int port;
	size_t max_body_bytes;
	int max_connections;
	int max_per_address;     /* from one non-loopback address; 0: no cap */
	int64_t header_timeout_ms; /* headers in by then, or the connection closes */
	int64_t body_timeout_ms;   /* the body in by then, from the end of the headers */
	struct metrics *metrics; /* counts responses by route and status */
};

/* Creates the lws context on loop and starts listening. SB_ERR_IO when no
 * context could be made; SB_ERR_CONFIG when the context exists but holds no
 * listening socket on the port (taken, or bind names an address the host
 * lacks): logged with the port and what holds it; the caller exits. */
int server_start(struct server **out, uv_loop_t *loop, const struct server_options *opt);

/* Adds a route. flags: enum server_route_flags; methods: a mask of
 * enum server_method. Routes added later take precedence over earlier ones
 * with the same path. name labels the route in metrics (static string). */
int server_route(struct server *s, const char *name, const char *path, unsigned flags,
                 unsigned methods, server_handler fn, void *ud);

/* Stops taking new work: from now on only SERVER_DURING_DRAIN routes are
 * served; every other request is answered 503 with Retry-After, so load
 * balancers and senders go elsewhere while requests in flight finish. */
void server_drain(struct server *s);

/* The port it listens on. */
int server_port(const struct server *s);

/* Requests not yet answered, plus connections still open. */
size_t server_busy(const struct server *s);

/* Starts destroying the lws context (call outside any lws callback); the
 * loop must run afterwards until lws has closed its handles. No new request
 * is served after it. NULL is a no-op. */
void server_close(struct server *s);

/* Finishes the destruction after the loop has run, and frees s. NULL is a
 * no-op. */
void server_free(struct server *s);

/* ---- requests ---- */

enum server_method server_req_method(const struct server_request *r);
const char *server_req_path(const struct server_request *r);
const char *server_req_query(const struct server_request *r); /* "" if none */
const char *server_req_body(const struct server_request *r, size_t *len);
/* Copies a request header (case-insensitive name, without ':') into out.
 * Returns its length, or -1 when absent or too long. */
int server_req_header(struct server_request *r, const char *name, char *out, size_t size);
/* The peer address as text ("127.0.0.1"); "" if unknown. */
const char *server_req_peer(const struct server_request *r);

/* Answers the request: status, content type, body (copied), and optional
 * extra headers as a NULL-terminated "Name: value" list. Frees r when the
 * answer is written (or dropped). Call exactly once per request. */
int server_respond(struct server_request *r, int status, const char *content_type, const void *body,
                   size_t len, const char *const *headers);

#endif
