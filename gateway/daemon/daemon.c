/*
 * daemon.c - see daemon.h.
 *
 * Start-up order: config -> lock the home -> store (migrations) -> routing
 * table, model routers, runner, dispatcher, outbox sender, channels, modules
 * -> HTTP server -> store recovery (claims left by a crash are released) ->
 * ready (READY=1 to a service manager, notify.h). Stop: not ready (readyz
 * 503; STOPPING=1), new work refused, channels and modules drain -> runs,
 * deliveries and requests in flight get up to gateway.drain_timeout -> runs
 * still going are aborted (their messages go back to the inbox) -> every
 * part is closed, the store last (it finishes every queued operation) -> the
 * loop runs until every handle is closed -> exit 0. A reload says
 * RELOADING=1 while the new file is read, READY=1 when it is done.
 */
#include "gateway/daemon/daemon.h"

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
#include <sys/stat.h>
#include <sysexits.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "gateway/pipeline/approvals_notify.h"
#include "gateway/core/clock.h"
#include "gateway/core/err.h"
#include "gateway/core/fmt.h"
#include "gateway/core/fsutil.h"
#include "gateway/config/runtime.h"
#include "gateway/core/log.h"
#include "gateway/core/rng.h"
#include "gateway/daemon/daemon_internal.h"

#define DAEMON_STATS_MS 1000
#define DAEMON_DRAIN_POLL_MS 20
#define DAEMON_RELOAD_DEBOUNCE_MS 100
/* After the drain, aborted runs get this long to write their transcripts. */
#define DAEMON_STOP_GRACE_MS 5000

static const char *const daemon_state_names[] = {"starting", "ready", "draining", "stopping",
                                                 "stopping"};

/* ---- logging from the config ---- */

static void daemon_apply_logging(const struct config *cfg)
{
	static const enum log_level levels[] = {LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR};

	log_configure(levels[cfg->log.level],
	              cfg->log.format == CONFIG_LOG_JSON ? LOG_FORMAT_JSON : LOG_FORMAT_LOGFMT,
	              NULL);
	log_set_secrets((const char *const *)cfg->secrets, cfg->n_secrets);
}

/* <home>/logs/gateway.log, opened once the home is ours (a second gateway
 * that finds the lock taken must not rotate the first one's file). */
static void daemon_log_file(struct daemon *d)
{
	char dir[PATH_MAX], path[PATH_MAX + 16];
	int rc;

	if (d->cfg->log.file_max <= 0) {
		log_file_close();
		return;
	}
	if (FMT(dir, "%s/logs", d->opt->home) != SB_OK ||
	    FMT(path, "%s/gateway.log", dir) != SB_OK) {
		log_warn("gateway", "the log file's path is too long; logging to stderr only",
		         LOG_S("home", d->opt->home));
		return;
	}
	if (fs_mkdirs(dir, 0700) != 0 || chmod(dir, 0700) != 0) {
		log_warn("gateway", "cannot create the log directory; logging to stderr only",
		         LOG_S("path", dir), LOG_S("error", strerror(errno)));
		return;
	}
	rc = log_file_open(path, d->cfg->log.file_max, (int)d->cfg->log.file_keep);
	if (rc)
		log_warn("gateway", "cannot open the log file; logging to stderr only",
		         LOG_S("path", path), LOG_S("error", sb_strerror(rc)));
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
	if (store_stats(d->store, daemon_stats_done, d) == SB_OK)
		d->stats_busy = true;
}

/* ---- reload ---- */

static void daemon_restart_key(void *ud, const char *path)
{
	(void)ud;
	log_warn("config", "change takes effect after a restart", LOG_S("key", path));
}

/* Instances are made per account at start only: say which accounts a
 * reload added or removed, since they change at the next restart. */
static void daemon_report_account_changes(struct daemon *d)
{
	for (size_t r = 0; channel_registry[r]; r++) {
		const struct channel_ops *ops = channel_registry[r];
		const char *names[DAEMON_CHANNELS_MAX];
		size_t n;

		if (!ops->accounts)
			continue;
		n = ops->accounts(channels_config_settings(&d->cfg->channels, ops->name), names,
		                  DAEMON_CHANNELS_MAX);
		for (size_t k = 0; k < n; k++) {
			bool have = false;

			for (size_t i = 0; i < d->n_channels && !have; i++)
				have = d->channels[i]->ops == ops &&
				       strcmp(d->channels[i]->account, names[k]) == 0;
			if (!have)
				log_warn("config",
				         "a new channel account starts at the next restart",
				         LOG_S("channel", ops->name), LOG_S("account", names[k]));
		}
		for (size_t i = 0; i < d->n_channels; i++) {
			bool kept = false;

			if (d->channels[i]->ops != ops ||
			    strcmp(d->channels[i]->account, "default") == 0)
				continue;
			for (size_t k = 0; k < n && !kept; k++)
				kept = strcmp(d->channels[i]->account, names[k]) == 0;
			if (!kept)
				log_warn("config",
				         "a channel account was removed: it takes no new messages "
				         "and is gone after a restart",
				         LOG_S("channel", ops->name),
				         LOG_S("account", d->channels[i]->account));
		}
	}
}

static void daemon_reconfigure_channels(struct daemon *d)
{
	daemon_report_account_changes(d);
	for (size_t i = 0; i < d->n_channels; i++) {
		struct channel *c = d->channels[i];

		if (c->ops->reconfigure &&
		    c->ops->reconfigure(c,
		                        channels_config_settings(&d->cfg->channels, c->ops->name)))
			log_error("config", "a channel rejected the new configuration",
			          LOG_S("channel", c->ops->name));
	}
}

/* A reload reads and validates the file and compiles the routing table on
 * the thread pool; only the swap happens on the loop. */
struct daemon_reload {
	uv_work_t work;
	struct daemon *d;
	const char *why; /* a static string */
	struct config *next;
	struct bindings_table *table;
	struct cfg_errors errs;
	int rc;
};

/* What the configuration gets wrong on this machine (config_lint): logged,
 * the gateway runs all the same. Any thread. */
static void daemon_log_lint(const struct config *cfg)
{
	struct cfg_errors errs, warns;

	cfg_errors_init(&errs);
	cfg_errors_init(&warns);
	config_lint(cfg, &errs, &warns);
	for (int pass = 0; pass < 2; pass++) {
		const struct cfg_errors *e = pass ? &warns : &errs;

		for (size_t i = 0; i < e->n; i++)
			log_warn("config", e->v[i].msg, LOG_S("key", e->v[i].path),
			         LOG_I("line", e->v[i].line),
			         LOG_S("hint", e->v[i].hint ? e->v[i].hint : ""));
	}
	cfg_errors_free(&errs);
	cfg_errors_free(&warns);
}

static void daemon_reload_work(uv_work_t *w)
{
	struct daemon_reload *r = w->data;

	r->rc = config_load(r->d->opt->config_path, r->d->opt->home, &r->next, &r->errs);
	if (r->rc == SB_OK)
		daemon_log_lint(r->next);
	if (r->rc == SB_OK && config_bindings_table(r->next, &r->table) != SB_OK)
		r->rc = SB_ERR_CONFIG;
}

static void daemon_reload(struct daemon *d, const char *why);

static void daemon_reload_done(uv_work_t *w, int status)
{
	struct daemon_reload *r = w->data;
	struct daemon *d = r->d;
	struct config *old;
	struct models_gen *gen;

	d->reloading = false;
	if (status != 0 || d->state >= DAEMON_STOPPING)
		goto out;
	d->metrics.config_last_reload_ms = clock_wall_ms();
	d->metrics.config_last_reload_ok = r->rc == SB_OK;
	d->metrics.config_last_reload_error[0] = '\0';
	if (r->rc) {
		d->metrics.config_reloads_failed++;
		if (r->errs.n) {
			const struct cfg_error *e = &r->errs.v[0];

			daemon_log_config_errors(
			    &r->errs, "reload rejected; keeping the running configuration");
			snprintf(d->metrics.config_last_reload_error,
			         sizeof d->metrics.config_last_reload_error, "%s:%d:%d: %s: %s%s",
			         e->file ? e->file : "?", e->line, e->col, e->path ? e->path : "",
			         e->msg ? e->msg : "", r->errs.n > 1 ? " (and more)" : "");
		} else {
			log_error("config", "reload rejected: the routing table does not compile");
			snprintf(d->metrics.config_last_reload_error,
			         sizeof d->metrics.config_last_reload_error,
			         "the routing table does not compile");
		}
		goto out;
	}
	if (memcmp(r->next->digest, d->cfg->digest, sizeof r->next->digest) == 0) {
		log_debug("config", "unchanged", LOG_S("trigger", r->why));
		goto out;
	}
	/* gateway.bind changes at the next restart only: a file that now
	 * binds loopback and drops auth_token would leave the listener that
	 * is up on a public address with no token at all. */
	if (!config_is_loopback(d->listen_bind) &&
	    !(r->next->gateway.auth_token && *r->next->gateway.auth_token)) {
		d->metrics.config_reloads_failed++;
		d->metrics.config_last_reload_ok = false;
		snprintf(d->metrics.config_last_reload_error,
		         sizeof d->metrics.config_last_reload_error,
		         "the gateway listens on %s and the new file has no gateway.auth_token",
		         d->listen_bind);
		log_error("config",
		          "reload rejected: the gateway listens on a non-loopback address and the "
		          "new configuration has no gateway.auth_token; keeping the running "
		          "configuration",
		          LOG_S("listening_on", d->listen_bind), LOG_S("new_bind", r->next->gateway.bind),
		          LOG_S("hint", "keep gateway.auth_token until the gateway has restarted on "
		                        "loopback"));
		goto out;
	}
	config_restart_changes(d->cfg, r->next, daemon_restart_key, d);
	gen = daemon_gen_new(d, r->next);
	if (!gen) {
		d->metrics.config_reloads_failed++;
		d->metrics.config_last_reload_ok = false;
		snprintf(d->metrics.config_last_reload_error,
		         sizeof d->metrics.config_last_reload_error,
		         "the model providers cannot be set up");
		log_error("config", "reload rejected: the model providers cannot be set up");
		goto out;
	}
	/* Runs in flight keep the router they started with. */
	daemon_gen_unref(d->gen);
	d->gen = gen;
	bindings_table_free(d->table);
	d->table = r->table;
	r->table = NULL;
	old = d->cfg;
	d->cfg = r->next;
	r->next = NULL;
	config_unref(old);
	daemon_reconfigure_channels(d);
	scheduler_reconfigure(d->scheduler);
	daemon_apply_logging(d->cfg);
	daemon_log_file(d);
	d->metrics.config_reloads_ok++;
	log_info("config", "reloaded", LOG_S("trigger", r->why),
	         LOG_S("path", d->opt->config_path));
out:
	bindings_table_free(r->table);
	config_unref(r->next);
	cfg_errors_free(&r->errs);
	free(r);
	/* A change that came while this reload ran is read now. */
	if (d->reload_again && d->state < DAEMON_STOPPING) {
		const char *again = d->reload_again;

		d->reload_again = NULL;
		daemon_reload(d, again);
	}
	/* Kept or swapped, the configuration in use is whole again. A drain
	 * that began meanwhile has said STOPPING=1 instead. */
	if (!d->reloading && d->reload_notified) {
		d->reload_notified = false;
		if (d->state == DAEMON_READY)
			notify_ready(&d->notify);
	}
}

static void daemon_reload(struct daemon *d, const char *why)
{
	struct daemon_reload *r;

	if (d->reloading) {
		d->reload_again = why;
		return;
	}
	r = calloc(1, sizeof *r);
	if (!r)
		return;
	r->d = d;
	r->why = why;
	r->work.data = r;
	cfg_errors_init(&r->errs);
	if (uv_queue_work(&d->loop, &r->work, daemon_reload_work, daemon_reload_done) != 0) {
		free(r);
		return;
	}
	d->reloading = true;
	/* Only a gateway that said READY=1 says it reloads: before that the
	 * manager is still waiting for the first READY=1. */
	if (d->state == DAEMON_READY && !d->reload_notified) {
		d->reload_notified = true;
		notify_reloading(&d->notify);
	}
}

static void daemon_cfg_changed(uv_fs_event_t *h, const char *filename, int events, int status);

/* Watches the configuration file itself, not its directory: the home often
 * holds the store too, and every write to its WAL would wake the loop. An
 * editor that saves by rename leaves the watch on the old file, so it is
 * armed again after each change; while the file is missing (deleted to be
 * written anew, renamed away) the directory is watched, filtered by name,
 * until it is back. 0 or a libuv error. */
static int daemon_cfg_arm(struct daemon *d)
{
	int rc;

	if (uv_is_active((uv_handle_t *)&d->cfg_watch))
		uv_fs_event_stop(&d->cfg_watch);
	rc = uv_fs_event_start(&d->cfg_watch, daemon_cfg_changed, d->cfg_path, 0);
	d->cfg_on_dir = rc != 0;
	if (rc != 0)
		rc = uv_fs_event_start(&d->cfg_watch, daemon_cfg_changed, d->cfg_dir, 0);
	return rc;
}

static void daemon_reload_timer(uv_timer_t *t)
{
	struct daemon *d = t->data;

	/* Before reading: a change from now on is seen by the new watch. And
	 * even when no reload follows (not ready), or the watch would stay on
	 * a file replaced meanwhile. */
	if (d->watching && daemon_cfg_arm(d) != 0)
		log_warn("config", "cannot watch the config file any more; reload with SIGHUP",
		         LOG_S("path", d->cfg_path));
	if (d->state == DAEMON_READY)
		daemon_reload(d, "file change");
}

static void daemon_cfg_changed(uv_fs_event_t *h, const char *filename, int events, int status)
{
	struct daemon *d = h->data;

	(void)events;
	if (status < 0 || d->state >= DAEMON_STOPPING)
		return;
	if (d->cfg_on_dir && filename && strcmp(filename, d->cfg_base) != 0)
		return;
	/* Let a burst of events (a file written in parts) settle before reading. */
	uv_timer_start(&d->reload_timer, daemon_reload_timer, DAEMON_RELOAD_DEBOUNCE_MS, 0);
}

/* ---- stop ---- */

/* Tells the service manager, once, that the gateway is on its way out. */
static void daemon_notify_stopping(struct daemon *d)
{
	if (d->stop_notified)
		return;
	d->stop_notified = true;
	notify_stopping(&d->notify);
}

/* The last phase: close every part. The store goes last: closing it
 * finishes every queued operation and runs their callbacks. */
static void daemon_close_all(struct daemon *d)
{
	if (d->state == DAEMON_CLOSING)
		return;
	d->state = DAEMON_CLOSING;
	uv_timer_stop(&d->drain_timer);
	uv_timer_stop(&d->stats_timer);
	uv_timer_stop(&d->reload_timer);
	uv_close((uv_handle_t *)&d->drain_timer, NULL);
	uv_close((uv_handle_t *)&d->stats_timer, NULL);
	uv_close((uv_handle_t *)&d->reload_timer, NULL);
	scheduler_stop(d->scheduler);
	uv_close((uv_handle_t *)&d->sig_term, NULL);
	uv_close((uv_handle_t *)&d->sig_int, NULL);
	uv_close((uv_handle_t *)&d->sig_hup, NULL);
	if (d->watching)
		uv_close((uv_handle_t *)&d->cfg_watch, NULL);
	for (size_t i = d->n_modules; i-- > 0;)
		gateway_modules[i]->stop(d->module_state[i]);
	d->n_modules = 0;
	for (size_t i = 0; i < d->n_channels; i++)
		d->channels[i]->ops->destroy(d->channels[i]);
	d->n_channels = 0;
	server_close(d->server);
	outbox_free(d->outbox);
	d->outbox = NULL;
	dispatcher_free(d->dispatcher);
	d->dispatcher = NULL;
	boot_free(d->boot);
	d->boot = NULL;
	runner_free(d->runner);
	d->runner = NULL;
	/* Freed once the store's last callbacks to it have run. */
	xsync_close(d->xsync);
	d->xsync = NULL;
	approvals_notify_free(d->approvals);
	d->approvals = NULL;
	daemon_gen_unref(d->gen);
	d->gen = NULL;
	httpc_close(d->httpc);
	d->httpc = NULL;
	if (d->store)
		store_close(d->store);
	d->store = NULL;
	/* After the store: its last callbacks may still reach the scheduler. */
	scheduler_free(d->scheduler);
	d->scheduler = NULL;
}

static void daemon_stop_tick(uv_timer_t *t)
{
	struct daemon *d = t->data;
	size_t busy = runner_active(d->runner) + outbox_in_flight(d->outbox) +
	              dispatcher_commands_active(d->dispatcher);

	/* With no run left, the MCP servers stop, and get the rest of the
	 * grace to be reaped (an HTTP server's session to be ended). */
	if (busy == 0 && runner_stop_servers(d->runner) > 0 &&
	    uv_now(&d->loop) < d->drain_deadline)
		return;
	if (busy == 0 || uv_now(&d->loop) >= d->drain_deadline) {
		if (busy)
			log_warn("gateway", "closing with work still in flight",
			         LOG_I("in_flight", busy));
		daemon_close_all(d);
	}
}

/* Aborts what still runs, then waits (briefly) for it to be written down. */
static void daemon_shutdown(struct daemon *d)
{
	if (d->state >= DAEMON_STOPPING)
		return;
	d->state = DAEMON_STOPPING;
	daemon_notify_stopping(d);
	log_info("gateway", "stopping");
	for (size_t i = 0; i < d->n_channels; i++)
		if (d->channels[i]->ops->stop)
			d->channels[i]->ops->stop(d->channels[i]);
	outbox_drain(d->outbox);
	boot_abort(d->boot);
	if (d->dispatcher)
		dispatcher_abort_all(d->dispatcher, "the gateway is stopping");
	d->drain_deadline = uv_now(&d->loop) + DAEMON_STOP_GRACE_MS;
	uv_timer_start(&d->drain_timer, daemon_stop_tick, 0, DAEMON_DRAIN_POLL_MS);
}

static size_t daemon_busy(struct daemon *d)
{
	size_t busy = server_busy(d->server) + (d->httpc ? httpc_in_flight(d->httpc) : 0) +
	              dispatcher_busy(d->dispatcher) + outbox_in_flight(d->outbox);

	for (size_t i = 0; i < d->n_modules; i++)
		if (gateway_modules[i]->busy)
			busy += gateway_modules[i]->busy(d->module_state[i]);
	return busy;
}

static void daemon_drain_tick(uv_timer_t *t)
{
	struct daemon *d = t->data;
	size_t busy = daemon_busy(d);

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
	if (d->state == DAEMON_DRAINING || d->state == DAEMON_STOPPING) {
		log_warn("gateway", "second stop signal: stopping now");
		daemon_shutdown(d);
		daemon_close_all(d);
		return;
	}
	if (d->state != DAEMON_READY)
		return;
	d->state = DAEMON_DRAINING;
	daemon_notify_stopping(d);
	log_info("gateway", "draining", LOG_S("signal", signum == SIGTERM ? "SIGTERM" : "SIGINT"),
	         LOG_I("drain_timeout_ms", d->cfg->gateway.drain_timeout_ms));
	server_drain(d->server);
	dispatcher_drain(d->dispatcher);
	scheduler_stop(d->scheduler);
	for (size_t i = 0; i < d->n_channels; i++)
		if (d->channels[i]->ops->stop)
			d->channels[i]->ops->stop(d->channels[i]);
	for (size_t i = 0; i < d->n_modules; i++)
		if (gateway_modules[i]->drain)
			gateway_modules[i]->drain(d->module_state[i]);
	d->drain_deadline = uv_now(&d->loop) + (uint64_t)d->cfg->gateway.drain_timeout_ms;
	uv_timer_start(&d->drain_timer, daemon_drain_tick, 0, DAEMON_DRAIN_POLL_MS);
}

/* ---- start ---- */

/* One gateway per home: two writers on one state.db would fight. */
static int daemon_lock_home(struct daemon *d)
{
	char path[PATH_MAX], pid[32];
	int n;

	if (FMT(path, "%s/gateway.lock", d->opt->home) != SB_OK) {
		log_error("gateway", "the home's path is too long", LOG_S("home", d->opt->home));
		return SB_ERR_TOOBIG;
	}
	d->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (d->lock_fd < 0) {
		log_error("gateway", "cannot open the lock file", LOG_S("path", path),
		          LOG_S("error", strerror(errno)));
		return SB_ERR_IO;
	}
	if (flock(d->lock_fd, LOCK_EX | LOCK_NB) != 0) {
		ssize_t got = read(d->lock_fd, pid, sizeof pid - 1);

		pid[got > 0 ? got : 0] = '\0';
		pid[strcspn(pid, "\r\n")] = '\0'; /* the file holds "<pid>\n" */
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
	struct store_options so;
	int rc;

	memset(&so, 0, sizeof so);
	so.backend = backends[d->cfg->store.backend];
	so.path = d->cfg->store.path;
	so.busy_timeout_ms = d->cfg->store.busy_timeout_ms;
	so.batch_max = (size_t)d->cfg->store.batch_max;
	so.queue_max = (size_t)d->cfg->store.queue_max;
	so.on_commit = daemon_on_commit;
	so.on_commit_ud = d;
	rc = store_open(&d->store, &d->loop, &so);
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
	snprintf(d->listen_bind, sizeof d->listen_bind, "%s", so.bind ? so.bind : "127.0.0.1");
	so.port = d->opt->port > 0 ? d->opt->port : (int)d->cfg->gateway.port;
	so.max_body_bytes = (size_t)d->cfg->gateway.max_body_bytes;
	so.max_connections = (int)d->cfg->gateway.max_connections;
	so.max_per_address = (int)d->cfg->gateway.max_connections_per_address;
	so.header_timeout_ms = d->cfg->gateway.header_timeout_ms;
	so.body_timeout_ms = d->cfg->gateway.body_timeout_ms;
	so.metrics = &d->metrics;
	rc = server_start(&d->server, &d->loop, &so);
	if (rc == SB_ERR_CONFIG)
		d->not_listening = true;
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

/* The dispatcher's hooks for the scheduler. */
static void daemon_scheduled_done(void *ud, const struct envelope *env, const char *agent_id,
                                  const char *session_key, const char *status, const char *text,
                                  bool delivered)
{
	struct daemon *d = ud;

	if (d->scheduler)
		scheduler_run_done(d->scheduler, env, agent_id, session_key, status, text,
		                   delivered);
}

static bool daemon_session_busy(void *ud, const char *session_key)
{
	struct daemon *d = ud;

	return d->dispatcher && dispatcher_session_busy(d->dispatcher, session_key);
}

static void daemon_route_seen(void *ud, const char *agent_id, const struct envelope *env)
{
	struct daemon *d = ud;

	if (d->scheduler)
		scheduler_route_seen(d->scheduler, agent_id, env);
}

/* The routing table, model router, event bus, runner, dispatcher and
 * outbox sender. */
static int daemon_start_pipeline(struct daemon *d)
{
	struct runner_options ro;
	struct dispatcher_options dopt;
	struct outbox_options oo;
	int rc;

	rc = config_bindings_table(d->cfg, &d->table);
	if (rc) {
		log_error("gateway", "the routing table does not compile",
		          LOG_S("error", sb_strerror(rc)));
		return rc;
	}
	d->gen = daemon_gen_new(d, d->cfg);
	if (!d->gen) {
		log_error("gateway", "the model providers cannot be set up");
		return SB_ERR_CONFIG;
	}
	if ((rc = events_new(&d->events)))
		return rc;
	memset(&ro, 0, sizeof ro);
	ro.loop = &d->loop;
	ro.host = &d->host;
	ro.store = d->store;
	ro.ud = d;
	ro.acquire = daemon_models_acquire;
	ro.release = daemon_models_release;
	ro.metrics = &d->metrics;
	if ((rc = approvals_notify_new(&d->approvals, &d->loop, d->events, &d->host)))
		return rc;
	ro.approvals = d->approvals;
	if ((rc = xsync_new(&d->xsync, &d->loop, d->store)))
		return rc;
	ro.xsync = d->xsync;
	if ((rc = runner_new(&d->runner, &ro)))
		return rc;
	memset(&dopt, 0, sizeof dopt);
	dopt.loop = &d->loop;
	dopt.store = d->store;
	dopt.runner = d->runner;
	dopt.events = d->events;
	dopt.metrics = &d->metrics;
	dopt.ud = d;
	dopt.config = daemon_config_get;
	dopt.table = daemon_table_get;
	dopt.outbox_kick = daemon_outbox_kick;
	dopt.outbox_lease = daemon_outbox_lease;
	dopt.outbox_take = daemon_outbox_take;
	dopt.activity = daemon_channel_activity;
	dopt.max_concurrent = config_max_runs(d->cfg);
	dopt.scheduled_done = daemon_scheduled_done;
	dopt.route_seen = daemon_route_seen;
	if ((rc = dispatcher_new(&d->dispatcher, &dopt)))
		return rc;
	{
		struct scheduler_options so = {.loop = &d->loop,
		                               .store = d->store,
		                               .host = &d->host,
		                               .session_busy = daemon_session_busy,
		                               .ud = d};

		if ((rc = scheduler_new(&d->scheduler, &so)))
			return rc;
	}
	memset(&oo, 0, sizeof oo);
	oo.loop = &d->loop;
	oo.store = d->store;
	oo.metrics = &d->metrics;
	oo.ud = d;
	oo.channel = daemon_channel;
	/* Every run's reply can be on its way at once, with room for the
	 * retries and scheduled sends beside them: below that, a reply
	 * committed while the sends are full goes in pending and waits for a
	 * claim of its own (a store query and a commit more). */
	oo.max_in_flight = (size_t)config_max_runs(d->cfg) * 4;
	if (oo.max_in_flight < 32)
		oo.max_in_flight = 32;
	return outbox_new(&d->outbox, &oo);
}

/* Channel instances (one account each for now) and gateway modules. */
static int daemon_start_parts(struct daemon *d)
{
	int rc;

	for (size_t i = 0; channel_registry[i]; i++) {
		const struct channel_ops *ops = channel_registry[i];
		const void *section = channels_config_settings(&d->cfg->channels, ops->name);
		const char *accounts[DAEMON_CHANNELS_MAX];
		size_t n =
		    ops->accounts ? ops->accounts(section, accounts, DAEMON_CHANNELS_MAX) : 0;

		if (n == 0) {
			accounts[0] = "default";
			n = 1;
		}
		for (size_t k = 0; k < n; k++) {
			struct channel *c = NULL;

			if (d->n_channels >= DAEMON_CHANNELS_MAX) {
				log_error("gateway", "too many channel accounts",
				          LOG_I("max", DAEMON_CHANNELS_MAX));
				return SB_ERR_TOOBIG;
			}
			rc = ops->create(&c, &d->host, accounts[k], section);
			if (rc) {
				log_error("gateway", "a channel failed to start",
				          LOG_S("channel", ops->name),
				          LOG_S("account", accounts[k]),
				          LOG_S("error", sb_strerror(rc)));
				return rc;
			}
			/* The adapter set host and account (channel_init). */
			c->ops = ops;
			d->channels[d->n_channels++] = c;
			if (ops->start && (rc = ops->start(c))) {
				log_error("gateway", "a channel failed to start",
				          LOG_S("channel", ops->name),
				          LOG_S("account", accounts[k]),
				          LOG_S("error", sb_strerror(rc)));
				return rc;
			}
		}
	}
	d->gctx = (struct gateway_ctx){
	    .loop = &d->loop,
	    .host = &d->host,
	    .server = d->server,
	    .events = d->events,
	    .dispatcher = d->dispatcher,
	    .store = d->store,
	    .metrics = &d->metrics,
	    .scheduler = d->scheduler,
	    .home = d->opt->home,
	    .approvals = d->approvals,
	    .channels_status = daemon_channels_status,
	    .ud = d,
	};
	for (size_t i = 0; gateway_modules[i] && d->n_modules < DAEMON_MODULES_MAX; i++) {
		rc = gateway_modules[i]->start(&d->gctx, &d->module_state[d->n_modules]);
		if (rc) {
			log_error("gateway", "a module failed to start",
			          LOG_S("module", gateway_modules[i]->name),
			          LOG_S("error", sb_strerror(rc)));
			return rc;
		}
		d->n_modules++;
	}
	return SB_OK;
}

static void daemon_runtime_work(uv_work_t *w)
{
	struct daemon *d = w->data;

	d->runtime.rc = runtime_write(d->opt->home, d->runtime.bind, d->runtime.port,
	                              d->runtime.path, SB_VERSION);
}

static void daemon_runtime_done(uv_work_t *w, int status)
{
	struct daemon *d = w->data;

	if (status == 0 && d->runtime.rc == SB_OK)
		d->runtime_written = true;
	else
		log_warn("gateway", "cannot write the runtime file; the CLI will read the configuration",
		         LOG_S("file", RUNTIME_FILE));
}

static void daemon_announce(struct daemon *d)
{
	int port = d->opt->port > 0 ? d->opt->port : (int)d->cfg->gateway.port;
	const char *bind = d->cfg->gateway.bind;
	char url[300];
	double ms = (double)(clock_mono_ns() - d->started_ns) / 1e6;
	snprintf(url, sizeof url, strchr(bind, ':') ? "http://[%s]:%d" : "http://%s:%d", bind,
	         port);
	log_info("gateway", "ready", LOG_S("listen", url), LOG_S("home", d->opt->home),
	         LOG_D("startup_ms", ms), LOG_I("pid", getpid()),
	         LOG_I("max_runs", config_max_runs(d->cfg)));
	printf("switchboard %s is listening on %s\n"
	       "  health:  %s/healthz   readiness: %s/readyz   metrics: %s/metrics\n"
	       "  talk:    switchboard chat   (or: switchboard send --agent main \"hello\")\n"
	       "  home:    %s\n"
	       "  stop:    Ctrl-C (or SIGTERM); reload the config: SIGHUP or just save the file\n",
	       SB_VERSION, url, url, url, url, d->opt->home);
	fflush(stdout);
	/* Where it listens, for the CLI (config/runtime.h): a file write, on
	 * the thread pool. */
	snprintf(d->runtime.bind, sizeof d->runtime.bind, "%s", bind);
	snprintf(d->runtime.path, sizeof d->runtime.path, "%s",
	         d->cfg->gateway.control.enabled && d->cfg->gateway.control.n_paths
	             ? d->cfg->gateway.control.paths[0]
	             : "/");
	d->runtime.port = port;
	d->runtime.work.data = d;
	if (uv_queue_work(&d->loop, &d->runtime.work, daemon_runtime_work, daemon_runtime_done) != 0)
		log_warn("gateway", "cannot write the runtime file; the CLI will read the configuration",
		         LOG_S("file", RUNTIME_FILE));
}

/* Claims a crash left behind are released; then the gateway is ready. */
static void daemon_recovered(void *ud, int rc, int64_t inbox, int64_t outbox)
{
	struct daemon *d = ud;

	if (rc) {
		log_error("gateway", "store recovery failed; not starting",
		          LOG_S("error", sb_strerror(rc)));
		daemon_shutdown(d);
		daemon_close_all(d);
		return;
	}
	if (inbox || outbox)
		log_warn("gateway", "recovered work left by the last run", LOG_I("inbox", inbox),
		         LOG_I("outbox_in_flight", outbox));
	d->metrics.outbox_resent_after_crash += outbox;
	dispatcher_start(d->dispatcher);
	outbox_start(d->outbox);
	scheduler_start(d->scheduler);
	d->state = DAEMON_READY;
	daemon_announce(d);
	/* The listener exists and /readyz answers 200 from now on. */
	notify_ready(&d->notify);
	if (boot_start(&d->boot, &d->loop, &d->host, d->runner, d->cfg) != SB_OK)
		log_warn("gateway", "cannot start the BOOT.md runs");
}

/* Transcripts are whole again (what a crash of the machine lost from
 * their files is written back from the store); then the claims. */
static void daemon_repaired(void *ud, int rc)
{
	struct daemon *d = ud;

	if (rc == SB_OK)
		rc = store_recover(d->store, daemon_recovered, d);
	if (rc) {
		log_error("gateway", "store recovery failed; not starting",
		          LOG_S("error", sb_strerror(rc)));
		daemon_shutdown(d);
		daemon_close_all(d);
	}
}

static int daemon_recover(struct daemon *d)
{
	return xsync_repair(d->xsync, daemon_repaired, d);
}

static void daemon_watch_config(struct daemon *d)
{
	char tmp[PATH_MAX];

	if (!d->cfg->gateway.watch_config)
		return;
	snprintf(d->cfg_path, sizeof d->cfg_path, "%s", d->opt->config_path);
	snprintf(tmp, sizeof tmp, "%s", d->opt->config_path);
	snprintf(d->cfg_dir, sizeof d->cfg_dir, "%s", dirname(tmp));
	snprintf(tmp, sizeof tmp, "%s", d->opt->config_path);
	snprintf(d->cfg_base, sizeof d->cfg_base, "%s", basename(tmp));
	if (uv_fs_event_init(&d->loop, &d->cfg_watch) != 0)
		return;
	d->cfg_watch.data = d;
	if (daemon_cfg_arm(d) != 0) {
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

int daemon_run(const struct daemon_options *opt)
{
	struct daemon *d;
	struct cfg_errors errs;
	int rc = 1;

	d = calloc(1, sizeof *d);
	if (!d)
		return 1;
	d->started_ns = clock_mono_ns();
	d->opt = opt;
	d->lock_fd = -1;
	/* First: NOTIFY_SOCKET leaves the environment before anything runs. */
	notify_init(&d->notify);
	metrics_init(&d->metrics);
	cfg_errors_init(&errs);
	signal(SIGPIPE, SIG_IGN);
	/* Random bytes in batches, not a system call per id (rng.h). */
	if (rng_install() != SB_OK)
		log_warn("gateway", "cannot install the batched random source; using libsodium's");
	if (sodium_init() < 0) {
		log_error("gateway", "libsodium failed to initialise");
		goto out_free;
	}
	if (config_load(opt->config_path, opt->home, &d->cfg, &errs)) {
		cfg_errors_print(&errs, stderr);
		log_error("gateway", "invalid configuration; not starting",
		          LOG_S("path", opt->config_path),
		          LOG_S("hint", "run `switchboard config check` to list every problem"));
		/* sysexits' EX_CONFIG: a service manager can stop restarting
		 * (systemd's RestartPreventExitStatus=78) until the file is fixed. */
		rc = EX_CONFIG;
		goto out_free;
	}
	daemon_apply_logging(d->cfg);
	daemon_log_lint(d->cfg);
	if (daemon_lock_home(d))
		goto out_free;
	daemon_log_file(d);
	if (uv_loop_init(&d->loop) != 0)
		goto out_free;
	daemon_host_init(d);
	daemon_init_handles(d);
	if (daemon_open_store(d) || daemon_start_pipeline(d) || daemon_start_server(d) ||
	    daemon_start_parts(d) || daemon_recover(d)) {
		d->state = DAEMON_READY; /* let the stop run its whole path */
		daemon_shutdown(d);
		daemon_close_all(d);
		uv_run(&d->loop, UV_RUN_DEFAULT);
		if (d->not_listening)
			rc = EX_CONFIG; /* the port or address is the operator's to fix */
		goto out_loop;
	}
	daemon_watch_config(d);
	uv_timer_start(&d->stats_timer, daemon_stats_tick, 0, DAEMON_STATS_MS);

	uv_run(&d->loop, UV_RUN_DEFAULT);
	rc = 0;
out_loop:
	server_free(d->server);
	d->server = NULL;
	uv_run(&d->loop, UV_RUN_DEFAULT);
	daemon_routes_free(d);
	events_free(d->events);
	bindings_table_free(d->table);
	if (uv_loop_close(&d->loop) != 0) {
		log_error("gateway", "handles left open at exit");
		rc = rc ? rc : 1;
	} else if (rc == 0) {
		log_info("gateway", "stopped");
	}
out_free:
	notify_close(&d->notify);
	if (d->runtime_written)
		runtime_remove(d->opt->home);
	log_file_close(); /* before the lock: the next gateway may rotate it */
	if (d->lock_fd >= 0)
		close(d->lock_fd);
	config_unref(d->cfg);
	cfg_errors_free(&errs);
	log_set_secrets(NULL, 0);
	free(d);
	return rc;
}
