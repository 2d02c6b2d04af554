/*
 * webhook_config.c - the schema of `channels.webhook.hooks[]`, the checks
 * within one hook and across hooks, and the mapping path syntax.
 */
#include "channels/webhook/webhook_config.h"

#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "channels/adapter.h"
#include "channels/webhook/webhook_verify.h"
#include "gateway/core/err.h"

#define WEBHOOK_BEARER_MIN 16

const char *const webhook_verify_names[] = {"standard", "github", "bearer", NULL};
const char *const webhook_mode_names[] = {"sync", "callback", "none", NULL};
const char *const webhook_peer_names[] = {"auto", "direct", "group", "channel", NULL};

/* ---- mapping paths ---- */

/* Walks path; with root NULL it only checks the syntax. */
static int webhook_path_walk(const json_t *root, const char *path, const json_t **out,
                             const char **why)
{
	const json_t *cur = root;
	const char *p = path;
	char key[WEBHOOK_PATH_MAX + 1];
	int steps = 0;

	*why = "an empty path";
	if (!p || !*p)
		return SB_ERR_INVAL;
	*why = "a path is at most 256 characters";
	if (strlen(p) > WEBHOOK_PATH_MAX)
		return SB_ERR_INVAL;
	for (;;) {
		size_t n = strcspn(p, ".[]");

		if (n) {
			memcpy(key, p, n);
			key[n] = '\0';
			p += n;
			if (root)
				cur = json_is_object(cur) ? json_object_get(cur, key) : NULL;
			steps++;
		} else if (*p != '[') {
			*why = "an empty key (two dots in a row, or a dot at an end)";
			return SB_ERR_INVAL;
		}
		while (*p == '[') {
			char *end;
			unsigned long idx;

			if (p[1] < '0' || p[1] > '9') {
				*why = "an index in brackets must be a number, e.g. items[0]";
				return SB_ERR_INVAL;
			}
			idx = strtoul(p + 1, &end, 10);
			if (*end != ']' || idx > 1000000) {
				*why = "an index in brackets must be a number, e.g. items[0]";
				return SB_ERR_INVAL;
			}
			if (root)
				cur = json_is_array(cur) ? json_array_get(cur, idx) : NULL;
			steps++;
			p = end + 1;
		}
		if (steps > WEBHOOK_PATH_DEPTH) {
			*why = "a path has at most 32 steps";
			return SB_ERR_INVAL;
		}
		if (!*p)
			break;
		if (*p != '.' || !p[1]) {
			*why = "expected \".\" or \"[\" between keys";
			return SB_ERR_INVAL;
		}
		p++;
	}
	*why = NULL;
	if (!root)
		return SB_OK;
	if (!cur)
		return SB_ERR_NOTFOUND;
	*out = cur;
	return SB_OK;
}

const char *webhook_path_error(const char *path)
{
	const char *why = NULL;

	return webhook_path_walk(NULL, path, NULL, &why) == SB_OK ? NULL : why;
}

int webhook_path_get(const json_t *root, const char *path, const json_t **out)
{
	const char *why;

	if (!root)
		return SB_ERR_NOTFOUND;
	return webhook_path_walk(root, path, out, &why);
}

/* ---- validators ---- */

static const char *webhook_check_name(const void *field)
{
	const char *s = *(char *const *)field;

	if (!s)
		return NULL;
	for (const char *p = s; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' ||
		      *p == '_'))
			return "a hook name may hold only lower-case letters, digits, \"_\" and "
			       "\"-\"";
	if (strcmp(s, "default") == 0)
		return "\"default\" is the channel's default account; choose another name";
	return NULL;
}

static const char *webhook_check_path(const void *field)
{
	const char *s = *(char *const *)field;
	size_t plen = strlen(WEBHOOK_PATH_PREFIX);

	if (!s)
		return NULL;
	if (strncmp(s, WEBHOOK_PATH_PREFIX, plen) != 0 || !s[plen])
		return "a hook path must start with /hooks/ and name something after it";
	for (const char *p = s; *p; p++)
		if (*p <= ' ' || *p > '~' || *p == '?' || *p == '#' || *p == '%')
			return "a hook path may hold only printable ASCII without spaces, \"?\", "
			       "\"#\" and \"%\"";
	return NULL;
}

static const char *webhook_check_mapping_path(const void *field)
{
	const char *s = *(char *const *)field;

	return s ? webhook_path_error(s) : NULL;
}

static const char *webhook_check_url(const void *field)
{
	const char *s = *(char *const *)field;

	if (!s)
		return NULL;
	if (strncmp(s, "http://", 7) != 0 && strncmp(s, "https://", 8) != 0)
		return "expected an http:// or https:// URL";
	for (const char *p = s; *p; p++)
		if (*p <= ' ' || *p > '~')
			return "a URL may not hold spaces or non-ASCII characters";
	return NULL;
}

/* ---- schema ---- */

static const struct cfg_key webhook_mapping_keys[] = {
    {
        .name = "text",
        .type = CFG_STRING,
        .offset = offsetof(struct webhook_mapping_config, text),
        .def = "text",
        .validate = webhook_check_mapping_path,
        .doc = "Where the message text is (a string; required in every delivery). Paths "
               "are keys joined by dots, with array indexes in brackets: `text`, "
               "`message.text`, `\"entries[0].body\"` (quote a path with brackets in YAML).",
    },
    {
        .name = "sender",
        .type = CFG_STRING,
        .offset = offsetof(struct webhook_mapping_config, sender),
        .def = "sender",
        .validate = webhook_check_mapping_path,
        .doc = "Where the sender's id is (a string or number). Absent from a delivery: the "
               "hook's name is the sender. Access rules (`allow_from`, pairing) check it.",
    },
    {
        .name = "sender_name",
        .type = CFG_STRING,
        .offset = offsetof(struct webhook_mapping_config, sender_name),
        .def = "sender_name",
        .validate = webhook_check_mapping_path,
        .doc = "Where the sender's display name is (optional in a delivery).",
    },
    {
        .name = "conversation",
        .type = CFG_STRING,
        .offset = offsetof(struct webhook_mapping_config, conversation),
        .def = "conversation",
        .validate = webhook_check_mapping_path,
        .doc = "Where the conversation id is (optional in a delivery). Messages with one "
               "share a session per conversation; see `peer_kind`.",
    },
    {
        .name = "thread",
        .type = CFG_STRING,
        .offset = offsetof(struct webhook_mapping_config, thread),
        .def = "thread",
        .validate = webhook_check_mapping_path,
        .doc = "Where a thread id within the conversation is (optional in a delivery).",
    },
    {
        .name = "event_id",
        .type = CFG_STRING,
        .offset = offsetof(struct webhook_mapping_config, event_id),
        .validate = webhook_check_mapping_path,
        .doc = "Where the delivery's unique id is, when the body carries one (a string or "
               "number; then required in every delivery). It is the dedupe key: a delivery "
               "whose id was seen is answered but not processed again. Not set: the "
               "`webhook-id` header (standard), `X-GitHub-Delivery` (github), an "
               "`Idempotency-Key` header, or else a hash of the body.",
    },
};

static const struct cfg_section webhook_mapping_section = {
    .name = "mapping",
    .size = sizeof(struct webhook_mapping_config),
    .keys = webhook_mapping_keys,
    .nkeys = sizeof webhook_mapping_keys / sizeof webhook_mapping_keys[0],
    .doc = "Where a delivery's JSON body holds the message. The defaults read a plain body "
           "such as `{\"text\": \"hi\", \"sender\": \"u1\", \"conversation\": \"c1\"}`.",
};

static const struct cfg_key webhook_hook_keys[] = {
    {
        .name = "name",
        .type = CFG_STRING,
        .offset = offsetof(struct webhook_hook_config, name),
        .min = 1,
        .max = WEBHOOK_NAME_MAX,
        .flags = CFG_REQUIRED,
        .validate = webhook_check_name,
        .doc = "The hook's name: its default path is `/hooks/<name>`, and its messages come "
               "from the channel account of that name (bindings match it with "
               "`match: {channel: webhook, account: <name>}`).",
    },
    {
        .name = "path",
        .type = CFG_STRING,
        .offset = offsetof(struct webhook_hook_config, path),
        .min = 1,
        .max = WEBHOOK_PATH_MAX,
        .validate = webhook_check_path,
        .doc = "The URL path on the gateway port; must start with `/hooks/`. Default: "
               "`/hooks/<name>`.",
    },
    {
        .name = "verify",
        .type = CFG_ENUM,
        .offset = offsetof(struct webhook_hook_config, verify),
        .def = "standard",
        .choices = webhook_verify_names,
        .doc = "How deliveries prove where they come from: `standard` (Standard Webhooks "
               "signature headers, with a replay window), `github` (`X-Hub-Signature-256`) "
               "or `bearer` (`Authorization: Bearer <secret>`). There is no unverified "
               "mode.",
        .hint = "every hook is verified: a signature (standard, github) or a bearer token",
    },
    {
        .name = "secret",
        .type = CFG_STRING,
        .offset = offsetof(struct webhook_hook_config, secret),
        .min = 1,
        .max = 1024,
        .flags = CFG_REQUIRED | CFG_SECRET,
        .doc = "The shared secret: for `standard` a `whsec_` secret (base64 of 24 to 64 "
               "bytes); for `github` the webhook's secret text; for `bearer` the token (at "
               "least 16 characters). Keep it out of the file: `${file:secrets/NAME}` or "
               "`${ENV}`.",
    },
    {
        .name = "tolerance",
        .type = CFG_DURATION,
        .offset = offsetof(struct webhook_hook_config, tolerance_ms),
        .def = "5m",
        .min = 1000,
        .max = 3600000,
        .doc = "For `standard`: how far `webhook-timestamp` may be from the gateway's clock, "
               "in either direction; older or newer deliveries are refused (replay "
               "protection).",
    },
    {
        .name = "max_body",
        .type = CFG_SIZE,
        .offset = offsetof(struct webhook_hook_config, max_body),
        .def = "1MiB",
        .min = 2,
        .max = 25 * 1024 * 1024,
        .doc = "The largest body accepted (413 above it). `gateway.max_body` caps every "
               "request first.",
    },
    {
        .name = "max_auth_failures",
        .type = CFG_INT,
        .offset = offsetof(struct webhook_hook_config, max_auth_failures),
        .def = "30",
        .min = 0,
        .max = 1000000,
        .doc = "How many deliveries from one address may fail verification in a minute; past "
               "that the address gets 429 with `Retry-After` without its signature being "
               "checked, until the minute is over. 0: no limit.",
    },
    {
        .name = "mapping",
        .type = CFG_SECTION,
        .offset = offsetof(struct webhook_hook_config, mapping),
        .section = &webhook_mapping_section,
        .doc = "Where the text, sender, conversation, thread and event id are in the body.",
    },
    {
        .name = "peer_kind",
        .type = CFG_ENUM,
        .offset = offsetof(struct webhook_hook_config, peer_kind),
        .def = "auto",
        .choices = webhook_peer_names,
        .doc = "What kind of conversation a delivery is for routing and access: `auto` "
               "(`channel` when it has a conversation id, else `direct`, the sender), or "
               "always `direct`, `group` or `channel`.",
    },
    {
        .name = "mode",
        .type = CFG_ENUM,
        .offset = offsetof(struct webhook_hook_config, mode),
        .def = "sync",
        .choices = webhook_mode_names,
        .doc = "How the agent's reply goes back: `sync` (in the HTTP response, waiting up to "
               "`sync_timeout`; 202 when it takes longer), `callback` (202 at once; the reply "
               "is POSTed to `callback_url`, signed, with retries) or `none` (202; no reply "
               "is sent).",
    },
    {
        .name = "sync_timeout",
        .type = CFG_DURATION,
        .offset = offsetof(struct webhook_hook_config, sync_timeout_ms),
        .def = "30s",
        .min = 100,
        .max = 300000,
        .doc = "For `sync`: how long the HTTP response waits for the reply before it answers "
               "202 with the message id (a retry of the same delivery later gets the reply). "
               "Keep it below the sender's own request timeout.",
    },
    {
        .name = "callback_url",
        .type = CFG_STRING,
        .offset = offsetof(struct webhook_hook_config, callback_url),
        .min = 1,
        .max = 2048,
        .validate = webhook_check_url,
        .doc = "For `callback`: where replies are POSTed (required in that mode).",
    },
    {
        .name = "callback_secret",
        .type = CFG_STRING,
        .offset = offsetof(struct webhook_hook_config, callback_secret),
        .min = 1,
        .max = 1024,
        .flags = CFG_SECRET,
        .doc = "For `callback`: the `whsec_` secret that signs replies with Standard "
               "Webhooks headers (required in that mode). `webhook-id` is the reply's "
               "idempotency key, the same on every retry.",
    },
    {
        .name = "callback_timeout",
        .type = CFG_DURATION,
        .offset = offsetof(struct webhook_hook_config, callback_timeout_ms),
        .def = "15s",
        .min = 1000,
        .max = 120000,
        .doc = "For `callback`: how long one POST may take before it counts as failed and "
               "is retried.",
    },
};

/* The rules within one hook that depend on several keys. */
static int webhook_hook_check(void *obj, struct cfg_error_ctx *ctx)
{
	struct webhook_hook_config *h = obj;
	unsigned char key[WEBHOOK_KEY_MAX];
	size_t len = 0;
	int added = 0, rc;

	if (h->secret && h->verify == WEBHOOK_VERIFY_STANDARD) {
		rc = webhook_secret_decode(h->secret, key, sizeof key, &len);
		sodium_memzero(key, sizeof key);
		if (rc == SB_ERR_INVAL) {
			cfg_error_add(
			    ctx, "secret", "Standard Webhooks secrets look like whsec_<base64>",
			    "not a whsec_ secret: the part after \"whsec_\" is not base64");
			added++;
		} else if (rc) {
			cfg_error_add(
			    ctx, "secret",
			    "make one with: printf 'whsec_%s\\n' \"$(head -c 32 /dev/urandom "
			    "| base64)\"",
			    "a whsec_ secret must decode to 24 to 64 bytes");
			added++;
		}
	}
	if (h->secret && h->verify == WEBHOOK_VERIFY_BEARER &&
	    strlen(h->secret) < WEBHOOK_BEARER_MIN) {
		cfg_error_add(ctx, "secret",
		              "use a long random token, e.g. from openssl rand -hex 24",
		              "a bearer token must be at least %d characters", WEBHOOK_BEARER_MIN);
		added++;
	}
	if (h->mode == WEBHOOK_MODE_CALLBACK) {
		if (!h->callback_url) {
			cfg_error_add(ctx, "callback_url", NULL,
			              "mode callback needs callback_url: where replies are POSTed");
			added++;
		}
		if (!h->callback_secret) {
			cfg_error_add(
			    ctx, "callback_secret",
			    "replies are signed with Standard Webhooks; the receiver verifies "
			    "them with the same secret",
			    "mode callback needs callback_secret (a whsec_ secret)");
			added++;
		}
	}
	if (h->callback_secret) {
		rc = webhook_secret_decode(h->callback_secret, key, sizeof key, &len);
		sodium_memzero(key, sizeof key);
		if (rc) {
			cfg_error_add(
			    ctx, "callback_secret",
			    "make one with: printf 'whsec_%s\\n' \"$(head -c 32 /dev/urandom "
			    "| base64)\"",
			    "callback_secret must be a whsec_ secret of 24 to 64 bytes");
			added++;
		}
	}
	if (!h->mapping.text) {
		cfg_error_add(ctx, "mapping.text", NULL, "the text path cannot be empty");
		added++;
	}
	return added;
}

const struct cfg_section webhook_hook_section = {
    .name = "hooks",
    .size = sizeof(struct webhook_hook_config),
    .keys = webhook_hook_keys,
    .nkeys = sizeof webhook_hook_keys / sizeof webhook_hook_keys[0],
    .check = webhook_hook_check,
    .doc = "One webhook endpoint.",
};

static const char *webhook_unique_name(const void *e, char *buf, size_t size)
{
	(void)buf;
	(void)size;
	return ((const struct webhook_hook_config *)e)->name;
}

static const char *webhook_unique_path(const void *e, char *buf, size_t size)
{
	return webhook_hook_path(e, buf, size);
}

static const struct channel_unique webhook_unique[] = {
    {"name", "name", true, "each hook needs its own name", webhook_unique_name},
    {"path", "path", true, "give each hook its own path", webhook_unique_path},
};

int webhook_config_check(const struct webhook_config *w, struct cfg_error_ctx *ctx)
{
	if (!w)
		return 0;
	return channel_config_unique(ctx, "hooks", "hook", w->hooks, w->n_hooks, sizeof *w->hooks,
	                             webhook_unique,
	                             sizeof webhook_unique / sizeof *webhook_unique);
}

const char *webhook_hook_path(const struct webhook_hook_config *h, char *out, size_t size)
{
	int n;

	if (h->path)
		n = snprintf(out, size, "%s", h->path);
	else
		n = snprintf(out, size, "%s%s", WEBHOOK_PATH_PREFIX, h->name ? h->name : "");
	if (n < 0 || (size_t)n >= size)
		out[0] = '\0';
	return out;
}

const struct webhook_hook_config *webhook_config_find_path(const struct webhook_config *w,
                                                           const char *path)
{
	char p[WEBHOOK_PATH_MAX + 1];

	for (size_t i = 0; w && path && i < w->n_hooks; i++)
		if (w->hooks[i].name &&
		    strcmp(webhook_hook_path(&w->hooks[i], p, sizeof p), path) == 0)
			return &w->hooks[i];
	return NULL;
}

const struct webhook_hook_config *webhook_config_find(const struct webhook_config *w,
                                                      const char *name)
{
	for (size_t i = 0; w && name && i < w->n_hooks; i++)
		if (w->hooks[i].name && strcmp(w->hooks[i].name, name) == 0)
			return &w->hooks[i];
	return NULL;
}
