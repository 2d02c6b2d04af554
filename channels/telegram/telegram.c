/*
 * telegram.c - the Telegram channel: one instance per bot (account).
 *
 * Inbound, polling: getMe (the bot's id and username, for mentions), the
 * persisted offset (kv "telegram:<account>" / "offset"), then a loop of long
 * getUpdates calls on the shared curl multi. A batch of updates is
 * normalised and handed to host->ingest; only when every ingest of the batch
 * has answered is the offset advanced past the committed prefix, persisted,
 * and the next poll (which confirms them to Telegram) sent. A poll silent
 * well past its timeout is cancelled and sent again (the watchdog); 409 (a
 * webhook is set, or another poller uses the token) is reported in the
 * status and the log; errors back off; 429 waits retry_after.
 *
 * Inbound, webhook: a route on the gateway port (webhook.path); the
 * X-Telegram-Bot-Api-Secret-Token header is compared in constant time (401
 * and a log line on mismatch); the update is committed, then answered 200
 * (503 when it could not be, so Telegram delivers it again). setWebhook on
 * start when configured.
 *
 * Outbound (send): sendMessage per chunk (telegram_chunks), HTML from the
 * reply's Markdown with a single plain-text resend when Telegram cannot
 * parse it, reply_parameters on the first chunk, message_thread_id for
 * forum topics, paced by a per-chat and a global token bucket. 429 is a
 * retryable result carrying retry_after. A reply in several chunks records
 * how many were accepted (and their message ids) in the store's kv table
 * under its idempotency key before it sends the next, so a retry, or the
 * gateway after a crash, continues where it stopped: at most the one chunk
 * accepted in the instant before a crash is sent again.
 *
 * activity: sendChatAction "typing" every 4 s while a run works on a
 * message from a chat.
 *
 * The token appears only in request URLs; it is never logged.
 *
 * Loop thread only.
 */
#include <inttypes.h>
#include <jansson.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "channels/adapter.h"
#include "channels/channel.h"
#include "channels/telegram/telegram.h"
#include "channels/telegram/telegram_config.h"
#include "channels/telegram/telegram_proto.h"
#include "gateway/core/clock.h"
#include "gateway/core/crash.h"
#include "gateway/core/err.h"
#include "gateway/core/jsonw.h"
#include "gateway/core/log.h"
#include "gateway/core/strmap.h"

#define TG_BODY_MAX ((size_t)1 << 20)      /* a webhook update */
#define TG_RESPONSE_MAX ((size_t)16 << 20) /* a getUpdates answer */
#define TG_BACKOFF_MIN_MS 1000
#define TG_BACKOFF_MAX_MS 60000
#define TG_WATCHDOG_GRACE_MS 5000
#define TG_TYPING_EVERY_MS 4000
/* The kv key of a reply's progress: this prefix and its idempotency key. */
#define TG_PROGRESS_PREFIX "reply:"
#define TG_BUCKETS_MAX 4096
#define TG_SECRET_HEADER "x-telegram-bot-api-secret-token"
#define TG_NS_PREFIX "telegram:"

struct tg;

typedef void (*tg_done_fn)(struct tg *t, void *ud, int rc, long status,
                           const struct telegram_answer *a, const struct httpc_response *resp);

/* One Bot API call in flight. */
struct tg_call {
	struct tg *t;
	struct httpc_call *http;
	struct tg_call *prev, *next;
	tg_done_fn done;
	void *ud;
};

struct tg_bucket {
	double tokens;
	int64_t at_ms;
};

/* A poll's updates on their way into the inbox. */
struct tg_batch {
	struct tg *t; /* NULL once the adapter is gone */
	size_t n, waiting;
	int64_t *ids;
	int *rc; /* per update: 0 committed or skipped, else the ingest error */
};

struct tg_ingest {
	struct tg_batch *b;
	size_t i;
};

/* A webhook request waiting for its ingest. */
struct tg_hreq {
	struct tg *t; /* NULL once the adapter is gone */
	struct host_http_req *http;
	struct tg_hreq *prev, *next;
};

/* One outbox entry being sent (its chunks, one after the other). */
struct tg_job {
	uv_timer_t timer; /* rate-limit waits */
	struct tg *t;     /* NULL once the adapter is gone */
	struct tg_job *prev, *next;
	channel_send_cb cb;
	void *ud;
	char **chunks;
	size_t n, idx;
	char *key;
	char chat[80];
	char thread[24];
	int64_t reply_mid;
	bool fallback, migrated;
	bool nomem;               /* the text could not be cut: retry later */
	const char *final_error; /* static: fail at once, not retryable */
	char *ids;               /* message ids accepted so far, comma-separated */
	struct tg_jkv *kvop;     /* its progress read or write in flight */
};

/* A job's progress read or write in flight: the job may end (the channel
 * stopping) before the store answers. */
struct tg_jkv {
	struct tg_job *j; /* NULL once the job ended */
};

struct tg_typing {
	uv_timer_t timer;
	struct tg *t; /* NULL once the adapter is gone */
	struct tg_typing *prev, *next;
	char chat[24];
	char thread[24];
	int refs;
};

/* A kv read or write in flight. */
struct tg_kv {
	struct tg *t; /* NULL once the adapter is gone */
	int64_t offset;
};

struct tg {
	struct channel base;
	const struct telegram_account_config *cfg; /* NULL: no such account */
	/* The snapshot cfg lives in, held so that an account removed by a
	 * reload keeps its settings for the replies still to send. */
	struct config *pin;
	bool removed;
	char *token, *api;
	int mode;
	char ns[sizeof TG_NS_PREFIX + ENVELOPE_ACCOUNT_MAX];
	int64_t bot_id;
	char *bot_username;
	bool started, stopping, closing, routed, got_me, set_webhook_done;
	/* polling */
	int64_t offset;
	struct tg_call *poll;
	struct tg_batch *batch;
	struct tg_kv *kv;
	uv_timer_t timer;    /* the next step: poll, getMe, setWebhook */
	uv_timer_t watchdog; /* a stalled poll */
	int handles;         /* of timer and watchdog still open */
	int64_t poll_started_ms;
	int64_t backoff_ms;
	bool conflict;
	/* everything in flight */
	struct tg_call *calls;
	struct tg_hreq *hreqs;
	struct tg_job *jobs;
	struct tg_typing *typing;
	struct strmap *buckets;
	struct tg_bucket global;
	/* status */
	bool connected;
	int64_t last_event_ms, last_error_ms;
	char last_error[256];
	struct channel_ratelog logs; /* at most CHANNEL_LOG_BURST lines a minute */
};

static bool tg_log_allowed(struct tg *t)
{
	return channel_ratelog_take(&t->logs, NULL);
}

static void tg_error(struct tg *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Records an error for the status (what, not secrets). */
static void tg_error(struct tg *t, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(t->last_error, sizeof t->last_error, fmt, ap);
	va_end(ap);
	t->last_error_ms = clock_wall_ms();
}

/* ---- Bot API calls ---- */

static void tg_call_unlink(struct tg_call *c)
{
	struct tg *t = c->t;

	if (c->prev)
		c->prev->next = c->next;
	else
		t->calls = c->next;
	if (c->next)
		c->next->prev = c->prev;
}

static void tg_call_done(void *ud, int rc, const struct httpc_response *resp)
{
	struct tg_call *c = ud;
	struct telegram_answer a;
	json_t *root = NULL;
	long status = resp ? resp->status : 0;

	tg_call_unlink(c);
	memset(&a, 0, sizeof a);
	a.retry_after_s = -1;
	if (rc == SB_OK && resp) {
		root = json_loadb(resp->body.data ? resp->body.data : "", resp->body.len, 0, NULL);
		if (!telegram_answer_parse(root, &a)) {
			memset(&a, 0, sizeof a);
			a.retry_after_s = -1;
		}
	}
	c->done(c->t, c->ud, rc, status, &a, resp);
	json_decref(root);
	free(c);
}

/* POSTs body (JSON; taken) to method. On error done is not called. */
static int tg_api(struct tg *t, const char *method, json_t *body, long timeout_ms, tg_done_fn done,
                  void *ud, struct tg_call **out)
{
	static const char *const headers[] = {"Content-Type: application/json", NULL};
	struct httpc *http = t->base.host->http_client(t->base.host->ctx);
	struct httpc_request req;
	struct tg_call *c = NULL;
	char *text = NULL, *url = NULL;
	size_t ulen;
	int rc = SB_ERR_AGAIN;

	if (!http || t->closing || !t->token)
		goto out;
	rc = SB_ERR_NOMEM;
	if (!body)
		body = json_object();
	text = body ? jsonw_dumps(body, 0, NULL) : NULL;
	ulen = strlen(t->api) + strlen(t->token) + strlen(method) + 8;
	url = malloc(ulen);
	c = calloc(1, sizeof *c);
	if (!text || !url || !c)
		goto out;
	snprintf(url, ulen, "%s/bot%s/%s", t->api, t->token, method);
	memset(&req, 0, sizeof req);
	req.method = "POST";
	req.url = url;
	req.headers = headers;
	req.body = text;
	req.body_len = strlen(text);
	req.timeout_ms = timeout_ms;
	req.max_response_bytes = TG_RESPONSE_MAX;
	c->t = t;
	c->done = done;
	c->ud = ud;
	rc = httpc_request(http, &req, tg_call_done, c, &c->http);
	if (rc)
		goto out;
	c->next = t->calls;
	if (t->calls)
		t->calls->prev = c;
	t->calls = c;
	if (out)
		*out = c;
	c = NULL;
out:
	if (url) {
		sodium_memzero(url, strlen(url));
		free(url);
	}
	free(text);
	free(c);
	json_decref(body);
	return rc;
}

/* What went wrong with a call, for logs and the status. */
static void tg_why(char *out, size_t size, int rc, long status, const struct telegram_answer *a,
                   const struct httpc_response *resp)
{
	if (rc != SB_OK)
		snprintf(out, size, "%s", resp && resp->error ? resp->error : sb_strerror(rc));
	else if (a->description)
		snprintf(out, size, "HTTP %ld: %s", status, a->description);
	else
		snprintf(out, size, "HTTP %ld", status);
}

/* ---- the step timer ---- */

static void tg_poll(struct tg *t);
static void tg_get_me(struct tg *t);
static void tg_set_webhook(struct tg *t);
static void tg_load_offset(struct tg *t);

static void tg_timer_fire(uv_timer_t *h)
{
	struct tg *t = h->data;

	if (t->closing || t->stopping)
		return;
	if (!t->got_me)
		tg_get_me(t);
	else if (t->mode == TELEGRAM_MODE_WEBHOOK)
		tg_set_webhook(t);
	else if (t->kv == NULL && t->offset < 0)
		tg_load_offset(t);
	else
		tg_poll(t);
}

static void tg_later(struct tg *t, int64_t ms)
{
	if (t->closing || t->stopping)
		return;
	uv_timer_start(&t->timer, tg_timer_fire, (uint64_t)(ms > 0 ? ms : 0), 0);
}

static int64_t tg_backoff(struct tg *t)
{
	int64_t ms = t->backoff_ms ? t->backoff_ms : TG_BACKOFF_MIN_MS;

	t->backoff_ms = ms * 2 > TG_BACKOFF_MAX_MS ? TG_BACKOFF_MAX_MS : ms * 2;
	return ms;
}

/* ---- getMe ---- */

static void tg_me_done(struct tg *t, void *ud, int rc, long status, const struct telegram_answer *a,
                       const struct httpc_response *resp)
{
	const char *user;
	char why[200];

	(void)ud;
	if (t->closing)
		return;
	if (rc == SB_OK && a->ok && json_is_object(a->result)) {
		json_t *id = json_object_get(a->result, "id");

		user = json_string_value(json_object_get(a->result, "username"));
		if (json_is_integer(id))
			t->bot_id = (int64_t)json_integer_value(id);
		free(t->bot_username);
		t->bot_username = user ? strdup(user) : NULL;
		t->got_me = true;
		t->backoff_ms = 0;
		log_info("telegram", "bot ready", LOG_S("account", t->base.account),
		         LOG_S("username", t->bot_username ? t->bot_username : ""),
		         LOG_I("bot_id", t->bot_id), LOG_S("mode", telegram_mode_names[t->mode]));
		tg_later(t, 0);
		return;
	}
	tg_why(why, sizeof why, rc, status, a, resp);
	tg_error(t, "getMe failed: %s%s", why,
	         status == 401 || status == 404 ? " (is the bot token right?)" : "");
	log_error("telegram", "getMe failed", LOG_S("account", t->base.account),
	          LOG_S("error", why));
	tg_later(t,
	         status == 429 && a->retry_after_s >= 0 ? a->retry_after_s * 1000 : tg_backoff(t));
}

static void tg_get_me(struct tg *t)
{
	if (tg_api(t, "getMe", NULL, (long)t->cfg->request_timeout_ms, tg_me_done, NULL, NULL))
		tg_later(t, tg_backoff(t));
}

/* allowed_updates as configured, or the default for the account. */
static json_t *tg_allowed_updates(const struct telegram_account_config *cfg)
{
	json_t *a = json_array();

	if (!a)
		return NULL;
	if (cfg->n_allowed_updates) {
		for (size_t i = 0; i < cfg->n_allowed_updates; i++)
			json_array_append_new(a, json_string(cfg->allowed_updates[i]));
	} else {
		json_array_append_new(a, json_string("message"));
		if (cfg->edits)
			json_array_append_new(a, json_string("edited_message"));
	}
	return a;
}

/* ---- setWebhook ---- */

static void tg_webhook_done(struct tg *t, void *ud, int rc, long status,
                            const struct telegram_answer *a, const struct httpc_response *resp)
{
	char why[200];

	(void)ud;
	if (t->closing)
		return;
	if (rc == SB_OK && a->ok) {
		t->set_webhook_done = true;
		t->connected = true;
		t->backoff_ms = 0;
		log_info("telegram", "webhook set", LOG_S("account", t->base.account),
		         LOG_S("url", t->cfg->webhook.url));
		return;
	}
	tg_why(why, sizeof why, rc, status, a, resp);
	tg_error(t, "setWebhook failed: %s", why);
	log_error("telegram", "setWebhook failed", LOG_S("account", t->base.account),
	          LOG_S("error", why));
	tg_later(t,
	         status == 429 && a->retry_after_s >= 0 ? a->retry_after_s * 1000 : tg_backoff(t));
}

static void tg_set_webhook(struct tg *t)
{
	json_t *body;

	if (!t->cfg->webhook.set_on_start || t->set_webhook_done) {
		t->connected = true;
		return;
	}
	body =
	    json_pack("{ssss}", "url", t->cfg->webhook.url, "secret_token", t->cfg->webhook.secret);
	if (body)
		json_object_set_new(body, "allowed_updates", tg_allowed_updates(t->cfg));
	if (!body || tg_api(t, "setWebhook", body, (long)t->cfg->request_timeout_ms,
	                    tg_webhook_done, NULL, NULL))
		tg_later(t, tg_backoff(t));
}

/* ---- the offset ---- */

static void tg_offset_loaded(void *ud, int rc, const char *value)
{
	struct tg_kv *k = ud;
	struct tg *t = k->t;
	char *end = NULL;
	long long v;

	free(k);
	if (!t)
		return;
	t->kv = NULL;
	if (rc == SB_OK && value) {
		v = strtoll(value, &end, 10);
		t->offset = end && *end == '\0' && v >= 0 ? (int64_t)v : 0;
	} else if (rc == SB_ERR_NOTFOUND) {
		t->offset = 0;
	} else {
		log_error("telegram", "cannot read the poll offset",
		          LOG_S("account", t->base.account), LOG_S("error", sb_strerror(rc)));
		tg_later(t, tg_backoff(t));
		return;
	}
	log_info("telegram", "polling", LOG_S("account", t->base.account),
	         LOG_I("offset", t->offset));
	tg_later(t, 0);
}

static void tg_load_offset(struct tg *t)
{
	const struct host *host = t->base.host;
	struct tg_kv *k = calloc(1, sizeof *k);

	if (!k) {
		tg_later(t, tg_backoff(t));
		return;
	}
	k->t = t;
	t->kv = k;
	if (host->kv_get(host->ctx, t->ns, "offset", tg_offset_loaded, k) != SB_OK) {
		t->kv = NULL;
		free(k);
		tg_later(t, tg_backoff(t));
	}
}

static void tg_offset_saved(void *ud, int rc)
{
	struct tg_kv *k = ud;
	struct tg *t = k->t;

	free(k);
	if (!t)
		return;
	t->kv = NULL;
	if (rc)
		log_warn("telegram",
		         "cannot persist the poll offset; Telegram's own record of it "
		         "still holds",
		         LOG_S("account", t->base.account), LOG_S("error", sb_strerror(rc)));
	tg_later(t, t->backoff_ms ? tg_backoff(t) : 0);
}

/* Persists the offset, then polls again. */
static void tg_save_offset(struct tg *t)
{
	const struct host *host = t->base.host;
	struct tg_kv *k = calloc(1, sizeof *k);
	char v[32];

	if (!k) {
		tg_later(t, 0);
		return;
	}
	k->t = t;
	k->offset = t->offset;
	t->kv = k;
	snprintf(v, sizeof v, "%" PRId64, t->offset);
	SB_CRASH_POINT("telegram.offset.save");
	if (host->kv_put(host->ctx, t->ns, "offset", v, tg_offset_saved, k) != SB_OK) {
		t->kv = NULL;
		free(k);
		tg_later(t, 0);
	}
}

/* ---- polling ---- */

static void tg_batch_free(struct tg_batch *b)
{
	free(b->ids);
	free(b->rc);
	free(b);
}

/* Every update of the batch answered: advance past the committed prefix. */
static void tg_batch_finish(struct tg_batch *b)
{
	struct tg *t = b->t;
	int64_t offset = t->offset;
	bool failed = false;

	t->batch = NULL;
	for (size_t i = 0; i < b->n; i++) {
		if (b->rc[i]) {
			failed = true;
			break;
		}
		if (b->ids[i] + 1 > offset)
			offset = b->ids[i] + 1;
	}
	tg_batch_free(b);
	if (failed)
		tg_backoff(t);
	else
		t->backoff_ms = 0;
	if (offset != t->offset) {
		t->offset = offset;
		tg_save_offset(t);
	} else {
		tg_later(t, failed ? tg_backoff(t) : 0);
	}
}

static void tg_ingested(void *ud, int rc, int64_t inbox_id, bool duplicate)
{
	struct tg_ingest *in = ud;
	struct tg_batch *b = in->b;

	(void)inbox_id;
	(void)duplicate;
	b->rc[in->i] = rc;
	free(in);
	if (--b->waiting)
		return;
	if (!b->t) {
		tg_batch_free(b);
		return;
	}
	tg_batch_finish(b);
}

static void tg_norm_opts(const struct tg *t, struct telegram_norm_opts *o)
{
	memset(o, 0, sizeof *o);
	o->bot_id = t->bot_id;
	o->bot_username = t->bot_username;
	o->edits = t->cfg->edits;
	o->allow_bots = t->cfg->allow_bots;
}

/* Normalises and ingests one update. Returns 1 when an ingest callback
 * will follow, 0 when the update is done (skipped), or an error. */
static int tg_ingest_one(struct tg *t, const json_t *u, host_ingest_cb cb, void *ud,
                         int64_t *update_id)
{
	const struct host *host = t->base.host;
	struct telegram_norm_opts o;
	struct telegram_norm n;
	struct envelope env;
	char *raw;
	int r, rc;

	tg_norm_opts(t, &o);
	r = telegram_normalise(u, &o, &n);
	*update_id = n.update_id;
	if (r < 0)
		return SB_ERR_INVAL;
	t->last_event_ms = clock_wall_ms();
	if (r == 0) {
		log_debug("telegram", "update skipped", LOG_S("account", t->base.account),
		          LOG_I("update_id", n.update_id), LOG_S("why", n.skip));
		return 0;
	}
	raw = jsonw_dumps(u, 0, NULL);
	if (!raw)
		return SB_ERR_NOMEM;
	telegram_norm_envelope(&n, t->base.account, raw, clock_wall_ms(), &env);
	rc = host->ingest(host->ctx, &env, cb, ud);
	free(raw);
	return rc ? rc : 1;
}

static void tg_poll_updates(struct tg *t, const json_t *result)
{
	struct tg_batch *b;
	size_t n = json_array_size(result), i;
	const json_t *u;

	if (!n) {
		tg_later(t, t->cfg->poll_interval_ms - (clock_mono_ms() - t->poll_started_ms));
		return;
	}
	b = calloc(1, sizeof *b);
	if (b) {
		b->ids = calloc(n, sizeof *b->ids);
		b->rc = calloc(n, sizeof *b->rc);
	}
	if (!b || !b->ids || !b->rc) {
		if (b)
			tg_batch_free(b);
		tg_later(t, tg_backoff(t));
		return;
	}
	b->t = t;
	b->n = n;
	b->waiting = 1; /* held until every update is handed over */
	t->batch = b;
	json_array_foreach(result, i, u)
	{
		struct tg_ingest *in = malloc(sizeof *in);
		int rc;

		if (!in) {
			b->rc[i] = SB_ERR_NOMEM;
			continue;
		}
		in->b = b;
		in->i = i;
		rc = tg_ingest_one(t, u, tg_ingested, in, &b->ids[i]);
		if (rc == 1) {
			b->waiting++;
			continue;
		}
		free(in);
		if (rc == SB_ERR_INVAL) {
			/* Not an update: nothing to commit or confirm for it. */
			log_warn("telegram", "getUpdates returned something that is not an update",
			         LOG_S("account", t->base.account));
			b->ids[i] = -1;
			rc = 0;
		}
		b->rc[i] = rc;
		if (rc && tg_log_allowed(t))
			log_warn("telegram", "cannot store an update; it will be fetched again",
			         LOG_S("account", t->base.account), LOG_I("update_id", b->ids[i]),
			         LOG_S("error", sb_strerror(rc)));
	}
	if (--b->waiting == 0)
		tg_batch_finish(b);
}

static void tg_poll_done(struct tg *t, void *ud, int rc, long status,
                         const struct telegram_answer *a, const struct httpc_response *resp)
{
	char why[256];

	(void)ud;
	t->poll = NULL;
	uv_timer_stop(&t->watchdog);
	if (t->closing)
		return;
	if (rc == SB_OK && status == 200 && a->ok && json_is_array(a->result)) {
		if (t->conflict)
			log_info("telegram", "polling again; the conflict is over",
			         LOG_S("account", t->base.account));
		t->conflict = false;
		t->connected = true;
		t->backoff_ms = 0;
		if (t->stopping)
			return;
		tg_poll_updates(t, a->result);
		return;
	}
	t->connected = false;
	tg_why(why, sizeof why, rc, status, a, resp);
	if (rc == SB_ERR_ABORTED) {
		/* stop, or the watchdog (which said why): poll again. */
		tg_later(t, TG_BACKOFF_MIN_MS);
		return;
	}
	if (status == 409) {
		tg_error(t,
		         "409 Conflict: another getUpdates poller is using this bot token, or a "
		         "webhook is set (deleteWebhook, or use mode: webhook): %s",
		         a->description ? a->description : "");
		if (!t->conflict || tg_log_allowed(t))
			log_error(
			    "telegram",
			    "getUpdates conflict (409): another poller uses this bot token, or "
			    "a webhook is set",
			    LOG_S("account", t->base.account),
			    LOG_S("error", a->description ? a->description : ""));
		t->conflict = true;
		tg_later(t, tg_backoff(t));
		return;
	}
	if (status == 429 && a->retry_after_s >= 0) {
		tg_error(t, "getUpdates rate limited: retry after %" PRId64 " s", a->retry_after_s);
		log_warn("telegram", "getUpdates rate limited", LOG_S("account", t->base.account),
		         LOG_I("retry_after_s", a->retry_after_s));
		tg_later(t, a->retry_after_s * 1000);
		return;
	}
	tg_error(t, "getUpdates failed: %s%s", why,
	         status == 401 || status == 404 ? " (is the bot token right?)" : "");
	if (tg_log_allowed(t))
		log_warn("telegram", "getUpdates failed", LOG_S("account", t->base.account),
		         LOG_S("error", why));
	tg_later(t, tg_backoff(t));
}

static void tg_watchdog_fire(uv_timer_t *h)
{
	struct tg *t = h->data;

	if (!t->poll || t->closing)
		return;
	tg_error(t,
	         "getUpdates stalled (no answer %" PRId64 " ms after it was sent); polling "
	         "again",
	         clock_mono_ms() - t->poll_started_ms);
	log_warn("telegram", "getUpdates stalled; polling again", LOG_S("account", t->base.account),
	         LOG_I("waited_ms", clock_mono_ms() - t->poll_started_ms));
	/* Its done callback runs now, with SB_ERR_ABORTED, and backs off. */
	httpc_cancel(t->poll->http);
}

static void tg_poll(struct tg *t)
{
	int64_t timeout_s = t->cfg->poll_timeout_ms / 1000;
	int64_t grace = TG_WATCHDOG_GRACE_MS + t->cfg->poll_timeout_ms / 4;
	json_t *body;
	int rc;

	if (t->poll || t->batch || t->kv || t->stopping || t->closing)
		return;
	body =
	    json_pack("{sIsI}", "offset", (json_int_t)t->offset, "timeout", (json_int_t)timeout_s);
	if (body)
		json_object_set_new(body, "allowed_updates", tg_allowed_updates(t->cfg));
	t->poll_started_ms = clock_mono_ms();
	rc = body ? tg_api(t, "getUpdates", body, (long)(t->cfg->poll_timeout_ms + 2 * grace),
	                   tg_poll_done, NULL, &t->poll)
	          : SB_ERR_NOMEM;
	if (rc) {
		t->poll = NULL;
		tg_later(t, tg_backoff(t));
		return;
	}
	uv_timer_start(&t->watchdog, tg_watchdog_fire, (uint64_t)(t->cfg->poll_timeout_ms + grace),
	               0);
}

/* ---- webhook intake ---- */

static void tg_respond(const struct host *host, struct host_http_req *r, int status,
                       const char *json)
{
	host->http_ops->respond(r, status, "application/json", json, strlen(json), NULL);
}

static void tg_hreq_unlink(struct tg_hreq *q)
{
	struct tg *t = q->t;

	if (!t)
		return;
	if (q->prev)
		q->prev->next = q->next;
	else
		t->hreqs = q->next;
	if (q->next)
		q->next->prev = q->prev;
	q->t = NULL;
}

static void tg_hook_ingested(void *ud, int rc, int64_t inbox_id, bool duplicate)
{
	struct tg_hreq *q = ud;
	struct tg *t = q->t;

	(void)inbox_id;
	(void)duplicate;
	if (t && q->http) {
		if (rc == SB_OK)
			tg_respond(t->base.host, q->http, 200, "{\"ok\":true}");
		else
			tg_respond(
			    t->base.host, q->http, 503,
			    "{\"ok\":false,\"error\":\"cannot store the update; retry later\"}");
	}
	tg_hreq_unlink(q);
	free(q);
}

/* Constant time, whatever the lengths: compares hashes of both. */
static bool tg_secret_ok(const char *want, const char *got, int got_len)
{
	unsigned char a[32], b[32];

	if (!want || !got || got_len < 0)
		return false;
	crypto_generichash(a, sizeof a, (const unsigned char *)want, strlen(want), NULL, 0);
	crypto_generichash(b, sizeof b, (const unsigned char *)got, (size_t)got_len, NULL, 0);
	return sodium_memcmp(a, b, sizeof a) == 0;
}

static void tg_on_hook(void *ud, struct host_http_req *r)
{
	struct tg *t = ud;
	const struct host *host = t->base.host;
	const struct host_http_ops *ops = host->http_ops;
	struct tg_hreq *q;
	char got[300];
	const char *body;
	size_t len = 0;
	json_t *u = NULL;
	int64_t update_id = 0;
	int hl, rc;

	if (strcmp(ops->method(r), "POST") != 0) {
		static const char *const allow[] = {"Allow: POST", NULL};

		ops->respond(r, 405, "application/json", "{\"ok\":false}", 12, allow);
		return;
	}
	if (t->stopping || t->closing || !t->cfg) {
		tg_respond(host, r, 503, "{\"ok\":false,\"error\":\"stopping\"}");
		return;
	}
	hl = ops->header(r, TG_SECRET_HEADER, got, sizeof got);
	if (!tg_secret_ok(t->cfg->webhook.secret, got, hl < (int)sizeof got ? hl : -1)) {
		sodium_memzero(got, sizeof got);
		tg_error(t, "a webhook request had %s secret token header (refused with 401)",
		         hl < 0 ? "no" : "a wrong");
		if (tg_log_allowed(t))
			log_warn("telegram", "webhook request refused: bad secret token",
			         LOG_S("account", t->base.account),
			         LOG_S("peer", ops->peer(r) ? ops->peer(r) : ""),
			         LOG_S("why", hl < 0 ? "no X-Telegram-Bot-Api-Secret-Token header"
			                             : "the secret token does not match"));
		tg_respond(host, r, 401, "{\"ok\":false,\"error\":\"unauthorized\"}");
		return;
	}
	body = ops->body(r, &len);
	if (len > TG_BODY_MAX) {
		tg_respond(host, r, 413, "{\"ok\":false,\"error\":\"too large\"}");
		return;
	}
	u = json_loadb(body ? body : "", body ? len : 0, 0, NULL);
	q = calloc(1, sizeof *q);
	if (!q) {
		json_decref(u);
		tg_respond(host, r, 503, "{\"ok\":false}");
		return;
	}
	q->t = t;
	q->http = r;
	rc = tg_ingest_one(t, u, tg_hook_ingested, q, &update_id);
	json_decref(u);
	if (rc == 1) {
		q->next = t->hreqs;
		if (t->hreqs)
			t->hreqs->prev = q;
		t->hreqs = q;
		return;
	}
	free(q);
	if (rc == 0)
		tg_respond(host, r, 200, "{\"ok\":true}");
	else if (rc == SB_ERR_INVAL)
		tg_respond(host, r, 400, "{\"ok\":false,\"error\":\"not a Telegram update\"}");
	else
		tg_respond(host, r, 503,
		           "{\"ok\":false,\"error\":\"cannot store the update; retry later\"}");
}

/* ---- rate limits ---- */

/* Milliseconds until b has a token at rate per ms with capacity cap; takes
 * it when there is one now (returns 0). */
static int64_t tg_bucket_wait(struct tg_bucket *b, double per_ms, double cap, int64_t now,
                              bool take)
{
	if (b->at_ms == 0) {
		b->tokens = cap;
		b->at_ms = now;
	}
	b->tokens += (double)(now - b->at_ms) * per_ms;
	if (b->tokens > cap)
		b->tokens = cap;
	b->at_ms = now;
	if (b->tokens >= 1.0) {
		if (take)
			b->tokens -= 1.0;
		return 0;
	}
	return (int64_t)((1.0 - b->tokens) / per_ms) + 1;
}

static void tg_bucket_free(void *ud, const char *key, void *value)
{
	(void)ud;
	(void)key;
	free(value);
}

/* How long the next message to chat must wait (0: go, tokens taken). */
static int64_t tg_rate_wait(struct tg *t, const char *chat)
{
	const struct telegram_rate_config *r = &t->cfg->rate;
	int64_t now = clock_mono_ms(), wg, wc;
	struct tg_bucket *b = strmap_get(t->buckets, chat);

	if (!b) {
		if (strmap_size(t->buckets) >= TG_BUCKETS_MAX) {
			strmap_each(t->buckets, tg_bucket_free, NULL);
			strmap_free(t->buckets);
			t->buckets = NULL;
			if (strmap_new(&t->buckets) != SB_OK)
				return 1000;
		}
		b = calloc(1, sizeof *b);
		if (!b || strmap_put(t->buckets, chat, b) != SB_OK) {
			free(b);
			return 1000;
		}
	}
	wg = tg_bucket_wait(&t->global, (double)r->global_per_second / 1000.0,
	                    (double)r->global_per_second, now, false);
	wc = tg_bucket_wait(b, (double)r->chat_per_minute / 60000.0, (double)r->chat_burst, now,
	                    false);
	if (wg || wc)
		return wg > wc ? wg : wc;
	tg_bucket_wait(&t->global, (double)r->global_per_second / 1000.0,
	               (double)r->global_per_second, now, true);
	tg_bucket_wait(b, (double)r->chat_per_minute / 60000.0, (double)r->chat_burst, now, true);
	return 0;
}

/* ---- sending ---- */

static json_t *tg_chat_value(const char *chat);

static bool tg_chat_ok(const char *chat)
{
	json_t *v = tg_chat_value(chat);

	json_decref(v);
	return v != NULL;
}

static void tg_job_closed(uv_handle_t *h)
{
	struct tg_job *j = h->data;

	telegram_chunks_free(j->chunks, j->n);
	free(j->key);
	free(j->ids);
	free(j);
}

static void tg_job_unlink(struct tg_job *j)
{
	struct tg *t = j->t;

	if (!t)
		return;
	if (j->prev)
		j->prev->next = j->next;
	else
		t->jobs = j->next;
	if (j->next)
		j->next->prev = j->prev;
	j->t = NULL;
}

static void tg_progress_dropped(void *ud, int rc)
{
	(void)ud;
	if (rc)
		log_warn("telegram", "cannot drop a reply's progress record",
		         LOG_S("error", sb_strerror(rc)));
}

/* The kv key of job j's progress, or NULL when it has none (one chunk, or
 * no idempotency key). Freed by the caller. */
static char *tg_progress_key(const struct tg_job *j)
{
	char *k;
	size_t n;

	if (!j->key || j->n < 2)
		return NULL;
	n = sizeof TG_PROGRESS_PREFIX + strlen(j->key);
	k = malloc(n);
	if (k)
		snprintf(k, n, "%s%s", TG_PROGRESS_PREFIX, j->key);
	return k;
}

/* Reports the outcome and ends the job. A failed job keeps its progress
 * record, so the retry continues after the chunks already accepted; a sent
 * one drops it after the outbox recorded the send (the outcome's write is
 * queued first, inside cb, and the store runs them in order), so a crash
 * never finds neither. */
static void tg_job_end(struct tg_job *j, const struct channel_send_result *res)
{
	struct tg *t = j->t;
	char *pkey = res->rc == SB_OK && t ? tg_progress_key(j) : NULL;

	if (j->kvop) {
		j->kvop->j = NULL;
		j->kvop = NULL;
	}
	tg_job_unlink(j);
	uv_timer_stop(&j->timer);
	j->cb(j->ud, res);
	uv_close((uv_handle_t *)&j->timer, tg_job_closed);
	if (pkey && t->base.host->kv_put &&
	    t->base.host->kv_put(t->base.host->ctx, t->ns, pkey, NULL, tg_progress_dropped,
	                         NULL) != SB_OK)
		log_warn("telegram", "cannot drop a reply's progress record");
	free(pkey);
}

static void tg_job_fail(struct tg_job *j, int rc, bool retryable, int64_t retry_after_ms,
                        const char *error)
{
	struct channel_send_result res = {
	    .rc = rc, .retryable = retryable, .retry_after_ms = retry_after_ms, .error = error};

	tg_job_end(j, &res);
}

static void tg_job_next(struct tg_job *j);

static void tg_job_timer(uv_timer_t *h)
{
	tg_job_next(h->data);
}

static int tg_ids_add(struct tg_job *j, int64_t id)
{
	size_t old = j->ids ? strlen(j->ids) : 0;
	char *n = realloc(j->ids, old + 24);

	if (!n)
		return SB_ERR_NOMEM;
	snprintf(n + old, 24, "%s%" PRId64, old ? "," : "", id);
	j->ids = n;
	return SB_OK;
}

static struct tg_jkv *tg_jkv_new(struct tg_job *j)
{
	struct tg_jkv *op = calloc(1, sizeof *op);

	if (op) {
		op->j = j;
		j->kvop = op;
	}
	return op;
}

/* Takes op back from its job; NULL when the job has ended. */
static struct tg_job *tg_jkv_take(struct tg_jkv *op)
{
	struct tg_job *j = op->j;

	if (j)
		j->kvop = NULL;
	free(op);
	return j;
}

static void tg_progress_saved(void *ud, int rc)
{
	struct tg_job *j = tg_jkv_take(ud);

	if (!j)
		return;
	if (rc)
		log_warn("telegram", "cannot record a reply's progress",
		         LOG_S("error", sb_strerror(rc)));
	tg_job_next(j);
}

/* Records that j's first j->idx chunks were accepted. SB_OK: the job goes
 * on when the write is durable; otherwise it goes on at once (a crash then
 * may send those chunks again, and the caller logs nothing: this only fails
 * when out of memory or the store is closing). */
static int tg_progress_save(struct tg *t, struct tg_job *j)
{
	const struct host *host = t->base.host;
	char *key = tg_progress_key(j), *v = NULL;
	json_t *o = NULL;
	struct tg_jkv *op = NULL;
	int rc = SB_ERR_NOMEM;

	if (!key || !host->kv_put)
		goto out;
	o = json_pack("{sIss}", "done", (json_int_t)j->idx, "ids", j->ids ? j->ids : "");
	v = o ? jsonw_dumps(o, 0, NULL) : NULL;
	if (!v || !(op = tg_jkv_new(j)))
		goto out;
	rc = host->kv_put(host->ctx, t->ns, key, v, tg_progress_saved, op);
	if (rc != SB_OK) {
		j->kvop = NULL;
		free(op);
	}
out:
	json_decref(o);
	free(v);
	free(key);
	return rc;
}

static void tg_progress_loaded(void *ud, int rc, const char *value)
{
	struct tg_job *j = tg_jkv_take(ud);
	json_t *v;
	json_int_t done;
	const char *ids;

	if (!j)
		return;
	v = rc == SB_OK && value ? json_loads(value, 0, NULL) : NULL;
	done = json_integer_value(json_object_get(v, "done"));
	ids = json_string_value(json_object_get(v, "ids"));
	if (done > 0 && (size_t)done < j->n) {
		j->idx = (size_t)done;
		free(j->ids);
		j->ids = ids && *ids ? strdup(ids) : NULL;
		log_info("telegram", "resuming a reply after the chunks already accepted",
		         LOG_S("account", j->t ? j->t->base.account : ""), LOG_I("done", done),
		         LOG_I("chunks", j->n));
	}
	json_decref(v);
	tg_job_next(j);
}

static void tg_sent(struct tg *t, void *ud, int rc, long status, const struct telegram_answer *a,
                    const struct httpc_response *resp)
{
	struct tg_job *j = ud;
	char why[320], detail[256];

	if (t->closing) {
		tg_job_fail(j, SB_ERR_CLOSED, true, -1, "the channel is stopping");
		return;
	}
	if (rc == SB_OK && status == 200 && a->ok) {
		json_t *mid = json_object_get(a->result, "message_id");

		if (json_is_integer(mid))
			tg_ids_add(j, (int64_t)json_integer_value(mid));
		j->idx++;
		SB_CRASH_POINT("telegram.piece.accepted");
		j->fallback = false;
		if (j->idx < j->n && tg_progress_save(t, j) == SB_OK)
			return; /* the next chunk goes once the record is durable */
		tg_job_next(j);
		return;
	}
	tg_why(detail, sizeof detail, rc, status, a, resp);
	if (rc == SB_OK && status == 400 && telegram_is_parse_error(a->description) &&
	    t->cfg->parse_mode == TELEGRAM_PARSE_HTML && !j->fallback) {
		/* Once, as plain text: never a loop. */
		log_warn("telegram",
		         "Telegram could not parse the formatting; sending as plain text",
		         LOG_S("account", t->base.account), LOG_S("error", detail));
		j->fallback = true;
		tg_job_next(j);
		return;
	}
	if (rc == SB_OK && a->migrate_to_chat_id && !j->migrated) {
		snprintf(j->chat, sizeof j->chat, "%" PRId64, a->migrate_to_chat_id);
		j->migrated = true;
		log_info("telegram", "the group became a supergroup; sending to its new id",
		         LOG_S("account", t->base.account), LOG_S("chat", j->chat));
		tg_job_next(j);
		return;
	}
	tg_error(t, "sendMessage failed: %s", detail);
	snprintf(why, sizeof why, "telegram sendMessage: %s", detail);
	if (rc != SB_OK) {
		tg_job_fail(j, rc == SB_ERR_TIMEOUT ? SB_ERR_TIMEOUT : SB_ERR_HTTP, true, -1, why);
	} else if (status == 429) {
		int64_t after = a->retry_after_s >= 0 ? a->retry_after_s * 1000 : 1000;

		tg_job_fail(j, SB_ERR_AGAIN, true, after, why);
	} else if (status >= 500 || status == 408) {
		tg_job_fail(j, SB_ERR_PROTO, true, -1, why);
	} else {
		/* 400 (bad chat, empty text, ...), 401, 403 (blocked by the user):
		 * sending the same again will not help. */
		tg_job_fail(j, SB_ERR_PROTO, false, -1, why);
	}
}

/* chat_id as Telegram wants it: a number, or "@channelusername". */
static json_t *tg_chat_value(const char *chat)
{
	char *end;
	long long v;

	if (chat[0] == '@')
		return json_string(chat);
	v = strtoll(chat, &end, 10);
	return *end == '\0' && end != chat ? json_integer(v) : NULL;
}

static void tg_job_next(struct tg_job *j)
{
	struct tg *t = j->t;
	const char *chunk;
	bool html;
	json_t *body, *chat;
	char *text = NULL;
	int64_t wait;
	int rc;

	if (!t || t->closing) {
		tg_job_fail(j, SB_ERR_CLOSED, true, -1, "the channel is stopping");
		return;
	}
	if (j->final_error) {
		tg_job_fail(j, SB_ERR_INVAL, false, -1, j->final_error);
		return;
	}
	if (j->nomem) {
		tg_job_fail(j, SB_ERR_NOMEM, true, -1, "out of memory");
		return;
	}
	if (j->idx >= j->n) {
		struct channel_send_result res = {
		    .rc = SB_OK, .retry_after_ms = -1, .channel_msg_id = j->ids};

		t->connected = t->connected || t->mode == TELEGRAM_MODE_WEBHOOK;
		tg_job_end(j, &res);
		return;
	}
	wait = tg_rate_wait(t, j->chat);
	if (wait > 0) {
		uv_timer_start(&j->timer, tg_job_timer, (uint64_t)wait, 0);
		return;
	}
	chunk = j->chunks[j->idx];
	html = t->cfg->parse_mode == TELEGRAM_PARSE_HTML && !j->fallback;
	if (html && !(text = telegram_markdown_html(chunk))) {
		tg_job_fail(j, SB_ERR_NOMEM, true, -1, "out of memory");
		return;
	}
	chat = tg_chat_value(j->chat);
	body =
	    json_pack("{soss}", "chat_id", chat ? chat : json_null(), "text", html ? text : chunk);
	free(text);
	if (!body) {
		tg_job_fail(j, SB_ERR_NOMEM, true, -1, "out of memory");
		return;
	}
	if (html)
		json_object_set_new(body, "parse_mode", json_string("HTML"));
	if (j->thread[0])
		json_object_set_new(body, "message_thread_id",
		                    json_integer(strtoll(j->thread, NULL, 10)));
	if (j->idx == 0 && j->reply_mid > 0 && t->cfg->reply_to_message)
		json_object_set_new(body, "reply_parameters",
		                    json_pack("{sIsb}", "message_id", (json_int_t)j->reply_mid,
		                              "allow_sending_without_reply", 1));
	rc = tg_api(t, "sendMessage", body, (long)t->cfg->request_timeout_ms, tg_sent, j, NULL);
	if (rc)
		tg_job_fail(j, rc, true, -1, "cannot start the request");
}

/* The job starts from a timer: cb must never run inside send. */
static int tg_send_later(struct tg *t, struct tg_job *j)
{
	(void)t;
	uv_timer_start(&j->timer, tg_job_timer, 0, 0);
	return SB_OK;
}

static int tg_send(struct channel *c, const struct channel_outbound *msg, channel_send_cb cb,
                   void *ud)
{
	struct tg *t = (struct tg *)c;
	struct tg_job *j;
	json_t *payload = json_loads(msg->payload ? msg->payload : "{}", 0, NULL);
	const char *text, *thread, *reply_to;

	j = calloc(1, sizeof *j);
	if (!j) {
		json_decref(payload);
		return SB_ERR_NOMEM;
	}
	uv_timer_init(t->base.host->loop, &j->timer);
	j->timer.data = j;
	j->t = t;
	j->cb = cb;
	j->ud = ud;
	j->next = t->jobs;
	if (t->jobs)
		t->jobs->prev = j;
	t->jobs = j;
	text = json_string_value(json_object_get(payload, "text"));
	thread = json_string_value(json_object_get(payload, "thread_id"));
	reply_to = json_string_value(json_object_get(payload, "reply_to"));
	snprintf(j->chat, sizeof j->chat, "%s", msg->target ? msg->target : "");
	if (thread && strlen(thread) < sizeof j->thread && thread[0] >= '0' && thread[0] <= '9')
		snprintf(j->thread, sizeof j->thread, "%s", thread);
	j->reply_mid = telegram_event_message_id(reply_to);
	j->key = msg->idempotency_key ? strdup(msg->idempotency_key) : NULL;
	if (!t->cfg)
		j->final_error = "no such Telegram account is configured";
	else if (!json_is_object(payload))
		j->final_error = "the reply payload is not a JSON object";
	else if (!tg_chat_ok(j->chat))
		j->final_error = "the reply's target is not a Telegram chat id";
	if (j->final_error) {
		json_decref(payload);
		return tg_send_later(t, j);
	}
	if (!text || !*text) {
		/* An entry that would send nothing is an error, never "sent": a
		 * reply whose payload lost its text would otherwise vanish. */
		log_error("telegram", "an outbox entry has no text to send; not sent",
		          LOG_S("account", t->base.account), LOG_I("outbox_id", msg->outbox_id),
		          LOG_S("chat", j->chat));
		j->final_error = "the outbox entry has no text to send";
		json_decref(payload);
		return tg_send_later(t, j);
	}
	j->n = telegram_chunks(text, (size_t)t->cfg->chunk_limit, &j->chunks);
	json_decref(payload);
	/* telegram_chunks gives no piece of a non-empty text only when out of
	 * memory: try again later. */
	j->nomem = j->n == 0;
	{
		char *pkey = tg_progress_key(j);
		struct tg_jkv *op = pkey && t->base.host->kv_get ? tg_jkv_new(j) : NULL;
		int krc = op ? t->base.host->kv_get(t->base.host->ctx, t->ns, pkey,
		                                    tg_progress_loaded, op)
		             : SB_ERR_NOMEM;

		free(pkey);
		if (krc == SB_OK)
			return SB_OK; /* the job starts when the store answers */
		if (op) {
			j->kvop = NULL;
			free(op);
		}
	}
	return tg_send_later(t, j);
}

/* ---- typing ---- */

static void tg_typing_closed(uv_handle_t *h)
{
	free(h->data);
}

static void tg_typing_done(struct tg *t, void *ud, int rc, long status,
                           const struct telegram_answer *a, const struct httpc_response *resp)
{
	char why[200];

	(void)ud;
	if (t->closing || (rc == SB_OK && a->ok))
		return;
	tg_why(why, sizeof why, rc, status, a, resp);
	log_debug("telegram", "sendChatAction failed", LOG_S("account", t->base.account),
	          LOG_S("error", why));
}

static void tg_typing_send(struct tg_typing *y)
{
	struct tg *t = y->t;
	json_t *chat = tg_chat_value(y->chat), *body;

	if (!t || !chat) {
		json_decref(chat);
		return;
	}
	body = json_pack("{soss}", "chat_id", chat, "action", "typing");
	if (body && y->thread[0])
		json_object_set_new(body, "message_thread_id",
		                    json_integer(strtoll(y->thread, NULL, 10)));
	if (body)
		tg_api(t, "sendChatAction", body, (long)t->cfg->request_timeout_ms, tg_typing_done,
		       NULL, NULL);
}

static void tg_typing_fire(uv_timer_t *h)
{
	tg_typing_send(h->data);
}

static void tg_typing_end(struct tg_typing *y)
{
	struct tg *t = y->t;

	if (t) {
		if (y->prev)
			y->prev->next = y->next;
		else
			t->typing = y->next;
		if (y->next)
			y->next->prev = y->prev;
	}
	y->t = NULL;
	uv_timer_stop(&y->timer);
	uv_close((uv_handle_t *)&y->timer, tg_typing_closed);
}

static void tg_activity(struct channel *c, const struct envelope *env, bool running)
{
	struct tg *t = (struct tg *)c;
	const char *thread = env->thread_id ? env->thread_id : "";
	struct tg_typing *y;

	if (!t->cfg || !t->cfg->typing || !env->peer_id || t->closing)
		return;
	for (y = t->typing; y; y = y->next)
		if (strcmp(y->chat, env->peer_id) == 0 && strcmp(y->thread, thread) == 0)
			break;
	if (!running) {
		if (y && --y->refs <= 0)
			tg_typing_end(y);
		return;
	}
	if (y) {
		y->refs++;
		return;
	}
	if (t->stopping || strlen(env->peer_id) >= sizeof y->chat ||
	    strlen(thread) >= sizeof y->thread)
		return;
	y = calloc(1, sizeof *y);
	if (!y)
		return;
	snprintf(y->chat, sizeof y->chat, "%s", env->peer_id);
	snprintf(y->thread, sizeof y->thread, "%s", thread);
	y->refs = 1;
	y->t = t;
	uv_timer_init(t->base.host->loop, &y->timer);
	y->timer.data = y;
	y->next = t->typing;
	if (t->typing)
		t->typing->prev = y;
	t->typing = y;
	tg_typing_send(y);
	uv_timer_start(&y->timer, tg_typing_fire, TG_TYPING_EVERY_MS, TG_TYPING_EVERY_MS);
}

/* ---- status ---- */

static void tg_status(struct channel *c, json_t *obj)
{
	struct tg *t = (struct tg *)c;

	if (!t->cfg) {
		json_object_set_new(obj, "mode", json_string("unconfigured"));
		json_object_set_new(obj, "configured", json_false());
		json_object_set_new(obj, "connected", json_false());
		return;
	}
	json_object_set_new(obj, "mode", json_string(telegram_mode_names[t->mode]));
	json_object_set_new(obj, "connected", json_boolean(t->connected));
	if (t->bot_username)
		json_object_set_new(obj, "bot", json_string(t->bot_username));
	if (t->mode == TELEGRAM_MODE_POLLING && t->offset >= 0)
		json_object_set_new(obj, "offset", json_integer(t->offset));
	if (t->conflict)
		json_object_set_new(obj, "conflict", json_true());
	if (t->last_event_ms)
		json_object_set_new(obj, "lastEventAt", json_integer(t->last_event_ms));
	if (t->last_error_ms) {
		json_object_set_new(obj, "lastErrorAt", json_integer(t->last_error_ms));
		json_object_set_new(obj, "lastError", json_string(t->last_error));
	}
}

/* ---- lifecycle ---- */

static size_t tg_accounts(const void *config, const char **names, size_t max)
{
	const struct telegram_config *tc = config;
	size_t n = 0;

	for (size_t i = 0; tc && i < tc->n_accounts && n < max; i++)
		if (tc->accounts[i].id)
			names[n++] = tc->accounts[i].id;
	return n;
}

static int tg_create(struct channel **out, const struct host *host, const char *account,
                     const void *config)
{
	struct tg *t = calloc(1, sizeof *t);
	const char *colon;

	if (!t)
		return SB_ERR_NOMEM;
	if (strmap_new(&t->buckets) != SB_OK) {
		free(t);
		return SB_ERR_NOMEM;
	}
	if (channel_init(&t->base, host, account) != SB_OK) {
		strmap_free(t->buckets);
		free(t);
		return SB_ERR_TOOBIG;
	}
	snprintf(t->ns, sizeof t->ns, "%s%s", TG_NS_PREFIX, t->base.account);
	t->cfg = telegram_config_find(config, t->base.account);
	if (t->cfg)
		t->pin = host->config(host->ctx);
	t->offset = -1;
	if (t->cfg) {
		t->mode = t->cfg->mode;
		t->token = strdup(t->cfg->token);
		t->api = strdup(t->cfg->api_base);
		if (!t->token || !t->api) {
			free(t->token);
			free(t->api);
			strmap_free(t->buckets);
			free(t);
			return SB_ERR_NOMEM;
		}
		/* The token begins with the bot's id: known before getMe. */
		colon = strchr(t->token, ':');
		if (colon)
			t->bot_id = strtoll(t->token, NULL, 10);
	}
	uv_timer_init(host->loop, &t->timer);
	uv_timer_init(host->loop, &t->watchdog);
	t->timer.data = t;
	t->watchdog.data = t;
	t->handles = 2;
	*out = &t->base;
	return SB_OK;
}

static void tg_stop(struct channel *c);

static int tg_reconfigure(struct channel *c, const void *config)
{
	struct tg *t = (struct tg *)c;
	const struct telegram_account_config *n = telegram_config_find(config, t->base.account);

	/* Token, mode and webhook path take effect at a restart; the rest
	 * (limits, formatting, timeouts) now. An account removed stops
	 * taking messages; replies already queued still go out with its last
	 * settings (the snapshot stays pinned) until the restart. */
	if (n && t->cfg && !t->removed) {
		struct config *np = t->base.host->config(t->base.host->ctx);

		if (t->pin)
			t->base.host->config_release(t->base.host->ctx, t->pin);
		t->pin = np;
		t->cfg = n;
	} else if (!n && t->cfg && !t->removed) {
		log_warn("telegram",
		         "the account was removed from the configuration; it stops "
		         "taking messages",
		         LOG_S("account", t->base.account));
		t->removed = true;
		tg_stop(c);
	}
	return SB_OK;
}

static int tg_start(struct channel *c)
{
	struct tg *t = (struct tg *)c;
	const struct host *host = t->base.host;
	char path[TELEGRAM_PATH_MAX + 1];
	int rc;

	if (!t->cfg) {
		if (strcmp(t->base.account, "default") != 0)
			log_warn("telegram", "no such account in channels.telegram.accounts",
			         LOG_S("account", t->base.account));
		return SB_OK;
	}
	t->started = true;
	if (t->mode == TELEGRAM_MODE_WEBHOOK) {
		telegram_webhook_path(t->cfg, path, sizeof path);
		rc = host->http_route(host->ctx, "telegram", path, false, "POST,GET,PUT,DELETE",
		                      tg_on_hook, t);
		if (rc) {
			log_error("telegram", "cannot route the webhook path",
			          LOG_S("account", t->base.account), LOG_S("path", path),
			          LOG_S("error", sb_strerror(rc)));
			return rc;
		}
		t->routed = true;
		log_info("telegram", "webhook ready", LOG_S("account", t->base.account),
		         LOG_S("path", path));
	}
	tg_later(t, 0);
	return SB_OK;
}

static void tg_stop(struct channel *c)
{
	struct tg *t = (struct tg *)c;

	t->stopping = true;
	uv_timer_stop(&t->timer);
	uv_timer_stop(&t->watchdog);
	if (t->poll)
		httpc_cancel(t->poll->http);
	while (t->typing)
		tg_typing_end(t->typing);
}

static void tg_closed(uv_handle_t *h)
{
	struct tg *t = h->data;

	if (--t->handles == 0)
		free(t);
}

static void tg_destroy(struct channel *c)
{
	struct tg *t = (struct tg *)c;

	tg_stop(c);
	t->closing = true;
	/* Every call's done callback runs now (SB_ERR_ABORTED). */
	while (t->calls)
		httpc_cancel(t->calls->http);
	if (t->batch) {
		t->batch->t = NULL;
		t->batch = NULL;
	}
	if (t->kv) {
		t->kv->t = NULL;
		t->kv = NULL;
	}
	while (t->hreqs) {
		struct tg_hreq *q = t->hreqs;

		if (q->http)
			tg_respond(t->base.host, q->http, 503,
			           "{\"ok\":false,\"error\":\"stopping\"}");
		q->http = NULL;
		tg_hreq_unlink(q);
	}
	while (t->jobs)
		tg_job_fail(t->jobs, SB_ERR_CLOSED, true, -1, "the channel is stopping");
	strmap_each(t->buckets, tg_bucket_free, NULL);
	strmap_free(t->buckets);
	if (t->pin)
		t->base.host->config_release(t->base.host->ctx, t->pin);
	t->pin = NULL;
	free(t->bot_username);
	if (t->token) {
		sodium_memzero(t->token, strlen(t->token));
		free(t->token);
	}
	free(t->api);
	uv_close((uv_handle_t *)&t->timer, tg_closed);
	uv_close((uv_handle_t *)&t->watchdog, tg_closed);
}

const struct channel_ops channel_telegram_ops = {
    .name = "telegram",
    .create = tg_create,
    .reconfigure = tg_reconfigure,
    .start = tg_start,
    .stop = tg_stop,
    .destroy = tg_destroy,
    .send = tg_send,
    .accounts = tg_accounts,
    .status = tg_status,
    .activity = tg_activity,
};
