/*
 * ops_identity.c - who may talk to the gateway: pairing requests, the allow
 * list they feed, and the control plane's devices. Argument checks and
 * copies, and the replies.
 */
#include <ctype.h>
#include <stdbool.h>

#include "gateway/core/err.h"
#include "gateway/store/store.h"
#include "gateway/store/store_backend.h"

/* Copies channel, account and sender_id (each may be NULL) into p. */
static int store_copy_sender(struct store_op *op, struct store_pairing *p, const char *channel,
                             const char *account, const char *sender_id)
{
	int rc;

	if ((rc = store_op_strdup(op, channel, &p->channel)) != SB_OK ||
	    (rc = store_op_strdup(op, account, &p->account)) != SB_OK ||
	    (rc = store_op_strdup(op, sender_id, &p->sender_id)) != SB_OK)
		return rc;
	return SB_OK;
}

/* ---- pairing ---- */

int store_pairing_request(struct store *s, const char *channel, const char *account,
                          const char *sender_id, store_pairing_cb cb, void *ud)
{
	struct store_op *op = NULL;
	int rc = SB_ERR_INVAL;

	if (!channel || !account || !sender_id)
		goto out;
	if ((rc = store_op_new(s, STORE_OP_PAIRING_REQUEST, ud, &op)) != SB_OK)
		goto out;
	op->a.pairing_request.cb = cb;
	rc = store_copy_sender(op, &op->a.pairing_request.p, channel, account, sender_id);
	if (rc != SB_OK)
		goto out;
	return store_op_submit(s, op);
out:
	store_op_free(op);
	return rc;
}

void store_reply_pairing_request(struct store_op *op)
{
	const struct store_args_pairing_request *a = &op->a.pairing_request;
	bool ok = op->rc == SB_OK;

	if (a->cb)
		a->cb(op->ud, op->rc, ok ? &a->p : NULL, ok && a->created);
}

int store_pairing_list(struct store *s, const char *channel, store_pairing_list_cb cb, void *ud)
{
	struct store_op *op = NULL;
	int rc = store_op_new(s, STORE_OP_PAIRING_LIST, ud, &op);

	if (rc != SB_OK)
		goto out;
	op->a.pairing_list.cb = cb;
	if ((rc = store_op_strdup(op, channel, &op->a.pairing_list.channel)) != SB_OK)
		goto out;
	return store_op_submit(s, op);
out:
	store_op_free(op);
	return rc;
}

void store_reply_pairing_list(struct store_op *op)
{
	const struct store_args_pairing_list *a = &op->a.pairing_list;
	bool ok = op->rc == SB_OK;

	if (a->cb)
		a->cb(op->ud, op->rc, ok ? a->v : NULL, ok ? a->n : 0);
}

/* Copies channel and the code, upper-cased (codes are typed by people). */
static int store_copy_code(struct store_op *op, struct store_pairing *p, const char *channel,
                           const char *code)
{
	int rc;

	if ((rc = store_op_strdup(op, channel, &p->channel)) != SB_OK ||
	    (rc = store_op_strdup(op, code, &p->code)) != SB_OK)
		return rc;
	for (char *c = (char *)p->code; *c; c++)
		*c = (char)toupper((unsigned char)*c);
	return SB_OK;
}

int store_pairing_approve(struct store *s, const char *channel, const char *code,
                          store_pairing_cb cb, void *ud)
{
	struct store_op *op = NULL;
	int rc = SB_ERR_INVAL;

	if (!channel || !code)
		goto out;
	if ((rc = store_op_new(s, STORE_OP_PAIRING_APPROVE, ud, &op)) != SB_OK)
		goto out;
	op->a.pairing_approve.cb = cb;
	if ((rc = store_copy_code(op, &op->a.pairing_approve.p, channel, code)) != SB_OK)
		goto out;
	return store_op_submit(s, op);
out:
	store_op_free(op);
	return rc;
}

void store_reply_pairing_approve(struct store_op *op)
{
	const struct store_args_pairing_approve *a = &op->a.pairing_approve;

	if (a->cb)
		a->cb(op->ud, op->rc, op->rc == SB_OK ? &a->p : NULL, false);
}

int store_pairing_deny(struct store *s, const char *channel, const char *code, store_pairing_cb cb,
                       void *ud)
{
	struct store_op *op = NULL;
	int rc = SB_ERR_INVAL;

	if (!channel || !code)
		goto out;
	if ((rc = store_op_new(s, STORE_OP_PAIRING_DENY, ud, &op)) != SB_OK)
		goto out;
	op->a.pairing_deny.cb = cb;
	if ((rc = store_copy_code(op, &op->a.pairing_deny.p, channel, code)) != SB_OK)
		goto out;
	return store_op_submit(s, op);
out:
	store_op_free(op);
	return rc;
}

void store_reply_pairing_deny(struct store_op *op)
{
	const struct store_args_pairing_deny *a = &op->a.pairing_deny;

	if (a->cb)
		a->cb(op->ud, op->rc, op->rc == SB_OK ? &a->p : NULL, false);
}

/* ---- the allow list ---- */

int store_allow_check(struct store *s, const char *channel, const char *account,
                      const char *sender_id, store_allow_cb cb, void *ud)
{
	struct store_args_allow_check *a;
	struct store_op *op = NULL;
	int rc = SB_ERR_INVAL;

	if (!channel || !account || !sender_id)
		goto out;
	if ((rc = store_op_new(s, STORE_OP_ALLOW_CHECK, ud, &op)) != SB_OK)
		goto out;
	a = &op->a.allow_check;
	a->cb = cb;
	if ((rc = store_op_strdup(op, channel, &a->channel)) != SB_OK ||
	    (rc = store_op_strdup(op, account, &a->account)) != SB_OK ||
	    (rc = store_op_strdup(op, sender_id, &a->sender_id)) != SB_OK)
		goto out;
	return store_op_submit(s, op);
out:
	store_op_free(op);
	return rc;
}

void store_reply_allow_check(struct store_op *op)
{
	const struct store_args_allow_check *a = &op->a.allow_check;

	if (a->cb)
		a->cb(op->ud, op->rc, op->rc == SB_OK && a->allowed);
}

int store_allow_list(struct store *s, const char *channel, store_allow_list_cb cb, void *ud)
{
	struct store_op *op = NULL;
	int rc = store_op_new(s, STORE_OP_ALLOW_LIST, ud, &op);

	if (rc != SB_OK)
		goto out;
	op->a.allow_list.cb = cb;
	if ((rc = store_op_strdup(op, channel, &op->a.allow_list.channel)) != SB_OK)
		goto out;
	return store_op_submit(s, op);
out:
	store_op_free(op);
	return rc;
}

void store_reply_allow_list(struct store_op *op)
{
	const struct store_args_allow_list *a = &op->a.allow_list;
	bool ok = op->rc == SB_OK;

	if (a->cb)
		a->cb(op->ud, op->rc, ok ? a->v : NULL, ok ? a->n : 0);
}

int store_allow_remove(struct store *s, const char *channel, const char *account,
                       const char *sender_id, store_done_cb cb, void *ud)
{
	struct store_args_allow_remove *a;
	struct store_op *op = NULL;
	int rc = SB_ERR_INVAL;

	if (!channel || !sender_id)
		goto out;
	if ((rc = store_op_new(s, STORE_OP_ALLOW_REMOVE, ud, &op)) != SB_OK)
		goto out;
	a = &op->a.allow_remove;
	a->cb = cb;
	if ((rc = store_op_strdup(op, channel, &a->channel)) != SB_OK ||
	    (rc = store_op_strdup(op, account, &a->account)) != SB_OK ||
	    (rc = store_op_strdup(op, sender_id, &a->sender_id)) != SB_OK)
		goto out;
	return store_op_submit(s, op);
out:
	store_op_free(op);
	return rc;
}

void store_reply_allow_remove(struct store_op *op)
{
	if (op->a.allow_remove.cb)
		op->a.allow_remove.cb(op->ud, op->rc);
}

/* ---- devices ---- */

/* The device callbacks also get the record with SB_ERR_EXISTS (approve of a
 * device approved already). */
static const struct store_device *store_device_result(const struct store_op *op,
                                                      const struct store_device *d)
{
	return op->rc == SB_OK || op->rc == SB_ERR_EXISTS ? d : NULL;
}

int store_device_request(struct store *s, const struct store_device *d, store_device_cb cb,
                         void *ud)
{
	struct store_device *c;
	struct store_op *op = NULL;
	int rc = SB_ERR_INVAL;

	if (!d || !d->device_id || !d->public_key)
		goto out;
	if ((rc = store_op_new(s, STORE_OP_DEVICE_REQUEST, ud, &op)) != SB_OK)
		goto out;
	op->a.device_request.cb = cb;
	c = &op->a.device_request.d;
	if ((rc = store_op_strdup(op, d->device_id, &c->device_id)) != SB_OK ||
	    (rc = store_op_strdup(op, d->public_key, &c->public_key)) != SB_OK ||
	    (rc = store_op_strdup(op, d->client_id, &c->client_id)) != SB_OK ||
	    (rc = store_op_strdup(op, d->platform, &c->platform)) != SB_OK ||
	    (rc = store_op_strdup(op, d->scopes, &c->scopes)) != SB_OK ||
	    (rc = store_op_strdup(op, d->remote_addr, &c->remote_addr)) != SB_OK)
		goto out;
	return store_op_submit(s, op);
out:
	store_op_free(op);
	return rc;
}

void store_reply_device_request(struct store_op *op)
{
	const struct store_args_device_request *a = &op->a.device_request;

	if (a->cb)
		a->cb(op->ud, op->rc, store_device_result(op, &a->d),
		      op->rc == SB_OK && a->created);
}

int store_device_get(struct store *s, const char *device_id, const char *token_hash,
                     store_device_cb cb, void *ud)
{
	struct store_args_device_get *a;
	struct store_op *op = NULL;
	int rc = SB_ERR_INVAL;

	if (!device_id == !token_hash)
		goto out;
	if ((rc = store_op_new(s, STORE_OP_DEVICE_GET, ud, &op)) != SB_OK)
		goto out;
	a = &op->a.device_get;
	a->cb = cb;
	if ((rc = store_op_strdup(op, device_id, &a->device_id)) != SB_OK ||
	    (rc = store_op_strdup(op, token_hash, &a->token_hash)) != SB_OK)
		goto out;
	return store_op_submit(s, op);
out:
	store_op_free(op);
	return rc;
}

void store_reply_device_get(struct store_op *op)
{
	const struct store_args_device_get *a = &op->a.device_get;

	if (a->cb)
		a->cb(op->ud, op->rc, store_device_result(op, &a->d), false);
}

int store_device_list(struct store *s, store_device_list_cb cb, void *ud)
{
	struct store_op *op = NULL;
	int rc = store_op_new(s, STORE_OP_DEVICE_LIST, ud, &op);

	if (rc != SB_OK)
		return rc;
	op->a.device_list.cb = cb;
	return store_op_submit(s, op);
}

void store_reply_device_list(struct store_op *op)
{
	const struct store_args_device_list *a = &op->a.device_list;
	bool ok = op->rc == SB_OK;

	if (a->cb)
		a->cb(op->ud, op->rc, ok ? a->v : NULL, ok ? a->n : 0);
}

int store_device_approve(struct store *s, const char *device_id, store_device_cb cb, void *ud)
{
	struct store_op *op = NULL;
	int rc = SB_ERR_INVAL;

	if (!device_id)
		goto out;
	if ((rc = store_op_new(s, STORE_OP_DEVICE_APPROVE, ud, &op)) != SB_OK)
		goto out;
	op->a.device_approve.cb = cb;
	if ((rc = store_op_strdup(op, device_id, &op->a.device_approve.device_id)) != SB_OK)
		goto out;
	return store_op_submit(s, op);
out:
	store_op_free(op);
	return rc;
}

void store_reply_device_approve(struct store_op *op)
{
	const struct store_args_device_approve *a = &op->a.device_approve;

	if (a->cb)
		a->cb(op->ud, op->rc, store_device_result(op, &a->d), false);
}

int store_device_set_token(struct store *s, const char *device_id, const char *token_hash,
                           store_done_cb cb, void *ud)
{
	struct store_args_device_set_token *a;
	struct store_op *op = NULL;
	int rc = SB_ERR_INVAL;

	if (!device_id || !token_hash)
		goto out;
	if ((rc = store_op_new(s, STORE_OP_DEVICE_SET_TOKEN, ud, &op)) != SB_OK)
		goto out;
	a = &op->a.device_set_token;
	a->cb = cb;
	if ((rc = store_op_strdup(op, device_id, &a->device_id)) != SB_OK ||
	    (rc = store_op_strdup(op, token_hash, &a->token_hash)) != SB_OK)
		goto out;
	return store_op_submit(s, op);
out:
	store_op_free(op);
	return rc;
}

void store_reply_device_set_token(struct store_op *op)
{
	if (op->a.device_set_token.cb)
		op->a.device_set_token.cb(op->ud, op->rc);
}

int store_device_revoke(struct store *s, const char *device_id, store_done_cb cb, void *ud)
{
	struct store_op *op = NULL;
	int rc = SB_ERR_INVAL;

	if (!device_id)
		goto out;
	if ((rc = store_op_new(s, STORE_OP_DEVICE_REVOKE, ud, &op)) != SB_OK)
		goto out;
	op->a.device_revoke.cb = cb;
	if ((rc = store_op_strdup(op, device_id, &op->a.device_revoke.device_id)) != SB_OK)
		goto out;
	return store_op_submit(s, op);
out:
	store_op_free(op);
	return rc;
}

void store_reply_device_revoke(struct store_op *op)
{
	if (op->a.device_revoke.cb)
		op->a.device_revoke.cb(op->ud, op->rc);
}
