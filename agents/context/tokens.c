/*
 * tokens.c - token estimates. See tokens.h.
 *
 * The text estimate is computed in hundredths of a token, so that nothing
 * is rounded before the end.
 */
#include "agents/context/tokens.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/core/err.h"

/* Hundredths of a token. */
#define TK_PUNCT 75    /* an ASCII punctuation character */
#define TK_NEWLINE 100 /* a line break, with the blanks after it */
#define TK_BLANKS 50   /* a run of two or more spaces or tabs */
#define TK_CJK 100     /* a CJK (or kana, hangul, full-width) character */
#define TK_OTHER 100   /* any other character (emoji, other scripts) */
#define TK_WORD_EXTRA 7
#define TK_MIXED_CHARS 250    /* letters and digits mixed: characters per token, x100 */
#define TK_NONASCII_CHARS 350 /* words in other alphabets: characters per token, x100 */

int64_t tokens_estimate_bytes(size_t bytes)
{
	return (int64_t)((bytes + 3) / 4);
}

/* The code point at s (n bytes left) and its length; an invalid byte is
 * one character of its own. */
static uint32_t tk_decode(const unsigned char *s, size_t n, size_t *len)
{
	uint32_t c = s[0];
	size_t k, i;

	if (c < 0x80) {
		*len = 1;
		return c;
	}
	if ((c & 0xE0) == 0xC0)
		k = 2, c &= 0x1F;
	else if ((c & 0xF0) == 0xE0)
		k = 3, c &= 0x0F;
	else if ((c & 0xF8) == 0xF0)
		k = 4, c &= 0x07;
	else
		k = 0;
	if (k == 0 || k > n) {
		*len = 1;
		return 0xFFFD;
	}
	for (i = 1; i < k; i++) {
		if ((s[i] & 0xC0) != 0x80) {
			*len = 1;
			return 0xFFFD;
		}
		c = (c << 6) | (s[i] & 0x3F);
	}
	*len = k;
	return c;
}

static bool tk_digit(uint32_t c)
{
	return c >= '0' && c <= '9';
}

/* Letters that make words: ASCII, "_", Latin-1 and Latin Extended, Greek,
 * Cyrillic, Hebrew, Arabic. */
static bool tk_letter(uint32_t c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
	       (c >= 0xC0 && c <= 0x24F && c != 0xD7 && c != 0xF7) || (c >= 0x370 && c <= 0x52F) ||
	       (c >= 0x590 && c <= 0x6FF);
}

static bool tk_cjk(uint32_t c)
{
	return (c >= 0x2E80 && c <= 0x9FFF) || (c >= 0xAC00 && c <= 0xD7AF) ||
	       (c >= 0xF900 && c <= 0xFAFF) || (c >= 0xFF00 && c <= 0xFFEF) || c >= 0x20000;
}

/* Hundredths of a token of n bytes of text. */
static int64_t tk_text(const unsigned char *s, size_t n)
{
	int64_t t = 0;
	size_t i = 0, len;

	while (i < n) {
		uint32_t c = tk_decode(s + i, n - i, &len);

		if (tk_letter(c) || tk_digit(c)) {
			int64_t chars = 0, digits = 0, nonascii = 0;

			while (i < n) {
				c = tk_decode(s + i, n - i, &len);
				if (!tk_letter(c) && !tk_digit(c))
					break;
				chars++;
				digits += tk_digit(c);
				nonascii += c >= 0x80;
				i += len;
			}
			if (digits == chars)
				t += (digits + 2) / 3 * 100;
			else if (digits)
				t += (chars * 100 + TK_MIXED_CHARS - 1) / TK_MIXED_CHARS * 100;
			else if (nonascii)
				t +=
				    (chars * 100 + TK_NONASCII_CHARS - 1) / TK_NONASCII_CHARS * 100;
			else
				t += (1 + (chars - 1) / TK_WORD_EXTRA) * 100;
			continue;
		}
		i += len;
		if (c == '\n') {
			t += TK_NEWLINE;
			while (i < n &&
			       (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r'))
				i++;
		} else if (c == ' ' || c == '\t' || c == '\r') {
			if (i < n && (s[i] == ' ' || s[i] == '\t')) {
				t += TK_BLANKS;
				while (i < n && (s[i] == ' ' || s[i] == '\t'))
					i++;
			}
		} else if (c < 0x80) {
			t += c >= 0x20 ? TK_PUNCT : 0;
		} else if (tk_cjk(c)) {
			t += TK_CJK;
		} else {
			t += TK_OTHER;
		}
	}
	return t;
}

int64_t tokens_estimate_text(const char *s, size_t n)
{
	return s ? (tk_text((const unsigned char *)s, n) + 99) / 100 : 0;
}

struct tokens_text_entry {
	char *text; /* a copy, to compare with */
	size_t len;
	int64_t est;
	uint64_t used; /* the lookup that used it last */
};

struct tokens_text_cache {
	struct tokens_text_entry v[TOKENS_TEXT_CACHE_MAX];
	size_t n;
	uint64_t clock;
};

int tokens_text_cache_new(struct tokens_text_cache **out)
{
	*out = calloc(1, sizeof **out);
	return *out ? SB_OK : SB_ERR_NOMEM;
}

void tokens_text_cache_free(struct tokens_text_cache *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->n; i++)
		free(c->v[i].text);
	free(c);
}

int64_t tokens_text_cache_estimate(struct tokens_text_cache *c, const char *s, size_t n, bool *hit)
{
	struct tokens_text_entry *e;
	size_t i, slot;
	char *copy;

	if (hit)
		*hit = false;
	if (!c || !s || n > TOKENS_TEXT_CACHE_BYTES)
		return tokens_estimate_text(s, n);
	for (i = 0; i < c->n; i++) {
		e = &c->v[i];
		if (e->len == n && memcmp(e->text, s, n) == 0) {
			e->used = ++c->clock;
			if (hit)
				*hit = true;
			return e->est;
		}
	}
	copy = malloc(n + 1);
	if (!copy)
		return tokens_estimate_text(s, n); /* uncached, still right */
	memcpy(copy, s, n);
	copy[n] = '\0';
	slot = c->n;
	if (c->n == TOKENS_TEXT_CACHE_MAX) {
		slot = 0;
		for (i = 1; i < c->n; i++)
			if (c->v[i].used < c->v[slot].used)
				slot = i;
		free(c->v[slot].text);
	} else {
		c->n++;
	}
	e = &c->v[slot];
	e->text = copy;
	e->len = n;
	e->est = tokens_estimate_text(s, n);
	e->used = ++c->clock;
	return e->est;
}

/* Hundredths of a token of a JSON value: its strings' text, one token per
 * member or element and one per container for the structure. */
static int64_t tk_json(const json_t *v, int depth)
{
	const json_t *x;
	const char *k;
	size_t i;
	int64_t t = 0;
	char num[64];

	if (!v || depth > 64)
		return 0;
	switch (json_typeof(v)) {
	case JSON_OBJECT:
		t = 100;
		json_object_foreach((json_t *)v, k, x) t +=
		    tk_text((const unsigned char *)k, strlen(k)) + 100 + tk_json(x, depth + 1);
		return t;
	case JSON_ARRAY:
		t = 100;
		json_array_foreach(v, i, x) t += 100 + tk_json(x, depth + 1);
		return t;
	case JSON_STRING:
		return 100 +
		       tk_text((const unsigned char *)json_string_value(v), json_string_length(v));
	case JSON_INTEGER:
		snprintf(num, sizeof num, "%lld", (long long)json_integer_value(v));
		return tk_text((const unsigned char *)num, strlen(num));
	case JSON_REAL:
		snprintf(num, sizeof num, "%.17g", json_real_value(v));
		return tk_text((const unsigned char *)num, strlen(num));
	default:
		return 100;
	}
}

int64_t tokens_estimate_json(const json_t *v)
{
	return v ? (tk_json(v, 0) + 99) / 100 : 0;
}

void tokens_ledger_init(struct tokens_ledger *l)
{
	memset(l, 0, sizeof *l);
	l->reported = -1;
	l->reply_out = -1;
	l->scale = 1.0;
}

void tokens_ledger_free(struct tokens_ledger *l)
{
	free(l->seen);
	free(l->est);
	tokens_ledger_init(l);
}

void tokens_ledger_set_fixed(struct tokens_ledger *l, const char *system, const json_t *tools)
{
	l->fixed =
	    tokens_estimate_text(system, system ? strlen(system) : 0) + tokens_estimate_json(tools);
}

void tokens_ledger_set_fixed_est(struct tokens_ledger *l, const char *system, int64_t tools_est)
{
	l->fixed = tokens_estimate_text(system, system ? strlen(system) : 0) + tools_est;
}

void tokens_ledger_set_fixed_tokens(struct tokens_ledger *l, int64_t system_est, int64_t tools_est)
{
	l->fixed = system_est + tools_est;
}

void tokens_ledger_set_scale(struct tokens_ledger *l, double scale)
{
	if (scale >= TOKENS_SCALE_MIN && scale <= TOKENS_SCALE_MAX) {
		l->scale = scale;
		l->reports = 1;
	}
}

static int64_t tk_scaled(const struct tokens_ledger *l, int64_t est)
{
	return (int64_t)ceil((double)est * l->scale);
}

int tokens_ledger_sync(struct tokens_ledger *l, const json_t *history)
{
	size_t n = json_array_size(history), i;

	if (n > l->cap) {
		size_t cap = l->cap ? l->cap : 16;
		const json_t **seen;
		int64_t *est;

		while (cap < n)
			cap *= 2;
		seen = realloc(l->seen, cap * sizeof *seen);
		if (!seen)
			return SB_ERR_NOMEM;
		l->seen = seen;
		est = realloc(l->est, cap * sizeof *est);
		if (!est)
			return SB_ERR_NOMEM;
		l->est = est;
		l->cap = cap;
	}
	for (i = 0; i < n; i++) {
		const json_t *m = json_array_get(history, i);

		if (i < l->n && l->seen[i] == m)
			continue;
		if (i < l->anchor_n)
			l->reported = -1; /* the reported prompt no longer describes it */
		if (i == l->anchor_n && !l->reply_pending)
			l->reply_out = -1; /* nor the reply after it, once replaced */
		if (i == l->anchor_n)
			l->reply_pending = false;
		l->seen[i] = m;
		l->est[i] = tokens_estimate_json(m);
	}
	if (n < l->anchor_n)
		l->reported = -1;
	l->n = n;
	return SB_OK;
}

void tokens_ledger_report(struct tokens_ledger *l, size_t n_sent, int64_t prompt, int64_t output)
{
	int64_t raw = l->fixed;

	if (prompt <= 0)
		return; /* the provider said nothing: keep estimating */
	for (size_t i = 0; i < n_sent && i < l->n; i++)
		raw += l->est[i];
	/* Small prompts say little about the tokenizer. */
	if (raw >= 100 && n_sent <= l->n) {
		double measured = (double)prompt / (double)raw;

		if (measured < TOKENS_SCALE_MIN)
			measured = TOKENS_SCALE_MIN;
		if (measured > TOKENS_SCALE_MAX)
			measured = TOKENS_SCALE_MAX;
		l->scale = l->reports ? (l->scale + measured) / 2 : measured;
		l->reports++;
	}
	l->reported = prompt;
	l->anchor_n = n_sent;
	l->reply_out = output > 0 ? output : -1;
	l->reply_pending = true;
	/* The reply is estimated when it is synced; reply_out stands for it. */
	if (n_sent < l->n)
		l->seen[n_sent] = NULL;
	for (size_t i = n_sent + 1; i < l->n; i++)
		l->seen[i] = NULL;
}

int64_t tokens_ledger_total(const struct tokens_ledger *l)
{
	int64_t sum = 0, raw = 0;
	size_t i = 0;

	if (l->reported >= 0 && l->anchor_n <= l->n) {
		sum = l->reported;
		i = l->anchor_n;
		if (i < l->n && l->reply_out >= 0) {
			sum += l->reply_out;
			i++;
		}
	} else {
		raw = l->fixed;
	}
	for (; i < l->n; i++)
		raw += l->est[i];
	return sum + tk_scaled(l, raw);
}

int64_t tokens_ledger_estimate(const struct tokens_ledger *l, const json_t *history)
{
	int64_t raw = l->fixed;
	const json_t *m;
	size_t i;

	json_array_foreach(history, i, m) raw += tokens_estimate_json(m);
	return tk_scaled(l, raw);
}

int64_t tokens_ledger_text(const struct tokens_ledger *l, const char *s, size_t n)
{
	return tk_scaled(l, tokens_estimate_text(s, n));
}

int64_t tokens_ledger_message(const struct tokens_ledger *l, size_t i)
{
	return i < l->n ? tk_scaled(l, l->est[i]) : 0;
}
