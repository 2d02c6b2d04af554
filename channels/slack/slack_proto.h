/*
 * slack_proto.h - the Slack protocol pieces that need no I/O: request
 * signatures (v0), the event normaliser, markdown to mrkdwn, and splitting
 * long replies. Used by channels/slack/slack.c, the unit tests and the fuzzer.
 *
 * Any thread; no global state.
 */
#ifndef SB_CHANNELS_SLACK_PROTO_H
#define SB_CHANNELS_SLACK_PROTO_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gateway/core/envelope.h"

/* "v0=" + 64 hex digits + NUL. */
#define SLACK_SIG_SIZE 68

/* Writes "v0=" + hex(HMAC-SHA256(secret, "v0:" ts ":" body)) into out.
 * Returns SB_OK or SB_ERR_INVAL. */
int slack_sig_compute(const char *secret, const char *ts, const char *body, size_t len,
                      char out[SLACK_SIG_SIZE]);

/* Verifies a request: ts_hdr (X-Slack-Request-Timestamp, unix seconds),
 * sig_hdr (X-Slack-Signature) and the raw body, at now_s, accepting a
 * timestamp at most tolerance_s away in either direction. The signature is
 * compared in constant time. Returns SB_OK, or SB_ERR_PERM with *why set
 * to a static reason (never secret material). */
int slack_sig_verify(const char *secret, const char *ts_hdr, const char *sig_hdr, const char *body,
                     size_t len, int64_t now_s, int64_t tolerance_s, const char **why);

/* ---- events ---- */

enum slack_event_kind {
	SLACK_EVENT_MESSAGE = 0,      /* a message to hand to the inbox */
	SLACK_EVENT_DROP,             /* valid, but nothing to do (why says what) */
	SLACK_EVENT_URL_VERIFICATION, /* answer with challenge */
	SLACK_EVENT_INVALID,          /* not a Slack event body (why says what) */
};

struct slack_norm_opts {
	const char *bot_user_id; /* from auth.test; NULL when not known yet */
	const char *bot_id;
	bool allow_bots;
	bool handle_edits;
};

/* One normalised message; strings owned (slack_event_release). */
struct slack_event {
	enum slack_event_kind kind;
	const char *why; /* static; for DROP and INVALID */
	char *challenge; /* URL_VERIFICATION */
	char *team_id;
	char *channel_id;
	char *user_id;
	char *text;
	char *ts;        /* the message's ts */
	char *thread_ts; /* the thread's parent ts, or NULL at top level */
	char *event_id;  /* Slack's event_id, or NULL */
	/* The inbox dedupe key: team:channel:ts for a new message (so that
	 * retries, and the app_mention and message events of one message,
	 * are one entry), with ":edit:<event ts>" for an edit. */
	char *dedupe_key;
	enum envelope_peer_kind peer_kind;
	bool mentioned;
	bool edited;
};

/* Normalises an Events API body (the event_callback envelope, which is also
 * a Socket Mode events_api payload). Always fills out (kind and why at
 * least); returns out->kind. Release out with slack_event_release. */
enum slack_event_kind slack_event_parse(const json_t *body, const struct slack_norm_opts *o,
                                        struct slack_event *out);
void slack_event_release(struct slack_event *e);

/* The message ts inside a dedupe key made by slack_event_parse, copied
 * into out ("" when the key has none). Returns out. */
const char *slack_dedupe_key_ts(const char *key, char *out, size_t size);

/* ---- outbound text ---- */

/* Converts Markdown as models write it into Slack mrkdwn: **bold** and
 * __bold__ to *bold*, *italic* to _italic_, ~~strike~~ to ~strike~,
 * [text](url) to <url|text>, headings to bold lines, "- " and "* " list
 * items to bullets; &, < and > escaped everywhere except in Slack's own
 * tokens (<@U…>, <#C…>, <!here>, <https://…|…>), code spans and blocks
 * kept as they are (escaped). Caller frees; NULL on allocation failure. */
char *slack_mrkdwn(const char *md);

/* Splits text into pieces of at most limit characters (code points),
 * preferring paragraph breaks, then line breaks, then spaces; never inside
 * a UTF-8 sequence, an &entity; or a <...> token; a ``` block cut in two
 * is closed and reopened. Returns the number of pieces (*out: array of
 * strings, caller frees each and the array), or 0 on allocation failure.
 * An empty text gives one empty piece. */
size_t slack_chunk(const char *text, size_t limit, char ***out);

/* The number of code points in s. */
size_t slack_utf8_len(const char *s, size_t bytes);

#endif
