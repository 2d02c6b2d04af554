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

#include "channels/channel.h"
#include "gateway/core/err.h"

struct http_channel {
	struct channel base;
};

struct http_send {
	uv_timer_t timer;
	channel_send_cb cb;
	void *ud;
	char *msg_id;
};

static int http_create(struct channel **out, const struct host *host, const char *account,
                       const void *config)
{
	struct http_channel *h = calloc(1, sizeof *h);

	(void)config; /* no settings: the endpoint has its own (openai_api) */
	if (!h)
		return SB_ERR_NOMEM;
	h->base.host = host;
	snprintf(h->base.account, sizeof h->base.account, "%s", account ? account : "default");
	*out = &h->base;
	return SB_OK;
}

static void http_destroy(struct channel *c)
{
	free(c);
}

static void http_send_closed(uv_handle_t *h)
{
	struct http_send *s = h->data;

	free(s->msg_id);
	free(s);
}

static void http_send_fire(uv_timer_t *t)
{
	struct http_send *s = t->data;
	struct channel_send_result res = {
	    .rc = SB_OK, .retry_after_ms = -1, .channel_msg_id = s->msg_id};

	s->cb(s->ud, &res);
	uv_close((uv_handle_t *)t, http_send_closed);
}

/* The callback runs later, from a timer, as the contract requires. */
static int http_send(struct channel *c, const struct channel_outbound *msg, channel_send_cb cb,
                     void *ud)
{
	struct http_send *s = calloc(1, sizeof *s);

	if (!s)
		return SB_ERR_NOMEM;
	s->msg_id = strdup(msg->idempotency_key);
	if (!s->msg_id) {
		free(s);
		return SB_ERR_NOMEM;
	}
	s->cb = cb;
	s->ud = ud;
	uv_timer_init(c->host->loop, &s->timer);
	s->timer.data = s;
	uv_timer_start(&s->timer, http_send_fire, 0, 0);
	return SB_OK;
}

const struct channel_ops channel_http_ops = {
    .name = "http",
    .create = http_create,
    .destroy = http_destroy,
    .send = http_send,
};
