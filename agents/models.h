/*
 * models.h - model routing: "provider/model" names, retries, fallback and
 * cooldown, over the providers of one configuration snapshot.
 *
 * models_call tries the chain in order (an agent's model, then its fallbacks).
 * On one model it retries 429/5xx/timeouts/network errors up to the
 * provider's max_retries, with exponential backoff and jitter, honouring
 * Retry-After. When a model gives up with a retryable error its provider goes
 * into cooldown (30 s, then 1 min, then 5 min for repeated failures; success
 * resets it; never shorter than the error's Retry-After) and the chain moves
 * on; a Retry-After longer than backoff_max_ms is not waited for: the model
 * gives up at once, as if out of retries. Providers in cooldown are skipped
 * while a later entry of the chain is not cooling down; when every remaining
 * entry is, the one whose cooldown ends first is tried anyway rather than
 * failing without a call. Auth and bad-request errors move to the next model
 * at once (no retry, no cooldown). "Prompt too long" and aborts end the call
 * at once, reported as they are, so the caller can compact and retry.
 *
 * Loop thread only.
 */
#ifndef SB_AGENTS_MODELS_H
#define SB_AGENTS_MODELS_H

#include <stddef.h>
#include <stdint.h>

#include "agents/provider.h"

struct models;
struct models_call;

/* 0 (or less) in any field means its default. */
struct models_options {
	int64_t backoff_base_ms; /* first retry delay; default 500 */
	int64_t backoff_max_ms;  /* cap of one delay (Retry-After included); default 30000 */
	int64_t cooldown_ms[3];  /* default 30 s, 60 s, 300 s */
};

/* What happened along the way (for logs, events and the transcript). */
enum models_event {
	MODELS_RETRY,    /* retrying the same model after delay_ms */
	MODELS_FALLBACK, /* moving on to the next model */
	MODELS_COOLDOWN, /* the provider is cooling down for delay_ms */
};

/* model is the "provider/model" the event is about: RETRY, the model tried
 * again after delay_ms; COOLDOWN, the model that gave up (its provider cools
 * down for delay_ms); FALLBACK, the model left behind for the next one
 * (delay_ms 0), or skipped because its provider is cooling down (err NULL,
 * delay_ms the cooldown left). FALLBACK is not sent after the last entry.
 * The callback may call models_cancel. Borrowed arguments, for the call. */
struct models_observer {
	void *ud;
	void (*event)(void *ud, enum models_event what, const char *model,
	              const struct model_error *err, int64_t delay_ms);
};

/* Creates a provider (provider_ops_for its api) for each of the n provider
 * configs. They are borrowed: the caller keeps the configuration snapshot
 * they belong to alive until models_free. opt may be NULL for defaults. SB_OK;
 * SB_ERR_CONFIG (logged) when a provider cannot be created; SB_ERR_INVAL;
 * SB_ERR_NOMEM. */
int models_new(struct models **out, const struct provider_config *providers, size_t n,
               const struct host *host, const struct models_options *opt);
void models_free(struct models *m); /* calls in flight must be finished; NULL is a no-op */

/* Starts a call over chain ("provider/model" names, tried in order; copied).
 * req's model field is ignored (each attempt sets its own); req itself is
 * copied, but what it points to (system, messages, tools) is borrowed until
 * done runs. ev and obs are copied (may be NULL); ev goes to each attempt,
 * so a failed attempt may already have streamed some text (the observer's
 * RETRY/FALLBACK says to drop it). done runs once, later (never inside this
 * call), with the last model's error when all failed; resp->model names the
 * entry that answered ("provider/model"). An entry that names no provider
 * fails like a bad request (rc SB_ERR_NOTFOUND when it is the last).
 * Returns SB_OK, SB_ERR_INVAL (no chain, no done) or SB_ERR_NOMEM. */
int models_call(struct models *m, const char *const *chain, size_t n,
                const struct model_request *req, const struct model_stream_events *ev,
                const struct models_observer *obs, model_done_cb done, void *ud,
                struct models_call **out);

/* Cancels (in flight or waiting to retry): done runs with MODEL_ERR_ABORTED
 * before this returns. */
void models_cancel(struct models_call *c);

/* Splits "provider/model" at the first "/" (the model may hold more); the
 * provider id is copied into provider, *model points into name (model may be
 * NULL). SB_ERR_INVAL when malformed or when the id does not fit psize. */
int models_split(const char *name, char *provider, size_t psize, const char **model);

/* 1 when the provider is in cooldown now (until receives the uv_now time it
 * ends, when until is not NULL), else 0 (until receives 0). */
int models_cooldown_until(const struct models *m, const char *provider_id, uint64_t *until);

/* ---- context windows ---- */

/* The window of a model nobody knows (tokens). */
#define MODELS_WINDOW_DEFAULT 32768

/* The context window of a model id from the table of known families
 * (claude, gpt-4o, llama3.1, qwen2.5, ...), matched on the id's last path
 * segment, lower case, without an Ollama ":tag"; 0 when none fits. *family
 * (may be NULL) receives the family's name. Pure; any thread. */
int64_t models_window_table(const char *model, const char **family);

struct models_window_wait;

/* source: "provider (GET /models max_model_len)", "table (llama3.1)",
 * "default". */
typedef void (*models_window_cb)(void *ud, int64_t window, const char *source);

/* The context window of chain entry name ("provider/model"): what its
 * provider's server says (asked once per model for the life of m; a server
 * that did not answer is asked again after 10 minutes), else the family
 * table, else MODELS_WINDOW_DEFAULT. cb runs once, later (never from
 * inside), unless models_window_cancel is called first. SB_OK,
 * SB_ERR_INVAL, SB_ERR_NOMEM. */
int models_window(struct models *m, const char *name, models_window_cb cb, void *ud,
                  struct models_window_wait **out);
void models_window_cancel(struct models_window_wait *w);

#endif
