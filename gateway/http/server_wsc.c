/*
 * server_wsc.c - WebSocket client connections on the server's lws context.
 *
 * Each connection is a struct host_ws, the lws wsi's opaque user data. Its
 * owner (an adapter) sees it through host_ws_handlers until it calls
 * server_wsc_close, which detaches the handlers at once and closes the
 * socket later from lws (a close frame when the socket is open, an
 * asynchronous kill before that). The struct is freed when lws destroys
 * the wsi (LWS_CALLBACK_WSI_DESTROY), which also happens to every client
 * connection when the context is destroyed at shutdown.
 *
 * A host name is resolved on the thread pool first (resolve.h: lws 4.1
 * would block the loop in its own lookup), then lws connects to the
 * address with the name kept for the Host header and TLS SNI. Until then
 * the connection has no wsi; closing it meanwhile frees it when the lookup
 * ends.
 *
 * Outgoing messages wait in a queue and are written one per
 * LWS_CALLBACK_CLIENT_WRITEABLE; incoming fragments are gathered into one
 * message (at most SERVER_WSC_MSG_MAX bytes; more closes the connection).
 */
#include "gateway/http/server_wsc.h"

#include <arpa/inet.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/core/buf.h"
#include "gateway/core/err.h"
#include "gateway/core/log.h"
#include "gateway/core/resolve.h"

#define SERVER_WSC_MSG_MAX (4u << 20)
#define SERVER_WSC_URL_MAX 4096

struct wsc_out {
	struct wsc_out *next;
	size_t len;
	unsigned char data[]; /* LWS_PRE bytes, then the message */
};

struct host_ws {
	struct lws *wsi; /* NULL once lws destroyed it */
	struct host_ws_handlers h;
	void *ud;
	bool detached;    /* the owner closed it: no more handlers */
	bool closing;     /* the owner shut it down: on_close only */
	bool established; /* the handshake completed */
	bool in_connect;  /* inside lws_client_connect_via_info */
	bool gone;        /* lws destroyed the wsi */
	bool reported;    /* on_close ran (or must not) */
	bool ping;        /* a ping waits to be written */
	bool close_sent;
	int close_code;
	struct wsc_out *head, *tail;
	struct buf rx;
	char *url;  /* lws_parse_uri cuts it up; kept for the wsi's lifetime */
	char *path; /* "/" + the path */
	struct server *srv;
	const char *host; /* inside url */
	int port;
	bool tls;
	bool resolving; /* the host name is being looked up; no wsi yet */
};

static void wsc_queue_free(struct host_ws *ws)
{
	while (ws->head) {
		struct wsc_out *o = ws->head;

		ws->head = o->next;
		free(o);
	}
	ws->tail = NULL;
}

static void wsc_free(struct host_ws *ws)
{
	wsc_queue_free(ws);
	buf_free(&ws->rx);
	free(ws->url);
	free(ws->path);
	free(ws);
}

/* Tells the owner, once, that the connection is over. */
static void wsc_report(struct host_ws *ws, const char *why)
{
	if (ws->reported || ws->detached)
		return;
	ws->reported = true;
	if (ws->h.on_close)
		ws->h.on_close(ws->ud, ws, ws->close_code, why ? why : "closed");
}

/* Asks lws for the connection to addr (numeric); SB_OK or why not. */
static int wsc_lws_connect(struct host_ws *ws, const char *addr)
{
	struct lws_context *ctx = server_lws_context(ws->srv);
	struct lws_client_connect_info i;
	struct lws *wsi;

	if (!ctx)
		return SB_ERR_CLOSED;
	memset(&i, 0, sizeof i);
	i.context = ctx;
	if (!(i.vhost = server_client_vhost(ws->srv)))
		return SB_ERR_IO;
	i.address = addr;
	i.port = ws->port;
	i.path = ws->path;
	i.host = ws->host;
	i.origin = ws->host;
	i.ssl_connection = ws->tls ? LCCSCF_USE_SSL : 0;
	i.local_protocol_name = SERVER_WSC_PROTOCOL;
	i.opaque_user_data = ws;
	i.pwsi = &ws->wsi;
	ws->in_connect = true;
	wsi = lws_client_connect_via_info(&i);
	ws->in_connect = false;
	if (!wsi || ws->gone) {
		/* lws may have destroyed a half-made wsi inside the call. */
		ws->wsi = NULL;
		return SB_ERR_HTTP;
	}
	ws->wsi = wsi;
	/* lws on a foreign loop may leave the new connection's next step
	 * waiting for some other event; wake its service now. */
	lws_cancel_service(ctx);
	return SB_OK;
}

static void wsc_resolved(void *ud, int rc, const char *addr)
{
	struct host_ws *ws = ud;
	char why[320];

	ws->resolving = false;
	/* Closed while looking up (its owner, then the server, may be gone). */
	if (ws->detached) {
		wsc_free(ws);
		return;
	}
	if (ws->closing) {
		wsc_report(ws, "closed");
		wsc_free(ws);
		return;
	}
	if (rc != SB_OK) {
		snprintf(why, sizeof why, "cannot connect: cannot resolve %s: %s", ws->host,
		         sb_strerror(rc));
		wsc_report(ws, why);
		wsc_free(ws);
		return;
	}
	if ((rc = wsc_lws_connect(ws, addr)) != SB_OK) {
		snprintf(why, sizeof why, "cannot connect to %s: %s", ws->host, sb_strerror(rc));
		wsc_report(ws, why);
		wsc_free(ws);
	}
}

static bool wsc_numeric(const char *host)
{
	unsigned char a[16];

	return inet_pton(AF_INET, host, a) == 1 || inet_pton(AF_INET6, host, a) == 1;
}

int server_wsc_connect(struct server *s, const char *url, const struct host_ws_handlers *h,
                       void *ud, struct host_ws **out)
{
	const char *prot = NULL, *ads = NULL, *path = NULL;
	struct host_ws *ws = NULL;
	int port = 0, rc;
	size_t plen;

	*out = NULL;
	if (!server_lws_context(s))
		return SB_ERR_CLOSED;
	if (!url || !h || !h->on_close || strlen(url) > SERVER_WSC_URL_MAX)
		return SB_ERR_INVAL;
	rc = SB_ERR_NOMEM;
	ws = calloc(1, sizeof *ws);
	if (!ws || !(ws->url = strdup(url)))
		goto fail;
	buf_init(&ws->rx, SERVER_WSC_MSG_MAX);
	rc = SB_ERR_INVAL;
	if (lws_parse_uri(ws->url, &prot, &ads, &port, &path) || !prot || !ads || !*ads)
		goto fail;
	if (strcmp(prot, "wss") == 0)
		ws->tls = true;
	else if (strcmp(prot, "ws") != 0)
		goto fail;
	rc = SB_ERR_NOMEM;
	plen = strlen(path ? path : "") + 2;
	if (!(ws->path = malloc(plen)))
		goto fail;
	snprintf(ws->path, plen, "/%s", path ? path : "");
	ws->h = *h;
	ws->ud = ud;
	ws->srv = s;
	ws->host = ads;
	ws->port = port;
	if (wsc_numeric(ads)) {
		if ((rc = wsc_lws_connect(ws, ads)) != SB_OK)
			goto fail;
	} else {
		if ((rc = resolve_host(server_loop(s), ads, wsc_resolved, ws)) != SB_OK)
			goto fail;
		ws->resolving = true;
	}
	*out = ws;
	return SB_OK;
fail:
	if (ws)
		wsc_free(ws);
	return rc;
}

int server_wsc_send(struct host_ws *ws, const char *data, size_t len)
{
	struct wsc_out *o;

	if (!ws || ws->detached || ws->closing || ws->gone || (!ws->wsi && !ws->resolving))
		return SB_ERR_CLOSED;
	if (len > SERVER_WSC_MSG_MAX)
		return SB_ERR_TOOBIG;
	o = malloc(sizeof *o + LWS_PRE + len);
	if (!o)
		return SB_ERR_NOMEM;
	o->next = NULL;
	o->len = len;
	memcpy(o->data + LWS_PRE, data, len);
	if (ws->tail)
		ws->tail->next = o;
	else
		ws->head = o;
	ws->tail = o;
	if (ws->established)
		lws_callback_on_writable(ws->wsi);
	return SB_OK;
}

int server_wsc_ping(struct host_ws *ws)
{
	if (!ws || ws->detached || ws->closing || ws->gone || (!ws->wsi && !ws->resolving))
		return SB_ERR_CLOSED;
	ws->ping = true;
	if (ws->established)
		lws_callback_on_writable(ws->wsi);
	return SB_OK;
}

void server_wsc_close(struct host_ws *ws)
{
	if (!ws || ws->detached)
		return;
	ws->detached = true;
	wsc_queue_free(ws);
	/* Reported or gone: lws is finishing it, and WSI_DESTROY frees it. */
	if (ws->gone || ws->reported || !ws->wsi)
		return;
	if (ws->established)
		lws_callback_on_writable(ws->wsi);
	else
		lws_set_timeout(ws->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
}

void server_wsc_shutdown(struct host_ws *ws, bool abrupt)
{
	if (!ws || ws->detached || ws->closing)
		return;
	ws->closing = true;
	wsc_queue_free(ws);
	if (ws->gone || ws->reported || !ws->wsi)
		return;
	/* An open socket always gets a close frame (lws then waits for the
	 * peer's close only so long): with lws 4.1 on a foreign loop, an
	 * asynchronous kill of an open socket left the next connection
	 * unserviced. abrupt only shortens that wait. */
	if (ws->established) {
		lws_callback_on_writable(ws->wsi);
		if (abrupt)
			lws_set_timeout(ws->wsi, PENDING_TIMEOUT_CLOSE_SEND, 2);
	} else {
		lws_set_timeout(ws->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
	}
}

static int wsc_writeable(struct lws *wsi, struct host_ws *ws)
{
	if (ws->detached || ws->closing) {
		if (!ws->close_sent) {
			ws->close_sent = true;
			lws_close_reason(wsi, LWS_CLOSE_STATUS_NORMAL, NULL, 0);
		}
		return -1;
	}
	if (ws->ping) {
		unsigned char buf[LWS_PRE + 4];

		ws->ping = false;
		if (lws_write(wsi, buf + LWS_PRE, 0, LWS_WRITE_PING) < 0)
			return -1;
		if (ws->head)
			lws_callback_on_writable(wsi);
		return 0;
	}
	if (ws->head) {
		struct wsc_out *o = ws->head;

		ws->head = o->next;
		if (!ws->head)
			ws->tail = NULL;
		if (lws_write(wsi, o->data + LWS_PRE, o->len, LWS_WRITE_TEXT) < (int)o->len) {
			free(o);
			return -1;
		}
		free(o);
		if (ws->head)
			lws_callback_on_writable(wsi);
	}
	return 0;
}

static int wsc_receive(struct lws *wsi, struct host_ws *ws, const void *in, size_t len)
{
	if (ws->detached || ws->closing)
		return 0;
	if (buf_append(&ws->rx, in, len) != SB_OK) {
		log_warn("ws-client", "a message is over the size limit; closing",
		         LOG_I("max", SERVER_WSC_MSG_MAX));
		lws_close_reason(wsi, LWS_CLOSE_STATUS_MESSAGE_TOO_LARGE, NULL, 0);
		return -1;
	}
	if (!lws_is_final_fragment(wsi) || lws_remaining_packet_payload(wsi))
		return 0;
	if (ws->h.on_message)
		ws->h.on_message(ws->ud, ws, ws->rx.data ? ws->rx.data : "", ws->rx.len);
	buf_reset(&ws->rx);
	return 0;
}

bool server_wsc_owns(struct lws *wsi)
{
	const struct lws_protocols *p = wsi ? lws_get_protocol(wsi) : NULL;

	return p && p->name && strcmp(p->name, SERVER_WSC_PROTOCOL) == 0;
}

int server_wsc_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                        size_t len)
{
	struct host_ws *ws = wsi ? lws_get_opaque_user_data(wsi) : NULL;
	char why[256];

	(void)user;
	if (!ws)
		return 0;
	switch (reason) {
	case LWS_CALLBACK_CLIENT_ESTABLISHED:
		ws->established = true;
		if (ws->detached || ws->closing || ws->head || ws->ping)
			lws_callback_on_writable(wsi);
		if (!ws->detached && !ws->closing && ws->h.on_open)
			ws->h.on_open(ws->ud, ws);
		return 0;
	case LWS_CALLBACK_CLIENT_RECEIVE:
		return wsc_receive(wsi, ws, in, len);
	case LWS_CALLBACK_CLIENT_RECEIVE_PONG:
		if (!ws->detached && !ws->closing && ws->h.on_pong)
			ws->h.on_pong(ws->ud, ws);
		return 0;
	case LWS_CALLBACK_CLIENT_WRITEABLE:
		return wsc_writeable(wsi, ws);
	case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE:
		if (in && len >= 2)
			ws->close_code =
			    ((const unsigned char *)in)[0] << 8 | ((const unsigned char *)in)[1];
		return 0;
	case LWS_CALLBACK_CLIENT_CONNECTION_ERROR:
		snprintf(why, sizeof why, "cannot connect: %s",
		         in ? (const char *)in : "connection failed");
		if (!ws->in_connect)
			wsc_report(ws, why);
		return 0;
	case LWS_CALLBACK_CLIENT_CLOSED:
		wsc_report(ws, "the connection closed");
		return 0;
	case LWS_CALLBACK_WSI_DESTROY:
		lws_set_opaque_user_data(wsi, NULL);
		ws->gone = true;
		ws->wsi = NULL;
		if (ws->in_connect)
			return 0; /* server_wsc_connect frees it */
		wsc_report(ws, "the connection ended");
		wsc_free(ws);
		return 0;
	default:
		break;
	}
	return 0;
}
