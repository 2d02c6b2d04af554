/*
 * events.h - the gateway's event bus: what runs do, as it happens.
 *
 * The dispatcher publishes each run's start, text deltas, tool activity and
 * end; the control plane (chat/agent events), the OpenAI-compatible
 * endpoint (SSE) and synchronous webhooks subscribe, by session key or to
 * everything. Delivery is synchronous, in publish order; a subscriber may
 * unsubscribe itself (or another) from inside its callback.
 *
 * Loop thread only.
 */
#ifndef SB_GATEWAY_EVENTS_H
#define SB_GATEWAY_EVENTS_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

enum event_kind {
	EVENT_RUN_START = 0,
	EVENT_DELTA,      /* text: the new text */
	EVENT_TOOL_START, /* tool_name, tool_id, input */
	EVENT_TOOL_END,   /* tool_name, tool_id, is_error, text: the result (cut) */
	EVENT_RUN_END,    /* status: end reason; text: the final reply */
	EVENT_SESSIONS_CHANGED,
	EVENT_SHUTDOWN,
	EVENT_APPROVAL_REQUESTED, /* input: the approval (agents/safety/approvals.h JSON) */
	EVENT_APPROVAL_RESOLVED,  /* input: the approval with its decision */
};

struct event {
	enum event_kind kind;
	const char *run_id; /* the message's idempotency key / event id */
	const char *session_key;
	const char *agent_id;
	const char *channel;
	int64_t inbox_id;
	const char *text;
	const char *tool_name;
	const char *tool_id;
	const json_t *input;
	bool is_error;
	const char *status;
	const char *error;
};

const char *event_kind_name(enum event_kind k);

struct events;
struct events_sub;

typedef void (*events_cb)(void *ud, const struct event *e);

int events_new(struct events **out);
/* Every subscription must be gone. NULL is a no-op. */
void events_free(struct events *b);

/* session_key NULL: every event. */
int events_subscribe(struct events *b, const char *session_key, events_cb cb, void *ud,
                     struct events_sub **out);
void events_unsubscribe(struct events_sub *s);

void events_publish(struct events *b, const struct event *e);

size_t events_subscribers(const struct events *b);

#endif
