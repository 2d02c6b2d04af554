/*
 * fuzz_telegram.c - libFuzzer harness for the Telegram update normaliser and
 * the reply text path. The input is an Update (JSON, as getUpdates or a
 * webhook delivers it): it is normalised with edits and bots both off and
 * on; the text it carries is then split into chunks at a limit taken from
 * the input and each chunk converted to HTML. Properties checked, not only
 * crashes: a chunk never passes its limit in UTF-16 units, a chunk never
 * starts inside a UTF-8 sequence, and every event id names the update and
 * message it came from.
 */
#include <inttypes.h>
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "channels/telegram/telegram_proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_text(const char *text, size_t limit)
{
	char **c = NULL;
	size_t n = telegram_chunks(text, limit, &c);

	for (size_t i = 0; i < n; i++) {
		size_t len = strlen(c[i]);
		char *html;

		if (telegram_utf16_len(c[i], len) > (limit < 96 ? 96 : limit))
			abort();
		if (((unsigned char)c[i][0] & 0xC0) == 0x80)
			abort();
		html = telegram_markdown_html(c[i]);
		if (!html)
			abort();
		free(html);
	}
	telegram_chunks_free(c, n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct telegram_norm_opts o = {.bot_id = 999, .bot_username = "gw_bot"};
	struct telegram_norm n;
	json_t *u;
	char want[48];

	if (size < 1)
		return 0;
	u = json_loadb((const char *)data + 1, size - 1, 0, NULL);
	for (int pass = 0; pass < 2; pass++) {
		int r;

		o.edits = o.allow_bots = pass == 1;
		r = telegram_normalise(u, &o, &n);
		if (r == 1) {
			snprintf(want, sizeof want, "%" PRId64 ":%" PRId64, n.update_id, n.message_id);
			if (strcmp(want, n.event_id) != 0 || !n.text || !*n.text)
				abort();
			if (telegram_event_message_id(n.event_id) != (n.message_id > 0 ? n.message_id : 0))
				abort();
			check_text(n.text, 64 + data[0] * 16);
		} else if (r == 0 && !n.skip) {
			abort();
		}
	}
	json_decref(u);
	return 0;
}
