/*
 * envelope.c - see envelope.h.
 */
#include "gateway/core/envelope.h"

#include <jansson.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/core/err.h"
#include "gateway/core/jsonw.h"

static const char *const envelope_kinds[] = {"direct", "group", "channel"};

const char *envelope_peer_kind_name(enum envelope_peer_kind k)
{
	return (unsigned)k < 3 ? envelope_kinds[k] : "direct";
}

int envelope_peer_kind_parse(const char *s, enum envelope_peer_kind *out)
{
	for (int i = 0; i < 3; i++)
		if (s && strcmp(s, envelope_kinds[i]) == 0) {
			*out = (enum envelope_peer_kind)i;
			return SB_OK;
		}
	return SB_ERR_INVAL;
}

/* The string members, in one table, so both directions stay in step. */
static const struct {
	const char *key;
	size_t offset;
	bool json; /* stored as embedded JSON rather than a string */
} envelope_fields[] = {
    {"channel", offsetof(struct envelope, channel), false},
    {"account", offsetof(struct envelope, account), false},
    {"event_id", offsetof(struct envelope, event_id), false},
    {"peer_id", offsetof(struct envelope, peer_id), false},
    {"parent_id", offsetof(struct envelope, parent_id), false},
    {"thread_id", offsetof(struct envelope, thread_id), false},
    {"guild_id", offsetof(struct envelope, guild_id), false},
    {"team_id", offsetof(struct envelope, team_id), false},
    {"sender_id", offsetof(struct envelope, sender_id), false},
    {"sender_name", offsetof(struct envelope, sender_name), false},
    {"text", offsetof(struct envelope, text), false},
    {"attachments", offsetof(struct envelope, attachments), true},
    {"raw", offsetof(struct envelope, raw), true},
    {"route_agent", offsetof(struct envelope, route_agent), false},
    {"route_session", offsetof(struct envelope, route_session), false},
};

bool envelope_channel_trusted(const char *channel)
{
	return channel && (strcmp(channel, "webchat") == 0 || strcmp(channel, "http") == 0);
}

#define ENVELOPE_NFIELDS (sizeof envelope_fields / sizeof *envelope_fields)
#define ENVELOPE_STR(e, i) ((const char **)((char *)(e) + envelope_fields[i].offset))

static int envelope_from_object(const json_t *o, struct envelope *e);

char *envelope_to_json(const struct envelope *e)
{
	return envelope_to_json_copy(e, NULL);
}

char *envelope_to_json_copy(const struct envelope *e, struct envelope *copy)
{
	json_t *o = json_object();
	char *out = NULL;

	if (copy)
		memset(copy, 0, sizeof *copy);

	if (!o)
		return NULL;
	for (size_t i = 0; i < ENVELOPE_NFIELDS; i++) {
		const char *v = *ENVELOPE_STR((struct envelope *)e, i);
		json_t *jv;

		if (!v)
			continue;
		if (envelope_fields[i].json) {
			jv = json_loads(v, JSON_DECODE_ANY, NULL);
			if (!jv)
				jv = json_string(v); /* keep it, even if it was not JSON */
		} else {
			jv = json_string(v);
		}
		if (!jv || json_object_set_new(o, envelope_fields[i].key, jv))
			goto out;
	}
	if (json_object_set_new(o, "peer_kind",
	                        json_string(envelope_peer_kind_name(e->peer_kind))) ||
	    json_object_set_new(o, "mentioned", json_boolean(e->mentioned)) ||
	    json_object_set_new(o, "untrusted", json_boolean(e->untrusted)) ||
	    (e->own_reply && json_object_set_new(o, "own_reply", json_true())) ||
	    json_object_set_new(o, "received_at", json_integer(e->received_at)))
		goto out;
	out = jsonw_dumps(o, JSONW_SORT_KEYS, NULL);
	if (out && copy && envelope_from_object(o, copy) != SB_OK) {
		free(out);
		out = NULL;
	}
out:
	json_decref(o);
	return out;
}

void envelope_release(struct envelope *e)
{
	if (!e)
		return;
	for (size_t i = 0; i < ENVELOPE_NFIELDS; i++)
		free((char *)*ENVELOPE_STR(e, i));
	memset(e, 0, sizeof *e);
}

int envelope_from_json(const char *json, struct envelope *e)
{
	json_t *o = json_loads(json, 0, NULL);
	int rc = envelope_from_object(o, e);

	json_decref(o);
	return rc;
}

/* The envelope in o (as envelope_to_json makes it); strings copied. */
static int envelope_from_object(const json_t *o, struct envelope *e)
{
	json_t *v;
	int rc = SB_ERR_INVAL;

	memset(e, 0, sizeof *e);
	if (!json_is_object(o))
		goto out;
	for (size_t i = 0; i < ENVELOPE_NFIELDS; i++) {
		char *copy;

		v = json_object_get(o, envelope_fields[i].key);
		if (!v || json_is_null(v))
			continue;
		if (json_is_string(v) && !envelope_fields[i].json)
			copy = strdup(json_string_value(v));
		else if (envelope_fields[i].json)
			copy = jsonw_dumps(v, JSONW_SORT_KEYS, NULL);
		else
			goto out;
		if (!copy) {
			rc = SB_ERR_NOMEM;
			goto out;
		}
		*ENVELOPE_STR(e, i) = copy;
	}
	v = json_object_get(o, "peer_kind");
	if (v && envelope_peer_kind_parse(json_string_value(v), &e->peer_kind))
		goto out;
	e->mentioned = json_is_true(json_object_get(o, "mentioned"));
	e->untrusted = json_is_true(json_object_get(o, "untrusted"));
	e->own_reply = json_is_true(json_object_get(o, "own_reply"));
	e->received_at = json_integer_value(json_object_get(o, "received_at"));
	if (!e->channel || !e->event_id)
		goto out;
	rc = SB_OK;
out:
	if (rc)
		envelope_release(e);
	return rc;
}
