/*
 * store.c - the store's public functions: the backend by name, and each
 * operation handed to the backend of the store it is called on.
 */
#include "gateway/store/store.h"

#include <string.h>

#include "gateway/core/err.h"

static const struct store_ops *const store_backends[] = {
    &store_sqlite_ops,
};

const struct store_ops *store_backend(const char *name)
{
	for (size_t i = 0; i < sizeof store_backends / sizeof *store_backends; i++)
		if (strcmp(store_backends[i]->name, name) == 0)
			return store_backends[i];
	return NULL;
}

int store_open(struct store **out, uv_loop_t *loop, const struct store_options *opt)
{
	const struct store_ops *ops;

	if (out)
		*out = NULL;
	if (!opt)
		return SB_ERR_INVAL;
	ops = store_backend(opt->backend ? opt->backend : "sqlite");
	if (!ops)
		return SB_ERR_CONFIG;
	return ops->open(out, loop, opt);
}

void store_close(struct store *s)
{
	if (s)
		s->ops->close(s);
}

const char *store_backend_name(const struct store *s)
{
	return s->ops->name;
}

int store_inbox_put(struct store *s, const struct store_inbox_new *m, store_put_cb cb, void *ud)
{
	return s->ops->inbox_put(s, m, cb, ud);
}

int store_inbox_claim(struct store *s, size_t max, int64_t lease_ms, store_inbox_cb cb, void *ud)
{
	return s->ops->inbox_claim(s, max, lease_ms, cb, ud);
}

int store_inbox_done(struct store *s, int64_t inbox_id, const struct store_outbox_new *replies,
                     size_t n, store_done_cb cb, void *ud)
{
	return s->ops->inbox_done(s, inbox_id, replies, n, cb, ud);
}

int store_inbox_release(struct store *s, int64_t inbox_id, store_done_cb cb, void *ud)
{
	return s->ops->inbox_release(s, inbox_id, cb, ud);
}

int store_outbox_put(struct store *s, const struct store_outbox_new *m, store_put_cb cb, void *ud)
{
	return s->ops->outbox_put(s, m, cb, ud);
}

int store_outbox_claim_due(struct store *s, size_t max, int64_t lease_ms, store_outbox_cb cb,
                           void *ud)
{
	return s->ops->outbox_claim_due(s, max, lease_ms, cb, ud);
}

int store_outbox_done(struct store *s, int64_t id, const char *channel_msg_id, store_done_cb cb,
                      void *ud)
{
	return s->ops->outbox_done(s, id, channel_msg_id, cb, ud);
}

int store_outbox_failed(struct store *s, int64_t id, const char *error, int64_t retry_at,
                        store_done_cb cb, void *ud)
{
	return s->ops->outbox_failed(s, id, error, retry_at, cb, ud);
}

int store_kv_get(struct store *s, const char *ns, const char *key, store_kv_cb cb, void *ud)
{
	return s->ops->kv_get(s, ns, key, cb, ud);
}

int store_kv_put(struct store *s, const char *ns, const char *key, const char *value,
                 store_done_cb cb, void *ud)
{
	return s->ops->kv_put(s, ns, key, value, cb, ud);
}

int store_session_get(struct store *s, const char *key, store_session_cb cb, void *ud)
{
	return s->ops->session_get(s, key, cb, ud);
}

int store_session_put(struct store *s, const struct store_session *sess, store_done_cb cb, void *ud)
{
	return s->ops->session_put(s, sess, cb, ud);
}

int store_stats(struct store *s, store_stats_cb cb, void *ud)
{
	return s->ops->stats(s, cb, ud);
}

int store_recover(struct store *s, store_recover_cb cb, void *ud)
{
	return s->ops->recover(s, cb, ud);
}

int store_pairing_request(struct store *s, const char *channel, const char *account,
                          const char *sender_id, store_pairing_cb cb, void *ud)
{
	return s->ops->pairing_request(s, channel, account, sender_id, cb, ud);
}

int store_pairing_list(struct store *s, const char *channel, store_pairing_list_cb cb, void *ud)
{
	return s->ops->pairing_list(s, channel, cb, ud);
}

int store_pairing_approve(struct store *s, const char *channel, const char *code,
                          store_pairing_cb cb, void *ud)
{
	return s->ops->pairing_approve(s, channel, code, cb, ud);
}

int store_pairing_deny(struct store *s, const char *channel, const char *code, store_pairing_cb cb,
                       void *ud)
{
	return s->ops->pairing_deny(s, channel, code, cb, ud);
}

int store_allow_check(struct store *s, const char *channel, const char *account,
                      const char *sender_id, store_allow_cb cb, void *ud)
{
	return s->ops->allow_check(s, channel, account, sender_id, cb, ud);
}

int store_allow_list(struct store *s, const char *channel, store_allow_list_cb cb, void *ud)
{
	return s->ops->allow_list(s, channel, cb, ud);
}

int store_allow_remove(struct store *s, const char *channel, const char *account,
                       const char *sender_id, store_done_cb cb, void *ud)
{
	return s->ops->allow_remove(s, channel, account, sender_id, cb, ud);
}

int store_session_list(struct store *s, const char *agent_id, size_t limit,
                       store_session_list_cb cb, void *ud)
{
	return s->ops->session_list(s, agent_id, limit, cb, ud);
}

int store_device_request(struct store *s, const struct store_device *d, store_device_cb cb,
                         void *ud)
{
	return s->ops->device_request(s, d, cb, ud);
}

int store_device_get(struct store *s, const char *device_id, const char *token_hash,
                     store_device_cb cb, void *ud)
{
	return s->ops->device_get(s, device_id, token_hash, cb, ud);
}

int store_device_list(struct store *s, store_device_list_cb cb, void *ud)
{
	return s->ops->device_list(s, cb, ud);
}

int store_device_approve(struct store *s, const char *device_id, store_device_cb cb, void *ud)
{
	return s->ops->device_approve(s, device_id, cb, ud);
}

int store_device_set_token(struct store *s, const char *device_id, const char *token_hash,
                           store_done_cb cb, void *ud)
{
	return s->ops->device_set_token(s, device_id, token_hash, cb, ud);
}

int store_device_revoke(struct store *s, const char *device_id, store_done_cb cb, void *ud)
{
	return s->ops->device_revoke(s, device_id, cb, ud);
}

int store_cron_job_put(struct store *s, const struct store_cron_job *j, store_done_cb cb, void *ud)
{
	return s->ops->cron_job_put(s, j, cb, ud);
}

int store_cron_job_delete(struct store *s, const char *id, store_done_cb cb, void *ud)
{
	return s->ops->cron_job_delete(s, id, cb, ud);
}

int store_cron_job_list(struct store *s, store_cron_jobs_cb cb, void *ud)
{
	return s->ops->cron_job_list(s, cb, ud);
}

int store_cron_run_add(struct store *s, const struct store_cron_run *r, size_t keep,
                       store_put_cb cb, void *ud)
{
	return s->ops->cron_run_add(s, r, keep, cb, ud);
}

int store_cron_run_list(struct store *s, const char *job_id, size_t limit, store_cron_runs_cb cb,
                        void *ud)
{
	return s->ops->cron_run_list(s, job_id, limit, cb, ud);
}
