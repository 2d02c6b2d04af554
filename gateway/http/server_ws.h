/*
 * server_ws.h - WebSocket endpoints on the gateway's HTTP port.
 *
 * A module registers an endpoint for an exact path ("/", "/ws"); a client
 * that asks to upgrade a GET on that path becomes a struct server_ws, and the
 * module sees it through three callbacks: open, one call per whole text
 * message, and closed. Everything the server can enforce without knowing
 * the protocol it does here:
 *
 *   - messages are reassembled from frames up to a per-connection cap
 *     (server_ws_set_max_message; the endpoint's max_message until then);
 *     a longer message closes the connection with 1009, a binary one with
 *     1003, invalid UTF-8 with 1007 (lws);
 *   - each connection has a send queue bounded in bytes; a send that would
 *     pass it drops the queue and closes the connection with 1008 ("slow
 *     consumer"), so one stuck client never holds unbounded memory;
 *   - a connection silent for ping_interval gets a WebSocket ping; one that
 *     stays silent (no frame, no pong) for idle_timeout is closed (1001);
 *   - while the server drains, no new upgrade is accepted.
 *
 * Upgrades on a path without an endpoint are refused. Origin is not checked
 * here: the upgrade's Origin, Host and Cookie headers are kept for the
 * endpoint, which decides (the control plane checks the Origin of browser
 * clients and reads the web session cookie).
 *
 * Implemented in gateway/http/server_ws.c, hooked into gateway/http/server.c's lws
 * callback. Loop thread only. Callbacks never run from inside the calls
 * below: they run from lws callbacks.
 */
#ifndef SB_GATEWAY_SERVER_WS_H
#define SB_GATEWAY_SERVER_WS_H

#include <stddef.h>
#include <stdint.h>

#include "gateway/http/server.h"

struct server_ws;          /* one connection */
struct server_ws_endpoint; /* one path */

/* Close codes (RFC 6455 §7.4.1) the server and its modules use. */
enum server_ws_close_code {
	SERVER_WS_NORMAL = 1000,
	SERVER_WS_GOING_AWAY = 1001,
	SERVER_WS_PROTOCOL_ERROR = 1002,
	SERVER_WS_UNSUPPORTED = 1003,
	SERVER_WS_NO_STATUS = 1005, /* never sent: a close frame without a code */
	SERVER_WS_ABNORMAL = 1006,  /* never sent: no close frame was seen */
	SERVER_WS_INVALID_DATA = 1007,
	SERVER_WS_POLICY = 1008,
	SERVER_WS_TOO_BIG = 1009,
	SERVER_WS_INTERNAL = 1011,
	SERVER_WS_RESTART = 1012,
	SERVER_WS_TRY_LATER = 1013,
};

struct server_ws_ops {
	/* A client upgraded on the endpoint's path. Return SB_OK and set *conn
	 * (the module's per-connection state) to keep it; anything else
	 * closes it (1011) and no other callback runs for it. Mandatory. */
	int (*open)(void *ud, struct server_ws *ws, void **conn);
	/* One whole text message; data is NUL-terminated and borrowed for the
	 * call. The module may send or close from here. Mandatory. */
	void (*message)(void *conn, const char *data, size_t len);
	/* The connection is gone; code is the close code sent or received
	 * (SERVER_WS_ABNORMAL when neither). ws is invalid once this returns.
	 * Mandatory. */
	void (*closed)(void *conn, int code);
};

struct server_ws_limits {
	size_t max_message;       /* first cap on a message; 0 = 64 KiB */
	size_t max_queued;        /* send queue bytes per connection; 0 = 8 MiB */
	int64_t ping_interval_ms; /* ping after this much silence; 0 = 30 s */
	int64_t idle_timeout_ms;  /* close after this much silence; 0 = 2 x ping_interval */
};

/* Serves WebSocket upgrades on path (exact match, copied). ops and ud are
 * kept until server_ws_endpoint_remove. Returns SB_OK and *out;
 * SB_ERR_EXISTS when the path has an endpoint; SB_ERR_TOOBIG past 8
 * endpoints; SB_ERR_NOMEM. */
int server_ws_endpoint_add(struct server *s, const char *path, const struct server_ws_ops *ops,
                           void *ud, const struct server_ws_limits *lim,
                           struct server_ws_endpoint **out);

/* Stops serving the path: every connection of the endpoint is closed with
 * code and reason (after what is already queued) and no callback of ops
 * runs again, not even closed. Call it before freeing what ud points at.
 * NULL is a no-op. */
void server_ws_endpoint_remove(struct server_ws_endpoint *ep, int code, const char *reason);

/* Queues one text message (copied). Returns SB_OK; SB_ERR_CLOSED when the
 * connection is closing or gone; SB_ERR_TOOBIG when the queue is full: the
 * client is then being dropped (1008, "slow consumer"); SB_ERR_NOMEM. */
int server_ws_send(struct server_ws *ws, const char *data, size_t len);

/* Closes with code and reason (at most 123 bytes) once the queued messages
 * are written (at most a few seconds later whatever the client does). The
 * closed callback follows. A second call is a no-op. */
void server_ws_close(struct server_ws *ws, int code, const char *reason);

/* Sets the largest message accepted from now on (at least 1 KiB). */
void server_ws_set_max_message(struct server_ws *ws, size_t max);

/* The endpoint keeps this connection (it signed in): from now on it is not
 * closed to make room when the server's connection table is full. Until
 * then a WebSocket counts as idle, like a connection that has not sent a
 * whole request. */
void server_ws_keep(struct server_ws *ws);

/* The peer's address as text ("127.0.0.1"); "" if unknown. */
const char *server_ws_peer(const struct server_ws *ws);

/* The path the client connected to (the endpoint's). */
const char *server_ws_path(const struct server_ws *ws);

/* The upgrade request's Origin, Host and Cookie headers as sent; "" when
 * absent (Host longer than 512 bytes and Cookie longer than 8 KiB are ""
 * too; an Origin longer than 512 bytes is its first 512, so it still reads
 * as a browser's and fails the allowed-origin check). Valid while ws is. */
const char *server_ws_origin(const struct server_ws *ws);
const char *server_ws_host(const struct server_ws *ws);
const char *server_ws_cookie(const struct server_ws *ws);

/* Bytes queued and not yet written. */
size_t server_ws_queued(const struct server_ws *ws);

/* Open connections over every endpoint. */
size_t server_ws_count(const struct server *s);

#endif
