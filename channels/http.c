/*
 * http.c - the "http" channel: messages that came in through the gateway's
 * OpenAI-compatible endpoint (gateway/http/openai_api.c).
 *
 * Inbound, that endpoint ingests envelopes with channel "http" that name
 * their agent and session (route_agent, route_session: http is a trusted
 * entry point, see envelope_channel_trusted). Outbound there is nothing to
 * send: the reply went back in the HTTP response (or its event stream), so
 * send only records the delivery, with the reply's idempotency key as the
 * message id.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "channels/adapter.h"
#include "channels/channel.h"
#include "gateway/core/err.h"

struct http_channel {
	struct channel base;
};

static int http_create(struct channel **out, const struct host *host, const char *account,
                       const void *config)
{
	struct http_channel *h = calloc(1, sizeof *h);

	(void)config; /* no settings: the endpoint has its own (openai_api) */
	if (!h)
		return SB_ERR_NOMEM;
	if (channel_init(&h->base, host, account) != SB_OK) {
		free(h);
		return SB_ERR_TOOBIG;
	}
	*out = &h->base;
	return SB_OK;
}

static void http_destroy(struct channel *c)
{
	free(c);
}

/* Nothing to send: the delivery is recorded, reported on the next loop
 * turn as the contract wants, with the reply's idempotency key as its id. */
static int http_send(struct channel *c, const struct channel_outbound *msg, channel_send_cb cb,
                     void *ud)
{
	struct channel_send_result res = {
	    .rc = SB_OK, .retry_after_ms = -1, .channel_msg_id = msg->idempotency_key};

	return channel_report_later(c->host, &res, cb, ud);
}

const struct channel_ops channel_http_ops = {
    .name = "http",
    .create = http_create,
    .destroy = http_destroy,
    .send = http_send,
};
