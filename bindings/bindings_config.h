/*
 * bindings_config.h - the configuration the routing table is built from:
 * the top-level `bindings` list, the top-level `session` section, and the
 * access keys (DM and group policy) that every channel section embeds.
 *
 * These are schema tables for the config walker (gateway/core/cfg.h) and
 * the structs they fill. Strings and arrays belong to the struct and are
 * released by cfg_release. Fields marked "filled at load" are not keys:
 * the sections' checks record them while the file is applied (where an
 * entry is, whether an optional section was written at all).
 *
 * Cross-entry rules that need the whole file (agent ids exist, channel
 * names are known, no two bindings have the same match) are checked by
 * bindings_check (bindings.h) from the gateway's root section.
 */
#ifndef SB_BINDINGS_BINDINGS_CONFIG_H
#define SB_BINDINGS_BINDINGS_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gateway/core/cfg.h"
#include "gateway/core/envelope.h"

/* Longest ids a binding may name; an inbound id longer than these can
 * never match one. */
#define BINDINGS_CHANNEL_MAX 64
#define BINDINGS_ACCOUNT_MAX ENVELOPE_ACCOUNT_MAX
#define BINDINGS_ID_MAX 256

/* ---- bindings ---- */

struct binding_peer_config {
	int kind;   /* enum envelope_peer_kind */
	char *id;   /* "*" = any peer of that kind */
	bool given; /* filled at load: `peer` was written */
};

struct binding_match_config {
	char *channel; /* required */
	char *account; /* NULL: the channel's default account; "*": any account */
	struct binding_peer_config peer;
	char *guild; /* NULL: any */
	char *team;  /* NULL: any */
};

struct binding_config {
	char *agent; /* an agent id */
	struct binding_match_config match;
	char *comment;
	int line, col; /* filled at load: where the entry starts */
};

/* The schema of one entry of the top-level `bindings` list. */
extern const struct cfg_section binding_config_section;

/* ---- session ---- */

enum session_dm_scope {
	SESSION_DM_MAIN = 0,
	SESSION_DM_PER_PEER,
	SESSION_DM_PER_CHANNEL_PEER,
	SESSION_DM_PER_ACCOUNT_CHANNEL_PEER,
};

enum session_reset_mode {
	SESSION_RESET_NONE = 0,
	SESSION_RESET_DAILY,
	SESSION_RESET_IDLE,
};

struct session_reset_config {
	int mode;             /* enum session_reset_mode */
	int64_t at_hour;      /* daily: local hour 0-23 */
	int64_t idle_minutes; /* idle: minutes without a message */
	bool given;           /* filled at load: the section was written */
};

struct session_reset_by_type {
	struct session_reset_config direct, group, thread;
};

struct session_identity_link {
	char *canonical; /* the one name the person gets in session keys */
	char **ids;      /* "channel:id", e.g. "telegram:123" */
	size_t n_ids;
};

struct session_config {
	int dm_scope; /* enum session_dm_scope */
	struct session_identity_link *identity_links;
	size_t n_identity_links;
	struct session_reset_config reset;
	struct session_reset_by_type reset_by_type; /* a type not given uses reset */
	char **reset_triggers;
	size_t n_reset_triggers;
	bool reset_triggers_given; /* filled at load; not given: "/new", "/reset" */
};

/* The schema of the top-level `session` section. */
extern const struct cfg_section session_config_section;

/* The enum names, indexed by value (NULL-terminated). */
extern const char *const session_dm_scope_names[];
extern const char *const session_reset_mode_names[];

/* ---- access (embedded in every channel section) ---- */

enum access_dm_policy {
	ACCESS_DM_PAIRING = 0,
	ACCESS_DM_ALLOWLIST,
	ACCESS_DM_OPEN,
	ACCESS_DM_DISABLED,
};

enum access_group_policy {
	ACCESS_GROUP_ALLOWLIST = 0,
	ACCESS_GROUP_OPEN,
	ACCESS_GROUP_DISABLED,
};

struct access_group_config {
	char *id; /* the group / channel id; "*" = every group */
	bool require_mention;
	char **allow_from; /* senders who may trigger the bot here; none = all */
	size_t n_allow_from;
};

struct access_config {
	int dm_policy;     /* enum access_dm_policy */
	char **allow_from; /* DM senders; "*" = anyone; "<channel>:<id>" also accepted */
	size_t n_allow_from;
	int group_policy; /* enum access_group_policy */
	struct access_group_config *groups;
	size_t n_groups;
	char **mention_patterns; /* PCRE2, case-insensitive */
	size_t n_mention_patterns;
	bool allow_bots;
};

extern const char *const access_dm_policy_names[];
extern const char *const access_group_policy_names[];

/* The schema of one entry of a channel's `groups` list. */
extern const struct cfg_section access_group_section;

/* The access keys, as initialisers of struct cfg_key, for a channel
 * section whose struct (stype) holds a struct access_config at smember:
 *
 *	static const struct cfg_key slack_keys[] = {
 *	    ACCESS_CONFIG_KEYS(struct channel_slack_config, access),
 *	    ...adapter keys...
 *	};
 *
 * The section's check must call access_config_check. */
/* clang-format off */
#define ACCESS_CONFIG_KEYS(stype, smember)                                                         \
	{                                                                                          \
		.name = "dm_policy",                                                               \
		.type = CFG_ENUM,                                                                  \
		.offset = offsetof(stype, smember.dm_policy),                                      \
		.def = "pairing",                                                                  \
		.choices = access_dm_policy_names,                                                 \
		.doc = "Who may talk to the bot in direct messages: `pairing` (unknown senders "   \
		       "get a one-time code the operator approves with `switchboard pairing "      \
		       "approve`), `allowlist` (only `allow_from` and senders approved earlier), " \
		       "`open` (anyone; needs `\"*\"` in `allow_from`) or `disabled`.",            \
	},                                                                                         \
	{                                                                                          \
		.name = "allow_from",                                                              \
		.type = CFG_STRING_LIST,                                                           \
		.offset = offsetof(stype, smember.allow_from),                                     \
		.count_offset = offsetof(stype, smember.n_allow_from),                             \
		.min = 0,                                                                          \
		.max = 10000,                                                                      \
		.doc = "Sender ids allowed in direct messages without pairing (`\"*\"` = "         \
		       "anyone). An id may carry the channel as a prefix (`telegram:123`).",       \
	},                                                                                         \
	{                                                                                          \
		.name = "group_policy",                                                            \
		.type = CFG_ENUM,                                                                  \
		.offset = offsetof(stype, smember.group_policy),                                   \
		.def = "allowlist",                                                                \
		.choices = access_group_policy_names,                                              \
		.doc = "Groups and channels the bot answers in: `allowlist` (only those listed "   \
		       "in `groups`), `open` (any) or `disabled`.",                                \
	},                                                                                         \
	{                                                                                          \
		.name = "groups",                                                                  \
		.type = CFG_LIST,                                                                  \
		.offset = offsetof(stype, smember.groups),                                         \
		.count_offset = offsetof(stype, smember.n_groups),                                 \
		.min = 0,                                                                          \
		.max = 10000,                                                                      \
		.section = &access_group_section,                                                  \
		.doc = "Per-group settings; with `group_policy: allowlist` also the list of "      \
		       "groups the bot answers in.",                                               \
	},                                                                                         \
	{                                                                                          \
		.name = "mention_patterns",                                                        \
		.type = CFG_STRING_LIST,                                                           \
		.offset = offsetof(stype, smember.mention_patterns),                               \
		.count_offset = offsetof(stype, smember.n_mention_patterns),                       \
		.min = 0,                                                                          \
		.max = 64,                                                                         \
		.doc = "Regular expressions (PCRE2, case-insensitive) that count as a "   \
		       "mention of the bot in a group message, besides the channel's own "         \
		       "mention and replies to the bot.",                                          \
	},                                                                                         \
	{                                                                                          \
		.name = "allow_bots",                                                              \
		.type = CFG_BOOL,                                                                  \
		.offset = offsetof(stype, smember.allow_bots),                                     \
		.def = "false",                                                                    \
		.doc = "Accept messages from other bots (the bot's own messages are always "       \
		       "dropped).",                                                                \
	}
/* clang-format on */

/* The cross-key rules of the access keys, for the embedding section's
 * check: `open` needs "*" in allow_from, group ids are unique, mention
 * patterns compile. Key paths are relative to that section. Returns the
 * number of errors added. Any thread. */
int access_config_check(const struct access_config *a, struct cfg_error_ctx *ctx);

#endif
