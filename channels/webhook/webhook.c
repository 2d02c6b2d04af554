/*
 * webhook.c - the generic webhooks channel.
 *
 * Inbound: every request under /hooks/ comes here (the route is added with
 * the first hook, at start or by a reload). The hook is found by its
 * exact path (404 otherwise; 405 for anything but POST), the body size is
 * checked against the hook's cap (413), the delivery is verified (Standard
 * Webhooks, GitHub or bearer; 401), parsed and mapped (400), and only then
 * handed to host->ingest. The sender is answered after the inbox commit:
 *   sync      wait for the reply (host->await_reply) up to sync_timeout:
 *             200 {"reply", "status", "message_id", "event_id"}, or 202
 *             {"status": "accepted", ...} when it takes longer;
 *   callback  202 at once; the reply goes out through the outbox (send);
 *   none      202 at once; there is no reply.
 * A delivery whose event id is in the inbox already is answered with
 * "duplicate": true and not processed again; in sync mode it gets the
 * reply too when this process has seen it (a bounded cache keyed by hook
 * and event id, filled by await_reply and by send).
 *
 * Outbound (send): for callback hooks a POST of the reply to callback_url,
 * signed with Standard Webhooks headers whose webhook-id is the outbox
 * idempotency key, so a receiver that dedupes sees one reply across our
 * retries and restarts. 2xx is success; 408, 425, 429, 5xx and transport
 * errors are retried (Retry-After honoured); other answers are final. For
 * sync and none hooks the reply already went (or goes nowhere): send
 * reports success (a sync hook's send first records the reply in the cache).
 *
 * Lifetimes: a request or send waiting for a callback from the host is on
 * one of the adapter's lists; when the adapter goes away it answers what is
 * unanswered and detaches them, and the late callback frees them.
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
#include "channels/webhook/webhook_config.h"
#include "channels/webhook/webhook_verify.h"
#include "gateway/core/clock.h"
#include "gateway/core/err.h"
#include "gateway/core/fmt.h"
#include "gateway/core/jsonw.h"
#include "gateway/core/log.h"
#include "gateway/core/strmap.h"

#define WEBHOOK_ID_FIELD_MAX 256   /* sender, conversation, thread ids */
#define WEBHOOK_NAME_FIELD_MAX 512 /* sender_name */
#define WEBHOOK_HDR_MAX 2048
#define WEBHOOK_SEEN_MAX 4096
#define WEBHOOK_SEEN_BYTES_MAX ((size_t)16 << 20) /* reply texts held, in all */
#define WEBHOOK_SEEN_TTL_MS (15LL * 60 * 1000)
/* Failed verifications are counted per (address, hook) in a fixed table: a
 * flood from many addresses evicts old slots instead of growing memory. */
#define WEBHOOK_FAIL_SLOTS 512
#define WEBHOOK_FAIL_WINDOW_MS 60000

struct webhook_fail_slot {
	uint64_t key; /* hash of address and hook; 0 = free */
	int64_t window_ms;
	int64_t count;
};
#define WEBHOOK_RETRY_AFTER_BUSY "Retry-After: 1"
#define WEBHOOK_RETRY_AFTER_FAIL "Retry-After: 5"

/* What this process knows of one delivery's reply (sync hooks). */
struct webhook_seen {
	char *key; /* hook \x1f event id */
	bool answered;
	char *text;
	char *status;
	int64_t at_ms;
	struct webhook_seen *next; /* insertion order, for expiry */
};

struct webhook_req;
struct webhook_out;

struct webhook {
	struct channel base;
	const struct webhook_config *cfg; /* borrowed from the current snapshot */
	bool started, routed, stopping;
	struct webhook_req *reqs; /* waiting for ingest or await_reply */
	struct webhook_out *outs; /* callback POSTs in flight */
	struct strmap *seen;
	struct webhook_seen *seen_head, *seen_tail;
	size_t seen_bytes; /* text and status bytes held */
	/* Rejections are logged, at most WEBHOOK_LOG_BURST a minute. */
	struct channel_ratelog rejects;
	struct webhook_fail_slot fails[WEBHOOK_FAIL_SLOTS];
};

struct webhook_req {
	struct webhook *w;          /* NULL once the adapter is gone */
	struct host_http_req *http; /* NULL once answered */
	struct webhook_req *prev, *next;
	int mode;
	int64_t sync_timeout_ms;
	int64_t inbox_id; /* 0 until the inbox answered */
	bool duplicate;
	char hook[WEBHOOK_NAME_MAX + 1];
	char event_id[WEBHOOK_EVENT_ID_MAX + 1];
};

struct webhook_out {
	struct webhook *w; /* NULL once the adapter is gone */
	struct webhook_out *prev, *next;
	channel_send_cb cb;
	void *ud;
	char *msg_id;
};

/* ---- responses ---- */

static void webhook_respond(const struct host *host, struct host_http_req *r, int status,
                            json_t *body_take, const char *const *headers)
{
	static const char oom[] = "{\"error\":\"out of memory\"}";
	char *text = body_take ? jsonw_dumps(body_take, 0, NULL) : NULL;

	json_decref(body_take);
	if (!text) {
		host->http_ops->respond(r, 500, "application/json", oom, sizeof oom - 1, NULL);
		return;
	}
	host->http_ops->respond(r, status, "application/json", text, strlen(text), headers);
	free(text);
}

static void webhook_respond_error(const struct host *host, struct host_http_req *r, int status,
                                  const char *why, const char *const *headers)
{
	webhook_respond(host, r, status, json_pack("{ss}", "error", why), headers);
}

/* 200 with the reply, or 202 accepted (text NULL). */
static void webhook_respond_outcome(struct webhook_req *q, const char *text, const char *status)
{
	const struct host *host = q->w->base.host;
	json_t *o =
	    json_pack("{sIss}", "message_id", (json_int_t)q->inbox_id, "event_id", q->event_id);

	if (o) {
		json_object_set_new(o, "status", json_string(text ? status : "accepted"));
		if (text)
			json_object_set_new(o, "reply", json_string(text));
		if (q->duplicate)
			json_object_set_new(o, "duplicate", json_true());
	}
	webhook_respond(host, q->http, text ? 200 : 202, o, NULL);
	q->http = NULL;
}

/* Logs a refused delivery (never with secret material), rate-limited. */
static void webhook_log_reject(struct webhook *w, const char *hook, const char *peer, int status,
                               const char *why)
{
	int64_t suppressed = 0;

	if (!channel_ratelog_take(&w->rejects, &suppressed))
		return;
	log_warn("webhook", "delivery refused", LOG_S("hook", hook ? hook : ""),
	         LOG_S("peer", peer ? peer : ""), LOG_I("status", status), LOG_S("why", why),
	         LOG_I("suppressed_before", suppressed));
}

/* ---- failed verifications ---- */

static uint64_t webhook_fail_key(const char *peer, const char *hook)
{
	uint64_t h = 1469598103934665603ULL; /* FNV-1a */

	for (const char *p = peer ? peer : ""; *p; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211ULL;
	h = (h ^ 0xff) * 1099511628211ULL;
	for (const char *p = hook ? hook : ""; *p; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211ULL;
	return h ? h : 1;
}

/* The slot of (peer, hook), its window restarted when it is over. */
static struct webhook_fail_slot *webhook_fail_slot(struct webhook *w, const char *peer,
                                                   const char *hook, int64_t now)
{
	uint64_t key = webhook_fail_key(peer, hook);
	struct webhook_fail_slot *s = &w->fails[key % WEBHOOK_FAIL_SLOTS];

	if (s->key != key || now - s->window_ms >= WEBHOOK_FAIL_WINDOW_MS) {
		s->key = key;
		s->window_ms = now;
		s->count = 0;
	}
	return s;
}

/* Seconds until (peer, hook) may try again, or 0 when it may now. */
static int64_t webhook_fail_blocked(struct webhook *w, const struct webhook_hook_config *h,
                                    const char *peer)
{
	int64_t now = clock_mono_ms();
	struct webhook_fail_slot *s;

	if (h->max_auth_failures <= 0)
		return 0;
	s = webhook_fail_slot(w, peer, h->name, now);
	if (s->count < h->max_auth_failures)
		return 0;
	return (s->window_ms + WEBHOOK_FAIL_WINDOW_MS - now + 999) / 1000;
}

static void webhook_fail_count(struct webhook *w, const struct webhook_hook_config *h,
                               const char *peer)
{
	if (h->max_auth_failures > 0)
		webhook_fail_slot(w, peer, h->name, clock_mono_ms())->count++;
}

/* ---- the reply cache ---- */

static void webhook_seen_free(struct webhook_seen *s)
{
	if (!s)
		return;
	free(s->key);
	free(s->text);
	free(s->status);
	free(s);
}

static void webhook_seen_key(char *out, size_t size, const char *hook, const char *event_id)
{
	snprintf(out, size, "%s\x1f%s", hook, event_id);
}

static size_t webhook_seen_size(const struct webhook_seen *s)
{
	return (s->text ? strlen(s->text) : 0) + (s->status ? strlen(s->status) : 0);
}

/* Drops expired entries, and the oldest while the cache is over its
 * bounds (entries, or bytes with room for need more). */
static void webhook_seen_trim(struct webhook *w, int64_t now, size_t need)
{
	while (w->seen_head && (now - w->seen_head->at_ms > WEBHOOK_SEEN_TTL_MS ||
	                        strmap_size(w->seen) >= WEBHOOK_SEEN_MAX ||
	                        w->seen_bytes + need > WEBHOOK_SEEN_BYTES_MAX)) {
		struct webhook_seen *s = w->seen_head;

		w->seen_head = s->next;
		if (!w->seen_head)
			w->seen_tail = NULL;
		strmap_del(w->seen, s->key);
		w->seen_bytes -= webhook_seen_size(s);
		webhook_seen_free(s);
	}
}

static struct webhook_seen *webhook_seen_get(struct webhook *w, const char *hook,
                                             const char *event_id, bool create)
{
	char key[WEBHOOK_NAME_MAX + WEBHOOK_EVENT_ID_MAX + 4];
	struct webhook_seen *s;
	int64_t now = clock_mono_ms();

	webhook_seen_key(key, sizeof key, hook, event_id);
	s = strmap_get(w->seen, key);
	if (s || !create)
		return s;
	webhook_seen_trim(w, now, 0);
	s = calloc(1, sizeof *s);
	if (!s || !(s->key = strdup(key)) || strmap_put(w->seen, key, s) != SB_OK) {
		webhook_seen_free(s);
		return NULL;
	}
	s->at_ms = now;
	if (w->seen_tail)
		w->seen_tail->next = s;
	else
		w->seen_head = s;
	w->seen_tail = s;
	return s;
}

static void webhook_seen_answer(struct webhook *w, const char *hook, const char *event_id,
                                const char *text, const char *status)
{
	struct webhook_seen *s;
	char *t, *st;

	text = text ? text : "";
	status = status ? status : "";
	if (strlen(text) + strlen(status) > WEBHOOK_SEEN_BYTES_MAX / 4)
		return; /* too big to keep; a retry then waits or gets 202 */
	s = webhook_seen_get(w, hook, event_id, true);
	/* A reply that is already known keeps its text unless this one has
	 * more (a pairing code comes with the outbox entry, not the run). */
	if (!s || (s->answered && s->text && *s->text && !*text))
		return;
	t = strdup(text);
	st = strdup(status);
	if (!t || !st) {
		free(t);
		free(st);
		return;
	}
	w->seen_bytes -= webhook_seen_size(s);
	free(s->text);
	free(s->status);
	s->text = t;
	s->status = st;
	s->answered = true;
	w->seen_bytes += webhook_seen_size(s);
	/* Over the byte budget: the oldest go (never s, the newest). */
	if (w->seen_bytes > WEBHOOK_SEEN_BYTES_MAX && w->seen_head != s)
		webhook_seen_trim(w, clock_mono_ms(), 0);
}

/* ---- requests waiting for the host ---- */

static void webhook_req_link(struct webhook *w, struct webhook_req *q)
{
	q->w = w;
	q->prev = NULL;
	q->next = w->reqs;
	if (w->reqs)
		w->reqs->prev = q;
	w->reqs = q;
}

/* The last callback for q ran: unlink and free it. */
static void webhook_req_done(struct webhook_req *q)
{
	struct webhook *w = q->w;

	if (w) {
		if (q->prev)
			q->prev->next = q->next;
		else
			w->reqs = q->next;
		if (q->next)
			q->next->prev = q->prev;
	}
	free(q);
}

/* Answers what is still unanswered: 202 once the message is in the inbox
 * (it will be processed; a sync reply is then lost to this request), 503
 * before (the sender retries; the event id makes that safe). detach: the
 * adapter goes away; the pending callbacks free the requests. */
static void webhook_flush(struct webhook *w, bool detach)
{
	static const char *const again[] = {WEBHOOK_RETRY_AFTER_FAIL, NULL};
	struct webhook_req *q, *next;

	for (q = w->reqs; q; q = next) {
		next = q->next;
		if (q->http) {
			if (q->inbox_id)
				webhook_respond_outcome(q, NULL, NULL);
			else
				webhook_respond_error(w->base.host, q->http, 503,
				                      "the gateway is stopping; retry later",
				                      again);
			q->http = NULL;
		}
		if (detach) {
			q->w = NULL;
			q->prev = q->next = NULL;
		}
	}
	if (detach)
		w->reqs = NULL;
}

static void webhook_replied(void *ud, const struct host_reply *reply)
{
	struct webhook_req *q = ud;

	if (!q->w) {
		free(q);
		return;
	}
	if (reply->rc == SB_OK)
		webhook_seen_answer(q->w, q->hook, q->event_id, reply->text, reply->status);
	if (q->http) {
		if (reply->rc == SB_OK)
			webhook_respond_outcome(q, reply->text ? reply->text : "",
			                        reply->status ? reply->status : "");
		else
			webhook_respond_outcome(q, NULL, NULL);
	}
	webhook_req_done(q);
}

static void webhook_ingested(void *ud, int rc, int64_t inbox_id, bool duplicate)
{
	struct webhook_req *q = ud;
	struct webhook *w = q->w;
	const struct host *host;
	struct webhook_seen *seen;

	if (!w) {
		free(q);
		return;
	}
	host = w->base.host;
	if (!q->http) {
		webhook_req_done(q);
		return;
	}
	if (rc) {
		static const char *const busy[] = {WEBHOOK_RETRY_AFTER_BUSY, NULL};
		static const char *const fail[] = {WEBHOOK_RETRY_AFTER_FAIL, NULL};

		log_error("webhook", "cannot store a delivery", LOG_S("hook", q->hook),
		          LOG_S("error", sb_strerror(rc)));
		webhook_respond_error(host, q->http, 503,
		                      rc == SB_ERR_AGAIN ? "the gateway is busy; retry later"
		                                         : "cannot store the message; retry later",
		                      rc == SB_ERR_AGAIN ? busy : fail);
		q->http = NULL;
		webhook_req_done(q);
		return;
	}
	q->inbox_id = inbox_id;
	q->duplicate = duplicate;
	if (q->mode != WEBHOOK_MODE_SYNC) {
		webhook_respond_outcome(q, NULL, NULL);
		webhook_req_done(q);
		return;
	}
	seen = webhook_seen_get(w, q->hook, q->event_id, true);
	if (seen && seen->answered) {
		webhook_respond_outcome(q, seen->text ? seen->text : "",
		                        seen->status ? seen->status : "");
		webhook_req_done(q);
		return;
	}
	if (host->await_reply(host->ctx, inbox_id, q->sync_timeout_ms, webhook_replied, q) !=
	    SB_OK) {
		webhook_respond_outcome(q, NULL, NULL);
		webhook_req_done(q);
	}
}

/* ---- inbound ---- */

/* A scalar of the body as text: strings as they are, integers in decimal.
 * NULL for anything else (absent, objects, arrays, booleans, null). */
static const char *webhook_scalar(const json_t *v, char *buf, size_t size)
{
	if (json_is_string(v))
		return json_string_value(v);
	if (json_is_integer(v)) {
		snprintf(buf, size, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
		return buf;
	}
	return NULL;
}

/* The value at path as text, or NULL; *too_long when it passes max. */
static const char *webhook_field(const json_t *root, const char *path, char *buf, size_t size,
                                 size_t max, bool *too_long)
{
	const json_t *v = NULL;
	const char *s;

	if (!path || webhook_path_get(root, path, &v) != SB_OK)
		return NULL;
	s = webhook_scalar(v, buf, size);
	if (s && !*s)
		return NULL;
	if (s && strlen(s) > max) {
		*too_long = true;
		return NULL;
	}
	return s;
}

static int webhook_header(const struct host *host, struct host_http_req *r, const char *name,
                          char *out, size_t size)
{
	return host->http_ops->header(r, name, out, size);
}

/* Verifies a delivery per its hook: SB_OK, or an error with v->why set. The
 * header id (webhook-id, X-GitHub-Delivery) goes to id_out, "" when none. */
static int webhook_verify(const struct host *host, const struct webhook_hook_config *h,
                          struct host_http_req *r, const char *body, size_t len, char *id_out,
                          size_t id_size, struct webhook_verdict *v)
{
	char a[WEBHOOK_HDR_MAX], b[64], c[WEBHOOK_HDR_MAX];
	unsigned char key[WEBHOOK_KEY_MAX];
	size_t key_len = 0;
	int64_t now = clock_wall_ms() / 1000;
	int rc = SB_ERR_PERM;

	switch (h->verify) {
	case WEBHOOK_VERIFY_STANDARD: {
		bool has_id = webhook_header(host, r, "webhook-id", id_out, id_size) >= 0;
		bool has_ts = webhook_header(host, r, "webhook-timestamp", b, sizeof b) >= 0;
		bool has_sig = webhook_header(host, r, "webhook-signature", c, sizeof c) >= 0;

		if (webhook_secret_decode(h->secret, key, sizeof key, &key_len) != SB_OK) {
			v->why = "the hook's secret cannot be decoded";
			break;
		}
		rc = webhook_verify_standard(key, key_len, has_id ? id_out : NULL,
		                             has_ts ? b : NULL, has_sig ? c : NULL, body, len, now,
		                             h->tolerance_ms / 1000, v);
		sodium_memzero(key, sizeof key);
		break;
	}
	case WEBHOOK_VERIFY_GITHUB:
		rc = webhook_verify_github(
		    h->secret,
		    webhook_header(host, r, "x-hub-signature-256", a, sizeof a) >= 0 ? a : NULL,
		    body, len, v);
		if (rc == SB_OK &&
		    webhook_header(host, r, "x-github-delivery", id_out, id_size) < 0)
			id_out[0] = '\0';
		break;
	case WEBHOOK_VERIFY_BEARER:
		rc = webhook_verify_bearer(
		    h->secret,
		    webhook_header(host, r, "authorization", a, sizeof a) >= 0 ? a : NULL, v);
		break;
	default:
		v->why = "unknown verification mode";
		break;
	}
	if (rc != SB_OK)
		id_out[0] = '\0';
	return rc;
}

/* Everything between a verified body and host->ingest. On failure returns
 * the HTTP status with *why set. */
static int webhook_accept(struct webhook *w, const struct webhook_hook_config *h,
                          struct host_http_req *r, const char *body, size_t len,
                          const char *header_id, const char **why)
{
	const struct host *host = w->base.host;
	const struct webhook_mapping_config *m = &h->mapping;
	char sbuf[32], cbuf[32], tbuf[32], nbuf[32], ebuf[32], idem[WEBHOOK_EVENT_ID_MAX + 1];
	char event_id[WEBHOOK_EVENT_ID_MAX + 1];
	const char *sender, *name, *conv, *thread, *eid = NULL;
	const json_t *tv = NULL;
	struct envelope env;
	struct webhook_req *q = NULL;
	json_error_t jerr;
	json_t *root;
	char *raw = NULL;
	bool too_long = false;
	int status = 400, rc;

	root = json_loadb(body ? body : "", len, JSON_REJECT_DUPLICATES, &jerr);
	*why = "the body is not a JSON object";
	if (!json_is_object(root))
		goto out;
	*why = "the body has no text (a non-empty string) where mapping.text points";
	if (webhook_path_get(root, m->text, &tv) != SB_OK || !json_is_string(tv) ||
	    !*json_string_value(tv))
		goto out;
	sender = webhook_field(root, m->sender, sbuf, sizeof sbuf, WEBHOOK_ID_FIELD_MAX, &too_long);
	name = webhook_field(root, m->sender_name, nbuf, sizeof nbuf, WEBHOOK_NAME_FIELD_MAX,
	                     &too_long);
	conv = webhook_field(root, m->conversation, cbuf, sizeof cbuf, WEBHOOK_ID_FIELD_MAX,
	                     &too_long);
	thread = webhook_field(root, m->thread, tbuf, sizeof tbuf, WEBHOOK_ID_FIELD_MAX, &too_long);
	*why = "a sender, conversation or thread id is longer than 256 characters";
	if (too_long)
		goto out;

	/* The dedupe key: see mapping.event_id in webhook_config.c. */
	if (m->event_id) {
		eid = webhook_field(root, m->event_id, ebuf, sizeof ebuf, WEBHOOK_EVENT_ID_MAX,
		                    &too_long);
		*why = too_long ? "the event id is longer than 256 characters"
		                : "the body has no event id where mapping.event_id points";
		if (!eid)
			goto out;
	} else if (header_id && *header_id) {
		eid = header_id;
	} else if (host->http_ops->header(r, "idempotency-key", idem, sizeof idem) > 0) {
		eid = idem;
	} else {
		unsigned char hash[32];
		char hex[2 * sizeof hash + 1];

		crypto_generichash(hash, sizeof hash, (const unsigned char *)body, len, NULL, 0);
		sodium_bin2hex(hex, sizeof hex, hash, sizeof hash);
		snprintf(idem, sizeof idem, "body:%s", hex);
		eid = idem;
	}
	/* A cut id would make two deliveries one (the second acknowledged as
	 * a duplicate and lost). */
	*why = "the event id is longer than 256 characters";
	if (FMT(event_id, "%s", eid) != SB_OK)
		goto out;

	status = 500;
	*why = "out of memory";
	q = calloc(1, sizeof *q);
	raw = malloc(len + 1);
	if (!q || !raw)
		goto out;
	memcpy(raw, body ? body : "", len);
	raw[len] = '\0';
	memcpy(q->hook, h->name, strlen(h->name) + 1); /* both bounded by the schema */
	memcpy(q->event_id, event_id, strlen(event_id) + 1);
	q->http = r;
	q->mode = h->mode;
	q->sync_timeout_ms = h->sync_timeout_ms;

	memset(&env, 0, sizeof env);
	env.channel = "webhook";
	env.account = h->name;
	env.event_id = event_id;
	switch (h->peer_kind) {
	case WEBHOOK_PEER_DIRECT:
		env.peer_kind = ENVELOPE_PEER_DIRECT;
		break;
	case WEBHOOK_PEER_GROUP:
		env.peer_kind = ENVELOPE_PEER_GROUP;
		break;
	case WEBHOOK_PEER_CHANNEL:
		env.peer_kind = ENVELOPE_PEER_CHANNEL;
		break;
	default:
		env.peer_kind = conv ? ENVELOPE_PEER_CHANNEL : ENVELOPE_PEER_DIRECT;
		break;
	}
	env.sender_id = sender ? sender : h->name;
	env.sender_name = name;
	env.peer_id = conv ? conv : env.sender_id;
	env.thread_id = thread;
	env.text = json_string_value(tv);
	/* Posting to the hook is addressing the bot; and what it carries comes
	 * from outside, whoever signed it. */
	env.mentioned = true;
	env.untrusted = true;
	/* A sync or callback delivery is answered on its own. */
	env.own_reply = h->mode == WEBHOOK_MODE_SYNC || h->mode == WEBHOOK_MODE_CALLBACK;
	env.received_at = clock_wall_ms();
	env.raw = raw;
	rc = host->ingest(host->ctx, &env, webhook_ingested, q);
	if (rc) {
		log_error("webhook", "cannot store a delivery", LOG_S("hook", h->name),
		          LOG_S("error", sb_strerror(rc)));
		status = 503;
		*why = rc == SB_ERR_AGAIN ? "the gateway is busy; retry later"
		                          : "cannot store the message; retry later";
		goto out;
	}
	webhook_req_link(w, q);
	q = NULL;
	status = 0;
out:
	free(q);
	free(raw);
	json_decref(root);
	return status;
}

static void webhook_on_request(void *ud, struct host_http_req *r)
{
	static const char *const allow[] = {"Allow: POST", NULL};
	static const char *const again[] = {WEBHOOK_RETRY_AFTER_FAIL, NULL};
	struct webhook *w = ud;
	const struct host *host = w->base.host;
	const struct host_http_ops *ops = host->http_ops;
	const struct webhook_hook_config *h = webhook_config_find_path(w->cfg, ops->path(r));
	struct webhook_verdict v = {.why = NULL};
	char header_id[WEBHOOK_EVENT_ID_MAX + 1];
	const char *body, *why = NULL;
	size_t len = 0;
	int64_t wait_s;
	int status;

	if (!h) {
		webhook_respond_error(host, r, 404, "no webhook is configured at this path", NULL);
		return;
	}
	if (strcmp(ops->method(r), "POST") != 0) {
		webhook_respond_error(host, r, 405, "webhooks are delivered with POST", allow);
		return;
	}
	if (w->stopping) {
		webhook_respond_error(host, r, 503, "the gateway is stopping; retry later", again);
		return;
	}
	body = ops->body(r, &len);
	if (!body)
		len = 0;
	if ((int64_t)len > h->max_body) {
		webhook_log_reject(w, h->name, ops->peer(r), 413, "body over max_body");
		webhook_respond_error(host, r, 413, "the body is larger than this hook accepts",
		                      NULL);
		return;
	}
	header_id[0] = '\0';
	if ((wait_s = webhook_fail_blocked(w, h, ops->peer(r))) > 0) {
		char retry[64];
		const char *hdrs[] = {retry, NULL};

		snprintf(retry, sizeof retry, "Retry-After: %lld", (long long)wait_s);
		webhook_log_reject(w, h->name, ops->peer(r), 429, "too many failed verifications");
		webhook_respond_error(host, r, 429,
		                      "too many deliveries failed verification; retry later", hdrs);
		return;
	}
	if (webhook_verify(host, h, r, body, len, header_id, sizeof header_id, &v) != SB_OK) {
		webhook_fail_count(w, h, ops->peer(r));
		webhook_log_reject(w, h->name, ops->peer(r), 401, v.why ? v.why : "unverified");
		webhook_respond_error(host, r, 401, v.why ? v.why : "unverified", NULL);
		return;
	}
	status = webhook_accept(w, h, r, body, len, header_id, &why);
	if (status == 0)
		return;
	if (status == 400)
		webhook_log_reject(w, h->name, ops->peer(r), 400, why);
	webhook_respond_error(host, r, status, why, status == 503 ? again : NULL);
}

/* ---- outbound ---- */

static void webhook_out_unlink(struct webhook_out *o)
{
	struct webhook *w = o->w;

	if (!w)
		return;
	if (o->prev)
		o->prev->next = o->next;
	else
		w->outs = o->next;
	if (o->next)
		o->next->prev = o->prev;
	o->w = NULL;
}

static bool webhook_status_retryable(long status)
{
	return status == 408 || status == 425 || status == 429 || status >= 500;
}

static void webhook_out_done(void *ud, int rc, const struct httpc_response *resp)
{
	struct webhook_out *o = ud;
	struct channel_send_result res = {.rc = SB_OK, .retry_after_ms = -1};
	char why[160];

	/* A receiver that accepted the reply with a long body still accepted
	 * it: the status came before the body that passed the cap. */
	if (rc == SB_ERR_TOOBIG && resp && resp->status >= 200 && resp->status < 300)
		rc = SB_OK;
	if (rc != SB_OK) {
		snprintf(why, sizeof why, "callback failed: %s",
		         resp && resp->error ? resp->error : sb_strerror(rc));
		res.rc = rc == SB_ERR_TIMEOUT ? SB_ERR_TIMEOUT : SB_ERR_HTTP;
		res.retryable = true;
		res.error = why;
	} else if (resp->status >= 200 && resp->status < 300) {
		res.channel_msg_id = o->msg_id;
	} else {
		snprintf(why, sizeof why, "callback answered HTTP %ld", resp->status);
		res.rc = SB_ERR_PROTO;
		res.retryable = webhook_status_retryable(resp->status);
		res.retry_after_ms = httpc_retry_after_ms(resp);
		res.error = why;
	}
	webhook_out_unlink(o);
	o->cb(o->ud, &res);
	free(o->msg_id);
	free(o);
}

/* The webhook-id of a callback: the idempotency key, with anything the
 * spec does not allow in an id (".", spaces, non-ASCII) replaced. */
static char *webhook_callback_id(const char *key)
{
	char *id = strdup(key && *key ? key : "reply");

	for (char *p = id; p && *p; p++)
		if (*p <= ' ' || *p > '~' || *p == '.')
			*p = '_';
	return id;
}

/* The callback body: the reply and what it answers. */
static char *webhook_callback_body(const char *hook, const json_t *payload)
{
	static const char *const copied[][2] = {
	    {"reply_to", "event_id"}, {"text", "text"},
	    {"status", "status"},     {"peer_kind", "peer_kind"},
	    {"peer_id", "peer_id"},   {"thread_id", "thread_id"},
	    {"agent", "agent"},       {"session_key", "session_key"},
	    {"run_id", "run_id"},
	};
	json_t *o = json_pack("{ssss}", "type", "message.reply", "hook", hook);
	char *out;

	if (!o)
		return NULL;
	for (size_t i = 0; i < sizeof copied / sizeof copied[0]; i++) {
		json_t *v = json_object_get(payload, copied[i][0]);

		if (json_is_string(v))
			json_object_set_new(o, copied[i][1], json_string(json_string_value(v)));
	}
	out = jsonw_dumps(o, 0, NULL);
	json_decref(o);
	return out;
}

static int webhook_send_callback(struct webhook *w, const struct webhook_hook_config *h,
                                 const struct channel_outbound *msg, const json_t *payload,
                                 channel_send_cb cb, void *ud)
{
	unsigned char key[WEBHOOK_KEY_MAX];
	size_t key_len = 0;
	char sig[WEBHOOK_SIGNATURE_MAX + 32], hid[WEBHOOK_EVENT_ID_MAX + 32], hts[48];
	const char *headers[] = {"Content-Type: application/json", hid, hts, sig, NULL};
	struct httpc *http = w->base.host->http_client(w->base.host->ctx);
	struct httpc_request req;
	struct webhook_out *o = NULL;
	char *body = NULL, *id = NULL;
	int64_t now = clock_wall_ms() / 1000;
	int rc = SB_ERR_AGAIN;

	if (!http)
		goto out; /* closing: the outbox retries later */
	rc = SB_ERR_NOMEM;
	o = calloc(1, sizeof *o);
	id = webhook_callback_id(msg->idempotency_key);
	body = webhook_callback_body(h->name, payload);
	if (!o || !id || !body)
		goto out;
	rc = SB_ERR_INVAL;
	if (strlen(id) > WEBHOOK_EVENT_ID_MAX)
		goto out;
	rc = SB_ERR_CONFIG;
	if (webhook_secret_decode(h->callback_secret, key, sizeof key, &key_len) != SB_OK)
		goto out;
	memcpy(sig, "webhook-signature: ", 19);
	rc = webhook_sign_standard(key, key_len, id, now, body, strlen(body), sig + 19,
	                           sizeof sig - 19);
	sodium_memzero(key, sizeof key);
	if (rc)
		goto out;
	snprintf(hid, sizeof hid, "webhook-id: %s", id);
	snprintf(hts, sizeof hts, "webhook-timestamp: %" PRId64, now);
	memset(&req, 0, sizeof req);
	req.method = "POST";
	req.url = h->callback_url;
	req.headers = headers;
	req.body = body;
	req.body_len = strlen(body);
	req.timeout_ms = (long)h->callback_timeout_ms;
	req.max_response_bytes = 64 * 1024;
	o->cb = cb;
	o->ud = ud;
	o->msg_id = id;
	id = NULL;
	rc = httpc_request(http, &req, webhook_out_done, o, NULL);
	if (rc)
		goto out;
	o->w = w;
	o->next = w->outs;
	if (w->outs)
		w->outs->prev = o;
	w->outs = o;
	o = NULL;
out:
	if (o)
		free(o->msg_id);
	free(o);
	free(id);
	free(body);
	return rc;
}

static int webhook_send(struct channel *c, const struct channel_outbound *msg, channel_send_cb cb,
                        void *ud)
{
	struct webhook *w = (struct webhook *)c;
	const struct webhook_hook_config *h = webhook_config_find(w->cfg, msg->account);
	struct channel_send_result res = {.rc = SB_OK, .retry_after_ms = -1};
	json_t *payload = json_loads(msg->payload ? msg->payload : "{}", 0, NULL);
	char why[160];
	int rc;

	if (!json_is_object(payload)) {
		res.rc = SB_ERR_INVAL;
		res.error = "the reply payload is not a JSON object";
		rc = channel_report_later(w->base.host, &res, cb, ud);
		goto out;
	}
	if (!h) {
		snprintf(why, sizeof why, "no webhook named \"%s\" is configured any more",
		         msg->account ? msg->account : "");
		res.rc = SB_ERR_NOTFOUND;
		res.error = why;
		rc = channel_report_later(w->base.host, &res, cb, ud);
		goto out;
	}
	if (h->mode == WEBHOOK_MODE_CALLBACK) {
		rc = webhook_send_callback(w, h, msg, payload, cb, ud);
		goto out;
	}
	/* sync or none: the reply went out in the HTTP response (or nowhere);
	 * a sync hook keeps it for a retried delivery. */
	if (h->mode == WEBHOOK_MODE_SYNC && json_is_string(json_object_get(payload, "reply_to")))
		webhook_seen_answer(w, h->name,
		                    json_string_value(json_object_get(payload, "reply_to")),
		                    json_string_value(json_object_get(payload, "text")),
		                    json_string_value(json_object_get(payload, "status")));
	rc = channel_report_later(w->base.host, &res, cb, ud);
out:
	json_decref(payload);
	return rc;
}

/* ---- lifecycle ---- */

static void webhook_log_hooks(const struct webhook *w)
{
	char path[WEBHOOK_PATH_MAX + 1];

	for (size_t i = 0; w->cfg && i < w->cfg->n_hooks; i++) {
		const struct webhook_hook_config *h = &w->cfg->hooks[i];

		log_info("webhook", "hook ready", LOG_S("hook", h->name),
		         LOG_S("path", webhook_hook_path(h, path, sizeof path)),
		         LOG_S("verify", webhook_verify_names[h->verify]),
		         LOG_S("mode", webhook_mode_names[h->mode]));
	}
}

static int webhook_create(struct channel **out, const struct host *host, const char *account,
                          const void *config)
{
	struct webhook *w = calloc(1, sizeof *w);

	if (!w)
		return SB_ERR_NOMEM;
	if (strmap_new(&w->seen) != SB_OK) {
		free(w);
		return SB_ERR_NOMEM;
	}
	if (channel_init(&w->base, host, account) != SB_OK) {
		strmap_free(w->seen);
		free(w);
		return SB_ERR_TOOBIG;
	}
	w->cfg = config; /* channel.h: the adapter's own settings */
	*out = &w->base;
	return SB_OK;
}

/* One route for the whole prefix, registered once the first hook exists:
 * hooks added or removed by a reload then take effect without registering
 * routes, unknown paths under it get the adapter's 404, and a gateway with
 * no hooks leaves /hooks/ alone. Every method comes here so that a known
 * path answers 405 and an unknown one 404. */
static int webhook_route(struct webhook *w)
{
	const struct host *host = w->base.host;
	int rc;

	if (w->routed || !w->cfg || !w->cfg->n_hooks)
		return SB_OK;
	rc = host->http_route(host->ctx, WEBHOOK_PATH_PREFIX, WEBHOOK_PATH_PREFIX, true,
	                      "GET,POST,PUT,DELETE,PATCH,HEAD,OPTIONS", webhook_on_request, w);
	if (rc == SB_OK)
		w->routed = true;
	return rc;
}

static int webhook_reconfigure(struct channel *c, const void *config)
{
	struct webhook *w = (struct webhook *)c;

	w->cfg = config; /* channel.h: the adapter's own settings */
	if (!w->started || w->stopping)
		return SB_OK;
	webhook_log_hooks(w);
	return webhook_route(w);
}

static int webhook_start(struct channel *c)
{
	struct webhook *w = (struct webhook *)c;
	int rc = webhook_route(w);

	if (rc)
		return rc;
	w->started = true;
	webhook_log_hooks(w);
	return SB_OK;
}

static void webhook_stop(struct channel *c)
{
	struct webhook *w = (struct webhook *)c;

	/* The first stop (drain) refuses new deliveries and lets waiting sync
	 * requests get their replies while runs finish; the second (shutdown)
	 * answers those that are still waiting. */
	if (w->stopping)
		webhook_flush(w, false);
	w->stopping = true;
}

static void webhook_destroy(struct channel *c)
{
	struct webhook *w = (struct webhook *)c;
	struct webhook_seen *s, *next;

	webhook_flush(w, true);
	while (w->outs)
		webhook_out_unlink(w->outs);
	for (s = w->seen_head; s; s = next) {
		next = s->next;
		webhook_seen_free(s);
	}
	strmap_free(w->seen);
	free(w);
}

const struct channel_ops channel_webhook_ops = {
    .name = "webhook",
    .create = webhook_create,
    .reconfigure = webhook_reconfigure,
    .start = webhook_start,
    .stop = webhook_stop,
    .destroy = webhook_destroy,
    .send = webhook_send,
};
