/*
 * channels_config.h - the `channels` section: one sub-section per channel
 * adapter. Each channel's struct begins with its access settings (DM and
 * group policy, see bindings/bindings_config.h); the adapters' own keys
 * (tokens, webhook paths, ...) join the same structs with their issues.
 */
#ifndef SB_GATEWAY_CHANNELS_CONFIG_H
#define SB_GATEWAY_CHANNELS_CONFIG_H

#include <stddef.h>

#include "bindings/bindings_config.h"
#include "channels/telegram/telegram_config.h"
#include "channels/slack/slack_config.h"
#include "channels/webhook/webhook_config.h"
#include "gateway/core/cfg.h"

/* The Telegram adapter's settings sit at TELEGRAM_CONFIG_OFFSET, as the
 * webhook adapter's do (see channels/telegram/telegram_config.h). */
struct channel_telegram_config {
	union {
		struct access_config access;
		unsigned char access_reserved[TELEGRAM_CONFIG_OFFSET];
	};
	struct telegram_config telegram;
};

/* The Slack adapter's settings sit at SLACK_CONFIG_OFFSET, like the
 * webhook adapter's (see below). */
struct channel_slack_config {
	union {
		struct access_config access;
		unsigned char access_reserved[SLACK_CONFIG_OFFSET];
	};
	struct slack_config slack;
};

/* The webhook adapter may not see struct access_config (channels/ include
 * only gateway/core/), so its own settings sit at a fixed offset after the
 * access settings: see channels/webhook/webhook_config.h. */
struct channel_webhook_config {
	union {
		struct access_config access;
		unsigned char access_reserved[WEBHOOK_CONFIG_OFFSET];
	};
	struct webhook_config webhook;
};

struct channel_webchat_config {
	struct access_config access;
};

struct channels_config {
	struct channel_telegram_config telegram;
	struct channel_slack_config slack;
	struct channel_webhook_config webhook;
	struct channel_webchat_config webchat;
};

/* The schema of the top-level `channels` section. */
extern const struct cfg_section channels_config_section;

/* The channel names, in the order of struct channels_config. */
#define CHANNELS_CONFIG_COUNT 4
extern const char *const channels_config_names[CHANNELS_CONFIG_COUNT];

/* The access settings of the channel called name, or NULL when there is no
 * such channel. Borrowed from c. Any thread. */
const struct access_config *channels_config_access(const struct channels_config *c,
                                                   const char *name);

#endif
