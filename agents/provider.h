/*
 * provider.h - the contract every model provider meets.
 *
 * A provider turns a model_request (system prompt, canonical history, tool
 * definitions) into one assistant message, streaming text deltas as they
 * arrive. Implementations: openai-chat (Chat Completions), anthropic-messages
 * (Messages API), scripted (replays a script; tests, demos, evaluation).
 * Providers speak HTTP through the host's shared client (curl multi on the
 * loop); they never block. Retries, fallback and cooldown live one level up,
 * in models.h: a provider reports each failure once, classified.
 *
 * Loop thread only. Callbacks never run from inside the call that started
 * the request.
 */
#ifndef SB_AGENTS_PROVIDER_H
#define SB_AGENTS_PROVIDER_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "agents/provider_config.h"
#include "gateway/core/host.h"

struct model_request {
	const char *model;  /* the provider's model id (after "provider/") */
	const char *system; /* system prompt; may be NULL */
	json_t *messages;   /* borrowed: canonical history (message.h) */
	json_t *tools;      /* borrowed: [{"name","description","input_schema"}], may be NULL */
	int max_tokens;     /* 0 = the provider's configured max_tokens */
	bool stream;        /* stream text deltas (SSE) */
	/* The tools are listed (so the request prefix stays the same and the
	 * API accepts the tool_use blocks of the history) but the model may
	 * not call them: OpenAI's tool_choice "none", Anthropic's {"type":
	 * "none"}. For the last call of a run that reached a limit. */
	bool no_tools;
	/* The length of messages' and tools' compact JSON (JSON_COMPACT) when
	 * the caller has it at hand; 0 = unknown. Only a provider that prices
	 * the request by its size reads them (scripted). */
	size_t messages_chars;
	size_t tools_chars;
};

enum model_stop {
	MODEL_STOP_END_TURN = 0,
	MODEL_STOP_TOOL_USE,
	MODEL_STOP_MAX_TOKENS, /* output-token limit: the turn may continue */
	MODEL_STOP_OTHER,
};

/* In the Messages API's sense, whatever the provider: input_tokens counts the
 * prompt tokens neither read from nor written to the cache, so the prompt's
 * size is input + cache_read + cache_write (openai-chat's prompt_tokens,
 * which include the cached ones, are normalised to this). */
struct model_usage {
	int64_t input_tokens;
	int64_t output_tokens;
	int64_t cache_read_tokens;
	int64_t cache_write_tokens;
};

/* A tool call of the answer whose input cannot be used: cut off by the
 * output-token limit (the answer stopped at max_tokens while the input was
 * still being written) or not a valid JSON object. It stands in the message
 * with an empty input ({}) and must be answered with an error result that
 * says why, never run. A model's broken call is not the provider's fault:
 * it is never an error of the call (no retry, no cooldown). */
struct model_bad_call {
	const char *id;
	const char *name;
	size_t input_bytes; /* of input text received */
	bool cut;           /* by the output-token limit */
	const char *why;    /* the parser's words when not cut */
};

struct model_response {
	json_t *message;                        /* borrowed: the canonical assistant message */
	const struct model_bad_call *bad_calls; /* borrowed, for the callback */
	size_t n_bad_calls;
	enum model_stop stop;
	const char *stop_raw; /* the provider's own word ("stop", "end_turn", ...) */
	struct model_usage usage;
	const char *model; /* the model that answered, as reported */
};

enum model_error_kind {
	MODEL_ERR_NONE = 0,
	MODEL_ERR_RATE_LIMIT,      /* 429 */
	MODEL_ERR_OVERLOADED,      /* 5xx, 529 */
	MODEL_ERR_TIMEOUT,         /* no (complete) answer in time */
	MODEL_ERR_NETWORK,         /* connection refused/reset, DNS, TLS */
	MODEL_ERR_PROMPT_TOO_LONG, /* the context does not fit: compact and retry */
	MODEL_ERR_AUTH,            /* 401/403: fix the key; no retry helps */
	MODEL_ERR_BAD_REQUEST,     /* other 4xx */
	MODEL_ERR_BAD_RESPONSE,    /* malformed JSON, truncated stream, bad shape */
	MODEL_ERR_ABORTED,         /* cancelled */
};

struct model_error {
	enum model_error_kind kind;
	int http_status;        /* 0 when none */
	int64_t retry_after_ms; /* from Retry-After; -1 when absent */
	char message[512];      /* for logs and the operator; never holds the key */
};

/* Whether retrying the same provider later may succeed: rate limits,
 * overload, timeouts, network errors and bad responses (a truncated stream or
 * a mangled body is usually a passing fault of the path to the provider). */
bool model_error_retryable(enum model_error_kind kind);
const char *model_error_kind_name(enum model_error_kind kind);

struct model_stream_events {
	void *ud;
	/* Text as it arrives: len bytes of UTF-8, never split inside a
	 * character, not NUL-terminated. Streaming calls only. May cancel the
	 * call. */
	void (*text_delta)(void *ud, const char *text, size_t len);
	/* A tool call began (its arguments are still streaming); at most once
	 * per tool call. Optional. May cancel the call. */
	void (*tool_use_start)(void *ud, const char *id, const char *name);
	/* A tool call is complete while the answer still streams: block is
	 * the canonical tool_use block (borrowed for the call), with the same
	 * id and input the final message will carry. At most once per tool
	 * call; only for calls whose input is a JSON object. Optional. May
	 * cancel the call. */
	void (*tool_use_done)(void *ud, const json_t *block);
};

/* rc SB_OK with resp, or an error code with err (resp NULL). Exactly once. */
typedef void (*model_done_cb)(void *ud, int rc, const struct model_response *resp,
                              const struct model_error *err);

struct provider;
struct provider_call;
struct provider_probe;

/* The context window a server reports for a model: window in tokens (0 when
 * it does not say), source in words ("GET /v1/models max_model_len"). */
typedef void (*provider_window_cb)(void *ud, int64_t window, const char *source);

struct provider_ops {
	const char *api; /* "openai-chat", "anthropic-messages", "scripted" */
	int (*create)(struct provider **out, const struct provider_config *cfg,
	              const struct host *host);
	void (*destroy)(struct provider *p);
	/* Starts one model call. req and its JSON are borrowed for the call
	 * only; ev is copied and may be NULL. out (may be NULL) receives a
	 * handle valid until done runs. Returns SB_OK (done runs later,
	 * exactly once) or an error (SB_ERR_INVAL for a malformed request or
	 * history, SB_ERR_NOMEM, ...), after which done never runs. */
	int (*call)(struct provider *p, const struct model_request *req,
	            const struct model_stream_events *ev, model_done_cb done, void *ud,
	            struct provider_call **out);
	/* done runs with MODEL_ERR_ABORTED (rc SB_ERR_ABORTED) before it returns. */
	void (*cancel)(struct provider_call *c);
	/* Optional: asks the server for model's context window. done runs
	 * once, later (never from inside), unless window_cancel is called
	 * first; *out is for that. SB_OK, or an error after which done never
	 * runs. */
	int (*window)(struct provider *p, const char *model, provider_window_cb done, void *ud,
	              struct provider_probe **out);
	void (*window_cancel)(struct provider_probe *pr);
};

/* Every provider's struct begins with this. */
struct provider {
	const struct provider_ops *ops;
	const struct provider_config *cfg; /* borrowed from the config snapshot */
};

extern const struct provider_ops provider_openai_ops;
extern const struct provider_ops provider_anthropic_ops;
extern const struct provider_ops provider_scripted_ops;

/* The ops for an api name; NULL if unknown. */
const struct provider_ops *provider_ops_for(const char *api);

#endif
