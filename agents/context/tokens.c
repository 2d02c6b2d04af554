/*
 * tokens.c - token estimates. See tokens.h.
 */
#include "agents/context/tokens.h"

#include <stdlib.h>
#include <string.h>

#include "gateway/core/err.h"

int64_t tokens_estimate_bytes(size_t bytes)
{
	return (int64_t)((bytes + 3) / 4);
}

static int tokens_count_cb(const char *buffer, size_t size, void *data)
{
	(void)buffer;
	*(size_t *)data += size;
	return 0;
}

int64_t tokens_estimate_json(const json_t *v)
{
	size_t n = 0;

	if (!v)
		return 0;
	if (json_is_string(v))
		return tokens_estimate_bytes(json_string_length(v));
	/* Counting through the callback avoids building the text. */
	if (json_dump_callback(v, tokens_count_cb, &n, JSON_COMPACT | JSON_ENCODE_ANY) != 0)
		return 0;
	return tokens_estimate_bytes(n);
}

void tokens_ledger_init(struct tokens_ledger *l)
{
	memset(l, 0, sizeof *l);
	l->reported = -1;
	l->reply_out = -1;
}

void tokens_ledger_free(struct tokens_ledger *l)
{
	free(l->seen);
	free(l->est);
	tokens_ledger_init(l);
}

void tokens_ledger_set_fixed(struct tokens_ledger *l, const char *system, const json_t *tools)
{
	l->fixed = tokens_estimate_bytes(system ? strlen(system) : 0) + tokens_estimate_json(tools);
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
		l->seen[i] = m;
		l->est[i] = tokens_estimate_json(m);
		if (i == l->anchor_n && l->reply_out >= 0 && l->reported >= 0)
			l->est[i] = l->reply_out;
	}
	if (n < l->anchor_n)
		l->reported = -1;
	l->n = n;
	return SB_OK;
}

void tokens_ledger_report(struct tokens_ledger *l, size_t n_sent, int64_t prompt, int64_t output)
{
	if (prompt <= 0)
		return; /* the provider said nothing: keep estimating */
	l->reported = prompt;
	l->anchor_n = n_sent;
	l->reply_out = output > 0 ? output : -1;
	/* The reply may be in the ledger already; it is re-estimated with
	 * the reported figure at the next sync. */
	if (n_sent < l->n)
		l->seen[n_sent] = NULL;
	if (l->n > n_sent + 1)
		for (size_t i = n_sent + 1; i < l->n; i++)
			l->seen[i] = NULL;
}

int64_t tokens_ledger_total(const struct tokens_ledger *l)
{
	int64_t sum = 0;
	size_t i = 0;

	if (l->reported >= 0 && l->anchor_n <= l->n) {
		sum = l->reported;
		i = l->anchor_n;
	} else {
		sum = l->fixed;
	}
	for (; i < l->n; i++)
		sum += l->est[i];
	return sum;
}

int64_t tokens_ledger_message(const struct tokens_ledger *l, size_t i)
{
	return i < l->n ? l->est[i] : 0;
}
