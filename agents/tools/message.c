/*
 * message.c - the message tool: sends text to a conversation through the
 * durable outbox (host->deliver).
 *
 * By default the message goes where the run's message came from; "target"
 * ("channel:destination") sends elsewhere. The outbound payload is
 * {"text": ...}. Its idempotency key derives from the run, the message and
 * the identical messages the run sent before (struct tool_sends, tool.h),
 * so a retried put is one entry and a run replayed after a crash does not
 * send a message twice; a run with no inbox entry gets a random key.
 */
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agents/tool.h"
#include "agents/tools/common.h"
#include "gateway/core/buf.h"
#include "gateway/core/err.h"
#include "gateway/core/jsonw.h"
#include "gateway/core/log.h"

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
	struct tool_sends *sends; /* noted when queued; NULL once cancelled */
	unsigned char digest[16];
};

/* What a message is: where it goes and what it says. */
static void message_digest(const char *channel, const char *account, const char *target,
                           const char *text, unsigned char out[16])
{
	crypto_generichash_state st;
	const unsigned char nul = 0;

	crypto_generichash_init(&st, NULL, 0, 16);
	crypto_generichash_update(&st, (const unsigned char *)channel, strlen(channel) + 1);
	crypto_generichash_update(&st, (const unsigned char *)(account ? account : ""),
	                          strlen(account ? account : ""));
	crypto_generichash_update(&st, &nul, 1);
	crypto_generichash_update(&st, (const unsigned char *)target, strlen(target) + 1);
	crypto_generichash_update(&st, (const unsigned char *)text, strlen(text));
	crypto_generichash_final(&st, out, 16);
}

/* Where a call's message goes: the run's conversation, or input's target
 * ("channel:destination"; the run's account only on the run's channel).
 * Strings are new. SB_ERR_INVAL when there is nowhere to send. */
static int message_where(const struct tool_ctx *ctx, const json_t *input, char **channel,
                         char **account, char **target)
{
	const char *to = tool_in_str(input, "target", NULL), *colon = NULL;

	*channel = *account = *target = NULL;
	if (to) {
		colon = strchr(to, ':');
		if (!colon || colon == to || colon[1] == '\0')
			return SB_ERR_INVAL;
		*channel = strndup(to, (size_t)(colon - to));
		*target = strdup(colon + 1);
		if (*channel && ctx->channel && ctx->account && strcmp(*channel, ctx->channel) == 0)
			*account = strdup(ctx->account);
	} else {
		if (!ctx->channel || !ctx->target)
			return SB_ERR_INVAL;
		*channel = strdup(ctx->channel);
		*target = strdup(ctx->target);
		if (ctx->account)
			*account = strdup(ctx->account);
	}
	if (!*channel || !*target || (ctx->account && !*account && !to)) {
		free(*channel);
		free(*account);
		free(*target);
		*channel = *account = *target = NULL;
		return SB_ERR_NOMEM;
	}
	return SB_OK;
}

static size_t sends_count(const struct tool_sends *s, const unsigned char d[16])
{
	size_t c = 0;

	for (size_t i = 0; i < s->n; i++)
		c += memcmp(s->sent[i], d, 16) == 0;
	return c;
}

static int sends_note(struct tool_sends *s, const unsigned char d[16])
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 8;
		unsigned char(*p)[16] = realloc(s->sent, cap * sizeof *p);

		if (!p)
			return SB_ERR_NOMEM;
		s->sent = p;
		s->cap = cap;
	}
	memcpy(s->sent[s->n++], d, 16);
	return SB_OK;
}

void tool_sends_free(struct tool_sends *s)
{
	if (!s)
		return;
	free(s->sent);
	s->sent = NULL;
	s->n = s->cap = 0;
}

/* The result of tool_use id in msg (a user message of tool_result blocks):
 * true when there is one and it is not an error. */
static bool sends_result_ok(const json_t *msg, const char *id)
{
	const json_t *b;
	size_t i;

	json_array_foreach(json_object_get(msg, "content"), i, b)
	{
		const char *type = json_string_value(json_object_get(b, "type"));
		const char *use = json_string_value(json_object_get(b, "tool_use_id"));

		if (type && strcmp(type, "tool_result") == 0 && use && strcmp(use, id) == 0)
			return !json_is_true(json_object_get(b, "is_error"));
	}
	return false;
}

int tool_sends_from_history(struct tool_sends *s, const struct tool_ctx *ctx,
                            const json_t *history, size_t from)
{
	size_t n = json_array_size(history);

	for (size_t i = from; i + 1 < n; i++) {
		const json_t *m = json_array_get(history, i), *b;
		const char *role = json_string_value(json_object_get(m, "role"));
		size_t k;

		if (!role || strcmp(role, "assistant") != 0)
			continue;
		json_array_foreach(json_object_get(m, "content"), k, b)
		{
			const char *type = json_string_value(json_object_get(b, "type"));
			const char *name = json_string_value(json_object_get(b, "name"));
			const char *id = json_string_value(json_object_get(b, "id"));
			const json_t *input = json_object_get(b, "input");
			char *channel, *account, *target;
			unsigned char d[16];
			int rc;

			if (!type || strcmp(type, "tool_use") != 0 || !name ||
			    strcmp(name, "message") != 0 || !id ||
			    !sends_result_ok(json_array_get(history, i + 1), id))
				continue;
			rc = message_where(ctx, input, &channel, &account, &target);
			if (rc == SB_ERR_NOMEM)
				return rc;
			if (rc != SB_OK)
				continue;
			message_digest(channel, account, target, tool_in_str(input, "text", ""), d);
			free(channel);
			free(account);
			free(target);
			if (sends_note(s, d) != SB_OK)
				return SB_ERR_NOMEM;
		}
	}
	return SB_OK;
}

/* The key of the message with digest d: random without a run. */
static void message_key(const struct tool_sends *s, const unsigned char d[16],
                        char key[MESSAGE_KEY_BYTES * 2 + 1])
{
	unsigned char raw[MESSAGE_KEY_BYTES];

	if (!s || s->run_id <= 0) {
		randombytes_buf(raw, sizeof raw);
	} else {
		crypto_generichash_state st;
		char head[64];
		int len = snprintf(head, sizeof head, "message %lld %zu ", (long long)s->run_id,
		                   sends_count(s, d));

		crypto_generichash_init(&st, NULL, 0, sizeof raw);
		crypto_generichash_update(&st, (const unsigned char *)head, (size_t)len);
		crypto_generichash_update(&st, d, 16);
		crypto_generichash_final(&st, raw, sizeof raw);
	}
	sodium_bin2hex(key, MESSAGE_KEY_BYTES * 2 + 1, raw, sizeof raw);
}

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
		if (rc == SB_OK && m->sends && sends_note(m->sends, m->digest) != SB_OK)
			log_warn("message", "cannot note a sent message: a replay may send it again");
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
	m->sends = NULL; /* the run is going away */
	m->done(m->ud, SB_ERR_ABORTED, strdup("cancelled"), true);
}

static int message_call(const struct tool_ctx *ctx, const json_t *input, tool_done_cb done,
                        void *ud, struct tool_run **run)
{
	const struct host *host = ctx->host;
	const char *to = tool_in_str(input, "target", NULL);
	struct host_outbound o;
	struct message_run *m = NULL;
	json_t *payload = NULL;
	int rc = SB_ERR_NOMEM;

	if (!host || !host->deliver)
		return tool_job_error(ctx->loop, "no channel to send to", done, ud, run);
	if (!to && (!ctx->channel || !ctx->target))
		return tool_job_error(ctx->loop,
		                      "no channel to send to: this run did not come from a "
		                      "conversation; give target as \"channel:destination\"",
		                      done, ud, run);
	m = calloc(1, sizeof *m);
	if (!m)
		goto out;
	m->run.cancel = message_cancel;
	m->done = done;
	m->ud = ud;
	rc = message_where(ctx, input, &m->channel, &m->account, &m->target);
	if (rc == SB_ERR_INVAL) {
		free(m);
		return tool_job_error(ctx->loop,
		                      "target must be \"channel:destination\", such as "
		                      "\"telegram:12345\"",
		                      done, ud, run);
	}
	if (rc != SB_OK)
		goto out;
	rc = SB_ERR_NOMEM;
	if (sodium_init() < 0) {
		rc = SB_ERR_IO;
		goto out;
	}
	message_digest(m->channel, m->account, m->target, tool_in_str(input, "text", ""),
	               m->digest);
	m->sends = ctx->sends;
	message_key(ctx->sends, m->digest, m->key);
	payload = json_pack("{s:s}", "text", tool_in_str(input, "text", ""));
	if (!payload || !(m->payload = jsonw_dumps(payload, 0, NULL)))
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
