/*
 * slack_config.c - the schema of `channels.slack.accounts[]` and the checks
 * within one account and across accounts.
 */
#include "channels/slack/slack_config.h"

#include <stdio.h>
#include <string.h>

#include "channels/adapter.h"

const char *const slack_mode_names[] = {"events", "socket", NULL};
const char *const slack_thread_names[] = {"auto", "always", "never", NULL};

static const char *slack_check_id(const void *field)
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

static const char *slack_check_path(const void *field)
{
	const char *s = *(char *const *)field;
	size_t plen = strlen(SLACK_PATH_PREFIX);

	if (!s)
		return NULL;
	if (strncmp(s, SLACK_PATH_PREFIX, plen) != 0 || !s[plen])
		return "an events path must start with /slack/ and name something after it";
	for (const char *p = s; *p; p++)
		if (*p <= ' ' || *p > '~' || *p == '?' || *p == '#' || *p == '%')
			return "an events path may hold only printable ASCII without spaces, "
			       "\"?\", \"#\" and \"%\"";
	return NULL;
}

static const char *slack_check_url(const void *field)
{
	const char *s = *(char *const *)field;

	if (!s)
		return NULL;
	if (strncmp(s, "http://", 7) != 0 && strncmp(s, "https://", 8) != 0)
		return "expected an http:// or https:// URL";
	for (const char *p = s; *p; p++)
		if (*p <= ' ' || *p > '~' || *p == '?' || *p == '#')
			return "a base URL may not hold spaces, non-ASCII characters, \"?\" or "
			       "\"#\"";
	return NULL;
}

static const char *slack_check_prefix(const char *s, const char *prefix, const char *msg)
{
	if (!s)
		return NULL;
	return strncmp(s, prefix, strlen(prefix)) == 0 ? NULL : msg;
}

static const char *slack_check_bot_token(const void *field)
{
	return slack_check_prefix(*(char *const *)field, "xoxb-",
	                          "a bot token starts with xoxb- (OAuth & Permissions, "
	                          "Bot User OAuth Token)");
}

static const char *slack_check_app_token(const void *field)
{
	return slack_check_prefix(*(char *const *)field, "xapp-",
	                          "an app-level token starts with xapp- (Basic Information, "
	                          "App-Level Tokens, scope connections:write)");
}

static const struct cfg_key slack_account_keys[] = {
    {
        .name = "id",
        .type = CFG_STRING,
        .offset = offsetof(struct slack_account_config, id),
        .min = 1,
        .max = ENVELOPE_ACCOUNT_MAX,
        .flags = CFG_REQUIRED,
        .validate = slack_check_id,
        .doc = "The account's name: messages from this workspace come from the channel "
               "account of that name (bindings match it with `match: {channel: slack, "
               "account: <id>}`), and replies go out through it.",
    },
    {
        .name = "bot_token",
        .type = CFG_STRING,
        .offset = offsetof(struct slack_account_config, bot_token),
        .min = 6,
        .max = 512,
        .flags = CFG_REQUIRED | CFG_SECRET,
        .validate = slack_check_bot_token,
        .doc = "The Bot User OAuth Token (`xoxb-...`): posts replies (`chat.postMessage`) "
               "and learns the bot's user id (`auth.test`). Keep it out of the file: "
               "`${SLACK_BOT_TOKEN}` or `${file:secrets/slack-bot}`.",
    },
    {
        .name = "signing_secret",
        .type = CFG_STRING,
        .offset = offsetof(struct slack_account_config, signing_secret),
        .min = 8,
        .max = 256,
        .flags = CFG_SECRET,
        .doc = "For `mode: events`: the app's Signing Secret (Basic Information); every "
               "request to the events path must carry a valid `X-Slack-Signature` made "
               "with it. Required in that mode.",
    },
    {
        .name = "app_token",
        .type = CFG_STRING,
        .offset = offsetof(struct slack_account_config, app_token),
        .min = 6,
        .max = 512,
        .flags = CFG_SECRET,
        .validate = slack_check_app_token,
        .doc = "For `mode: socket`: the app-level token (`xapp-...`, scope "
               "`connections:write`) that opens Socket Mode connections. Required in that "
               "mode.",
    },
    {
        .name = "mode",
        .type = CFG_ENUM,
        .offset = offsetof(struct slack_account_config, mode),
        .def = "events",
        .choices = slack_mode_names,
        .flags = CFG_RESTART,
        .doc = "How events arrive: `events` (Slack POSTs them to `events_path` on the "
               "gateway port, which must be reachable from Slack over HTTPS) or `socket` "
               "(the gateway opens a Socket Mode WebSocket to Slack; no public URL "
               "needed).",
    },
    {
        .name = "events_path",
        .type = CFG_STRING,
        .offset = offsetof(struct slack_account_config, events_path),
        .min = 1,
        .max = SLACK_PATH_MAX,
        .flags = CFG_RESTART,
        .validate = slack_check_path,
        .doc = "For `mode: events`: the URL path of the Request URL on the gateway port; "
               "must start with `/slack/`. Default: `/slack/events/<id>`.",
    },
    {
        .name = "api_base",
        .type = CFG_STRING,
        .offset = offsetof(struct slack_account_config, api_base),
        .def = SLACK_DEFAULT_API_BASE,
        .min = 8,
        .max = 1024,
        .validate = slack_check_url,
        .doc = "The Web API base URL (methods are appended to it). Change it only to point "
               "the gateway at a test double of Slack.",
    },
    {
        .name = "reply_in_thread",
        .type = CFG_ENUM,
        .offset = offsetof(struct slack_account_config, reply_in_thread),
        .def = "auto",
        .choices = slack_thread_names,
        .doc = "Where replies go: `auto` (in the thread when the message was in a thread, "
               "else in the conversation), `always` (a top-level channel message gets its "
               "reply in a new thread under it; DMs stay flat) or `never` (always in the "
               "conversation itself).",
    },
    {
        .name = "chunk_limit",
        .type = CFG_INT,
        .offset = offsetof(struct slack_account_config, chunk_limit),
        .def = "4000",
        .min = 100,
        .max = 40000,
        .doc = "The most characters in one posted message; longer replies are split on "
               "paragraph, then line, then word boundaries and posted in order.",
    },
    {
        .name = "allow_bots",
        .type = CFG_BOOL,
        .offset = offsetof(struct slack_account_config, allow_bots),
        .def = "false",
        .doc = "Accept messages that other bots post (they are dropped by default, to "
               "keep bots from answering each other). The bot's own messages are always "
               "dropped.",
    },
    {
        .name = "handle_edits",
        .type = CFG_BOOL,
        .offset = offsetof(struct slack_account_config, handle_edits),
        .def = "false",
        .doc = "Treat an edited message as a new message to answer. Deleted messages are "
               "always ignored.",
    },
    {
        .name = "tolerance",
        .type = CFG_DURATION,
        .offset = offsetof(struct slack_account_config, tolerance_ms),
        .def = "5m",
        .min = 1000,
        .max = 3600000,
        .doc = "For `mode: events`: how far `X-Slack-Request-Timestamp` may be from the "
               "gateway's clock, in either direction (replay protection).",
    },
    {
        .name = "ack_deadline",
        .type = CFG_DURATION,
        .offset = offsetof(struct slack_account_config, ack_deadline_ms),
        .def = "2500ms",
        .min = 100,
        .max = 2900,
        .doc = "For `mode: events`: Slack wants an answer within 3 s. An event is answered "
               "200 once it is stored; if storing takes longer than this, the request is "
               "answered 503 instead, so Slack sends it again (the retry is recognised "
               "and not processed twice).",
    },
    {
        .name = "ping_interval",
        .type = CFG_DURATION,
        .offset = offsetof(struct slack_account_config, ping_interval_ms),
        .def = "5s",
        .min = 100,
        .max = 300000,
        .doc = "For `mode: socket`: how often the gateway pings the connection.",
    },
    {
        .name = "ping_timeout",
        .type = CFG_DURATION,
        .offset = offsetof(struct slack_account_config, ping_timeout_ms),
        .def = "30s",
        .min = 200,
        .max = 600000,
        .doc = "For `mode: socket`: a connection from which nothing (no frame, no pong) "
               "arrived for this long is taken for dead, closed and opened again.",
    },
    {
        .name = "request_timeout",
        .type = CFG_DURATION,
        .offset = offsetof(struct slack_account_config, request_timeout_ms),
        .def = "15s",
        .min = 1000,
        .max = 120000,
        .doc = "How long one Web API call may take before it counts as failed (and the "
               "reply is retried).",
    },
    {
        .name = "reconnect_max",
        .type = CFG_DURATION,
        .offset = offsetof(struct slack_account_config, reconnect_max_ms),
        .def = "60s",
        .min = 100,
        .max = 3600000,
        .doc = "For `mode: socket`: the longest pause between two reconnection attempts "
               "(the pause doubles from 1 s up to this after each failure).",
    },
};

/* The rules within one account that depend on several keys. */
static int slack_account_check(void *obj, struct cfg_error_ctx *ctx)
{
	struct slack_account_config *a = obj;
	int added = 0;

	if (a->mode == SLACK_MODE_EVENTS && !a->signing_secret) {
		cfg_error_add(ctx, "signing_secret",
		              "Basic Information > App Credentials > Signing Secret; or use mode: "
		              "socket with an app_token",
		              "mode events needs signing_secret: every event request is verified "
		              "with it");
		added++;
	}
	if (a->mode == SLACK_MODE_SOCKET && !a->app_token) {
		cfg_error_add(ctx, "app_token",
		              "Basic Information > App-Level Tokens, with scope connections:write",
		              "mode socket needs app_token (xapp-...) to open connections");
		added++;
	}
	if (a->ping_timeout_ms && a->ping_interval_ms &&
	    a->ping_timeout_ms <= a->ping_interval_ms) {
		cfg_error_add(ctx, "ping_timeout", "e.g. ping_interval: 5s, ping_timeout: 30s",
		              "ping_timeout must be longer than ping_interval");
		added++;
	}
	return added;
}

const struct cfg_section slack_account_section = {
    .name = "accounts",
    .size = sizeof(struct slack_account_config),
    .keys = slack_account_keys,
    .nkeys = sizeof slack_account_keys / sizeof slack_account_keys[0],
    .check = slack_account_check,
    .doc = "One Slack workspace (app installation).",
};

static const char *slack_unique_id(const void *e, char *buf, size_t size)
{
	(void)buf;
	(void)size;
	return ((const struct slack_account_config *)e)->id;
}

static const char *slack_unique_path(const void *e, char *buf, size_t size)
{
	const struct slack_account_config *a = e;

	return a->mode == SLACK_MODE_EVENTS ? slack_events_path(a, buf, size) : NULL;
}

static const char *slack_unique_app_token(const void *e, char *buf, size_t size)
{
	const struct slack_account_config *a = e;

	(void)buf;
	(void)size;
	return a->mode == SLACK_MODE_SOCKET ? a->app_token : NULL;
}

static const struct channel_unique slack_unique[] = {
    {"id", "id", true, "each workspace needs its own id", slack_unique_id},
    {"events_path", "events path", true, "give each account its own events_path",
     slack_unique_path},
    {"app_token", "app_token", false,
     "one app, one Socket Mode connection: two accounts would each get half of the events",
     slack_unique_app_token},
};

int slack_config_check(const struct slack_config *s, struct cfg_error_ctx *ctx)
{
	if (!s)
		return 0;
	return channel_config_unique(ctx, "accounts", "account", s->accounts, s->n_accounts,
	                             sizeof *s->accounts, slack_unique,
	                             sizeof slack_unique / sizeof *slack_unique);
}

const struct slack_account_config *slack_config_find(const struct slack_config *s, const char *id)
{
	for (size_t i = 0; s && id && i < s->n_accounts; i++)
		if (s->accounts[i].id && strcmp(s->accounts[i].id, id) == 0)
			return &s->accounts[i];
	return NULL;
}

const char *slack_events_path(const struct slack_account_config *a, char *out, size_t size)
{
	int n;

	if (a->events_path)
		n = snprintf(out, size, "%s", a->events_path);
	else
		n = snprintf(out, size, "%sevents/%s", SLACK_PATH_PREFIX, a->id ? a->id : "");
	if (n < 0 || (size_t)n >= size)
		out[0] = '\0';
	return out;
}
