/*
 * webchat.c - the web chat channel: messages typed into the control plane's
 * chat (chat.send). The OpenAI-compatible endpoint is a channel of its own,
 * "http" (channels/http.c).
 *
 * Inbound, the control plane ingests an envelope with channel "webchat" and
 * the session key as its peer and as route_session: web chat is a trusted
 * entry point that names its destination (envelope_channel_trusted).
 * Outbound there is nothing to send: the reply already reached every
 * connected client as the run's streamed and final events, so send records
 * the delivery, with the reply's idempotency key as the message id, and
 * reports success on the next loop turn.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "channels/adapter.h"
#include "channels/channel.h"
#include "gateway/core/err.h"

struct webchat {
	struct channel base;
};

static int webchat_create(struct channel **out, const struct host *host, const char *account,
                          const void *config)
{
	struct webchat *w = calloc(1, sizeof *w);

	(void)config; /* web chat has only access settings, applied by routing */
	if (!w)
		return SB_ERR_NOMEM;
	if (channel_init(&w->base, host, account) != SB_OK) {
		free(w);
		return SB_ERR_TOOBIG;
	}
	*out = &w->base;
	return SB_OK;
}

static void webchat_destroy(struct channel *c)
{
	free(c);
}

/* Nothing to send: the delivery is recorded, reported on the next loop
 * turn as the contract wants, with the reply's idempotency key as its id. */
static int webchat_send(struct channel *c, const struct channel_outbound *msg, channel_send_cb cb,
                        void *ud)
{
	struct channel_send_result res = {
	    .rc = SB_OK, .retry_after_ms = -1, .channel_msg_id = msg->idempotency_key};

	return channel_report_later(c->host, &res, cb, ud);
}

const struct channel_ops channel_webchat_ops = {
    .name = "webchat",
    .create = webchat_create,
    .destroy = webchat_destroy,
    .send = webchat_send,
};
