/*
 * adapter.h - what every channel adapter would otherwise write again:
 * setting up the common part of an instance, reporting a send's outcome on
 * the next loop turn (a send callback never runs inside send), rate-limited
 * logging of refused requests, and the uniqueness rules across the accounts
 * (or hooks) of one channel section.
 *
 * Clocks come from gateway/core/clock.h: the monotonic one for windows and
 * timers, the wall one for timestamps.
 *
 * Loop thread only, except channel_config_unique (any thread).
 */
#ifndef SB_CHANNELS_ADAPTER_H
#define SB_CHANNELS_ADAPTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "channels/channel.h"
#include "gateway/core/cfg.h"

/* Fills the common part of an instance: host, and account (NULL means
 * "default"). SB_ERR_TOOBIG when account is longer than
 * ENVELOPE_ACCOUNT_MAX (the schemas refuse such ids, so this is a bug). */
int channel_init(struct channel *c, const struct host *host, const char *account);

/* Calls cb(ud, res) on the next loop turn, with copies of res's strings.
 * SB_ERR_NOMEM when the copies or the timer cannot be made (cb never runs
 * then). */
int channel_report_later(const struct host *host, const struct channel_send_result *res,
                         channel_send_cb cb, void *ud);

/* A log line allowance: at most CHANNEL_LOG_BURST lines per
 * CHANNEL_LOG_WINDOW_MS (monotonic), the rest counted. Zero it to start. */
#define CHANNEL_LOG_BURST 20
#define CHANNEL_LOG_WINDOW_MS 60000

struct channel_ratelog {
	int64_t window_ms;
	int count;
	int64_t suppressed;
};

/* Whether one more line may be logged now. When it may, *suppressed (may be
 * NULL) gets how many were refused since the last line logged, and the
 * count starts again. */
bool channel_ratelog_take(struct channel_ratelog *r, int64_t *suppressed);

/* One thing two entries of a channel's list (accounts, hooks) may not
 * share. value gives the entry's value for the rule, or NULL (or "") when
 * the entry takes no part in it (another mode); buf is room for a value
 * made up on the spot (a default path). */
struct channel_unique {
	const char *key;  /* the key path within an entry: "id", "token", "webhook.path" */
	const char *what; /* how the error names it: "bot token", "webhook path" */
	bool show;        /* print the value in the error (never for secrets) */
	const char *hint; /* the fix */
	const char *(*value)(const void *entry, char *buf, size_t size);
};

#define CHANNEL_UNIQUE_VALUE_MAX 512

/* Checks n entries of size bytes at v (the list called list, e.g.
 * "accounts", its entries called noun, e.g. "account"). Rule 0 is the
 * entry's name: a repeat is "<noun> "x" is defined twice (<list>[j] and
 * <list>[i])"; for the others "<noun>s "b" and "a" use the same <what>".
 * An entry whose name is NULL is skipped; each entry gets at most one error,
 * against the first earlier entry it clashes with, at "<list>[i].<key>".
 * Returns the number of errors added. */
int channel_config_unique(struct cfg_error_ctx *ctx, const char *list, const char *noun,
                          const void *v, size_t n, size_t size, const struct channel_unique *rules,
                          size_t nrules);

#endif
