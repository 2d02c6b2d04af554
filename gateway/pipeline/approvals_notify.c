/*
 * approvals_notify.c - see approvals_notify.h.
 */
#include "gateway/pipeline/approvals_notify.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/config/config.h"
#include "gateway/core/err.h"
#include "gateway/core/fmt.h"
#include "gateway/core/jsonw.h"
#include "gateway/core/log.h"

struct approvals_notify {
	struct events *events;
	const struct host *host;
};

static void notify_publish(struct approvals_notify *n, enum event_kind kind,
                           const struct approval_info *a)
{
	struct event e;
	json_t *j = approval_info_json(a);

	if (!j)
		return;
	memset(&e, 0, sizeof e);
	e.kind = kind;
	e.session_key = a->req->session_key;
	e.agent_id = a->req->agent_id;
	e.tool_name = a->req->tool;
	e.tool_id = a->req->tool_use_id;
	e.status = a->decision;
	e.input = j;
	events_publish(n->events, &e);
	json_decref(j);
}

static void notify_delivered(void *ud, int rc, int64_t outbox_id, bool duplicate)
{
	(void)ud;
	(void)outbox_id;
	(void)duplicate;
	if (rc)
		log_warn("approvals", "an approval message could not be queued",
		         LOG_S("error", sb_strerror(rc)));
}

/* Queues {"text", "status", "approval_id"} to channel/account/target,
 * once per approval (key: "<kind>:<id>"). */
static void notify_send(struct approvals_notify *n, const struct approval_info *a,
                        const char *kind, const char *channel, const char *account,
                        const char *target, const char *text)
{
	struct host_outbound msg;
	char key[80];
	json_t *o = json_pack("{ss ss ss}", "text", text, "status", kind, "approval_id", a->id);
	char *payload = o ? jsonw_dumps(o, JSONW_SORT_KEYS, NULL) : NULL;

	json_decref(o);
	if (!payload || FMT(key, "%s:%s", kind, a->id) != SB_OK) {
		free(payload);
		return;
	}
	memset(&msg, 0, sizeof msg);
	msg.idempotency_key = key;
	msg.channel = channel;
	msg.account = account ? account : "default";
	msg.target = target;
	msg.payload = payload;
	if (n->host->deliver(n->host->ctx, &msg, notify_delivered, NULL) != SB_OK)
		log_warn("approvals", "an approval message could not be sent",
		         LOG_S("status", kind), LOG_S("channel", channel));
	free(payload);
}

/* A message to the operator's configured chat. */
static void notify_message(struct approvals_notify *n, const struct approval_info *a)
{
	struct config *cfg = n->host->config ? n->host->config(n->host->ctx) : NULL;
	const struct security_config *sec = cfg ? &cfg->security : NULL;
	char text[1600];

	if (sec && sec->approval_channel && sec->approval_target && n->host->deliver) {
		snprintf(text, sizeof text,
		         "Approval needed (%s): agent %s wants to run %s — %s\n"
		         "Asked from %s%s%s. Answer with:\n"
		         "  switchboard approvals approve %s [--scope session|agent]\n"
		         "  switchboard approvals deny %s",
		         a->id, a->req->agent_id, a->req->tool,
		         a->req->summary ? a->req->summary : "",
		         a->req->channel ? a->req->channel : "the gateway",
		         a->req->sender ? " by " : "", a->req->sender ? a->req->sender : "", a->id,
		         a->id);
		notify_send(n, a, "approval", sec->approval_channel, sec->approval_account,
		            sec->approval_target, text);
	}
	config_unref(cfg);
}

/* The sender's own conversation is told the call waits, so that a
 * silence is not taken for a hang (chat channels only: a webhook or an
 * OpenAI request gets its one answer when the run ends). */
static void notify_sender(struct approvals_notify *n, const struct approval_info *a)
{
	static const char *const chats[] = {"telegram", "slack", "webchat"};
	const struct approval_request *r = a->req;
	char text[512];
	bool chat = false;

	for (size_t i = 0; r->channel && i < sizeof chats / sizeof *chats; i++)
		chat = chat || strcmp(r->channel, chats[i]) == 0;
	if (!chat || !r->target || !n->host->deliver)
		return;
	snprintf(text, sizeof text,
	         "Waiting for the operator's approval to run %s. The answer comes when they "
	         "decide (without one within %lld min, the call is not run).",
	         r->tool, (long long)((r->timeout_ms + 59999) / 60000));
	notify_send(n, a, "approval_wait", r->channel, r->account, r->target, text);
}

static void notify_requested(void *ud, const struct approval_info *a)
{
	struct approvals_notify *n = ud;

	log_info("approvals", "a tool call waits for approval", LOG_S("id", a->id),
	         LOG_S("agent", a->req->agent_id), LOG_S("tool", a->req->tool),
	         LOG_S("scope", a->req->scope ? a->req->scope : ""));
	notify_publish(n, EVENT_APPROVAL_REQUESTED, a);
	notify_message(n, a);
	notify_sender(n, a);
}

static void notify_resolved(void *ud, const struct approval_info *a)
{
	struct approvals_notify *n = ud;

	log_info("approvals", "approval answered", LOG_S("id", a->id),
	         LOG_S("decision", a->decision ? a->decision : ""),
	         LOG_S("by", a->by ? a->by : ""));
	notify_publish(n, EVENT_APPROVAL_RESOLVED, a);
}

int approvals_notify_new(struct approvals **out, uv_loop_t *loop, struct events *events,
                         const struct host *host)
{
	struct approvals_notify *n = calloc(1, sizeof *n);
	struct approvals_hooks h;
	int rc;

	*out = NULL;
	if (!n)
		return SB_ERR_NOMEM;
	n->events = events;
	n->host = host;
	h.ud = n;
	h.requested = notify_requested;
	h.resolved = notify_resolved;
	rc = approvals_new(out, loop, &h);
	if (rc != SB_OK)
		free(n);
	return rc;
}

void approvals_notify_free(struct approvals *a)
{
	void *n = approvals_hooks_ud(a);

	approvals_free(a);
	free(n);
}
