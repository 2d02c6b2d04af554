/*
 * slack_config.h - the configuration of the Slack channel:
 * `channels.slack.accounts`, one entry per workspace (app installation).
 *
 * The gateway composes the `channels.slack` section from the access
 * settings (routing's, bindings/) and these keys (gateway/config/
 * channels_config.c); the adapter is handed a pointer to its own part,
 * struct slack_config.
 *
 * Strings belong to the configuration snapshot (cfg_release frees them).
 */
#ifndef SB_CHANNELS_SLACK_CONFIG_H
#define SB_CHANNELS_SLACK_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "channels/channel.h"
#include "gateway/core/cfg.h"

#define SLACK_PATH_PREFIX "/slack/"
#define SLACK_PATH_MAX 256
#define SLACK_DEFAULT_API_BASE "https://slack.com/api/"

enum slack_mode {
	SLACK_MODE_EVENTS = 0, /* Events API: Slack POSTs to a path of the gateway port */
	SLACK_MODE_SOCKET,     /* Socket Mode: the gateway opens a WebSocket to Slack */
};

enum slack_thread_mode {
	SLACK_THREAD_AUTO = 0, /* reply in the thread when the message was in one */
	SLACK_THREAD_ALWAYS,   /* also start a thread under a top-level channel message */
	SLACK_THREAD_NEVER,    /* always reply in the conversation itself */
};

struct slack_account_config {
	char *id;
	char *bot_token;      /* xoxb-... */
	char *signing_secret; /* events mode */
	char *app_token;      /* xapp-..., socket mode */
	int mode;             /* enum slack_mode */
	char *events_path;    /* NULL: SLACK_PATH_PREFIX "events/<id>"; see slack_events_path */
	char *api_base;       /* always ends with "/" once checked */
	int reply_in_thread;  /* enum slack_thread_mode */
	int64_t chunk_limit;  /* characters per message */
	bool allow_bots;      /* accept messages from other bots (never our own) */
	bool handle_edits;    /* an edited message is a new message */
	int64_t tolerance_ms; /* signature timestamp window, both directions */
	int64_t ack_deadline_ms;
	int64_t ping_interval_ms;
	int64_t ping_timeout_ms;
	int64_t request_timeout_ms;
	int64_t reconnect_max_ms;
};

struct slack_config {
	struct slack_account_config *accounts;
	size_t n_accounts;
};

/* The schema of one `accounts` entry. */
extern const struct cfg_section slack_account_section;

extern const char *const slack_mode_names[];
extern const char *const slack_thread_names[];

/* clang-format off */
#define SLACK_CONFIG_KEYS(stype, smember)                                                          \
	{                                                                                          \
		.name = "accounts",                                                                \
		.type = CFG_LIST,                                                                  \
		.offset = offsetof(stype, smember.accounts),                                       \
		.count_offset = offsetof(stype, smember.n_accounts),                               \
		.min = 0,                                                                          \
		.max = CHANNEL_ACCOUNTS_MAX,                                                       \
		.section = &slack_account_section,                                                 \
		.doc = "The Slack workspaces (one app installation each): tokens, how events "     \
		       "arrive (Events API or Socket Mode) and how replies are posted "            \
		       "(docs/channels/slack.md). Each one is a channel account of its `id`.",     \
	}
/* clang-format on */

/* The rules across accounts (ids and paths unique), for the embedding
 * section's check. Returns the number of errors added. Any thread. */
int slack_config_check(const struct slack_config *s, struct cfg_error_ctx *ctx);

/* The account called id, or NULL. Borrowed from s. Any thread. */
const struct slack_account_config *slack_config_find(const struct slack_config *s, const char *id);

/* The account's Events API path (its events_path, or /slack/events/<id>)
 * into out; "" when it does not fit. Returns out. */
const char *slack_events_path(const struct slack_account_config *a, char *out, size_t size);

#endif
