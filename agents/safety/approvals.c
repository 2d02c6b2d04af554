/*
 * approvals.c - pending approvals and approved scopes (see approvals.h).
 *
 * Pending approvals are a list (oldest first), each with its own timer; the
 * record is freed from the timer's close callback. Approved scopes are a
 * small list searched linearly (bounded by APPROVALS_SCOPES_MAX; the oldest
 * is dropped past it).
 */
#include "agents/safety/approvals.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gateway/core/clock.h"
#include "gateway/core/err.h"

struct approval_scope {
	char *agent_id;
	char *session_key; /* NULL: every session of the agent */
	char *scope;
	/* Who asked (asker_new: the channel, its account and the sender;
	 * NULL: nobody named, as the control plane): a scope approved for one
	 * sender covers that sender only, so approving it for the agent does
	 * not let every sender run it. A sender id is only unique within one
	 * account of a channel (two Telegram bots, two Slack workspaces), so
	 * the account is part of it. */
	char *asker;
	struct approval_scope *next;
};

struct approval_wait {
	struct approvals *a;
	uv_timer_t timer;
	char id[17];
	/* the request, copied */
	struct approval_request req;
	char *strs[10];
	int64_t created_at, expires_at;
	approvals_cb cb;
	void *ud;
	bool done;
	struct approval_wait *prev, *next;
};

struct approvals {
	uv_loop_t *loop;
	struct approvals_hooks hooks;
	struct approval_wait *head, *tail;
	size_t n_pending;
	struct approval_scope *scopes;
	size_t n_scopes;
	int closing; /* timers still closing after approvals_free */
	bool freed;
};

int approvals_new(struct approvals **out, uv_loop_t *loop, const struct approvals_hooks *hooks)
{
	struct approvals *a = calloc(1, sizeof *a);

	*out = NULL;
	if (!a)
		return SB_ERR_NOMEM;
	a->loop = loop;
	if (hooks)
		a->hooks = *hooks;
	*out = a;
	return SB_OK;
}

static void approvals_scopes_free(struct approvals *a)
{
	struct approval_scope *s, *n;

	for (s = a->scopes; s; s = n) {
		n = s->next;
		free(s->agent_id);
		free(s->session_key);
		free(s->scope);
		free(s->asker);
		free(s);
	}
	a->scopes = NULL;
	a->n_scopes = 0;
}

static void approvals_maybe_release(struct approvals *a)
{
	if (a->freed && a->closing == 0 && !a->head) {
		approvals_scopes_free(a);
		free(a);
	}
}

static void wait_closed(uv_handle_t *h)
{
	struct approval_wait *w = h->data;
	struct approvals *a = w->a;

	for (size_t i = 0; i < sizeof w->strs / sizeof w->strs[0]; i++)
		free(w->strs[i]);
	free(w);
	a->closing--;
	approvals_maybe_release(a);
}

static void wait_unlink(struct approval_wait *w)
{
	struct approvals *a = w->a;

	if (w->prev)
		w->prev->next = w->next;
	else
		a->head = w->next;
	if (w->next)
		w->next->prev = w->prev;
	else
		a->tail = w->prev;
	w->prev = w->next = NULL;
	a->n_pending--;
	a->closing++;
	uv_close((uv_handle_t *)&w->timer, wait_closed);
}

static void wait_info(const struct approval_wait *w, struct approval_info *i, const char *decision,
                      const char *by)
{
	memset(i, 0, sizeof *i);
	i->id = w->id;
	i->req = &w->req;
	i->created_at = w->created_at;
	i->expires_at = w->expires_at;
	i->decision = decision;
	i->by = by;
}

/* Ends w: hooks, then the callback (unless cancelled), then frees it. */
static void wait_finish(struct approval_wait *w, bool approved, const char *decision,
                        const char *by, const char *why, bool call)
{
	struct approval_info info;
	struct approvals *a = w->a;

	if (w->done)
		return;
	w->done = true;
	uv_timer_stop(&w->timer);
	wait_info(w, &info, decision, by);
	if (a->hooks.resolved)
		a->hooks.resolved(a->hooks.ud, &info);
	if (call && w->cb)
		w->cb(w->ud, approved, why);
	wait_unlink(w);
}

void approvals_free(struct approvals *a)
{
	if (!a)
		return;
	a->freed = true;
	while (a->head)
		wait_finish(a->head, false, "cancelled", NULL,
		            "denied: the gateway is shutting down", true);
	approvals_maybe_release(a);
}

static bool scope_covers(const char *granted, const char *asked)
{
	size_t n = strlen(granted);

	if (strcmp(granted, asked) == 0)
		return true;
	/* a path scope ("write:path:src/") covers its subdirectories */
	return strstr(granted, ":path:") && strncmp(asked, granted, n) == 0 &&
	       (n == 0 || granted[n - 1] == '/' || granted[n - 1] == ':');
}

/* Who asked, as one key: "<len>:channel <len>:account <len>:sender", each
 * part prefixed by its length so that no choice of ids (a ':' in a sender,
 * an empty part) makes two askers one. A run without an account answers
 * the channel's "default" one. NULL when the request names nobody, or on
 * allocation failure (*nomem set). Caller frees. */
static char *asker_new(const struct approval_request *req, bool *nomem)
{
	const char *ch = req->channel ? req->channel : "";
	const char *acc = req->account && *req->account ? req->account : "default";
	size_t n;
	char *out;

	*nomem = false;
	if (!req->sender || !*req->sender)
		return NULL;
	n = strlen(ch) + strlen(acc) + strlen(req->sender) + 3 * 24;
	out = malloc(n);
	if (!out) {
		*nomem = true;
		return NULL;
	}
	snprintf(out, n, "%zu:%s %zu:%s %zu:%s", strlen(ch), ch, strlen(acc), acc,
	         strlen(req->sender), req->sender);
	return out;
}

bool approvals_covered(const struct approvals *a, const struct approval_request *req)
{
	char *asker;
	bool nomem, covered = false;

	if (!a || !req->scope || !*req->scope || !req->agent_id)
		return false;
	asker = asker_new(req, &nomem);
	if (nomem)
		return false; /* not covered: asked again */
	for (const struct approval_scope *s = a->scopes; s && !covered; s = s->next) {
		if (strcmp(s->agent_id, req->agent_id) != 0)
			continue;
		if ((s->asker == NULL) != (asker == NULL) ||
		    (s->asker && strcmp(s->asker, asker) != 0))
			continue;
		if (s->session_key &&
		    (!req->session_key || strcmp(s->session_key, req->session_key) != 0))
			continue;
		covered = scope_covers(s->scope, req->scope);
	}
	free(asker);
	return covered;
}

static void wait_timed_out(uv_timer_t *t)
{
	struct approval_wait *w = t->data;
	char why[160];

	snprintf(why, sizeof why,
	         "denied: the operator did not answer the approval request within %lld s",
	         (long long)(w->req.timeout_ms / 1000));
	wait_finish(w, false, "timeout", NULL, why, true);
}

static char *dup_or_null(const char *s)
{
	return s ? strdup(s) : NULL;
}

int approvals_request(struct approvals *a, const struct approval_request *req, approvals_cb cb,
                      void *ud, struct approval_wait **out)
{
	struct approval_wait *w;
	struct approval_info info;
	unsigned char raw[8];
	const char *src[10];

	if (out)
		*out = NULL;
	if (!a || a->freed || !req || !req->agent_id || !req->tool || !cb || req->timeout_ms <= 0)
		return SB_ERR_INVAL;
	if (a->n_pending >= APPROVALS_PENDING_MAX)
		return SB_ERR_TOOBIG;
	w = calloc(1, sizeof *w);
	if (!w)
		return SB_ERR_NOMEM;
	src[0] = req->agent_id;
	src[1] = req->session_key;
	src[2] = req->tool;
	src[3] = req->tool_use_id;
	src[4] = req->summary;
	src[5] = req->scope;
	src[6] = req->channel;
	src[7] = req->sender;
	src[8] = req->account;
	src[9] = req->target;
	for (size_t i = 0; i < 10; i++) {
		w->strs[i] = dup_or_null(src[i]);
		if (src[i] && !w->strs[i]) {
			for (size_t k = 0; k < i; k++)
				free(w->strs[k]);
			free(w);
			return SB_ERR_NOMEM;
		}
	}
	w->req.agent_id = w->strs[0];
	w->req.session_key = w->strs[1];
	w->req.tool = w->strs[2];
	w->req.tool_use_id = w->strs[3];
	w->req.summary = w->strs[4];
	w->req.scope = w->strs[5];
	w->req.channel = w->strs[6];
	w->req.sender = w->strs[7];
	w->req.account = w->strs[8];
	w->req.target = w->strs[9];
	w->req.timeout_ms = req->timeout_ms;
	randombytes_buf(raw, sizeof raw);
	for (size_t i = 0; i < sizeof raw; i++)
		snprintf(w->id + 2 * i, 3, "%02x", raw[i]);
	w->a = a;
	w->cb = cb;
	w->ud = ud;
	w->created_at = clock_wall_ms();
	w->expires_at = w->created_at + req->timeout_ms;
	uv_timer_init(a->loop, &w->timer);
	w->timer.data = w;
	uv_timer_start(&w->timer, wait_timed_out, (uint64_t)req->timeout_ms, 0);
	w->prev = a->tail;
	if (a->tail)
		a->tail->next = w;
	else
		a->head = w;
	a->tail = w;
	a->n_pending++;
	if (out)
		*out = w;
	wait_info(w, &info, NULL, NULL);
	if (a->hooks.requested)
		a->hooks.requested(a->hooks.ud, &info);
	return SB_OK;
}

void approvals_cancel(struct approval_wait *w)
{
	if (w)
		wait_finish(w, false, "cancelled", NULL, NULL, false);
}

static int approvals_remember(struct approvals *a, const struct approval_request *req, bool session)
{
	struct approval_scope *s, **pp;
	bool nomem;
	char *asker = asker_new(req, &nomem);

	if (nomem)
		return SB_ERR_NOMEM;
	s = calloc(1, sizeof *s);
	if (!s) {
		free(asker);
		return SB_ERR_NOMEM;
	}
	s->agent_id = strdup(req->agent_id);
	s->session_key = session && req->session_key ? strdup(req->session_key) : NULL;
	s->scope = strdup(req->scope);
	s->asker = asker;
	if (!s->agent_id || !s->scope || (session && req->session_key && !s->session_key)) {
		free(s->agent_id);
		free(s->session_key);
		free(s->scope);
		free(s->asker);
		free(s);
		return SB_ERR_NOMEM;
	}
	s->next = a->scopes;
	a->scopes = s;
	if (++a->n_scopes > APPROVALS_SCOPES_MAX) {
		/* drop the oldest (the list's end) */
		for (pp = &a->scopes; (*pp)->next; pp = &(*pp)->next)
			;
		free((*pp)->agent_id);
		free((*pp)->session_key);
		free((*pp)->scope);
		free((*pp)->asker);
		free(*pp);
		*pp = NULL;
		a->n_scopes--;
	}
	return SB_OK;
}

int approvals_resolve(struct approvals *a, const char *id, enum approval_answer answer,
                      const char *by)
{
	struct approval_wait *w, *found = NULL;
	size_t n = id ? strlen(id) : 0;
	const char *decision;

	if (!a || n < 6)
		return SB_ERR_NOTFOUND;
	for (w = a->head; w; w = w->next)
		if (strncmp(w->id, id, n) == 0) {
			if (found)
				return SB_ERR_NOTFOUND; /* ambiguous */
			found = w;
		}
	if (!found)
		return SB_ERR_NOTFOUND;
	w = found;
	if (answer == APPROVAL_DENY) {
		wait_finish(w, false, "denied", by, "denied by the operator", true);
		return SB_OK;
	}
	if ((answer == APPROVAL_SESSION || answer == APPROVAL_AGENT) && w->req.scope &&
	    *w->req.scope) {
		if (approvals_remember(a, &w->req, answer == APPROVAL_SESSION) != SB_OK)
			answer = APPROVAL_ONCE; /* the call still runs */
	}
	decision = answer == APPROVAL_SESSION ? "approved-session"
	           : answer == APPROVAL_AGENT ? "approved-agent"
	                                      : "approved-once";
	wait_finish(w, true, decision, by, NULL, true);
	return SB_OK;
}

json_t *approval_info_json(const struct approval_info *i)
{
	const struct approval_request *r = i->req;
	json_t *o = json_pack("{ss ss ss* ss ss* ss* ss* ss* ss* sI sI}", "id", i->id, "agentId",
	                      r->agent_id, "sessionKey", r->session_key, "tool", r->tool,
	                      "toolUseId", r->tool_use_id, "summary", r->summary, "scope", r->scope,
	                      "channel", r->channel, "sender", r->sender, "createdAt",
	                      (json_int_t)i->created_at, "expiresAt", (json_int_t)i->expires_at);

	if (o && i->decision)
		json_object_set_new(o, "decision", json_string(i->decision));
	if (o && i->by)
		json_object_set_new(o, "by", json_string(i->by));
	return o;
}

json_t *approvals_list_json(const struct approvals *a)
{
	json_t *arr = json_array();
	struct approval_info info;

	if (!arr || !a)
		return arr;
	for (const struct approval_wait *w = a->head; w; w = w->next) {
		wait_info(w, &info, NULL, NULL);
		if (json_array_append_new(arr, approval_info_json(&info))) {
			json_decref(arr);
			return NULL;
		}
	}
	return arr;
}

size_t approvals_pending(const struct approvals *a)
{
	return a ? a->n_pending : 0;
}

void *approvals_hooks_ud(const struct approvals *a)
{
	return a ? a->hooks.ud : NULL;
}
