/*
 * server_ws.c - WebSocket endpoints on the gateway's HTTP server. See
 * server_ws.h; gateway/http/server.c hands every WebSocket callback reason here.
 *
 * Clients that upgrade without asking for a subprotocol (the usual case)
 * land on the vhost's first protocol, the HTTP one, so this layer shares its
 * lws callback and its per-session data: a pointer to the struct server_ws.
 * The struct is created when lws reports the connection established and
 * freed when lws reports it closed; a module that goes away first
 * (server_ws_endpoint_remove) only detaches itself, so no callback ever
 * reaches a freed module.
 *
 * Everything written goes through the connection's queue and is written
 * one message per writeable callback, the close frame last.
 */
#include "gateway/http/server_ws.h"
#include "gateway/http/server_ws_internal.h"

#include <stdlib.h>
#include <string.h>

#include "gateway/core/buf.h"
#include "gateway/core/err.h"
#include "gateway/core/log.h"

#define SWS_ENDPOINTS_MAX 8
#define SWS_PATH_MAX 2048
#define SWS_HEADER_MAX 512  /* Origin, Host */
#define SWS_COOKIE_MAX 8192 /* Cookie */
#define SWS_MIN_MESSAGE 1024
#define SWS_DEFAULT_MAX_MESSAGE ((size_t)64 << 10)
#define SWS_DEFAULT_MAX_QUEUED ((size_t)8 << 20)
#define SWS_DEFAULT_PING_MS 30000
#define SWS_TICK_MS 1000
/* A close that cannot be written (a client that stopped reading) is cut
 * after this long. */
#define SWS_CLOSE_GRACE_S 3
/* The opcode lws_write() takes for a close frame: lws keeps it out of its
 * public enum (lws_close_reason() is meant to do it), but it is part of the
 * ABI; see sws_writeable() for why it is written here. */
#define SWS_WRITE_CLOSE ((enum lws_write_protocol)4)
/* Receive buffers above this are released between messages. */
#define SWS_RX_KEEP ((size_t)64 << 10)

struct sws_msg {
	struct sws_msg *next;
	size_t len;
	unsigned char data[]; /* LWS_PRE bytes of room, then len bytes */
};

struct server_ws_endpoint {
	struct server_ws_hub *hub;
	char *path;
	struct server_ws_ops ops;
	void *ud;
	struct server_ws_limits lim;
};

struct server_ws {
	struct server_ws_hub *hub;
	struct server_ws_endpoint *ep; /* NULL once detached from its module */
	struct lws *wsi;               /* NULL once lws closed it */
	void *conn;
	char peer[64];
	char *path;
	char *origin; /* the upgrade's Origin, Host and Cookie headers ("" when absent) */
	char *host;
	char *cookie;
	struct buf rx;
	size_t max_message;
	struct sws_msg *q_head, *q_tail;
	size_t queued;
	size_t max_queued;
	bool closing;   /* a close was asked for */
	bool close_now; /* ... without writing what is queued */
	int close_code; /* ours, when closing */
	char close_reason[124];
	int peer_code; /* from the client's close frame */
	uint64_t last_rx;
	bool ping_due, ping_sent;
	struct server_ws *prev, *next;
};

struct server_ws_hub {
	uv_loop_t *loop;
	uv_timer_t *timer;
	struct server_ws_endpoint *eps[SWS_ENDPOINTS_MAX];
	size_t n_eps;
	struct server_ws *conns;
	size_t n_conns;
	bool draining, closing;
};

/* ---- helpers ---- */

static void sws_queue_clear(struct server_ws *ws)
{
	while (ws->q_head) {
		struct sws_msg *m = ws->q_head;

		ws->q_head = m->next;
		free(m);
	}
	ws->q_tail = NULL;
	ws->queued = 0;
}

static void sws_unlink(struct server_ws *ws)
{
	struct server_ws_hub *h = ws->hub;

	if (ws->prev)
		ws->prev->next = ws->next;
	else if (h->conns == ws)
		h->conns = ws->next;
	if (ws->next)
		ws->next->prev = ws->prev;
	ws->prev = ws->next = NULL;
	h->n_conns--;
}

static void sws_free(struct server_ws *ws)
{
	sws_unlink(ws);
	sws_queue_clear(ws);
	buf_free(&ws->rx);
	free(ws->path);
	free(ws->origin);
	free(ws->host);
	free(ws->cookie);
	free(ws);
}

/* A copy of one header of the upgrade request ("" when absent); NULL on no
 * memory. A value longer than max is "" too, or with cut its first max
 * bytes: an Origin too long to keep must still be seen as a browser's (and
 * refused), never as no Origin at all. */
static char *sws_header_copy(struct lws *wsi, enum lws_token_indexes tok, size_t max, bool cut)
{
	int n = lws_hdr_total_length(wsi, tok);
	char *out;

	if (n <= 0 || ((size_t)n > max && !cut))
		return strdup("");
	out = calloc(1, (size_t)n + 1);
	if (out && lws_hdr_copy(wsi, out, n + 1, tok) < 0)
		out[0] = '\0';
	if (out && (size_t)n > max)
		out[max] = '\0';
	return out;
}

static struct server_ws_endpoint *sws_find(const struct server_ws_hub *h, const char *path)
{
	for (size_t i = 0; i < h->n_eps; i++)
		if (strcmp(h->eps[i]->path, path) == 0)
			return h->eps[i];
	return NULL;
}

/* The endpoint of the request being upgraded, from its URI (no query). */
static struct server_ws_endpoint *sws_endpoint_of(const struct server_ws_hub *h, struct lws *wsi)
{
	char uri[SWS_PATH_MAX];

	if (lws_hdr_total_length(wsi, WSI_TOKEN_GET_URI) <= 0 ||
	    lws_hdr_copy(wsi, uri, (int)sizeof uri, WSI_TOKEN_GET_URI) <= 0)
		return NULL;
	return sws_find(h, uri);
}

static void sws_close_as(struct server_ws *ws, int code, const char *reason, bool now)
{
	if (!ws->wsi || (ws->closing && !now))
		return;
	if (!ws->closing) {
		ws->close_code = code;
		snprintf(ws->close_reason, sizeof ws->close_reason, "%s", reason ? reason : "");
	}
	ws->closing = true;
	if (now) {
		ws->close_now = true;
		sws_queue_clear(ws);
	}
	lws_callback_on_writable(ws->wsi);
	lws_set_timeout(ws->wsi, PENDING_TIMEOUT_CLOSE_SEND, SWS_CLOSE_GRACE_S);
}

/* ---- public ---- */

int server_ws_endpoint_add(struct server *s, const char *path, const struct server_ws_ops *ops,
                           void *ud, const struct server_ws_limits *lim,
                           struct server_ws_endpoint **out)
{
	struct server_ws_hub *h = server_ws_hub_of(s);
	struct server_ws_endpoint *ep = NULL;
	int rc = SB_ERR_INVAL;

	*out = NULL;
	if (!h || !path || !*path || strlen(path) >= SWS_PATH_MAX || !ops || !ops->open ||
	    !ops->message || !ops->closed)
		goto out;
	rc = SB_ERR_EXISTS;
	if (sws_find(h, path))
		goto out;
	rc = SB_ERR_TOOBIG;
	if (h->n_eps >= SWS_ENDPOINTS_MAX)
		goto out;
	rc = SB_ERR_NOMEM;
	ep = calloc(1, sizeof *ep);
	if (!ep || !(ep->path = strdup(path)))
		goto out;
	ep->hub = h;
	ep->ops = *ops;
	ep->ud = ud;
	if (lim)
		ep->lim = *lim;
	if (ep->lim.max_message < SWS_MIN_MESSAGE)
		ep->lim.max_message = SWS_DEFAULT_MAX_MESSAGE;
	if (!ep->lim.max_queued)
		ep->lim.max_queued = SWS_DEFAULT_MAX_QUEUED;
	if (ep->lim.ping_interval_ms <= 0)
		ep->lim.ping_interval_ms = SWS_DEFAULT_PING_MS;
	if (ep->lim.idle_timeout_ms <= 0)
		ep->lim.idle_timeout_ms = 2 * ep->lim.ping_interval_ms;
	h->eps[h->n_eps++] = ep;
	*out = ep;
	ep = NULL;
	rc = SB_OK;
out:
	if (ep)
		free(ep->path);
	free(ep);
	return rc;
}

void server_ws_endpoint_remove(struct server_ws_endpoint *ep, int code, const char *reason)
{
	struct server_ws_hub *h;

	if (!ep)
		return;
	h = ep->hub;
	for (struct server_ws *ws = h->conns; ws; ws = ws->next) {
		if (ws->ep != ep)
			continue;
		ws->ep = NULL;
		sws_close_as(ws, code, reason, false);
	}
	for (size_t i = 0; i < h->n_eps; i++) {
		if (h->eps[i] != ep)
			continue;
		h->eps[i] = h->eps[--h->n_eps];
		break;
	}
	free(ep->path);
	free(ep);
}

int server_ws_send(struct server_ws *ws, const char *data, size_t len)
{
	struct sws_msg *m;

	if (!ws->wsi || ws->closing)
		return SB_ERR_CLOSED;
	if (len > ws->max_queued - ws->queued) {
		log_warn("ws", "client reads too slowly; dropping it", LOG_S("peer", ws->peer),
		         LOG_I("queued_bytes", ws->queued));
		sws_close_as(ws, SERVER_WS_POLICY, "slow consumer", true);
		return SB_ERR_TOOBIG;
	}
	m = malloc(sizeof *m + LWS_PRE + len);
	if (!m)
		return SB_ERR_NOMEM;
	m->next = NULL;
	m->len = len;
	memcpy(m->data + LWS_PRE, data, len);
	if (ws->q_tail)
		ws->q_tail->next = m;
	else
		ws->q_head = m;
	ws->q_tail = m;
	ws->queued += len;
	lws_callback_on_writable(ws->wsi);
	return SB_OK;
}

void server_ws_close(struct server_ws *ws, int code, const char *reason)
{
	sws_close_as(ws, code, reason, false);
}

void server_ws_set_max_message(struct server_ws *ws, size_t max)
{
	ws->max_message = max < SWS_MIN_MESSAGE ? SWS_MIN_MESSAGE : max;
	ws->rx.max = ws->max_message;
}

const char *server_ws_peer(const struct server_ws *ws)
{
	return ws->peer;
}

const char *server_ws_path(const struct server_ws *ws)
{
	return ws->path ? ws->path : "";
}

const char *server_ws_origin(const struct server_ws *ws)
{
	return ws->origin ? ws->origin : "";
}

const char *server_ws_host(const struct server_ws *ws)
{
	return ws->host ? ws->host : "";
}

const char *server_ws_cookie(const struct server_ws *ws)
{
	return ws->cookie ? ws->cookie : "";
}

size_t server_ws_queued(const struct server_ws *ws)
{
	return ws->queued;
}

size_t server_ws_count(const struct server *s)
{
	const struct server_ws_hub *h = server_ws_hub_of(s);

	return h ? h->n_conns : 0;
}

/* ---- the hub ---- */

static void sws_timer_closed(uv_handle_t *t)
{
	free(t);
}

/* Pings quiet connections and closes dead ones. */
static void sws_tick(uv_timer_t *t)
{
	struct server_ws_hub *h = t->data;
	uint64_t now = uv_now(h->loop);

	for (struct server_ws *ws = h->conns; ws; ws = ws->next) {
		const struct server_ws_endpoint *ep = ws->ep;
		uint64_t idle = now - ws->last_rx;

		if (!ws->wsi || ws->closing || !ep)
			continue;
		if (idle >= (uint64_t)ep->lim.idle_timeout_ms) {
			log_info("ws", "closing an idle connection", LOG_S("peer", ws->peer),
			         LOG_I("idle_ms", (int64_t)idle));
			sws_close_as(ws, SERVER_WS_GOING_AWAY, "idle timeout", true);
		} else if (idle >= (uint64_t)ep->lim.ping_interval_ms && !ws->ping_sent &&
		           !ws->ping_due) {
			ws->ping_due = true;
			lws_callback_on_writable(ws->wsi);
		}
	}
}

int server_ws_hub_new(struct server_ws_hub **out, uv_loop_t *loop)
{
	struct server_ws_hub *h = calloc(1, sizeof *h);

	*out = NULL;
	if (!h)
		return SB_ERR_NOMEM;
	h->loop = loop;
	h->timer = calloc(1, sizeof *h->timer);
	if (!h->timer) {
		free(h);
		return SB_ERR_NOMEM;
	}
	uv_timer_init(loop, h->timer);
	h->timer->data = h;
	uv_timer_start(h->timer, sws_tick, SWS_TICK_MS, SWS_TICK_MS);
	/* The timer alone must not keep the loop running. */
	uv_unref((uv_handle_t *)h->timer);
	*out = h;
	return SB_OK;
}

void server_ws_hub_drain(struct server_ws_hub *h)
{
	if (h)
		h->draining = true;
}

void server_ws_hub_close(struct server_ws_hub *h)
{
	if (!h || h->closing)
		return;
	h->closing = true;
	uv_timer_stop(h->timer);
	uv_close((uv_handle_t *)h->timer, sws_timer_closed);
	h->timer = NULL;
	for (struct server_ws *ws = h->conns; ws; ws = ws->next)
		ws->ep = NULL;
}

void server_ws_hub_free(struct server_ws_hub *h)
{
	if (!h)
		return;
	if (h->timer) {
		uv_timer_stop(h->timer);
		uv_close((uv_handle_t *)h->timer, sws_timer_closed);
	}
	while (h->conns)
		sws_free(h->conns);
	for (size_t i = 0; i < h->n_eps; i++) {
		free(h->eps[i]->path);
		free(h->eps[i]);
	}
	free(h);
}

/* ---- the lws callback ---- */

void server_ws_keep(struct server_ws *ws)
{
	if (ws && ws->wsi)
		server_conn_hold(ws->wsi);
}

bool server_ws_handles(enum lws_callback_reasons reason)
{
	switch (reason) {
	case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION:
	case LWS_CALLBACK_ESTABLISHED:
	case LWS_CALLBACK_RECEIVE:
	case LWS_CALLBACK_RECEIVE_PONG:
	case LWS_CALLBACK_SERVER_WRITEABLE:
	case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE:
	case LWS_CALLBACK_CLOSED:
		return true;
	default:
		return false;
	}
}

static int sws_established(struct server_ws_hub *h, struct lws *wsi, struct server_ws **slot)
{
	struct server_ws_endpoint *ep = sws_endpoint_of(h, wsi);
	struct server_ws *ws;

	if (!ep || !slot || h->closing)
		return -1;
	ws = calloc(1, sizeof *ws);
	if (!ws || !(ws->path = strdup(ep->path)) ||
	    !(ws->origin = sws_header_copy(wsi, WSI_TOKEN_ORIGIN, SWS_HEADER_MAX, true)) ||
	    !(ws->host = sws_header_copy(wsi, WSI_TOKEN_HOST, SWS_HEADER_MAX, false)) ||
	    !(ws->cookie = sws_header_copy(wsi, WSI_TOKEN_HTTP_COOKIE, SWS_COOKIE_MAX, false))) {
		if (ws) {
			free(ws->path);
			free(ws->origin);
			free(ws->host);
		}
		free(ws);
		return -1;
	}
	ws->hub = h;
	ws->ep = ep;
	ws->wsi = wsi;
	ws->max_message = ep->lim.max_message;
	ws->max_queued = ep->lim.max_queued;
	buf_init(&ws->rx, ws->max_message);
	ws->last_rx = uv_now(h->loop);
	lws_get_peer_simple(wsi, ws->peer, sizeof ws->peer);
	ws->next = h->conns;
	if (h->conns)
		h->conns->prev = ws;
	h->conns = ws;
	h->n_conns++;
	*slot = ws;
	if (ep->ops.open(ep->ud, ws, &ws->conn) != SB_OK) {
		ws->ep = NULL;
		sws_close_as(ws, SERVER_WS_INTERNAL, "cannot accept the connection", true);
	}
	return 0;
}

static int sws_receive(struct server_ws *ws, struct lws *wsi, const void *in, size_t len)
{
	ws->last_rx = uv_now(ws->hub->loop);
	ws->ping_sent = false;
	if (ws->closing)
		return 0; /* whatever else arrives is ignored */
	if (lws_frame_is_binary(wsi)) {
		buf_free(&ws->rx);
		buf_init(&ws->rx, ws->max_message);
		sws_close_as(ws, SERVER_WS_UNSUPPORTED, "binary frames are not supported", true);
		return 0;
	}
	if (lws_is_first_fragment(wsi))
		buf_reset(&ws->rx);
	if (ws->rx.len + len + lws_remaining_packet_payload(wsi) > ws->max_message ||
	    buf_append(&ws->rx, in, len) != SB_OK) {
		log_info("ws", "message over the size cap; closing", LOG_S("peer", ws->peer),
		         LOG_I("max_bytes", (int64_t)ws->max_message));
		buf_free(&ws->rx);
		buf_init(&ws->rx, ws->max_message);
		sws_close_as(ws, SERVER_WS_TOO_BIG, "message too big", true);
		return 0;
	}
	if (!lws_is_final_fragment(wsi))
		return 0;
	if (ws->ep)
		ws->ep->ops.message(ws->conn, ws->rx.data ? ws->rx.data : "", ws->rx.len);
	if (ws->rx.cap > SWS_RX_KEEP) {
		buf_free(&ws->rx);
		buf_init(&ws->rx, ws->max_message);
	} else {
		buf_reset(&ws->rx);
	}
	return 0;
}

static int sws_writeable(struct server_ws *ws, struct lws *wsi)
{
	struct sws_msg *m;
	int n;

	if (ws->close_now || (ws->closing && !ws->q_head)) {
		/* The close frame is written here rather than left to
		 * lws_close_reason(): with the libuv event loop, lws 4.1 kills
		 * the connection before writing the frame it prepared. */
		unsigned char frame[LWS_PRE + 2 + sizeof ws->close_reason];
		size_t rlen = strlen(ws->close_reason);

		frame[LWS_PRE] = (unsigned char)(ws->close_code >> 8);
		frame[LWS_PRE + 1] = (unsigned char)(ws->close_code & 0xff);
		memcpy(frame + LWS_PRE + 2, ws->close_reason, rlen);
		lws_write(wsi, frame + LWS_PRE, 2 + rlen, SWS_WRITE_CLOSE);
		return -1;
	}
	if (ws->ping_due) {
		/* Not empty: lws reports a pong with no payload to nobody. */
		unsigned char ping[LWS_PRE + 4];

		memcpy(ping + LWS_PRE, "ping", 4);
		ws->ping_due = false;
		ws->ping_sent = true;
		if (lws_write(wsi, ping + LWS_PRE, 4, LWS_WRITE_PING) < 0)
			return -1;
		if (ws->q_head || ws->closing)
			lws_callback_on_writable(wsi);
		return 0;
	}
	m = ws->q_head;
	if (!m)
		return 0;
	ws->q_head = m->next;
	if (!ws->q_head)
		ws->q_tail = NULL;
	ws->queued -= m->len;
	n = lws_write(wsi, m->data + LWS_PRE, m->len, LWS_WRITE_TEXT);
	if (n < 0 || (size_t)n < m->len) {
		free(m);
		return -1;
	}
	free(m);
	if (ws->q_head || ws->closing)
		lws_callback_on_writable(wsi);
	return 0;
}

static int sws_closed(struct server_ws **slot)
{
	struct server_ws *ws = *slot;
	int code;

	if (!ws)
		return 0;
	*slot = NULL;
	ws->wsi = NULL;
	code = ws->closing ? ws->close_code : (ws->peer_code ? ws->peer_code : SERVER_WS_ABNORMAL);
	if (ws->ep)
		ws->ep->ops.closed(ws->conn, code);
	sws_free(ws);
	return 0;
}

int server_ws_callback(struct server_ws_hub *h, struct lws *wsi, enum lws_callback_reasons reason,
                       struct server_ws **slot, void *in, size_t len)
{
	struct server_ws *ws = slot ? *slot : NULL;

	switch (reason) {
	case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION:
		/* Refuse upgrades while stopping and on paths nobody serves. */
		if (!h || h->draining || h->closing || !sws_endpoint_of(h, wsi))
			return 1;
		return 0;
	case LWS_CALLBACK_ESTABLISHED:
		return h ? sws_established(h, wsi, slot) : -1;
	case LWS_CALLBACK_RECEIVE:
		return ws ? sws_receive(ws, wsi, in, len) : -1;
	case LWS_CALLBACK_RECEIVE_PONG:
		if (ws) {
			ws->last_rx = uv_now(ws->hub->loop);
			ws->ping_sent = false;
		}
		return 0;
	case LWS_CALLBACK_SERVER_WRITEABLE:
		return ws ? sws_writeable(ws, wsi) : 0;
	case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE:
		if (ws)
			ws->peer_code = len >= 2 ? ((const unsigned char *)in)[0] << 8 |
			                               ((const unsigned char *)in)[1]
			                         : SERVER_WS_NO_STATUS;
		return 0;
	case LWS_CALLBACK_CLOSED:
		return slot ? sws_closed(slot) : 0;
	default:
		return 0;
	}
}
