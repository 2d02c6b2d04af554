/*
 * bindings_config.c - schema tables for `bindings`, `session` and the access
 * keys of each channel, and the checks that apply within one entry.
 */
#include "bindings/bindings_config.h"

#include <stddef.h>
#include <string.h>

#include "bindings/bindings.h"
#include "gateway/core/envelope.h"

#define BC_ENUM_END NULL

/* ---- bindings ---- */

static const char *const binding_peer_kinds[] = {"direct", "group", "channel", BC_ENUM_END};

/* The choices above are the envelope's kinds, in its order. */
_Static_assert(ENVELOPE_PEER_DIRECT == 0 && ENVELOPE_PEER_GROUP == 1 && ENVELOPE_PEER_CHANNEL == 2,
               "binding_peer_kinds must follow enum envelope_peer_kind");

static const struct cfg_key binding_peer_keys[] = {
    {
        .name = "kind",
        .type = CFG_ENUM,
        .offset = offsetof(struct binding_peer_config, kind),
        .choices = binding_peer_kinds,
        .doc = "The kind of conversation: `direct` (a person; the id is their user id), "
               "`group` or `channel`. Required with `peer`.",
    },
    {
        .name = "id",
        .type = CFG_STRING,
        .offset = offsetof(struct binding_peer_config, id),
        .min = 1,
        .max = BINDINGS_ID_MAX,
        .doc = "The chat, group or channel id as the channel names it (Telegram chat id, "
               "Slack channel id), or `\"*\"` for any peer of that kind. Required with "
               "`peer`.",
    },
};

static int binding_peer_check(void *obj, struct cfg_error_ctx *ctx)
{
	struct binding_peer_config *p = obj;
	bool kind = cfg_where(ctx, "kind", NULL, NULL), id = cfg_where(ctx, "id", NULL, NULL);
	int added = 0;

	p->given = cfg_where(ctx, NULL, NULL, NULL);
	if (!p->given)
		return 0;
	if (!kind) {
		cfg_error_add(ctx, NULL, "write e.g. peer: {kind: group, id: \"-100123\"}",
		              "a peer needs \"kind\" (direct, group or channel)");
		added++;
	}
	if (!id) {
		cfg_error_add(ctx, NULL, "use id: \"*\" to match any peer of that kind",
		              "a peer needs \"id\"");
		added++;
	}
	return added;
}

static const struct cfg_section binding_peer_section = {
    .name = "peer",
    .size = sizeof(struct binding_peer_config),
    .keys = binding_peer_keys,
    .nkeys = sizeof binding_peer_keys / sizeof binding_peer_keys[0],
    .check = binding_peer_check,
    .doc = "Matches one conversation (or, with `id: \"*\"`, every conversation of a kind).",
};

static const struct cfg_key binding_match_keys[] = {
    {
        .name = "channel",
        .type = CFG_STRING,
        .offset = offsetof(struct binding_match_config, channel),
        .min = 1,
        .max = BINDINGS_CHANNEL_MAX,
        .flags = CFG_REQUIRED,
        .doc = "The channel: `telegram`, `slack`, `webhook` or `webchat`.",
    },
    {
        .name = "account",
        .type = CFG_STRING,
        .offset = offsetof(struct binding_match_config, account),
        .min = 1,
        .max = BINDINGS_ACCOUNT_MAX,
        .doc = "The channel account (bot); `\"*\"` for any. Omitted: the channel's default "
               "account (`default`).",
    },
    {
        .name = "peer",
        .type = CFG_SECTION,
        .offset = offsetof(struct binding_match_config, peer),
        .section = &binding_peer_section,
        .doc = "The conversation: `{kind: direct|group|channel, id: ID}`.",
    },
    {
        .name = "guild",
        .type = CFG_STRING,
        .offset = offsetof(struct binding_match_config, guild),
        .min = 1,
        .max = BINDINGS_ID_MAX,
        .doc = "A Discord-style guild (server) id.",
    },
    {
        .name = "team",
        .type = CFG_STRING,
        .offset = offsetof(struct binding_match_config, team),
        .min = 1,
        .max = BINDINGS_ID_MAX,
        .doc = "A Slack workspace (team) id.",
    },
};

static const struct cfg_section binding_match_section = {
    .name = "match",
    .size = sizeof(struct binding_match_config),
    .keys = binding_match_keys,
    .nkeys = sizeof binding_match_keys / sizeof binding_match_keys[0],
    .doc = "What a message must have for the binding to apply; every field given must "
           "match.",
};

static const struct cfg_key binding_keys[] = {
    {
        .name = "agent",
        .type = CFG_STRING,
        .offset = offsetof(struct binding_config, agent),
        .min = 1,
        .max = 64,
        .flags = CFG_REQUIRED,
        .doc = "The id of the agent that answers matching messages.",
    },
    {
        .name = "match",
        .type = CFG_SECTION,
        .offset = offsetof(struct binding_config, match),
        .section = &binding_match_section,
        .flags = CFG_REQUIRED,
        .doc = "The messages this binding applies to.",
    },
    {
        .name = "comment",
        .type = CFG_STRING,
        .offset = offsetof(struct binding_config, comment),
        .min = 0,
        .max = 1024,
        .doc = "Free text, shown by `switchboard bindings` and `switchboard route`.",
    },
};

static int binding_check(void *obj, struct cfg_error_ctx *ctx)
{
	struct binding_config *b = obj;

	cfg_where(ctx, NULL, &b->line, &b->col);
	return 0;
}

const struct cfg_section binding_config_section = {
    .name = "binding",
    .size = sizeof(struct binding_config),
    .keys = binding_keys,
    .nkeys = sizeof binding_keys / sizeof binding_keys[0],
    .check = binding_check,
    .doc = "One entry of the `bindings` list: messages that match go to the agent. The most "
           "specific binding wins (exact peer, parent peer, peer wildcard, guild, team, "
           "account, channel, then the default agent); within one level, the first in the "
           "file. See docs/routing.md.",
};

/* ---- session ---- */

const char *const session_dm_scope_names[] = {"main", "per-peer", "per-channel-peer",
                                              "per-account-channel-peer", BC_ENUM_END};
const char *const session_reset_mode_names[] = {"none", "daily", "idle", BC_ENUM_END};

static const struct cfg_key session_reset_keys[] = {
    {
        .name = "mode",
        .type = CFG_ENUM,
        .offset = offsetof(struct session_reset_config, mode),
        .def = "none",
        .choices = session_reset_mode_names,
        .doc = "When a session starts afresh: `none` (never by itself), `daily` (the first "
               "message after `at_hour`) or `idle` (the first message after `idle_minutes` "
               "of silence).",
    },
    {
        .name = "at_hour",
        .type = CFG_INT,
        .offset = offsetof(struct session_reset_config, at_hour),
        .min = 0,
        .max = 23,
        .def = "4",
        .doc = "`daily`: the hour of the day (the gateway's local time) the session turns "
               "over.",
    },
    {
        .name = "idle_minutes",
        .type = CFG_INT,
        .offset = offsetof(struct session_reset_config, idle_minutes),
        .min = 1,
        .max = 525600,
        .def = "60",
        .doc = "`idle`: minutes without a message after which the next one starts a new "
               "session.",
    },
};

static const struct cfg_section session_reset_section = {
    .name = "reset",
    .size = sizeof(struct session_reset_config),
    .keys = session_reset_keys,
    .nkeys = sizeof session_reset_keys / sizeof session_reset_keys[0],
    .doc = "When a session key gets a fresh session (a new transcript).",
};

static const struct cfg_key session_reset_by_type_keys[] = {
    {
        .name = "direct",
        .type = CFG_SECTION,
        .offset = offsetof(struct session_reset_by_type, direct),
        .section = &session_reset_section,
        .doc = "Direct messages. Not given: `session.reset`.",
    },
    {
        .name = "group",
        .type = CFG_SECTION,
        .offset = offsetof(struct session_reset_by_type, group),
        .section = &session_reset_section,
        .doc = "Groups and channels. Not given: `session.reset`.",
    },
    {
        .name = "thread",
        .type = CFG_SECTION,
        .offset = offsetof(struct session_reset_by_type, thread),
        .section = &session_reset_section,
        .doc = "Threads and forum topics. Not given: `session.reset`.",
    },
};

static const struct cfg_section session_reset_by_type_section = {
    .name = "reset_by_type",
    .size = sizeof(struct session_reset_by_type),
    .keys = session_reset_by_type_keys,
    .nkeys = sizeof session_reset_by_type_keys / sizeof session_reset_by_type_keys[0],
    .doc = "A reset policy per kind of session, instead of `session.reset`.",
};

/* "channel:id" with both parts non-empty. */
static bool session_link_id_ok(const char *s)
{
	const char *colon = strchr(s, ':');

	return colon && colon != s && colon[1] != '\0';
}

static int session_link_check(void *obj, struct cfg_error_ctx *ctx)
{
	const struct session_identity_link *l = obj;
	char key[32];
	int added = 0;

	for (size_t i = 0; i < l->n_ids; i++) {
		if (session_link_id_ok(l->ids[i]))
			continue;
		snprintf(key, sizeof key, "ids[%zu]", i);
		cfg_error_add(ctx, key, "write the channel, a colon and the id: \"telegram:123\"",
		              "\"%s\" is not of the form channel:id", l->ids[i]);
		added++;
	}
	return added;
}

static const struct cfg_key session_link_keys[] = {
    {
        .name = "canonical",
        .type = CFG_STRING,
        .offset = offsetof(struct session_identity_link, canonical),
        .min = 1,
        .max = BINDINGS_ID_MAX,
        .flags = CFG_REQUIRED,
        .doc = "The name this person gets in per-peer session keys.",
    },
    {
        .name = "ids",
        .type = CFG_STRING_LIST,
        .offset = offsetof(struct session_identity_link, ids),
        .count_offset = offsetof(struct session_identity_link, n_ids),
        .min = 1,
        .max = 64,
        .flags = CFG_REQUIRED,
        .doc = "The person's ids as `channel:id` (`telegram:123`, `slack:U456`).",
    },
};

static const struct cfg_section session_link_section = {
    .name = "identity_link",
    .size = sizeof(struct session_identity_link),
    .keys = session_link_keys,
    .nkeys = sizeof session_link_keys / sizeof session_link_keys[0],
    .check = session_link_check,
    .doc = "One person known under several ids: direct-message sessions scoped per peer "
           "follow them across channels.",
};

static int session_check(void *obj, struct cfg_error_ctx *ctx)
{
	struct session_config *s = obj;
	char key[64];
	int added = 0;

	s->reset.given = cfg_where(ctx, "reset", NULL, NULL);
	s->reset_by_type.direct.given = cfg_where(ctx, "reset_by_type.direct", NULL, NULL);
	s->reset_by_type.group.given = cfg_where(ctx, "reset_by_type.group", NULL, NULL);
	s->reset_by_type.thread.given = cfg_where(ctx, "reset_by_type.thread", NULL, NULL);
	s->reset_triggers_given = cfg_where(ctx, "reset_triggers", NULL, NULL);
	for (size_t i = 0; i < s->n_reset_triggers; i++) {
		const char *t = s->reset_triggers[i];

		if (t[0] && !strpbrk(t, " \t\r\n"))
			continue;
		snprintf(key, sizeof key, "reset_triggers[%zu]", i);
		cfg_error_add(ctx, key, "write one word such as \"/new\"",
		              "a reset trigger is one non-empty word");
		added++;
	}
	/* One id belongs to one person. */
	for (size_t i = 0; i < s->n_identity_links; i++) {
		const struct session_identity_link *l = &s->identity_links[i];

		for (size_t j = 0; j < l->n_ids; j++) {
			bool dup = false;

			for (size_t pi = 0; pi <= i && !dup; pi++) {
				const struct session_identity_link *p = &s->identity_links[pi];
				size_t end = pi == i ? j : p->n_ids;

				for (size_t pj = 0; pj < end && !dup; pj++) {
					if (strcmp(p->ids[pj], l->ids[j]) != 0)
						continue;
					dup = true;
					snprintf(key, sizeof key, "identity_links[%zu].ids[%zu]", i,
					         j);
					cfg_error_add(
					    ctx, key, "list each id under one person only",
					    "\"%s\" is linked already (identity_links[%zu])",
					    l->ids[j], pi);
					added++;
				}
			}
		}
	}
	return added;
}

static const struct cfg_key session_keys[] = {
    {
        .name = "dm_scope",
        .type = CFG_ENUM,
        .offset = offsetof(struct session_config, dm_scope),
        .def = "main",
        .choices = session_dm_scope_names,
        .doc = "How direct messages share sessions: `main` (the operator's DMs — "
               "senders in `security.owners` — share `agent:<id>:main`; anyone else's, "
               "webhook senders included, get `agent:<id>:<channel>:direct:<peer>`), "
               "`per-peer` (`agent:<id>:direct:<peer>`), "
               "`per-channel-peer` (`agent:<id>:<channel>:direct:<peer>`) or "
               "`per-account-channel-peer` (`agent:<id>:<channel>:<account>:direct:<peer>`).",
    },
    {
        .name = "identity_links",
        .type = CFG_LIST,
        .offset = offsetof(struct session_config, identity_links),
        .count_offset = offsetof(struct session_config, n_identity_links),
        .min = 0,
        .max = 10000,
        .section = &session_link_section,
        .doc = "People known under several ids; in per-peer DM sessions each is named by "
               "`canonical`.",
    },
    {
        .name = "reset",
        .type = CFG_SECTION,
        .offset = offsetof(struct session_config, reset),
        .section = &session_reset_section,
        .doc = "When sessions start afresh by themselves.",
    },
    {
        .name = "reset_by_type",
        .type = CFG_SECTION,
        .offset = offsetof(struct session_config, reset_by_type),
        .section = &session_reset_by_type_section,
        .doc = "Reset policies for direct, group and thread sessions.",
    },
    {
        .name = "reset_triggers",
        .type = CFG_STRING_LIST,
        .offset = offsetof(struct session_config, reset_triggers),
        .count_offset = offsetof(struct session_config, n_reset_triggers),
        .min = 0,
        .max = 16,
        .doc = "Messages that start a fresh session under the same key (also as "
               "`/new@botname` and followed by text). Not given: `/new` and `/reset`; `[]` "
               "turns them off.",
    },
};

const struct cfg_section session_config_section = {
    .name = "session",
    .size = sizeof(struct session_config),
    .keys = session_keys,
    .nkeys = sizeof session_keys / sizeof session_keys[0],
    .check = session_check,
    .doc = "Session keys and resets.",
};

/* ---- access ---- */

const char *const access_dm_policy_names[] = {"pairing", "allowlist", "open", "disabled",
                                              BC_ENUM_END};
const char *const access_group_policy_names[] = {"allowlist", "open", "disabled", BC_ENUM_END};

static const struct cfg_key access_group_keys[] = {
    {
        .name = "id",
        .type = CFG_STRING,
        .offset = offsetof(struct access_group_config, id),
        .min = 1,
        .max = BINDINGS_ID_MAX,
        .flags = CFG_REQUIRED,
        .doc = "The group or channel id (Telegram: the negative chat id; Slack: `C...`), or "
               "`\"*\"` for the settings of every group not listed.",
    },
    {
        .name = "require_mention",
        .type = CFG_BOOL,
        .offset = offsetof(struct access_group_config, require_mention),
        .def = "true",
        .doc = "Answer only messages that mention the bot (or reply to it, or match a "
               "mention pattern).",
    },
    {
        .name = "allow_from",
        .type = CFG_STRING_LIST,
        .offset = offsetof(struct access_group_config, allow_from),
        .count_offset = offsetof(struct access_group_config, n_allow_from),
        .min = 0,
        .max = 10000,
        .doc = "Senders who may trigger the bot in this group; none listed = everyone.",
    },
};

const struct cfg_section access_group_section = {
    .name = "group",
    .size = sizeof(struct access_group_config),
    .keys = access_group_keys,
    .nkeys = sizeof access_group_keys / sizeof access_group_keys[0],
    .doc = "One group or channel the bot may answer in.",
};

static bool access_has_star(char *const *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(v[i], "*") == 0)
			return true;
	return false;
}

int access_config_check(const struct access_config *a, struct cfg_error_ctx *ctx)
{
	char key[64], why[160];
	int added = 0;

	if (a->dm_policy == ACCESS_DM_OPEN && !access_has_star(a->allow_from, a->n_allow_from)) {
		cfg_error_add(ctx, "dm_policy", "add allow_from: [\"*\"] to let anyone in",
		              "dm_policy open needs \"*\" in allow_from");
		added++;
	}
	for (size_t i = 0; i < a->n_groups; i++) {
		for (size_t j = 0; a->groups[i].id && j < i; j++) {
			if (!a->groups[j].id || strcmp(a->groups[j].id, a->groups[i].id) != 0)
				continue;
			snprintf(key, sizeof key, "groups[%zu].id", i);
			cfg_error_add(ctx, key, "keep one entry per group",
			              "duplicate group id \"%s\" (also groups[%zu].id)",
			              a->groups[i].id, j);
			added++;
			break;
		}
	}
	for (size_t i = 0; i < a->n_mention_patterns; i++) {
		if (bindings_pattern_check(a->mention_patterns[i], why, sizeof why) == 0)
			continue;
		snprintf(key, sizeof key, "mention_patterns[%zu]", i);
		cfg_error_add(ctx, key, "write a PCRE2 regular expression, e.g. \"\\\\bbot\\\\b\"",
		              "not a valid regular expression: %s", why);
		added++;
	}
	return added;
}
