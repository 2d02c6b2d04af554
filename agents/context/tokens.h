/*
 * tokens.h - token estimates for the context levels (compact.h).
 *
 * Without a tokenizer for every model, the estimate is a quarter of the
 * bytes of a thing's JSON text, rounded up (the same rule the scripted
 * provider uses for its usage). The ledger keeps one estimate per message
 * of a history and re-estimates only the messages that changed (a message
 * is a new jansson object whenever it is edited: turn.c never edits a sent
 * message in place). When the provider reports the size of a prompt, that
 * figure wins for the messages it covered: the estimate of the history is
 * then the reported prompt plus the estimates of the messages added since.
 *
 * Loop thread only.
 */
#ifndef SB_AGENTS_TOKENS_H
#define SB_AGENTS_TOKENS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* ceil(bytes / 4). */
int64_t tokens_estimate_bytes(size_t bytes);

/* The estimate of a JSON value (its compact serialisation); a string
 * counts its text. 0 for NULL. */
int64_t tokens_estimate_json(const json_t *v);

struct tokens_ledger {
	const json_t **seen; /* the message each estimate was made for */
	int64_t *est;
	size_t n, cap;
	int64_t fixed;     /* system prompt + tool list */
	int64_t reported;  /* the provider's prompt size for anchor_n messages; -1 none */
	size_t anchor_n;   /* how many messages that prompt held */
	int64_t reply_out; /* reported output tokens of the reply after them; -1 none */
};

void tokens_ledger_init(struct tokens_ledger *l);
void tokens_ledger_free(struct tokens_ledger *l);

/* Sets the cost of what every request carries besides the messages. */
void tokens_ledger_set_fixed(struct tokens_ledger *l, const char *system, const json_t *tools);

/* Brings the per-message estimates in line with history (borrowed):
 * messages that are new or were replaced are estimated again; a change
 * inside the part a reported prompt covered drops that report. SB_OK or
 * SB_ERR_NOMEM. */
int tokens_ledger_sync(struct tokens_ledger *l, const json_t *history);

/* Records the provider's usage for a call that sent the first n_sent
 * messages: prompt = input + cache read + cache write tokens, and the
 * output tokens of the reply (the message at index n_sent, once added). */
void tokens_ledger_report(struct tokens_ledger *l, size_t n_sent, int64_t prompt, int64_t output);

/* The estimated size of a request with the synced history. */
int64_t tokens_ledger_total(const struct tokens_ledger *l);

/* The estimate of message i (0 past the end). */
int64_t tokens_ledger_message(const struct tokens_ledger *l, size_t i);

#endif
