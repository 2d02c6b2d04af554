/*
 * provider_http.h - what the HTTP providers (openai.c, anthropic.c) share.
 *
 * Private to agents/providers/. One call's life over the host's httpc:
 * sending the request, feeding a streamed body to the SSE parser, emitting
 * text deltas, assembling content blocks
 * (text, and tool_use whose input streams as JSON text), classifying every
 * failure into a model_error, building the canonical assistant message, and
 * running done exactly once (never from inside the call that started it;
 * after a cancel, before the cancel returns).
 *
 * A provider implements only its wire format: the request body and headers,
 * one SSE event of a streamed answer, the body of a complete one.
 *
 * Loop thread only.
 */
#ifndef SB_AGENTS_PROVIDER_HTTP_H
#define SB_AGENTS_PROVIDER_HTTP_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agents/provider.h"
#include "agents/providers/sse.h"
#include "gateway/core/buf.h"
#include "gateway/core/httpc.h"

/* The bound of one answer's body (and of one streamed text or input). */
#define PROVIDER_HTTP_MAX_RESPONSE ((size_t)32 * 1024 * 1024)
/* The bound of one SSE event. */
#define PROVIDER_HTTP_MAX_EVENT ((size_t)4 * 1024 * 1024)
/* The output cap when neither the request nor the config gives one. */
#define PROVIDER_HTTP_DEFAULT_MAX_TOKENS 4096

struct provider_call;

/* A provider's wire format, as the shared machinery sees it. */
struct provider_http_api {
	const char *label; /* "OpenAI", "Anthropic": starts each error message */
	/* One SSE event of a streamed answer (data borrowed). Updates the
	 * call with the provider_* functions below and sets c->complete at
	 * the stream's end marker. Returns SB_OK, or the code of
	 * provider_call_fail. */
	int (*event)(struct provider_call *c, const char *name, const char *data, size_t len);
	/* The body of a complete answer (borrowed), the same way. */
	int (*body)(struct provider_call *c, const json_t *body);
};

/* One content block of the answer being assembled. */
struct provider_block {
	int key;        /* the provider's index of the block */
	bool tool;      /* a tool_use, else text */
	bool announced; /* tool_use_start was emitted */
	bool complete;  /* tool_use_done was emitted: the input is final */
	bool bad;       /* the input cannot be used (model_bad_call) */
	bool cut;       /* ... because the output-token limit cut it */
	char *why;      /* ... the parser's words */
	char *id;
	char *name;
	struct buf text; /* the text, or the tool input's JSON text as streamed */
	json_t *input;   /* owned: the tool input when it arrived parsed */
};

/* The HTTP providers' instance: the contract's header and the host. */
struct provider_http {
	struct provider base;
	struct host host; /* a copy of the daemon's table */
};

struct provider_call {
	struct provider_http *p;
	const struct provider_http_api *api;
	struct httpc_call *http; /* NULL once httpc's done ran */
	struct model_stream_events ev;
	model_done_cb done;
	void *ud;
	bool stream;
	char *req_model;

	/* A streamed body: SSE, or a JSON document (an error, or a server
	 * that ignored "stream": true). */
	int body_kind;
	struct sse sse;
	struct buf json;

	/* The answer, as the provider reports it. */
	struct provider_block **blocks; /* owned, in the order they began */
	size_t n_blocks;
	size_t cap_blocks;
	bool have_stop;
	enum model_stop stop;
	char *stop_raw;
	char *model;
	struct model_usage usage;
	bool complete;      /* the stream reached its end marker */
	unsigned api_flags; /* the provider's own state */

	/* The first failure, when the provider or a bound stopped the call. */
	bool failed;
	int fail_rc;
	struct model_error err;

	int depth;     /* frames of ours on the stack: free only at zero */
	bool finished; /* done ran */
};

/* The ops' create and destroy of both HTTP providers. */
int provider_http_create(struct provider **out, const struct provider_config *cfg,
                         const struct host *host, const struct provider_ops *ops);
void provider_http_destroy(struct provider *p);

/* Whether this request is streamed: the request asks for it and the
 * provider's config allows it. */
bool provider_http_streams(const struct provider *p, const struct model_request *req);

/* The output cap of a request: the request's, else the config's, else the
 * default. */
int64_t provider_http_max_tokens(const struct provider *p, const struct model_request *req);

/* Sends the request: body (borrowed) is serialised; url and headers
 * ("Name: value", NULL-terminated) are copied. On SB_OK, done will run
 * exactly once, later; on error (SB_ERR_INVAL, SB_ERR_NOMEM, SB_ERR_CLOSED,
 * SB_ERR_HTTP when the host has no HTTP client) done never runs. */
int provider_http_start(struct provider *p, const struct provider_http_api *api,
                        const struct model_request *req, const char *url,
                        const char *const *headers, const json_t *body,
                        const struct model_stream_events *ev, model_done_cb done, void *ud,
                        struct provider_call **out);

/* The ops' cancel: done runs with MODEL_ERR_ABORTED before this returns. */
void provider_http_cancel(struct provider_call *c);

/* The ops' window for OpenAI-compatible servers (window.c): GET
 * {base_url}/models and the entry of the model (or the only one): vLLM's
 * max_model_len, OpenRouter's context_length (or top_provider's),
 * llama.cpp's meta.n_ctx (the server's, preferred) or meta.n_ctx_train;
 * then, for llama.cpp without n_ctx, GET {root}/props
 * (default_generation_settings.n_ctx); for Ollama (owned_by "library" or
 * "ollama", or port 11434), POST {root}/api/show: parameters' num_ctx, else
 * model_info's <arch>.context_length. root is base_url without a trailing
 * "/v1". Each request has a 5 s limit. */
int provider_http_window(struct provider *p, const char *model, provider_window_cb done, void *ud,
                         struct provider_probe **out);
void provider_http_window_cancel(struct provider_probe *pr);

/* Records the call's failure (the first one wins) and returns the rc that
 * done will get: SB_ERR_ABORTED, SB_ERR_TIMEOUT, SB_ERR_PROTO
 * (BAD_RESPONSE) or SB_ERR_HTTP (the rest). The message is prefixed with the
 * provider's label and never holds the API key. */
int provider_call_fail(struct provider_call *c, enum model_error_kind kind, int http_status,
                       const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* The block with this key; if none, a new one of that kind (NULL and the call
 * failed when out of memory, or when the key names a block of the other
 * kind). provider_block_find only looks. */
struct provider_block *provider_block_at(struct provider_call *c, int key, bool tool);
struct provider_block *provider_block_find(struct provider_call *c, int key);

/* Appends text (whole UTF-8 characters, as jansson decodes them) to a text
 * block and, when streaming, emits it as text_delta. */
int provider_text(struct provider_call *c, struct provider_block *b, const char *text, size_t len);

/* Sets a tool block's id and name where still unset (copied; NULL leaves
 * them) and, when streaming, emits tool_use_start once the name is known. */
int provider_tool_begin(struct provider_call *c, struct provider_block *b, const char *id,
                        const char *name);

/* Appends a piece of a tool block's input JSON text. A piece for a block
 * already complete (provider_tool_complete) is a broken stream. */
int provider_tool_input(struct provider_call *c, struct provider_block *b, const char *json,
                        size_t len);

/* Says that a tool block's input is complete (the API marks the end of the
 * block), or may be (check: OpenAI has no such mark, so its input counts as
 * complete once it parses as a JSON object, which no proper prefix of an
 * object does). When it parses as an object and the call streams, emits
 * tool_use_done once. An input that does not parse is left for the end of
 * the answer, where it becomes a bad call. */
int provider_tool_complete(struct provider_call *c, struct provider_block *b, bool check);

/* Sets the stop reason (raw copied) and the model as reported (copied). */
int provider_set_stop(struct provider_call *c, const char *raw, enum model_stop stop);
int provider_set_model(struct provider_call *c, const char *model);

/* Classifies an error object's type or code and message, for errors that
 * arrive inside a 2xx answer (a stream's error event). */
enum model_error_kind provider_error_kind(const char *type, const char *code, const char *message);

/* Whether an error's words say the prompt does not fit the context. */
bool provider_prompt_too_long(const char *type, const char *code, const char *message);

/* Borrowed string member of o, or NULL. */
const char *provider_json_str(const json_t *o, const char *key);

/* Integer member of o, or 0 (negative values give 0 too). */
int64_t provider_json_int(const json_t *o, const char *key);

#endif
