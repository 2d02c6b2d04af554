/*
 * dispatcher.h - from the durable inbox to agent runs and back to the outbox.
 *
 * The dispatcher claims inbox entries, routes each one (bindings: agent,
 * session key, access verdict), and queues it on its session's lane: one
 * run at a time per session, FIFO, under a global cap of concurrent runs.
 * A message that arrives while its session is busy is handled by the
 * agent's queue mode (steer, followup, collect, interrupt), with a
 * per-session cap. A watchdog aborts a run that passes the agent's
 * run_timeout; its lane is released and the queue moves on.
 *
 * When a run ends, its reply goes into the outbox in the same transaction
 * that marks the inbox entry done (store inbox_done), so a crash either
 * re-runs the message or finds the reply committed, never both.
 *
 * Loop thread only.
 */
#ifndef SB_GATEWAY_DISPATCHER_H
#define SB_GATEWAY_DISPATCHER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "bindings/bindings.h"
#include "gateway/config/config.h"
#include "gateway/core/host.h"
#include "gateway/obs/events.h"
#include "gateway/obs/metrics.h"
#include "gateway/pipeline/runner.h"
#include "gateway/store/store.h"

struct dispatcher;

struct dispatcher_options {
	uv_loop_t *loop;
	struct store *store;
	struct runner *runner;
	struct events *events;
	struct metrics *metrics;
	void *ud;
	/* The current configuration (a new reference) and its routing table
	 * (borrowed; valid while that configuration is current). */
	struct config *(*config)(void *ud);
	const struct bindings_table *(*table)(void *ud);
	/* New replies are in the outbox. */
	void (*outbox_kick)(void *ud);
	/* Optional: a run's reply is inserted claimed with outbox_lease's
	 * lease (0: pending, then outbox_kick), and outbox_take gets the
	 * commit's result and the entries to send (outbox_put_lease and
	 * outbox_put_done). */
	int64_t (*outbox_lease)(void *ud);
	void (*outbox_take)(void *ud, size_t leased, int rc, const struct store_outbox_item *items,
	                    size_t n);
	/* A run started (running true) or ended for the message env; for
	 * the channel's typing indicator. Optional. */
	void (*activity)(void *ud, const struct envelope *env, bool running);
	/* A run of a scheduler envelope (channel "heartbeat" or "cron") ended
	 * and its outcome is committed: status as in events ("end_turn",
	 * "error", "timeout", ...), the reply text, and whether it was put in
	 * the outbox (false: no destination, or a suppressed HEARTBEAT_OK).
	 * Optional. */
	void (*scheduled_done)(void *ud, const struct envelope *env, const char *agent_id,
	                       const char *session_key, const char *status, const char *text,
	                       bool delivered);
	/* A run for a message from a channel (not a scheduler one) is starting:
	 * where the agent last talked, for heartbeat and cron target "last".
	 * Optional. */
	void (*route_seen)(void *ud, const char *agent_id, const struct envelope *env);
	size_t max_concurrent; /* runs at once over all sessions; 0 = 8 */
	size_t max_pending;    /* messages held in memory before claiming pauses; 0 = 10000 */
};

int dispatcher_new(struct dispatcher **out, const struct dispatcher_options *opt);

/* Starts claiming (call after the store recovered leases at start-up). */
void dispatcher_start(struct dispatcher *d);

/* New inbox entries were committed: claim them. */
/* At ingest: the lease to insert a new inbox entry with, already claimed
 * (store_inbox_new.claim_lease_ms), so that it runs as soon as its put is
 * committed, without a claim of its own; or 0 when it must go in pending
 * (not started, draining, full, or older entries may be pending in the
 * inbox, whose order it must not pass). A lease > 0 reserves room until
 * dispatcher_put_done. NULL gives 0. */
int64_t dispatcher_put_lease(struct dispatcher *d);
/* The put's result, for an entry put with dispatcher_put_lease's lease
 * (claimed; otherwise only env is released): a new entry is dispatched at
 * once. env is the envelope as the inbox holds it (envelope_to_json_copy),
 * taken: its strings are the dispatcher's, or released, and *env is left
 * empty; NULL when there is none. */
void dispatcher_put_done(struct dispatcher *d, bool claimed, int rc, int64_t id, bool duplicate,
                         struct envelope *env);
void dispatcher_kick(struct dispatcher *d);

/* Stops claiming; runs in flight go on. */
void dispatcher_drain(struct dispatcher *d);

/* Aborts the runs still going (shutdown): their inbox entries are released,
 * not done, so they run again after a restart. */
void dispatcher_abort_all(struct dispatcher *d, const char *why);

/* Runs in flight plus messages waiting in lanes. */
size_t dispatcher_busy(const struct dispatcher *d);

/* Chat commands (commands.h) whose answer is still being read or
 * committed: the gateway waits for them at shutdown, as for runs. */
size_t dispatcher_commands_active(const struct dispatcher *d);

/* Every run must be over. NULL is a no-op. */
void dispatcher_free(struct dispatcher *d);

/* Calls cb once inbox_id has been answered (its reply committed), or after
 * timeout_ms with rc SB_ERR_TIMEOUT. A message answered already (by a run
 * before a restart, or before the call) is answered with the reply committed
 * with it, read from the store; one done without a reply of its own (folded
 * into another run's, or interrupted) waits until the timeout. cb runs once,
 * never from inside the call; rc SB_ERR_CLOSED from dispatcher_free. Loop
 * thread only. */
int dispatcher_await_reply(struct dispatcher *d, int64_t inbox_id, int64_t timeout_ms,
                           host_reply_cb cb, void *ud);

/* Whether a session has a run going or messages waiting (a heartbeat tick
 * is deferred while it does). */
bool dispatcher_session_busy(const struct dispatcher *d, const char *session_key);

/* The scheduler's channels: envelopes on them name their agent and session
 * (route_agent, route_session) and carry, in raw, where the reply goes:
 *   {"deliver": {"channel", "account", "target", "peer_kind"?} (absent: nowhere),
 *    "ack_max": N (heartbeat: a reply that is only HEARTBEAT_OK plus at most N
 *               characters is not delivered; absent: no such rule),
 *    "fresh": true (start a new session first)}
 * They run as followups (never steered into a user's turn) and are never
 * collected with other messages. */
bool dispatcher_channel_scheduled(const char *channel);

/* Aborts the run of a session (the control plane's chat.abort).
 * SB_ERR_NOTFOUND when nothing runs there. */
int dispatcher_abort_session(struct dispatcher *d, const char *session_key, const char *why);

/* What the next turn of session_key (agent agent_id) would send to the
 * model if the message e (its channel, account, peer and sender; its text
 * is not used) arrived now: runner_preview with the run request such a
 * message gets. done runs once, later, on the loop thread. SB_OK, or the
 * errors of runner_preview. */
int dispatcher_preview(struct dispatcher *d, const char *agent_id, const char *session_key,
                       const struct envelope *e, run_preview_cb done, void *ud);

#endif
