/*
 * module.h - the gateway's own optional parts (the WebSocket control plane,
 * the OpenAI-compatible endpoint, ...) as a table of operations, started and
 * stopped by the daemon in list order.
 *
 * Loop thread only.
 */
#ifndef SB_GATEWAY_MODULE_H
#define SB_GATEWAY_MODULE_H

#include <stddef.h>
#include <jansson.h>
#include <uv.h>

#include "gateway/core/host.h"

struct server;
struct events;
struct dispatcher;
struct store;
struct metrics;
struct scheduler;

/* What a module may use; valid from start to stop. */
struct gateway_ctx {
	uv_loop_t *loop;
	const struct host *host; /* ingest, http routes, config, await_reply, ... */
	struct server *server;   /* for WebSocket endpoints */
	struct events *events;
	struct dispatcher *dispatcher;
	struct store *store;
	struct metrics *metrics;
	struct scheduler *scheduler; /* heartbeats and cron jobs */
	const char *home;
	struct approvals *approvals; /* pending tool approvals (agents/safety/approvals.h) */
	/* The channel instances' state, keyed by channel name (a new
	 * reference): {"available", "running", "accounts": [...]}. */
	json_t *(*channels_status)(void *ud);
	void *ud;
};

struct gateway_module_ops {
	const char *name;
	/* Mandatory. *state is the module's own. */
	int (*start)(const struct gateway_ctx *ctx, void **state);
	/* Optional: stop taking new work (SIGTERM). */
	void (*drain)(void *state);
	/* Optional: work in flight (the drain waits for it). */
	size_t (*busy)(void *state);
	/* Mandatory: stop and free; the loop runs afterwards to close handles. */
	void (*stop)(void *state);
};

/* The modules, NULL-terminated (gateway/daemon/modules.c). */
extern const struct gateway_module_ops *const gateway_modules[];

#endif
