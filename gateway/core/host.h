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
	 * drops with config_unref. */
	struct config *(*config)(void *ctx);
};

#endif
