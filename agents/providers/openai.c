/*
 * openai.c - the "openai-chat" provider: the Chat Completions API, as spoken
 * by OpenAI and by most local and hosted servers (Ollama, llama.cpp, vLLM,
 * OpenRouter, ...).
 *
 * Wire format: POST {base_url}/chat/completions. The canonical history
 * (message.h) becomes role messages: the system prompt first; a user
 * message's tool_result blocks become one role "tool" message each (they
 * must follow the assistant message that called the tools) and its text one
 * user message; an assistant message's tool_use blocks become tool_calls
 * whose arguments are JSON text. A streamed answer arrives as SSE "data:"
 * chunks of choices[0].delta; tool calls are assembled by their index (id
 * and name come first, the arguments in pieces), and "data: [DONE]" ends the
 * stream. Usage is normalised to the Messages API's sense: input_tokens
 * excludes the cached part of the prompt.
 *
 * Loop thread only.
 */
#include <stdlib.h>
#include <string.h>

#include "agents/provider.h"
#include "agents/providers/provider_http.h"
#include "gateway/core/buf.h"
#include "gateway/core/err.h"
#include "gateway/core/jsonw.h"

#define OPENAI_DEFAULT_BASE_URL "https://api.openai.com/v1"
/* The key of the text block among the tool calls' indexes. */
#define OPENAI_TEXT_KEY (-1)
/* The bound of a tool call's index in a stream. */
#define OPENAI_MAX_INDEX 1023
/* The bound of one converted message's text. */
#define OPENAI_MAX_TEXT ((size_t)64 * 1024 * 1024)

/* ---- the request ------------------------------------------------------ */

static bool openai_is(const json_t *block, const char *type)
{
	const char *t = provider_json_str(block, "type");

	return t && strcmp(t, type) == 0;
}

/* Appends the text of a content value (a string, or its text blocks joined
 * with "\n") to out. */
static int openai_text_of(const json_t *content, struct buf *out)
{
	const json_t *block;
	size_t i, n = 0;
	int rc;

	if (json_is_string(content))
		return buf_append(out, json_string_value(content), json_string_length(content));
	json_array_foreach(content, i, block)
	{
		if (!openai_is(block, "text") || !provider_json_str(block, "text"))
			continue;
		if (n++ && (rc = buf_append(out, "\n", 1)))
			return rc;
		if ((rc = buf_puts(out, provider_json_str(block, "text"))))
			return rc;
	}
	return SB_OK;
}

/* msg NULL: a block or message that could not be converted, almost always
 * because it was malformed. */
static int openai_append(json_t *arr, json_t *msg)
{
	if (!msg)
		return SB_ERR_INVAL;
	return json_array_append_new(arr, msg) == 0 ? SB_OK : SB_ERR_NOMEM;
}

static json_t *openai_role_msg(const char *role, const char *content)
{
	json_t *m = json_object();

	if (!m || json_object_set_new(m, "role", json_string(role)) ||
	    json_object_set_new(m, "content", content ? json_string(content) : json_null())) {
		json_decref(m);
		return NULL;
	}
	return m;
}

/* One tool_result block → {"role":"tool","tool_call_id","content"}. */
static int openai_tool_result(json_t *arr, const json_t *block)
{
	const char *id = provider_json_str(block, "tool_use_id");
	struct buf text;
	json_t *m = NULL;
	int rc = SB_ERR_INVAL;

	buf_init(&text, OPENAI_MAX_TEXT);
	if (!id)
		goto out;
	rc = SB_ERR_NOMEM;
	if (json_is_true(json_object_get(block, "is_error")) && buf_puts(&text, "Error: "))
		goto out;
	rc = openai_text_of(json_object_get(block, "content"), &text);
	if (rc)
		goto out;
	rc = SB_ERR_NOMEM;
	m = openai_role_msg("tool", text.len ? text.data : "");
	if (!m || json_object_set_new(m, "tool_call_id", json_string(id)))
		goto out;
	rc = openai_append(arr, m);
	m = NULL;
out:
	json_decref(m);
	buf_free(&text);
	return rc;
}

static int openai_user(json_t *arr, const json_t *content)
{
	const json_t *block;
	struct buf text;
	size_t i;
	int rc = SB_OK;
	bool any_text = false;

	if (json_is_string(content))
		return openai_append(arr, openai_role_msg("user", json_string_value(content)));
	if (!json_is_array(content))
		return SB_ERR_INVAL;
	buf_init(&text, OPENAI_MAX_TEXT);
	/* Tool results first: they answer the assistant message before. */
	json_array_foreach(content, i, block)
	{
		if (openai_is(block, "tool_result") && (rc = openai_tool_result(arr, block)))
			goto out;
		any_text |= openai_is(block, "text");
	}
	if (any_text) {
		rc = openai_text_of(content, &text);
		if (rc == SB_OK)
			rc = openai_append(arr, openai_role_msg("user", text.len ? text.data : ""));
	}
out:
	buf_free(&text);
	return rc;
}

static json_t *openai_tool_call(const json_t *block)
{
	const char *id = provider_json_str(block, "id"), *name = provider_json_str(block, "name");
	const json_t *input = json_object_get(block, "input");
	json_t *tc = NULL, *fn = NULL;
	char *args = NULL;

	if (!id || !name)
		return NULL;
	args = input ? jsonw_dumps(input, 0, NULL) : strdup("{}");
	tc = json_object();
	fn = json_object();
	if (!args || !tc || !fn || json_object_set_new(fn, "name", json_string(name)) ||
	    json_object_set_new(fn, "arguments", json_string(args)) ||
	    json_object_set_new(tc, "id", json_string(id)) ||
	    json_object_set_new(tc, "type", json_string("function")))
		goto fail;
	if (json_object_set_new(tc, "function", fn)) {
		fn = NULL;
		goto fail;
	}
	free(args);
	return tc;
fail:
	free(args);
	json_decref(fn);
	json_decref(tc);
	return NULL;
}

static int openai_assistant(json_t *arr, const json_t *content)
{
	const json_t *block;
	json_t *m = NULL, *calls = NULL;
	struct buf text;
	size_t i;
	int rc;

	if (json_is_string(content))
		return openai_append(arr, openai_role_msg("assistant", json_string_value(content)));
	rc = SB_ERR_INVAL;
	buf_init(&text, OPENAI_MAX_TEXT);
	if (!json_is_array(content))
		goto out;
	rc = openai_text_of(content, &text);
	if (rc)
		goto out;
	rc = SB_ERR_NOMEM;
	calls = json_array();
	if (!calls)
		goto out;
	json_array_foreach(content, i, block)
	{
		if (!openai_is(block, "tool_use"))
			continue;
		rc = openai_append(calls, openai_tool_call(block));
		if (rc)
			goto out;
	}
	rc = SB_ERR_NOMEM;
	/* content is null when the message only calls tools. */
	m = openai_role_msg(
	    "assistant", text.len || !json_array_size(calls) ? (text.data ? text.data : "") : NULL);
	if (!m)
		goto out;
	if (json_array_size(calls)) {
		if (json_object_set_new(m, "tool_calls", calls)) {
			calls = NULL;
			goto out;
		}
		calls = NULL;
	}
	rc = openai_append(arr, m);
	m = NULL;
out:
	json_decref(calls);
	json_decref(m);
	buf_free(&text);
	return rc;
}

static int openai_messages(const struct model_request *req, json_t *arr)
{
	const json_t *msg;
	const char *role;
	size_t i;
	int rc;

	if (req->system && *req->system &&
	    (rc = openai_append(arr, openai_role_msg("system", req->system))))
		return rc;
	if (!json_is_array(req->messages))
		return SB_ERR_INVAL;
	json_array_foreach(req->messages, i, msg)
	{
		role = provider_json_str(msg, "role");
		if (role && strcmp(role, "user") == 0)
			rc = openai_user(arr, json_object_get(msg, "content"));
		else if (role && strcmp(role, "assistant") == 0)
			rc = openai_assistant(arr, json_object_get(msg, "content"));
		else
			rc = SB_ERR_INVAL;
		if (rc)
			return rc;
	}
	return SB_OK;
}

static json_t *openai_tool(const json_t *tool)
{
	const char *name = provider_json_str(tool, "name");
	const char *desc = provider_json_str(tool, "description");
	json_t *schema = json_object_get(tool, "input_schema");
	json_t *t = json_object(), *fn = json_object();

	if (!name || !t || !fn)
		goto fail;
	if (json_object_set_new(fn, "name", json_string(name)) ||
	    (desc && json_object_set_new(fn, "description", json_string(desc))) ||
	    json_object_set_new(fn, "parameters",
	                        schema
	                            ? json_incref(schema)
	                            : json_pack("{s:s, s:{}}", "type", "object", "properties")) ||
	    json_object_set_new(t, "type", json_string("function")))
		goto fail;
	if (json_object_set_new(t, "function", fn)) {
		fn = NULL;
		goto fail;
	}
	return t;
fail:
	json_decref(fn);
	json_decref(t);
	return NULL;
}

static int openai_body(const struct provider *p, const struct model_request *req, bool stream,
                       json_t **out)
{
	json_t *body = json_object(), *msgs = json_array(), *tools = NULL, *so;
	const json_t *tool;
	size_t i;
	int rc = SB_ERR_NOMEM;

	if (!body || !msgs)
		goto out;
	rc = openai_messages(req, msgs);
	if (rc)
		goto out;
	rc = SB_ERR_NOMEM;
	if (json_object_set_new(body, "model", json_string(req->model ? req->model : "")))
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
		json_array_foreach(req->tools, i, tool)
		{
			rc = openai_append(tools, openai_tool(tool));
			if (rc)
				goto out;
		}
		rc = SB_ERR_NOMEM;
		if (json_object_set_new(body, "tools", tools)) {
			tools = NULL;
			goto out;
		}
		tools = NULL;
		if (req->no_tools && json_object_set_new(body, "tool_choice", json_string("none")))
			goto out;
	}
	if (json_object_set_new(body, "max_tokens",
	                        json_integer(provider_http_max_tokens(p, req))) ||
	    json_object_set_new(body, "stream", json_boolean(stream)))
		goto out;
	if (stream) {
		so = json_pack("{s:b}", "include_usage", 1);
		if (json_object_set_new(body, "stream_options", so))
			goto out;
	}
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

enum { OPENAI_DONE = 1 }; /* c->api_flags */

static enum model_stop openai_stop(const char *raw)
{
	if (strcmp(raw, "stop") == 0)
		return MODEL_STOP_END_TURN;
	if (strcmp(raw, "tool_calls") == 0 || strcmp(raw, "function_call") == 0)
		return MODEL_STOP_TOOL_USE;
	if (strcmp(raw, "length") == 0)
		return MODEL_STOP_MAX_TOKENS;
	return MODEL_STOP_OTHER;
}

static void openai_usage(struct provider_call *c, const json_t *u)
{
	int64_t prompt, cached;

	if (!json_is_object(u))
		return;
	prompt = provider_json_int(u, "prompt_tokens");
	cached = provider_json_int(json_object_get(u, "prompt_tokens_details"), "cached_tokens");
	c->usage.input_tokens = prompt > cached ? prompt - cached : 0;
	c->usage.output_tokens = provider_json_int(u, "completion_tokens");
	c->usage.cache_read_tokens = cached;
	c->usage.cache_write_tokens = 0;
}

/* An {"error": ...} object inside a 2xx answer. */
static int openai_error(struct provider_call *c, const json_t *e)
{
	const char *type = provider_json_str(e, "type"), *code = provider_json_str(e, "code");
	const char *msg =
	    json_is_string(e) ? json_string_value(e) : provider_json_str(e, "message");

	return provider_call_fail(c, provider_error_kind(type, code, msg), 0,
	                          "error in the answer: %s", msg ? msg : (type ? type : "unknown"));
}

static int openai_content(struct provider_call *c, const json_t *content)
{
	struct provider_block *b;
	const json_t *part;
	size_t i;
	int rc;

	if (json_is_string(content) && json_string_length(content)) {
		b = provider_block_at(c, OPENAI_TEXT_KEY, false);
		if (!b)
			return c->fail_rc;
		return provider_text(c, b, json_string_value(content), json_string_length(content));
	}
	/* Some servers answer with content parts. */
	json_array_foreach(content, i, part)
	{
		if (!json_is_string(json_object_get(part, "text")))
			continue;
		b = provider_block_at(c, OPENAI_TEXT_KEY, false);
		if (!b)
			return c->fail_rc;
		rc = provider_text(c, b, provider_json_str(part, "text"),
		                   json_string_length(json_object_get(part, "text")));
		if (rc)
			return rc;
	}
	return SB_OK;
}

/* The block of a tool call: by its index; a server that sends no index
 * starts a new call with each new id. */
static struct provider_block *openai_call_block(struct provider_call *c, const json_t *tc,
                                                int *n_calls)
{
	const json_t *jidx = json_object_get(tc, "index");
	const char *id = provider_json_str(tc, "id");
	json_int_t idx;
	size_t i;

	if (json_is_integer(jidx)) {
		idx = json_integer_value(jidx);
		if (idx < 0 || idx > OPENAI_MAX_INDEX) {
			provider_call_fail(c, MODEL_ERR_BAD_RESPONSE, 0,
			                   "tool call index %lld out of range", (long long)idx);
			return NULL;
		}
		return provider_block_at(c, (int)idx, true);
	}
	*n_calls = 0;
	for (i = 0; i < c->n_blocks; i++) {
		struct provider_block *b = c->blocks[i];

		if (!b->tool)
			continue;
		(*n_calls)++;
		if (id && b->id && strcmp(b->id, id) == 0)
			return b;
	}
	if (!id && *n_calls)
		return provider_block_find(c, *n_calls - 1);
	if (*n_calls > OPENAI_MAX_INDEX) {
		provider_call_fail(c, MODEL_ERR_BAD_RESPONSE, 0, "too many tool calls");
		return NULL;
	}
	return provider_block_at(c, *n_calls, true);
}

static int openai_tool_calls(struct provider_call *c, const json_t *calls)
{
	struct provider_block *b;
	const json_t *tc, *fn;
	json_t *args;
	size_t i;
	int n_calls, rc;

	json_array_foreach(calls, i, tc)
	{
		if (!json_is_object(tc))
			return provider_call_fail(c, MODEL_ERR_BAD_RESPONSE, 0,
			                          "a tool call is not an object");
		b = openai_call_block(c, tc, &n_calls);
		if (!b)
			return c->fail_rc;
		fn = json_object_get(tc, "function");
		rc = provider_tool_begin(c, b, provider_json_str(tc, "id"),
		                         provider_json_str(fn, "name"));
		if (rc)
			return rc;
		args = json_object_get(fn, "arguments");
		if (json_is_string(args)) {
			rc = provider_tool_input(c, b, json_string_value(args),
			                         json_string_length(args));
		} else if (json_is_object(args) && !b->input) {
			b->input = json_incref(args); /* Ollama's form */
			rc = SB_OK;
		} else {
			rc = SB_OK;
		}
		/* No end-of-call mark in this API: a call is complete once its
		 * arguments parse as an object. */
		if (rc == SB_OK && (json_is_string(args) || json_is_object(args)))
			rc = provider_tool_complete(c, b, json_is_string(args));
		if (rc)
			return rc;
	}
	return SB_OK;
}

static int openai_finish(struct provider_call *c, const json_t *choice)
{
	const char *fr = provider_json_str(choice, "finish_reason");

	return fr ? provider_set_stop(c, fr, openai_stop(fr)) : SB_OK;
}

static int openai_answer(struct provider_call *c, const json_t *body)
{
	const json_t *choice, *msg;
	int rc;

	if (json_object_get(body, "error"))
		return openai_error(c, json_object_get(body, "error"));
	choice = json_array_get(json_object_get(body, "choices"), 0);
	msg = json_object_get(choice, "message");
	if (!json_is_object(msg))
		return provider_call_fail(c, MODEL_ERR_BAD_RESPONSE, 0,
		                          "the answer has no choices[0].message");
	if ((rc = provider_set_model(c, provider_json_str(body, "model"))) ||
	    (rc = openai_content(c, json_object_get(msg, "content"))) ||
	    (rc = openai_tool_calls(c, json_object_get(msg, "tool_calls"))) ||
	    (rc = openai_finish(c, choice)))
		return rc;
	openai_usage(c, json_object_get(body, "usage"));
	return SB_OK;
}

static int openai_event(struct provider_call *c, const char *name, const char *data, size_t len)
{
	const json_t *choice, *delta;
	json_error_t jerr;
	json_t *j;
	size_t i;
	int rc = SB_OK;

	if (c->api_flags & OPENAI_DONE)
		return SB_OK;
	if (len == 6 && memcmp(data, "[DONE]", 6) == 0) {
		c->api_flags |= OPENAI_DONE;
		c->complete = true;
		return SB_OK;
	}
	j = json_loadb(data, len, 0, &jerr);
	if (!j)
		return provider_call_fail(c, MODEL_ERR_BAD_RESPONSE, 0,
		                          "malformed JSON in the stream: %s", jerr.text);
	if (json_object_get(j, "error")) {
		rc = openai_error(c, json_object_get(j, "error"));
		goto out;
	}
	if ((rc = provider_set_model(c, provider_json_str(j, "model"))))
		goto out;
	json_array_foreach(json_object_get(j, "choices"), i, choice)
	{
		if (json_integer_value(json_object_get(choice, "index")) != 0)
			continue;
		delta = json_object_get(choice, "delta");
		if ((rc = openai_content(c, json_object_get(delta, "content"))) ||
		    (rc = openai_tool_calls(c, json_object_get(delta, "tool_calls"))) ||
		    (rc = openai_finish(c, choice)))
			goto out;
		/* A finish reason completes the answer even if the server
		 * never sends [DONE]; usage may still follow. */
		if (c->have_stop)
			c->complete = true;
	}
	openai_usage(c, json_object_get(j, "usage"));
out:
	json_decref(j);
	return rc;
}

static const struct provider_http_api openai_api = {
    .label = "OpenAI",
    .event = openai_event,
    .body = openai_answer,
};

/* ---- ops -------------------------------------------------------------- */

static int openai_create(struct provider **out, const struct provider_config *cfg,
                         const struct host *host)
{
	return provider_http_create(out, cfg, host, &provider_openai_ops);
}

static int openai_call(struct provider *p, const struct model_request *req,
                       const struct model_stream_events *ev, model_done_cb done, void *ud,
                       struct provider_call **out)
{
	const struct provider_config *cfg = p ? p->cfg : NULL;
	struct buf url, auth;
	const char *headers[4];
	size_t n = 0;
	json_t *body = NULL;
	bool stream;
	int rc = SB_ERR_INVAL;

	buf_init(&url, 8192);
	buf_init(&auth, 8192);
	if (!p || !req || !done)
		goto out;
	stream = provider_http_streams(p, req);
	rc = openai_body(p, req, stream, &body);
	if (rc)
		goto out;
	rc = buf_printf(&url, "%s/chat/completions",
	                cfg->base_url ? cfg->base_url : OPENAI_DEFAULT_BASE_URL);
	if (rc)
		goto out;
	headers[n++] = "Content-Type: application/json";
	headers[n++] = stream ? "Accept: text/event-stream" : "Accept: application/json";
	/* Local servers need no key. */
	if (cfg->api_key && *cfg->api_key) {
		rc = buf_printf(&auth, "Authorization: Bearer %s", cfg->api_key);
		if (rc)
			goto out;
		headers[n++] = auth.data;
	}
	headers[n] = NULL;
	rc = provider_http_start(p, &openai_api, req, url.data, headers, body, ev, done, ud, out);
out:
	json_decref(body);
	buf_free(&url);
	/* The key does not linger in freed memory. */
	if (auth.data)
		memset(auth.data, 0, auth.len);
	buf_free(&auth);
	return rc;
}

const struct provider_ops provider_openai_ops = {
    .api = "openai-chat",
    .create = openai_create,
    .destroy = provider_http_destroy,
    .call = openai_call,
    .cancel = provider_http_cancel,
    .window = provider_http_window,
    .window_cancel = provider_http_window_cancel,
};
