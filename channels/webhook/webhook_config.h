/*
 * webhook_config.h - the configuration of the generic webhooks channel:
 * `channels.webhook.hooks`, one entry per endpoint, and the small JSON path
 * syntax the mapping keys use.
 *
 * The gateway composes the `channels.webhook` section from the access
 * settings (routing's, bindings/) and these keys (gateway/config/
 * channels_config.c); the adapter is handed a pointer to its own part,
 * struct webhook_config.
 *
 * Strings belong to the configuration snapshot (cfg_release frees them).
 */
#ifndef SB_CHANNELS_WEBHOOK_CONFIG_H
#define SB_CHANNELS_WEBHOOK_CONFIG_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "gateway/core/cfg.h"

#define WEBHOOK_NAME_MAX 64
#define WEBHOOK_PATH_PREFIX "/hooks/"
#define WEBHOOK_PATH_MAX 256
#define WEBHOOK_EVENT_ID_MAX 256

enum webhook_verify_mode {
	WEBHOOK_VERIFY_STANDARD = 0, /* Standard Webhooks (webhook-id/-timestamp/-signature) */
	WEBHOOK_VERIFY_GITHUB,       /* X-Hub-Signature-256 */
	WEBHOOK_VERIFY_BEARER,       /* Authorization: Bearer <secret> */
};

enum webhook_reply_mode {
	WEBHOOK_MODE_SYNC = 0, /* the reply in the HTTP response */
	WEBHOOK_MODE_CALLBACK, /* the reply POSTed to callback_url */
	WEBHOOK_MODE_NONE,     /* no reply */
};

enum webhook_peer_mode {
	WEBHOOK_PEER_AUTO = 0, /* channel when a conversation is given, else direct */
	WEBHOOK_PEER_DIRECT,
	WEBHOOK_PEER_GROUP,
	WEBHOOK_PEER_CHANNEL,
};

/* Where the fields are in a delivery's JSON body (paths; NULL = not read). */
struct webhook_mapping_config {
	char *text;
	char *sender;
	char *sender_name;
	char *conversation;
	char *thread;
	char *event_id;
};

struct webhook_hook_config {
	char *name;
	char *path; /* NULL: WEBHOOK_PATH_PREFIX<name>; see webhook_hook_path */
	int verify; /* enum webhook_verify_mode */
	char *secret;
	int64_t tolerance_ms;
	int64_t max_body;
	int64_t max_auth_failures; /* per peer per minute; 0 = unlimited */
	struct webhook_mapping_config mapping;
	int peer_kind; /* enum webhook_peer_mode */
	int mode;      /* enum webhook_reply_mode */
	int64_t sync_timeout_ms;
	char *callback_url;
	char *callback_secret;
	int64_t callback_timeout_ms;
};

struct webhook_config {
	struct webhook_hook_config *hooks;
	size_t n_hooks;
};

/* The schema of one `hooks` entry. */
extern const struct cfg_section webhook_hook_section;

extern const char *const webhook_verify_names[];
extern const char *const webhook_mode_names[];
extern const char *const webhook_peer_names[];

/* The webhook keys, as initialisers of struct cfg_key, for a section whose
 * struct (stype) holds a struct webhook_config at smember. The section's
 * check must call webhook_config_check. */
/* clang-format off */
#define WEBHOOK_CONFIG_KEYS(stype, smember)                                                        \
	{                                                                                          \
		.name = "hooks",                                                                   \
		.type = CFG_LIST,                                                                  \
		.offset = offsetof(stype, smember.hooks),                                          \
		.count_offset = offsetof(stype, smember.n_hooks),                                  \
		.min = 0,                                                                          \
		.max = 256,                                                                        \
		.section = &webhook_hook_section,                                                  \
		.doc = "The webhook endpoints: each one a URL path on the gateway port, how its "  \
		       "deliveries are verified, where the text is in the body, and how the "      \
		       "agent's reply goes back (docs/channels/webhooks.md).",                     \
	}
/* clang-format on */

/* The rules across hooks (names and paths unique), for the embedding
 * section's check; key paths are relative to that section. Returns the
 * number of errors added. Any thread. */
int webhook_config_check(const struct webhook_config *w, struct cfg_error_ctx *ctx);

/* The hook whose path is path, or NULL. Borrowed from w. Any thread. */
const struct webhook_hook_config *webhook_config_find_path(const struct webhook_config *w,
                                                           const char *path);

/* The hook called name, or NULL. Borrowed from w. Any thread. */
const struct webhook_hook_config *webhook_config_find(const struct webhook_config *w,
                                                      const char *name);

/* Writes the hook's URL path (its `path`, or /hooks/<name>) into out.
 * Returns out; "" when it does not fit. Any thread. */
const char *webhook_hook_path(const struct webhook_hook_config *h, char *out, size_t size);

/* ---- mapping paths ----
 *
 * A path names one value in a JSON document: object keys joined by ".",
 * each optionally followed by array indexes in brackets, e.g. `text`,
 * `message.text`, `entries[0].changes[2].value`, `[1].id`. Keys cannot
 * hold ".", "[" or "]". At most WEBHOOK_PATH_DEPTH steps. */
#define WEBHOOK_PATH_DEPTH 32

/* Whether path is well formed; NULL when it is, else a static message. */
const char *webhook_path_error(const char *path);

/* Looks path up in root. Returns SB_OK with *out borrowed from root,
 * SB_ERR_NOTFOUND when a step is missing, or SB_ERR_INVAL when the path is
 * malformed. Any thread. */
int webhook_path_get(const json_t *root, const char *path, const json_t **out);

#endif
