/*
 * server_ws_internal.h - how gateway/http/server.c drives the WebSocket layer
 * (gateway/http/server_ws.c). Nothing else includes it.
 *
 * Loop thread only.
 */
#ifndef SB_GATEWAY_SERVER_WS_INTERNAL_H
#define SB_GATEWAY_SERVER_WS_INTERNAL_H

#include <libwebsockets.h>
#include <stdbool.h>
#include <uv.h>

#include "gateway/http/server.h"

struct server_ws;
struct server_ws_hub;

/* The hub of a server (server.c). */
struct server_ws_hub *server_ws_hub_of(const struct server *s);

/* Creates the hub (endpoints, connections, the ping timer) on loop. */
int server_ws_hub_new(struct server_ws_hub **out, uv_loop_t *loop);

/* No new upgrade from now on. */
void server_ws_hub_drain(struct server_ws_hub *h);

/* Stops the timer and detaches every connection from its module; call
 * before the lws context is destroyed. */
void server_ws_hub_close(struct server_ws_hub *h);

/* Frees the hub and any connection lws did not report closed (after the
 * context is gone and the loop has run). NULL is a no-op. */
void server_ws_hub_free(struct server_ws_hub *h);

/* Marks wsi's connection as kept by its endpoint (server.c): it is no
 * longer closed to make room for new connections. */
void server_conn_hold(struct lws *wsi);

/* Whether reason belongs to the WebSocket layer. */
bool server_ws_handles(enum lws_callback_reasons reason);

/* The WebSocket part of the lws callback. slot is the connection's
 * per-session pointer (NULL when lws gave no per-session data). Returns
 * what the lws callback returns. */
int server_ws_callback(struct server_ws_hub *h, struct lws *wsi, enum lws_callback_reasons reason,
                       struct server_ws **slot, void *in, size_t len);

#endif
