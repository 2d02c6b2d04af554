/*
 * message.c - the message tool: sends text to a conversation through the
 * durable outbox (host->deliver).
 *
 * By default the message goes where the run's message came from; "target"
 * ("channel:destination") sends elsewhere. Each call has a fresh idempotency
 * key, so a retried put of the same call is not sent twice. The outbound
 * payload is {"text": ...}.
 */
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "agents/tool.h"
#include "agents/tools/common.h"
#include "gateway/core/buf.h"
#include "gateway/core/err.h"

#define MESSAGE_KEY_BYTES 16

struct message_run {
	struct tool_run run; /* first */
	tool_done_cb done;
	void *ud;
	bool finished;
	/* What the outbound message points at, kept until deliver answers. */
	char key[MESSAGE_KEY_BYTES * 2 + 1];
	char *channel;
	char *account;
	char *target;
	char *payload;
};

static void message_free(struct message_run *m)
{
	free(m->channel);
	free(m->account);
	free(m->target);
	free(m->payload);
	free(m);
}

static void message_delivered(void *ud, int rc, int64_t outbox_id, bool duplicate)
{
	struct message_run *m = ud;
	struct buf b;
	char *text;

	if (!m->finished) {
		m->finished = true;
		buf_init(&b, 1024);
		if (rc)
			(void)buf_printf(&b, "could not queue the message: %s", sb_strerror(rc));
		else
			(void)buf_printf(&b, "sent to %s:%s (outbox id %lld%s)", m->channel,
			                 m->target, (long long)outbox_id,
			                 duplicate ? ", already queued" : "");
		text = buf_steal(&b);
		m->done(m->ud, text ? SB_OK : SB_ERR_NOMEM, text, rc != SB_OK);
	}
	message_free(m);
}

static void message_cancel(struct tool_run *run)
{
	struct message_run *m = (struct message_run *)run;

	if (m->finished)
		return;
	/* The put is on its way and may still land; m lives until deliver
	 * answers. */
	m->finished = true;
	m->done(m->ud, SB_ERR_ABORTED, strdup("cancelled"), true);
}

static int message_call(const struct tool_ctx *ctx, const json_t *input, tool_done_cb done,
                        void *ud, struct tool_run **run)
{
	const struct host *host = ctx->host;
	const char *to = tool_in_str(input, "target", NULL), *colon = NULL;
	struct host_outbound o;
	struct message_run *m = NULL;
	unsigned char raw[MESSAGE_KEY_BYTES];
	json_t *payload = NULL;
	int rc = SB_ERR_NOMEM;

	if (!host || !host->deliver)
		return tool_job_error(ctx->loop, "no channel to send to", done, ud, run);
	if (!to && (!ctx->channel || !ctx->target))
		return tool_job_error(ctx->loop,
		                      "no channel to send to: this run did not come from a "
		                      "conversation; give target as \"channel:destination\"",
		                      done, ud, run);
	if (to) {
		colon = strchr(to, ':');
		if (!colon || colon == to || colon[1] == '\0')
			return tool_job_error(ctx->loop,
			                      "target must be \"channel:destination\", such as "
			                      "\"telegram:12345\"",
			                      done, ud, run);
	}
	m = calloc(1, sizeof *m);
	if (!m)
		goto out;
	m->run.cancel = message_cancel;
	m->done = done;
	m->ud = ud;
	if (to) {
		m->channel = strndup(to, (size_t)(colon - to));
		m->target = strdup(colon + 1);
		/* The run's account only when it is the run's channel. */
		if (ctx->channel && ctx->account &&
		    strcmp(m->channel ? m->channel : "", ctx->channel) == 0)
			m->account = strdup(ctx->account);
	} else {
		m->channel = strdup(ctx->channel);
		m->target = strdup(ctx->target);
		if (ctx->account)
			m->account = strdup(ctx->account);
	}
	if (!m->channel || !m->target || (m->account == NULL && ctx->account && !to))
		goto out;
	if (sodium_init() < 0) {
		rc = SB_ERR_IO;
		goto out;
	}
	randombytes_buf(raw, sizeof raw);
	sodium_bin2hex(m->key, sizeof m->key, raw, sizeof raw);
	payload = json_pack("{s:s}", "text", tool_in_str(input, "text", ""));
	if (!payload || !(m->payload = json_dumps(payload, JSON_COMPACT)))
		goto out;
	memset(&o, 0, sizeof o);
	o.idempotency_key = m->key;
	o.channel = m->channel;
	o.account = m->account;
	o.target = m->target;
	o.payload = m->payload;
	rc = host->deliver(host->ctx, &o, message_delivered, m);
	if (rc != SB_OK) {
		char why[256];

		snprintf(why, sizeof why, "could not queue the message: %s", sb_strerror(rc));
		rc = tool_job_error(ctx->loop, why, done, ud, run);
		goto out;
	}
	if (run)
		*run = &m->run;
	m = NULL;
	rc = SB_OK;
out:
	json_decref(payload);
	if (m)
		message_free(m);
	return rc;
}

const struct tool_def tool_message = {
    .name = "message",
    .description = "Sends a message now, before the run ends: to the conversation this run "
                   "came from, or to target (\"channel:destination\"). For progress reports "
                   "and replies elsewhere; the final answer is sent without this tool.",
    .input_schema = "{\"type\":\"object\",\"properties\":{"
                    "\"text\":{\"type\":\"string\",\"minLength\":1,"
                    "\"description\":\"the message\"},"
                    "\"target\":{\"type\":\"string\",\"minLength\":3,"
                    "\"description\":\"\\\"channel:destination\\\"; default: this "
                    "conversation\"}},"
                    "\"required\":[\"text\"],\"additionalProperties\":false}",
    .read_only = tool_never,
    .concurrency_safe = tool_never,
    .max_result_chars = 0,
    .call = message_call,
};
