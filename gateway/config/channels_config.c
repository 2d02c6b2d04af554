/*
 * channels_config.c - the schema of `channels.<name>` for every adapter:
 * the access keys, and the adapter's own keys where it has some.
 */
#include "gateway/config/channels_config.h"

#include <stddef.h>
#include <string.h>

const char *const channels_config_names[CHANNELS_CONFIG_COUNT] = {"telegram", "slack", "webhook",
                                                                  "webchat"};

static int channels_access_check(void *obj, struct cfg_error_ctx *ctx)
{
	return access_config_check(obj, ctx);
}

static int channel_telegram_check(void *obj, struct cfg_error_ctx *ctx)
{
	struct channel_telegram_config *t = obj;

	return access_config_check(&t->access, ctx) + telegram_config_check(&t->telegram, ctx);
}

static const struct cfg_key channel_telegram_keys[] = {
    ACCESS_CONFIG_KEYS(struct channel_telegram_config, access),
    TELEGRAM_CONFIG_KEYS(struct channel_telegram_config, telegram),
};

static int channel_slack_check(void *obj, struct cfg_error_ctx *ctx)
{
	struct channel_slack_config *s = obj;

	return access_config_check(&s->access, ctx) + slack_config_check(&s->slack, ctx);
}

static const struct cfg_key channel_slack_keys[] = {
    ACCESS_CONFIG_KEYS(struct channel_slack_config, access),
    SLACK_CONFIG_KEYS(struct channel_slack_config, slack),
};

static int channel_webhook_check(void *obj, struct cfg_error_ctx *ctx)
{
	struct channel_webhook_config *w = obj;

	return access_config_check(&w->access, ctx) + webhook_config_check(&w->webhook, ctx);
}

static const struct cfg_key channel_webhook_keys[] = {
    ACCESS_CONFIG_KEYS(struct channel_webhook_config, access),
    WEBHOOK_CONFIG_KEYS(struct channel_webhook_config, webhook),
};

static const struct cfg_key channel_webchat_keys[] = {
    ACCESS_CONFIG_KEYS(struct channel_webchat_config, access),
};

static const struct cfg_section channel_telegram_section = {
    .name = "telegram",
    .size = sizeof(struct channel_telegram_config),
    .keys = channel_telegram_keys,
    .nkeys = sizeof channel_telegram_keys / sizeof channel_telegram_keys[0],
    .check = channel_telegram_check,
    .doc = "Telegram (docs/channels/telegram.md): the bots, and who may talk to them. "
           "Sender ids are numeric user ids; group ids are the (negative) chat ids.",
};

static const struct cfg_section channel_slack_section = {
    .name = "slack",
    .size = sizeof(struct channel_slack_config),
    .keys = channel_slack_keys,
    .nkeys = sizeof channel_slack_keys / sizeof channel_slack_keys[0],
    .check = channel_slack_check,
    .doc = "Slack (docs/channels/slack.md): the workspaces, and who may talk to the bot. "
           "Sender ids are user ids (`U...`); groups are "
           "channel ids (`C...`), never names.",
};

static const struct cfg_section channel_webhook_section = {
    .name = "webhook",
    .size = sizeof(struct channel_webhook_config),
    .keys = channel_webhook_keys,
    .nkeys = sizeof channel_webhook_keys / sizeof channel_webhook_keys[0],
    .check = channel_webhook_check,
    .doc = "Generic webhooks (docs/channels/webhooks.md): the endpoints, and who may talk "
           "to the bot, by the sender id each delivery carries. Every hook's messages "
           "are addressed to the bot (no mention needed).",
};

static const struct cfg_section channel_webchat_section = {
    .name = "webchat",
    .size = sizeof(struct channel_webchat_config),
    .keys = channel_webchat_keys,
    .nkeys = sizeof channel_webchat_keys / sizeof channel_webchat_keys[0],
    .check = channels_access_check,
    .doc = "The web chat and the control plane's chat: who may talk to the bot.",
};

static const struct cfg_key channels_keys[] = {
    {
        .name = "telegram",
        .type = CFG_SECTION,
        .offset = offsetof(struct channels_config, telegram),
        .section = &channel_telegram_section,
        .doc = "The Telegram channel.",
    },
    {
        .name = "slack",
        .type = CFG_SECTION,
        .offset = offsetof(struct channels_config, slack),
        .section = &channel_slack_section,
        .doc = "The Slack channel.",
    },
    {
        .name = "webhook",
        .type = CFG_SECTION,
        .offset = offsetof(struct channels_config, webhook),
        .section = &channel_webhook_section,
        .doc = "Generic webhooks.",
    },
    {
        .name = "webchat",
        .type = CFG_SECTION,
        .offset = offsetof(struct channels_config, webchat),
        .section = &channel_webchat_section,
        .doc = "The web chat.",
    },
};

const struct cfg_section channels_config_section = {
    .name = "channels",
    .size = sizeof(struct channels_config),
    .keys = channels_keys,
    .nkeys = sizeof channels_keys / sizeof channels_keys[0],
    .doc = "The chat channels and who may talk to the bot on each. A channel left out keeps "
           "the defaults: DMs by pairing, groups only when listed.",
};

const struct access_config *channels_config_access(const struct channels_config *c,
                                                   const char *name)
{
	if (!c || !name)
		return NULL;
	if (strcmp(name, "telegram") == 0)
		return &c->telegram.access;
	if (strcmp(name, "slack") == 0)
		return &c->slack.access;
	if (strcmp(name, "webhook") == 0)
		return &c->webhook.access;
	if (strcmp(name, "webchat") == 0)
		return &c->webchat.access;
	return NULL;
}

const void *channels_config_settings(const struct channels_config *c, const char *name)
{
	if (!c || !name)
		return NULL;
	if (strcmp(name, "telegram") == 0)
		return &c->telegram.telegram;
	if (strcmp(name, "slack") == 0)
		return &c->slack.slack;
	if (strcmp(name, "webhook") == 0)
		return &c->webhook.webhook;
	return NULL;
}
