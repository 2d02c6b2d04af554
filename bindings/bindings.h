/*
 * bindings.h - the routing table: which agent answers an inbound envelope,
 * in which session, and whether the sender may reach it at all.
 *
 * Pure logic, no I/O. The table is compiled once per configuration snapshot
 * (bindings_table_new) into hash indexes, so that a lookup costs a few hash
 * probes whatever the number of bindings; it is immutable afterwards and may
 * be read from any thread.
 *
 * Routing. Each binding belongs to one tier, by the most specific thing it
 * names: a peer id (tier "peer"), a peer id "*" ("peer-wildcard"), a guild
 * ("guild"), a team ("team"), an account other than "*" ("account"), or only
 * the channel, with account "*" or none ("channel"). An envelope is tried
 * against the tiers in this order, with "parent-peer" (the peer bindings
 * matched against the envelope's parent, so a thread inherits its channel's
 * binding) after "peer"; the first tier with a binding whose every given
 * field matches wins, and within a tier the binding first in the file. When
 * none does, the agent marked default answers, else the only agent; with
 * several agents and no default the envelope is refused (fail closed).
 *
 * Envelope conventions the table relies on:
 *   - account NULL or "" is the channel's default account, "default";
 *   - for a direct message, peer_id is the other person's user id (when it
 *     is NULL the sender id stands in);
 *   - thread_id set means a thread; on channel "telegram" it is a forum
 *     topic (session keys then end in ":topic:<id>" instead of
 *     ":thread:<id>");
 *   - parent_id is the conversation a thread belongs to, of the same peer
 *     kind unless the input says otherwise.
 *
 * Session keys:
 *   direct, dm_scope main                  agent:<id>:main
 *   direct, per-peer                       agent:<id>:direct:<peer>
 *   direct, per-channel-peer               agent:<id>:<channel>:direct:<peer>
 *   direct, per-account-channel-peer       agent:<id>:<channel>:<account>:direct:<peer>
 *   group / channel                        agent:<id>:<channel>:group:<peer> / ...:channel:<peer>
 *   then, for a thread                     ...:thread:<thread_id> (telegram: ...:topic:<id>)
 * where a direct <peer> is replaced by its identity link's canonical name
 * when session.identity_links lists "<channel>:<peer>".
 */
#ifndef SB_BINDINGS_BINDINGS_H
#define SB_BINDINGS_BINDINGS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bindings/bindings_config.h"
#include "gateway/core/buf.h"
#include "gateway/core/cfg.h"
#include "gateway/core/envelope.h"

#define BINDINGS_NONE SIZE_MAX
#define BINDINGS_DEFAULT_ACCOUNT "default"
#define BINDINGS_SESSION_KEY_MAX 640
#define BINDINGS_REASON_MAX 384

enum bindings_tier {
	BINDINGS_TIER_PEER = 0,
	BINDINGS_TIER_PARENT,
	BINDINGS_TIER_PEER_WILDCARD,
	BINDINGS_TIER_GUILD,
	BINDINGS_TIER_TEAM,
	BINDINGS_TIER_ACCOUNT,
	BINDINGS_TIER_CHANNEL,
	BINDINGS_TIER_DEFAULT, /* no binding matched: the default agent */
	BINDINGS_TIER_NONE,    /* no binding matched and no default: refused */
};

/* What the dispatcher does with the envelope. Anything but ALLOW means the
 * agent does not see it. */
enum bindings_verdict {
	BINDINGS_ALLOW = 0,
	BINDINGS_PAIRING,          /* unknown DM sender: reply once with a pairing code */
	BINDINGS_MENTION_REQUIRED, /* group message not for the bot (may be kept as context) */
	BINDINGS_DENY,             /* not allowed (or not routed) */
	BINDINGS_DROP,             /* loop prevention: from the bot itself or another bot */
};

enum bindings_session_type {
	BINDINGS_SESSION_DIRECT = 0,
	BINDINGS_SESSION_GROUP, /* groups and channels */
	BINDINGS_SESSION_THREAD,
};

/* One channel's access settings; the table copies what it needs. */
struct bindings_channel_access {
	const char *channel; /* "telegram", ... */
	const struct access_config *access;
};

/* What a table is compiled from. Everything is copied: the source may be
 * released once bindings_table_new returns. */
struct bindings_source {
	const char *file; /* shown with line numbers, e.g. "switchboard.yaml" */
	const struct binding_config *bindings;
	size_t n_bindings;
	const char *const *agent_ids; /* every configured agent, in file order */
	size_t n_agents;
	size_t default_agent; /* index of the agent marked default, or BINDINGS_NONE */
	const struct session_config *session; /* NULL: every default */
	const struct bindings_channel_access
	    *channels; /* channels without an entry get the defaults */
	size_t n_channels;
};

/* One routing question. */
struct bindings_input {
	const struct envelope *env; /* borrowed */
	/* The parent's peer kind; when not set, the envelope's peer kind. */
	bool parent_kind_set;
	enum envelope_peer_kind parent_kind;
	bool sender_is_self; /* the channel says the bot itself sent it */
	bool sender_is_bot;  /* the channel says another bot sent it */
	/* The sender is the operator (security.owners, or a channel of the
	 * operator's own). Under dm_scope: main only the operator's direct
	 * messages share the agent's main session; anyone else's (a webhook
	 * sender, a stranger who paired) get a session per channel and peer,
	 * as with per-channel-peer. Not set: not the operator. */
	bool owner;
	/* The persisted allow list (senders approved by pairing); NULL = none.
	 * Called at most once per decision, on the calling thread. */
	bool (*approved)(void *ud, const char *channel, const char *account, const char *sender_id);
	void *approved_ud;
};

struct bindings_decision {
	const char *agent_id; /* borrowed from the table; NULL when refused */
	enum bindings_tier tier;
	size_t binding; /* index in the `bindings` list, or BINDINGS_NONE */
	int line;       /* that binding's line in the file (bindings_table_file); 0 if none */
	enum bindings_session_type session_type;
	const struct session_reset_config *reset;   /* this session type's policy (borrowed) */
	char session_key[BINDINGS_SESSION_KEY_MAX]; /* "" when refused */
	enum bindings_verdict verdict;
	char reason[BINDINGS_REASON_MAX]; /* why the verdict, for logs and explain */
	bool reset_trigger;               /* the text starts with a reset trigger */
};

struct bindings_table;

/* Compiles src into a table. Returns SB_OK and sets *out; SB_ERR_INVAL when
 * src is inconsistent (a binding names an unknown agent, no agents, a
 * missing required field: bindings_check reports these at load);
 * SB_ERR_CONFIG when a mention pattern does not compile; SB_ERR_NOMEM. Any
 * thread. */
int bindings_table_new(struct bindings_table **out, const struct bindings_source *src);
void bindings_table_free(struct bindings_table *t); /* NULL is a no-op */

/* 0 when src compiles as a mention pattern (PCRE2, case-insensitive,
 * UTF-8, matched under a step limit), else -1 with the reason and its
 * offset in why. */
int bindings_pattern_check(const char *src, char *why, size_t why_len);

/* Bytes the table allocated (its arena and indexes, not the compiled
 * mention patterns). */
size_t bindings_table_memory(const struct bindings_table *t);

/* The file name given at compile time (borrowed). */
const char *bindings_table_file(const struct bindings_table *t);

/* The earlier binding of the same tier that wins whenever binding i would
 * (so i never does), or BINDINGS_NONE. */
size_t bindings_shadowed_by(const struct bindings_table *t, size_t i);

/* Routes in->env: agent, session key, reset policy and access verdict.
 * Returns SB_OK (a refusal is SB_OK with agent_id NULL and verdict DENY);
 * SB_ERR_INVAL when the envelope has no channel, or no peer to key a
 * session on; SB_ERR_TOOBIG when the session key would pass
 * BINDINGS_SESSION_KEY_MAX. Any thread; the table is read only. */
int bindings_route(const struct bindings_table *t, const struct bindings_input *in,
                   struct bindings_decision *out);

/* The session key of env for agent_id, as bindings_route computes it.
 * Same return codes. */
int bindings_session_key(const struct bindings_table *t, const char *agent_id,
                         const struct envelope *env, char *out, size_t size);

/* True when text (after leading blanks) starts with a reset trigger, alone
 * or followed by "@botname" and/or blanks and more text (compared without
 * regard to case). *rest (may be NULL) then points at that further text
 * ("" when none), inside text. */
bool bindings_reset_trigger(const struct bindings_table *t, const char *text, const char **rest);

/* The table's reset triggers (borrowed; *n may be 0: resets are off). */
const char *const *bindings_reset_triggers(const struct bindings_table *t, size_t *n);

/* Whether a session last active at last_activity_ms (unix ms; <= 0 = no
 * session yet) must start afresh at now_ms under policy p:
 *   none   never;
 *   idle   when at least idle_minutes passed;
 *   daily  when the last at_hour:00 boundary before now lies after the last
 *          activity, in local time given as utc_offset_s, seconds east of UTC
 *          (the caller takes it from localtime_r's tm_gmtoff, so daylight
 *          saving is its business and this function stays pure).
 * Any thread. */
bool bindings_session_should_reset(const struct session_reset_config *p, int64_t last_activity_ms,
                                   int64_t now_ms, int32_t utc_offset_s);

/* Explains the decision for in: the input, agent, session key, winning
 * binding with file:line, the access verdict and why, then every tier in
 * order with each candidate binding of the envelope's channel and why it did
 * or did not match (at most 20 per tier). Appends to out. Returns SB_OK,
 * the codes of bindings_route, or those of buf_*. Any thread. */
int bindings_explain(const struct bindings_table *t, const struct bindings_input *in,
                     struct buf *out);

/* The same as a JSON object (the caller owns *out). SB_ERR_NOMEM when
 * jansson fails. */
int bindings_explain_json(const struct bindings_table *t, const struct bindings_input *in,
                          json_t **out);

/* Lists the table in precedence order (tier by tier, file order within a
 * tier) with file:line, noting bindings that never win. Appends to out. */
int bindings_list(const struct bindings_table *t, struct buf *out);
int bindings_list_json(const struct bindings_table *t, json_t **out);

/* Load-time checks across the whole list, for the root section's check:
 * every binding's agent is one of agent_ids, its channel one of channels,
 * and no two bindings have the same match (the later could never apply).
 * list_key names the list in key paths ("bindings"). Returns the number of
 * errors added. Entries with missing fields (already reported) are skipped. */
int bindings_check(const struct binding_config *b, size_t n, const char *list_key,
                   const char *const *agent_ids, size_t n_agents, const char *const *channels,
                   size_t n_channels, struct cfg_error_ctx *ctx);

const char *bindings_tier_name(enum bindings_tier t);
const char *bindings_verdict_name(enum bindings_verdict v);

#endif
