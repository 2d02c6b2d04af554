/*
 * ops_cron.c - cron jobs and their run history (gateway/sched/scheduler.c).
 * Argument checks and copies, and the replies.
 */
#include <stdbool.h>

#include "gateway/core/err.h"
#include "gateway/store/store.h"
#include "gateway/store/store_backend.h"

int store_cron_job_put(struct store *s, const struct store_cron_job *j, store_done_cb cb, void *ud)
{
	struct store_cron_job *c;
	struct store_op *op = NULL;
	int rc = SB_ERR_INVAL;

	if (!j || !j->id || !j->spec || !j->state || !j->source)
		goto out;
	if ((rc = store_op_new(s, STORE_OP_CRON_JOB_PUT, ud, &op)) != SB_OK)
		goto out;
	op->a.cron_job_put.cb = cb;
	c = &op->a.cron_job_put.j;
	c->created_at = j->created_at;
	if ((rc = store_op_strdup(op, j->id, &c->id)) != SB_OK ||
	    (rc = store_op_strdup(op, j->spec, &c->spec)) != SB_OK ||
	    (rc = store_op_strdup(op, j->state, &c->state)) != SB_OK ||
	    (rc = store_op_strdup(op, j->source, &c->source)) != SB_OK)
		goto out;
	return store_op_submit(s, op);
out:
	store_op_free(op);
	return rc;
}

void store_reply_cron_job_put(struct store_op *op)
{
	if (op->a.cron_job_put.cb)
		op->a.cron_job_put.cb(op->ud, op->rc);
}

int store_cron_job_delete(struct store *s, const char *id, store_done_cb cb, void *ud)
{
	struct store_op *op = NULL;
	int rc = SB_ERR_INVAL;

	if (!id)
		goto out;
	if ((rc = store_op_new(s, STORE_OP_CRON_JOB_DELETE, ud, &op)) != SB_OK)
		goto out;
	op->a.cron_job_delete.cb = cb;
	if ((rc = store_op_strdup(op, id, &op->a.cron_job_delete.id)) != SB_OK)
		goto out;
	return store_op_submit(s, op);
out:
	store_op_free(op);
	return rc;
}

void store_reply_cron_job_delete(struct store_op *op)
{
	if (op->a.cron_job_delete.cb)
		op->a.cron_job_delete.cb(op->ud, op->rc);
}

int store_cron_job_list(struct store *s, store_cron_jobs_cb cb, void *ud)
{
	struct store_op *op = NULL;
	int rc = store_op_new(s, STORE_OP_CRON_JOB_LIST, ud, &op);

	if (rc != SB_OK)
		return rc;
	op->a.cron_job_list.cb = cb;
	return store_op_submit(s, op);
}

void store_reply_cron_job_list(struct store_op *op)
{
	const struct store_args_cron_job_list *a = &op->a.cron_job_list;
	bool ok = op->rc == SB_OK;

	if (a->cb)
		a->cb(op->ud, op->rc, ok ? a->v : NULL, ok ? a->n : 0);
}

int store_cron_run_add(struct store *s, const struct store_cron_run *r, size_t keep,
                       store_put_cb cb, void *ud)
{
	struct store_cron_run *c;
	struct store_op *op = NULL;
	int rc = SB_ERR_INVAL;

	if (!r || !r->job_id || !r->status || keep < 1 || keep > STORE_LIST_MAX)
		goto out;
	if ((rc = store_op_new(s, STORE_OP_CRON_RUN_ADD, ud, &op)) != SB_OK)
		goto out;
	op->a.cron_run_add.cb = cb;
	op->a.cron_run_add.keep = keep;
	c = &op->a.cron_run_add.r;
	*c = *r;
	if ((rc = store_op_strdup(op, r->job_id, &c->job_id)) != SB_OK ||
	    (rc = store_op_strdup(op, r->status, &c->status)) != SB_OK ||
	    (rc = store_op_strdup(op, r->detail, &c->detail)) != SB_OK ||
	    (rc = store_op_strdup(op, r->session_key, &c->session_key)) != SB_OK)
		goto out;
	return store_op_submit(s, op);
out:
	store_op_free(op);
	return rc;
}

void store_reply_cron_run_add(struct store_op *op)
{
	const struct store_args_cron_run_add *a = &op->a.cron_run_add;

	if (a->cb)
		a->cb(op->ud, op->rc, op->rc == SB_OK ? a->id : 0, false);
}

int store_cron_run_list(struct store *s, const char *job_id, size_t limit, store_cron_runs_cb cb,
                        void *ud)
{
	struct store_op *op = NULL;
	int rc = SB_ERR_INVAL;

	if (limit < 1 || limit > STORE_LIST_MAX)
		goto out;
	if ((rc = store_op_new(s, STORE_OP_CRON_RUN_LIST, ud, &op)) != SB_OK)
		goto out;
	op->a.cron_run_list.cb = cb;
	op->a.cron_run_list.limit = limit;
	if ((rc = store_op_strdup(op, job_id, &op->a.cron_run_list.job_id)) != SB_OK)
		goto out;
	return store_op_submit(s, op);
out:
	store_op_free(op);
	return rc;
}

void store_reply_cron_run_list(struct store_op *op)
{
	const struct store_args_cron_run_list *a = &op->a.cron_run_list;
	bool ok = op->rc == SB_OK;

	if (a->cb)
		a->cb(op->ud, op->rc, ok ? a->v : NULL, ok ? a->n : 0);
}
