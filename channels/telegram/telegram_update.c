/*
 * telegram_update.c - the update normaliser and Bot API answers (see
 * telegram_proto.h).
 */
#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "channels/telegram/telegram_proto.h"

static int64_t tg_int(const json_t *o, const char *key, bool *present)
{
	const json_t *v = json_object_get(o, key);

	if (present)
		*present = json_is_integer(v);
	return json_is_integer(v) ? (int64_t)json_integer_value(v) : 0;
}

static const char *tg_str(const json_t *o, const char *key)
{
	const json_t *v = json_object_get(o, key);

	return json_is_string(v) ? json_string_value(v) : NULL;
}

/* Copies s into out (size bytes), cut at a UTF-8 character boundary. */
static void tg_copy_utf8(char *out, size_t size, const char *s)
{
	size_t n = strlen(s);

	if (n >= size) {
		n = size - 1;
		while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
			n--;
	}
	memcpy(out, s, n);
	out[n] = '\0';
}

static void tg_sender_name(const json_t *from, const json_t *sender_chat, char *out, size_t size)
{
	const char *first = tg_str(from, "first_name"), *last = tg_str(from, "last_name");
	const char *user = tg_str(from, "username");
	char buf[2 * TELEGRAM_NAME_MAX + 2];

	out[0] = '\0';
	if (json_is_object(sender_chat) && tg_str(sender_chat, "title")) {
		tg_copy_utf8(out, size, tg_str(sender_chat, "title"));
		return;
	}
	if (first && *first) {
		snprintf(buf, sizeof buf, "%.*s%s%.*s", TELEGRAM_NAME_MAX, first,
		         last && *last ? " " : "", TELEGRAM_NAME_MAX, last && *last ? last : "");
		tg_copy_utf8(out, size, buf);
	} else if (user && *user) {
		tg_copy_utf8(out, size, user);
	}
}

/* Whether s[0..n) equals "@" + name, case-insensitively (usernames are). */
static bool tg_is_at_name(const char *s, size_t n, const char *name)
{
	size_t k = strlen(name);

	return name && *name && n == k + 1 && s[0] == '@' && strncasecmp(s + 1, name, k) == 0;
}

/* Whether text starts with "/command@name" where name is not the bot's
 * username (known from getMe; before it nothing is skipped). */
static bool tg_command_for_other_bot(const char *text, const char *bot)
{
	const char *p = text, *name;

	if (!bot || !*bot || *p != '/')
		return false;
	p++;
	while (isalnum((unsigned char)*p) || *p == '_')
		p++;
	if (p == text + 1 || *p != '@')
		return false;
	name = ++p;
	while (isalnum((unsigned char)*p) || *p == '_')
		p++;
	if (p == name || (*p && !isspace((unsigned char)*p)))
		return false;
	return !((size_t)(p - name) == strlen(bot) && strncasecmp(name, bot, strlen(bot)) == 0);
}

/* Whether the message addresses the bot: an @mention of its username, a
 * text_mention of its id, a /command@username, or a reply to it. */
static bool tg_mentions_bot(const json_t *msg, const char *text, const char *ekey,
                            const struct telegram_norm_opts *opt)
{
	const json_t *reply = json_object_get(msg, "reply_to_message");
	const json_t *ents = json_object_get(msg, ekey);
	size_t len = text ? strlen(text) : 0, i;
	const json_t *e;

	if (opt->bot_id && json_is_object(reply) &&
	    tg_int(json_object_get(reply, "from"), "id", NULL) == opt->bot_id)
		return true;
	if (!text || !json_is_array(ents))
		return false;
	json_array_foreach(ents, i, e)
	{
		const char *type = tg_str(e, "type");
		size_t start, bytes;

		if (!type)
			continue;
		if (strcmp(type, "text_mention") == 0) {
			if (opt->bot_id &&
			    tg_int(json_object_get(e, "user"), "id", NULL) == opt->bot_id)
				return true;
			continue;
		}
		if (!opt->bot_username ||
		    !telegram_utf16_range(text, len, tg_int(e, "offset", NULL),
		                          tg_int(e, "length", NULL), &start, &bytes))
			continue;
		if (strcmp(type, "mention") == 0 &&
		    tg_is_at_name(text + start, bytes, opt->bot_username))
			return true;
		if (strcmp(type, "bot_command") == 0) {
			const char *at = memchr(text + start, '@', bytes);

			if (at && tg_is_at_name(at, bytes - (size_t)(at - (text + start)),
			                        opt->bot_username))
				return true;
		}
	}
	return false;
}

int telegram_normalise(const json_t *update, const struct telegram_norm_opts *opt,
                       struct telegram_norm *out)
{
	static const char *const kinds[][2] = {
	    {"message", NULL},
	    {"edited_message", "edit"},
	    {"channel_post", NULL},
	    {"edited_channel_post", "edit"},
	};
	const json_t *msg = NULL, *chat, *from, *sender_chat;
	const char *type, *ekey = "entities";
	bool present, edited = false;
	int64_t thread;

	memset(out, 0, sizeof *out);
	if (!json_is_object(update))
		return -1;
	out->update_id = tg_int(update, "update_id", &present);
	if (!present || out->update_id < 0)
		return -1;
	for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
		msg = json_object_get(update, kinds[i][0]);
		if (msg) {
			edited = kinds[i][1] != NULL;
			break;
		}
	}
	out->skip = "not a message (another update type)";
	if (!json_is_object(msg))
		return 0;
	out->edited = edited;
	out->skip = "an edited message (edits are off)";
	if (edited && !opt->edits)
		return 0;
	out->message_id = tg_int(msg, "message_id", &present);
	chat = json_object_get(msg, "chat");
	out->chat_id = tg_int(chat, "id", NULL);
	out->skip = "a message without message_id or chat";
	if (!present || !json_is_object(chat) || !json_is_integer(json_object_get(chat, "id")))
		return 0;
	from = json_object_get(msg, "from");
	sender_chat = json_object_get(msg, "sender_chat");
	out->skip = "the bot's own message";
	if (opt->bot_id && json_is_object(from) && tg_int(from, "id", NULL) == opt->bot_id)
		return 0;
	out->skip = "a message from another bot (allow_bots is off)";
	if (json_is_object(from) && json_is_true(json_object_get(from, "is_bot")) &&
	    !opt->allow_bots && !json_is_object(sender_chat))
		return 0;
	out->text = tg_str(msg, "text");
	if (!out->text) {
		out->text = tg_str(msg, "caption");
		ekey = "caption_entities";
	}
	out->skip = "a message without text";
	if (!out->text || !*out->text)
		return 0;
	out->skip = "a command addressed to another bot";
	if (tg_command_for_other_bot(out->text, opt->bot_username))
		return 0;

	type = tg_str(chat, "type");
	out->skip = "a chat of unknown type";
	if (!type)
		return 0;
	if (strcmp(type, "private") == 0)
		out->peer_kind = ENVELOPE_PEER_DIRECT;
	else if (strcmp(type, "group") == 0 || strcmp(type, "supergroup") == 0)
		out->peer_kind = ENVELOPE_PEER_GROUP;
	else if (strcmp(type, "channel") == 0)
		out->peer_kind = ENVELOPE_PEER_CHANNEL;
	else
		return 0;

	if (json_is_object(sender_chat))
		snprintf(out->sender_id, sizeof out->sender_id, "%" PRId64,
		         tg_int(sender_chat, "id", NULL));
	else if (json_is_object(from) && json_is_integer(json_object_get(from, "id")))
		snprintf(out->sender_id, sizeof out->sender_id, "%" PRId64,
		         tg_int(from, "id", NULL));
	else
		snprintf(out->sender_id, sizeof out->sender_id, "%" PRId64, out->chat_id);
	tg_sender_name(from, sender_chat, out->sender_name, sizeof out->sender_name);

	/* A forum topic (or a private chat with topics): replies go back into
	 * it. Reply threads of ordinary groups carry a message_thread_id too,
	 * but sending it back there is not a topic; they are left out. */
	thread = tg_int(msg, "message_thread_id", &present);
	if (present && (json_is_true(json_object_get(msg, "is_topic_message")) ||
	                json_is_true(json_object_get(chat, "is_forum")))) {
		out->has_thread = true;
		snprintf(out->thread_id, sizeof out->thread_id, "%" PRId64, thread);
	}
	snprintf(out->peer_id, sizeof out->peer_id, "%" PRId64, out->chat_id);
	snprintf(out->event_id, sizeof out->event_id, "%" PRId64 ":%" PRId64, out->update_id,
	         out->message_id);
	out->mentioned =
	    out->peer_kind == ENVELOPE_PEER_DIRECT || tg_mentions_bot(msg, out->text, ekey, opt);
	out->skip = NULL;
	return 1;
}

void telegram_norm_envelope(const struct telegram_norm *n, const char *account, const char *raw,
                            int64_t now_ms, struct envelope *env)
{
	memset(env, 0, sizeof *env);
	env->channel = "telegram";
	env->account = account;
	env->event_id = n->event_id;
	env->peer_kind = n->peer_kind;
	env->peer_id = n->peer_id;
	env->thread_id = n->has_thread ? n->thread_id : NULL;
	env->parent_id = n->has_thread ? n->peer_id : NULL;
	env->sender_id = n->sender_id;
	env->sender_name = n->sender_name[0] ? n->sender_name : NULL;
	env->text = n->text;
	env->mentioned = n->mentioned;
	env->received_at = now_ms;
	env->raw = raw;
}

int64_t telegram_event_message_id(const char *event_id)
{
	const char *colon = event_id ? strchr(event_id, ':') : NULL;
	char *end;
	long long v;

	if (!colon || colon[1] < '0' || colon[1] > '9')
		return 0;
	v = strtoll(colon + 1, &end, 10);
	return *end == '\0' && v > 0 ? (int64_t)v : 0;
}

bool telegram_answer_parse(const json_t *root, struct telegram_answer *a)
{
	const json_t *params;
	bool present;

	memset(a, 0, sizeof *a);
	a->retry_after_s = -1;
	if (!json_is_object(root) || !json_is_boolean(json_object_get(root, "ok")))
		return false;
	a->ok = json_is_true(json_object_get(root, "ok"));
	a->description = tg_str(root, "description");
	a->result = json_object_get(root, "result");
	params = json_object_get(root, "parameters");
	if (json_is_object(params)) {
		int64_t r = tg_int(params, "retry_after", &present);

		if (present && r >= 0)
			a->retry_after_s = r;
		a->migrate_to_chat_id = tg_int(params, "migrate_to_chat_id", NULL);
	}
	return true;
}

bool telegram_is_parse_error(const char *description)
{
	return description && strstr(description, "can't parse entities") != NULL;
}
