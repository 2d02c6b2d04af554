/*
 * telegram_config.h - the configuration of the Telegram channel:
 * `channels.telegram.accounts`, one entry per bot.
 *
 * The gateway composes the `channels.telegram` section from the access
 * settings (routing's, bindings/) and these keys (gateway/config/
 * channels_config.c); the adapter is handed a pointer to its own part,
 * struct telegram_config.
 *
 * Strings belong to the configuration snapshot (cfg_release frees them).
 */
#ifndef SB_CHANNELS_TELEGRAM_CONFIG_H
#define SB_CHANNELS_TELEGRAM_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "channels/channel.h"
#include "gateway/core/cfg.h"

#define TELEGRAM_PATH_MAX 256
#define TELEGRAM_CHUNK_MAX 4096 /* Telegram's limit for one message's text */
#define TELEGRAM_DEFAULT_API "https://api.telegram.org"
#define TELEGRAM_PATH_PREFIX "/telegram/"

enum telegram_mode {
	TELEGRAM_MODE_POLLING = 0,
	TELEGRAM_MODE_WEBHOOK,
};

enum telegram_parse_mode {
	TELEGRAM_PARSE_HTML = 0,
	TELEGRAM_PARSE_PLAIN,
};

struct telegram_webhook_config {
	char *path;   /* NULL: /telegram/<id> */
	char *secret; /* X-Telegram-Bot-Api-Secret-Token */
	char *url;    /* the public URL given to setWebhook */
	bool set_on_start;
};

struct telegram_rate_config {
	int64_t chat_per_minute;
	int64_t chat_burst;
	int64_t global_per_second;
};

struct telegram_account_config {
	char *id;
	char *token;
	int mode; /* enum telegram_mode */
	char *api_base;
	int64_t poll_timeout_ms;
	int64_t poll_interval_ms;
	int64_t request_timeout_ms;
	char **allowed_updates;
	size_t n_allowed_updates;
	struct telegram_webhook_config webhook;
	int parse_mode; /* enum telegram_parse_mode */
	bool reply_to_message;
	int64_t chunk_limit;
	bool typing;
	bool edits;
	bool allow_bots;
	struct telegram_rate_config rate;
};

struct telegram_config {
	struct telegram_account_config *accounts;
	size_t n_accounts;
};

extern const struct cfg_section telegram_account_section;
extern const char *const telegram_mode_names[];
extern const char *const telegram_parse_mode_names[];

/* The Telegram keys, as initialisers of struct cfg_key, for a section whose
 * struct (stype) holds a struct telegram_config at smember. The section's
 * check must call telegram_config_check. */
/* clang-format off */
#define TELEGRAM_CONFIG_KEYS(stype, smember)                                                       \
	{                                                                                          \
		.name = "accounts",                                                                \
		.type = CFG_LIST,                                                                  \
		.offset = offsetof(stype, smember.accounts),                                       \
		.count_offset = offsetof(stype, smember.n_accounts),                               \
		.min = 0,                                                                          \
		.max = CHANNEL_ACCOUNTS_MAX,                                                       \
		.section = &telegram_account_section,                                              \
		.doc = "The bots: one entry per bot token, each a channel account of its own "     \
		       "(docs/channels/telegram.md).",                                             \
	}
/* clang-format on */

/* The rules across accounts (ids, tokens and webhook paths unique). Returns
 * the number of errors added. Any thread. */
int telegram_config_check(const struct telegram_config *t, struct cfg_error_ctx *ctx);

/* The account called id, or NULL. Borrowed from t. */
const struct telegram_account_config *telegram_config_find(const struct telegram_config *t,
                                                           const char *id);

/* The account's webhook path (its webhook.path, or /telegram/<id>) into out;
 * "" when it does not fit. Returns out. */
const char *telegram_webhook_path(const struct telegram_account_config *a, char *out, size_t size);

#endif
