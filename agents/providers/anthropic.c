/*
 * anthropic.c - the "anthropic-messages" provider: the Messages API.
 *
 * Wire format: POST {base_url}/v1/messages with x-api-key and
 * anthropic-version. The canonical history (message.h) is already the
 * Messages API's shape; blocks are rebuilt from their known fields (so that
 * no bookkeeping of ours reaches the API) and the last block of the last
 * message carries cache_control, so that each turn reads the prefix the
 * previous one cached. A streamed answer arrives as named SSE events
 * (message_start, content_block_start/delta/stop, message_delta,
 * message_stop, ping, error); tool input arrives as pieces of JSON text per
 * block index. A stream without message_stop is truncated.
 *
 * Loop thread only.
 */
#include <stdlib.h>
#include <string.h>

#include "agents/provider.h"
#include "agents/providers/provider_http.h"
#include "gateway/core/buf.h"
#include "gateway/core/err.h"

#define ANTHROPIC_DEFAULT_BASE_URL "https://api.anthropic.com"
#define ANTHROPIC_DEFAULT_VERSION "2023-06-01"
/* The bound of a content block's index in a stream. */
#define ANTHROPIC_MAX_INDEX 1023
/* The bound of one tool result's text. */
#define ANTHROPIC_MAX_TEXT ((size_t)64 * 1024 * 1024)

/* ---- the request ------------------------------------------------------ */

static bool anthropic_is(const json_t *block, const char *type)
{
	const char *t = provider_json_str(block, "type");

	return t && strcmp(t, type) == 0;
}

static int anthropic_set_str(json_t *o, const char *key, const char *value)
{
	return value && json_object_set_new(o, key, json_string(value)) == 0 ? SB_OK : SB_ERR_INVAL;
}

/* A tool result's content as one string (text blocks joined with "\n"). */
static json_t *anthropic_result_text(json_t *content)
{
	const json_t *block;
	struct buf text;
	size_t i, n = 0;
	json_t *s = NULL;

	if (json_is_string(content))
		return json_incref(content);
	buf_init(&text, ANTHROPIC_MAX_TEXT);
	json_array_foreach(content, i, block)
	{
		if (!anthropic_is(block, "text") || !provider_json_str(block, "text"))
			continue;
		if ((n++ && buf_append(&text, "\n", 1)) ||
		    buf_puts(&text, provider_json_str(block, "text")))
			goto out;
	}
	s = json_stringn(text.data ? text.data : "", text.len);
out:
	buf_free(&text);
	return s;
}

/* One canonical block rebuilt for the wire; NULL when malformed or empty
 * text (*skip set for the latter). */
static json_t *anthropic_block(const json_t *block, bool *skip)
{
	json_t *o = json_object(), *v;
	int rc = SB_ERR_INVAL;

	*skip = false;
	if (!o)
		return NULL;
	if (anthropic_is(block, "text")) {
		/* The API refuses empty text blocks. */
		if (!provider_json_str(block, "text") || !*provider_json_str(block, "text")) {
			*skip = true;
			goto out;
		}
		rc = anthropic_set_str(o, "type", "text");
		if (!rc)
			rc = anthropic_set_str(o, "text", provider_json_str(block, "text"));
	} else if (anthropic_is(block, "tool_use")) {
		v = json_object_get(block, "input");
		rc = anthropic_set_str(o, "type", "tool_use");
		if (!rc)
			rc = anthropic_set_str(o, "id", provider_json_str(block, "id"));
		if (!rc)
			rc = anthropic_set_str(o, "name", provider_json_str(block, "name"));
		if (!rc && json_object_set_new(o, "input", v ? json_incref(v) : json_object()))
			rc = SB_ERR_NOMEM;
	} else if (anthropic_is(block, "tool_result")) {
		rc = anthropic_set_str(o, "type", "tool_result");
		if (!rc)
			rc = anthropic_set_str(o, "tool_use_id",
			                       provider_json_str(block, "tool_use_id"));
		if (!rc &&
		    json_object_set_new(o, "content",
		                        anthropic_result_text(json_object_get(block, "content"))))
			rc = SB_ERR_NOMEM;
		if (!rc && json_is_true(json_object_get(block, "is_error")) &&
		    json_object_set_new(o, "is_error", json_true()))
			rc = SB_ERR_NOMEM;
	} else if (json_is_object(block) && provider_json_str(block, "type")) {
		/* Other API-native blocks (image, document, ...) go as they are. */
		json_decref(o);
		return json_deep_copy(block);
	}
out:
	if (rc) {
		json_decref(o);
		return NULL;
	}
	return o;
}

/* Whether a block type takes cache_control (thinking blocks do not). */
static bool anthropic_cacheable(const json_t *block)
{
	return anthropic_is(block, "text") || anthropic_is(block, "tool_use") ||
	       anthropic_is(block, "tool_result") || anthropic_is(block, "image") ||
	       anthropic_is(block, "document");
}

static json_t *anthropic_message(const json_t *msg, bool last)
{
	const char *role = provider_json_str(msg, "role");
	const json_t *content = json_object_get(msg, "content"), *block;
	json_t *m = NULL, *blocks = NULL, *b, *cc;
	size_t i;
	bool skip;

	if (!role || (strcmp(role, "user") != 0 && strcmp(role, "assistant") != 0))
		return NULL;
	m = json_object();
	blocks = json_array();
	if (!m || !blocks || anthropic_set_str(m, "role", role))
		goto fail;
	if (json_is_string(content)) {
		b = json_object();
		if (!b || anthropic_set_str(b, "type", "text") ||
		    anthropic_set_str(b, "text", json_string_value(content)) ||
		    json_array_append_new(blocks, b))
			goto fail;
	} else if (json_is_array(content)) {
		json_array_foreach(content, i, block)
		{
			b = anthropic_block(block, &skip);
			if (skip)
				continue;
			if (!b || json_array_append_new(blocks, b))
				goto fail;
		}
	} else {
		goto fail;
	}
	/* Prompt caching: a breakpoint after the whole conversation so far. */
	b = json_array_get(blocks, json_array_size(blocks) - 1);
	if (last && b && anthropic_cacheable(b)) {
		cc = json_pack("{s:s}", "type", "ephemeral");
		if (json_object_set_new(b, "cache_control", cc))
			goto fail;
	}
	if (json_object_set_new(m, "content", blocks)) {
		blocks = NULL;
		goto fail;
	}
	return m;
fail:
	json_decref(blocks);
	json_decref(m);
	return NULL;
}

static json_t *anthropic_tool(const json_t *tool)
{
	const char *desc = provider_json_str(tool, "description");
	json_t *schema = json_object_get(tool, "input_schema");
	json_t *t = json_object();

	if (!t || anthropic_set_str(t, "name", provider_json_str(tool, "name")) ||
	    (desc && anthropic_set_str(t, "description", desc)) ||
	    json_object_set_new(t, "input_schema",
	                        schema
	                            ? json_incref(schema)
	                            : json_pack("{s:s, s:{}}", "type", "object", "properties"))) {
		json_decref(t);
		return NULL;
	}
	return t;
}

static int anthropic_body(const struct provider *p, const struct model_request *req, bool stream,
                          json_t **out)
{
	json_t *body = json_object(), *msgs = json_array(), *tools = NULL, *x;
	const json_t *v;
	size_t i, n;
	int rc = SB_ERR_NOMEM;

	if (!body || !msgs)
		goto out;
	rc = SB_ERR_INVAL;
	if (!json_is_array(req->messages))
		goto out;
	n = json_array_size(req->messages);
	json_array_foreach(req->messages, i, v)
	{
		x = anthropic_message(v, i + 1 == n);
		if (!x || json_array_append_new(msgs, x))
			goto out;
	}
	rc = SB_ERR_NOMEM;
	if (anthropic_set_str(body, "model", req->model ? req->model : "") ||
	    json_object_set_new(body, "max_tokens", json_integer(provider_http_max_tokens(p, req))))
		goto out;
	if (req->system && *req->system && anthropic_set_str(body, "system", req->system))
		goto out;
	if (json_object_set_new(body, "messages", msgs)) {
		msgs = NULL;
		goto out;
	}
	msgs = NULL;
	if (json_array_size(req->tools)) {
		tools = json_array();
		if (!tools)
			goto out;
		json_array_foreach(req->tools, i, v)
		{
			x = anthropic_tool(v);
			rc = SB_ERR_INVAL;
			if (!x || json_array_append_new(tools, x))
				goto out;
		}
		rc = SB_ERR_NOMEM;
		if (json_object_set_new(body, "tools", tools)) {
			tools = NULL;
			goto out;
		}
		tools = NULL;
		if (req->no_tools &&
		    json_object_set_new(body, "tool_choice", json_pack("{ss}", "type", "none")))
			goto out;
	}
	if (json_object_set_new(body, "stream", json_boolean(stream)))
		goto out;
	*out = body;
	body = NULL;
	rc = SB_OK;
out:
	json_decref(tools);
	json_decref(msgs);
	json_decref(body);
	return rc;
}

/* ---- the answer ------------------------------------------------------- */

static enum model_stop anthropic_stop(const char *raw)
{
	if (strcmp(raw, "end_turn") == 0 || strcmp(raw, "stop_sequence") == 0)
		return MODEL_STOP_END_TURN;
	if (strcmp(raw, "tool_use") == 0)
		return MODEL_STOP_TOOL_USE;
	if (strcmp(raw, "max_tokens") == 0)
		return MODEL_STOP_MAX_TOKENS;
	return MODEL_STOP_OTHER; /* pause_turn, refusal, ... */
}

/* Usage numbers present in u replace those known so far (message_delta
 * repeats them cumulatively). */
static void anthropic_usage(struct provider_call *c, const json_t *u)
{
	if (!json_is_object(u))
		return;
	if (json_is_integer(json_object_get(u, "input_tokens")))
		c->usage.input_tokens = provider_json_int(u, "input_tokens");
	if (json_is_integer(json_object_get(u, "output_tokens")))
		c->usage.output_tokens = provider_json_int(u, "output_tokens");
	if (json_is_integer(json_object_get(u, "cache_read_input_tokens")))
		c->usage.cache_read_tokens = provider_json_int(u, "cache_read_input_tokens");
	if (json_is_integer(json_object_get(u, "cache_creation_input_tokens")))
		c->usage.cache_write_tokens = provider_json_int(u, "cache_creation_input_tokens");
}

static int anthropic_error(struct provider_call *c, const json_t *e)
{
	const char *type = provider_json_str(e, "type"), *msg = provider_json_str(e, "message");

	return provider_call_fail(c, provider_error_kind(type, NULL, msg), 0, "%s%s%s",
	                          type ? type : "error", msg ? ": " : "", msg ? msg : "");
}

static int anthropic_stop_reason(struct provider_call *c, const char *raw)
{
	return raw ? provider_set_stop(c, raw, anthropic_stop(raw)) : SB_OK;
}

static int anthropic_answer(struct provider_call *c, const json_t *body)
{
	struct provider_block *b;
	const json_t *content = json_object_get(body, "content"), *block;
	json_t *input;
	size_t i;
	int rc;

	if (anthropic_is(body, "error"))
		return anthropic_error(c, json_object_get(body, "error"));
	if (!json_is_array(content))
		return provider_call_fail(c, MODEL_ERR_BAD_RESPONSE, 0,
		                          "the answer has no content array");
	json_array_foreach(content, i, block)
	{
		if (anthropic_is(block, "text")) {
			const json_t *text = json_object_get(block, "text");

			if (!json_is_string(text))
				return provider_call_fail(c, MODEL_ERR_BAD_RESPONSE, 0,
				                          "a text block without text");
			b = provider_block_at(c, (int)i, false);
			if (!b)
				return c->fail_rc;
			rc = provider_text(c, b, json_string_value(text), json_string_length(text));
		} else if (anthropic_is(block, "tool_use")) {
			input = json_object_get(block, "input");
			if (!json_is_object(input))
				return provider_call_fail(
				    c, MODEL_ERR_BAD_RESPONSE, 0,
				    "a tool_use block without an input object");
			b = provider_block_at(c, (int)i, true);
			if (!b)
				return c->fail_rc;
			b->input = json_incref(input);
			rc = provider_tool_begin(c, b, provider_json_str(block, "id"),
			                         provider_json_str(block, "name"));
		} else {
			rc = SB_OK; /* thinking and server tool blocks are not kept */
		}
		if (rc)
			return rc;
	}
	if ((rc = provider_set_model(c, provider_json_str(body, "model"))) ||
	    (rc = anthropic_stop_reason(c, provider_json_str(body, "stop_reason"))))
		return rc;
	anthropic_usage(c, json_object_get(body, "usage"));
	return SB_OK;
}

static int anthropic_index(struct provider_call *c, const json_t *ev, int *out)
{
	const json_t *idx = json_object_get(ev, "index");
	json_int_t v;

	if (!json_is_integer(idx))
		return provider_call_fail(c, MODEL_ERR_BAD_RESPONSE, 0, "an event without index");
	v = json_integer_value(idx);
	if (v < 0 || v > ANTHROPIC_MAX_INDEX)
		return provider_call_fail(c, MODEL_ERR_BAD_RESPONSE, 0,
		                          "content block index %lld out of range", (long long)v);
	*out = (int)v;
	return SB_OK;
}

static int anthropic_block_start(struct provider_call *c, const json_t *ev)
{
	const json_t *cb = json_object_get(ev, "content_block"), *text;
	struct provider_block *b;
	int idx = 0, rc;

	if ((rc = anthropic_index(c, ev, &idx)))
		return rc;
	if (anthropic_is(cb, "text")) {
		b = provider_block_at(c, idx, false);
		if (!b)
			return c->fail_rc;
		text = json_object_get(cb, "text");
		return provider_text(c, b, json_string_value(text) ? json_string_value(text) : "",
		                     json_string_length(text));
	}
	if (anthropic_is(cb, "tool_use")) {
		b = provider_block_at(c, idx, true);
		if (!b)
			return c->fail_rc;
		/* The input streams as input_json_delta; the start's {} is a
		 * placeholder. */
		return provider_tool_begin(c, b, provider_json_str(cb, "id"),
		                           provider_json_str(cb, "name"));
	}
	return SB_OK;
}

static int anthropic_block_delta(struct provider_call *c, const json_t *ev)
{
	const json_t *delta = json_object_get(ev, "delta"), *s;
	struct provider_block *b;
	int idx = 0, rc;

	if ((rc = anthropic_index(c, ev, &idx)))
		return rc;
	if (anthropic_is(delta, "text_delta")) {
		s = json_object_get(delta, "text");
		b = provider_block_at(c, idx, false);
		if (!b)
			return c->fail_rc;
		return provider_text(c, b, json_string_value(s) ? json_string_value(s) : "",
		                     json_string_length(s));
	}
	if (anthropic_is(delta, "input_json_delta")) {
		s = json_object_get(delta, "partial_json");
		b = provider_block_find(c, idx);
		if (!b || !b->tool)
			return provider_call_fail(c, MODEL_ERR_BAD_RESPONSE, 0,
			                          "input_json_delta for block %d, which is not a "
			                          "tool_use",
			                          idx);
		return provider_tool_input(c, b, json_string_value(s) ? json_string_value(s) : "",
		                           json_string_length(s));
	}
	return SB_OK; /* thinking, signature, citations */
}

static int anthropic_event(struct provider_call *c, const char *name, const char *data, size_t len)
{
	const char *type;
	json_error_t jerr;
	json_t *j;
	int rc = SB_OK;

	if (c->complete)
		return SB_OK;
	j = json_loadb(data, len, 0, &jerr);
	if (!j)
		return provider_call_fail(c, MODEL_ERR_BAD_RESPONSE, 0,
		                          "malformed JSON in the stream: %s", jerr.text);
	type = provider_json_str(j, "type");
	if (!type)
		type = name;
	if (strcmp(type, "message_start") == 0) {
		const json_t *m = json_object_get(j, "message");

		rc = provider_set_model(c, provider_json_str(m, "model"));
		anthropic_usage(c, json_object_get(m, "usage"));
	} else if (strcmp(type, "content_block_start") == 0) {
		rc = anthropic_block_start(c, j);
	} else if (strcmp(type, "content_block_delta") == 0) {
		rc = anthropic_block_delta(c, j);
	} else if (strcmp(type, "message_delta") == 0) {
		rc = anthropic_stop_reason(
		    c, provider_json_str(json_object_get(j, "delta"), "stop_reason"));
		anthropic_usage(c, json_object_get(j, "usage"));
	} else if (strcmp(type, "message_stop") == 0) {
		c->complete = true;
	} else if (strcmp(type, "content_block_stop") == 0) {
		int idx = 0;
		struct provider_block *b;

		/* A tool call's input is whole here (read-only tools may start
		 * while the rest streams). */
		if ((rc = anthropic_index(c, j, &idx)) == SB_OK &&
		    (b = provider_block_find(c, idx)) != NULL)
			rc = provider_tool_complete(c, b, false);
	} else if (strcmp(type, "error") == 0) {
		rc = anthropic_error(c, json_object_get(j, "error"));
	}
	/* ping and future events: nothing to do. */
	json_decref(j);
	return rc;
}

static const struct provider_http_api anthropic_api = {
    .label = "Anthropic",
    .event = anthropic_event,
    .body = anthropic_answer,
};

/* ---- ops -------------------------------------------------------------- */

static int anthropic_create(struct provider **out, const struct provider_config *cfg,
                            const struct host *host)
{
	return provider_http_create(out, cfg, host, &provider_anthropic_ops);
}

static int anthropic_call(struct provider *p, const struct model_request *req,
                          const struct model_stream_events *ev, model_done_cb done, void *ud,
                          struct provider_call **out)
{
	const struct provider_config *cfg = p ? p->cfg : NULL;
	struct buf url, key, version;
	const char *headers[5];
	size_t n = 0;
	json_t *body = NULL;
	bool stream;
	int rc = SB_ERR_INVAL;

	buf_init(&url, 8192);
	buf_init(&key, 8192);
	buf_init(&version, 256);
	if (!p || !req || !done)
		goto out;
	stream = provider_http_streams(p, req);
	rc = anthropic_body(p, req, stream, &body);
	if (rc)
		goto out;
	rc = buf_printf(&url, "%s/v1/messages",
	                cfg->base_url ? cfg->base_url : ANTHROPIC_DEFAULT_BASE_URL);
	if (!rc)
		rc = buf_printf(&version, "anthropic-version: %s",
		                cfg->anthropic_version ? cfg->anthropic_version
		                                       : ANTHROPIC_DEFAULT_VERSION);
	if (rc)
		goto out;
	headers[n++] = "content-type: application/json";
	headers[n++] = stream ? "accept: text/event-stream" : "accept: application/json";
	headers[n++] = version.data;
	/* A local proxy may need no key. */
	if (cfg->api_key && *cfg->api_key) {
		rc = buf_printf(&key, "x-api-key: %s", cfg->api_key);
		if (rc)
			goto out;
		headers[n++] = key.data;
	}
	headers[n] = NULL;
	rc =
	    provider_http_start(p, &anthropic_api, req, url.data, headers, body, ev, done, ud, out);
out:
	json_decref(body);
	buf_free(&url);
	buf_free(&version);
	/* The key does not linger in freed memory. */
	if (key.data)
		memset(key.data, 0, key.len);
	buf_free(&key);
	return rc;
}

const struct provider_ops provider_anthropic_ops = {
    .api = "anthropic-messages",
    .create = anthropic_create,
    .destroy = provider_http_destroy,
    .call = anthropic_call,
    .cancel = provider_http_cancel,
};
