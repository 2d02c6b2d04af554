/*
 * telegram_config.c - the schema of `channels.telegram.accounts[]` and the
 * checks within one account and across accounts.
 */
#include "channels/telegram/telegram_config.h"

#include <stdio.h>
#include <string.h>

#include "channels/adapter.h"

const char *const telegram_mode_names[] = {"polling", "webhook", NULL};
const char *const telegram_parse_mode_names[] = {"html", "plain", NULL};

/* The update types the adapter understands (others are skipped anyway). */
static const char *const telegram_update_types[] = {
    "message",
    "edited_message",
    "channel_post",
    "edited_channel_post",
    "callback_query",
    "my_chat_member",
    "chat_member",
    "message_reaction",
    "inline_query",
    "chosen_inline_result",
    "business_message",
    "edited_business_message",
    "shipping_query",
    "pre_checkout_query",
    "poll",
    "poll_answer",
    "chat_join_request",
    "chat_boost",
    "removed_chat_boost",
    "message_reaction_count",
    "purchased_paid_media",
    "deleted_business_messages",
    "business_connection",
    NULL,
};

static const char *telegram_check_id(const void *field)
{
	const char *s = *(char *const *)field;

	if (!s)
		return NULL;
	for (const char *p = s; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' ||
		      *p == '_'))
			return "an account id may hold only lower-case letters, digits, \"_\" and "
			       "\"-\"";
	return NULL;
}

/* <digits>:<35-ish characters of [A-Za-z0-9_-]>; the value is never shown. */
static const char *telegram_check_token(const void *field)
{
	const char *s = *(char *const *)field;
	const char *colon;

	if (!s)
		return NULL;
	colon = strchr(s, ':');
	if (!colon || colon == s || !colon[1])
		return "a bot token looks like 123456789:AA... (the bot id, a colon, the secret)";
	for (const char *p = s; p < colon; p++)
		if (*p < '0' || *p > '9')
			return "a bot token starts with the bot's numeric id";
	for (const char *p = colon + 1; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9') || *p == '-' || *p == '_'))
			return "a bot token holds only letters, digits, \"_\" and \"-\" after the "
			       "colon";
	return NULL;
}

static const char *telegram_check_url(const void *field)
{
	const char *s = *(char *const *)field;
	size_t n;

	if (!s)
		return NULL;
	if (strncmp(s, "http://", 7) != 0 && strncmp(s, "https://", 8) != 0)
		return "expected an http:// or https:// URL";
	for (const char *p = s; *p; p++)
		if (*p <= ' ' || *p > '~' || *p == '?' || *p == '#')
			return "a URL here may not hold spaces, non-ASCII characters, \"?\" or "
			       "\"#\"";
	n = strlen(s);
	if (s[n - 1] == '/')
		return "leave out the trailing \"/\"";
	return NULL;
}

static const char *telegram_check_path(const void *field)
{
	const char *s = *(char *const *)field;

	if (!s)
		return NULL;
	if (s[0] != '/' || !s[1])
		return "a webhook path starts with \"/\" and names something after it";
	for (const char *p = s; *p; p++)
		if (*p <= ' ' || *p > '~' || *p == '?' || *p == '#' || *p == '%')
			return "a webhook path may hold only printable ASCII without spaces, "
			       "\"?\", "
			       "\"#\" and \"%\"";
	return NULL;
}

/* Telegram's rule for secret_token: 1-256 characters of A-Z a-z 0-9 _ -. */
static const char *telegram_check_secret(const void *field)
{
	const char *s = *(char *const *)field;

	if (!s)
		return NULL;
	for (const char *p = s; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9') || *p == '-' || *p == '_'))
			return "Telegram allows only letters, digits, \"_\" and \"-\" in a webhook "
			       "secret";
	return NULL;
}

static const struct cfg_key telegram_webhook_keys[] = {
    {
        .name = "path",
        .type = CFG_STRING,
        .offset = offsetof(struct telegram_webhook_config, path),
        .min = 2,
        .max = TELEGRAM_PATH_MAX,
        .flags = CFG_RESTART,
        .validate = telegram_check_path,
        .doc = "The URL path on the gateway port that receives updates. Default: "
               "`/telegram/<id>`.",
    },
    {
        .name = "secret",
        .type = CFG_STRING,
        .offset = offsetof(struct telegram_webhook_config, secret),
        .min = 16,
        .max = 256,
        .flags = CFG_SECRET,
        .validate = telegram_check_secret,
        .doc = "The secret Telegram sends in `X-Telegram-Bot-Api-Secret-Token` with every "
               "update (required in webhook mode; 16 to 256 characters of letters, digits, "
               "`_` and `-`). Requests without it are refused with 401. Keep it out of the "
               "file: `${file:secrets/NAME}` or `${ENV}`.",
        .hint = "make one with: openssl rand -hex 24",
    },
    {
        .name = "url",
        .type = CFG_STRING,
        .offset = offsetof(struct telegram_webhook_config, url),
        .min = 1,
        .max = 2048,
        .validate = telegram_check_url,
        .doc = "The public HTTPS URL that reaches `path` (through your reverse proxy), "
               "given to `setWebhook` when `set_on_start` is true. Telegram only calls ports "
               "443, 80, 88 and 8443.",
    },
    {
        .name = "set_on_start",
        .type = CFG_BOOL,
        .offset = offsetof(struct telegram_webhook_config, set_on_start),
        .def = "false",
        .doc = "Call `setWebhook` with `url`, the secret and `allowed_updates` when the "
               "gateway starts (retried with backoff until it succeeds). Off: register the "
               "webhook yourself.",
    },
};

static const struct cfg_section telegram_webhook_section = {
    .name = "webhook",
    .size = sizeof(struct telegram_webhook_config),
    .keys = telegram_webhook_keys,
    .nkeys = sizeof telegram_webhook_keys / sizeof telegram_webhook_keys[0],
    .doc = "Webhook mode: where Telegram delivers updates and how they are authenticated.",
};

static const struct cfg_key telegram_rate_keys[] = {
    {
        .name = "chat_per_minute",
        .type = CFG_INT,
        .offset = offsetof(struct telegram_rate_config, chat_per_minute),
        .def = "20",
        .min = 1,
        .max = 600,
        .doc = "Messages per minute the bot sends into one chat (a token bucket per chat; "
               "Telegram allows about 20 a minute in a group). Sends over it wait.",
    },
    {
        .name = "chat_burst",
        .type = CFG_INT,
        .offset = offsetof(struct telegram_rate_config, chat_burst),
        .def = "3",
        .min = 1,
        .max = 100,
        .doc = "How many messages may go to one chat back to back before the per-chat "
               "rate applies (the chunks of one long reply, for instance).",
    },
    {
        .name = "global_per_second",
        .type = CFG_INT,
        .offset = offsetof(struct telegram_rate_config, global_per_second),
        .def = "25",
        .min = 1,
        .max = 1000,
        .doc = "Messages per second the bot sends across all chats (Telegram's guidance is "
               "about 30). Sends over it wait.",
    },
};

static const struct cfg_section telegram_rate_section = {
    .name = "rate_limit",
    .size = sizeof(struct telegram_rate_config),
    .keys = telegram_rate_keys,
    .nkeys = sizeof telegram_rate_keys / sizeof telegram_rate_keys[0],
    .doc = "Outbound pacing, below Telegram's flood limits. A 429 from Telegram is "
           "honoured on top of this (`parameters.retry_after`).",
};

static const struct cfg_key telegram_account_keys[] = {
    {
        .name = "id",
        .type = CFG_STRING,
        .offset = offsetof(struct telegram_account_config, id),
        .min = 1,
        .max = ENVELOPE_ACCOUNT_MAX,
        .flags = CFG_REQUIRED | CFG_RESTART,
        .validate = telegram_check_id,
        .doc = "The account's name: its messages come from the channel account of that name "
               "(bindings match it with `match: {channel: telegram, account: <id>}`), and "
               "its poll offset is kept under it.",
    },
    {
        .name = "token",
        .type = CFG_STRING,
        .offset = offsetof(struct telegram_account_config, token),
        .min = 3,
        .max = 256,
        .flags = CFG_REQUIRED | CFG_SECRET | CFG_RESTART,
        .validate = telegram_check_token,
        .doc = "The bot token from @BotFather. Never write it in the file: use "
               "`${TELEGRAM_TOKEN}` or `${file:secrets/telegram}`. It is never logged.",
    },
    {
        .name = "mode",
        .type = CFG_ENUM,
        .offset = offsetof(struct telegram_account_config, mode),
        .def = "polling",
        .choices = telegram_mode_names,
        .flags = CFG_RESTART,
        .doc = "How updates arrive: `polling` (long `getUpdates` calls; no public URL "
               "needed) or `webhook` (Telegram POSTs them to `webhook.path` on the gateway "
               "port). Telegram refuses polling while a webhook is set (409).",
    },
    {
        .name = "api_base",
        .type = CFG_STRING,
        .offset = offsetof(struct telegram_account_config, api_base),
        .def = TELEGRAM_DEFAULT_API,
        .min = 1,
        .max = 512,
        .validate = telegram_check_url,
        .doc = "The Bot API server; requests go to `<api_base>/bot<token>/<method>`. Change "
               "it for a local Bot API server or a test double.",
    },
    {
        .name = "poll_timeout",
        .type = CFG_DURATION,
        .offset = offsetof(struct telegram_account_config, poll_timeout_ms),
        .def = "30s",
        .min = 0,
        .max = 50000,
        .doc = "Polling: how long one `getUpdates` call waits for updates (its `timeout`, "
               "in whole seconds). A call that stays silent well past it is cancelled and "
               "started again (the watchdog).",
    },
    {
        .name = "poll_interval",
        .type = CFG_DURATION,
        .offset = offsetof(struct telegram_account_config, poll_interval_ms),
        .def = "0s",
        .min = 0,
        .max = 60000,
        .doc = "Polling: the least time between the starts of two `getUpdates` calls. 0 "
               "polls again at once; set it for a server that does not hold long polls.",
    },
    {
        .name = "request_timeout",
        .type = CFG_DURATION,
        .offset = offsetof(struct telegram_account_config, request_timeout_ms),
        .def = "30s",
        .min = 1000,
        .max = 300000,
        .doc = "How long one `sendMessage` (or other call besides `getUpdates`) may take "
               "before it counts as failed and is retried.",
    },
    {
        .name = "allowed_updates",
        .type = CFG_STRING_LIST,
        .offset = offsetof(struct telegram_account_config, allowed_updates),
        .count_offset = offsetof(struct telegram_account_config, n_allowed_updates),
        .min = 0,
        .max = 32,
        .doc = "The update types asked for (`allowed_updates` of `getUpdates` and "
               "`setWebhook`). Unset: `message`, plus `edited_message` when `edits` is on. "
               "Only messages, edits and channel posts become messages for the agents.",
    },
    {
        .name = "webhook",
        .type = CFG_SECTION,
        .offset = offsetof(struct telegram_account_config, webhook),
        .section = &telegram_webhook_section,
        .doc = "Webhook mode settings (`path`, `secret`, `url`, `set_on_start`).",
    },
    {
        .name = "parse_mode",
        .type = CFG_ENUM,
        .offset = offsetof(struct telegram_account_config, parse_mode),
        .def = "html",
        .choices = telegram_parse_mode_names,
        .doc = "How replies are formatted: `html` (the reply's Markdown code blocks, inline "
               "code, bold and links become Telegram HTML; everything else is escaped; when "
               "Telegram cannot parse it the message is sent again once as plain text) or "
               "`plain` (sent as it is).",
    },
    {
        .name = "reply_to_message",
        .type = CFG_BOOL,
        .offset = offsetof(struct telegram_account_config, reply_to_message),
        .def = "true",
        .doc = "Send the first message of a reply as a reply to the message it answers "
               "(`reply_parameters`; still sent when that message is gone).",
    },
    {
        .name = "chunk_limit",
        .type = CFG_INT,
        .offset = offsetof(struct telegram_account_config, chunk_limit),
        .def = "4096",
        .min = 64,
        .max = TELEGRAM_CHUNK_MAX,
        .doc = "The most characters in one message, counted as Telegram counts them (UTF-16 "
               "code units of the text as shown). Longer replies are split at paragraph, "
               "line or word boundaries, never inside a character.",
    },
    {
        .name = "typing",
        .type = CFG_BOOL,
        .offset = offsetof(struct telegram_account_config, typing),
        .def = "true",
        .doc = "Show \"typing...\" (`sendChatAction`, repeated every 4 s) in the chat while "
               "an agent works on a message from it.",
    },
    {
        .name = "edits",
        .type = CFG_BOOL,
        .offset = offsetof(struct telegram_account_config, edits),
        .def = "false",
        .doc = "Treat an edited message as a new message (off: edits are ignored).",
    },
    {
        .name = "allow_bots",
        .type = CFG_BOOL,
        .offset = offsetof(struct telegram_account_config, allow_bots),
        .def = "false",
        .doc = "Accept messages sent by other bots (off: they are dropped, which prevents "
               "bot loops). The bot's own messages are always dropped.",
    },
    {
        .name = "rate_limit",
        .type = CFG_SECTION,
        .offset = offsetof(struct telegram_account_config, rate),
        .section = &telegram_rate_section,
        .doc = "Outbound pacing per chat and in all.",
    },
};

static int telegram_account_check(void *obj, struct cfg_error_ctx *ctx)
{
	struct telegram_account_config *a = obj;
	int added = 0;

	if (a->mode == TELEGRAM_MODE_WEBHOOK && !a->webhook.secret) {
		cfg_error_add(ctx, "webhook.secret", "make one with: openssl rand -hex 24",
		              "webhook mode needs webhook.secret: Telegram sends it with every "
		              "update and nothing else authenticates them");
		added++;
	}
	if (a->mode == TELEGRAM_MODE_WEBHOOK && a->webhook.set_on_start && !a->webhook.url) {
		cfg_error_add(ctx, "webhook.url", NULL,
		              "webhook.set_on_start needs webhook.url: the public HTTPS URL "
		              "Telegram should call");
		added++;
	}
	if (a->mode == TELEGRAM_MODE_WEBHOOK && a->webhook.url &&
	    strncmp(a->webhook.url, "https://", 8) != 0 && a->webhook.set_on_start && a->api_base &&
	    strcmp(a->api_base, TELEGRAM_DEFAULT_API) == 0) {
		cfg_error_add(ctx, "webhook.url", "put the gateway behind a TLS reverse proxy",
		              "Telegram delivers webhooks only to https:// URLs");
		added++;
	}
	for (size_t i = 0; i < a->n_allowed_updates; i++) {
		bool known = false;
		char key[64];

		for (size_t k = 0; telegram_update_types[k]; k++)
			if (a->allowed_updates[i] &&
			    strcmp(a->allowed_updates[i], telegram_update_types[k]) == 0)
				known = true;
		if (!known) {
			snprintf(key, sizeof key, "allowed_updates[%zu]", i);
			cfg_error_add(ctx, key, "e.g. message, edited_message, channel_post",
			              "\"%s\" is not a Telegram update type",
			              a->allowed_updates[i] ? a->allowed_updates[i] : "");
			added++;
		}
	}
	return added;
}

const struct cfg_section telegram_account_section = {
    .name = "accounts",
    .size = sizeof(struct telegram_account_config),
    .keys = telegram_account_keys,
    .nkeys = sizeof telegram_account_keys / sizeof telegram_account_keys[0],
    .check = telegram_account_check,
    .doc = "One Telegram bot.",
};

static const char *tg_unique_id(const void *e, char *buf, size_t size)
{
	(void)buf;
	(void)size;
	return ((const struct telegram_account_config *)e)->id;
}

static const char *tg_unique_token(const void *e, char *buf, size_t size)
{
	(void)buf;
	(void)size;
	return ((const struct telegram_account_config *)e)->token;
}

static const char *tg_unique_path(const void *e, char *buf, size_t size)
{
	const struct telegram_account_config *a = e;

	return a->mode == TELEGRAM_MODE_WEBHOOK ? telegram_webhook_path(a, buf, size) : NULL;
}

static const struct channel_unique tg_unique[] = {
    {"id", "id", true, "each bot needs its own id", tg_unique_id},
    {"token", "bot token", false, "two pollers on one token fight (Telegram answers 409)",
     tg_unique_token},
    {"webhook.path", "webhook path", true, "give each bot its own path", tg_unique_path},
};

int telegram_config_check(const struct telegram_config *t, struct cfg_error_ctx *ctx)
{
	if (!t)
		return 0;
	return channel_config_unique(ctx, "accounts", "account", t->accounts, t->n_accounts,
	                             sizeof *t->accounts, tg_unique,
	                             sizeof tg_unique / sizeof *tg_unique);
}

const struct telegram_account_config *telegram_config_find(const struct telegram_config *t,
                                                           const char *id)
{
	for (size_t i = 0; t && id && i < t->n_accounts; i++)
		if (t->accounts[i].id && strcmp(t->accounts[i].id, id) == 0)
			return &t->accounts[i];
	return NULL;
}

const char *telegram_webhook_path(const struct telegram_account_config *a, char *out, size_t size)
{
	int n;

	if (a->webhook.path)
		n = snprintf(out, size, "%s", a->webhook.path);
	else
		n = snprintf(out, size, "%s%s", TELEGRAM_PATH_PREFIX, a->id ? a->id : "");
	if (n < 0 || (size_t)n >= size)
		out[0] = '\0';
	return out;
}
