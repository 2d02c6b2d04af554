/*
 * approvals.h - gate 3: tool calls that wait for the operator.
 *
 * A call whose permission decision is "ask" becomes a pending approval with
 * an id; the hooks announce it (the daemon publishes an `approval.requested`
 * event on the control plane and sends a message to the operator's channel).
 * The call waits until the operator answers (approvals.approve /
 * approvals.deny, `switchboard approvals approve|deny`) or the timeout
 * passes (then it is denied). An approval may be for this call only
 * ("once") or for its scope: the same tool and the same path prefix or
 * command class, for this session or for the whole agent; later calls in
 * that scope are allowed without asking. Scopes live in memory: a restart
 * forgets them (and denies what was pending).
 *
 * Loop thread only.
 */
#ifndef SB_AGENTS_APPROVALS_H
#define SB_AGENTS_APPROVALS_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#define APPROVALS_PENDING_MAX 256
#define APPROVALS_SCOPES_MAX 4096

enum approval_answer {
	APPROVAL_DENY = 0,
	APPROVAL_ONCE,
	APPROVAL_SESSION, /* this call's scope, for the rest of the session */
	APPROVAL_AGENT,   /* this call's scope, for every session of the agent */
};

/* What one pending approval is about; strings borrowed for the call. */
struct approval_request {
	const char *agent_id;
	const char *session_key;
	const char *tool;
	const char *tool_use_id;
	const char *summary; /* what the call would do, for the operator */
	const char *scope;   /* the cache key (permissions.h: perm_decision.scope) */
	const char *channel; /* who asked */
	const char *sender;
	const char *account; /* the conversation the run answers (its channel's */
	const char *target;  /* account and peer), or NULL: told that it waits */
	int64_t timeout_ms;
};

/* A pending approval as the hooks and the list see it. */
struct approval_info {
	const char *id;
	const struct approval_request *req;
	int64_t created_at; /* unix ms */
	int64_t expires_at;
	const char *decision; /* resolved: "approved-once", "approved-session",
	                       * "approved-agent", "denied", "timeout", "cancelled" */
	const char *by;       /* who answered, or NULL */
};

struct approvals_hooks {
	void *ud;
	void (*requested)(void *ud, const struct approval_info *a);
	void (*resolved)(void *ud, const struct approval_info *a);
};

struct approvals;
struct approval_wait;

/* approved: whether the call may run; why: a sentence for the model when it
 * may not ("denied by the operator", "no answer within 5m"). Runs once,
 * never from inside approvals_request. */
typedef void (*approvals_cb)(void *ud, bool approved, const char *why);

/* hooks is copied (may be NULL). SB_OK or SB_ERR_NOMEM. */
int approvals_new(struct approvals **out, uv_loop_t *loop, const struct approvals_hooks *hooks);

/* Denies everything pending (callbacks run, decision "cancelled") and frees
 * once the timers are closed (the loop must run afterwards). NULL: no-op. */
void approvals_free(struct approvals *a);

/* Whether an earlier "for this scope" approval covers req (the same agent,
 * and the same session for a session approval; a path scope covers its
 * subdirectories). */
bool approvals_covered(const struct approvals *a, const struct approval_request *req);

/* Queues an approval; cb runs once answered, timed out or cancelled. *out
 * (may be NULL) is for approvals_cancel until cb runs. SB_OK; SB_ERR_TOOBIG
 * (too many pending); SB_ERR_INVAL; SB_ERR_NOMEM. */
int approvals_request(struct approvals *a, const struct approval_request *req, approvals_cb cb,
                      void *ud, struct approval_wait **out);

/* Withdraws a pending approval (the run was aborted): cb does not run. */
void approvals_cancel(struct approval_wait *w);

/* Answers the pending approval id (a unique prefix of at least 6
 * characters will do). by names who answered (copied). SB_OK,
 * SB_ERR_NOTFOUND. */
int approvals_resolve(struct approvals *a, const char *id, enum approval_answer answer,
                      const char *by);

/* The pending approvals, oldest first:
 * [{"id","agentId","sessionKey","tool","toolUseId","summary","scope","channel","sender",
 *   "createdAt","expiresAt"}]. New reference (NULL on allocation failure). */
json_t *approvals_list_json(const struct approvals *a);

/* One approval as JSON (the list's element shape, plus "decision" and
 * "by" when resolved). New reference. */
json_t *approval_info_json(const struct approval_info *i);

size_t approvals_pending(const struct approvals *a);

/* The ud given in the hooks at approvals_new. */
void *approvals_hooks_ud(const struct approvals *a);

#endif
