/*
 * metrics.c - see metrics.h.
 */
#include "gateway/obs/metrics.h"

#include <string.h>
#include <time.h>

#include "gateway/core/clock.h"
#include "gateway/core/err.h"

const double metrics_commit_bounds[METRICS_COMMIT_BUCKETS] = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
};

const double metrics_run_bounds[METRICS_RUN_BUCKETS] = {
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
};

void metrics_init(struct metrics *m)
{
	memset(m, 0, sizeof *m);
	m->start_ms = clock_mono_ms();
}

void metrics_http(struct metrics *m, const char *route, int status)
{
	struct metrics_route *r = NULL;
	int cls = status / 100;

	for (size_t i = 0; i < m->n_routes; i++)
		if (strcmp(m->routes[i].route, route) == 0) {
			r = &m->routes[i];
			break;
		}
	if (!r) {
		/* The route set is fixed by the server's table; the last slot
		 * collects anything beyond it. */
		if (m->n_routes < METRICS_ROUTES_MAX) {
			r = &m->routes[m->n_routes++];
			r->route = route;
		} else {
			r = &m->routes[METRICS_ROUTES_MAX - 1];
		}
	}
	if (cls < 1 || cls >= METRICS_STATUS_CLASSES)
		cls = 0;
	r->by_status[cls]++;
}

void metrics_commit(struct metrics *m, double seconds, size_t ops, int rc)
{
	for (size_t i = 0; i < METRICS_COMMIT_BUCKETS; i++)
		if (seconds <= metrics_commit_bounds[i]) {
			m->commit_buckets[i]++;
			break;
		}
	m->commit_count++;
	m->commit_sum += seconds;
	m->commit_ops += (int64_t)ops;
	if (rc)
		m->commit_failures++;
}

void metrics_run(struct metrics *m, double seconds)
{
	for (size_t i = 0; i < METRICS_RUN_BUCKETS; i++)
		if (seconds <= metrics_run_bounds[i]) {
			m->run_buckets[i]++;
			break;
		}
	m->run_count++;
	m->run_sum += seconds;
}

static json_t *metrics_histogram_json(const double *bounds, const int64_t *buckets, size_t n,
                                      int64_t count, double sum)
{
	json_t *b = json_array();
	int64_t cum = 0;

	for (size_t i = 0; b && i < n; i++) {
		cum += buckets[i];
		json_array_append_new(b, json_pack("{sf sI}", "le", bounds[i], "count", (json_int_t)cum));
	}
	return json_pack("{sI sf so}", "count", (json_int_t)count, "sum", sum, "buckets",
	                 b ? b : json_array());
}

json_t *metrics_json(const struct metrics *m)
{
	json_t *o = json_object(), *http = json_array();

#define METRICS_SET(name, field) json_object_set_new(o, name, json_integer(m->field))
	if (!o) {
		json_decref(http);
		return NULL;
	}
	METRICS_SET("inboxDepth", inbox_depth);
	METRICS_SET("outboxDepth", outbox_depth);
	METRICS_SET("storeQueueDepth", store_queue_depth);
	METRICS_SET("httpConnections", http_connections);
	METRICS_SET("httpClientInFlight", http_client_in_flight);
	METRICS_SET("ingestAccepted", ingest_accepted);
	METRICS_SET("ingestDuplicates", ingest_duplicates);
	METRICS_SET("ingestRejected", ingest_rejected);
	METRICS_SET("queueDropped", queue_dropped);
	METRICS_SET("runsTimedOut", runs_timed_out);
	METRICS_SET("routeRefused", route_refused);
	METRICS_SET("runsActive", runs_active);
	METRICS_SET("outboxSent", outbox_sent);
	METRICS_SET("outboxRetried", outbox_retried);
	METRICS_SET("outboxFailed", outbox_failed);
	METRICS_SET("outboxResentAfterCrash", outbox_resent_after_crash);
	METRICS_SET("promptCacheReadTokens", prompt_cache_read_tokens);
	METRICS_SET("promptCacheWriteTokens", prompt_cache_write_tokens);
	METRICS_SET("contextCompactionFailures", context_compaction_failures);
	METRICS_SET("toolResultsPersisted", tool_results_persisted);
	METRICS_SET("configReloads", config_reloads_ok);
	METRICS_SET("configReloadFailures", config_reloads_failed);
	METRICS_SET("commitFailures", commit_failures);
#undef METRICS_SET
	json_object_set_new(o, "contextCompactions",
	                    json_integer(m->context_compactions[0] + m->context_compactions[1] +
	                                 m->context_compactions[2]));
	json_object_set_new(o, "storeCommitSeconds",
	                    metrics_histogram_json(metrics_commit_bounds, m->commit_buckets,
	                                           METRICS_COMMIT_BUCKETS, m->commit_count,
	                                           m->commit_sum));
	json_object_set_new(o, "runSeconds",
	                    metrics_histogram_json(metrics_run_bounds, m->run_buckets,
	                                           METRICS_RUN_BUCKETS, m->run_count, m->run_sum));
	if (m->config_last_reload_ms)
		json_object_set_new(o, "lastReload",
		                    json_pack("{sI sb}", "at", (json_int_t)m->config_last_reload_ms,
		                              "ok", m->config_last_reload_ok));
	for (size_t i = 0; http && i < m->n_routes; i++) {
		int64_t total = 0;

		for (size_t k = 0; k < METRICS_STATUS_CLASSES; k++)
			total += m->routes[i].by_status[k];
		json_array_append_new(http, json_pack("{ss sI sI}", "route", m->routes[i].route,
		                                      "total", (json_int_t)total, "errors5xx",
		                                      (json_int_t)m->routes[i].by_status[5]));
	}
	json_object_set_new(o, "http", http ? http : json_array());
	return o;
}

static int metrics_gauge(struct buf *out, const char *name, const char *type, const char *help,
                         int64_t v)
{
	return buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n%s %lld\n", name, help, name, type,
	                  name, (long long)v);
}

const char *const metrics_cache_break_reasons[METRICS_CACHE_BREAK_REASONS] = {
    "system_prompt_changed", "tools_changed", "compaction", "history_changed"};

static int metrics_render_context(const struct metrics *m, struct buf *out)
{
	static const char *const levels[3] = {"trim", "archive", "summary"};
	int rc = SB_OK;

	rc |= buf_puts(out, "# HELP switchboard_prompt_cache_breaks_total Model requests whose "
	                    "prefix differed from the previous request of the session, by "
	                    "reason.\n# TYPE switchboard_prompt_cache_breaks_total counter\n");
	for (int i = 0; i < METRICS_CACHE_BREAK_REASONS; i++)
		rc |= buf_printf(out, "switchboard_prompt_cache_breaks_total{reason=\"%s\"} %lld\n",
		                 metrics_cache_break_reasons[i],
		                 (long long)m->prompt_cache_breaks[i]);
	rc |= metrics_gauge(out, "switchboard_prompt_cache_read_tokens_total", "counter",
	                    "Prompt tokens the providers reported read from their cache.",
	                    m->prompt_cache_read_tokens);
	rc |= metrics_gauge(out, "switchboard_prompt_cache_write_tokens_total", "counter",
	                    "Prompt tokens the providers reported written to their cache.",
	                    m->prompt_cache_write_tokens);
	rc |= buf_puts(out, "# HELP switchboard_context_compactions_total Compactions of session "
	                    "histories, by level.\n# TYPE switchboard_context_compactions_total "
	                    "counter\n");
	for (int i = 0; i < 3; i++)
		rc |= buf_printf(out, "switchboard_context_compactions_total{level=\"%s\"} %lld\n",
		                 levels[i], (long long)m->context_compactions[i]);
	rc |= metrics_gauge(out, "switchboard_context_compaction_failures_total", "counter",
	                    "Summaries of older history that failed.",
	                    m->context_compaction_failures);
	rc |= metrics_gauge(out, "switchboard_context_reactive_retries_total", "counter",
	                    "Model calls retried after compaction on a \"prompt too long\" answer.",
	                    m->context_reactive_retries);
	rc |= metrics_gauge(out, "switchboard_tool_results_persisted_total", "counter",
	                    "Tool results saved to the result store instead of the context.",
	                    m->tool_results_persisted);
	return rc;
}

int metrics_render(const struct metrics *m, struct buf *out)
{
	static const char *const classes[METRICS_STATUS_CLASSES] = {"other", "1xx", "2xx",
	                                                            "3xx",   "4xx", "5xx"};
	int64_t cum = 0;
	int rc = SB_OK;

	rc |= buf_printf(out,
	                 "# HELP switchboard_uptime_seconds Seconds since the gateway started.\n"
	                 "# TYPE switchboard_uptime_seconds gauge\n"
	                 "switchboard_uptime_seconds %.3f\n",
	                 (double)(clock_mono_ms() - m->start_ms) / 1000.0);
	rc |= buf_puts(out, "# HELP switchboard_http_requests_total HTTP responses by route and "
	                    "status class.\n# TYPE switchboard_http_requests_total counter\n");
	for (size_t i = 0; i < m->n_routes; i++)
		for (int c = 0; c < METRICS_STATUS_CLASSES; c++)
			if (m->routes[i].by_status[c])
				rc |= buf_printf(out,
				                 "switchboard_http_requests_total{route=\"%s\","
				                 "status=\"%s\"} %lld\n",
				                 m->routes[i].route, classes[c],
				                 (long long)m->routes[i].by_status[c]);
	rc |= buf_puts(out, "# HELP switchboard_store_commit_seconds Latency of store group "
	                    "commits.\n# TYPE switchboard_store_commit_seconds histogram\n");
	for (size_t i = 0; i < METRICS_COMMIT_BUCKETS; i++) {
		cum += m->commit_buckets[i];
		rc |= buf_printf(out, "switchboard_store_commit_seconds_bucket{le=\"%g\"} %lld\n",
		                 metrics_commit_bounds[i], (long long)cum);
	}
	rc |= buf_printf(out,
	                 "switchboard_store_commit_seconds_bucket{le=\"+Inf\"} %lld\n"
	                 "switchboard_store_commit_seconds_sum %.6f\n"
	                 "switchboard_store_commit_seconds_count %lld\n",
	                 (long long)m->commit_count, m->commit_sum, (long long)m->commit_count);
	rc |= buf_puts(out, "# HELP switchboard_run_seconds Duration of agent runs, from start to "
	                    "end.\n# TYPE switchboard_run_seconds histogram\n");
	cum = 0;
	for (size_t i = 0; i < METRICS_RUN_BUCKETS; i++) {
		cum += m->run_buckets[i];
		rc |= buf_printf(out, "switchboard_run_seconds_bucket{le=\"%g\"} %lld\n",
		                 metrics_run_bounds[i], (long long)cum);
	}
	rc |= buf_printf(out,
	                 "switchboard_run_seconds_bucket{le=\"+Inf\"} %lld\n"
	                 "switchboard_run_seconds_sum %.6f\n"
	                 "switchboard_run_seconds_count %lld\n",
	                 (long long)m->run_count, m->run_sum, (long long)m->run_count);
	rc |= metrics_gauge(out, "switchboard_store_commit_ops_total", "counter",
	                    "Operations committed by group commits.", m->commit_ops);
	rc |= metrics_gauge(out, "switchboard_store_commit_failures_total", "counter",
	                    "Group commits that failed.", m->commit_failures);
	rc |= metrics_gauge(out, "switchboard_inbox_depth", "gauge", "Inbox entries not yet done.",
	                    m->inbox_depth);
	rc |= metrics_gauge(out, "switchboard_outbox_depth", "gauge",
	                    "Outbox entries not yet delivered.", m->outbox_depth);
	rc |= metrics_gauge(out, "switchboard_store_queue_depth", "gauge",
	                    "Operations waiting for the store writer.", m->store_queue_depth);
	rc |= metrics_gauge(out, "switchboard_http_connections", "gauge",
	                    "Open HTTP and WebSocket connections.", m->http_connections);
	rc |= metrics_gauge(out, "switchboard_http_client_in_flight", "gauge",
	                    "Outbound HTTP requests in flight.", m->http_client_in_flight);
	rc |= metrics_gauge(out, "switchboard_ingest_accepted_total", "counter",
	                    "Inbound messages committed to the inbox.", m->ingest_accepted);
	rc |= metrics_gauge(out, "switchboard_ingest_duplicates_total", "counter",
	                    "Inbound messages recognised as duplicates.", m->ingest_duplicates);
	rc |= metrics_gauge(out, "switchboard_ingest_rejected_total", "counter",
	                    "Inbound messages the store could not accept.", m->ingest_rejected);
	rc |= metrics_gauge(out, "switchboard_queue_dropped_total", "counter",
	                    "Messages dropped past a session's queue_cap.", m->queue_dropped);
	rc |= metrics_gauge(out, "switchboard_runs_timed_out_total", "counter",
	                    "Runs the watchdog aborted after run_timeout.", m->runs_timed_out);
	rc |= metrics_gauge(out, "switchboard_route_refused_total", "counter",
	                    "Messages no binding or default agent took.", m->route_refused);
	rc |= metrics_gauge(out, "switchboard_runs_active", "gauge", "Agent runs in flight.",
	                    m->runs_active);
	rc |= metrics_gauge(out, "switchboard_outbox_sent_total", "counter",
	                    "Replies the channels accepted.", m->outbox_sent);
	rc |= metrics_gauge(out, "switchboard_outbox_retries_total", "counter",
	                    "Deliveries that failed and were scheduled again.", m->outbox_retried);
	rc |= metrics_gauge(out, "switchboard_outbox_failed_total", "counter",
	                    "Deliveries given up after their last attempt.", m->outbox_failed);
	rc |= metrics_gauge(out, "switchboard_outbox_resent_after_crash_total", "counter",
	                    "Deliveries in flight at a crash and sent again at start-up (the only "
	                    "possible duplicates, for channels without idempotency).",
	                    m->outbox_resent_after_crash);
	rc |= metrics_render_context(m, out);
	rc |= metrics_gauge(out, "switchboard_config_reloads_total", "counter",
	                    "Configuration reloads applied.", m->config_reloads_ok);
	rc |= metrics_gauge(out, "switchboard_config_reload_failures_total", "counter",
	                    "Configuration reloads rejected as invalid.", m->config_reloads_failed);
	rc |= metrics_gauge(out, "switchboard_config_last_reload_timestamp_seconds", "gauge",
	                    "When the last reload was tried (Unix seconds; 0 = none yet).",
	                    m->config_last_reload_ms / 1000);
	rc |= metrics_gauge(out, "switchboard_config_last_reload_success", "gauge",
	                    "Whether the last reload tried was applied (1) or rejected (0).",
	                    m->config_last_reload_ok ? 1 : 0);
	return rc ? SB_ERR_TOOBIG : SB_OK;
}
