/*
 * channel.h - the contract every channel adapter meets.
 *
 * One adapter per file (webhook.c, webchat.c, telegram.c, slack.c), each a
 * static const struct channel_ops; two accounts of one channel are two
 * instances of one table. Adapters see only gateway/core: the host gives
 * them ingest (durable inbox), HTTP routes, the HTTP client and the config.
 *
 * Inbound: verify, parse, normalise to an envelope, host->ingest; only when
 * ingest's callback reports the commit does the adapter acknowledge its
 * sender (HTTP 2xx, advancing a poll offset, ...).
 *
 * Outbound: the outbox sender calls send for each committed outbox entry and
 * records the outcome; send must be idempotent for one idempotency key where
 * the channel allows it.
 *
 * Loop thread only.
 */
#ifndef SB_CHANNELS_CHANNEL_H
#define SB_CHANNELS_CHANNEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "gateway/core/envelope.h"
#include "gateway/core/host.h"

struct channel;

/* The most accounts one channel section may declare (each becomes an
 * instance), and the most adapters the registry holds: the daemon holds
 * their product of instances, so whatever validates also starts. */
#define CHANNEL_ACCOUNTS_MAX 32
#define CHANNEL_ADAPTERS_MAX 8

/* One outbox entry to deliver. Strings borrowed for the call. */
struct channel_outbound {
	int64_t outbox_id;
	const char *idempotency_key;
	const char *account;
	const char *target;  /* the channel's destination (chat id, URL, ...) */
	const char *payload; /* JSON: {"text": ..., "reply_to": ..., ...} */
	int attempt;         /* 1 for the first try */
};

struct channel_send_result {
	int rc;                     /* SB_OK: the channel accepted it */
	bool retryable;             /* when rc != SB_OK: worth trying again later */
	int64_t retry_after_ms;     /* the channel's hint, -1 when none */
	const char *channel_msg_id; /* the channel's id for the sent message, or NULL */
	const char *error;          /* why, when rc != SB_OK */
};

typedef void (*channel_send_cb)(void *ud, const struct channel_send_result *res);

struct channel_ops {
	const char *name; /* "webhook", "webchat", "telegram", "slack" */
	/* Creates an instance for one account. config points at the adapter's
	 * own settings, the struct <name>_config its <name>_config.h declares
	 * (NULL for an adapter without settings); the daemon keeps it alive
	 * until destroy or the next reconfigure. Mandatory. */
	int (*create)(struct channel **out, const struct host *host, const char *account,
	              const void *config);
	/* A new configuration was loaded: config is the adapter's new settings.
	 * Optional; without it the instance keeps its settings. */
	int (*reconfigure)(struct channel *c, const void *config);
	/* Starts intake (register routes, start polling). Optional. */
	int (*start)(struct channel *c);
	/* Stops intake (drain): no new message is accepted. Optional. */
	void (*stop)(struct channel *c);
	/* Frees the instance; intake is stopped and no send is in flight.
	 * Mandatory. */
	void (*destroy)(struct channel *c);
	/* Delivers one outbox entry; cb runs once, later. Mandatory. */
	int (*send)(struct channel *c, const struct channel_outbound *msg, channel_send_cb cb,
	            void *ud);
	/* The accounts the channel's config section declares (two bots, two
	 * Slack workspaces): fills names (borrowed from config) and returns
	 * how many, at most max. The daemon creates one instance per account.
	 * Optional; without it, or when it returns 0, there is one instance
	 * called "default". Any thread. */
	size_t (*accounts)(const void *config, const char **names, size_t max);
	/* Adds this instance's state to obj (an object the caller owns):
	 * "running", "mode" ("polling", "webhook", "socket", ...),
	 * "connected", "lastEventAt" / "lastErrorAt" (unix ms), "lastError".
	 * Optional. */
	void (*status)(struct channel *c, json_t *obj);
	/* A run started (running true) or ended for a message this instance
	 * ingested; env is that message. For typing indicators. Optional. */
	void (*activity)(struct channel *c, const struct envelope *env, bool running);
};

/* Every adapter's struct begins with this. */
struct channel {
	const struct channel_ops *ops;
	const struct host *host;
	char account[ENVELOPE_ACCOUNT_MAX + 1];
};

/* The adapters (one file each). */
extern const struct channel_ops channel_webchat_ops;
extern const struct channel_ops channel_webhook_ops;
extern const struct channel_ops channel_http_ops;

/* The adapters compiled in, NULL-terminated. */
extern const struct channel_ops *const channel_registry[];

/* The adapter for a channel name, or NULL. */
const struct channel_ops *channel_find(const char *name);

#endif
