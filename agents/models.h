/*
 * models.h - model routing: "provider/model" names, retries, fallback and
 * cooldown, over the providers of one configuration snapshot.
 *
 * models_call tries the chain in order (an agent's model, then its fallbacks).
 * On one model it retries 429/5xx/timeouts/network errors up to the
 * provider's max_retries, with exponential backoff and jitter, honouring
 * Retry-After. When a model gives up with a retryable error its provider goes
 * into cooldown (30 s, then 1 min, then 5 min for repeated failures; success
 * resets it) and the chain moves on; providers in cooldown are skipped while
 * another model is available. Auth and bad-request errors move to the next
 * model at once. "Prompt too long" and aborts end the call at once, reported
 * as they are, so the caller can compact and retry.
 *
 * Loop thread only.
 */
#ifndef SB_AGENTS_MODELS_H
#define SB_AGENTS_MODELS_H

#include <stddef.h>
#include <stdint.h>

#include "agents/provider.h"

struct config;
struct models;
struct models_call;

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

struct models_observer {
	void *ud;
	void (*event)(void *ud, enum models_event what, const char *model,
	              const struct model_error *err, int64_t delay_ms);
};

/* Creates every provider of cfg's `providers` list. opt may be NULL for
 * defaults. SB_ERR_CONFIG (logged) when a provider cannot be created. */
int models_new(struct models **out, const struct config *cfg, const struct host *host,
               const struct models_options *opt);
void models_free(struct models *m); /* calls in flight must be finished */

/* Starts a call over chain ("provider/model" names, tried in order). req's
 * model field is ignored (each attempt sets its own); obs may be NULL. done
 * runs once, with the last model's error when all failed; resp->model names
 * the model that answered. */
int models_call(struct models *m, const char *const *chain, size_t n,
                const struct model_request *req, const struct model_stream_events *ev,
                const struct models_observer *obs, model_done_cb done, void *ud,
                struct models_call **out);

/* Cancels (in flight or waiting to retry): done runs with MODEL_ERR_ABORTED
 * before this returns. */
void models_cancel(struct models_call *c);

/* Splits "provider/model"; SB_ERR_INVAL when malformed. */
int models_split(const char *name, char *provider, size_t psize, const char **model);

/* Whether the provider is in cooldown now, and until when (uv_now ms). */
int models_cooldown_until(const struct models *m, const char *provider_id, uint64_t *until);

#endif
