/*
 * tokens.h - token estimates for the context levels (compact.h).
 *
 * Without a tokenizer for every model, text is estimated by what it is made
 * of, the way BPE tokenizers cut it: a word of ASCII letters is about one
 * token (one more for every 7 letters past the first), digits go in threes,
 * runs that mix letters and digits (hashes, ids) about 2.5 characters a
 * token, words in other alphabets (accented Latin, Greek, Cyrillic, Hebrew,
 * Arabic) 3.5, punctuation 0.75 a character, a line break (and the
 * indentation after it) one, CJK characters one each, anything else one per
 * character. Against o200k and cl100k this lands within about 15% on
 * English, C, JSON, YAML and number lists (where a quarter of the bytes is
 * off by half), and between the two tokenizers on Chinese (o200k 0.75 a
 * character, cl100k 1.1); the calibration below closes the rest of the gap
 * for the model actually used. A JSON value is estimated on what the model
 * reads: the text of its strings, plus a little for the structure.
 *
 * The ledger keeps one estimate per message of a history and re-estimates
 * only the messages that changed (a message is a new jansson object
 * whenever it is edited: turn.c never edits a sent message in place). When
 * the provider reports the size of a prompt, that figure wins for the
 * messages it covered: the estimate of the history is then the reported
 * prompt plus the estimates of the messages added since. Each report also
 * calibrates: the ratio of the reported size to the estimate of the same
 * request scales every later estimate (within [1/4, 4], averaged with the
 * previous ratio), so a model whose tokenizer counts differently is sized
 * right from the next call on.
 *
 * Loop thread only.
 */
#ifndef SB_AGENTS_TOKENS_H
#define SB_AGENTS_TOKENS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TOKENS_SCALE_MIN 0.25
#define TOKENS_SCALE_MAX 4.0

/* ceil(bytes / 4): the crude rule, kept for sizes without text. */
int64_t tokens_estimate_bytes(size_t bytes);

/* The estimate of n bytes of UTF-8 text (see above). */
int64_t tokens_estimate_text(const char *s, size_t n);

/* The estimate of a JSON value as the model reads it; 0 for NULL. */
int64_t tokens_estimate_json(const json_t *v);

/* A few texts' estimates, for a text that is estimated again and again
 * unchanged (an agent's system prompt, built per run from the same files):
 * a hit costs a comparison of the text, not its estimate. At most
 * TOKENS_TEXT_CACHE_MAX texts (the least recently used one goes); a text
 * longer than TOKENS_TEXT_CACHE_BYTES is estimated each time. */
#define TOKENS_TEXT_CACHE_MAX 8
#define TOKENS_TEXT_CACHE_BYTES (1024 * 1024)

struct tokens_text_cache;

/* SB_OK or SB_ERR_NOMEM. */
int tokens_text_cache_new(struct tokens_text_cache **out);
/* NULL is a no-op. */
void tokens_text_cache_free(struct tokens_text_cache *c);
/* tokens_estimate_text(s, n), from c when c has the same text (c NULL:
 * estimated). *hit (may be NULL) says whether it came from c. */
int64_t tokens_text_cache_estimate(struct tokens_text_cache *c, const char *s, size_t n, bool *hit);

struct tokens_ledger {
	const json_t **seen; /* the message each estimate was made for */
	int64_t *est;        /* unscaled estimates */
	size_t n, cap;
	int64_t fixed;      /* system prompt + tool list, unscaled */
	int64_t reported;   /* the provider's prompt size for anchor_n messages; -1 none */
	size_t anchor_n;    /* how many messages that prompt held */
	int64_t reply_out;  /* reported output tokens of the reply after them; -1 none */
	bool reply_pending; /* the reply has not been synced yet */
	double scale;       /* reported / estimated (1 until a report) */
	int reports;
};

void tokens_ledger_init(struct tokens_ledger *l);
void tokens_ledger_free(struct tokens_ledger *l);

/* Sets the cost of what every request carries besides the messages. */
void tokens_ledger_set_fixed(struct tokens_ledger *l, const char *system, const json_t *tools);
/* The same, with the tool list's tokens_estimate_json already known. */
void tokens_ledger_set_fixed_est(struct tokens_ledger *l, const char *system, int64_t tools_est);
/* The same, with both estimates known (tokens_estimate_text of the system
 * prompt, tokens_estimate_json of the tool list). */
void tokens_ledger_set_fixed_tokens(struct tokens_ledger *l, int64_t system_est, int64_t tools_est);

/* Starts from an earlier calibration (a session's last one); ignored when
 * not within [TOKENS_SCALE_MIN, TOKENS_SCALE_MAX]. */
void tokens_ledger_set_scale(struct tokens_ledger *l, double scale);

/* Brings the per-message estimates in line with history (borrowed):
 * messages that are new or were replaced are estimated again; a change
 * inside the part a reported prompt covered drops that report. SB_OK or
 * SB_ERR_NOMEM. */
int tokens_ledger_sync(struct tokens_ledger *l, const json_t *history);

/* Records the provider's usage for a call that sent the first n_sent
 * messages (synced): prompt = input + cache read + cache write tokens, and
 * the output tokens of the reply (the message at index n_sent, once added).
 * Calibrates the scale. */
void tokens_ledger_report(struct tokens_ledger *l, size_t n_sent, int64_t prompt, int64_t output);

/* The estimated size of a request with the synced history. */
int64_t tokens_ledger_total(const struct tokens_ledger *l);

/* The estimated size of a request with another history (a compaction's
 * plan), scaled; its messages are estimated afresh. */
int64_t tokens_ledger_estimate(const struct tokens_ledger *l, const json_t *history);

/* The scaled estimate of a text or a JSON value. */
int64_t tokens_ledger_text(const struct tokens_ledger *l, const char *s, size_t n);

/* The estimate of message i, scaled (0 past the end). */
int64_t tokens_ledger_message(const struct tokens_ledger *l, size_t i);

#endif
