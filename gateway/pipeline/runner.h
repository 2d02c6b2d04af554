/*
 * runner.h - runs one agent turn for a session: finds (or starts) the
 * session, loads its transcript and the workspace's system prompt off the
 * loop, runs the turn state machine (agents/turn.h), and records everything in
 * the transcript. The CLI's `agent run` and the message pipeline both use it.
 *
 * Loop thread only.
 */
#ifndef SB_GATEWAY_RUNNER_H
#define SB_GATEWAY_RUNNER_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "agents/models.h"
#include "agents/turn.h"
#include "bindings/bindings_config.h"
#include "gateway/config/config.h"
#include "gateway/core/host.h"
#include "gateway/obs/metrics.h"
#include "gateway/pipeline/xsync.h"
#include "gateway/store/store.h"

struct runner;
struct run_job;

struct runner_options {
	uv_loop_t *loop;
	const struct host *host;
	struct store *store;
	void *ud;
	/* The configuration and model router a new job uses; each job holds
	 * them from its start to its end, so a reload never pulls them from
	 * under a running turn. acquire returns the models and a token (and a
	 * new config reference in *cfg); release gives both back. */
	struct models *(*acquire)(void *ud, struct config **cfg, void **token);
	void (*release)(void *ud, struct config *cfg, void *token);
	/* Where runs count their context figures (cache breaks, compactions);
	 * may be NULL. */
	struct metrics *metrics;
	/* Gate 3: where tool calls that need the operator's approval wait
	 * (agents/safety/approvals.h); NULL = nobody can be asked, such calls are
	 * denied (the CLI's `agent run`). */
	struct approvals *approvals;
	/* Where a finished run's transcript bytes are kept durable until a
	 * batched sync (gateway/pipeline/xsync.h); NULL: each transcript is
	 * synced when it closes (the CLI's `agent run`). */
	struct xsync *xsync;
};

struct run_request {
	const char *agent_id;
	const char *session_key;
	const char *text;
	const char *channel; /* where the message came from (for the message tool); may be NULL */
	const char *account;
	const char *target;
	/* Who is asking, for the permission rules (agents/safety/permissions.h):
	 * the sender's id on channel, and whether the conversation is a group
	 * or channel rather than a direct message. */
	const char *sender;
	bool group;
	bool main_session; /* the agent's private main session (MEMORY.md) */
	bool new_session;  /* start a fresh session under the key first (/new);
	                    * with an empty text, only that */
	/* The session type's reset policy (session.reset / reset_by_type):
	 * when it says the session has expired, a fresh one starts. */
	struct session_reset_config reset;
	const struct turn_events *ev; /* may be NULL */
	/* Claimed before (a crash or a stop cut its run short): when the
	 * session's history ends with this text, unanswered, the turn resumes
	 * from there instead of adding it a second time. */
	bool redelivered;
	/* The inbox entry the run answers (0: none): the message tool's keys
	 * derive from it, so a replayed run sends nothing twice. */
	int64_t inbox_id;
	/* When the message was received (unix ms; 0: unknown): with inbox_id,
	 * it names the session a first message starts (see runner.c). */
	int64_t received_at;
	/* /compact: compact the session's context now and answer with the
	 * token counts; no model turn, text is not used (commands.h). */
	bool compact_only;
};

struct run_outcome {
	int rc;            /* SB_OK when the turn ran (see result), else why it could not */
	const char *error; /* when rc != SB_OK: what the sender may be told */
	const char *detail; /* the same for the log (may name server paths); may be NULL */
	const struct turn_result *result; /* when rc == SB_OK */
	const char *session_id;
	const char *transcript_path;
	/* Inbox ids of messages steered into this run that no model call
	 * carried (it ended first, or never started): not answered, to be
	 * carried into a next run. A JSON array of integers; may be NULL. */
	const json_t *unsent;
};

typedef void (*run_done_cb)(void *ud, const struct run_outcome *o);

int runner_new(struct runner **out, const struct runner_options *opt);
/* Every job must have finished. NULL is a no-op. */
void runner_free(struct runner *r);

/* Starts a job; done runs once, later (after the transcript is written). */
int runner_run(struct runner *r, const struct run_request *req, run_done_cb done, void *ud,
               struct run_job **out);

/* Aborts a job at whatever stage it is; done still runs (from inside this
 * call when the turn was running). */
void runner_abort(struct run_job *j, const char *why);

/* Whether runner_abort would still stop j (false once its turn is over and
 * its transcript is being written, or when it was aborted already). */
bool runner_stoppable(const struct run_job *j);

/* Gives the running turn one more user message, seen at its next model
 * call (at its first one when the job is still preparing). SB_ERR_AGAIN
 * when the job was aborted or its turn is over. */
int runner_steer(struct run_job *j, const char *text);
/* The same for the text of inbox entry inbox_id: recorded with it, and not
 * added again when the session's history holds it already (a redelivery of
 * a message steered into the run's first attempt, before a crash). */
int runner_steer_from(struct run_job *j, const char *text, int64_t inbox_id);

/* What the next turn of a session would send to the model, from the same
 * steps a turn takes (the session lookup, the transcript, the workspace
 * snapshot with the daily notes, the tool list), without changing
 * anything: no session is created, no transcript written. Borrowed for the
 * callback only. */
/* A daily note in the system prompt (docs/memory.md). */
struct run_preview_note {
	const char *name; /* "memory/YYYY-MM-DD.md" */
	size_t bytes;     /* what memory_get gave of it */
	size_t kept;      /* what of that is in the prompt (its start) */
};

struct run_preview {
	const char *agent_id;
	const char *session_key;
	const char *session_id; /* "" when the next message starts a new session */
	bool new_session;       /* none yet, or its reset policy ended it */
	const char *workspace;  /* the resolved directory */
	const char *system;     /* the system prompt, system_len bytes */
	size_t system_len;
	const struct workspace_version *version; /* what it was built from */
	const json_t *tools;     /* the tool list, as the turn hands it to the provider */
	const struct run_preview_note *notes; /* the daily notes, after the workspace files */
	size_t n_notes;
	const char *model;       /* the agent's model ("provider/model") */
	size_t history_messages; /* messages the session's history holds */
	/* Token estimates (agents/context/tokens.h), scaled by the session's
	 * last calibration: the system prompt, the tools, the history, and
	 * their sum (the next request before its new message). */
	int64_t tokens_system, tokens_tools, tokens_history, tokens_total;
	double calibration;
};

/* rc SB_OK with p, or an error with error (for the requester) and p NULL. */
typedef void (*run_preview_cb)(void *ud, int rc, const char *error, const struct run_preview *p);

/* Starts a preview for req (its text is not used and may be NULL); done
 * runs once, later. SB_OK, SB_ERR_INVAL, SB_ERR_NOTFOUND (no such agent),
 * SB_ERR_AGAIN (no configuration yet), SB_ERR_NOMEM. Counts as a job in
 * flight (runner_active) until done has run. */
int runner_preview(struct runner *r, const struct run_request *req, run_preview_cb done, void *ud);

/* Jobs in flight. */
size_t runner_active(const struct runner *r);

/* Stops the agents' MCP servers (agents/mcp/mcp.h) and returns how many are
 * still closing; the shutdown calls it once no run is left, until 0 or its
 * grace ends. Loop thread only. */
size_t runner_stop_servers(struct runner *r);

#endif
