/*
 * outbox.c - see outbox.h.
 */
#include "gateway/pipeline/outbox.h"

#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gateway/core/clock.h"
#include "gateway/core/crash.h"
#include "gateway/core/err.h"
#include "gateway/core/invariant.h"
#include "gateway/core/log.h"

/* A claimed entry stays invisible to other claims this long. A single
 * gateway releases every claim at start-up, so this only bounds a stuck send. */
#define OUTBOX_LEASE_MS (10LL * 60 * 1000)

struct outbox {
	struct outbox_options opt;
	uv_timer_t poll;
	size_t in_flight;
	struct outbox_send *sends; /* in flight, so that free can orphan them */
	bool claiming, kicked, draining, started;
	/* Entries inserted claimed (outbox_put_lease) are sent as soon as they
	 * are committed; only while nothing due can wait in the store, which a
	 * claim that came back short proves unless an entry was put pending
	 * (every such put is followed by a kick) since it was asked. */
	bool clean;
	uint64_t pending_puts; /* kicks: entries put pending */
	uint64_t claim_mark;   /* pending_puts when the running claim was asked */
	size_t reserved;       /* inserted claimed, not yet committed */
	size_t claim_asked;    /* the running claim's max */
};

/* One delivery in flight. When the outbox is freed first (a forced stop),
 * o becomes NULL and the late outcome is dropped: the entry stays
 * unconfirmed and is sent again, with the same idempotency key, at the next
 * start. */
struct outbox_send {
	struct outbox *o;
	struct outbox_send *prev, *next;
	int64_t id;
	int attempts;
	char *channel;
};

int64_t outbox_backoff_ms(const struct outbox_options *opt, int attempts, int64_t retry_after_ms)
{
	int64_t base = opt->backoff_base_ms > 0 ? opt->backoff_base_ms : 1000;
	int64_t max = opt->backoff_max_ms > 0 ? opt->backoff_max_ms : 300000;
	int64_t d = base;

	for (int i = 1; i < attempts && d < max; i++)
		d *= 2;
	if (d > max)
		d = max;
	/* ±10% jitter so that a burst of failures does not retry in step. */
	d += (int64_t)(randombytes_uniform((uint32_t)(d / 5 + 1))) - d / 10;
	if (retry_after_ms > d)
		d = retry_after_ms;
	return d;
}

static void outbox_claim(struct outbox *o);

static void outbox_send_unlink(struct outbox_send *s)
{
	struct outbox *o = s->o;

	if (!o)
		return;
	if (s->prev)
		s->prev->next = s->next;
	else
		o->sends = s->next;
	if (s->next)
		s->next->prev = s->prev;
	s->prev = s->next = NULL;
	SB_ASSERT(o->in_flight > 0, LOG_I("outbox_id", s->id));
	o->in_flight--;
	s->o = NULL;
}

static void outbox_send_free(struct outbox_send *s)
{
	outbox_send_unlink(s);
	free(s->channel);
	free(s);
}

static void outbox_recorded(void *ud, int rc)
{
	struct outbox_send *s = ud;
	struct outbox *o = s->o;

	if (rc)
		log_error("outbox", "cannot record a delivery's outcome", LOG_I("outbox_id", s->id),
		          LOG_S("error", sb_strerror(rc)));
	else
		SB_CRASH_POINT("outbox.recorded");
	outbox_send_free(s);
	/* A claim now finds what the full table kept waiting, or a retry. */
	if (o && !o->draining && !o->clean)
		outbox_claim(o);
}

static void outbox_sent(void *ud, const struct channel_send_result *res)
{
	struct outbox_send *s = ud;
	struct outbox *o = s->o;
	int max;
	int rc;

	if (!o) {
		log_warn("outbox",
		         "delivery outcome arrived after the outbox closed; "
		         "it will be sent again at the next start",
		         LOG_I("outbox_id", s->id), LOG_I("accepted", res->rc == SB_OK));
		outbox_send_free(s);
		return;
	}
	max = o->opt.max_attempts > 0 ? o->opt.max_attempts : 10;

	if (res->rc == SB_OK) {
		/* The channel accepted it and the "sent" mark is not committed:
		 * the one window no design closes (docs/architecture.md). */
		SB_CRASH_POINT("outbox.send.accepted");
		if (o->opt.metrics)
			o->opt.metrics->outbox_sent++;
		rc =
		    store_outbox_done(o->opt.store, s->id, res->channel_msg_id, outbox_recorded, s);
	} else {
		bool again = res->retryable && s->attempts < max;
		int64_t in =
		    again ? outbox_backoff_ms(&o->opt, s->attempts, res->retry_after_ms) : -1;
		int64_t at = again ? clock_wall_ms() + in : -1;

		log_warn("outbox",
		         again ? "delivery failed; will retry" : "delivery failed for good",
		         LOG_S("channel", s->channel), LOG_I("outbox_id", s->id),
		         LOG_I("attempt", s->attempts), LOG_I("max_attempts", max),
		         LOG_I("retry_in_ms", in), LOG_S("error", res->error ? res->error : ""));
		if (o->opt.metrics) {
			if (again)
				o->opt.metrics->outbox_retried++;
			else
				o->opt.metrics->outbox_failed++;
		}
		rc = store_outbox_failed(o->opt.store, s->id, res->error ? res->error : "failed",
		                         at, outbox_recorded, s);
	}
	if (rc)
		outbox_recorded(s, rc);
}

static void outbox_send_one(struct outbox *o, const struct store_outbox_item *it)
{
	struct channel *ch = o->opt.channel(o->opt.ud, it->channel, it->account);
	struct outbox_send *s = calloc(1, sizeof *s);
	struct channel_outbound m;
	struct channel_send_result fail = {.rc = SB_ERR_NOTFOUND, .retry_after_ms = -1};
	int rc;

	if (!s)
		return;
	s->o = o;
	s->id = it->id;
	s->attempts = it->attempts + 1;
	s->channel = strdup(it->channel);
	s->next = o->sends;
	if (o->sends)
		o->sends->prev = s;
	o->sends = s;
	o->in_flight++;
	if (!ch) {
		fail.error = "no such channel is configured";
		fail.retryable = true; /* it may be configured again */
		outbox_sent(s, &fail);
		return;
	}
	memset(&m, 0, sizeof m);
	m.outbox_id = it->id;
	m.idempotency_key = it->idempotency_key;
	m.account = it->account;
	m.target = it->target;
	m.payload = it->payload;
	m.attempt = s->attempts;
	SB_CRASH_POINT("outbox.send.before");
	rc = ch->ops->send(ch, &m, outbox_sent, s);
	if (rc) {
		fail.rc = rc;
		fail.retryable = rc == SB_ERR_AGAIN || rc == SB_ERR_NOMEM;
		fail.error = sb_strerror(rc);
		outbox_sent(s, &fail);
	}
}

static void outbox_claimed(void *ud, int rc, const struct store_outbox_item *items, size_t n)
{
	struct outbox *o = ud;
	size_t max = o->opt.max_in_flight ? o->opt.max_in_flight : 32;

	o->claiming = false;
	if (rc) {
		log_error("outbox", "cannot claim outbox entries", LOG_S("error", sb_strerror(rc)));
		return;
	}
	if (n < o->claim_asked && o->claim_mark == o->pending_puts && !o->kicked)
		o->clean = true;
	for (size_t i = 0; i < n; i++)
		outbox_send_one(o, &items[i]);
	if ((o->kicked || n) && o->in_flight < max) {
		o->kicked = false;
		outbox_claim(o);
	}
}

static void outbox_claim(struct outbox *o)
{
	size_t max = o->opt.max_in_flight ? o->opt.max_in_flight : 32;

	if (!o->started || o->draining)
		return;
	if (o->claiming) {
		o->kicked = true;
		return;
	}
	if (o->in_flight >= max)
		return;
	o->claiming = true;
	o->claim_mark = o->pending_puts;
	o->claim_asked = max - o->in_flight;
	if (store_outbox_claim_due(o->opt.store, max - o->in_flight, OUTBOX_LEASE_MS,
	                           outbox_claimed, o))
		o->claiming = false;
}

static void outbox_poll(uv_timer_t *t)
{
	outbox_claim(t->data);
}

int outbox_new(struct outbox **out, const struct outbox_options *opt)
{
	struct outbox *o = calloc(1, sizeof *o);

	if (!o)
		return SB_ERR_NOMEM;
	o->opt = *opt;
	uv_timer_init(opt->loop, &o->poll);
	o->poll.data = o;
	*out = o;
	return SB_OK;
}

void outbox_start(struct outbox *o)
{
	int64_t poll = o->opt.poll_ms > 0 ? o->opt.poll_ms : 1000;

	o->started = true;
	o->clean = false; /* the first claim finds out */
	uv_timer_start(&o->poll, outbox_poll, 0, (uint64_t)poll);
}

void outbox_kick(struct outbox *o)
{
	if (!o)
		return;
	o->clean = false;
	o->pending_puts++;
	outbox_claim(o);
}

int64_t outbox_put_lease(struct outbox *o)
{
	size_t max;

	if (!o)
		return 0;
	max = o->opt.max_in_flight ? o->opt.max_in_flight : 32;
	if (!o->started || o->draining || !o->clean || o->in_flight + o->reserved >= max)
		return 0;
	o->reserved++;
	return OUTBOX_LEASE_MS;
}

void outbox_put_done(struct outbox *o, size_t leased, int rc, const struct store_outbox_item *items,
                     size_t n)
{
	if (!o)
		return;
	SB_ASSERT(o->reserved >= leased, LOG_I("reserved", o->reserved), LOG_I("leased", leased));
	o->reserved -= leased;
	if (rc)
		return;
	/* Claimed while draining: a restart sends them (the lease is
	 * released at start-up). */
	for (size_t i = 0; i < n && !o->draining; i++)
		outbox_send_one(o, &items[i]);
}

void outbox_drain(struct outbox *o)
{
	if (!o)
		return;
	o->draining = true;
	uv_timer_stop(&o->poll);
}

size_t outbox_in_flight(const struct outbox *o)
{
	return o ? o->in_flight + (o->claiming ? 1 : 0) : 0;
}

static void outbox_closed(uv_handle_t *h)
{
	free(h->data);
}

void outbox_free(struct outbox *o)
{
	if (!o)
		return;
	while (o->sends)
		outbox_send_unlink(o->sends);
	uv_close((uv_handle_t *)&o->poll, outbox_closed);
}
