/*
 * slack.c - the Slack channel: one instance per `channels.slack.accounts`
 * entry (one workspace each).
 *
 * Start: auth.test with the bot token tells the bot's user and bot ids (to
 * drop its own messages and to see mentions); it is retried with backoff
 * until it succeeds.
 *
 * Inbound, Events API (mode events): a POST route on the account's events
 * path. The signature (X-Slack-Signature v0) is checked before anything
 * else (401 and a log line when it fails); url_verification is answered
 * with its challenge; an event callback is normalised (slack_proto.c) and
 * a message handed to host->ingest, and the request is answered 200 only
 * when the inbox has it. Slack wants an answer within 3 s: when the
 * commit takes longer than ack_deadline the request is answered 503
 * instead, so that Slack sends the event again rather than believing it
 * delivered; the commit still completes, and the retry is then a
 * duplicate of the inbox entry, answered 200 and not processed again.
 * Until auth.test has told the bot's ids, event callbacks are answered 503
 * (mention gating and dropping the bot's own messages need them), so that
 * no acknowledged event is judged on an identity not known yet.
 * The inbox dedupe key is team:channel:ts, so Slack's retries
 * (X-Slack-Retry-Num, same event_id) and the app_mention and message
 * events of one message are one entry. Events that are not messages to
 * answer are acknowledged at once.
 *
 * Inbound, Socket Mode (mode socket): apps.connections.open with the app
 * token gives a wss:// URL; one WebSocket at a time (host->ws_connect).
 * "hello" marks it live; every events_api envelope is normalised and
 * acknowledged ({"envelope_id"}) only after the inbox commit, on the
 * connection it came from (an envelope whose connection went away is
 * redelivered by Slack and then deduped); other envelopes are acknowledged
 * at once. "disconnect": warning is logged, refresh_requested closes the
 * socket and opens a new one at once with a fresh connections.open,
 * link_disabled stops and is reported in the status. A socket that closes
 * or fails is opened again after a backoff (1 s doubling to
 * reconnect_max); a watchdog pings every ping_interval and drops a socket
 * from which nothing arrived for ping_timeout.
 *
 * Outbound (send): the reply text is converted to mrkdwn, split at
 * chunk_limit, and posted with chat.postMessage (JSON, Bearer bot token),
 * in the thread as reply_in_thread says. 429 is retryable with the
 * Retry-After hint; ok:false errors are reported with Slack's code (only
 * rate limits and Slack's internal errors are retried). A reply in several
 * pieces records its progress in the store's kv table under its
 * idempotency key, so a retry posts only the pieces still missing. The
 * first piece's ts is the channel message id.
 *
 * Lifetimes: requests, envelopes, sends and API calls waiting for a
 * callback are on lists; destroy detaches them (their late callbacks free
 * them) and answers what is unanswered.
 *
 * Loop thread only.
 */
#include <inttypes.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "channels/adapter.h"
#include "channels/channel.h"
#include "channels/slack/slack.h"
#include "channels/slack/slack_config.h"
#include "channels/slack/slack_proto.h"
#include "gateway/core/clock.h"
#include "gateway/core/crash.h"
#include "gateway/core/err.h"
#include "gateway/core/jsonw.h"
#include "gateway/core/log.h"

#define SLACK_HDR_MAX 256
#define SLACK_ERR_MAX 256
#define SLACK_URL_MAX 2048
#define SLACK_BACKOFF_MIN_MS 1000
#define SLACK_API_MAX_BYTES (1u << 20)
#define SLACK_RETRY_AFTER_DEFAULT_MS 1000
#define SLACK_ENV_TRIES 40 /* 250 ms apart: ten seconds */
#define SLACK_ENV_RETRY_MS 250

struct slack_call;
struct slack_req;
struct slack_env;
struct slack_send;

struct slack {
	struct channel base;
	const struct slack_config *cfg;          /* the current snapshot's */
	const struct slack_account_config *acct; /* NULL: not configured */
	bool started, stopping, routed;
	int mode; /* enum slack_mode, fixed at start */
	char path[SLACK_PATH_MAX + 1];
	/* identity, from auth.test */
	char *bot_user_id, *bot_id, *team_id;
	bool authed, auth_busy;
	int64_t auth_backoff_ms;
	/* Socket Mode */
	uv_timer_t *retry_timer; /* auth and reconnect backoff */
	uv_timer_t *ping_timer;  /* the watchdog */
	struct host_ws *ws;
	uint64_t ws_gen; /* changes whenever ws is dropped */
	bool opening;    /* apps.connections.open in flight */
	bool closing;    /* ws is shutting down; on_close follows */
	bool again_now;  /* reconnect as soon as it is gone */
	bool hello;      /* the live socket said hello */
	bool disabled;   /* link_disabled: no more reconnects */
	int64_t backoff_ms;
	int64_t last_rx_ms, ws_since_ms;
	/* status */
	int64_t last_event_ms, last_error_ms;
	char last_error[SLACK_ERR_MAX];
	/* waiting for callbacks */
	struct slack_call *calls;
	struct slack_req *reqs;
	struct slack_env *envs;
	struct slack_send *sends;
	struct channel_ratelog rejects; /* refusals logged, at most CHANNEL_LOG_BURST a minute */
};

typedef void (*slack_api_cb)(struct slack *s, void *ud, int rc, const struct httpc_response *resp,
                             json_t *body);

/* One Web API call; s is NULL once the adapter is gone. */
struct slack_call {
	struct slack *s;
	struct slack_call *prev, *next;
	slack_api_cb cb;
	void *ud;
};

/* An Events API request waiting for the inbox. */
struct slack_req {
	struct slack *s;
	struct slack_req *prev, *next;
	struct host_http_req *http; /* NULL once answered */
	uv_timer_t *deadline;
};

/* A Socket Mode envelope waiting for the inbox. */
struct slack_env {
	struct slack *s;
	struct slack_env *prev, *next;
	uint64_t gen;
	char id[128];
	json_t *payload;
	uv_timer_t *timer; /* the next try, when the store said "not now" */
	bool timed;        /* waiting for timer, not for the store */
	int tries;
};

/* One outbox entry being posted, piece by piece. */
struct slack_send {
	struct slack *s;
	struct slack_send *prev, *next;
	const struct host *host;
	channel_send_cb cb;
	void *ud;
	char **chunks;
	size_t n, i;
	char *channel, *thread_ts, *key, *first_ts;
	char ns[sizeof "slack:" + ENVELOPE_ACCOUNT_MAX];
};

/* Doubly-linked list helpers for the four kinds above (each has s, prev,
 * next as its first members). */
#define SLACK_LINK(head, x, owner)                                                                 \
	do {                                                                                       \
		(x)->s = (owner);                                                                  \
		(x)->prev = NULL;                                                                  \
		(x)->next = (head);                                                                \
		if (head)                                                                          \
			(head)->prev = (x);                                                        \
		(head) = (x);                                                                      \
	} while (0)
#define SLACK_UNLINK(head, x)                                                                      \
	do {                                                                                       \
		if ((x)->s) {                                                                      \
			if ((x)->prev)                                                             \
				(x)->prev->next = (x)->next;                                       \
			else                                                                       \
				(head) = (x)->next;                                                \
			if ((x)->next)                                                             \
				(x)->next->prev = (x)->prev;                                       \
		}                                                                                  \
		(x)->s = NULL;                                                                     \
		(x)->prev = (x)->next = NULL;                                                      \
	} while (0)

static void slack_error(struct slack *s, const char *what)
{
	s->last_error_ms = clock_wall_ms();
	snprintf(s->last_error, sizeof s->last_error, "%s", what);
}

/* Logs a refused request (never with secret material), rate-limited. */
static void slack_log_reject(struct slack *s, const char *peer, int status, const char *why)
{
	int64_t suppressed = 0;

	if (!channel_ratelog_take(&s->rejects, &suppressed))
		return;
	log_warn("slack", "event request refused", LOG_S("account", s->base.account),
	         LOG_S("peer", peer ? peer : ""), LOG_I("status", status), LOG_S("why", why),
	         LOG_I("suppressed_before", suppressed));
}

/* ---- timers (heap handles, so that destroy need not wait for them) ---- */

static void slack_timer_free(uv_handle_t *h)
{
	free(h);
}

static uv_timer_t *slack_timer_new(struct slack *s, void *data)
{
	uv_timer_t *t = malloc(sizeof *t);

	if (!t)
		return NULL;
	uv_timer_init(s->base.host->loop, t);
	t->data = data;
	return t;
}

static void slack_timer_close(uv_timer_t **t)
{
	if (!*t)
		return;
	uv_timer_stop(*t);
	(*t)->data = NULL;
	uv_close((uv_handle_t *)*t, slack_timer_free);
	*t = NULL;
}

/* ---- Web API ---- */

static void slack_api_done(void *ud, int rc, const struct httpc_response *resp)
{
	struct slack_call *c = ud;
	struct slack *s = c->s;
	json_t *body = NULL;

	if (s)
		SLACK_UNLINK(s->calls, c);
	if (rc == SB_OK && resp && resp->status == 200 && resp->body.data)
		body = json_loads(resp->body.data, 0, NULL);
	c->cb(s, c->ud, rc, resp, body);
	json_decref(body);
	free(c);
}

/* Calls a Web API method: POST base+method with a JSON body (or an empty
 * form) and a bearer token. cb runs once, later (s NULL when the adapter
 * went away meanwhile). */
static int slack_api(struct slack *s, const char *method, const char *token, const char *json_body,
                     slack_api_cb cb, void *ud)
{
	const struct slack_account_config *a = s->acct;
	struct httpc *http = s->base.host->http_client(s->base.host->ctx);
	char url[SLACK_URL_MAX], auth[600];
	const char *headers[] = {auth,
	                         json_body ? "Content-Type: application/json; charset=utf-8"
	                                   : "Content-Type: application/x-www-form-urlencoded",
	                         NULL};
	struct httpc_request req;
	struct slack_call *c;
	size_t bl;
	int rc;

	if (!a)
		return SB_ERR_CONFIG;
	if (!http)
		return SB_ERR_AGAIN;
	bl = strlen(a->api_base);
	if (snprintf(url, sizeof url, "%s%s%s", a->api_base,
	             bl && a->api_base[bl - 1] == '/' ? "" : "/", method) >= (int)sizeof url)
		return SB_ERR_INVAL;
	if (snprintf(auth, sizeof auth, "Authorization: Bearer %s", token ? token : "") >=
	    (int)sizeof auth)
		return SB_ERR_INVAL;
	c = calloc(1, sizeof *c);
	if (!c)
		return SB_ERR_NOMEM;
	c->cb = cb;
	c->ud = ud;
	memset(&req, 0, sizeof req);
	req.method = "POST";
	req.url = url;
	req.headers = headers;
	req.body = json_body ? json_body : "";
	req.body_len = json_body ? strlen(json_body) : 0;
	req.timeout_ms = (long)a->request_timeout_ms;
	req.max_response_bytes = SLACK_API_MAX_BYTES;
	rc = httpc_request(http, &req, slack_api_done, c, NULL);
	if (rc) {
		free(c);
		return rc;
	}
	SLACK_LINK(s->calls, c, s);
	return SB_OK;
}

/* A short description of a failed call, into out. */
static const char *slack_api_why(const char *method, int rc, const struct httpc_response *resp,
                                 json_t *body, char *out, size_t size)
{
	const char *err = json_string_value(json_object_get(body, "error"));

	if (rc != SB_OK)
		snprintf(out, size, "%s: %s", method,
		         resp && resp->error ? resp->error : sb_strerror(rc));
	else if (resp->status != 200)
		snprintf(out, size, "%s: HTTP %ld", method, resp->status);
	else if (!body)
		snprintf(out, size, "%s: the answer is not JSON", method);
	else
		snprintf(out, size, "%s: %s", method, err ? err : "ok is false");
	return out;
}

static bool slack_api_ok(int rc, const struct httpc_response *resp, json_t *body)
{
	return rc == SB_OK && resp && resp->status == 200 &&
	       json_is_true(json_object_get(body, "ok"));
}

/* ---- identity (auth.test) and Socket Mode ---- */

static void slack_auth(struct slack *s);
static void slack_sm_connect(struct slack *s);

static int64_t slack_backoff_next(int64_t *cur, int64_t max)
{
	int64_t d = *cur < SLACK_BACKOFF_MIN_MS ? SLACK_BACKOFF_MIN_MS : *cur;
	int64_t jitter = d / 5 > 0 ? (int64_t)(rand() % (int)(d / 5 + 1)) : 0;

	*cur = d * 2 > max ? max : d * 2;
	return d - d / 10 + jitter;
}

static void slack_retry_fire(uv_timer_t *t)
{
	struct slack *s = t->data;

	if (!s || s->stopping)
		return;
	if (!s->authed)
		slack_auth(s);
	else if (s->mode == SLACK_MODE_SOCKET)
		slack_sm_connect(s);
}

static void slack_retry_in(struct slack *s, int64_t ms)
{
	if (s->retry_timer && !s->stopping)
		uv_timer_start(s->retry_timer, slack_retry_fire, (uint64_t)(ms < 0 ? 0 : ms), 0);
}

static char *slack_dup_field(json_t *body, const char *key)
{
	const char *v = json_string_value(json_object_get(body, key));

	return v && *v ? strdup(v) : NULL;
}

static void slack_auth_done(struct slack *s, void *ud, int rc, const struct httpc_response *resp,
                            json_t *body)
{
	char why[SLACK_ERR_MAX];

	(void)ud;
	if (!s)
		return;
	s->auth_busy = false;
	if (!slack_api_ok(rc, resp, body)) {
		int64_t delay = slack_backoff_next(&s->auth_backoff_ms,
		                                   s->acct ? s->acct->reconnect_max_ms : 60000);

		slack_api_why("auth.test", rc, resp, body, why, sizeof why);
		slack_error(s, why);
		log_error("slack", "cannot learn the bot's identity; retrying",
		          LOG_S("account", s->base.account), LOG_S("error", why),
		          LOG_I("retry_in_ms", delay));
		slack_retry_in(s, delay);
		return;
	}
	free(s->bot_user_id);
	free(s->bot_id);
	free(s->team_id);
	s->bot_user_id = slack_dup_field(body, "user_id");
	s->bot_id = slack_dup_field(body, "bot_id");
	s->team_id = slack_dup_field(body, "team_id");
	s->authed = true;
	s->auth_backoff_ms = 0;
	log_info("slack", "signed in", LOG_S("account", s->base.account),
	         LOG_S("team", s->team_id ? s->team_id : ""),
	         LOG_S("bot_user", s->bot_user_id ? s->bot_user_id : ""),
	         LOG_S("mode", slack_mode_names[s->mode]));
	if (s->mode == SLACK_MODE_SOCKET && !s->stopping)
		slack_sm_connect(s);
}

static void slack_auth(struct slack *s)
{
	int rc;

	if (s->auth_busy || !s->acct || s->stopping)
		return;
	rc = slack_api(s, "auth.test", s->acct->bot_token, NULL, slack_auth_done, NULL);
	if (rc) {
		slack_error(s, "auth.test: cannot start the request");
		slack_retry_in(s,
		               slack_backoff_next(&s->auth_backoff_ms, s->acct->reconnect_max_ms));
		return;
	}
	s->auth_busy = true;
}

/* Closes the socket (no handler runs for it any more). */
static void slack_sm_drop(struct slack *s)
{
	if (s->ws) {
		s->base.host->ws_close(s->base.host->ctx, s->ws);
		s->ws = NULL;
	}
	s->closing = false;
	s->hello = false;
	s->ws_gen++;
}

/* Shuts the socket down and, once it is gone (on_close), opens the next
 * one at once (now) or after the backoff: never two at a time. */
static void slack_sm_restart(struct slack *s, bool abrupt, bool now)
{
	if (!s->ws) {
		if (now)
			slack_retry_in(s, 0);
		return;
	}
	s->again_now = s->again_now || now;
	if (s->closing)
		return;
	s->closing = true;
	s->hello = false;
	s->ws_gen++;
	if (s->base.host->ws_shutdown) {
		s->base.host->ws_shutdown(s->base.host->ctx, s->ws, abrupt);
	} else {
		slack_sm_drop(s);
		if (now)
			slack_retry_in(s, 0);
	}
}

static void slack_sm_failed(struct slack *s, const char *why)
{
	int64_t delay;

	if (s->disabled)
		return; /* keep the link_disabled error */
	slack_error(s, why);
	if (s->stopping)
		return;
	delay = slack_backoff_next(&s->backoff_ms, s->acct ? s->acct->reconnect_max_ms : 60000);
	log_warn("slack", "Socket Mode connection lost; reconnecting",
	         LOG_S("account", s->base.account), LOG_S("why", why), LOG_I("retry_in_ms", delay));
	slack_retry_in(s, delay);
}

static void slack_ack(struct slack *s, const char *envelope_id)
{
	json_t *o = json_pack("{ss}", "envelope_id", envelope_id);
	char *text = o ? jsonw_dumps(o, 0, NULL) : NULL;

	SB_CRASH_POINT("slack.envelope.ack");
	if (text && s->ws && !s->closing)
		s->base.host->ws_send(s->base.host->ctx, s->ws, text, strlen(text));
	free(text);
	json_decref(o);
}

/* Normalises one event callback body and hands a message to the inbox.
 * Returns 0 when cb will run (the message is on its way), 1 when there is
 * nothing to store (acknowledge at once), -1 for a malformed event, or -2
 * when the store refused it for now (do not acknowledge); *why says why. */
static int slack_ingest_event(struct slack *s, const json_t *body, host_ingest_cb cb, void *ud,
                              const char **why)
{
	const struct host *host = s->base.host;
	struct slack_norm_opts o = {
	    .bot_user_id = s->bot_user_id,
	    .bot_id = s->bot_id,
	    .allow_bots = s->acct && s->acct->allow_bots,
	    .handle_edits = s->acct && s->acct->handle_edits,
	};
	struct slack_event ev;
	struct envelope env;
	char *raw = NULL;
	int rc, out = 1;

	*why = NULL;
	slack_event_parse(body, &o, &ev);
	if (ev.kind == SLACK_EVENT_INVALID) {
		*why = ev.why;
		out = -1;
		goto done;
	}
	if (ev.kind != SLACK_EVENT_MESSAGE) {
		log_debug("slack", "event ignored", LOG_S("account", s->base.account),
		          LOG_S("why", ev.why ? ev.why : "not a message"));
		goto done;
	}
	s->last_event_ms = clock_wall_ms();
	raw = jsonw_dumps(json_object_get(body, "event"), 0, NULL);
	memset(&env, 0, sizeof env);
	env.channel = "slack";
	env.account = s->base.account;
	env.event_id = ev.dedupe_key;
	env.peer_kind = ev.peer_kind;
	env.peer_id = ev.channel_id;
	env.thread_id = ev.thread_ts;
	env.team_id = ev.team_id;
	env.sender_id = ev.user_id;
	env.text = ev.text;
	env.mentioned = ev.mentioned;
	env.untrusted = false;
	env.received_at = s->last_event_ms;
	env.raw = raw;
	rc = host->ingest(host->ctx, &env, cb, ud);
	if (rc) {
		*why = rc == SB_ERR_AGAIN ? "the gateway is busy" : "cannot store the message";
		out = -2;
		goto done;
	}
	out = 0;
done:
	free(raw);
	slack_event_release(&ev);
	return out;
}

static void slack_env_free(struct slack_env *e)
{
	slack_timer_close(&e->timer);
	json_decref(e->payload);
	free(e);
}

static void slack_env_try(struct slack_env *e);

static void slack_env_fire(uv_timer_t *t)
{
	struct slack_env *e = t->data;
	struct slack *s = e ? e->s : NULL;

	if (!e)
		return;
	e->timed = false;
	if (!s || s->stopping || e->gen != s->ws_gen || s->closing) {
		/* Not acked: Slack sends it again on the next socket. */
		if (s)
			SLACK_UNLINK(s->envs, e);
		slack_env_free(e);
		return;
	}
	slack_env_try(e);
}

/* The store could not take it now: try again shortly while the envelope's
 * socket lives (it stays unacknowledged meanwhile); false when that is
 * over. */
static bool slack_env_later(struct slack *s, struct slack_env *e)
{
	if (e->tries++ >= SLACK_ENV_TRIES || s->stopping || e->gen != s->ws_gen)
		return false;
	if (!e->timer && !(e->timer = slack_timer_new(s, e)))
		return false;
	e->timed = true;
	uv_timer_start(e->timer, slack_env_fire, SLACK_ENV_RETRY_MS, 0);
	return true;
}

static void slack_env_ingested(void *ud, int rc, int64_t inbox_id, bool duplicate)
{
	struct slack_env *e = ud;
	struct slack *s = e->s;

	(void)inbox_id;
	if (!s) {
		slack_env_free(e);
		return;
	}
	if (rc) {
		if (slack_env_later(s, e))
			return;
		log_error("slack", "cannot store an event; Slack will send it again",
		          LOG_S("account", s->base.account), LOG_S("error", sb_strerror(rc)));
		slack_error(s, "cannot store an event");
	} else if (e->gen == s->ws_gen && s->ws && !s->closing) {
		slack_ack(s, e->id);
	} else {
		log_info("slack",
		         "an event was stored after its socket closed; Slack redelivers it and "
		         "the copy is recognised",
		         LOG_S("account", s->base.account), LOG_I("duplicate", duplicate));
	}
	SLACK_UNLINK(s->envs, e);
	slack_env_free(e);
}

static void slack_env_try(struct slack_env *e)
{
	struct slack *s = e->s;
	const char *why = NULL;
	int r = slack_ingest_event(s, e->payload, slack_env_ingested, e, &why);

	if (r == 0 || (r == -2 && slack_env_later(s, e)))
		return;
	if (r > 0) {
		slack_ack(s, e->id);
	} else {
		log_warn("slack", "an envelope was not accepted", LOG_S("account", s->base.account),
		         LOG_S("why", why ? why : ""));
		/* A malformed payload would come back forever: ack it. A store
		 * that keeps refusing is not acked: Slack redelivers. */
		if (r == -1)
			slack_ack(s, e->id);
	}
	SLACK_UNLINK(s->envs, e);
	slack_env_free(e);
}

static void slack_on_envelope(struct slack *s, json_t *m)
{
	const char *id = json_string_value(json_object_get(m, "envelope_id"));
	const char *type = json_string_value(json_object_get(m, "type"));
	struct slack_env *e;

	if (!id || !*id || strlen(id) >= sizeof e->id)
		return;
	if (!type || strcmp(type, "events_api") != 0) {
		slack_ack(s, id); /* slash commands, interactivity: not handled */
		return;
	}
	e = calloc(1, sizeof *e);
	if (!e)
		return; /* not acked: Slack sends it again */
	snprintf(e->id, sizeof e->id, "%s", id);
	e->gen = s->ws_gen;
	e->payload = json_incref(json_object_get(m, "payload"));
	SLACK_LINK(s->envs, e, s);
	slack_env_try(e);
}

static void slack_ws_message(void *ud, struct host_ws *ws, const char *data, size_t len)
{
	struct slack *s = ud;
	json_t *m = json_loadb(data, len, 0, NULL);
	const char *type = json_string_value(json_object_get(m, "type"));

	(void)ws;
	s->last_rx_ms = clock_mono_ms();
	if (!json_is_object(m) || !type) {
		json_decref(m);
		return;
	}
	if (strcmp(type, "hello") == 0) {
		s->hello = true;
		s->backoff_ms = 0;
		s->last_error[0] = '\0';
		log_info("slack", "Socket Mode connected", LOG_S("account", s->base.account),
		         LOG_I("connections",
		               json_integer_value(json_object_get(m, "num_connections"))));
	} else if (strcmp(type, "disconnect") == 0) {
		const char *reason = json_string_value(json_object_get(m, "reason"));

		reason = reason ? reason : "";
		if (strcmp(reason, "warning") == 0) {
			log_info("slack", "Slack will refresh the connection soon",
			         LOG_S("account", s->base.account));
		} else if (strcmp(reason, "link_disabled") == 0) {
			log_error("slack",
			          "Socket Mode is turned off in the app's settings; not "
			          "reconnecting",
			          LOG_S("account", s->base.account));
			slack_error(s, "Socket Mode is disabled for this app (link_disabled)");
			s->disabled = true;
			slack_sm_restart(s, false, false);
		} else {
			log_info("slack", "Slack asked for a new connection",
			         LOG_S("account", s->base.account), LOG_S("reason", reason));
			slack_sm_restart(s, false, true);
		}
	} else if (json_object_get(m, "envelope_id")) {
		slack_on_envelope(s, m);
	}
	json_decref(m);
}

static void slack_ws_open(void *ud, struct host_ws *ws)
{
	struct slack *s = ud;

	(void)ws;
	s->last_rx_ms = clock_mono_ms();
}

static void slack_ws_pong(void *ud, struct host_ws *ws)
{
	struct slack *s = ud;

	(void)ws;
	s->last_rx_ms = clock_mono_ms();
}

static void slack_ws_closed(void *ud, struct host_ws *ws, int code, const char *why)
{
	struct slack *s = ud;
	char msg[SLACK_ERR_MAX];
	bool planned = s->closing;

	(void)ws;
	s->ws = NULL;
	s->closing = false;
	s->hello = false;
	s->ws_gen++;
	if (s->again_now && !s->stopping && !s->disabled) {
		s->again_now = false;
		slack_retry_in(s, 0);
		return;
	}
	if (planned && s->disabled)
		return;
	snprintf(msg, sizeof msg, "Socket Mode: %s (code %d)", why ? why : "closed", code);
	slack_sm_failed(s, msg);
}

static const struct host_ws_handlers slack_ws_handlers = {
    .on_open = slack_ws_open,
    .on_message = slack_ws_message,
    .on_pong = slack_ws_pong,
    .on_close = slack_ws_closed,
};

static void slack_open_done(struct slack *s, void *ud, int rc, const struct httpc_response *resp,
                            json_t *body)
{
	const char *url = json_string_value(json_object_get(body, "url"));
	char why[SLACK_ERR_MAX];
	int64_t ra;

	(void)ud;
	if (!s)
		return;
	s->opening = false;
	if (s->stopping || s->disabled || s->ws)
		return;
	if (!slack_api_ok(rc, resp, body) || !url) {
		slack_api_why("apps.connections.open", rc, resp, body, why, sizeof why);
		ra = rc == SB_OK && resp && resp->status == 429 ? httpc_retry_after_ms(resp) : -1;
		if (ra > 0 && ra > s->backoff_ms)
			s->backoff_ms = ra;
		slack_sm_failed(s, why);
		return;
	}
	rc = s->base.host->ws_connect(s->base.host->ctx, url, &slack_ws_handlers, s, &s->ws);
	if (rc) {
		s->ws = NULL;
		snprintf(why, sizeof why, "Socket Mode: cannot open the WebSocket (%s)",
		         sb_strerror(rc));
		slack_sm_failed(s, why);
		return;
	}
	s->ws_since_ms = s->last_rx_ms = clock_mono_ms();
}

/* Opens the one connection, unless it is open or opening. */
static void slack_sm_connect(struct slack *s)
{
	int rc;

	if (s->stopping || s->disabled || s->ws || s->opening || !s->acct || !s->acct->app_token)
		return;
	if (!s->base.host->ws_connect) {
		slack_error(s, "this gateway cannot open WebSocket connections");
		return;
	}
	rc = slack_api(s, "apps.connections.open", s->acct->app_token, NULL, slack_open_done, NULL);
	if (rc) {
		slack_sm_failed(s, "apps.connections.open: cannot start the request");
		return;
	}
	s->opening = true;
}

static void slack_ping_fire(uv_timer_t *t)
{
	struct slack *s = t->data;
	int64_t now = clock_mono_ms();

	if (!s || s->stopping || !s->ws || s->closing || !s->acct)
		return;
	if (now - s->last_rx_ms > s->acct->ping_timeout_ms ||
	    (!s->hello && now - s->ws_since_ms > s->acct->ping_timeout_ms)) {
		log_warn("slack", "Socket Mode connection silent; reconnecting",
		         LOG_S("account", s->base.account), LOG_I("silent_ms", now - s->last_rx_ms),
		         LOG_I("hello", s->hello));
		slack_error(s, "Socket Mode: no frame or pong within ping_timeout");
		slack_sm_restart(s, true, true);
		return;
	}
	s->base.host->ws_ping(s->base.host->ctx, s->ws);
}

/* ---- Events API ---- */

static void slack_respond(struct slack *s, struct host_http_req *r, int status,
                          const char *content_type, const char *body)
{
	s->base.host->http_ops->respond(r, status, content_type, body, strlen(body), NULL);
}

static void slack_req_free(struct slack_req *q)
{
	slack_timer_close(&q->deadline);
	free(q);
}

static void slack_req_ingested(void *ud, int rc, int64_t inbox_id, bool duplicate)
{
	struct slack_req *q = ud;
	struct slack *s = q->s;

	(void)inbox_id;
	(void)duplicate;
	if (s) {
		SLACK_UNLINK(s->reqs, q);
		if (rc) {
			log_error("slack", "cannot store an event; Slack will send it again",
			          LOG_S("account", s->base.account),
			          LOG_S("error", sb_strerror(rc)));
			slack_error(s, "cannot store an event");
		}
		if (q->http && !rc)
			SB_CRASH_POINT("slack.event.ack");
		if (q->http)
			slack_respond(
			    s, q->http, rc ? 503 : 200, rc ? "application/json" : "text/plain",
			    rc ? "{\"error\":\"cannot store the event; retry later\"}" : "");
		q->http = NULL;
	}
	slack_req_free(q);
}

static void slack_req_late(uv_timer_t *t)
{
	struct slack_req *q = t->data;
	struct slack *s = q ? q->s : NULL;

	if (!q || !q->http || !s)
		return;
	/* Not stored in time: no ack, so Slack sends it again; the store may
	 * still commit it, and then the retry is a recognised duplicate. */
	log_warn("slack", "storing an event took too long; asking Slack to send it again",
	         LOG_S("account", s->base.account),
	         LOG_I("deadline_ms", s->acct ? s->acct->ack_deadline_ms : 0));
	slack_respond(s, q->http, 503, "application/json",
	              "{\"error\":\"the event was not stored in time; retry\"}");
	q->http = NULL;
}

static int slack_header(struct slack *s, struct host_http_req *r, const char *name, char *out,
                        size_t size)
{
	return s->base.host->http_ops->header(r, name, out, size);
}

static void slack_on_request(void *ud, struct host_http_req *r)
{
	struct slack *s = ud;
	const struct host_http_ops *ops = s->base.host->http_ops;
	const struct slack_account_config *a = s->acct;
	char ts[SLACK_HDR_MAX], sig[SLACK_HDR_MAX], retry[16];
	const char *body, *why = NULL, *type;
	struct slack_req *q = NULL;
	json_t *root = NULL;
	size_t len = 0;
	int got;

	if (!a || s->stopping) {
		slack_respond(s, r, 503, "application/json",
		              "{\"error\":\"the gateway is stopping; retry later\"}");
		return;
	}
	body = ops->body(r, &len);
	if (!body)
		len = 0;
	/* The signature before anything else. */
	if (slack_header(s, r, "x-slack-request-timestamp", ts, sizeof ts) < 0)
		ts[0] = '\0';
	if (slack_header(s, r, "x-slack-signature", sig, sizeof sig) < 0)
		sig[0] = '\0';
	if (slack_sig_verify(a->signing_secret, ts, sig, body, len, clock_wall_ms() / 1000,
	                     a->tolerance_ms / 1000, &why) != SB_OK) {
		slack_log_reject(s, ops->peer(r), 401, why);
		slack_respond(s, r, 401, "application/json", "{\"error\":\"invalid signature\"}");
		return;
	}
	root = json_loadb(body ? body : "", len, 0, NULL);
	if (!json_is_object(root)) {
		slack_log_reject(s, ops->peer(r), 400, "the body is not JSON");
		slack_respond(s, r, 400, "application/json", "{\"error\":\"expected JSON\"}");
		goto out;
	}
	type = json_string_value(json_object_get(root, "type"));
	if (type && strcmp(type, "url_verification") == 0) {
		const char *c = json_string_value(json_object_get(root, "challenge"));
		json_t *o = json_pack("{ss}", "challenge", c ? c : "");
		char *text = o ? jsonw_dumps(o, 0, NULL) : NULL;

		log_info("slack", "Request URL verified", LOG_S("account", s->base.account));
		slack_respond(s, r, text && c ? 200 : 400, "application/json", text ? text : "{}");
		free(text);
		json_decref(o);
		goto out;
	}
	if (slack_header(s, r, "x-slack-retry-num", retry, sizeof retry) > 0)
		log_debug("slack", "a retried event", LOG_S("account", s->base.account),
		          LOG_S("retry", retry));
	if (!s->authed) {
		/* Whether the event mentions the bot, or is the bot's own, needs
		 * the bot's ids (auth.test): not acknowledged until they are
		 * known, so Slack sends it again rather than it being stored
		 * as not mentioning the bot and dropped. */
		log_warn("slack", "event refused until the bot's identity is known; Slack sends it again",
		         LOG_S("account", s->base.account));
		slack_respond(s, r, 503, "application/json",
		              "{\"error\":\"the bot's identity is not known yet; retry later\"}");
		goto out;
	}
	q = calloc(1, sizeof *q);
	if (!q) {
		slack_respond(s, r, 503, "application/json", "{\"error\":\"out of memory\"}");
		goto out;
	}
	q->http = r;
	SLACK_LINK(s->reqs, q, s);
	got = slack_ingest_event(s, root, slack_req_ingested, q, &why);
	if (got == 0) {
		if ((q->deadline = slack_timer_new(s, q)))
			uv_timer_start(q->deadline, slack_req_late, (uint64_t)a->ack_deadline_ms,
			               0);
		q = NULL;
		goto out;
	}
	SLACK_UNLINK(s->reqs, q);
	if (got > 0) {
		slack_respond(s, q->http, 200, "text/plain", "");
	} else if (got == -2) {
		slack_error(s, why);
		slack_respond(s, q->http, 503, "application/json", "{\"error\":\"retry later\"}");
	} else {
		slack_log_reject(s, ops->peer(r), 400, why ? why : "malformed event");
		slack_respond(s, q->http, 400, "application/json",
		              "{\"error\":\"malformed event\"}");
	}
out:
	free(q);
	json_decref(root);
}

/* ---- outbound ---- */

static void slack_send_free(struct slack_send *x)
{
	for (size_t i = 0; i < x->n; i++)
		free(x->chunks[i]);
	free(x->chunks);
	free(x->channel);
	free(x->thread_ts);
	free(x->key);
	free(x->first_ts);
	free(x);
}

static void slack_send_finish(struct slack_send *x, const struct channel_send_result *res)
{
	if (x->s)
		SLACK_UNLINK(x->s->sends, x);
	x->cb(x->ud, res);
	slack_send_free(x);
}

static void slack_send_fail(struct slack_send *x, int rc, bool retryable, int64_t retry_after_ms,
                            const char *why)
{
	struct channel_send_result res = {
	    .rc = rc, .retryable = retryable, .retry_after_ms = retry_after_ms, .error = why};

	slack_send_finish(x, &res);
}

static void slack_send_next(struct slack_send *x);

static void slack_send_progress_put(void *ud, int rc)
{
	struct slack_send *x = ud;

	if (rc)
		log_warn("slack", "cannot record a reply's progress",
		         LOG_S("error", sb_strerror(rc)));
	slack_send_next(x);
}

/* Slack errors worth trying again. */
static bool slack_error_retryable(const char *err)
{
	static const char *const again[] = {
	    "ratelimited",         "rate_limited",    "internal_error",    "fatal_error",
	    "service_unavailable", "request_timeout", "team_added_to_org", NULL};

	for (size_t i = 0; err && again[i]; i++)
		if (strcmp(err, again[i]) == 0)
			return true;
	return false;
}

static void slack_post_done(struct slack *s, void *ud, int rc, const struct httpc_response *resp,
                            json_t *body)
{
	struct slack_send *x = ud;
	const char *err = json_string_value(json_object_get(body, "error"));
	const char *ts = json_string_value(json_object_get(body, "ts"));
	char why[SLACK_ERR_MAX];
	int64_t ra;

	(void)s;
	if (rc != SB_OK) {
		slack_api_why("chat.postMessage", rc, resp, body, why, sizeof why);
		slack_send_fail(x, rc == SB_ERR_TIMEOUT ? SB_ERR_TIMEOUT : SB_ERR_HTTP, true, -1,
		                why);
		return;
	}
	if (resp->status == 429) {
		ra = httpc_retry_after_ms(resp);
		snprintf(why, sizeof why, "chat.postMessage: rate limited (HTTP 429)");
		if (x->s)
			slack_error(x->s, why);
		slack_send_fail(x, SB_ERR_AGAIN, true, ra >= 0 ? ra : SLACK_RETRY_AFTER_DEFAULT_MS,
		                why);
		return;
	}
	if (resp->status != 200 || !json_is_object(body)) {
		slack_api_why("chat.postMessage", rc, resp, body, why, sizeof why);
		slack_send_fail(x, SB_ERR_PROTO, resp->status >= 500 || resp->status == 408, -1,
		                why);
		return;
	}
	if (!json_is_true(json_object_get(body, "ok"))) {
		snprintf(why, sizeof why, "chat.postMessage: %s", err ? err : "ok is false");
		if (x->s)
			slack_error(x->s, why);
		slack_send_fail(x, SB_ERR_PROTO, slack_error_retryable(err),
		                slack_error_retryable(err) ? httpc_retry_after_ms(resp) : -1, why);
		return;
	}
	if (!x->first_ts && ts)
		x->first_ts = strdup(ts);
	x->i++;
	SB_CRASH_POINT("slack.piece.accepted");
	if (x->i < x->n && x->key) {
		json_t *o = json_pack("{sI ss}", "done", (json_int_t)x->i, "ts",
		                      x->first_ts ? x->first_ts : "");
		char *v = o ? jsonw_dumps(o, 0, NULL) : NULL;

		json_decref(o);
		if (v && x->host->kv_put(x->host->ctx, x->ns, x->key, v, slack_send_progress_put,
		                         x) == SB_OK) {
			free(v);
			return;
		}
		free(v);
	}
	slack_send_next(x);
}

static void slack_progress_dropped(void *ud, int rc)
{
	(void)ud;
	if (rc)
		log_warn("slack", "cannot drop a reply's progress record",
		         LOG_S("error", sb_strerror(rc)));
}

static void slack_send_next(struct slack_send *x)
{
	struct slack *s = x->s;
	json_t *o;
	char *body;
	int rc;

	if (x->i >= x->n) {
		struct channel_send_result res = {
		    .rc = SB_OK, .retry_after_ms = -1, .channel_msg_id = x->first_ts};
		const struct host *host = x->host;
		char ns[sizeof x->ns], *key = x->n > 1 && x->key ? strdup(x->key) : NULL;

		memcpy(ns, x->ns, sizeof ns);
		slack_send_finish(x, &res);
		/* The progress row goes after the outbox recorded the send
		 * (its write was queued first, inside finish), so a crash never
		 * finds neither. */
		if (key && host->kv_put(host->ctx, ns, key, NULL, slack_progress_dropped, NULL))
			log_warn("slack", "cannot drop a reply's progress record");
		free(key);
		return;
	}
	if (!s || s->stopping || !s->acct) {
		slack_send_fail(x, SB_ERR_AGAIN, true, -1, "the Slack channel stopped");
		return;
	}
	o = json_pack("{ssss}", "channel", x->channel, "text", x->chunks[x->i]);
	if (o && x->thread_ts)
		json_object_set_new(o, "thread_ts", json_string(x->thread_ts));
	body = o ? jsonw_dumps(o, 0, NULL) : NULL;
	json_decref(o);
	if (!body) {
		slack_send_fail(x, SB_ERR_NOMEM, true, -1, "out of memory");
		return;
	}
	rc = slack_api(s, "chat.postMessage", s->acct->bot_token, body, slack_post_done, x);
	free(body);
	if (rc)
		slack_send_fail(x, rc, rc == SB_ERR_AGAIN || rc == SB_ERR_NOMEM, -1,
		                "chat.postMessage: cannot start the request");
}

static void slack_send_progress(void *ud, int rc, const char *value)
{
	struct slack_send *x = ud;
	json_t *v = rc == SB_OK && value ? json_loads(value, 0, NULL) : NULL;
	json_int_t done = json_integer_value(json_object_get(v, "done"));
	const char *ts = json_string_value(json_object_get(v, "ts"));

	if (done > 0 && (size_t)done <= x->n) {
		x->i = (size_t)done;
		if (ts && *ts && !x->first_ts)
			x->first_ts = strdup(ts);
		log_info("slack", "resuming a reply after the pieces already posted",
		         LOG_I("done", done), LOG_I("pieces", x->n));
	}
	json_decref(v);
	slack_send_next(x);
}

/* A send outcome reported from a timer: cb must run later, never inside
 * send. */
struct slack_later {
	uv_timer_t timer;
	struct slack_send *x;
};

static void slack_later_closed(uv_handle_t *h)
{
	free(h->data);
}

static void slack_later_fire(uv_timer_t *t)
{
	struct slack_later *l = t->data;

	slack_send_next(l->x);
	uv_close((uv_handle_t *)t, slack_later_closed);
}

static int slack_send(struct channel *c, const struct channel_outbound *msg, channel_send_cb cb,
                      void *ud)
{
	struct slack *s = (struct slack *)c;
	const struct slack_account_config *a = s->acct;
	json_t *payload = json_loads(msg->payload ? msg->payload : "{}", 0, NULL);
	const char *text = json_string_value(json_object_get(payload, "text"));
	const char *thread = json_string_value(json_object_get(payload, "thread_id"));
	const char *reply_to = json_string_value(json_object_get(payload, "reply_to"));
	const char *kind = json_string_value(json_object_get(payload, "peer_kind"));
	struct slack_send *x = NULL;
	struct slack_later *l = NULL;
	char tsbuf[SLACK_HDR_MAX], *md = NULL;
	int rc = SB_ERR_NOMEM;

	if (!a) {
		rc = SB_ERR_CONFIG;
		goto out;
	}
	if (!text || !*text) {
		/* An entry that would post nothing is an error, never "sent". */
		log_error("slack", "an outbox entry has no text to send; not sent",
		          LOG_S("account", s->base.account), LOG_I("outbox_id", msg->outbox_id),
		          LOG_S("channel", msg->target ? msg->target : ""));
		rc = SB_ERR_INVAL;
		goto out;
	}
	x = calloc(1, sizeof *x);
	l = calloc(1, sizeof *l);
	if (!x || !l)
		goto out;
	x->host = s->base.host;
	x->cb = cb;
	x->ud = ud;
	if (!(x->channel = strdup(msg->target ? msg->target : "")))
		goto out;
	if (a->reply_in_thread != SLACK_THREAD_NEVER) {
		if (thread && *thread)
			x->thread_ts = strdup(thread);
		else if (a->reply_in_thread == SLACK_THREAD_ALWAYS && kind &&
		         strcmp(kind, "direct") != 0 &&
		         *slack_dedupe_key_ts(reply_to, tsbuf, sizeof tsbuf))
			x->thread_ts = strdup(tsbuf);
	}
	md = slack_mrkdwn(text);
	if (!md)
		goto out;
	x->n = slack_chunk(md, (size_t)a->chunk_limit, &x->chunks);
	if (!x->n)
		goto out;
	if (x->n > 1 && msg->idempotency_key) {
		x->key = strdup(msg->idempotency_key);
		snprintf(x->ns, sizeof x->ns, "slack:%s", s->base.account);
	}
	SLACK_LINK(s->sends, x, s);
	if (x->key && x->host->kv_get &&
	    x->host->kv_get(x->host->ctx, x->ns, x->key, slack_send_progress, x) == SB_OK) {
		free(l);
		l = NULL;
	} else {
		uv_timer_init(s->base.host->loop, &l->timer);
		l->timer.data = l;
		l->x = x;
		uv_timer_start(&l->timer, slack_later_fire, 0, 0);
		l = NULL;
	}
	x = NULL;
	rc = SB_OK;
out:
	if (x)
		slack_send_free(x);
	free(l);
	free(md);
	json_decref(payload);
	return rc;
}

/* ---- lifecycle ---- */

static size_t slack_accounts(const void *config, const char **names, size_t max)
{
	const struct slack_config *cfg = config;
	size_t n = 0;

	for (size_t i = 0; cfg && i < cfg->n_accounts && n < max; i++)
		if (cfg->accounts[i].id)
			names[n++] = cfg->accounts[i].id;
	return n;
}

static int slack_create(struct channel **out, const struct host *host, const char *account,
                        const void *config)
{
	struct slack *s = calloc(1, sizeof *s);

	if (!s)
		return SB_ERR_NOMEM;
	if (channel_init(&s->base, host, account) != SB_OK) {
		free(s);
		return SB_ERR_TOOBIG;
	}
	s->cfg = config;
	s->acct = slack_config_find(s->cfg, s->base.account);
	s->mode = s->acct ? s->acct->mode : SLACK_MODE_EVENTS;
	*out = &s->base;
	return SB_OK;
}

static int slack_reconfigure(struct channel *c, const void *config)
{
	struct slack *s = (struct slack *)c;

	s->cfg = config;
	s->acct = slack_config_find(s->cfg, s->base.account);
	if (!s->acct && s->started) {
		log_warn("slack", "the account was removed from the configuration; it stops",
		         LOG_S("account", s->base.account));
		slack_sm_drop(s);
		slack_error(s, "removed from the configuration");
	}
	return SB_OK;
}

static int slack_start(struct channel *c)
{
	struct slack *s = (struct slack *)c;
	const struct host *host = s->base.host;
	int rc;

	if (!s->acct)
		return SB_OK; /* no Slack account configured */
	s->retry_timer = slack_timer_new(s, s);
	s->ping_timer = slack_timer_new(s, s);
	if (!s->retry_timer || !s->ping_timer)
		return SB_ERR_NOMEM;
	if (s->mode == SLACK_MODE_EVENTS) {
		slack_events_path(s->acct, s->path, sizeof s->path);
		rc = host->http_route(host->ctx, "slack", s->path, false, "POST", slack_on_request,
		                      s);
		if (rc)
			return rc;
		s->routed = true;
	} else {
		uv_timer_start(s->ping_timer, slack_ping_fire, (uint64_t)s->acct->ping_interval_ms,
		               (uint64_t)s->acct->ping_interval_ms);
	}
	s->started = true;
	log_info("slack", "account ready", LOG_S("account", s->base.account),
	         LOG_S("mode", slack_mode_names[s->mode]),
	         LOG_S("path", s->mode == SLACK_MODE_EVENTS ? s->path : ""));
	slack_auth(s);
	return SB_OK;
}

/* Answers Events API requests that are still waiting: 200 once stored is
 * impossible to know here, so 503 (Slack retries; a stored one is then a
 * recognised duplicate). */
static void slack_flush(struct slack *s, bool detach)
{
	for (struct slack_req *q = s->reqs, *next; q; q = next) {
		next = q->next;
		if (q->http) {
			slack_respond(s, q->http, 503, "application/json",
			              "{\"error\":\"the gateway is stopping; retry later\"}");
			q->http = NULL;
		}
		if (detach)
			SLACK_UNLINK(s->reqs, q);
	}
}

static void slack_stop(struct channel *c)
{
	struct slack *s = (struct slack *)c;

	/* The first stop (drain) refuses new events and closes the socket
	 * (Slack keeps what was not acknowledged); the second (shutdown)
	 * answers requests that still wait for the store. */
	if (s->stopping)
		slack_flush(s, false);
	s->stopping = true;
	if (s->retry_timer)
		uv_timer_stop(s->retry_timer);
	if (s->ping_timer)
		uv_timer_stop(s->ping_timer);
	if (s->base.host->ws_close)
		slack_sm_drop(s);
}

static void slack_destroy(struct channel *c)
{
	struct slack *s = (struct slack *)c;

	s->stopping = true;
	slack_flush(s, true);
	if (s->base.host->ws_close)
		slack_sm_drop(s);
	while (s->envs) {
		struct slack_env *e = s->envs;

		SLACK_UNLINK(s->envs, e);
		if (e->timed) /* no store callback will come for it */
			slack_env_free(e);
	}
	while (s->sends)
		SLACK_UNLINK(s->sends, s->sends);
	while (s->calls)
		SLACK_UNLINK(s->calls, s->calls);
	slack_timer_close(&s->retry_timer);
	slack_timer_close(&s->ping_timer);
	free(s->bot_user_id);
	free(s->bot_id);
	free(s->team_id);
	free(s);
}

static void slack_status(struct channel *c, json_t *obj)
{
	struct slack *s = (struct slack *)c;
	bool connected;

	if (!s->acct) {
		json_object_set_new(obj, "mode", json_string("unconfigured"));
		json_object_set_new(obj, "connected", json_false());
		return;
	}
	connected = s->mode == SLACK_MODE_SOCKET ? s->ws && s->hello : s->routed && !s->stopping;
	json_object_set_new(obj, "mode", json_string(slack_mode_names[s->mode]));
	json_object_set_new(obj, "connected", json_boolean(connected));
	json_object_set_new(obj, "authenticated", json_boolean(s->authed));
	if (s->mode == SLACK_MODE_EVENTS)
		json_object_set_new(obj, "path", json_string(s->path));
	if (s->team_id)
		json_object_set_new(obj, "teamId", json_string(s->team_id));
	if (s->bot_user_id)
		json_object_set_new(obj, "botUserId", json_string(s->bot_user_id));
	if (s->disabled)
		json_object_set_new(obj, "disabled", json_true());
	if (s->last_event_ms)
		json_object_set_new(obj, "lastEventAt", json_integer(s->last_event_ms));
	if (s->last_error_ms) {
		json_object_set_new(obj, "lastErrorAt", json_integer(s->last_error_ms));
		json_object_set_new(obj, "lastError", json_string(s->last_error));
	}
}

const struct channel_ops channel_slack_ops = {
    .name = "slack",
    .create = slack_create,
    .reconfigure = slack_reconfigure,
    .start = slack_start,
    .stop = slack_stop,
    .destroy = slack_destroy,
    .send = slack_send,
    .accounts = slack_accounts,
    .status = slack_status,
};
