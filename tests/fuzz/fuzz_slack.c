/*
 * fuzz_slack.c - libFuzzer harness for the Slack inbound path and the reply
 * formatting: the input is split into a timestamp header, a signature
 * header and a body. The signature check runs on them, then the body is
 * normalised as an Events API / Socket Mode payload (with and without
 * edits and other bots allowed), and the text found is converted to mrkdwn
 * and chunked. Properties checked, not only the absence of crashes:
 *  - a body signed by our own signer with an in-window timestamp verifies,
 *    and the same signature over another body does not;
 *  - a normalised message has a channel, a sender, a ts, and a dedupe key
 *    that starts with its team (or "-") and holds its ts;
 *  - chunks are never longer than the limit, never split a UTF-8
 *    sequence, and together keep every non-blank character of the text.
 */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "channels/slack/slack_proto.h"
#include "gateway/core/err.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char *next_field(const uint8_t **p, const uint8_t *end)
{
	const uint8_t *start = *p, *nl = memchr(start, '\n', (size_t)(end - start));
	size_t n = (size_t)((nl ? nl : end) - start);
	char *s = malloc(n + 1);

	if (!s)
		abort();
	memcpy(s, start, n);
	s[n] = '\0';
	for (size_t i = 0; i < n; i++)
		if (!s[i])
			s[i] = ' ';
	*p = nl ? nl + 1 : end;
	return s;
}

static size_t non_blank(const char *s)
{
	size_t n = 0;

	for (; *s; s++)
		if (*s != ' ' && *s != '\n')
			n++;
	return n;
}

/* Whether s is well-formed UTF-8 (as every JSON string jansson gives). */
static int utf8_valid(const unsigned char *s)
{
	while (*s) {
		int n = *s < 0x80             ? 0
		        : (*s & 0xE0) == 0xC0 ? 1
		        : (*s & 0xF0) == 0xE0 ? 2
		        : (*s & 0xF8) == 0xF0 ? 3
		                              : -1;

		if (n < 0)
			return 0;
		s++;
		for (int i = 0; i < n; i++, s++)
			if ((*s & 0xC0) != 0x80)
				return 0;
	}
	return 1;
}

static void check_chunks(const char *text, size_t limit)
{
	char *md = slack_mrkdwn(text), **v = NULL;
	size_t n, total = 0, want;
	int valid = utf8_valid((const unsigned char *)text);

	if (!md)
		return;
	n = slack_chunk(md, limit, &v);
	if (!n)
		abort();
	for (size_t i = 0; i < n; i++) {
		size_t len = strlen(v[i]);

		if (slack_utf8_len(v[i], len) > limit)
			abort();
		/* In well-formed text a piece never begins inside a character. */
		if (valid && len && ((unsigned char)v[i][0] & 0xC0) == 0x80)
			abort();
		total += non_blank(v[i]);
		free(v[i]);
	}
	free(v);
	/* Fences may be added when a code block is cut; nothing is lost. */
	want = non_blank(md);
	if (total < want)
		abort();
	free(md);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *p = data, *end = data + size;
	char *ts = next_field(&p, end), *sig = next_field(&p, end);
	const char *body = (const char *)p, *why;
	size_t body_len = (size_t)(end - p);
	char good[SLACK_SIG_SIZE];
	static const struct slack_norm_opts strict = {.bot_user_id = "UBOT", .bot_id = "BBOT"};
	static const struct slack_norm_opts loose = {
	    .bot_user_id = "UBOT", .bot_id = "BBOT", .allow_bots = true, .handle_edits = true};
	struct slack_event ev;
	json_t *root;

	slack_sig_verify("fuzz-signing-secret", ts, sig, body, body_len, 1700000000, 300, &why);
	if (slack_sig_compute("fuzz-signing-secret", "1700000100", body, body_len, good) != SB_OK)
		abort();
	if (slack_sig_verify("fuzz-signing-secret", "1700000100", good, body, body_len, 1700000000,
	                     300, &why) != SB_OK)
		abort();
	if (body_len && slack_sig_verify("fuzz-signing-secret", "1700000100", good, body,
	                                 body_len - 1, 1700000000, 300, &why) == SB_OK)
		abort();

	root = json_loadb(body, body_len, 0, NULL);
	for (int k = 0; root && k < 2; k++) {
		if (slack_event_parse(root, k ? &loose : &strict, &ev) == SLACK_EVENT_MESSAGE) {
			char tsbuf[300];

			if (!ev.channel_id || !ev.user_id || !ev.ts || !ev.text || !ev.dedupe_key)
				abort();
			if (strcmp(slack_dedupe_key_ts(ev.dedupe_key, tsbuf, sizeof tsbuf),
			           ev.ts) != 0)
				abort();
			if (strncmp(ev.dedupe_key, ev.team_id ? ev.team_id : "-",
			            strlen(ev.team_id ? ev.team_id : "-")) != 0)
				abort();
			check_chunks(ev.text, 100 + (size_t)(body_len % 200));
		}
		slack_event_release(&ev);
	}
	json_decref(root);
	/* The raw body as reply text, too. */
	if (body_len < 65536 && !memchr(body, '\0', body_len)) {
		char *text = strndup(body, body_len);

		if (!text)
			abort();
		check_chunks(text, 100);
		free(text);
	}
	free(ts);
	free(sig);
	return 0;
}
