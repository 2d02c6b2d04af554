/*
 * registry.c - the channel adapters compiled into the gateway.
 */
#include <string.h>

#include "channels/channel.h"
#include "channels/telegram/telegram.h"
#include "channels/slack/slack.h"

const struct channel_ops *const channel_registry[] = {
    &channel_webchat_ops,  &channel_webhook_ops, &channel_http_ops,
    &channel_telegram_ops, &channel_slack_ops,   NULL,
};

_Static_assert(sizeof channel_registry / sizeof *channel_registry - 1 <= CHANNEL_ADAPTERS_MAX,
               "CHANNEL_ADAPTERS_MAX bounds the registry (the daemon's instance table)");

const struct channel_ops *channel_find(const char *name)
{
	for (size_t i = 0; name && channel_registry[i]; i++)
		if (strcmp(channel_registry[i]->name, name) == 0)
			return channel_registry[i];
	return NULL;
}
