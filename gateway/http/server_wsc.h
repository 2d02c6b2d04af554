/*
 * server_wsc.h - WebSocket client connections on the HTTP server's
 * libwebsockets context (the daemon's one lws context, on its libuv loop):
 * what host->ws_connect and friends stand on. See gateway/core/host.h for
 * the contract of each call.
 *
 * Loop thread only.
 */
#ifndef SB_GATEWAY_SERVER_WSC_H
#define SB_GATEWAY_SERVER_WSC_H

#include <stdbool.h>
#include <stddef.h>

#include <libwebsockets.h>

#include "gateway/core/host.h"
#include "gateway/http/server.h"

/* The name of the client protocol in the server's protocol list. */
#define SERVER_WSC_PROTOCOL "switchboard-client"

/* The server's lws context, or NULL once it is closing (server.c). */
struct lws_context *server_lws_context(const struct server *s);
/* The loop the server runs on (server.c). */
uv_loop_t *server_loop(const struct server *s);
/* The vhost client connections use, made on first use (server.c). */
struct lws_vhost *server_client_vhost(struct server *s);

int server_wsc_connect(struct server *s, const char *url, const struct host_ws_handlers *h,
                       void *ud, struct host_ws **out);
int server_wsc_send(struct host_ws *ws, const char *data, size_t len);
int server_wsc_ping(struct host_ws *ws);
void server_wsc_close(struct host_ws *ws);
void server_wsc_shutdown(struct host_ws *ws, bool abrupt);

/* Whether wsi is a client connection of SERVER_WSC_PROTOCOL. */
bool server_wsc_owns(struct lws *wsi);

/* The lws callback of SERVER_WSC_PROTOCOL. */
int server_wsc_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                        size_t len);

#endif
