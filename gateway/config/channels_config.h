/*
 * channels_config.h - the `channels` section: one sub-section per channel
 * adapter. Each channel's struct holds its access settings (DM and group
 * policy, see bindings/bindings_config.h), which routing reads, and the
 * adapter's own settings (tokens, webhook paths, ...), which the adapter is
 * handed (channels_config_settings).
 */
#ifndef SB_GATEWAY_CHANNELS_CONFIG_H
#define SB_GATEWAY_CHANNELS_CONFIG_H

#include <stddef.h>

#include "bindings/bindings_config.h"
#include "channels/telegram/telegram_config.h"
#include "channels/slack/slack_config.h"
#include "channels/webhook/webhook_config.h"
#include "gateway/core/cfg.h"

struct channel_telegram_config {
	struct access_config access;
	struct telegram_config telegram;
};

struct channel_slack_config {
	struct access_config access;
	struct slack_config slack;
};

struct channel_webhook_config {
	struct access_config access;
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

/* The adapter's own settings of the channel called name (a struct
 * telegram_config, slack_config, webhook_config), for the adapter's create,
 * reconfigure and accounts; NULL for a channel without settings of its own
 * or an unknown name. Borrowed from c. Any thread. */
const void *channels_config_settings(const struct channels_config *c, const char *name);

#endif
