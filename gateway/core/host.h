/*
 * host.h - what the daemon gives each module when it starts it.
 *
 * Modules (channels, agents, workspaces) never include daemon internals:
 * everything they need from the gateway comes through this table, set by the
 * daemon. All functions: loop thread only. Every callback runs later on the
 * loop thread, never from inside the call that scheduled it.
 */
#ifndef SB_CORE_HOST_H
#define SB_CORE_HOST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "gateway/core/envelope.h"
#include "gateway/core/httpc.h"

struct config;

/* rc SB_OK: the message is durably in the inbox (only now may the adapter
 * acknowledge its sender); duplicate: it was there already (acknowledge, do
 * not process again). SB_ERR_AGAIN: the store is saturated, ask the sender
 * to retry later (429/503). Other codes: the store failed (5xx). */
typedef void (*host_ingest_cb)(void *ud, int rc, int64_t inbox_id, bool duplicate);

/* rc SB_OK: the outbound message is durably in the outbox. */
typedef void (*host_deliver_cb)(void *ud, int rc, int64_t outbox_id, bool duplicate);

struct host_outbound {
	const char *idempotency_key; /* unique per reply; a retried put is a no-op */
	const char *channel;
	const char *account;
	const char *target;  /* channel-specific destination */
	const char *payload; /* JSON text */
	int64_t due_at;      /* unix ms; 0 = now */
};

/* An HTTP request routed to a module (webhooks, Slack events, ...). The
 * functions behind it live in the daemon's HTTP server; the request stays
 * valid until it is answered with respond (exactly once, now or later). */
struct host_http_req;

struct host_http_ops {
	const char *(*method)(const struct host_http_req *r); /* "GET", "POST", ... */
	const char *(*path)(const struct host_http_req *r);
	const char *(*query)(const struct host_http_req *r);
	const char *(*body)(const struct host_http_req *r, size_t *len);
	/* Copies a header's value into out; its length, or -1 when absent. */
	int (*header)(struct host_http_req *r, const char *name, char *out, size_t size);
	const char *(*peer)(const struct host_http_req *r);
	/* headers: NULL-terminated "Name: value" list, or NULL. */
	int (*respond)(struct host_http_req *r, int status, const char *content_type,
	               const void *body, size_t len, const char *const *headers);
};

typedef void (*host_http_handler)(void *ud, struct host_http_req *req);

/* The outcome of the agent run that answered one inbound message: the reply
 * text (what was put in the outbox), or why there is none. */
struct host_reply {
	int64_t inbox_id;
	int rc;               /* SB_OK, SB_ERR_TIMEOUT (waited too long), other errors */
	const char *text;     /* the reply ("" when the agent gave none) */
	const char *status;   /* "end_turn", "aborted", "denied", "pairing", ... */
	int64_t input_tokens; /* the run's model usage, summed; 0 when unknown */
	int64_t output_tokens;
};

typedef void (*host_reply_cb)(void *ud, const struct host_reply *reply);

/* value NULL with rc SB_ERR_NOTFOUND when the key has none. value is lent
 * for the call. */
typedef void (*host_kv_get_cb)(void *ud, int rc, const char *value);
typedef void (*host_kv_put_cb)(void *ud, int rc);

/* A WebSocket client connection on the loop (Slack Socket Mode, ...). */
struct host_ws;

struct host_ws_handlers {
	/* The opening handshake completed. */
	void (*on_open)(void *ud, struct host_ws *ws);
	/* One whole message (text or binary), lent for the call. */
	void (*on_message)(void *ud, struct host_ws *ws, const char *data, size_t len);
	/* A pong answered a ws_ping. Optional. */
	void (*on_pong)(void *ud, struct host_ws *ws);
	/* The connection could not be made, or it ended: code is the close
	 * code the peer sent (0 when none), why a reason lent for the call.
	 * ws is gone when this returns. Never called after ws_close. */
	void (*on_close)(void *ud, struct host_ws *ws, int code, const char *why);
};

struct host {
	void *ctx;
	uv_loop_t *loop;
	/* Durably accepts one inbound message. */
	int (*ingest)(void *ctx, const struct envelope *env, host_ingest_cb cb, void *ud);
	/* Durably queues one outbound message for its channel's sender. */
	int (*deliver)(void *ctx, const struct host_outbound *msg, host_deliver_cb cb, void *ud);
	/* The shared HTTP client (curl multi on the loop). */
	struct httpc *(*http_client)(void *ctx);
	/* The current configuration snapshot, with a reference the caller
	 * drops with config_release (modules cannot call config_unref). */
	struct config *(*config)(void *ctx);
	void (*config_release)(void *ctx, struct config *cfg);
	/* Routes requests for path (a prefix when prefix is true) to handler;
	 * name labels the route in metrics. Methods: "POST", "GET", ... as a
	 * comma-separated list. Requests use http_ops. */
	int (*http_route)(void *ctx, const char *name, const char *path, bool prefix,
	                  const char *methods, host_http_handler handler, void *ud);
	const struct host_http_ops *http_ops;
	/* Calls cb once the message inbox_id has been answered (or after
	 * timeout_ms with rc SB_ERR_TIMEOUT); a message answered before the call
	 * (also before a restart) gets the reply committed with it. For
	 * synchronous webhooks and retries of the OpenAI endpoint. */
	int (*await_reply)(void *ctx, int64_t inbox_id, int64_t timeout_ms, host_reply_cb cb,
	                   void *ud);
	/* Small durable values (a poll offset, a cursor) in the store's kv
	 * table; ns names the owner ("telegram:<account>"). A put is durable
	 * when its callback reports SB_OK; a put of value NULL deletes the key.
	 * Operations run in the order they are made. */
	int (*kv_get)(void *ctx, const char *ns, const char *key, host_kv_get_cb cb, void *ud);
	int (*kv_put)(void *ctx, const char *ns, const char *key, const char *value,
	              host_kv_put_cb cb, void *ud);
	/* Opens a WebSocket client connection to url (ws:// or wss://, the
	 * server's certificate checked against the system CAs). h is copied.
	 * The handlers run later, never inside the call; *out is valid until
	 * on_close returns or ws_close is called. SB_ERR_CLOSED when the
	 * gateway is closing; SB_ERR_INVAL for a bad URL. */
	int (*ws_connect)(void *ctx, const char *url, const struct host_ws_handlers *h, void *ud,
	                  struct host_ws **out);
	/* Queues one text message (copied). */
	int (*ws_send)(void *ctx, struct host_ws *ws, const char *data, size_t len);
	/* Queues a ping; the pong goes to on_pong. */
	int (*ws_ping)(void *ctx, struct host_ws *ws);
	/* Closes the connection (close code 1000 when it is open); no handler
	 * runs for it any more and ws may not be used again. */
	void (*ws_close)(void *ctx, struct host_ws *ws);
	/* Starts closing the connection but keeps its handlers: nothing more
	 * is delivered, and on_close runs once the socket is really gone (so
	 * that a new one can be opened after it, never beside it). abrupt:
	 * drop the TCP connection without a close handshake (a dead peer). */
	void (*ws_shutdown)(void *ctx, struct host_ws *ws, bool abrupt);
};

#endif
