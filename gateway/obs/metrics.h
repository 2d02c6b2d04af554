/*
 * metrics.h - the gateway's counters, gauges and histograms, rendered in the
 * Prometheus text exposition format (version 0.0.4) at GET /metrics.
 *
 * Loop thread only: every update comes from loop callbacks, so no atomics.
 */
#ifndef SB_GATEWAY_METRICS_H
#define SB_GATEWAY_METRICS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gateway/core/buf.h"

#define METRICS_ROUTES_MAX 64
#define METRICS_STATUS_CLASSES 6
#define METRICS_COMMIT_BUCKETS 12
#define METRICS_CACHE_BREAK_REASONS 4
#define METRICS_RUN_BUCKETS 12

struct metrics_route {
	const char *route;                         /* a static route name, e.g. "/healthz" */
	int64_t by_status[METRICS_STATUS_CLASSES]; /* index = status / 100 (0 = other) */
};

struct metrics {
	int64_t start_ms; /* monotonic ms at start */
	struct metrics_route routes[METRICS_ROUTES_MAX];
	size_t n_routes;

	/* store commit latency histogram (seconds) */
	int64_t commit_buckets[METRICS_COMMIT_BUCKETS]; /* cumulative at render time */
	int64_t commit_count;
	double commit_sum;
	int64_t commit_ops;
	int64_t commit_failures;

	/* agent run duration histogram (seconds), from start to end */
	int64_t run_buckets[METRICS_RUN_BUCKETS];
	int64_t run_count;
	double run_sum;

	int64_t inbox_depth;
	int64_t outbox_depth;
	int64_t store_queue_depth;
	int64_t http_connections;
	int64_t http_client_in_flight;
	int64_t config_reloads_ok;
	int64_t config_reloads_failed;
	int64_t config_last_reload_ms; /* unix ms of the last reload tried; 0 = none yet */
	bool config_last_reload_ok;
	/* Why the last reload was rejected ("" when it was not): the first
	 * error, file:line:col: key: message. Loop thread. */
	char config_last_reload_error[512];
	int64_t ingest_accepted;
	int64_t ingest_duplicates;
	int64_t ingest_rejected;
	int64_t queue_dropped;  /* messages dropped past a session's queue_cap */
	int64_t runs_timed_out; /* runs the watchdog aborted */
	int64_t route_refused;  /* messages no binding or default agent took */
	int64_t runs_active;
	int64_t outbox_sent;
	int64_t outbox_retried;
	int64_t outbox_failed;
	int64_t outbox_resent_after_crash; /* sends cut between acceptance and commit */

	/* context (docs/context.md); reasons indexed as enum turn_cache_break */
	int64_t prompt_cache_breaks[METRICS_CACHE_BREAK_REASONS];
	int64_t prompt_cache_read_tokens;
	int64_t prompt_cache_write_tokens;
	int64_t context_compactions[3]; /* by level - 1 */
	int64_t context_compaction_failures;
	int64_t context_reactive_retries;
	int64_t tool_results_persisted;
};

/* The reason labels of switchboard_prompt_cache_breaks_total, in order. */
extern const char *const metrics_cache_break_reasons[METRICS_CACHE_BREAK_REASONS];

/* Bucket upper bounds of the commit latency histogram, in seconds. */
extern const double metrics_commit_bounds[METRICS_COMMIT_BUCKETS];

void metrics_init(struct metrics *m);

/* Counts one HTTP response for route (a string that lives as long as m). */
void metrics_http(struct metrics *m, const char *route, int status);

/* Records one store group commit. */
void metrics_commit(struct metrics *m, double seconds, size_t ops, int rc);

/* Bucket upper bounds of the run duration histogram, in seconds. */
extern const double metrics_run_bounds[METRICS_RUN_BUCKETS];

/* Records one agent run that took seconds. */
void metrics_run(struct metrics *m, double seconds);

/* The same figures as metrics_render, as JSON for the control plane's
 * metrics.get (new reference; NULL on no memory). */
json_t *metrics_json(const struct metrics *m);

/* Renders everything. Returns SB_OK or the buf error. */
int metrics_render(const struct metrics *m, struct buf *out);

#endif
