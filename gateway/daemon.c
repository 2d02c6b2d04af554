/*
 * daemon.c - see daemon.h.
 *
 * Start-up order: config -> lock the home -> store (migrations) -> HTTP
 * server -> ready. Stop: not ready (readyz 503) -> refuse new connections ->
 * wait for in-flight requests up to gateway.drain_timeout -> destroy the lws
 * context, close the HTTP client and the store (which finishes every queued
 * operation) -> run the loop until every handle is closed -> exit 0.
 */
#include "gateway/daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "gateway/config.h"
#include "gateway/core/err.h"
#include "gateway/core/host.h"
#include "gateway/core/httpc.h"
#include "gateway/core/log.h"
#include "gateway/metrics.h"
#include "gateway/server.h"
#include "gateway/store.h"

#define DAEMON_STATS_MS 1000
#define DAEMON_DRAIN_POLL_MS 20
#define DAEMON_RELOAD_DEBOUNCE_MS 100

enum daemon_state { DAEMON_STARTING, DAEMON_READY, DAEMON_DRAINING, DAEMON_STOPPING };

static const char *const daemon_state_names[] = {"starting", "ready", "draining", "stopping"};

struct daemon {
	uv_loop_t loop;
	const struct daemon_options *opt;
	struct config *cfg;
	struct store *store;
	struct httpc *httpc;
	struct server *server;
	struct metrics metrics;
	struct host host;
	enum daemon_state state;
	int lock_fd;

	uv_signal_t sig_term, sig_int, sig_hup;
	uv_timer_t stats_timer, drain_timer, reload_timer;
	uv_fs_event_t cfg_watch;
	bool watching;
	bool stats_busy;
	uint64_t drain_deadline;
	uint64_t started_ns;
	char cfg_dir[PATH_MAX];
	char cfg_base[256];
};

/* ---- logging from the config ---- */

static void daemon_apply_logging(const struct config *cfg)
{
	static const enum log_level levels[] = {LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR};

	log_configure(levels[cfg->log.level],
	              cfg->log.format == CONFIG_LOG_JSON ? LOG_FORMAT_JSON : LOG_FORMAT_LOGFMT,
	              NULL);
	log_set_secrets((const char *const *)cfg->secrets, cfg->n_secrets);
}

static void daemon_log_config_errors(const struct cfg_errors *errs, const char *what)
{
	for (size_t i = 0; i < errs->n; i++) {
		const struct cfg_error *e = &errs->v[i];
		char where[PATH_MAX + 32];

		snprintf(where, sizeof where, "%s:%d:%d", e->file ? e->file : "?", e->line, e->col);
		log_error("config", what, LOG_S("at", where), LOG_S("key", e->path ? e->path : ""),
		          LOG_S("error", e->msg ? e->msg : ""),
		          LOG_S("hint", e->hint ? e->hint : ""));
	}
}

/* ---- the host interface ---- */

struct daemon_ingest {
	struct daemon *d;
	host_ingest_cb cb;
	void *ud;
};

static void daemon_ingest_done(void *ud, int rc, int64_t id, bool duplicate)
{
	struct daemon_ingest *in = ud;

	if (rc)
		in->d->metrics.ingest_rejected++;
	else if (duplicate)
		in->d->metrics.ingest_duplicates++;
	else
		in->d->metrics.ingest_accepted++;
	in->cb(in->ud, rc, id, duplicate);
	free(in);
}

static int daemon_ingest(void *ctx, const struct envelope *env, host_ingest_cb cb, void *ud)
{
	struct daemon *d = ctx;
	struct store_inbox_new m;
	struct daemon_ingest *in;
	char *json;
	int rc;

	if (d->state != DAEMON_READY)
		return SB_ERR_AGAIN;
	if (!env->channel || !env->event_id)
		return SB_ERR_INVAL;
	in = malloc(sizeof *in);
	json = envelope_to_json(env);
	if (!in || !json) {
		free(in);
		free(json);
		return SB_ERR_NOMEM;
	}
	in->d = d;
	in->cb = cb;
	in->ud = ud;
	m.channel = env->channel;
	m.account = env->account ? env->account : "default";
	m.dedupe_key = env->event_id;
	m.payload = json;
	rc = d->store->ops->inbox_put(d->store, &m, daemon_ingest_done, in);
	free(json);
	if (rc) {
		d->metrics.ingest_rejected++;
		free(in);
	}
	return rc;
}

struct daemon_deliver {
	host_deliver_cb cb;
	void *ud;
};

static void daemon_deliver_done(void *ud, int rc, int64_t id, bool duplicate)
{
	struct daemon_deliver *dl = ud;

	dl->cb(dl->ud, rc, id, duplicate);
	free(dl);
}

static int daemon_deliver(void *ctx, const struct host_outbound *msg, host_deliver_cb cb, void *ud)
{
	struct daemon *d = ctx;
	struct store_outbox_new m;
	struct daemon_deliver *dl = malloc(sizeof *dl);
	int rc;

	if (!dl)
		return SB_ERR_NOMEM;
	dl->cb = cb;
	dl->ud = ud;
	memset(&m, 0, sizeof m);
	m.idempotency_key = msg->idempotency_key;
	m.channel = msg->channel;
	m.account = msg->account ? msg->account : "default";
	m.target = msg->target;
	m.payload = msg->payload;
	m.due_at = msg->due_at;
	rc = d->store->ops->outbox_put(d->store, &m, daemon_deliver_done, dl);
	if (rc)
		free(dl);
	return rc;
}

/* Created on first use: most start-ups never need it, and curl's TLS set-up
 * is the costliest part of initialisation. */
static struct httpc *daemon_http_client(void *ctx)
{
	struct daemon *d = ctx;
	struct httpc_options o;

	if (d->httpc || d->state >= DAEMON_STOPPING)
		return d->httpc;
	memset(&o, 0, sizeof o);
	o.timeout_ms = (long)d->cfg->http_client.timeout_ms;
	o.connect_timeout_ms = (long)d->cfg->http_client.connect_timeout_ms;
	o.max_connections = (long)d->cfg->http_client.max_connections;
	o.max_host_connections = (long)d->cfg->http_client.max_host_connections;
	o.max_response_bytes = (size_t)d->cfg->http_client.max_response_bytes;
	o.ca_file = d->cfg->http_client.ca_file;
	if (httpc_new(&d->httpc, &d->loop, &o))
		log_error("gateway", "cannot create the HTTP client");
	return d->httpc;
}

static struct config *daemon_config(void *ctx)
{
	struct daemon *d = ctx;

	return config_ref(d->cfg);
}

/* ---- HTTP routes of the core ---- */

static void daemon_healthz(void *ud, struct server_request *req)
{
	static const char body[] = "{\"status\":\"ok\"}\n";

	(void)ud;
	server_respond(req, 200, "application/json", body, sizeof body - 1, NULL);
}

static void daemon_readyz(void *ud, struct server_request *req)
{
	struct daemon *d = ud;
	char body[64];
	int n = snprintf(body, sizeof body, "{\"status\":\"%s\"}\n", daemon_state_names[d->state]);

	server_respond(req, d->state == DAEMON_READY ? 200 : 503, "application/json", body,
	               (size_t)n, NULL);
}

static void daemon_metrics(void *ud, struct server_request *req)
{
	struct daemon *d = ud;
	struct buf out;

	buf_init(&out, 1 << 20);
	d->metrics.http_client_in_flight = d->httpc ? (int64_t)httpc_in_flight(d->httpc) : 0;
	if (metrics_render(&d->metrics, &out) == SB_OK)
		server_respond(req, 200, "text/plain; version=0.0.4; charset=utf-8", out.data,
		               out.len, NULL);
	else
		server_respond(req, 500, "text/plain", "metrics too large\n", 18, NULL);
	buf_free(&out);
}

/* ---- store events ---- */

static void daemon_on_commit(void *ud, double seconds, size_t ops, int rc)
{
	struct daemon *d = ud;

	metrics_commit(&d->metrics, seconds, ops, rc);
}

static void daemon_stats_done(void *ud, int rc, const struct store_stats *st)
{
	struct daemon *d = ud;

	d->stats_busy = false;
	if (rc || !st)
		return;
	d->metrics.inbox_depth = st->inbox_pending;
	d->metrics.outbox_depth = st->outbox_pending;
	d->metrics.store_queue_depth = st->queue_depth;
}

static void daemon_stats_tick(uv_timer_t *t)
{
	struct daemon *d = t->data;

	if (d->stats_busy || d->state >= DAEMON_STOPPING)
		return;
	if (d->store->ops->stats(d->store, daemon_stats_done, d) == SB_OK)
		d->stats_busy = true;
}

/* ---- reload ---- */

static void daemon_restart_key(void *ud, const char *path)
{
	(void)ud;
	log_warn("config", "change takes effect after a restart", LOG_S("key", path));
}

static void daemon_reload(struct daemon *d, const char *why)
{
	struct cfg_errors errs;
	struct config *next = NULL, *old;
	int rc;

	cfg_errors_init(&errs);
	rc = config_load(d->opt->config_path, d->opt->home, &next, &errs);
	if (rc) {
		d->metrics.config_reloads_failed++;
		daemon_log_config_errors(&errs,
		                         "reload rejected; keeping the running configuration");
		goto out;
	}
	if (memcmp(next->digest, d->cfg->digest, sizeof next->digest) == 0) {
		log_debug("config", "unchanged", LOG_S("trigger", why));
		goto out;
	}
	config_restart_changes(d->cfg, next, daemon_restart_key, d);
	old = d->cfg;
	d->cfg = next;
	next = NULL;
	config_unref(old);
	daemon_apply_logging(d->cfg);
	d->metrics.config_reloads_ok++;
	log_info("config", "reloaded", LOG_S("trigger", why), LOG_S("path", d->opt->config_path));
out:
	config_unref(next);
	cfg_errors_free(&errs);
}

static void daemon_reload_timer(uv_timer_t *t)
{
	daemon_reload(t->data, "file change");
}

static void daemon_cfg_changed(uv_fs_event_t *h, const char *filename, int events, int status)
{
	struct daemon *d = h->data;

	(void)events;
	if (status < 0 || d->state != DAEMON_READY)
		return;
	/* Editors replace files by rename: watch the directory, filter by name,
	 * and let a burst of events settle before reading. */
	if (filename && strcmp(filename, d->cfg_base) != 0)
		return;
	uv_timer_start(&d->reload_timer, daemon_reload_timer, DAEMON_RELOAD_DEBOUNCE_MS, 0);
}

/* ---- stop ---- */

static void daemon_shutdown(struct daemon *d)
{
	if (d->state == DAEMON_STOPPING)
		return;
	d->state = DAEMON_STOPPING;
	log_info("gateway", "stopping");
	uv_timer_stop(&d->drain_timer);
	uv_timer_stop(&d->stats_timer);
	uv_timer_stop(&d->reload_timer);
	uv_close((uv_handle_t *)&d->drain_timer, NULL);
	uv_close((uv_handle_t *)&d->stats_timer, NULL);
	uv_close((uv_handle_t *)&d->reload_timer, NULL);
	uv_close((uv_handle_t *)&d->sig_term, NULL);
	uv_close((uv_handle_t *)&d->sig_int, NULL);
	uv_close((uv_handle_t *)&d->sig_hup, NULL);
	if (d->watching)
		uv_close((uv_handle_t *)&d->cfg_watch, NULL);
	server_close(d->server);
	httpc_close(d->httpc);
	d->httpc = NULL;
	/* Finishes every queued store operation before it returns. */
	if (d->store)
		d->store->ops->close(d->store);
	d->store = NULL;
}

static void daemon_drain_tick(uv_timer_t *t)
{
	struct daemon *d = t->data;
	size_t busy = server_busy(d->server) + (d->httpc ? httpc_in_flight(d->httpc) : 0);

	if (busy == 0) {
		daemon_shutdown(d);
		return;
	}
	if (uv_now(&d->loop) >= d->drain_deadline) {
		log_warn("gateway", "drain time is up; stopping with work in flight",
		         LOG_I("in_flight", busy));
		daemon_shutdown(d);
	}
}

static void daemon_on_signal(uv_signal_t *h, int signum)
{
	struct daemon *d = h->data;

	if (signum == SIGHUP) {
		daemon_reload(d, "SIGHUP");
		return;
	}
	if (d->state == DAEMON_DRAINING) {
		log_warn("gateway", "second stop signal: stopping now");
		daemon_shutdown(d);
		return;
	}
	if (d->state != DAEMON_READY)
		return;
	d->state = DAEMON_DRAINING;
	log_info("gateway", "draining", LOG_S("signal", signum == SIGTERM ? "SIGTERM" : "SIGINT"),
	         LOG_I("drain_timeout_ms", d->cfg->gateway.drain_timeout_ms));
	server_drain(d->server);
	d->drain_deadline = uv_now(&d->loop) + (uint64_t)d->cfg->gateway.drain_timeout_ms;
	uv_timer_start(&d->drain_timer, daemon_drain_tick, 0, DAEMON_DRAIN_POLL_MS);
}

/* ---- start ---- */

/* One gateway per home: two writers on one state.db would fight. */
static int daemon_lock_home(struct daemon *d)
{
	char path[PATH_MAX], pid[32];
	int n;

	snprintf(path, sizeof path, "%s/gateway.lock", d->opt->home);
	d->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (d->lock_fd < 0) {
		log_error("gateway", "cannot open the lock file", LOG_S("path", path),
		          LOG_S("error", strerror(errno)));
		return SB_ERR_IO;
	}
	if (flock(d->lock_fd, LOCK_EX | LOCK_NB) != 0) {
		ssize_t got = read(d->lock_fd, pid, sizeof pid - 1);

		pid[got > 0 ? got : 0] = '\0';
		log_error(
		    "gateway", "another gateway is running with this home",
		    LOG_S("home", d->opt->home), LOG_S("pid", pid),
		    LOG_S("hint", "stop it first, or set SWITCHBOARD_HOME to another directory"));
		return SB_ERR_EXISTS;
	}
	n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
	if (ftruncate(d->lock_fd, 0) != 0 || write(d->lock_fd, pid, (size_t)n) != n)
		log_warn("gateway", "cannot write the pid into the lock file", LOG_S("path", path));
	return SB_OK;
}

static int daemon_open_store(struct daemon *d)
{
	static const char *const backends[] = {"sqlite"};
	const struct store_ops *ops = store_backend(backends[d->cfg->store.backend]);
	struct store_options so;
	int rc;

	memset(&so, 0, sizeof so);
	so.path = d->cfg->store.path;
	so.busy_timeout_ms = d->cfg->store.busy_timeout_ms;
	so.batch_max = (size_t)d->cfg->store.batch_max;
	so.queue_max = (size_t)d->cfg->store.queue_max;
	so.on_commit = daemon_on_commit;
	so.on_commit_ud = d;
	rc = ops ? ops->open(&d->store, &d->loop, &so) : SB_ERR_CONFIG;
	if (rc)
		log_error("gateway", "cannot open the store", LOG_S("path", so.path),
		          LOG_S("error", sb_strerror(rc)));
	return rc;
}

static int daemon_start_server(struct daemon *d)
{
	struct server_options so;
	int rc;

	memset(&so, 0, sizeof so);
	so.bind = d->cfg->gateway.bind;
	so.port = d->opt->port > 0 ? d->opt->port : (int)d->cfg->gateway.port;
	so.max_body_bytes = (size_t)d->cfg->gateway.max_body_bytes;
	so.max_connections = (int)d->cfg->gateway.max_connections;
	so.metrics = &d->metrics;
	rc = server_start(&d->server, &d->loop, &so);
	if (rc)
		return rc;
	rc = server_route(d->server, "/healthz", "/healthz", SERVER_DURING_DRAIN,
	                  SERVER_GET | SERVER_HEAD, daemon_healthz, d);
	if (!rc)
		rc = server_route(d->server, "/readyz", "/readyz", SERVER_DURING_DRAIN,
		                  SERVER_GET | SERVER_HEAD, daemon_readyz, d);
	if (!rc)
		rc = server_route(d->server, "/metrics", "/metrics", SERVER_DURING_DRAIN,
		                  SERVER_GET, daemon_metrics, d);
	return rc;
}

static void daemon_watch_config(struct daemon *d)
{
	char tmp[PATH_MAX];

	if (!d->cfg->gateway.watch_config)
		return;
	snprintf(tmp, sizeof tmp, "%s", d->opt->config_path);
	snprintf(d->cfg_dir, sizeof d->cfg_dir, "%s", dirname(tmp));
	snprintf(tmp, sizeof tmp, "%s", d->opt->config_path);
	snprintf(d->cfg_base, sizeof d->cfg_base, "%s", basename(tmp));
	if (uv_fs_event_init(&d->loop, &d->cfg_watch) != 0)
		return;
	d->cfg_watch.data = d;
	if (uv_fs_event_start(&d->cfg_watch, daemon_cfg_changed, d->cfg_dir, 0) != 0) {
		uv_close((uv_handle_t *)&d->cfg_watch, NULL);
		uv_run(&d->loop, UV_RUN_NOWAIT);
		log_warn("config", "cannot watch the config file; reload with SIGHUP",
		         LOG_S("dir", d->cfg_dir));
		return;
	}
	d->watching = true;
}

static void daemon_init_handles(struct daemon *d)
{
	uv_signal_init(&d->loop, &d->sig_term);
	uv_signal_init(&d->loop, &d->sig_int);
	uv_signal_init(&d->loop, &d->sig_hup);
	uv_timer_init(&d->loop, &d->stats_timer);
	uv_timer_init(&d->loop, &d->drain_timer);
	uv_timer_init(&d->loop, &d->reload_timer);
	d->sig_term.data = d->sig_int.data = d->sig_hup.data = d;
	d->stats_timer.data = d->drain_timer.data = d->reload_timer.data = d;
	uv_signal_start(&d->sig_term, daemon_on_signal, SIGTERM);
	uv_signal_start(&d->sig_int, daemon_on_signal, SIGINT);
	uv_signal_start(&d->sig_hup, daemon_on_signal, SIGHUP);
}

static void daemon_announce(struct daemon *d)
{
	int port = d->opt->port > 0 ? d->opt->port : (int)d->cfg->gateway.port;
	const char *bind = d->cfg->gateway.bind;
	char url[300];
	struct timespec ts;
	double ms;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ms = (double)((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec - d->started_ns) /
	     1e6;
	snprintf(url, sizeof url, strchr(bind, ':') ? "http://[%s]:%d" : "http://%s:%d", bind,
	         port);
	log_info("gateway", "ready", LOG_S("listen", url), LOG_S("home", d->opt->home),
	         LOG_D("startup_ms", ms), LOG_I("pid", getpid()));
	printf("switchboard %s is listening on %s\n"
	       "  health:  %s/healthz   readiness: %s/readyz   metrics: %s/metrics\n"
	       "  home:    %s\n"
	       "  stop:    Ctrl-C (or SIGTERM); reload the config: SIGHUP or just save the file\n",
	       SB_VERSION, url, url, url, url, d->opt->home);
	fflush(stdout);
}

int daemon_run(const struct daemon_options *opt)
{
	struct daemon *d;
	struct cfg_errors errs;
	struct timespec ts;
	int rc = 1;

	d = calloc(1, sizeof *d);
	if (!d)
		return 1;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	d->started_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	d->opt = opt;
	d->lock_fd = -1;
	metrics_init(&d->metrics);
	cfg_errors_init(&errs);
	signal(SIGPIPE, SIG_IGN);
	if (sodium_init() < 0) {
		log_error("gateway", "libsodium failed to initialise");
		goto out_free;
	}
	if (config_load(opt->config_path, opt->home, &d->cfg, &errs)) {
		cfg_errors_print(&errs, stderr);
		log_error("gateway", "invalid configuration; not starting",
		          LOG_S("path", opt->config_path),
		          LOG_S("hint", "run `switchboard config check` to list every problem"));
		goto out_free;
	}
	daemon_apply_logging(d->cfg);
	if (daemon_lock_home(d))
		goto out_free;
	if (uv_loop_init(&d->loop) != 0)
		goto out_free;
	d->host = (struct host){
	    .ctx = d,
	    .loop = &d->loop,
	    .ingest = daemon_ingest,
	    .deliver = daemon_deliver,
	    .http_client = daemon_http_client,
	    .config = daemon_config,
	};
	daemon_init_handles(d);
	if (daemon_open_store(d) || daemon_start_server(d)) {
		d->state = DAEMON_READY; /* let shutdown run its whole path */
		daemon_shutdown(d);
		uv_run(&d->loop, UV_RUN_DEFAULT);
		goto out_loop;
	}
	daemon_watch_config(d);
	uv_timer_start(&d->stats_timer, daemon_stats_tick, 0, DAEMON_STATS_MS);
	d->state = DAEMON_READY;
	daemon_announce(d);

	uv_run(&d->loop, UV_RUN_DEFAULT);
	rc = 0;
out_loop:
	server_free(d->server);
	d->server = NULL;
	uv_run(&d->loop, UV_RUN_DEFAULT);
	if (uv_loop_close(&d->loop) != 0) {
		log_error("gateway", "handles left open at exit");
		rc = rc ? rc : 1;
	} else if (rc == 0) {
		log_info("gateway", "stopped");
	}
out_free:
	if (d->lock_fd >= 0)
		close(d->lock_fd);
	config_unref(d->cfg);
	cfg_errors_free(&errs);
	log_set_secrets(NULL, 0);
	free(d);
	return rc;
}
