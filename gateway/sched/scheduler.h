/*
 * scheduler.h - heartbeats and cron jobs.
 *
 * The scheduler owns no agent runs. When something is due it puts a
 * synthetic envelope in the durable inbox through host->ingest, on channel
 * "heartbeat" or "cron", naming its agent and session (route_agent,
 * route_session) and, in the envelope's raw JSON, where the reply goes and
 * whether an acknowledgement is suppressed (see dispatcher.h). From there
 * the run is an ordinary one: the session's lane (one run at a time), the
 * transcript, the reply committed to the outbox with the inbox entry done,
 * crash recovery. The dispatcher reports each scheduled run's outcome back
 * (scheduler_run_done), which updates the heartbeat status or the job's
 * state and run history.
 *
 * One uv timer is armed for the earliest due item (heartbeat or job) and
 * re-armed whenever that changes; nothing polls. Cron jobs (definition and
 * state) live in the store (cron_jobs, cron_runs); jobs declared in the
 * config file are synchronised into it at start and on reload. Heartbeat
 * status (last run, next due) and each agent's last route (target "last")
 * are kept in the store's kv table.
 *
 * The clock: unix time, unless the test-only environment variables
 * SWITCHBOARD_TEST_NOW (ISO 8601 or unix ms: the scheduler's time at start)
 * and SWITCHBOARD_TEST_CLOCK_RATE (scheduler seconds per real second,
 * 1..100000) are set when the daemon starts.
 *
 * Loop thread only.
 */
#ifndef SB_GATEWAY_SCHEDULER_H
#define SB_GATEWAY_SCHEDULER_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "gateway/core/envelope.h"
#include "gateway/core/host.h"
#include "gateway/store/store.h"

struct scheduler;

struct scheduler_options {
	uv_loop_t *loop;
	struct store *store;
	const struct host *host; /* ingest, config */
	/* Whether a run of session_key is active or queued (the dispatcher's
	 * lanes); a due heartbeat waits rather than stacking. Mandatory. */
	bool (*session_busy)(void *ud, const char *session_key);
	void *ud;
};

/* The most runs kept per job. */
#define SCHEDULER_RUNS_KEEP 200

int scheduler_new(struct scheduler **out, const struct scheduler_options *opt);
/* Loads jobs and heartbeat status from the store and arms the timer (call
 * once the store recovered). */
void scheduler_start(struct scheduler *s);
/* The configuration changed: heartbeats and config-declared jobs follow. */
void scheduler_reconfigure(struct scheduler *s);
/* Stops scheduling (drain); runs already in the inbox go on. */
void scheduler_stop(struct scheduler *s);
/* After the store closed (its callbacks may reach the scheduler until
 * then). NULL is a no-op. */
void scheduler_free(struct scheduler *s);

/* The dispatcher's hooks (dispatcher_options.scheduled_done, route_seen). */
void scheduler_run_done(struct scheduler *s, const struct envelope *env, const char *agent_id,
                        const char *session_key, const char *status, const char *text,
                        bool delivered);
void scheduler_route_seen(struct scheduler *s, const char *agent_id, const struct envelope *env);

/* The scheduler's time (unix ms). */
int64_t scheduler_now_ms(const struct scheduler *s);

/* {"now", "heartbeats": [{agentId, enabled, everyMs, target, nextDue,
 * lastAt, lastStatus, lastDetail}], "cron": {"jobs", "enabled", "nextDue"}}
 * (new reference). */
json_t *scheduler_status(struct scheduler *s);

/* Runs an agent's heartbeat now, as if it were due (quiet hours, a busy
 * main session and an empty HEARTBEAT.md skip or defer it as usual); the
 * next one comes an interval later. SB_ERR_NOTFOUND when the agent has no
 * heartbeat; SB_ERR_EXISTS when one is running. */
int scheduler_heartbeat_run(struct scheduler *s, const char *agent_id);

/* ---- cron jobs (for the control plane) ---- */

/* rc SB_OK with result (borrowed for the call), or an error and a message. */
typedef void (*scheduler_cb)(void *ud, int rc, const char *error, const json_t *result);

/* Every job with its state: [{...spec, "source", "state": {...}}]. */
json_t *scheduler_cron_list(struct scheduler *s);
/* Adds or replaces a job (the JSON of cron_spec_from_json); cb once it is
 * stored. SB_ERR_INVAL with err filled (a bad definition, or the id is a
 * config job's). The callback runs only when SB_OK is returned (also for
 * the functions below). */
int scheduler_cron_add(struct scheduler *s, const json_t *spec, char *err, size_t err_size,
                       scheduler_cb cb, void *ud);
/* Removes a job added through the API. SB_ERR_NOTFOUND; SB_ERR_INVAL for a
 * config job. */
int scheduler_cron_remove(struct scheduler *s, const char *id, scheduler_cb cb, void *ud);
/* Runs a job now (also a disabled one); cb once it is in the inbox.
 * SB_ERR_NOTFOUND; SB_ERR_EXISTS when a run of it is going. */
int scheduler_cron_run(struct scheduler *s, const char *id, scheduler_cb cb, void *ud);
/* The run history, newest first; id NULL = every job. */
int scheduler_cron_runs(struct scheduler *s, const char *id, size_t limit, scheduler_cb cb,
                        void *ud);

#endif
