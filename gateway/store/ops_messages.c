/*
 * ops_messages.c - the inbox and the outbox: the store functions that check
 * and copy their arguments, and the replies that hand results back.
 */
#include <stdbool.h>

#include "gateway/core/err.h"
#include "gateway/store/store.h"
#include "gateway/store/store_backend.h"

/* A lease longer than a year is a caller bug, and keeps now + lease finite. */
#define STORE_LEASE_MAX_MS (366LL * 24 * 3600 * 1000)

static bool store_claim_valid(size_t max, int64_t lease_ms)
{
	return max > 0 && max <= STORE_CLAIM_MAX && lease_ms >= 0 && lease_ms <= STORE_LEASE_MAX_MS;
}

static bool store_outbox_new_valid(const struct store_outbox_new *m)
{
	return m && m->idempotency_key && m->channel && m->account && m->target && m->payload &&
	       m->inbox_id >= 0 && m->claim_lease_ms >= 0;
}

static int store_copy_outbox_new(struct store_op *op, const struct store_outbox_new *m,
                                 struct store_outbox_new *dst)
{
	int rc;

	*dst = *m;
	if ((rc = store_op_strdup(op, m->idempotency_key, &dst->idempotency_key)) != SB_OK ||
	    (rc = store_op_strdup(op, m->channel, &dst->channel)) != SB_OK ||
	    (rc = store_op_strdup(op, m->account, &dst->account)) != SB_OK ||
	    (rc = store_op_strdup(op, m->target, &dst->target)) != SB_OK ||
	    (rc = store_op_strdup(op, m->payload, &dst->payload)) != SB_OK)
		return rc;
	return SB_OK;
}

/* ---- inbox ---- */

int store_inbox_put(struct store *s, const struct store_inbox_new *m, store_put_cb cb, void *ud)
{
	struct store_args_inbox_put *a;
	struct store_op *op = NULL;
	int rc = SB_ERR_INVAL;

	if (!m || !m->channel || !m->account || !m->dedupe_key || !m->payload ||
	    m->claim_lease_ms < 0)
		goto out;
	if ((rc = store_op_new(s, STORE_OP_INBOX_PUT, ud, &op)) != SB_OK)
		goto out;
	a = &op->a.inbox_put;
	a->cb = cb;
	a->m.claim_lease_ms = m->claim_lease_ms;
	if ((rc = store_op_strdup(op, m->channel, &a->m.channel)) != SB_OK ||
	    (rc = store_op_strdup(op, m->account, &a->m.account)) != SB_OK ||
	    (rc = store_op_strdup(op, m->dedupe_key, &a->m.dedupe_key)) != SB_OK ||
	    (rc = store_op_strdup(op, m->payload, &a->m.payload)) != SB_OK)
		goto out;
	return store_op_submit(s, op);
out:
	store_op_free(op);
	return rc;
}

void store_reply_inbox_put(struct store_op *op)
{
	const struct store_args_inbox_put *a = &op->a.inbox_put;
	bool ok = op->rc == SB_OK;

	if (a->cb)
		a->cb(op->ud, op->rc, ok ? a->id : 0, ok && a->duplicate);
}

int store_inbox_claim(struct store *s, size_t max, int64_t lease_ms, store_inbox_cb cb, void *ud)
{
	struct store_op *op = NULL;
	int rc;

	if (!store_claim_valid(max, lease_ms))
		return SB_ERR_INVAL;
	if ((rc = store_op_new(s, STORE_OP_INBOX_CLAIM, ud, &op)) != SB_OK)
		return rc;
	op->a.inbox_claim.cb = cb;
	op->a.inbox_claim.max = max;
	op->a.inbox_claim.lease_ms = lease_ms;
	return store_op_submit(s, op);
}

void store_reply_inbox_claim(struct store_op *op)
{
	const struct store_args_inbox_claim *a = &op->a.inbox_claim;
	bool ok = op->rc == SB_OK;

	if (a->cb)
		a->cb(op->ud, op->rc, ok ? a->items : NULL, ok ? a->n : 0);
}

static int inbox_done(struct store *s, int64_t inbox_id, const struct store_outbox_new *replies,
                      size_t n, store_done_cb cb, store_outbox_cb items_cb, void *ud)
{
	struct store_args_inbox_done *a;
	struct store_op *op = NULL;
	void *copies = NULL;
	int rc = SB_ERR_INVAL;

	if (inbox_id <= 0 || (n > 0 && !replies) || n > STORE_CLAIM_MAX)
		goto out;
	for (size_t i = 0; i < n; i++)
		if (!store_outbox_new_valid(&replies[i]))
			goto out;
	if ((rc = store_op_new(s, STORE_OP_INBOX_DONE, ud, &op)) != SB_OK)
		goto out;
	a = &op->a.inbox_done;
	a->cb = cb;
	a->items_cb = items_cb;
	a->inbox_id = inbox_id;
	if (n > 0) {
		if ((rc = store_op_calloc(op, n, sizeof *a->replies, &copies)) != SB_OK)
			goto out;
		a->replies = copies;
		a->n = n;
		for (size_t i = 0; i < n; i++)
			if ((rc = store_copy_outbox_new(op, &replies[i], &a->replies[i])) != SB_OK)
				goto out;
	}
	return store_op_submit(s, op);
out:
	store_op_free(op);
	return rc;
}

int store_inbox_done(struct store *s, int64_t inbox_id, const struct store_outbox_new *replies,
                     size_t n, store_done_cb cb, void *ud)
{
	return inbox_done(s, inbox_id, replies, n, cb, NULL, ud);
}

int store_inbox_done_claimed(struct store *s, int64_t inbox_id,
                             const struct store_outbox_new *replies, size_t n, store_outbox_cb cb,
                             void *ud)
{
	return inbox_done(s, inbox_id, replies, n, NULL, cb, ud);
}

void store_reply_inbox_done(struct store_op *op)
{
	const struct store_args_inbox_done *a = &op->a.inbox_done;

	if (a->cb)
		a->cb(op->ud, op->rc);
	if (a->items_cb)
		a->items_cb(op->ud, op->rc, op->rc == SB_OK ? a->claimed : NULL,
		            op->rc == SB_OK ? a->n_claimed : 0);
}

int store_inbox_release(struct store *s, int64_t inbox_id, store_done_cb cb, void *ud)
{
	struct store_op *op = NULL;
	int rc;

	if (inbox_id <= 0)
		return SB_ERR_INVAL;
	if ((rc = store_op_new(s, STORE_OP_INBOX_RELEASE, ud, &op)) != SB_OK)
		return rc;
	op->a.inbox_release.cb = cb;
	op->a.inbox_release.inbox_id = inbox_id;
	return store_op_submit(s, op);
}

void store_reply_inbox_release(struct store_op *op)
{
	if (op->a.inbox_release.cb)
		op->a.inbox_release.cb(op->ud, op->rc);
}

int store_inbox_reply(struct store *s, int64_t inbox_id, store_reply_cb cb, void *ud)
{
	struct store_op *op = NULL;
	int rc;

	if (inbox_id <= 0)
		return SB_ERR_INVAL;
	if ((rc = store_op_new(s, STORE_OP_INBOX_REPLY, ud, &op)) != SB_OK)
		return rc;
	op->a.inbox_reply.cb = cb;
	op->a.inbox_reply.inbox_id = inbox_id;
	return store_op_submit(s, op);
}

void store_reply_inbox_reply(struct store_op *op)
{
	const struct store_args_inbox_reply *a = &op->a.inbox_reply;

	if (a->cb)
		a->cb(op->ud, op->rc, op->rc == SB_OK ? a->state : NULL,
		      op->rc == SB_OK ? a->payload : NULL);
}

/* ---- outbox ---- */

int store_outbox_put(struct store *s, const struct store_outbox_new *m, store_put_cb cb, void *ud)
{
	struct store_op *op = NULL;
	int rc = SB_ERR_INVAL;

	if (!store_outbox_new_valid(m))
		goto out;
	if ((rc = store_op_new(s, STORE_OP_OUTBOX_PUT, ud, &op)) != SB_OK)
		goto out;
	op->a.outbox_put.cb = cb;
	if ((rc = store_copy_outbox_new(op, m, &op->a.outbox_put.m)) != SB_OK)
		goto out;
	return store_op_submit(s, op);
out:
	store_op_free(op);
	return rc;
}

void store_reply_outbox_put(struct store_op *op)
{
	const struct store_args_outbox_put *a = &op->a.outbox_put;
	bool ok = op->rc == SB_OK;

	if (a->cb)
		a->cb(op->ud, op->rc, ok ? a->id : 0, ok && a->duplicate);
}

int store_outbox_claim_due(struct store *s, size_t max, int64_t lease_ms, store_outbox_cb cb,
                           void *ud)
{
	struct store_op *op = NULL;
	int rc;

	if (!store_claim_valid(max, lease_ms))
		return SB_ERR_INVAL;
	if ((rc = store_op_new(s, STORE_OP_OUTBOX_CLAIM_DUE, ud, &op)) != SB_OK)
		return rc;
	op->a.outbox_claim_due.cb = cb;
	op->a.outbox_claim_due.max = max;
	op->a.outbox_claim_due.lease_ms = lease_ms;
	return store_op_submit(s, op);
}

void store_reply_outbox_claim_due(struct store_op *op)
{
	const struct store_args_outbox_claim_due *a = &op->a.outbox_claim_due;
	bool ok = op->rc == SB_OK;

	if (a->cb)
		a->cb(op->ud, op->rc, ok ? a->items : NULL, ok ? a->n : 0);
}

int store_outbox_done(struct store *s, int64_t id, const char *channel_msg_id, store_done_cb cb,
                      void *ud)
{
	struct store_op *op = NULL;
	int rc = SB_ERR_INVAL;

	if (id <= 0)
		goto out;
	if ((rc = store_op_new(s, STORE_OP_OUTBOX_DONE, ud, &op)) != SB_OK)
		goto out;
	op->a.outbox_done.cb = cb;
	op->a.outbox_done.id = id;
	op->lazy_ms = STORE_LAZY_DONE_MS; /* nobody waits: it rides with the next commit */
	if ((rc = store_op_strdup(op, channel_msg_id, &op->a.outbox_done.channel_msg_id)) != SB_OK)
		goto out;
	return store_op_submit(s, op);
out:
	store_op_free(op);
	return rc;
}

void store_reply_outbox_done(struct store_op *op)
{
	if (op->a.outbox_done.cb)
		op->a.outbox_done.cb(op->ud, op->rc);
}

int store_outbox_failed(struct store *s, int64_t id, const char *error, int64_t retry_at,
                        store_done_cb cb, void *ud)
{
	struct store_op *op = NULL;
	int rc = SB_ERR_INVAL;

	if (id <= 0)
		goto out;
	if ((rc = store_op_new(s, STORE_OP_OUTBOX_FAILED, ud, &op)) != SB_OK)
		goto out;
	op->a.outbox_failed.cb = cb;
	op->a.outbox_failed.id = id;
	op->a.outbox_failed.retry_at = retry_at < 0 ? -1 : retry_at;
	if ((rc = store_op_strdup(op, error, &op->a.outbox_failed.error)) != SB_OK)
		goto out;
	return store_op_submit(s, op);
out:
	store_op_free(op);
	return rc;
}

void store_reply_outbox_failed(struct store_op *op)
{
	if (op->a.outbox_failed.cb)
		op->a.outbox_failed.cb(op->ud, op->rc);
}

/* ---- both ---- */

int store_stats(struct store *s, store_stats_cb cb, void *ud)
{
	struct store_op *op = NULL;
	int rc = store_op_new(s, STORE_OP_STATS, ud, &op);

	if (rc != SB_OK)
		return rc;
	op->a.stats.cb = cb;
	return store_op_submit(s, op);
}

void store_reply_stats(struct store_op *op)
{
	if (op->a.stats.cb)
		op->a.stats.cb(op->ud, op->rc, op->rc == SB_OK ? &op->a.stats.st : NULL);
}

int store_recover(struct store *s, store_recover_cb cb, void *ud)
{
	struct store_op *op = NULL;
	int rc = store_op_new(s, STORE_OP_RECOVER, ud, &op);

	if (rc != SB_OK)
		return rc;
	op->a.recover.cb = cb;
	return store_op_submit(s, op);
}

void store_reply_recover(struct store_op *op)
{
	const struct store_args_recover *a = &op->a.recover;
	bool ok = op->rc == SB_OK;

	if (a->cb)
		a->cb(op->ud, op->rc, ok ? a->inbox : 0, ok ? a->outbox : 0);
}
