/*
 * ops_state.c - keyed state: the kv table (channel cursors, scheduler
 * state) and sessions. Argument checks and copies, and the replies.
 */
#include <stdbool.h>

#include "gateway/core/err.h"
#include "gateway/store/store.h"
#include "gateway/store/store_backend.h"

/* ---- kv ---- */

int store_kv_get(struct store *s, const char *ns, const char *key, store_kv_cb cb, void *ud)
{
	struct store_args_kv_get *a;
	struct store_op *op = NULL;
	int rc = SB_ERR_INVAL;

	if (!ns || !key)
		goto out;
	if ((rc = store_op_new(s, STORE_OP_KV_GET, ud, &op)) != SB_OK)
		goto out;
	a = &op->a.kv_get;
	a->cb = cb;
	if ((rc = store_op_strdup(op, ns, &a->ns)) != SB_OK ||
	    (rc = store_op_strdup(op, key, &a->key)) != SB_OK)
		goto out;
	return store_op_submit(s, op);
out:
	store_op_free(op);
	return rc;
}

void store_reply_kv_get(struct store_op *op)
{
	const struct store_args_kv_get *a = &op->a.kv_get;

	if (a->cb)
		a->cb(op->ud, op->rc, op->rc == SB_OK ? a->value : NULL);
}

static int kv_put(struct store *s, const char *ns, const char *key, const char *value, bool lazy,
                  store_done_cb cb, void *ud)
{
	struct store_args_kv_put *a;
	struct store_op *op = NULL;
	int rc = SB_ERR_INVAL;

	if (!ns || !key)
		goto out;
	if ((rc = store_op_new(s, STORE_OP_KV_PUT, ud, &op)) != SB_OK)
		goto out;
	a = &op->a.kv_put;
	a->cb = cb;
	op->lazy_ms = lazy ? STORE_LAZY_KV_MS : 0;
	if ((rc = store_op_strdup(op, ns, &a->ns)) != SB_OK ||
	    (rc = store_op_strdup(op, key, &a->key)) != SB_OK ||
	    (rc = store_op_strdup(op, value, &a->value)) != SB_OK)
		goto out;
	return store_op_submit(s, op);
out:
	store_op_free(op);
	return rc;
}

int store_kv_put(struct store *s, const char *ns, const char *key, const char *value,
                 store_done_cb cb, void *ud)
{
	return kv_put(s, ns, key, value, false, cb, ud);
}

int store_kv_put_lazy(struct store *s, const char *ns, const char *key, const char *value,
                      store_done_cb cb, void *ud)
{
	return kv_put(s, ns, key, value, true, cb, ud);
}

void store_reply_kv_put(struct store_op *op)
{
	if (op->a.kv_put.cb)
		op->a.kv_put.cb(op->ud, op->rc);
}

/* ---- sessions ---- */

int store_session_get(struct store *s, const char *key, store_session_cb cb, void *ud)
{
	struct store_op *op = NULL;
	int rc = SB_ERR_INVAL;

	if (!key)
		goto out;
	if ((rc = store_op_new(s, STORE_OP_SESSION_GET, ud, &op)) != SB_OK)
		goto out;
	op->a.session_get.cb = cb;
	if ((rc = store_op_strdup(op, key, &op->a.session_get.sess.key)) != SB_OK)
		goto out;
	return store_op_submit(s, op);
out:
	store_op_free(op);
	return rc;
}

void store_reply_session_get(struct store_op *op)
{
	const struct store_args_session_get *a = &op->a.session_get;

	if (a->cb)
		a->cb(op->ud, op->rc, op->rc == SB_OK ? &a->sess : NULL);
}

int store_session_put(struct store *s, const struct store_session *sess, store_done_cb cb, void *ud)
{
	struct store_session *c;
	struct store_op *op = NULL;
	int rc = SB_ERR_INVAL;

	if (!sess || !sess->key || !sess->agent_id || !sess->session_id)
		goto out;
	if ((rc = store_op_new(s, STORE_OP_SESSION_PUT, ud, &op)) != SB_OK)
		goto out;
	op->a.session_put.cb = cb;
	c = &op->a.session_put.sess;
	c->updated_at = sess->updated_at;
	if ((rc = store_op_strdup(op, sess->key, &c->key)) != SB_OK ||
	    (rc = store_op_strdup(op, sess->agent_id, &c->agent_id)) != SB_OK ||
	    (rc = store_op_strdup(op, sess->session_id, &c->session_id)) != SB_OK ||
	    (rc = store_op_strdup(op, sess->meta, &c->meta)) != SB_OK)
		goto out;
	return store_op_submit(s, op);
out:
	store_op_free(op);
	return rc;
}

void store_reply_session_put(struct store_op *op)
{
	if (op->a.session_put.cb)
		op->a.session_put.cb(op->ud, op->rc);
}

int store_session_list(struct store *s, const char *agent_id, size_t limit,
                       store_session_list_cb cb, void *ud)
{
	struct store_op *op = NULL;
	int rc = SB_ERR_INVAL;

	if (limit < 1 || limit > STORE_LIST_MAX)
		goto out;
	if ((rc = store_op_new(s, STORE_OP_SESSION_LIST, ud, &op)) != SB_OK)
		goto out;
	op->a.session_list.cb = cb;
	op->a.session_list.limit = limit;
	if ((rc = store_op_strdup(op, agent_id, &op->a.session_list.agent_id)) != SB_OK)
		goto out;
	return store_op_submit(s, op);
out:
	store_op_free(op);
	return rc;
}

void store_reply_session_list(struct store_op *op)
{
	const struct store_args_session_list *a = &op->a.session_list;
	bool ok = op->rc == SB_OK;

	if (a->cb)
		a->cb(op->ud, op->rc, ok ? a->v : NULL, ok ? a->n : 0);
}
