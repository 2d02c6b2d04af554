/*
 * webchat.c - the web chat channel: messages typed into the control plane's
 * chat (chat.send) or the OpenAI-compatible endpoint.
 *
 * Inbound, the control plane ingests an envelope with channel "webchat" and
 * the session key as its peer. Outbound there is nothing to send: the reply
 * already reached every connected client as the run's streamed and final
 * events, so send records the delivery (the run id is the message id) and
 * reports success.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "channels/channel.h"
#include "gateway/core/err.h"

struct webchat {
	struct channel base;
};

struct webchat_send {
	uv_timer_t timer;
	channel_send_cb cb;
	void *ud;
	char *msg_id;
};

static int webchat_create(struct channel **out, const struct host *host, const char *account,
			  const void *config)
{
	struct webchat *w = calloc(1, sizeof *w);

	(void)config; /* web chat has only access settings, applied by routing */
	if (!w)
		return SB_ERR_NOMEM;
	w->base.host = host;
	snprintf(w->base.account, sizeof w->base.account, "%s", account ? account : "default");
	*out = &w->base;
	return SB_OK;
}

static void webchat_destroy(struct channel *c)
{
	free(c);
}

static void webchat_send_closed(uv_handle_t *h)
{
	struct webchat_send *s = h->data;

	free(s->msg_id);
	free(s);
}

static void webchat_send_fire(uv_timer_t *t)
{
	struct webchat_send *s = t->data;
	struct channel_send_result res = {
	    .rc = SB_OK, .retry_after_ms = -1, .channel_msg_id = s->msg_id};

	s->cb(s->ud, &res);
	uv_close((uv_handle_t *)t, webchat_send_closed);
}

static int webchat_send(struct channel *c, const struct channel_outbound *msg, channel_send_cb cb,
                        void *ud)
{
	struct webchat_send *s = calloc(1, sizeof *s);

	if (!s)
		return SB_ERR_NOMEM;
	s->cb = cb;
	s->ud = ud;
	s->msg_id = strdup(msg->idempotency_key);
	uv_timer_init(c->host->loop, &s->timer);
	s->timer.data = s;
	uv_timer_start(&s->timer, webchat_send_fire, 0, 0);
	return SB_OK;
}

const struct channel_ops channel_webchat_ops = {
    .name = "webchat",
    .create = webchat_create,
    .destroy = webchat_destroy,
    .send = webchat_send,
};
