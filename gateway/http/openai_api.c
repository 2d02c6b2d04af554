/*
 * openai_api.c - see openai_api.h.
 *
 * One struct oai_req per completion request, from the handler until the
 * answer is written: it holds a reference on the module (struct oai), so a
 * request still waiting when the module stops (its waiter fires later, from
 * dispatcher_free) finds the module's memory and answers 503.
 *
 * Outcomes of the run a request waits for (struct host_reply):
 *   rc SB_OK, a reply               200 with its text
 *   status "dropped" (queue_cap)    429 queue_full
 *   status "interrupted"/"replaced" 409 interrupted (a newer message won)
 *   rc SB_ERR_TIMEOUT               504 timeout (the run goes on)
 *   rc SB_ERR_NOTFOUND              404 model_not_found (agent removed)
 *   rc SB_ERR_CLOSED, or the run     503 shutting_down (the message runs again
 *   aborted while draining          after the restart)
 * A stream has sent its headers once the message was accepted, so these
 * come as an error event in the stream instead ({"error": {...}}, which
 * the OpenAI SDKs raise as APIError).
 *
 * The OpenAI SDKs retry 408/409/429/5xx by default. A retry without an
 * Idempotency-Key would be a second message, so answers about a message
 * that was accepted carry "x-should-retry: false" unless the request had
 * an Idempotency-Key (a retry with the key is a duplicate: it waits for the
 * same run, or gets the answer remembered in memory, or, when the process
 * that answered is gone, the reply committed in the store: see
 * dispatcher_await_reply).
 */
#include "gateway/http/openai_api.h"

#include <inttypes.h>
#include <jansson.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "gateway/config/config.h"
#include "gateway/core/clock.h"
#include "gateway/core/buf.h"
#include "gateway/core/envelope.h"
#include "gateway/core/err.h"
#include "gateway/core/fmt.h"
#include "gateway/core/secret.h"
#include "gateway/core/log.h"
#include "gateway/obs/events.h"
#include "gateway/http/server.h"
#include "gateway/http/server_stream.h"

#define OAI_MODEL_OWNER "switchboard"
#define OAI_MODEL_PREFIX "switchboard/"
#define OAI_KEY_MAX 200     /* Idempotency-Key, session names, user */
#define OAI_HEADER_MAX 1024 /* header values read (longer: refused) */
#define OAI_TOKEN_MAX 4096  /* gateway.auth_token's own maximum */
#define OAI_PATH_MAX 128    /* path_prefix is at most 64 */
#define OAI_TEXT_MAX ((size_t)4 << 20)
#define OAI_STREAMED_MAX ((size_t)4 << 20)
#define OAI_RECENT_MAX 128                     /* answers remembered for retries */
#define OAI_RECENT_TEXT_MAX ((size_t)32 << 10) /* longer ones are not remembered */
#define OAI_JSON_FLAGS JSON_COMPACT

/* An answered request, for a retry with the same Idempotency-Key. */
struct oai_recent {
	int64_t inbox_id; /* 0: empty slot */
	char *text;
	char *status;
};

struct oai {
	int refs;      /* the module's own, plus one per request in flight */
	bool draining; /* SIGTERM: runs aborted from now on are the shutdown's */
	bool stopped;
	const struct host *host;
	struct events *events;
	char *file_token; /* the home's gateway.token; NULL when absent */
	char chat_path[OAI_PATH_MAX];
	char models_path[OAI_PATH_MAX];
	char models_prefix[OAI_PATH_MAX]; /* models_path + "/" */
	int64_t started_s;                /* "created" of the models */
	struct oai_recent recent[OAI_RECENT_MAX];
	size_t recent_next;
};

struct oai_req {
	struct oai *o;
	struct server_request *sr; /* NULL once answered */
	char *agent_id;
	char *model; /* "switchboard/<agent>" */
	char *session_key;
	char *event_id;
	int64_t inbox_id;
	int64_t created; /* unix s */
	int64_t timeout_ms;
	int64_t keepalive_ms;
	bool stream;
	bool include_usage;
	bool retry_safe; /* the client gave an Idempotency-Key */
	bool duplicate;  /* a retry of a message already in the inbox */
	bool streaming;  /* server_stream_start was called */
	bool timer_on;
	struct events_sub *sub;
	struct buf streamed; /* the run's text deltas so far */
	size_t flushed;      /* bytes of streamed already sent */
	uv_timer_t keepalive;
	char id[48]; /* "chatcmpl-<inbox id>" */
};

/* What a request's answer is. */
struct oai_outcome {
	int status; /* 200: an answer */
	const char *type, *code, *message;
};

/* ---- the module's memory ---- */

static void oai_unref(struct oai *o)
{
	if (--o->refs > 0)
		return;
	for (size_t i = 0; i < OAI_RECENT_MAX; i++) {
		free(o->recent[i].text);
		free(o->recent[i].status);
	}
	if (o->file_token)
		sodium_memzero(o->file_token, strlen(o->file_token));
	free(o->file_token);
	free(o);
}

static void oai_remember(struct oai *o, int64_t inbox_id, const char *text, const char *status)
{
	struct oai_recent *r = &o->recent[o->recent_next];

	if (strlen(text) > OAI_RECENT_TEXT_MAX)
		return;
	free(r->text);
	free(r->status);
	r->text = strdup(text);
	r->status = strdup(status);
	r->inbox_id = r->text && r->status ? inbox_id : 0;
	o->recent_next = (o->recent_next + 1) % OAI_RECENT_MAX;
}

static const struct oai_recent *oai_recall(const struct oai *o, int64_t inbox_id)
{
	for (size_t i = 0; i < OAI_RECENT_MAX; i++)
		if (o->recent[i].inbox_id == inbox_id)
			return &o->recent[i];
	return NULL;
}

/* ---- answers ---- */

static void oai_send_json(struct server_request *sr, int status, json_t *body,
                          const char *const *headers)
{
	static const char nomem[] = "{\"error\":{\"message\":\"out of memory\",\"type\":"
	                            "\"server_error\",\"code\":\"internal_error\"}}";
	char *text = body ? json_dumps(body, OAI_JSON_FLAGS) : NULL;

	if (text)
		server_respond(sr, status, "application/json", text, strlen(text), headers);
	else
		server_respond(sr, 500, "application/json", nomem, sizeof nomem - 1, NULL);
	free(text);
}

/* {"error": {"message", "type", "code"}} (new reference; NULL on ENOMEM). */
static json_t *oai_error_json(const char *type, const char *code, const char *message)
{
	return json_pack("{s{ssssss}}", "error", "message", message, "type", type, "code", code);
}

static void oai_error(struct server_request *sr, int status, const char *type, const char *code,
                      const char *message, const char *const *headers)
{
	json_t *e = oai_error_json(type, code, message);

	oai_send_json(sr, status, e, headers);
	json_decref(e);
}

static void oai_not_found(struct server_request *sr, const char *code, const char *message)
{
	oai_error(sr, 404, "invalid_request_error", code, message, NULL);
}

static void oai_bad_request(struct server_request *sr, const char *message)
{
	oai_error(sr, 400, "invalid_request_error", "invalid_request", message, NULL);
}

/* ---- checks ---- */

/* Whether the request carries the gateway token (compared as BLAKE2b
 * digests, in constant time, so that neither contents nor length leak). */
static bool oai_authorized(const struct oai *o, const struct config *cfg, struct server_request *sr)
{
	const char *want = cfg->gateway.auth_token && *cfg->gateway.auth_token
	                       ? cfg->gateway.auth_token
	                       : o->file_token;
	char got[OAI_TOKEN_MAX + 32];
	bool ok = server_req_header(sr, "authorization", got, sizeof got) > 0 &&
	          secret_equal(secret_bearer(got), want);

	sodium_memzero(got, sizeof got);
	return ok;
}

/* Checks enabled and the token, answering when they fail. */
static bool oai_admit(const struct oai *o, const struct config *cfg, struct server_request *sr)
{
	static const char *const challenge[] = {"WWW-Authenticate: Bearer", NULL};

	if (!cfg->openai_api.enabled) {
		oai_not_found(sr, "endpoint_disabled",
		              "the OpenAI-compatible endpoint is disabled "
		              "(set openai_api.enabled: true)");
		return false;
	}
	if (!oai_authorized(o, cfg, sr)) {
		oai_error(sr, 401, "invalid_request_error", "invalid_api_key",
		          "missing or wrong bearer token (the gateway token)", challenge);
		return false;
	}
	return true;
}

/* Printable ASCII without blanks, 1 to OAI_KEY_MAX characters. */
static bool oai_key_ok(const char *s)
{
	size_t n = 0;

	for (; s[n]; n++)
		if ((unsigned char)s[n] <= 0x20 || (unsigned char)s[n] >= 0x7f)
			return false;
	return n > 0 && n <= OAI_KEY_MAX;
}

/* The agent a "model" names: "switchboard/<id>", "<id>", or "switchboard"
 * (the default agent). Borrowed from cfg. */
static const struct agent_config *oai_agent(const struct config *cfg, const char *model)
{
	if (strcmp(model, OAI_MODEL_OWNER) == 0)
		return config_default_agent(cfg);
	if (strncmp(model, OAI_MODEL_PREFIX, strlen(OAI_MODEL_PREFIX)) == 0)
		model += strlen(OAI_MODEL_PREFIX);
	return config_agent(cfg, model);
}

/* The text of the last user message (string content, or the text parts of
 * a list joined by newlines). Returns NULL and sets *why when there is
 * none; otherwise a new string. */
static char *oai_user_text(const json_t *messages, const char **why)
{
	struct buf b;
	const json_t *m = NULL, *content;
	size_t i = json_array_size(messages);

	while (i-- > 0) {
		const json_t *role = json_object_get(json_array_get(messages, i), "role");

		if (json_is_string(role) && strcmp(json_string_value(role), "user") == 0) {
			m = json_array_get(messages, i);
			break;
		}
	}
	*why = "messages has no user message";
	if (!m)
		return NULL;
	buf_init(&b, OAI_TEXT_MAX);
	content = json_object_get(m, "content");
	if (json_is_string(content)) {
		buf_append(&b, json_string_value(content), json_string_length(content));
	} else if (json_is_array(content)) {
		const json_t *part;
		size_t k;

		json_array_foreach(content, k, part)
		{
			const json_t *t = json_object_get(part, "text");
			const char *type = json_string_value(json_object_get(part, "type"));

			if (!type || strcmp(type, "text") != 0 || !json_is_string(t))
				continue;
			if ((b.len && buf_puts(&b, "\n")) ||
			    buf_append(&b, json_string_value(t), json_string_length(t))) {
				*why = "the user message is too long";
				buf_free(&b);
				return NULL;
			}
		}
	}
	if (!b.len || memchr(b.data, '\0', b.len)) {
		*why = "the last user message has no text";
		buf_free(&b);
		return NULL;
	}
	return buf_steal(&b);
}

/* ---- requests ---- */

static void oai_req_free(struct oai_req *q)
{
	struct oai *o = q->o;

	free(q->agent_id);
	free(q->model);
	free(q->session_key);
	free(q->event_id);
	buf_free(&q->streamed);
	free(q);
	oai_unref(o);
}

static void oai_req_closed(uv_handle_t *h)
{
	oai_req_free(h->data);
}

static void oai_req_finish(struct oai_req *q)
{
	events_unsubscribe(q->sub);
	q->sub = NULL;
	if (!q->timer_on) {
		oai_req_free(q);
		return;
	}
	uv_timer_stop(&q->keepalive);
	uv_close((uv_handle_t *)&q->keepalive, oai_req_closed);
}

/* How a run's outcome is answered. */
static void oai_outcome_of(const struct host_reply *r, struct oai_outcome *out)
{
	out->status = 200;
	out->type = out->code = out->message = NULL;
	if (r->rc == SB_ERR_TIMEOUT) {
		*out = (struct oai_outcome){504, "timeout", "timeout",
		                            "the agent did not answer within "
		                            "openai_api.sync_timeout; the run goes on and its "
		                            "reply will be in the session"};
	} else if (r->rc == SB_ERR_CLOSED) {
		*out = (struct oai_outcome){503, "server_error", "shutting_down",
		                            "the gateway is stopping; the message runs again "
		                            "after it restarts"};
	} else if (r->rc == SB_ERR_NOTFOUND) {
		*out = (struct oai_outcome){404, "invalid_request_error", "model_not_found",
		                            "the agent is not configured (any more)"};
	} else if (r->rc != SB_OK) {
		*out =
		    (struct oai_outcome){500, "server_error", "internal_error", sb_strerror(r->rc)};
	} else if (strcmp(r->status, "dropped") == 0) {
		*out = (struct oai_outcome){429, "rate_limit_error", "queue_full",
		                            "the session's queue was full (queue_cap); this "
		                            "message was dropped"};
	} else if (strcmp(r->status, "interrupted") == 0) {
		*out = (struct oai_outcome){409, "invalid_request_error", "interrupted",
		                            "a newer message in the same session interrupted "
		                            "this run (queue_mode: interrupt)"};
	} else if (strcmp(r->status, "stopped") == 0) {
		*out = (struct oai_outcome){409, "invalid_request_error", "stopped",
		                            "the run was stopped with the chat command /stop"};
	} else if (strcmp(r->status, "replaced") == 0) {
		*out = (struct oai_outcome){409, "invalid_request_error", "interrupted",
		                            "a newer message in the same session replaced this "
		                            "one before it ran (queue_mode: interrupt)"};
	}
}

/* "data: <json>\n\n" on the stream. */
static void oai_sse(struct oai_req *q, json_t *event)
{
	char *text = event ? json_dumps(event, OAI_JSON_FLAGS) : NULL;
	struct buf b;

	buf_init(&b, OAI_STREAMED_MAX + 4096);
	if (text && !buf_printf(&b, "data: %s\n\n", text))
		server_stream_write(q->sr, b.data, b.len);
	buf_free(&b);
	free(text);
}

/* One chat.completion.chunk; delta is taken. */
static void oai_chunk(struct oai_req *q, json_t *delta, const char *finish_reason)
{
	json_t *c = json_pack(
	    "{sssssIsss[{sIsoso}]}", "id", q->id, "object", "chat.completion.chunk", "created",
	    (json_int_t)q->created, "model", q->model, "choices", "index", (json_int_t)0, "delta",
	    delta, "finish_reason", finish_reason ? json_string(finish_reason) : json_null());

	oai_sse(q, c);
	json_decref(c);
}

/* Length of the longest prefix of s[0..n) that does not end inside a
 * UTF-8 sequence (deltas are cut on characters, but be safe). */
static size_t oai_utf8_complete(const char *s, size_t n)
{
	size_t i = n, back = 0;

	while (i > 0 && back < 4 && ((unsigned char)s[i - 1] & 0xC0) == 0x80) {
		i--;
		back++;
	}
	if (i == 0)
		return n;
	{
		unsigned char lead = (unsigned char)s[i - 1];
		size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;

		return back + 1 >= need ? n : i - 1;
	}
}

static void oai_stream_flush(struct oai_req *q)
{
	size_t end = oai_utf8_complete(q->streamed.data ? q->streamed.data : "", q->streamed.len);
	json_t *s;

	if (end <= q->flushed)
		return;
	s = json_stringn(q->streamed.data + q->flushed, end - q->flushed);
	q->flushed = end;
	if (s)
		oai_chunk(q, json_pack("{so}", "content", s), NULL);
}

static void oai_keepalive(uv_timer_t *t)
{
	struct oai_req *q = t->data;

	if (q->sr && !server_stream_gone(q->sr))
		server_stream_write(q->sr, ": keepalive\n\n", 13);
}

static void oai_stream_open(struct oai_req *q)
{
	static const char *const hdrs[] = {"Cache-Control: no-cache", "X-Accel-Buffering: no",
	                                   NULL};

	q->streaming = true;
	if (server_stream_start(q->sr, 200, "text/event-stream; charset=utf-8", hdrs) != SB_OK)
		return; /* the client is gone (or no memory): server_stream_end frees */
	oai_chunk(q, json_pack("{ssss}", "role", "assistant", "content", ""), NULL);
	oai_stream_flush(q);
	if (uv_timer_init(q->o->host->loop, &q->keepalive) == 0) {
		q->keepalive.data = q;
		q->timer_on = true;
		uv_timer_start(&q->keepalive, oai_keepalive, (uint64_t)q->keepalive_ms,
		               (uint64_t)q->keepalive_ms);
	}
}

/* The rest of a stream once the run answered: what the deltas did not
 * carry, the final chunk, usage when asked, [DONE]. */
static void oai_stream_finish(struct oai_req *q, const struct host_reply *r)
{
	const char *text = r->text ? r->text : "";
	size_t tlen = strlen(text);

	oai_stream_flush(q);
	if (q->flushed == 0 && tlen) {
		oai_chunk(q, json_pack("{ss}", "content", text), NULL);
	} else if (q->flushed < tlen && memcmp(q->streamed.data, text, q->flushed) == 0) {
		/* Text the deltas did not carry (a note the dispatcher added,
		 * such as the watchdog's). */
		json_t *s = json_string(text + q->flushed);

		if (s)
			oai_chunk(q, json_pack("{so}", "content", s), NULL);
	}
	oai_chunk(q, json_object(), "stop");
	if (q->include_usage) {
		json_t *u = json_pack("{sssssIsss[]s{sIsIsI}}", "id", q->id, "object",
		                      "chat.completion.chunk", "created", (json_int_t)q->created,
		                      "model", q->model, "choices", "usage", "prompt_tokens",
		                      (json_int_t)r->input_tokens, "completion_tokens",
		                      (json_int_t)r->output_tokens, "total_tokens",
		                      (json_int_t)(r->input_tokens + r->output_tokens));

		oai_sse(q, u);
		json_decref(u);
	}
	server_stream_write(q->sr, "data: [DONE]\n\n", 14);
}

static json_t *oai_completion_json(const struct oai_req *q, const struct host_reply *r)
{
	return json_pack("{sssssIsss[{sIs{ssss}ss}]s{sIsIsI}s{ssssss}}", "id", q->id, "object",
	                 "chat.completion", "created", (json_int_t)q->created, "model", q->model,
	                 "choices", "index", (json_int_t)0, "message", "role", "assistant",
	                 "content", r->text ? r->text : "", "finish_reason", "stop", "usage",
	                 "prompt_tokens", (json_int_t)r->input_tokens, "completion_tokens",
	                 (json_int_t)r->output_tokens, "total_tokens",
	                 (json_int_t)(r->input_tokens + r->output_tokens), "switchboard",
	                 "session_key", q->session_key, "run_id", q->event_id, "status",
	                 r->status ? r->status : "");
}

/* Writes the answer for the run's outcome (once; q->sr is NULL after). */
static void oai_respond(struct oai_req *q, const struct host_reply *r)
{
	static const char *const no_retry[] = {"x-should-retry: false", NULL};
	struct oai_outcome oc;

	events_unsubscribe(q->sub);
	q->sub = NULL;
	if (q->timer_on)
		uv_timer_stop(&q->keepalive);
	if (!q->sr)
		return;
	oai_outcome_of(r, &oc);
	if (q->stream) {
		if (!q->streaming)
			oai_stream_open(q);
		if (oc.status != 200) {
			json_t *e = oai_error_json(oc.type, oc.code, oc.message);

			oai_sse(q, e);
			json_decref(e);
		} else {
			oai_stream_finish(q, r);
		}
		server_stream_end(q->sr);
	} else if (oc.status != 200) {
		oai_error(q->sr, oc.status, oc.type, oc.code, oc.message,
		          q->retry_safe ? NULL : no_retry);
	} else {
		json_t *c = oai_completion_json(q, r);

		oai_send_json(q->sr, 200, c, NULL);
		json_decref(c);
	}
	q->sr = NULL;
}

/* Answers q (unless that was done already) and finishes it. */
static void oai_answer(struct oai_req *q, const struct host_reply *r)
{
	oai_respond(q, r);
	oai_req_finish(q);
}

static void oai_replied(void *ud, const struct host_reply *r)
{
	struct oai_req *q = ud;

	/* Only a request with an Idempotency-Key can be retried as itself. */
	if (r->rc == SB_OK && q->retry_safe)
		oai_remember(q->o, q->inbox_id, r->text ? r->text : "", r->status ? r->status : "");
	oai_answer(q, r);
}

static void oai_on_event(void *ud, const struct event *e)
{
	struct oai_req *q = ud;

	if (q->duplicate || !e->run_id || strcmp(e->run_id, q->event_id) != 0)
		return;
	if (e->kind == EVENT_RUN_END && q->o->draining && e->status &&
	    strcmp(e->status, "aborted") == 0) {
		/* The gateway stops and aborted the run (its message runs again
		 * after the restart). Say so while the connection is still
		 * served; the waiter, which fires only when the dispatcher is
		 * freed, then just finishes q. */
		struct host_reply r = {
		    .inbox_id = q->inbox_id, .rc = SB_ERR_CLOSED, .text = "", .status = ""};

		oai_respond(q, &r);
		return;
	}
	if (e->kind != EVENT_DELTA || !e->text || !q->stream)
		return;
	if (buf_puts(&q->streamed, e->text) != SB_OK)
		return; /* past the cap: the final chunk is not sent either */
	if (q->streaming && q->sr)
		oai_stream_flush(q);
}

static void oai_ingested(void *ud, int rc, int64_t inbox_id, bool duplicate)
{
	static const char *const retry_later[] = {"Retry-After: 1", NULL};
	struct oai_req *q = ud;
	struct oai *o = q->o;
	const struct oai_recent *seen;

	if (!q->sr) {
		/* Answered already: a retry whose first run the stop aborted. */
		oai_req_finish(q);
		return;
	}
	if (rc) {
		/* Nothing was stored: a retry is safe. */
		events_unsubscribe(q->sub);
		q->sub = NULL;
		if (rc == SB_ERR_AGAIN || rc == SB_ERR_CLOSED)
			oai_error(q->sr, 503, "server_error", "unavailable",
			          "the gateway cannot take messages now; try again", retry_later);
		else
			oai_error(q->sr, 500, "server_error", "internal_error", sb_strerror(rc),
			          NULL);
		q->sr = NULL;
		oai_req_finish(q);
		return;
	}
	q->inbox_id = inbox_id;
	snprintf(q->id, sizeof q->id, "chatcmpl-%" PRId64, inbox_id);
	if (o->stopped) {
		/* Stored while the gateway stopped: it runs after the restart. */
		struct host_reply r = {
		    .inbox_id = inbox_id, .rc = SB_ERR_CLOSED, .text = "", .status = ""};

		oai_answer(q, &r);
		return;
	}
	if (duplicate) {
		/* A retry: its deltas went to the first request. */
		q->duplicate = true;
		buf_reset(&q->streamed);
		q->flushed = 0;
		seen = oai_recall(o, inbox_id);
		if (seen) {
			struct host_reply r = {.inbox_id = inbox_id,
			                       .rc = SB_OK,
			                       .text = seen->text,
			                       .status = seen->status};

			oai_answer(q, &r);
			return;
		}
	}
	if (q->stream)
		oai_stream_open(q);
	rc = o->host->await_reply(o->host->ctx, inbox_id, q->timeout_ms, oai_replied, q);
	if (rc) {
		struct host_reply r = {.inbox_id = inbox_id, .rc = rc, .text = "", .status = ""};

		oai_answer(q, &r);
	}
}

/* The session key of a request (see openai_api.h). NULL and *why on a bad
 * header or user. */
static char *oai_session_key(struct server_request *sr, const char *agent, const json_t *user,
                             const char *event_id, const char **why)
{
	char hdr[OAI_HEADER_MAX];
	struct buf b;
	char prefix[96];
	int n = server_req_header(sr, "x-switchboard-session", hdr, sizeof hdr);

	buf_init(&b, BINDINGS_SESSION_KEY_MAX - 1);
	snprintf(prefix, sizeof prefix, "agent:%s:", agent);
	if (n >= 0) {
		*why = "x-switchboard-session must be 1 to 200 printable characters without "
		       "blanks";
		if (!oai_key_ok(hdr))
			goto fail;
		if (strncmp(hdr, "agent:", 6) == 0) {
			*why = "x-switchboard-session names a session of another agent than the "
			       "model's";
			if (strncmp(hdr, prefix, strlen(prefix)) != 0 || !hdr[strlen(prefix)])
				goto fail;
			buf_puts(&b, hdr);
		} else {
			buf_printf(&b, "%shttp:%s", prefix, hdr);
		}
	} else if (user && !json_is_null(user)) {
		*why = "user must be a string of 1 to 200 printable characters without blanks";
		if (!json_is_string(user) || !oai_key_ok(json_string_value(user)))
			goto fail;
		buf_printf(&b, "%shttp:user:%s", prefix, json_string_value(user));
	} else {
		buf_printf(&b, "%shttp:run:%s", prefix, event_id);
	}
	*why = "out of memory";
	return buf_steal(&b);
fail:
	buf_free(&b);
	return NULL;
}

static void oai_chat(void *ud, struct server_request *sr)
{
	struct oai *o = ud;
	struct config *cfg = o->host->config(o->host->ctx);
	const struct agent_config *ac;
	struct oai_req *q = NULL;
	struct envelope env;
	json_t *body = NULL, *model, *messages, *stream, *so, *user;
	json_error_t jerr;
	const char *why = NULL;
	char *text = NULL, idem[OAI_HEADER_MAX], msg[512];
	size_t blen;
	const char *raw;
	int rc;

	if (!oai_admit(o, cfg, sr))
		goto out;
	raw = server_req_body(sr, &blen);
	body = json_loadb(raw, blen, JSON_REJECT_DUPLICATES, &jerr);
	if (!json_is_object(body)) {
		snprintf(msg, sizeof msg, "the body is not a JSON object (%s)",
		         body ? "another JSON value" : jerr.text);
		oai_bad_request(sr, msg);
		goto out;
	}
	model = json_object_get(body, "model");
	messages = json_object_get(body, "messages");
	stream = json_object_get(body, "stream");
	so = json_object_get(body, "stream_options");
	user = json_object_get(body, "user");
	if (!json_is_string(model) || !json_string_length(model)) {
		oai_bad_request(sr, "model is required: switchboard/<agent id>");
		goto out;
	}
	if (!json_is_array(messages) || !json_array_size(messages)) {
		oai_bad_request(sr, "messages must be a non-empty list");
		goto out;
	}
	if (stream && !json_is_boolean(stream) && !json_is_null(stream)) {
		oai_bad_request(sr, "stream must be true or false");
		goto out;
	}
	ac = oai_agent(cfg, json_string_value(model));
	if (!ac) {
		snprintf(msg, sizeof msg,
		         "no agent \"%.200s\": name one as switchboard/<agent id> (GET models "
		         "lists them)",
		         json_string_value(model));
		oai_not_found(sr, "model_not_found", msg);
		goto out;
	}
	text = oai_user_text(messages, &why);
	if (!text) {
		oai_bad_request(sr, why);
		goto out;
	}

	q = calloc(1, sizeof *q);
	if (!q)
		goto nomem;
	q->o = o;
	o->refs++;
	q->sr = sr;
	buf_init(&q->streamed, OAI_STREAMED_MAX);
	q->created = clock_wall_ms() / 1000;
	q->timeout_ms = cfg->openai_api.sync_timeout_ms;
	q->keepalive_ms = cfg->openai_api.stream_keepalive_ms;
	q->stream = json_is_true(stream);
	q->include_usage = json_is_true(json_object_get(so, "include_usage"));
	if (server_req_header(sr, "idempotency-key", idem, sizeof idem) >= 0) {
		if (!oai_key_ok(idem)) {
			oai_bad_request(sr, "Idempotency-Key must be 1 to 200 printable "
			                    "characters without blanks");
			goto fail;
		}
		q->retry_safe = true;
		q->event_id = strdup(idem);
	} else {
		unsigned char rnd[16];
		char hex[2 * sizeof rnd + 1];

		randombytes_buf(rnd, sizeof rnd);
		sodium_bin2hex(hex, sizeof hex, rnd, sizeof rnd);
		q->event_id = malloc(sizeof hex + 4);
		if (q->event_id)
			snprintf(q->event_id, sizeof hex + 4, "oai-%s", hex);
	}
	q->agent_id = strdup(ac->id);
	q->model = malloc(strlen(ac->id) + sizeof OAI_MODEL_PREFIX);
	if (!q->event_id || !q->agent_id || !q->model)
		goto nomem;
	snprintf(q->model, strlen(ac->id) + sizeof OAI_MODEL_PREFIX, "%s%s", OAI_MODEL_PREFIX,
	         ac->id);
	q->session_key = oai_session_key(sr, ac->id, user, q->event_id, &why);
	if (!q->session_key) {
		oai_bad_request(sr, why);
		goto fail;
	}

	memset(&env, 0, sizeof env);
	env.channel = "http";
	env.account = "default";
	env.event_id = q->event_id;
	env.peer_kind = ENVELOPE_PEER_DIRECT;
	env.peer_id = q->session_key;
	env.sender_id = json_is_string(user) ? json_string_value(user) : "api";
	env.text = text;
	env.received_at = clock_wall_ms();
	env.route_agent = q->agent_id;
	env.own_reply = true; /* one completion per request */
	env.route_session = q->session_key;
	/* Subscribed before the message exists, so that no delta is missed
	 * (and, for every request, to see its run aborted by a stop). */
	if (events_subscribe(o->events, q->session_key, oai_on_event, q, &q->sub) != SB_OK)
		goto nomem;
	rc = o->host->ingest(o->host->ctx, &env, oai_ingested, q);
	if (rc) {
		static const char *const retry_later[] = {"Retry-After: 1", NULL};

		if (rc == SB_ERR_AGAIN)
			oai_error(sr, 503, "server_error", "unavailable",
			          "the gateway cannot take messages now; try again", retry_later);
		else
			oai_error(sr, 500, "server_error", "internal_error", sb_strerror(rc), NULL);
		goto fail;
	}
	q = NULL; /* oai_ingested answers it */
	goto out;
nomem:
	oai_error(sr, 500, "server_error", "internal_error", "out of memory", NULL);
fail:
	if (q)
		oai_req_finish(q);
out:
	free(text);
	json_decref(body);
	config_unref(cfg);
}

/* ---- models ---- */

static json_t *oai_model_json(const struct oai *o, const char *agent_id)
{
	struct buf id;
	json_t *m;

	buf_init(&id, 256);
	if (buf_printf(&id, "%s%s", OAI_MODEL_PREFIX, agent_id))
		return NULL;
	m = json_pack("{sssssIss}", "id", id.data, "object", "model", "created",
	              (json_int_t)o->started_s, "owned_by", OAI_MODEL_OWNER);
	buf_free(&id);
	return m;
}

static void oai_models(void *ud, struct server_request *sr)
{
	struct oai *o = ud;
	struct config *cfg = o->host->config(o->host->ctx);
	const char *path = server_req_path(sr);
	json_t *out = NULL;

	if (!oai_admit(o, cfg, sr))
		goto out;
	if (strcmp(path, o->models_path) == 0) {
		json_t *data = json_array();

		for (size_t i = 0; data && i < cfg->n_agents; i++)
			json_array_append_new(data, oai_model_json(o, cfg->agents[i].id));
		out = json_pack("{ssso}", "object", "list", "data", data);
	} else {
		/* "/models/switchboard/main", or with the slash escaped. */
		char id[OAI_PATH_MAX * 2];
		const char *name = path + strlen(o->models_prefix);
		const struct agent_config *ac;
		size_t n = 0;

		for (; *name && n + 1 < sizeof id; name++) {
			if (name[0] == '%' && name[1] == '2' &&
			    (name[2] == 'F' || name[2] == 'f')) {
				id[n++] = '/';
				name += 2;
			} else {
				id[n++] = *name;
			}
		}
		id[n] = '\0';
		ac = *name ? NULL : oai_agent(cfg, id);
		if (!ac) {
			oai_not_found(sr, "model_not_found", "no such model (agent)");
			goto out;
		}
		out = oai_model_json(o, ac->id);
	}
	oai_send_json(sr, 200, out, NULL);
out:
	json_decref(out);
	config_unref(cfg);
}

/* ---- the module ---- */

static int oai_start(const struct gateway_ctx *ctx, void **state)
{
	struct oai *o = calloc(1, sizeof *o);
	struct config *cfg = ctx->host->config(ctx->host->ctx);
	const char *prefix = cfg->openai_api.path_prefix;
	char path[4096];
	int rc = SB_ERR_NOMEM;

	if (!o)
		goto out;
	o->refs = 1;
	o->host = ctx->host;
	o->events = ctx->events;
	o->started_s = clock_wall_ms() / 1000;
	rc = SB_ERR_CONFIG;
	if (snprintf(o->chat_path, sizeof o->chat_path, "%s/chat/completions", prefix) >=
	        (int)sizeof o->chat_path ||
	    snprintf(o->models_path, sizeof o->models_path, "%s/models", prefix) >=
	        (int)sizeof o->models_path ||
	    snprintf(o->models_prefix, sizeof o->models_prefix, "%s/models/", prefix) >=
	        (int)sizeof o->models_prefix)
		goto out;
	/* The home's token; gateway.auth_token, when set, wins per request. */
	o->file_token =
	    FMT(path, "%s/gateway.token", ctx->home) == SB_OK ? secret_read_file(path, OAI_TOKEN_MAX)
	                                                      : NULL;
	if (cfg->openai_api.enabled && !o->file_token &&
	    !(cfg->gateway.auth_token && *cfg->gateway.auth_token))
		log_warn("openai_api", "no token: every request will be refused",
		         LOG_S("hint", "run `switchboard init` (writes gateway.token) or set "
		                       "gateway.auth_token"));
	rc = server_route(ctx->server, "openai.chat", o->chat_path, 0, SERVER_POST, oai_chat, o);
	if (!rc)
		rc = server_route(ctx->server, "openai.models", o->models_path, 0, SERVER_GET,
		                  oai_models, o);
	if (!rc)
		rc = server_route(ctx->server, "openai.models", o->models_prefix, SERVER_PREFIX,
		                  SERVER_GET, oai_models, o);
	if (rc)
		goto out;
	if (cfg->openai_api.enabled)
		log_info("openai_api", "serving", LOG_S("chat", o->chat_path),
		         LOG_S("models", o->models_path));
	*state = o;
	o = NULL;
out:
	if (o)
		oai_unref(o);
	config_unref(cfg);
	return rc;
}

static void oai_drain(void *state)
{
	struct oai *o = state;

	o->draining = true;
}

static void oai_stop(void *state)
{
	struct oai *o = state;

	/* Requests still waiting answer 503 when their callbacks come. */
	o->stopped = true;
	oai_unref(o);
}

const struct gateway_module_ops openai_api_module = {
    .name = "openai_api",
    .start = oai_start,
    .drain = oai_drain,
    .stop = oai_stop,
};
