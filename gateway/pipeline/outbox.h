/*
 * outbox.h - the outbox sender: delivers committed outbox entries through
 * their channel's send, records the outcome, retries with backoff.
 *
 * An entry is sent only after its commit, and marked sent only after the
 * channel accepted it; a crash between the two is the one window in which a
 * channel without idempotency can see a message twice. At start-up the store
 * reports how many entries were in flight then (counted in metrics); each is
 * sent again with the same idempotency key, so a channel or receiver that
 * dedupes on it (Standard Webhooks' webhook-id) sees it once.
 *
 * Loop thread only.
 */
#ifndef SB_GATEWAY_OUTBOX_H
#define SB_GATEWAY_OUTBOX_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "channels/channel.h"
#include "gateway/obs/metrics.h"
#include "gateway/store/store.h"

struct outbox;

struct outbox_options {
	uv_loop_t *loop;
	struct store *store;
	struct metrics *metrics;
	void *ud;
	/* The instance that sends for (channel, account), or NULL. */
	struct channel *(*channel)(void *ud, const char *name, const char *account);
	int max_attempts;        /* then the entry fails for good; 0 = 10 */
	int64_t backoff_base_ms; /* 0 = 1000 */
	int64_t backoff_max_ms;  /* 0 = 300000 */
	size_t max_in_flight;    /* 0 = 32 */
	int64_t poll_ms;         /* how often due retries are looked for; 0 = 1000 */
};

int outbox_new(struct outbox **out, const struct outbox_options *opt);
void outbox_start(struct outbox *o);
/* New entries were committed. */
void outbox_kick(struct outbox *o);

/* For a reply about to be committed: the lease to insert it claimed with
 * (store_outbox_new.claim_lease_ms), so that it is sent as soon as its
 * commit lands, with no claim of its own; 0 when it must go in pending (not
 * started, draining, full, or due entries may wait in the store). A lease
 * reserves room until outbox_put_done. NULL gives 0. */
int64_t outbox_put_lease(struct outbox *o);
/* The commit of entries put with `leased` leases (store_inbox_done_claimed's
 * callback): items, those inserted claimed, are sent now. */
void outbox_put_done(struct outbox *o, size_t leased, int rc, const struct store_outbox_item *items,
                     size_t n);
/* Stops claiming; sends in flight finish. */
void outbox_drain(struct outbox *o);
size_t outbox_in_flight(const struct outbox *o);
/* Sends still in flight (a forced stop) are orphaned: their late outcomes
 * are dropped and the entries, still claimed, are sent again with the same
 * idempotency key at the next start. The loop must run afterwards. */
void outbox_free(struct outbox *o);

/* The delay before attempt n+1 (n >= 1 failed attempts), honouring a
 * channel's Retry-After hint; exposed for tests. */
int64_t outbox_backoff_ms(const struct outbox_options *opt, int attempts, int64_t retry_after_ms);

#endif
