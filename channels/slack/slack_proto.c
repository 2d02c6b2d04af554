/*
 * slack_proto.c - request signatures, the event normaliser, markdown to
 * mrkdwn and reply chunking for the Slack channel. See slack_proto.h.
 */
#include "channels/slack/slack_proto.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/core/buf.h"
#include "gateway/core/err.h"

#define SLACK_FIELD_MAX 256           /* ids, ts values */
#define SLACK_TEXT_MAX (256u * 1024u) /* an event's text */
#define SLACK_OUT_MAX (8u << 20)      /* converted reply text */
#define SLACK_CHALLENGE_MAX 1024

/* ---- signatures ---- */

int slack_sig_compute(const char *secret, const char *ts, const char *body, size_t len,
                      char out[SLACK_SIG_SIZE])
{
	crypto_auth_hmacsha256_state st;
	unsigned char mac[crypto_auth_hmacsha256_BYTES];

	out[0] = '\0';
	if (!secret || !*secret || !ts || (!body && len))
		return SB_ERR_INVAL;
	crypto_auth_hmacsha256_init(&st, (const unsigned char *)secret, strlen(secret));
	crypto_auth_hmacsha256_update(&st, (const unsigned char *)"v0:", 3);
	crypto_auth_hmacsha256_update(&st, (const unsigned char *)ts, strlen(ts));
	crypto_auth_hmacsha256_update(&st, (const unsigned char *)":", 1);
	if (len)
		crypto_auth_hmacsha256_update(&st, (const unsigned char *)body, len);
	crypto_auth_hmacsha256_final(&st, mac);
	sodium_memzero(&st, sizeof st);
	memcpy(out, "v0=", 3);
	sodium_bin2hex(out + 3, SLACK_SIG_SIZE - 3, mac, sizeof mac);
	return SB_OK;
}

int slack_sig_verify(const char *secret, const char *ts_hdr, const char *sig_hdr, const char *body,
                     size_t len, int64_t now_s, int64_t tolerance_s, const char **why)
{
	char want[SLACK_SIG_SIZE];
	int64_t ts = 0;
	int ok;

	*why = "missing X-Slack-Request-Timestamp or X-Slack-Signature";
	if (!ts_hdr || !*ts_hdr || !sig_hdr || !*sig_hdr)
		return SB_ERR_PERM;
	*why = "X-Slack-Request-Timestamp is not a number of seconds";
	if (strlen(ts_hdr) > 12)
		return SB_ERR_PERM;
	for (const char *p = ts_hdr; *p; p++) {
		if (*p < '0' || *p > '9')
			return SB_ERR_PERM;
		ts = ts * 10 + (*p - '0');
	}
	*why = "the request timestamp is outside the allowed window (replay, or a wrong clock)";
	if (ts < now_s - tolerance_s || ts > now_s + tolerance_s)
		return SB_ERR_PERM;
	*why = "only v0 signatures are supported";
	if (strncmp(sig_hdr, "v0=", 3) != 0)
		return SB_ERR_PERM;
	*why = "the signing secret is not set";
	if (slack_sig_compute(secret, ts_hdr, body, len, want) != SB_OK)
		return SB_ERR_PERM;
	*why = "the signature does not match";
	if (strlen(sig_hdr) != SLACK_SIG_SIZE - 1)
		return SB_ERR_PERM;
	ok = sodium_memcmp(want, sig_hdr, SLACK_SIG_SIZE - 1) == 0;
	sodium_memzero(want, sizeof want);
	if (!ok)
		return SB_ERR_PERM;
	*why = NULL;
	return SB_OK;
}

/* ---- events ---- */

void slack_event_release(struct slack_event *e)
{
	if (!e)
		return;
	free(e->challenge);
	free(e->team_id);
	free(e->channel_id);
	free(e->user_id);
	free(e->text);
	free(e->ts);
	free(e->thread_ts);
	free(e->event_id);
	free(e->dedupe_key);
	memset(e, 0, sizeof *e);
}

/* A short string field: its value, NULL when absent or not a string, and
 * *bad when it is too long or holds characters no Slack id has. */
static const char *slack_id_field(const json_t *o, const char *key, bool *bad)
{
	const char *s = json_string_value(json_object_get(o, key));

	if (!s || !*s)
		return NULL;
	if (strlen(s) > SLACK_FIELD_MAX) {
		*bad = true;
		return NULL;
	}
	for (const char *p = s; *p; p++)
		if (*p <= ' ' || *p > '~' || *p == ':') {
			*bad = true;
			return NULL;
		}
	return s;
}

static enum slack_event_kind slack_event_out(struct slack_event *out, enum slack_event_kind k,
                                             const char *why)
{
	out->kind = k;
	out->why = why;
	return k;
}

/* Whether text mentions the user id: <@U123> or <@U123|name>. */
static bool slack_mentions(const char *text, const char *user)
{
	size_t n;

	if (!text || !user || !*user)
		return false;
	n = strlen(user);
	for (const char *p = strstr(text, "<@"); p; p = strstr(p + 2, "<@"))
		if (strncmp(p + 2, user, n) == 0 && (p[2 + n] == '>' || p[2 + n] == '|'))
			return true;
	return false;
}

/* The text without a leading mention of the bot ("<@UBOT> hi" -> "hi"). */
static char *slack_strip_mention(const char *text, const char *user)
{
	const char *p = text;
	size_t n = user ? strlen(user) : 0;

	if (n && strncmp(p, "<@", 2) == 0 && strncmp(p + 2, user, n) == 0) {
		const char *end = strchr(p + 2 + n, '>');

		if (end && (end == p + 2 + n || p[2 + n] == '|')) {
			p = end + 1;
			while (*p == ' ' || *p == ',' || *p == ':')
				p++;
			if (!*p)
				p = text; /* a bare mention stays as it is */
		}
	}
	return strdup(p);
}

enum slack_event_kind slack_event_parse(const json_t *body, const struct slack_norm_opts *o,
                                        struct slack_event *out)
{
	const json_t *ev, *msg;
	const char *type, *etype, *subtype, *team, *channel, *user, *ts, *thread_ts, *text, *ctype,
	    *bot_id, *event_ts, *eid;
	bool bad = false, bot;
	char key[4 * SLACK_FIELD_MAX + 16];

	memset(out, 0, sizeof *out);
	if (!json_is_object(body))
		return slack_event_out(out, SLACK_EVENT_INVALID, "the body is not a JSON object");
	type = json_string_value(json_object_get(body, "type"));
	if (!type)
		return slack_event_out(out, SLACK_EVENT_INVALID, "the body has no type");
	if (strcmp(type, "url_verification") == 0) {
		const char *c = json_string_value(json_object_get(body, "challenge"));

		if (!c || !*c || strlen(c) > SLACK_CHALLENGE_MAX)
			return slack_event_out(out, SLACK_EVENT_INVALID,
			                       "url_verification without a usable challenge");
		if (!(out->challenge = strdup(c)))
			return slack_event_out(out, SLACK_EVENT_INVALID, "out of memory");
		return slack_event_out(out, SLACK_EVENT_URL_VERIFICATION, NULL);
	}
	if (strcmp(type, "event_callback") != 0)
		return slack_event_out(out, SLACK_EVENT_DROP, "not an event callback");
	ev = json_object_get(body, "event");
	if (!json_is_object(ev))
		return slack_event_out(out, SLACK_EVENT_INVALID, "an event callback without event");
	etype = json_string_value(json_object_get(ev, "type"));
	if (!etype || (strcmp(etype, "message") != 0 && strcmp(etype, "app_mention") != 0))
		return slack_event_out(out, SLACK_EVENT_DROP, "an event type the gateway ignores");
	team = slack_id_field(body, "team_id", &bad);
	if (!team)
		team = slack_id_field(ev, "team", &bad);
	eid = slack_id_field(body, "event_id", &bad);
	channel = slack_id_field(ev, "channel", &bad);
	event_ts = slack_id_field(ev, "event_ts", &bad);
	if (!event_ts)
		event_ts = slack_id_field(ev, "ts", &bad);
	ctype = slack_id_field(ev, "channel_type", &bad);
	subtype = json_string_value(json_object_get(ev, "subtype"));

	msg = ev;
	if (subtype && strcmp(subtype, "message_changed") == 0) {
		const json_t *prev = json_object_get(ev, "previous_message");
		const char *pt = json_string_value(json_object_get(prev, "text"));

		if (!o->handle_edits)
			return slack_event_out(out, SLACK_EVENT_DROP,
			                       "an edit (handle_edits is off)");
		msg = json_object_get(ev, "message");
		if (!json_is_object(msg))
			return slack_event_out(out, SLACK_EVENT_INVALID, "an edit without message");
		text = json_string_value(json_object_get(msg, "text"));
		if (pt && text && strcmp(pt, text) == 0)
			return slack_event_out(out, SLACK_EVENT_DROP,
			                       "an edit that did not change the text (an unfurl)");
		out->edited = true;
		subtype = json_string_value(json_object_get(msg, "subtype"));
	}
	if (subtype && strcmp(subtype, "thread_broadcast") != 0 &&
	    strcmp(subtype, "file_share") != 0 && strcmp(subtype, "me_message") != 0 &&
	    strcmp(subtype, "bot_message") != 0)
		return slack_event_out(out, SLACK_EVENT_DROP,
		                       strcmp(subtype, "message_deleted") == 0
		                           ? "a deletion"
		                           : "a message subtype that is not new text");
	if (json_is_true(json_object_get(msg, "hidden")))
		return slack_event_out(out, SLACK_EVENT_DROP, "a hidden message");
	user = slack_id_field(msg, "user", &bad);
	bot_id = slack_id_field(msg, "bot_id", &bad);
	ts = slack_id_field(msg, "ts", &bad);
	thread_ts = slack_id_field(msg, "thread_ts", &bad);
	text = json_string_value(json_object_get(msg, "text"));
	if (bad)
		return slack_event_out(out, SLACK_EVENT_INVALID,
		                       "an id or ts field is too long or malformed");
	if (!channel || !ts)
		return slack_event_out(out, SLACK_EVENT_INVALID, "a message without channel or ts");

	/* Loops: never our own messages; other bots only when allowed. */
	if (o->bot_user_id && user && strcmp(user, o->bot_user_id) == 0)
		return slack_event_out(out, SLACK_EVENT_DROP, "the bot's own message");
	if (o->bot_id && bot_id && strcmp(bot_id, o->bot_id) == 0)
		return slack_event_out(out, SLACK_EVENT_DROP, "the bot's own message");
	bot = bot_id || (subtype && strcmp(subtype, "bot_message") == 0);
	if (bot && !o->allow_bots)
		return slack_event_out(out, SLACK_EVENT_DROP,
		                       "another bot's message (allow_bots is off)");
	if (!user)
		user = bot_id;
	if (!user)
		return slack_event_out(out, SLACK_EVENT_DROP, "a message without a sender");
	if (!text || !*text)
		return slack_event_out(out, SLACK_EVENT_DROP, "a message without text");
	if (strlen(text) > SLACK_TEXT_MAX)
		return slack_event_out(out, SLACK_EVENT_INVALID, "the text is too long");

	if (!ctype) /* app_mention carries none: the id's first letter tells */
		ctype = channel[0] == 'D' ? "im" : "channel";
	if (strcmp(ctype, "im") == 0)
		out->peer_kind = ENVELOPE_PEER_DIRECT;
	else if (strcmp(ctype, "mpim") == 0)
		out->peer_kind = ENVELOPE_PEER_GROUP;
	else if (strcmp(ctype, "channel") == 0 || strcmp(ctype, "group") == 0)
		out->peer_kind = ENVELOPE_PEER_CHANNEL;
	else
		return slack_event_out(out, SLACK_EVENT_DROP,
		                       "a conversation type the gateway ignores");
	out->mentioned = out->peer_kind == ENVELOPE_PEER_DIRECT ||
	                 strcmp(etype, "app_mention") == 0 || slack_mentions(text, o->bot_user_id);

	if (out->edited)
		snprintf(key, sizeof key, "%s:%s:%s:edit:%s", team ? team : "-", channel, ts,
		         event_ts ? event_ts : "-");
	else
		snprintf(key, sizeof key, "%s:%s:%s", team ? team : "-", channel, ts);
	out->team_id = team ? strdup(team) : NULL;
	out->channel_id = strdup(channel);
	out->user_id = strdup(user);
	out->text = slack_strip_mention(text, o->bot_user_id);
	out->ts = strdup(ts);
	out->thread_ts = thread_ts ? strdup(thread_ts) : NULL;
	out->event_id = eid ? strdup(eid) : NULL;
	out->dedupe_key = strdup(key);
	if ((team && !out->team_id) || !out->channel_id || !out->user_id || !out->text ||
	    !out->ts || (thread_ts && !out->thread_ts) || (eid && !out->event_id) ||
	    !out->dedupe_key) {
		slack_event_release(out);
		return slack_event_out(out, SLACK_EVENT_INVALID, "out of memory");
	}
	return slack_event_out(out, SLACK_EVENT_MESSAGE, NULL);
}

const char *slack_dedupe_key_ts(const char *key, char *out, size_t size)
{
	const char *p = key ? strchr(key, ':') : NULL;
	size_t n;

	out[0] = '\0';
	if (!p || !(p = strchr(p + 1, ':')))
		return out;
	p++;
	n = strcspn(p, ":");
	if (n && n < size) {
		memcpy(out, p, n);
		out[n] = '\0';
	}
	return out;
}

/* ---- markdown to mrkdwn ---- */

static int slack_put_escaped(struct buf *b, const char *s, size_t n)
{
	int rc = SB_OK;

	for (size_t i = 0; i < n && !rc; i++) {
		if (s[i] == '&')
			rc = buf_puts(b, "&amp;");
		else if (s[i] == '<')
			rc = buf_puts(b, "&lt;");
		else if (s[i] == '>')
			rc = buf_puts(b, "&gt;");
		else
			rc = buf_append(b, &s[i], 1);
	}
	return rc;
}

/* The length of a Slack token at s ("<@U1>", "<#C1|x>", "<!here>",
 * "<https://x|y>"), or 0 when s does not start one. */
static size_t slack_token_len(const char *s, size_t n)
{
	size_t i;

	if (n < 3 || s[0] != '<')
		return 0;
	if (!(s[1] == '@' || s[1] == '#' || s[1] == '!' || strncmp(s + 1, "http://", 7) == 0 ||
	      strncmp(s + 1, "https://", 8) == 0 || strncmp(s + 1, "mailto:", 7) == 0))
		return 0;
	for (i = 1; i < n && s[i] != '>'; i++)
		if (s[i] == '<' || s[i] == '\n' || (s[i] == ' ' && !memchr(s + 1, '|', i)))
			return 0;
	return i < n ? i + 1 : 0;
}

/* The position of the closing delimiter d (length dl) for a span that
 * opens at s (after the opener), within n; -1 when none. The content may
 * not be empty nor start or end with a space. */
static long slack_find_close(const char *s, size_t n, const char *d, size_t dl)
{
	if (n == 0 || s[0] == ' ')
		return -1;
	for (size_t i = 1; i + dl <= n; i++)
		if (memcmp(s + i, d, dl) == 0 && s[i - 1] != ' ')
			return (long)i;
	return -1;
}

static int slack_inline(struct buf *b, const char *s, size_t n, int depth)
{
	size_t i = 0;
	int rc = SB_OK;

	while (i < n && !rc) {
		const char *p = s + i;
		size_t left = n - i, t;
		long c;

		if (*p == '`') {
			const char *end = memchr(p + 1, '`', left - 1);

			if (end) {
				rc = buf_puts(b, "`");
				if (!rc)
					rc = slack_put_escaped(b, p + 1, (size_t)(end - p - 1));
				if (!rc)
					rc = buf_puts(b, "`");
				i += (size_t)(end - p) + 1;
				continue;
			}
		}
		if (depth < 4 && left > 4 &&
		    (strncmp(p, "**", 2) == 0 || strncmp(p, "__", 2) == 0) &&
		    (c = slack_find_close(p + 2, left - 2, p[0] == '*' ? "**" : "__", 2)) > 0) {
			rc = buf_puts(b, "*");
			if (!rc)
				rc = slack_inline(b, p + 2, (size_t)c, depth + 1);
			if (!rc)
				rc = buf_puts(b, "*");
			i += (size_t)c + 4;
			continue;
		}
		if (depth < 4 && left > 4 && strncmp(p, "~~", 2) == 0 &&
		    (c = slack_find_close(p + 2, left - 2, "~~", 2)) > 0) {
			rc = buf_puts(b, "~");
			if (!rc)
				rc = slack_inline(b, p + 2, (size_t)c, depth + 1);
			if (!rc)
				rc = buf_puts(b, "~");
			i += (size_t)c + 4;
			continue;
		}
		if (depth < 4 && *p == '*' && left > 2 && p[1] != '*' &&
		    (c = slack_find_close(p + 1, left - 1, "*", 1)) > 0 &&
		    (i + 1 + (size_t)c + 1 >= n || p[1 + c + 1] != '*')) {
			rc = buf_puts(b, "_");
			if (!rc)
				rc = slack_inline(b, p + 1, (size_t)c, depth + 1);
			if (!rc)
				rc = buf_puts(b, "_");
			i += (size_t)c + 2;
			continue;
		}
		if (*p == '[') {
			const char *mid = memchr(p, ']', left);

			if (mid && (size_t)(mid - p) + 1 < left && mid[1] == '(') {
				const char *url = mid + 2;
				const char *end = memchr(url, ')', left - (size_t)(url - p));

				if (end && end > url && !memchr(url, ' ', (size_t)(end - url)) &&
				    !memchr(url, '\n', (size_t)(end - url)) && mid > p + 1) {
					rc = buf_puts(b, "<");
					if (!rc)
						rc = slack_put_escaped(b, url, (size_t)(end - url));
					if (!rc)
						rc = buf_puts(b, "|");
					for (const char *q = p + 1; q < mid && !rc; q++)
						rc = *q == '|' ? buf_puts(b, "/")
						               : slack_put_escaped(b, q, 1);
					if (!rc)
						rc = buf_puts(b, ">");
					i += (size_t)(end - p) + 1;
					continue;
				}
			}
		}
		if (*p == '<' && (t = slack_token_len(p, left)) > 0) {
			rc = buf_append(b, p, t);
			i += t;
			continue;
		}
		rc = slack_put_escaped(b, p, 1);
		i++;
	}
	return rc;
}

char *slack_mrkdwn(const char *md)
{
	struct buf b;
	const char *line = md ? md : "";
	bool fence = false;
	int rc = SB_OK;

	buf_init(&b, SLACK_OUT_MAX);
	while (*line && !rc) {
		size_t n = strcspn(line, "\n");
		const char *p = line;
		size_t lead = 0;

		while (lead < n && (p[lead] == ' ' || p[lead] == '\t'))
			lead++;
		if (n - lead >= 3 && strncmp(p + lead, "```", 3) == 0) {
			fence = !fence;
			rc = buf_append(&b, p + lead, n - lead);
		} else if (fence) {
			rc = slack_put_escaped(&b, p, n);
		} else if (lead == 0 && p[0] == '#') {
			size_t h = 0, end = n;

			while (h < n && p[h] == '#')
				h++;
			if (h <= 6 && h < n && p[h] == ' ') {
				while (end > h && (p[end - 1] == '#' || p[end - 1] == ' '))
					end--;
				while (h < end && p[h] == ' ')
					h++;
				rc = buf_puts(&b, "*");
				if (!rc)
					rc = slack_inline(&b, p + h, end - h, 1);
				if (!rc)
					rc = buf_puts(&b, "*");
			} else {
				rc = slack_inline(&b, p, n, 0);
			}
		} else if (n - lead >= 2 && (p[lead] == '-' || p[lead] == '*' || p[lead] == '+') &&
		           p[lead + 1] == ' ') {
			rc = buf_append(&b, p, lead);
			if (!rc)
				rc = buf_puts(&b, "\xe2\x80\xa2 ");
			if (!rc)
				rc = slack_inline(&b, p + lead + 2, n - lead - 2, 0);
		} else if (n - lead >= 1 && p[lead] == '>') {
			/* A quote stays a quote: Slack reads a leading ">". */
			rc = buf_append(&b, p, lead + 1);
			if (!rc)
				rc = slack_inline(&b, p + lead + 1, n - lead - 1, 0);
		} else {
			rc = slack_inline(&b, p, n, 0);
		}
		line += n;
		if (*line == '\n') {
			if (!rc)
				rc = buf_puts(&b, "\n");
			line++;
		}
	}
	if (rc) {
		buf_free(&b);
		return NULL;
	}
	return buf_steal(&b);
}

/* ---- chunking ---- */

size_t slack_utf8_len(const char *s, size_t bytes)
{
	size_t n = 0;

	for (size_t i = 0; i < bytes; i++)
		if (((unsigned char)s[i] & 0xC0) != 0x80)
			n++;
	return n;
}

/* The byte offset just past limit code points from s (at most len). */
static size_t slack_utf8_prefix(const char *s, size_t len, size_t limit)
{
	size_t i = 0, cps = 0;

	while (i < len) {
		size_t j = i + 1;

		while (j < len && ((unsigned char)s[j] & 0xC0) == 0x80)
			j++;
		if (cps + 1 > limit)
			break;
		cps++;
		i = j;
	}
	return i;
}

/* Backs a hard cut at end up so it does not split an &entity; or a <...>
 * token (which hold no blanks); returns the new end, or end. */
static size_t slack_safe_cut(const char *s, size_t start, size_t end)
{
	for (size_t i = end; i > start && end - i < 1100; i--) {
		char ch = s[i - 1];

		if (ch == ';' || ch == '>' || ch == '\n')
			break;
		if ((ch == '&' || ch == '<') && i - 1 > start)
			return i - 1;
	}
	return end;
}

static int slack_push(char ***v, size_t *n, size_t *cap, const char *s, size_t len, const char *pre,
                      const char *post)
{
	char *piece;
	size_t pl = pre ? strlen(pre) : 0, ql = post ? strlen(post) : 0;

	if (*n == *cap) {
		size_t nc = *cap ? *cap * 2 : 4;
		char **nv = realloc(*v, nc * sizeof *nv);

		if (!nv)
			return SB_ERR_NOMEM;
		*v = nv;
		*cap = nc;
	}
	piece = malloc(pl + len + ql + 1);
	if (!piece)
		return SB_ERR_NOMEM;
	memcpy(piece, pre ? pre : "", pl);
	memcpy(piece + pl, s, len);
	memcpy(piece + pl + len, post ? post : "", ql);
	piece[pl + len + ql] = '\0';
	(*v)[(*n)++] = piece;
	return SB_OK;
}

/* Whether s[0..len) leaves a ``` fence open. */
static bool slack_fence_open(const char *s, size_t len)
{
	bool open = false;

	for (size_t i = 0; i + 3 <= len; i++)
		if ((i == 0 || s[i - 1] == '\n') && memcmp(s + i, "```", 3) == 0)
			open = !open;
	return open;
}

size_t slack_chunk(const char *text, size_t limit, char ***out)
{
	char **v = NULL;
	size_t n = 0, cap = 0, len = text ? strlen(text) : 0, pos = 0;
	bool reopen = false, fences = text && strstr(text, "```");

	*out = NULL;
	if (limit < 16)
		limit = 16;
	if (len == 0) {
		if (slack_push(&v, &n, &cap, "", 0, NULL, NULL))
			goto fail;
		*out = v;
		return n;
	}
	while (pos < len) {
		/* Room for a fence reopened at the start and closed at the end. */
		size_t budget = limit - (fences ? 8 : 0);
		size_t max = slack_utf8_prefix(text + pos, len - pos, budget);
		size_t cut = max, next;
		bool open;

		if (pos + max < len) {
			size_t best = 0;

			/* paragraph, then line, then space; only past a quarter of
			 * the budget, so that pieces do not get tiny. */
			for (size_t i = max; i > max / 4 && !best; i--)
				if (text[pos + i - 1] == '\n' && i >= 2 &&
				    text[pos + i - 2] == '\n')
					best = i;
			for (size_t i = max; i > max / 4 && !best; i--)
				if (text[pos + i - 1] == '\n')
					best = i;
			for (size_t i = max; i > max / 4 && !best; i--)
				if (text[pos + i - 1] == ' ')
					best = i;
			cut = best ? best : slack_safe_cut(text + pos, 0, max);
			if (cut == 0)
				cut = max;
		}
		next = pos + cut;
		/* Trailing blank lines of a piece go. */
		while (cut > 0 && pos + cut < len && (text[pos + cut - 1] == '\n'))
			cut--;
		if (reopen)
			open = !slack_fence_open(text + pos, cut);
		else
			open = slack_fence_open(text + pos, cut);
		if (slack_push(&v, &n, &cap, text + pos, cut, reopen ? "```\n" : NULL,
		               open && next < len ? "\n```" : NULL))
			goto fail;
		reopen = open && next < len;
		pos = next;
		while (pos < len && text[pos] == '\n' && !reopen)
			pos++;
	}
	*out = v;
	return n;
fail:
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
	return 0;
}
