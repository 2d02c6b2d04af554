/*
 * provider_http.c - the machinery the HTTP providers share (see
 * provider_http.h).
 *
 * Lifetime: a provider_call is freed when its done has run and none of our
 * frames is on the stack (c->depth). User callbacks (text_delta,
 * tool_use_start) may cancel the call from inside on_data; httpc then runs
 * our done handler right there, so every path that calls user code checks
 * c->finished afterwards and unwinds without touching anything but c.
 */
#include "agents/providers/provider_http.h"

#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/core/err.h"
#include "gateway/core/jsonw.h"
#include "gateway/core/num.h"

/* How a streamed body turned out, decided by its first non-blank byte. */
enum ph_body { PH_BODY_UNKNOWN = 0, PH_BODY_SSE, PH_BODY_JSON };

/* The bound of the number of content blocks of one answer. */
#define PH_MAX_BLOCKS 1024
/* How much of a non-JSON error body goes into the message. */
#define PH_SNIPPET 160
/* The largest streamed tool input checked for completeness before the
 * answer ends (inputs of read-only tools are small; a long write's content
 * is not parsed again and again). */
#define PH_EARLY_INPUT_MAX ((size_t)64 * 1024)

/* ---- provider --------------------------------------------------------- */

int provider_http_create(struct provider **out, const struct provider_config *cfg,
                         const struct host *host, const struct provider_ops *ops)
{
	struct provider_http *ph;

	if (!out)
		return SB_ERR_INVAL;
	*out = NULL;
	if (!cfg || !host || !ops)
		return SB_ERR_INVAL;
	ph = calloc(1, sizeof(*ph));
	if (!ph)
		return SB_ERR_NOMEM;
	ph->base.ops = ops;
	ph->base.cfg = cfg;
	ph->host = *host;
	*out = &ph->base;
	return SB_OK;
}

void provider_http_destroy(struct provider *p)
{
	free(p);
}

bool provider_http_streams(const struct provider *p, const struct model_request *req)
{
	return req->stream && p->cfg->stream;
}

int64_t provider_http_max_tokens(const struct provider *p, const struct model_request *req)
{
	if (req->max_tokens > 0)
		return req->max_tokens;
	if (p->cfg->max_tokens > 0)
		return p->cfg->max_tokens;
	return PROVIDER_HTTP_DEFAULT_MAX_TOKENS;
}

/* ---- small helpers ---------------------------------------------------- */

const char *provider_json_str(const json_t *o, const char *key)
{
	return json_string_value(json_object_get(o, key));
}

int64_t provider_json_int(const json_t *o, const char *key)
{
	json_int_t v = json_integer_value(json_object_get(o, key));

	return v > 0 ? (int64_t)v : 0;
}

static bool ph_has(const char *s, const char *word)
{
	return s && strcasestr(s, word) != NULL;
}

static bool ph_is(const char *s, const char *word)
{
	return s && strcmp(s, word) == 0;
}

bool provider_prompt_too_long(const char *type, const char *code, const char *message)
{
	return ph_is(code, "context_length_exceeded") || ph_is(type, "context_length_exceeded") ||
	       ph_is(type, "exceed_context_size_error") || ph_is(type, "request_too_large") ||
	       ph_has(message, "prompt is too long") || ph_has(message, "maximum context length") ||
	       ph_has(message, "context length") || ph_has(message, "context_length") ||
	       ph_has(message, "context window") || ph_has(message, "available context size");
}

enum model_error_kind provider_error_kind(const char *type, const char *code, const char *message)
{
	const char *w[2] = {type, code};
	size_t i;

	if (provider_prompt_too_long(type, code, message))
		return MODEL_ERR_PROMPT_TOO_LONG;
	for (i = 0; i < 2; i++) {
		if (ph_is(w[i], "rate_limit_error") || ph_is(w[i], "rate_limit_exceeded") ||
		    ph_is(w[i], "insufficient_quota"))
			return MODEL_ERR_RATE_LIMIT;
		if (ph_is(w[i], "authentication_error") || ph_is(w[i], "permission_error") ||
		    ph_is(w[i], "invalid_api_key"))
			return MODEL_ERR_AUTH;
		if (ph_is(w[i], "timeout_error"))
			return MODEL_ERR_TIMEOUT;
		if (ph_is(w[i], "invalid_request_error") || ph_is(w[i], "not_found_error") ||
		    ph_is(w[i], "invalid_request"))
			return MODEL_ERR_BAD_REQUEST;
	}
	/* overloaded_error, api_error, server_error and anything unknown: the
	 * server failed while answering. */
	return MODEL_ERR_OVERLOADED;
}

static size_t ph_utf8_len(unsigned char lead)
{
	if (lead < 0x80)
		return 1;
	if ((lead & 0xE0) == 0xC0)
		return 2;
	if ((lead & 0xF0) == 0xE0)
		return 3;
	if ((lead & 0xF8) == 0xF0)
		return 4;
	return 1; /* a stray continuation or an invalid byte: passed on as is */
}

/* The longest prefix of s that does not end inside a character. */
static size_t ph_utf8_whole(const char *s, size_t n)
{
	size_t back;
	unsigned char ch;

	for (back = 1; back <= 3 && back <= n; back++) {
		ch = (unsigned char)s[n - back];
		if ((ch & 0xC0) != 0x80)
			return ph_utf8_len(ch) > back ? n - back : n;
	}
	return n;
}

/* Replaces every occurrence of secret in s (size bytes) by a marker. */
static void ph_redact(char *s, size_t size, const char *secret)
{
	static const char marker[] = "[REDACTED]";
	char out[sizeof(((struct model_error *)0)->message) * 2];
	size_t n, o = 0;
	const char *p = s, *hit;

	if (!secret || (n = strlen(secret)) < 4 || !strstr(s, secret))
		return;
	while ((hit = strstr(p, secret)) != NULL && o < sizeof(out) - 1) {
		o +=
		    (size_t)snprintf(out + o, sizeof(out) - o, "%.*s%s", (int)(hit - p), p, marker);
		p = hit + n;
	}
	if (o < sizeof(out) - 1)
		snprintf(out + o, sizeof(out) - o, "%s", p);
	snprintf(s, size, "%s", out);
}

static int ph_rc_of(enum model_error_kind kind)
{
	switch (kind) {
	case MODEL_ERR_ABORTED:
		return SB_ERR_ABORTED;
	case MODEL_ERR_TIMEOUT:
		return SB_ERR_TIMEOUT;
	case MODEL_ERR_BAD_RESPONSE:
		return SB_ERR_PROTO;
	default:
		return SB_ERR_HTTP;
	}
}

int provider_call_fail(struct provider_call *c, enum model_error_kind kind, int http_status,
                       const char *fmt, ...)
{
	char text[sizeof(c->err.message) * 2];
	va_list ap;
	size_t len;
	int n;

	if (c->failed)
		return c->fail_rc;
	/* Which provider of the configuration, and where: "OpenAI" alone does
	 * not tell the operator which of several it was. */
	n = snprintf(text, sizeof(text), "provider \"%s\" (%s API at %s): ",
	             c->p->base.cfg->id ? c->p->base.cfg->id : "?", c->api->label,
	             c->p->base.cfg->base_url ? c->p->base.cfg->base_url : "its default URL");
	if (n < 0 || (size_t)n >= sizeof(text))
		n = 0;
	va_start(ap, fmt);
	vsnprintf(text + n, sizeof(text) - (size_t)n, fmt, ap);
	va_end(ap);
	ph_redact(text, sizeof(text), c->p->base.cfg->api_key);
	/* Cut on a character boundary: the message may end up in JSON. */
	len = strlen(text);
	if (len >= sizeof(c->err.message))
		len = ph_utf8_whole(text, sizeof(c->err.message) - 1);
	memcpy(c->err.message, text, len);
	c->err.message[len] = '\0';
	c->err.kind = kind;
	c->err.http_status = http_status;
	c->err.retry_after_ms = -1;
	c->failed = true;
	c->fail_rc = ph_rc_of(kind);
	return c->fail_rc;
}

static int ph_nomem(struct provider_call *c)
{
	if (!c->failed) {
		provider_call_fail(c, MODEL_ERR_BAD_RESPONSE, 0, "out of memory");
		c->fail_rc = SB_ERR_NOMEM;
	}
	return c->fail_rc;
}

/* ---- blocks ----------------------------------------------------------- */

static void ph_block_free(struct provider_block *b)
{
	if (!b)
		return;
	free(b->id);
	free(b->name);
	free(b->why);
	buf_free(&b->text);
	json_decref(b->input);
	free(b);
}

struct provider_block *provider_block_find(struct provider_call *c, int key)
{
	size_t i;

	for (i = 0; i < c->n_blocks; i++)
		if (c->blocks[i]->key == key)
			return c->blocks[i];
	return NULL;
}

struct provider_block *provider_block_at(struct provider_call *c, int key, bool tool)
{
	struct provider_block *b = provider_block_find(c, key);
	struct provider_block **nb;
	size_t ncap;

	if (b) {
		if (b->tool == tool)
			return b;
		provider_call_fail(c, MODEL_ERR_BAD_RESPONSE, 0,
		                   "content block %d changes from %s to %s", key,
		                   b->tool ? "tool_use" : "text", tool ? "tool_use" : "text");
		return NULL;
	}
	if (c->n_blocks >= PH_MAX_BLOCKS) {
		provider_call_fail(c, MODEL_ERR_BAD_RESPONSE, 0, "more than %d content blocks",
		                   PH_MAX_BLOCKS);
		return NULL;
	}
	if (c->n_blocks == c->cap_blocks) {
		ncap = c->cap_blocks ? c->cap_blocks * 2 : 4;
		nb = realloc(c->blocks, ncap * sizeof(*nb));
		if (!nb)
			goto nomem;
		c->blocks = nb;
		c->cap_blocks = ncap;
	}
	b = calloc(1, sizeof(*b));
	if (!b)
		goto nomem;
	b->key = key;
	b->tool = tool;
	buf_init(&b->text, PROVIDER_HTTP_MAX_RESPONSE);
	c->blocks[c->n_blocks++] = b;
	return b;
nomem:
	ph_nomem(c);
	return NULL;
}

int provider_text(struct provider_call *c, struct provider_block *b, const char *text, size_t len)
{
	int rc;

	if (len == 0)
		return SB_OK;
	rc = buf_append(&b->text, text, len);
	if (rc == SB_ERR_TOOBIG)
		return provider_call_fail(c, MODEL_ERR_BAD_RESPONSE, 0,
		                          "the answer's text is larger than %zu MiB",
		                          PROVIDER_HTTP_MAX_RESPONSE >> 20);
	if (rc)
		return ph_nomem(c);
	/* Whole characters by construction: the SSE parser hands on only
	 * complete events, however the bytes were split on the wire, and
	 * jansson decodes only valid UTF-8, so every string from the JSON is
	 * whole characters. */
	if (c->stream && c->ev.text_delta)
		c->ev.text_delta(c->ev.ud, text, len);
	return c->finished ? SB_ERR_ABORTED : SB_OK;
}

/* A server that sends no id for a tool call gets one of ours, so that the
 * results can still be paired with it. It is random (64 bits): a block's
 * index repeats in every answer, and saved results are named after ids, so
 * an id must not come back in a later round of the session. */
static int ph_tool_id(struct provider_call *c, struct provider_block *b)
{
	unsigned char r[8];
	char gen[40];

	if (b->id)
		return SB_OK;
	randombytes_buf(r, sizeof r);
	snprintf(gen, sizeof(gen), "call_sb_%02x%02x%02x%02x%02x%02x%02x%02x", r[0], r[1], r[2],
	         r[3], r[4], r[5], r[6], r[7]);
	b->id = strdup(gen);
	return b->id ? SB_OK : ph_nomem(c);
}

int provider_tool_begin(struct provider_call *c, struct provider_block *b, const char *id,
                        const char *name)
{
	if (!b->id && id && *id && !(b->id = strdup(id)))
		return ph_nomem(c);
	if (!b->name && name && *name && !(b->name = strdup(name)))
		return ph_nomem(c);
	if (b->announced || !b->name)
		return SB_OK;
	/* The id is fixed once announced. */
	if (ph_tool_id(c, b))
		return c->fail_rc;
	b->announced = true;
	if (c->stream && c->ev.tool_use_start)
		c->ev.tool_use_start(c->ev.ud, b->id, b->name);
	return c->finished ? SB_ERR_ABORTED : SB_OK;
}

int provider_tool_input(struct provider_call *c, struct provider_block *b, const char *json,
                        size_t len)
{
	int rc;

	if (len && b->complete)
		return provider_call_fail(c, MODEL_ERR_BAD_RESPONSE, 0,
		                          "the input of tool call %s went on after it was complete",
		                          b->id ? b->id : "?");
	rc = buf_append(&b->text, json, len);

	if (rc == SB_ERR_TOOBIG)
		return provider_call_fail(c, MODEL_ERR_BAD_RESPONSE, 0,
		                          "a tool call's input is larger than %zu MiB",
		                          PROVIDER_HTTP_MAX_RESPONSE >> 20);
	return rc ? ph_nomem(c) : SB_OK;
}

/* Parses a tool block's input text: a new reference to the object, NULL when
 * it is not one (why, when not NULL, gets the parser's words). No text at
 * all is {}. */
static json_t *ph_parse_input(const struct provider_block *b, char *why, size_t why_size)
{
	const char *text = b->text.data ? b->text.data : "";
	json_error_t jerr;
	json_t *input;

	if (b->input)
		return json_is_object(b->input) ? json_incref(b->input) : NULL;
	if (strspn(text, " \t\r\n") == b->text.len)
		return json_object();
	input = json_loadb(text, b->text.len, JSON_DECODE_ANY, &jerr);
	if (input && !json_is_object(input)) {
		json_decref(input);
		if (why)
			snprintf(why, why_size, "it is JSON but not an object");
		return NULL;
	}
	if (!input && why)
		snprintf(why, why_size, "%s", jerr.text);
	return input;
}

int provider_tool_complete(struct provider_call *c, struct provider_block *b, bool check)
{
	json_t *input, *block;
	size_t end;

	if (!b->tool || b->complete || !b->name || !c->stream || !c->ev.tool_use_done)
		return SB_OK;
	if (check) {
		/* Only an input that can be a whole object is parsed. */
		if (b->input || b->text.len == 0 || b->text.len > PH_EARLY_INPUT_MAX)
			return SB_OK;
		end = b->text.len;
		while (end > 0 && strchr(" \t\r\n", b->text.data[end - 1]))
			end--;
		if (end == 0 || b->text.data[end - 1] != '}')
			return SB_OK;
	}
	if (ph_tool_id(c, b))
		return c->fail_rc;
	input = ph_parse_input(b, NULL, 0);
	if (!input)
		return SB_OK; /* judged at the end of the answer */
	block = json_pack("{sssssssO}", "type", "tool_use", "id", b->id, "name", b->name, "input",
	                  input);
	json_decref(input);
	if (!block)
		return ph_nomem(c);
	b->complete = true;
	c->ev.tool_use_done(c->ev.ud, block);
	json_decref(block);
	return c->finished ? SB_ERR_ABORTED : SB_OK;
}

int provider_set_stop(struct provider_call *c, const char *raw, enum model_stop stop)
{
	char *s = strdup(raw ? raw : "");

	if (!s)
		return ph_nomem(c);
	free(c->stop_raw);
	c->stop_raw = s;
	c->stop = stop;
	c->have_stop = true;
	return SB_OK;
}

int provider_set_model(struct provider_call *c, const char *model)
{
	char *s;

	if (!model || !*model || (c->model && strcmp(c->model, model) == 0))
		return SB_OK;
	s = strdup(model);
	if (!s)
		return ph_nomem(c);
	free(c->model);
	c->model = s;
	return SB_OK;
}

/* ---- the answer ------------------------------------------------------- */

static json_t *ph_block_json(struct provider_call *c, struct provider_block *b)
{
	json_t *o = json_object(), *input = NULL;
	char why[200];

	if (!o)
		goto nomem;
	if (!b->tool) {
		json_t *text = json_stringn(b->text.data, b->text.len);

		if (!text) {
			provider_call_fail(c, MODEL_ERR_BAD_RESPONSE, 0,
			                   "the answer's text is not valid UTF-8");
			goto fail;
		}
		if (json_object_set_new(o, "type", json_string("text")) ||
		    json_object_set_new(o, "text", text))
			goto nomem;
		return o;
	}
	if (!b->name) {
		provider_call_fail(c, MODEL_ERR_BAD_RESPONSE, 0, "a tool call has no name");
		goto fail;
	}
	if (ph_tool_id(c, b))
		goto fail;
	why[0] = '\0';
	input = ph_parse_input(b, why, sizeof why);
	if (!input) {
		/* The model's call is broken, not the provider: the call
		 * stands with an empty input and the turn answers it with an
		 * error (model_bad_call). */
		b->bad = true;
		b->cut = c->stop == MODEL_STOP_MAX_TOKENS && c->have_stop;
		free(b->why);
		b->why = strdup(why[0] ? why : "not valid JSON");
		input = json_object();
		if (!b->why || !input)
			goto nomem;
	}
	if (json_object_set_new(o, "type", json_string("tool_use")) ||
	    json_object_set_new(o, "id", json_string(b->id)) ||
	    json_object_set_new(o, "name", json_string(b->name)))
		goto nomem;
	if (json_object_set_new(o, "input", input)) {
		input = NULL;
		goto nomem;
	}
	return o;
nomem:
	ph_nomem(c);
fail:
	json_decref(input);
	json_decref(o);
	return NULL;
}

/* The canonical assistant message of the answer; NULL with c failed. */
static json_t *ph_message(struct provider_call *c)
{
	json_t *msg = json_object(), *content = json_array(), *b;
	size_t i;
	bool tools = false;

	if (!msg || !content)
		goto nomem;
	for (i = 0; i < c->n_blocks; i++) {
		if (!c->blocks[i]->tool && c->blocks[i]->text.len == 0)
			continue;
		/* A call cut before its name arrived is no call at all. */
		if (c->blocks[i]->tool && !c->blocks[i]->name && c->have_stop &&
		    c->stop == MODEL_STOP_MAX_TOKENS)
			continue;
		b = ph_block_json(c, c->blocks[i]);
		if (!b)
			goto fail;
		if (json_array_append_new(content, b))
			goto nomem;
		tools |= c->blocks[i]->tool;
	}
	if (json_object_set_new(msg, "role", json_string("assistant")))
		goto nomem;
	if (json_object_set_new(msg, "content", content)) {
		content = NULL;
		goto nomem;
	}
	if (!c->have_stop)
		c->stop = tools ? MODEL_STOP_TOOL_USE : MODEL_STOP_END_TURN;
	/* Some local servers say "stop" even when they call tools. */
	if (tools && c->stop == MODEL_STOP_END_TURN)
		c->stop = MODEL_STOP_TOOL_USE;
	return msg;
nomem:
	ph_nomem(c);
fail:
	json_decref(content);
	json_decref(msg);
	return NULL;
}

/* Parses a complete (or JSON-instead-of-SSE) answer body. */
static int ph_answer(struct provider_call *c, const struct httpc_response *r)
{
	const struct buf *body = c->stream ? &c->json : &r->body;
	json_error_t jerr;
	json_t *j;
	int rc;

	if (c->stream && c->body_kind == PH_BODY_SSE) {
		sse_finish(&c->sse);
		if (!c->complete)
			return provider_call_fail(c, MODEL_ERR_BAD_RESPONSE, (int)r->status,
			                          "the stream ended before the answer was "
			                          "complete (truncated)");
		return SB_OK;
	}
	if (body->len == 0)
		return provider_call_fail(c, MODEL_ERR_BAD_RESPONSE, (int)r->status,
		                          "empty answer");
	j = json_loadb(body->data, body->len, 0, &jerr);
	if (!j)
		return provider_call_fail(c, MODEL_ERR_BAD_RESPONSE, (int)r->status,
		                          "malformed JSON in the answer: %s", jerr.text);
	rc = c->api->body(c, j);
	json_decref(j);
	return rc;
}

/* A printable, one-line excerpt of a body that is not a JSON error. */
static void ph_snippet(char *out, size_t size, const char *s, size_t n)
{
	size_t i, o = 0;

	for (i = 0; i < n && o + 1 < size && o < PH_SNIPPET; i++) {
		unsigned char ch = (unsigned char)s[i];

		if (ch >= 0x20 && ch < 0x7F)
			out[o++] = (char)ch;
		else if (o > 0 && out[o - 1] != ' ')
			out[o++] = ' ';
	}
	while (o > 0 && out[o - 1] == ' ')
		o--;
	out[o] = '\0';
}

static int64_t ph_retry_after(const struct httpc_response *r)
{
	const char *ms = httpc_response_header(r, "retry-after-ms");
	int64_t v;

	if (ms && num_parse_i64(ms, 0, INT64_MAX, &v) == SB_OK)
		return v;
	return httpc_retry_after_ms(r);
}

/* An answer with an error status. */
static void ph_status_error(struct provider_call *c, const struct httpc_response *r)
{
	const struct buf *body = c->stream ? &c->json : &r->body;
	const char *type = NULL, *code = NULL, *msg = NULL;
	char snippet[PH_SNIPPET + 1] = "";
	int status = (int)r->status;
	enum model_error_kind kind;
	json_t *j = NULL, *e;

	if (body->len)
		j = json_loadb(body->data, body->len, 0, NULL);
	e = json_object_get(j, "error");
	if (json_is_object(e)) {
		type = provider_json_str(e, "type");
		code = provider_json_str(e, "code");
		msg = provider_json_str(e, "message");
	} else if (json_is_string(e)) {
		msg = json_string_value(e);
	} else if (j) {
		msg = provider_json_str(j, "message");
		if (!msg)
			msg = provider_json_str(j, "detail");
	}
	if (!msg && body->len && !j) {
		ph_snippet(snippet, sizeof(snippet), body->data, body->len);
		if (snippet[0])
			msg = snippet;
	}

	if (status == 429)
		kind = MODEL_ERR_RATE_LIMIT;
	else if (status == 408)
		kind = MODEL_ERR_TIMEOUT;
	else if (status == 401 || status == 403)
		kind = MODEL_ERR_AUTH;
	else if (status == 413)
		kind = MODEL_ERR_PROMPT_TOO_LONG;
	else if ((status == 400 || status == 422) && provider_prompt_too_long(type, code, msg))
		kind = MODEL_ERR_PROMPT_TOO_LONG;
	else if (status >= 400 && status < 500)
		kind = MODEL_ERR_BAD_REQUEST;
	else if (status >= 500)
		kind = MODEL_ERR_OVERLOADED;
	else
		kind = MODEL_ERR_BAD_REQUEST; /* 3xx: redirects are not followed */

	if (status >= 300 && status < 400 && !msg)
		msg = "a redirect (check base_url)";
	provider_call_fail(c, kind, status, "HTTP %d%s%s", status, msg ? ": " : "", msg ? msg : "");
	c->err.retry_after_ms = ph_retry_after(r);
	json_decref(j);
}

/* ---- the call --------------------------------------------------------- */

static void ph_call_free(struct provider_call *c)
{
	size_t i;

	if (!c)
		return;
	for (i = 0; i < c->n_blocks; i++)
		ph_block_free(c->blocks[i]);
	free(c->blocks);
	sse_free(&c->sse);
	buf_free(&c->json);
	free(c->stop_raw);
	free(c->model);
	free(c->req_model);
	free(c);
}

static void ph_release(struct provider_call *c)
{
	if (--c->depth == 0 && c->finished)
		ph_call_free(c);
}

static void ph_on_http_done(void *ud, int rc, const struct httpc_response *r)
{
	struct provider_call *c = ud;
	struct model_response resp = {0};
	struct model_bad_call *bad = NULL;
	json_t *msg = NULL;
	size_t n_bad = 0;

	c->http = NULL;
	c->depth++;
	if (c->failed) {
		/* Our own on_data stopped the transfer; its reason stands. */
	} else if (rc == SB_ERR_ABORTED || rc == SB_ERR_CLOSED) {
		provider_call_fail(c, MODEL_ERR_ABORTED, 0, "the call was cancelled");
	} else if (rc == SB_ERR_TIMEOUT) {
		provider_call_fail(c, MODEL_ERR_TIMEOUT, 0, "no complete answer within %lld ms",
		                   (long long)c->p->base.cfg->timeout_ms);
	} else if (rc == SB_ERR_TOOBIG) {
		provider_call_fail(c, MODEL_ERR_BAD_RESPONSE, (int)r->status,
		                   "the answer is larger than %zu MiB",
		                   PROVIDER_HTTP_MAX_RESPONSE >> 20);
	} else if (rc != SB_OK) {
		provider_call_fail(c, MODEL_ERR_NETWORK, 0, "%s",
		                   r->error ? r->error : sb_strerror(rc));
	} else if (r->status < 200 || r->status > 299) {
		ph_status_error(c, r);
	} else if (ph_answer(c, r) == SB_OK) {
		msg = ph_message(c);
	}
	for (size_t i = 0; msg && i < c->n_blocks; i++)
		n_bad += c->blocks[i]->bad;
	if (n_bad && !(bad = calloc(n_bad, sizeof *bad))) {
		json_decref(msg);
		msg = NULL;
	}
	for (size_t i = 0, k = 0; bad && i < c->n_blocks; i++) {
		const struct provider_block *b = c->blocks[i];

		if (!b->bad)
			continue;
		bad[k].id = b->id;
		bad[k].name = b->name;
		bad[k].input_bytes = b->text.len;
		bad[k].cut = b->cut;
		bad[k].why = b->why;
		k++;
	}

	c->finished = true;
	if (c->failed || !msg) {
		if (!c->failed)
			ph_nomem(c);
		c->done(c->ud, c->fail_rc, NULL, &c->err);
	} else {
		resp.message = msg;
		resp.bad_calls = bad;
		resp.n_bad_calls = n_bad;
		resp.stop = c->stop;
		resp.stop_raw = c->stop_raw ? c->stop_raw : "";
		resp.usage = c->usage;
		resp.model = c->model ? c->model : c->req_model;
		c->done(c->ud, SB_OK, &resp, NULL);
	}
	free(bad);
	json_decref(msg);
	ph_release(c);
}

static int ph_on_event(void *ud, const char *name, const char *data, size_t len)
{
	struct provider_call *c = ud;
	int rc;

	if (c->finished)
		return SB_ERR_ABORTED;
	if (c->failed)
		return c->fail_rc;
	rc = c->api->event(c, name, data, len);
	return c->finished ? SB_ERR_ABORTED : rc;
}

static int ph_on_data(void *ud, const char *p, size_t n)
{
	struct provider_call *c = ud;
	size_t i = 0;
	bool stop;
	int rc;

	c->depth++;
	if (c->body_kind == PH_BODY_UNKNOWN) {
		while (i < n && (p[i] == ' ' || p[i] == '\t' || p[i] == '\r' || p[i] == '\n'))
			i++;
		if (i < n)
			c->body_kind = p[i] == '{' || p[i] == '[' ? PH_BODY_JSON : PH_BODY_SSE;
	}
	if (c->body_kind == PH_BODY_JSON) {
		rc = buf_append(&c->json, p, n);
		if (rc == SB_ERR_TOOBIG)
			provider_call_fail(c, MODEL_ERR_BAD_RESPONSE, 0,
			                   "the answer is larger than %zu MiB",
			                   PROVIDER_HTTP_MAX_RESPONSE >> 20);
		else if (rc)
			ph_nomem(c);
	} else if (c->body_kind == PH_BODY_SSE) {
		rc = sse_feed(&c->sse, p, n);
		if (rc == SB_ERR_TOOBIG && !c->finished)
			provider_call_fail(c, MODEL_ERR_BAD_RESPONSE, 0,
			                   "an event of the stream is larger than %zu MiB",
			                   PROVIDER_HTTP_MAX_EVENT >> 20);
		else if (rc == SB_ERR_NOMEM && !c->finished)
			ph_nomem(c);
	}
	stop = c->failed || c->finished;
	ph_release(c);
	return stop ? 1 : 0;
}

int provider_http_start(struct provider *p, const struct provider_http_api *api,
                        const struct model_request *req, const char *url,
                        const char *const *headers, const json_t *body,
                        const struct model_stream_events *ev, model_done_cb done, void *ud,
                        struct provider_call **out)
{
	struct provider_http *ph = (struct provider_http *)p;
	struct provider_call *c = NULL;
	struct httpc_request hr = {0};
	struct httpc *http = NULL;
	char *text = NULL;
	int rc = SB_ERR_INVAL;

	if (!p || !api || !req || !url || !body || !done)
		goto out;
	rc = SB_ERR_HTTP;
	if (ph->host.http_client)
		http = ph->host.http_client(ph->host.ctx);
	if (!http)
		goto out;
	rc = SB_ERR_NOMEM;
	c = calloc(1, sizeof(*c));
	if (!c)
		goto out;
	c->p = ph;
	c->api = api;
	c->done = done;
	c->ud = ud;
	if (ev)
		c->ev = *ev;
	c->stream = provider_http_streams(p, req);
	c->err.retry_after_ms = -1;
	sse_init(&c->sse, PROVIDER_HTTP_MAX_EVENT, ph_on_event, c);
	buf_init(&c->json, PROVIDER_HTTP_MAX_RESPONSE);
	c->req_model = strdup(req->model ? req->model : "");
	text = jsonw_dumps(body, 0, NULL);
	if (!c->req_model || !text)
		goto out;

	hr.method = "POST";
	hr.url = url;
	hr.headers = headers;
	hr.body = text;
	hr.body_len = strlen(text);
	hr.timeout_ms = p->cfg->timeout_ms > 0 ? (long)p->cfg->timeout_ms : 0;
	hr.max_response_bytes = PROVIDER_HTTP_MAX_RESPONSE;
	hr.on_data = c->stream ? ph_on_data : NULL;
	rc = httpc_request(http, &hr, ph_on_http_done, c, &c->http);
	if (rc)
		goto out;
	if (out)
		*out = c;
	c = NULL;
out:
	ph_call_free(c);
	free(text);
	return rc;
}

void provider_http_cancel(struct provider_call *c)
{
	if (!c || c->finished || !c->http)
		return;
	httpc_cancel(c->http);
}
