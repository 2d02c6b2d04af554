/*
 * daemon_internal.h - the daemon's state, shared by daemon.c (lifecycle)
 * and daemon_host.c (the host interface modules receive). Nothing outside
 * those two files includes it.
 */
#ifndef SB_GATEWAY_DAEMON_INTERNAL_H
#define SB_GATEWAY_DAEMON_INTERNAL_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "agents/models.h"
#include "bindings/bindings.h"
#include "channels/channel.h"
#include "gateway/daemon/boot.h"
#include "gateway/config/config.h"
#include "gateway/core/host.h"
#include "gateway/core/httpc.h"
#include "gateway/daemon/daemon.h"
#include "gateway/daemon/notify.h"
#include "gateway/pipeline/dispatcher.h"
#include "gateway/obs/events.h"
#include "gateway/obs/metrics.h"
#include "gateway/module.h"
#include "gateway/pipeline/outbox.h"
#include "gateway/pipeline/runner.h"
#include "gateway/sched/scheduler.h"
#include "gateway/http/server.h"
#include "gateway/store/store.h"

#define DAEMON_CHANNELS_MAX (CHANNEL_ACCOUNTS_MAX * CHANNEL_ADAPTERS_MAX)
#define DAEMON_MODULES_MAX 16

enum daemon_state {
	DAEMON_STARTING,
	DAEMON_READY,
	DAEMON_DRAINING,
	DAEMON_STOPPING, /* runs are being aborted; waiting for them to end */
	DAEMON_CLOSING,  /* everything is being closed */
};

/* The model router of one configuration; runs hold it until they end. */
struct models_gen {
	int refs;
	struct models *models;
	struct config *cfg; /* the provider configs the models point into */
};

struct daemon_route {
	host_http_handler fn;
	void *ud;
	struct daemon_route *next;
};

struct daemon {
	uv_loop_t loop;
	const struct daemon_options *opt;
	struct config *cfg;
	struct bindings_table *table;
	struct models_gen *gen;
	struct store *store;
	struct httpc *httpc;
	struct server *server;
	bool not_listening; /* the server holds no listening socket: exit EX_CONFIG */
	/* The address the server listens on: gateway.bind at start (a reload
	 * does not move the listener). */
	char listen_bind[256];
	struct events *events;
	struct runner *runner;
	struct xsync *xsync; /* transcripts' durable copy until synced (gateway/pipeline/xsync.h) */
	struct approvals *approvals; /* gate 3 (gateway/pipeline/approvals_notify.h) */
	struct dispatcher *dispatcher;
	struct outbox *outbox;
	struct scheduler *scheduler; /* heartbeats and cron jobs */
	struct metrics metrics;
	struct host host;
	struct gateway_ctx gctx;
	enum daemon_state state;
	int lock_fd;
	bool runtime_written; /* gateway.runtime.json is ours to remove */
	struct {
		uv_work_t work;
		char bind[256];
		char path[256];
		int port;
		int rc;
	} runtime; /* its write, on the thread pool */
	struct notify notify; /* the service manager's socket (notify.h) */
	bool reload_notified; /* RELOADING=1 was sent; READY=1 is owed */
	bool stop_notified;   /* STOPPING=1 was sent */

	struct channel *channels[DAEMON_CHANNELS_MAX];
	size_t n_channels;
	void *module_state[DAEMON_MODULES_MAX];
	size_t n_modules;
	struct daemon_route *routes;
	struct boot *boot; /* BOOT.md runs (gateway/daemon/boot.c) */

	uv_signal_t sig_term, sig_int, sig_hup;
	uv_timer_t stats_timer, drain_timer, reload_timer;
	uv_fs_event_t cfg_watch;
	bool watching;
	bool stats_busy;
	bool reloading;           /* a reload is being read on the thread pool */
	const char *reload_again; /* why another reload was asked for meanwhile */
	uint64_t drain_deadline;
	uint64_t started_ns;
	char cfg_path[PATH_MAX]; /* the file watched */
	char cfg_dir[PATH_MAX];
	char cfg_base[256];
	bool cfg_on_dir; /* the file was missing: its directory is watched instead */
};

/* daemon_host.c */
void daemon_host_init(struct daemon *d);
void daemon_routes_free(struct daemon *d);
struct models_gen *daemon_gen_new(struct daemon *d, struct config *cfg);
void daemon_gen_unref(struct models_gen *g);
struct models *daemon_models_acquire(void *ud, struct config **cfg, void **token);
void daemon_models_release(void *ud, struct config *cfg, void *token);
struct channel *daemon_channel(void *ud, const char *name, const char *account);
/* The dispatcher's activity hook: tells the message's channel instance. */
void daemon_channel_activity(void *ud, const struct envelope *env, bool running);
/* Per channel: {"available", "running", "accounts": [{accountId, ...}]}. */
json_t *daemon_channels_status(void *ud);
struct config *daemon_config_get(void *ud);
const struct bindings_table *daemon_table_get(void *ud);
void daemon_outbox_kick(void *ud);
int64_t daemon_outbox_lease(void *ud);
void daemon_outbox_take(void *ud, size_t leased, int rc, const struct store_outbox_item *items,
                        size_t n);

#endif
