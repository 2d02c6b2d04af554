/*
 * store.c - what every backend shares: admission, the operations' memory,
 * the table that replies to callers, closing. (Opening, which picks the
 * backend, is in backends.c.)
 */
#include "gateway/store/store.h"

#include <stdlib.h>
#include <string.h>

#include "gateway/core/err.h"
#include "gateway/core/invariant.h"
#include "gateway/store/store_backend.h"

/* The table of operations: what store.c needs of each kind. The backends
 * have their own rows (how to run each kind). */
struct store_op_type {
	const char *name;
	void (*reply)(struct store_op *op);
	bool finishes; /* never refused for a full queue */
	bool reads;    /* writes nothing */
};

/* clang-format off */
#define STORE_OP_ROW_(K, n, f) \
	[STORE_OP_##K] = {#n, store_reply_##n, ((f) & STORE_OP_FINISHES) != 0, \
	                  ((f) & STORE_OP_READS) != 0},
/* clang-format on */
static const struct store_op_type store_op_types[STORE_OP__COUNT] = {STORE_OPS(STORE_OP_ROW_)};
#undef STORE_OP_ROW_

bool store_op_reads_only(enum store_op_kind kind)
{
	return (unsigned)kind < STORE_OP__COUNT && store_op_types[kind].reads;
}

const char *store_op_name(enum store_op_kind kind)
{
	return (unsigned)kind < STORE_OP__COUNT ? store_op_types[kind].name : "?";
}

void store_close(struct store *s)
{
	if (!s)
		return;
	s->closing = true; /* from here every new operation is SB_ERR_CLOSED */
	s->backend->close(s);
}

const char *store_backend_name(const struct store *s)
{
	return s->backend->name;
}

void store_base_init(struct store *s, const struct store_backend *b,
                     const struct store_options *opt)
{
	s->backend = b;
	s->queue_max = opt->queue_max ? opt->queue_max : STORE_DEFAULT_QUEUE_MAX;
	s->outstanding = 0;
	s->closing = false;
	s->on_commit = opt->on_commit;
	s->on_commit_ud = opt->on_commit_ud;
}

/* ---- operations ---- */

int store_op_new(struct store *s, enum store_op_kind kind, void *ud, struct store_op **out)
{
	struct store_op *op;

	*out = NULL;
	SB_ASSERT((unsigned)kind < STORE_OP__COUNT, LOG_I("kind", kind));
	if (s->closing)
		return SB_ERR_CLOSED;
	if (!store_op_types[kind].finishes && s->outstanding >= s->queue_max)
		return SB_ERR_AGAIN;
	op = calloc(1, sizeof *op);
	if (!op)
		return SB_ERR_NOMEM;
	op->kind = kind;
	op->ud = ud;
	*out = op;
	return SB_OK;
}

int store_op_submit(struct store *s, struct store_op *op)
{
	int rc = s->backend->submit(s, op);

	if (rc != SB_OK) {
		store_op_free(op);
		return rc;
	}
	s->outstanding++;
	return SB_OK;
}

void store_op_finish(struct store *s, struct store_op *op)
{
	struct store_commit commit = op->commit;

	/* Every operation is handed back once: more would run a callback twice
	 * and let the queue grow past queue_max. */
	SB_ASSERT(s->outstanding > 0, LOG_S("op", store_op_name(op->kind)),
	          LOG_S("backend", s->backend->name));
	/* Before the callback, so that it may queue a follow-up at the bound. */
	s->outstanding--;
	store_op_types[op->kind].reply(op);
	if (commit.end && s->on_commit)
		s->on_commit(s->on_commit_ud, commit.seconds, commit.ops, commit.rc);
	store_op_free(op);
}

void store_op_free(struct store_op *op)
{
	if (!op)
		return;
	for (size_t i = 0; i < op->nmem; i++)
		free(op->mem[i]);
	free(op->mem);
	free(op);
}

/* ---- the operations' memory ---- */

int store_op_keep(struct store_op *op, void *p)
{
	if (!p)
		return SB_ERR_NOMEM;
	if (op->nmem == op->capmem) {
		size_t cap = op->capmem ? op->capmem * 2 : 8;
		void **mem = realloc(op->mem, cap * sizeof *mem);

		if (!mem) {
			free(p);
			return SB_ERR_NOMEM;
		}
		op->mem = mem;
		op->capmem = cap;
	}
	op->mem[op->nmem++] = p;
	return SB_OK;
}

int store_op_strdup(struct store_op *op, const char *s, const char **out)
{
	*out = NULL;
	if (!s)
		return SB_OK;
	return store_op_memdup(op, s, strlen(s), out);
}

int store_op_memdup(struct store_op *op, const void *p, size_t n, const char **out)
{
	char *copy = malloc(n + 1);
	int rc;

	*out = NULL;
	if (copy) {
		memcpy(copy, p, n);
		copy[n] = '\0';
	}
	rc = store_op_keep(op, copy);
	if (rc == SB_OK)
		*out = copy;
	return rc;
}

int store_op_calloc(struct store_op *op, size_t n, size_t size, void **out)
{
	void *p = calloc(n ? n : 1, size);
	int rc = store_op_keep(op, p);

	*out = rc == SB_OK ? p : NULL;
	return rc;
}
