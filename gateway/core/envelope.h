/*
 * envelope.h - one inbound message, normalised by its channel adapter.
 *
 * Every channel (Slack, Telegram, webhooks, web chat, heartbeat, cron) turns
 * what it receives into an envelope; the host stores it in the inbox as JSON
 * (envelope_to_json) and the dispatcher reads it back (envelope_from_json).
 * Strings are owned by the envelope when it came from envelope_from_json and
 * borrowed when the adapter filled it on its stack.
 */
#ifndef SB_CORE_ENVELOPE_H
#define SB_CORE_ENVELOPE_H

#include <stdbool.h>
#include <stdint.h>

/* The longest channel account id: every channel's schema refuses a longer
 * one, the routing table never matches one, and an instance holds it whole
 * (struct channel). */
#define ENVELOPE_ACCOUNT_MAX 63

enum envelope_peer_kind {
	ENVELOPE_PEER_DIRECT = 0,
	ENVELOPE_PEER_GROUP,
	ENVELOPE_PEER_CHANNEL,
};

struct envelope {
	const char *channel;  /* "slack", "telegram", "webhook", "webchat", ... */
	const char *account;  /* the channel account ("default" when single) */
	const char *event_id; /* the channel's id for this delivery: the dedupe key */
	enum envelope_peer_kind peer_kind;
	const char *peer_id;   /* chat / channel / conversation id */
	const char *parent_id; /* the channel/group a thread belongs to, or NULL */
	const char *thread_id; /* thread / topic id, or NULL */
	const char *guild_id;  /* Discord-style guild, or NULL */
	const char *team_id;   /* Slack workspace, or NULL */
	const char *sender_id;
	const char *sender_name;
	const char *text;
	bool mentioned;          /* the bot was mentioned / replied to */
	bool untrusted;          /* content from outside: mark it so in prompts */
	/* The sender waits for this delivery's own answer (a sync or
	 * callback webhook, the OpenAI-compatible endpoint): under the
	 * default queue_mode (auto) it runs as a turn of its own, in order,
	 * and is never steered into (docs/routing.md, "Queue modes"). */
	bool own_reply;
	int64_t received_at;     /* unix ms */
	const char *attachments; /* JSON array text of attachment metadata, or NULL */
	const char *raw;         /* the channel's raw payload (JSON text), or NULL */
	/* An explicit destination, for the gateway's own trusted entry points
	 * (web chat, the OpenAI-compatible endpoint) where the operator names
	 * the agent and session: the dispatcher then skips the bindings table.
	 * Ignored on every other channel. */
	const char *route_agent;
	const char *route_session; /* a session key; NULL = agent:<route_agent>:main */
};

/* Whether a channel may name its own destination (route_agent). */
bool envelope_channel_trusted(const char *channel);

/* Serialises e as a JSON object (caller frees). NULL on allocation failure. */
char *envelope_to_json(const struct envelope *e);

/* The same JSON, and in *copy (when not NULL) the envelope
 * envelope_from_json would read back from it, without parsing it again
 * (strings owned by copy; envelope_release). NULL on allocation failure,
 * with *copy empty. */
char *envelope_to_json_copy(const struct envelope *e, struct envelope *copy);

/* Parses JSON made by envelope_to_json into *e; strings are owned by e and
 * released by envelope_release. Returns SB_OK or SB_ERR_INVAL. */
int envelope_from_json(const char *json, struct envelope *e);
void envelope_release(struct envelope *e);

/* The peer kind as text ("direct", "group", "channel") and back. */
const char *envelope_peer_kind_name(enum envelope_peer_kind k);
int envelope_peer_kind_parse(const char *s, enum envelope_peer_kind *out);

#endif
