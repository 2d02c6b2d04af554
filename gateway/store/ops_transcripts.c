/*
 * ops_transcripts.c - transcript bytes kept until their file is synced
 * (gateway/pipeline/xsync.c). Argument checks and copies, and the replies.
 */
#include "gateway/core/err.h"
#include "gateway/store/store.h"
#include "gateway/store/store_backend.h"

int store_transcript_put(struct store *s, const struct store_transcript_lines *l, store_put_cb cb,
                         void *ud)
{
	struct store_args_transcript_put *a;
	struct store_op *op = NULL;
	int rc = SB_ERR_INVAL;

	if (!l || !l->path || !l->bytes || l->offset < 0 || l->len < 1 ||
	    l->len > STORE_TRANSCRIPT_BYTES_MAX)
		goto out;
	if ((rc = store_op_new(s, STORE_OP_TRANSCRIPT_PUT, ud, &op)) != SB_OK)
		goto out;
	a = &op->a.transcript_put;
	a->cb = cb;
	a->l.offset = l->offset;
	a->l.len = l->len;
	if ((rc = store_op_strdup(op, l->path, &a->l.path)) != SB_OK ||
	    (rc = store_op_memdup(op, l->bytes, l->len, &a->l.bytes)) != SB_OK)
		goto out;
	return store_op_submit(s, op);
out:
	store_op_free(op);
	return rc;
}

void store_reply_transcript_put(struct store_op *op)
{
	const struct store_args_transcript_put *a = &op->a.transcript_put;

	if (a->cb)
		a->cb(op->ud, op->rc, op->rc == SB_OK ? a->id : 0, false);
}

int store_transcript_trim(struct store *s, int64_t after, int64_t upto, store_done_cb cb, void *ud)
{
	struct store_op *op = NULL;
	int rc = SB_ERR_INVAL;

	if (after < 0 || upto <= after)
		goto out;
	if ((rc = store_op_new(s, STORE_OP_TRANSCRIPT_TRIM, ud, &op)) != SB_OK)
		goto out;
	op->a.transcript_trim.cb = cb;
	op->a.transcript_trim.after = after;
	op->a.transcript_trim.upto = upto;
	op->lazy_ms = STORE_LAZY_KV_MS;
	return store_op_submit(s, op);
out:
	store_op_free(op);
	return rc;
}

void store_reply_transcript_trim(struct store_op *op)
{
	if (op->a.transcript_trim.cb)
		op->a.transcript_trim.cb(op->ud, op->rc);
}

int store_transcript_list(struct store *s, store_transcript_list_cb cb, void *ud)
{
	struct store_op *op = NULL;
	int rc = store_op_new(s, STORE_OP_TRANSCRIPT_LIST, ud, &op);

	if (rc != SB_OK)
		return rc;
	op->a.transcript_list.cb = cb;
	return store_op_submit(s, op);
}

void store_reply_transcript_list(struct store_op *op)
{
	const struct store_args_transcript_list *a = &op->a.transcript_list;
	bool ok = op->rc == SB_OK;

	if (a->cb)
		a->cb(op->ud, op->rc, ok ? a->v : NULL, ok ? a->n : 0);
}
