/*
 * events.c - see events.h.
 *
 * Subscriptions are a list; an unsubscribe during a publish only marks the
 * entry, and the publish that is running sweeps the marked entries when it
 * returns, so callbacks may come and go freely.
 */
#include "gateway/obs/events.h"

#include <stdlib.h>
#include <string.h>

#include "gateway/core/err.h"

struct events_sub {
	struct events *bus;
	char *session_key;
	events_cb cb;
	void *ud;
	bool dead;
	struct events_sub *next;
};

struct events {
	struct events_sub *subs;
	size_t n;
	int publishing; /* nesting depth */
};

static const char *const event_kind_names[] = {
    "run_start", "delta", "tool_start", "tool_end", "run_end", "sessions_changed", "shutdown",
    "approval_requested", "approval_resolved",
};

const char *event_kind_name(enum event_kind k)
{
	return (unsigned)k <= EVENT_APPROVAL_RESOLVED ? event_kind_names[k] : "unknown";
}

int events_new(struct events **out)
{
	*out = calloc(1, sizeof **out);
	return *out ? SB_OK : SB_ERR_NOMEM;
}

static void events_sub_free(struct events_sub *s)
{
	free(s->session_key);
	free(s);
}

static void events_sweep(struct events *b)
{
	struct events_sub **pp = &b->subs;

	while (*pp) {
		struct events_sub *s = *pp;

		if (s->dead) {
			*pp = s->next;
			events_sub_free(s);
		} else {
			pp = &s->next;
		}
	}
}

void events_free(struct events *b)
{
	if (!b)
		return;
	while (b->subs) {
		struct events_sub *s = b->subs;

		b->subs = s->next;
		events_sub_free(s);
	}
	free(b);
}

int events_subscribe(struct events *b, const char *session_key, events_cb cb, void *ud,
                     struct events_sub **out)
{
	struct events_sub *s = calloc(1, sizeof *s);

	if (!s)
		return SB_ERR_NOMEM;
	if (session_key && !(s->session_key = strdup(session_key))) {
		free(s);
		return SB_ERR_NOMEM;
	}
	s->bus = b;
	s->cb = cb;
	s->ud = ud;
	/* Appended at the head: a subscriber added during a publish does not
	 * see the event being published. */
	s->next = b->subs;
	b->subs = s;
	b->n++;
	if (out)
		*out = s;
	return SB_OK;
}

void events_unsubscribe(struct events_sub *s)
{
	struct events *b;

	if (!s || s->dead)
		return;
	b = s->bus;
	s->dead = true;
	b->n--;
	if (!b->publishing)
		events_sweep(b);
}

void events_publish(struct events *b, const struct event *e)
{
	b->publishing++;
	for (struct events_sub *s = b->subs; s; s = s->next) {
		if (s->dead)
			continue;
		if (s->session_key && (!e->session_key || strcmp(s->session_key, e->session_key)))
			continue;
		s->cb(s->ud, e);
	}
	if (--b->publishing == 0)
		events_sweep(b);
}

size_t events_subscribers(const struct events *b)
{
	return b ? b->n : 0;
}
