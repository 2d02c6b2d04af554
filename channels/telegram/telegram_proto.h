/*
 * telegram_proto.h - the pure parts of the Telegram adapter, kept apart from
 * the I/O so that unit tests and the fuzzer reach them directly:
 *
 *  - the update normaliser: one Update object to the fields of an envelope
 *    (chat kind, forum topic, sender, mention of the bot, dedupe key), or
 *    the reason it is skipped;
 *  - text: length as Telegram counts it (UTF-16 code units), splitting a
 *    reply into chunks on safe boundaries, HTML escaping, and the small
 *    Markdown-to-Telegram-HTML conversion used for replies;
 *  - Bot API answers: ok / description / retry_after / migrate_to_chat_id.
 *
 * No I/O, no globals; any thread.
 */
#ifndef SB_CHANNELS_TELEGRAM_PROTO_H
#define SB_CHANNELS_TELEGRAM_PROTO_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gateway/core/envelope.h"

#define TELEGRAM_NAME_MAX 256 /* bytes of a sender's display name */

/* What the normaliser needs to know about the bot and the account. */
struct telegram_norm_opts {
	int64_t bot_id;           /* from getMe, else the token's prefix; 0 = unknown */
	const char *bot_username; /* without "@"; NULL until getMe answered */
	bool edits;               /* edited messages count as new ones */
	bool allow_bots;          /* messages from other bots are kept */
};

struct telegram_norm {
	int64_t update_id;
	int64_t message_id;
	int64_t chat_id;
	enum envelope_peer_kind peer_kind;
	bool edited;
	bool mentioned;
	bool has_thread;
	char event_id[48];  /* "<update_id>:<message_id>": the dedupe key */
	char peer_id[24];   /* the chat id */
	char thread_id[24]; /* message_thread_id of a forum topic, or "" */
	char sender_id[24]; /* from.id, or sender_chat.id */
	char sender_name[TELEGRAM_NAME_MAX + 1];
	const char *text; /* text or caption, borrowed from the update */
	const char *skip; /* why it is skipped (static text), or NULL */
};

/* Normalises one update. Returns 1 when it is a message for the agents (out
 * filled), 0 when it is to be skipped (out->skip says why; out->update_id
 * is set) and -1 when it is not an update at all (no integer update_id). */
int telegram_normalise(const json_t *update, const struct telegram_norm_opts *opt,
                       struct telegram_norm *out);

/* Fills env from n (strings borrowed from n, account and raw). */
void telegram_norm_envelope(const struct telegram_norm *n, const char *account, const char *raw,
                            int64_t now_ms, struct envelope *env);

/* Parses an event id made by the normaliser into the message id it names;
 * 0 when it holds none. */
int64_t telegram_event_message_id(const char *event_id);

/* ---- text ---- */

/* Length of s[0..len) in UTF-16 code units, as Telegram counts text (a
 * character outside the BMP counts two; a malformed byte counts one). */
size_t telegram_utf16_len(const char *s, size_t len);

/* Byte range of the UTF-16 range [off, off+n) of s (entity offsets). false
 * when it does not fall on character boundaries inside s. */
bool telegram_utf16_range(const char *s, size_t len, int64_t off, int64_t n, size_t *start,
                          size_t *bytes);

/* Splits text into chunks of at most limit UTF-16 units each, preferring
 * paragraph, then line, then word boundaries, never inside a character;
 * a Markdown code fence cut in two is closed at the end of one chunk and
 * opened again at the start of the next. *out gets a malloc'd array of
 * malloc'd strings (free with telegram_chunks_free). Returns the count, or
 * 0 on allocation failure or empty text. */
size_t telegram_chunks(const char *text, size_t limit, char ***out);
void telegram_chunks_free(char **chunks, size_t n);

/* Appends s[0..len) to a malloc'd string with & < > " escaped. */
char *telegram_html_escape(const char *s, size_t len);

/* Converts a chunk of Markdown (code fences, `inline code`, **bold**,
 * [text](http...) links) to Telegram HTML, escaping everything else.
 * malloc'd; NULL on allocation failure. */
char *telegram_markdown_html(const char *s);

/* ---- Bot API answers ---- */

struct telegram_answer {
	bool ok;
	const char *description;    /* borrowed from the parsed body, or NULL */
	int64_t retry_after_s;      /* parameters.retry_after, -1 when absent */
	int64_t migrate_to_chat_id; /* parameters.migrate_to_chat_id, 0 when absent */
	const json_t *result;       /* borrowed */
};

/* Reads {"ok":..., "result":..., "description":..., "parameters":{...}}
 * from root. false when root is not such an object. */
bool telegram_answer_parse(const json_t *root, struct telegram_answer *a);

/* Whether a 400 description is Telegram's "can't parse entities". */
bool telegram_is_parse_error(const char *description);

#endif
