/*
 * test_telegram_proto.c - the pure parts of the Telegram channel: the update
 * normaliser (chat kinds, topics, mentions, senders, skips), UTF-16
 * counting and entity ranges, chunking (limits as Telegram counts them,
 * multi-byte characters and surrogate pairs never cut, code fences closed
 * and reopened), HTML escaping and the Markdown conversion, Bot API
 * answers, and the configuration's errors.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "channels/telegram/telegram_config.h"
#include "channels/telegram/telegram_proto.h"
#include "gateway/config/channels_config.h"
#include "gateway/core/cfg.h"
#include "gateway/core/err.h"

static const struct telegram_norm_opts opts = {
    .bot_id = 999, .bot_username = "gw_bot", .edits = false, .allow_bots = false};

static int norm(const char *json, const struct telegram_norm_opts *o, struct telegram_norm *n)
{
	json_t *u = json_loads(json, 0, NULL);
	int r;

	assert_non_null(u);
	r = telegram_normalise(u, o ? o : &opts, n);
	/* text is borrowed from u: keep a copy alive for the assertions */
	if (r == 1)
		n->text = strdup(n->text);
	json_decref(u);
	return r;
}

static void release(struct telegram_norm *n)
{
	free((char *)n->text);
}

static void test_private_message(void **state)
{
	struct telegram_norm n;
	struct envelope e;

	(void)state;
	assert_int_equal(
	    norm("{\"update_id\":10,\"message\":{\"message_id\":5,\"from\":{\"id\":42,"
	         "\"is_bot\":false,\"first_name\":\"Alice\",\"last_name\":\"L\"},"
	         "\"chat\":{\"id\":42,\"type\":\"private\"},\"date\":1,\"text\":\"hi\"}}",
	         NULL, &n),
	    1);
	assert_string_equal(n.event_id, "10:5");
	assert_string_equal(n.peer_id, "42");
	assert_string_equal(n.sender_id, "42");
	assert_string_equal(n.sender_name, "Alice L");
	assert_int_equal(n.peer_kind, ENVELOPE_PEER_DIRECT);
	assert_true(n.mentioned); /* a DM addresses the bot */
	assert_false(n.has_thread);
	telegram_norm_envelope(&n, "main", "{}", 7, &e);
	assert_string_equal(e.channel, "telegram");
	assert_string_equal(e.account, "main");
	assert_null(e.thread_id);
	assert_int_equal(telegram_event_message_id(e.event_id), 5);
	release(&n);
}

static void test_group_mentions(void **state)
{
	struct telegram_norm n;

	(void)state;
	/* Not addressed. */
	assert_int_equal(norm("{\"update_id\":1,\"message\":{\"message_id\":2,\"from\":{\"id\":1,"
	                      "\"first_name\":\"A\"},\"chat\":{\"id\":-5,\"type\":\"group\"},"
	                      "\"text\":\"hello all\"}}",
	                      NULL, &n),
	                 1);
	assert_int_equal(n.peer_kind, ENVELOPE_PEER_GROUP);
	assert_false(n.mentioned);
	release(&n);
	/* @mention after multi-byte text: offsets are UTF-16 units (the emoji
	 * is two), and usernames compare without case. */
	assert_int_equal(
	    norm("{\"update_id\":1,\"message\":{\"message_id\":2,\"from\":{\"id\":1},\"chat\":{"
	         "\"id\":-5,"
	         "\"type\":\"supergroup\"},\"text\":\"\xf0\x9f\x98\x80 \xc3\xa9 @GW_bot hi\","
	         "\"entities\":[{\"type\":\"mention\",\"offset\":5,\"length\":7}]}}",
	         NULL, &n),
	    1);
	assert_true(n.mentioned);
	release(&n);
	/* The same with a wrong offset is not a mention. */
	assert_int_equal(
	    norm("{\"update_id\":1,\"message\":{\"message_id\":2,\"from\":{\"id\":1},\"chat\":{"
	         "\"id\":-5,"
	         "\"type\":\"supergroup\"},\"text\":\"\xf0\x9f\x98\x80 \xc3\xa9 @GW_bot hi\","
	         "\"entities\":[{\"type\":\"mention\",\"offset\":4,\"length\":7}]}}",
	         NULL, &n),
	    1);
	assert_false(n.mentioned);
	release(&n);
	/* Another bot's mention. */
	assert_int_equal(
	    norm("{\"update_id\":1,\"message\":{\"message_id\":2,\"chat\":{\"id\":-5,"
	         "\"type\":\"group\"},\"text\":\"@other_bot x\",\"entities\":[{\"type\":"
	         "\"mention\",\"offset\":0,\"length\":10}]}}",
	         NULL, &n),
	    1);
	assert_false(n.mentioned);
	release(&n);
	/* /command@gw_bot */
	assert_int_equal(norm("{\"update_id\":1,\"message\":{\"message_id\":2,\"chat\":{\"id\":-5,"
	                      "\"type\":\"group\"},\"text\":\"/ask@gw_bot now\",\"entities\":[{"
	                      "\"type\":\"bot_command\",\"offset\":0,\"length\":11}]}}",
	                      NULL, &n),
	                 1);
	assert_true(n.mentioned);
	release(&n);
	/* text_mention of the bot's id */
	assert_int_equal(
	    norm("{\"update_id\":1,\"message\":{\"message_id\":2,\"chat\":{\"id\":-5,"
	         "\"type\":\"group\"},\"text\":\"Bot x\",\"entities\":[{\"type\":"
	         "\"text_mention\",\"offset\":0,\"length\":3,\"user\":{\"id\":999}}]}}",
	         NULL, &n),
	    1);
	assert_true(n.mentioned);
	release(&n);
	/* a reply to the bot */
	assert_int_equal(norm("{\"update_id\":1,\"message\":{\"message_id\":2,\"chat\":{\"id\":-5,"
	                      "\"type\":\"group\"},\"text\":\"yes\",\"reply_to_message\":{"
	                      "\"message_id\":1,\"from\":{\"id\":999,\"is_bot\":true}}}}",
	                      NULL, &n),
	                 1);
	assert_true(n.mentioned);
	release(&n);
}

static void test_topics_and_senders(void **state)
{
	struct telegram_norm n;

	(void)state;
	assert_int_equal(
	    norm("{\"update_id\":3,\"message\":{\"message_id\":9,\"message_thread_id\":7,"
	         "\"is_topic_message\":true,\"from\":{\"id\":11,\"username\":\"bob\"},"
	         "\"chat\":{\"id\":-1001234567890,\"type\":\"supergroup\","
	         "\"is_forum\":true},\"text\":\"in topic\"}}",
	         NULL, &n),
	    1);
	assert_true(n.has_thread);
	assert_string_equal(n.thread_id, "7");
	assert_string_equal(n.peer_id, "-1001234567890");
	assert_string_equal(n.sender_name, "bob");
	release(&n);
	/* A reply thread in an ordinary group is not a topic. */
	assert_int_equal(
	    norm("{\"update_id\":3,\"message\":{\"message_id\":9,\"message_thread_id\":4,"
	         "\"from\":{\"id\":11},\"chat\":{\"id\":-100,\"type\":\"supergroup\"},"
	         "\"text\":\"reply\"}}",
	         NULL, &n),
	    1);
	assert_false(n.has_thread);
	release(&n);
	/* Anonymous admin: the sender is the chat. */
	assert_int_equal(
	    norm("{\"update_id\":3,\"message\":{\"message_id\":9,\"from\":{\"id\":1087968824,"
	         "\"is_bot\":true,\"first_name\":\"Group\"},\"sender_chat\":{\"id\":-100,"
	         "\"title\":\"Team\"},\"chat\":{\"id\":-100,\"type\":\"supergroup\"},"
	         "\"text\":\"as admin\"}}",
	         NULL, &n),
	    1);
	assert_string_equal(n.sender_id, "-100");
	assert_string_equal(n.sender_name, "Team");
	release(&n);
	/* A caption counts as text. */
	assert_int_equal(norm("{\"update_id\":4,\"message\":{\"message_id\":1,\"from\":{\"id\":5},"
	                      "\"chat\":{\"id\":5,\"type\":\"private\"},\"photo\":[],"
	                      "\"caption\":\"look\"}}",
	                      NULL, &n),
	                 1);
	assert_string_equal(n.text, "look");
	release(&n);
	/* A channel post. */
	assert_int_equal(
	    norm("{\"update_id\":4,\"channel_post\":{\"message_id\":1,\"sender_chat\":{"
	         "\"id\":-1009,\"title\":\"News\"},\"chat\":{\"id\":-1009,\"type\":"
	         "\"channel\"},\"text\":\"post\"}}",
	         NULL, &n),
	    1);
	assert_int_equal(n.peer_kind, ENVELOPE_PEER_CHANNEL);
	release(&n);
}

static void test_skips(void **state)
{
	struct telegram_norm_opts o = opts;
	struct telegram_norm n;
	const char *edit =
	    "{\"update_id\":5,\"edited_message\":{\"message_id\":1,\"from\":{\"id\":5},"
	    "\"chat\":{\"id\":5,\"type\":\"private\"},\"text\":\"fixed\"}}";
	const char *bot =
	    "{\"update_id\":6,\"message\":{\"message_id\":1,\"from\":{\"id\":77,"
	    "\"is_bot\":true},\"chat\":{\"id\":-5,\"type\":\"group\"},\"text\":\"x\"}}";

	(void)state;
	assert_int_equal(norm(edit, NULL, &n), 0);
	assert_int_equal(n.update_id, 5);
	assert_non_null(strstr(n.skip, "edit"));
	o.edits = true;
	assert_int_equal(norm(edit, &o, &n), 1);
	assert_true(n.edited);
	release(&n);
	assert_int_equal(norm(bot, NULL, &n), 0);
	assert_non_null(strstr(n.skip, "bot"));
	o.allow_bots = true;
	assert_int_equal(norm(bot, &o, &n), 1);
	release(&n);
	/* The bot's own message: dropped even with allow_bots. */
	assert_int_equal(
	    norm("{\"update_id\":7,\"message\":{\"message_id\":1,\"from\":{\"id\":999,"
	         "\"is_bot\":true},\"chat\":{\"id\":-5,\"type\":\"group\"},\"text\":\"x\"}}",
	         &o, &n),
	    0);
	assert_int_equal(norm("{\"update_id\":8,\"callback_query\":{\"id\":\"1\"}}", NULL, &n), 0);
	assert_int_equal(norm("{\"update_id\":9,\"message\":{\"message_id\":1,\"from\":{\"id\":5},"
	                      "\"chat\":{\"id\":5,\"type\":\"private\"},\"sticker\":{}}}",
	                      NULL, &n),
	                 0);
	assert_int_equal(norm("{\"message\":{}}", NULL, &n), -1);
	assert_int_equal(norm("[1]", NULL, &n), -1);
	assert_int_equal(norm("{\"update_id\":\"1\"}", NULL, &n), -1);
}

/* A message "/cmd@name" where name is another bot's: skipped; this bot's,
 * or before getMe told the username: kept. */
static void test_commands_for_other_bots(void **state)
{
	struct telegram_norm_opts o = opts;
	struct telegram_norm n;
	static const char *const skipped[] = {"/status@other_bot", "/model@OtherBot gpt",
	                                      "/help@gw_bot2", "/x@a"};
	static const char *const kept[] = {"/status@gw_bot",
	                                   "/status@GW_BOT extra",
	                                   "/status",
	                                   "hello @other_bot",
	                                   "/status@other_bot/x",
	                                   "/@other_bot",
	                                   " /status@other_bot",
	                                   "/status@"};
	char json[512];

	(void)state;
	for (size_t i = 0; i < sizeof skipped / sizeof *skipped; i++) {
		snprintf(json, sizeof json,
		         "{\"update_id\":30,\"message\":{\"message_id\":1,\"from\":{\"id\":5},"
		         "\"chat\":{\"id\":-5,\"type\":\"group\"},\"text\":\"%s\"}}",
		         skipped[i]);
		assert_int_equal(norm(json, NULL, &n), 0);
		assert_string_equal(n.skip, "a command addressed to another bot");
	}
	for (size_t i = 0; i < sizeof kept / sizeof *kept; i++) {
		snprintf(json, sizeof json,
		         "{\"update_id\":31,\"message\":{\"message_id\":1,\"from\":{\"id\":5},"
		         "\"chat\":{\"id\":5,\"type\":\"private\"},\"text\":\"%s\"}}",
		         kept[i]);
		if (norm(json, NULL, &n) != 1)
			fail_msg("\"%s\" was skipped: %s", kept[i], n.skip ? n.skip : "");
		assert_string_equal(n.text, kept[i]);
		release(&n);
	}
	/* getMe has not answered: the bot's name is unknown, nothing skipped */
	o.bot_username = NULL;
	assert_int_equal(norm("{\"update_id\":32,\"message\":{\"message_id\":1,\"from\":"
	                      "{\"id\":5},\"chat\":{\"id\":5,\"type\":\"private\"},"
	                      "\"text\":\"/status@other_bot\"}}",
	                      &o, &n),
	                 1);
	release(&n);
}

static void test_utf16(void **state)
{
	size_t s, b;

	(void)state;
	assert_int_equal(telegram_utf16_len("abc", 3), 3);
	assert_int_equal(telegram_utf16_len("\xc3\xa9", 2), 1);
	assert_int_equal(telegram_utf16_len("\xe2\x82\xac", 3), 1);
	assert_int_equal(telegram_utf16_len("\xf0\x9f\x98\x80", 4), 2);
	assert_int_equal(telegram_utf16_len("\xf0\x9f", 2), 2); /* cut: a unit per byte */
	assert_true(telegram_utf16_range("\xf0\x9f\x98\x80xy", 6, 2, 1, &s, &b));
	assert_int_equal(s, 4);
	assert_int_equal(b, 1);
	/* Inside a surrogate pair: not a character boundary. */
	assert_false(telegram_utf16_range("\xf0\x9f\x98\x80xy", 6, 1, 1, &s, &b));
	assert_false(telegram_utf16_range("ab", 2, 1, 5, &s, &b));
	assert_false(telegram_utf16_range("ab", 2, -1, 1, &s, &b));
}

/* Every chunk within the limit, valid UTF-8, and the text intact (up to
 * the whitespace at the cuts). */
static void check_chunks(const char *text, size_t limit, size_t min_chunks)
{
	char **c = NULL;
	size_t n = telegram_chunks(text, limit, &c), ia = 0;

	assert_true(n >= min_chunks);
	for (size_t i = 0; i < n; i++) {
		const unsigned char *p = (const unsigned char *)c[i];
		size_t len = strlen(c[i]);

		assert_true(telegram_utf16_len(c[i], len) <= limit);
		/* no chunk starts on a continuation byte or ends in a cut sequence */
		assert_true((p[0] & 0xC0) != 0x80);
		for (size_t k = 0; k < len;) {
			size_t w = p[k] < 0x80             ? 1
			           : (p[k] & 0xE0) == 0xC0 ? 2
			           : (p[k] & 0xF0) == 0xE0 ? 3
			                                   : 4;

			assert_true(k + w <= len);
			k += w;
		}
		for (size_t k = 0; k < len; k++) {
			if (c[i][k] == ' ' || c[i][k] == '\n')
				continue;
			while (text[ia] == ' ' || text[ia] == '\n')
				ia++;
			assert_int_equal(c[i][k], text[ia]);
			ia++;
		}
	}
	while (text[ia] == ' ' || text[ia] == '\n')
		ia++;
	assert_int_equal(text[ia], '\0');
	telegram_chunks_free(c, n);
}

static void test_chunks(void **state)
{
	char big[20000];
	char **c = NULL;
	size_t n, p = 0;

	(void)state;
	assert_int_equal(telegram_chunks("", 4096, &c), 0);
	n = telegram_chunks("short", 4096, &c);
	assert_int_equal(n, 1);
	assert_string_equal(c[0], "short");
	telegram_chunks_free(c, n);
	/* Emoji only (each 4 bytes, 2 units): never split. */
	for (int i = 0; i < 3000; i++)
		p += (size_t)snprintf(big + p, sizeof big - p, "\xf0\x9f\x98\x80");
	check_chunks(big, 4096, 2);
	/* Mixed widths, no spaces at all. */
	p = 0;
	for (int i = 0; i < 1800; i++)
		p += (size_t)snprintf(big + p, sizeof big - p,
		                      "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x8e\x89");
	check_chunks(big, 100, 10);
	/* Words and paragraphs: cuts fall on boundaries. */
	p = 0;
	for (int i = 0; i < 400; i++)
		p += (size_t)snprintf(big + p, sizeof big - p, "word%03d%s", i,
		                      i % 20 == 19 ? "\n\n" : " ");
	check_chunks(big, 300, 5);
	n = telegram_chunks(big, 300, &c);
	for (size_t i = 0; i + 1 < n; i++) {
		size_t len = strlen(c[i]);

		/* ends on a whole word */
		assert_true(c[i][len - 1] >= '0' && c[i][len - 1] <= '9');
	}
	telegram_chunks_free(c, n);
}

static void test_chunks_code_fence(void **state)
{
	char text[8000];
	char **c = NULL;
	size_t n, p = 0;

	(void)state;
	p += (size_t)snprintf(text + p, sizeof text - p, "Intro\n```python\n");
	for (int i = 0; i < 60; i++)
		p += (size_t)snprintf(text + p, sizeof text - p, "print(%d) # a line of code\n", i);
	snprintf(text + p, sizeof text - p, "```\nAfter.");
	n = telegram_chunks(text, 400, &c);
	assert_true(n >= 3);
	for (size_t i = 0; i < n; i++) {
		char *html = telegram_markdown_html(c[i]);
		int opens = 0, closes = 0;

		assert_true(telegram_utf16_len(c[i], strlen(c[i])) <= 400);
		for (char *q = html; (q = strstr(q, "<pre>")); q++)
			opens++;
		for (char *q = html; (q = strstr(q, "</pre>")); q++)
			closes++;
		/* every chunk renders a balanced code block */
		assert_int_equal(opens, closes);
		if (i > 0 && i + 1 < n)
			assert_non_null(strstr(html, "<pre><code class=\"language-python\">"));
		free(html);
	}
	telegram_chunks_free(c, n);
}

static void test_html(void **state)
{
	char *s;

	(void)state;
	s = telegram_html_escape("a<b>&\"c\"", 9);
	assert_string_equal(s, "a&lt;b&gt;&amp;&quot;c&quot;");
	free(s);
	s = telegram_markdown_html("x < y & **bold <i>** `a<b` [site](https://e.com/?a=1&b=2) ok");
	assert_string_equal(s, "x &lt; y &amp; <b>bold &lt;i&gt;</b> <code>a&lt;b</code> "
	                       "<a href=\"https://e.com/?a=1&amp;b=2\">site</a> ok");
	free(s);
	s = telegram_markdown_html("```\n<tag> & **no**\n```\nafter **b**");
	assert_string_equal(s, "<pre><code>&lt;tag&gt; &amp; **no**</code></pre>\nafter <b>b</b>");
	free(s);
	/* Unbalanced markup stays literal; links other than http(s) too. */
	s = telegram_markdown_html("**open `tick [x](javascript:alert(1))");
	assert_string_equal(s, "**open `tick [x](javascript:alert(1))");
	free(s);
	/* An unclosed fence is closed. */
	s = telegram_markdown_html("```sh\nls");
	assert_string_equal(s, "<pre><code class=\"language-sh\">ls</code></pre>");
	free(s);
}

static void test_answers(void **state)
{
	struct telegram_answer a;
	json_t *r;

	(void)state;
	r = json_loads(
	    "{\"ok\":false,\"error_code\":429,\"description\":\"Too Many Requests: retry "
	    "after 7\",\"parameters\":{\"retry_after\":7}}",
	    0, NULL);
	assert_true(telegram_answer_parse(r, &a));
	assert_false(a.ok);
	assert_int_equal(a.retry_after_s, 7);
	json_decref(r);
	r = json_loads("{\"ok\":false,\"description\":\"Bad Request: group chat was upgraded\","
	               "\"parameters\":{\"migrate_to_chat_id\":-1001}}",
	               0, NULL);
	assert_true(telegram_answer_parse(r, &a));
	assert_int_equal(a.migrate_to_chat_id, -1001);
	assert_int_equal(a.retry_after_s, -1);
	json_decref(r);
	r = json_loads("{\"message\":\"API method 'x' is not supported\"}", 0, NULL);
	assert_false(telegram_answer_parse(r, &a));
	json_decref(r);
	assert_true(telegram_is_parse_error(
	    "Bad Request: can't parse entities: Unsupported start tag \"x\" at byte offset 0"));
	assert_false(telegram_is_parse_error("Bad Request: chat not found"));
}

/* ---- configuration ---- */

static int apply(const char *yaml, struct channels_config *c, struct cfg_errors *errs)
{
	struct cfg_doc *doc = NULL;
	int rc;

	memset(c, 0, sizeof *c);
	cfg_errors_init(errs);
	rc = cfg_doc_parse(yaml, strlen(yaml), "t.yaml", NULL, &doc, errs);
	if (rc == SB_OK)
		rc = cfg_apply(doc, &channels_config_section, c, errs);
	cfg_doc_free(doc);
	return rc;
}

static bool has_error(const struct cfg_errors *e, const char *path, const char *msg, int line)
{
	for (size_t i = 0; i < e->n; i++)
		if (strcmp(e->v[i].path, path) == 0 && strstr(e->v[i].msg, msg) &&
		    (!line || e->v[i].line == line))
			return true;
	return false;
}

static void test_config_ok(void **state)
{
	struct channels_config c;
	struct cfg_errors e;
	const struct telegram_account_config *a;

	(void)state;
	assert_int_equal(
	    apply("telegram:\n  accounts:\n    - id: main\n      token: \"1:abc\"\n", &c, &e),
	    SB_OK);
	a = telegram_config_find(&c.telegram.telegram, "main");
	assert_non_null(a);
	assert_int_equal(a->mode, TELEGRAM_MODE_POLLING);
	assert_string_equal(a->api_base, "https://api.telegram.org");
	assert_int_equal(a->poll_timeout_ms, 30000);
	assert_int_equal(a->chunk_limit, 4096);
	assert_true(a->reply_to_message);
	assert_true(a->typing);
	assert_false(a->allow_bots);
	assert_int_equal(a->rate.chat_per_minute, 20);
	cfg_release(&channels_config_section, &c);
	cfg_errors_free(&e);
}

static void test_config_errors(void **state)
{
	struct channels_config c;
	struct cfg_errors e;

	(void)state;
	assert_int_equal(
	    apply("telegram:\n"
	          "  accounts:\n"
	          "    - id: a\n"
	          "      token: \"nocolon\"\n"
	          "      api_base: ftp://x\n"
	          "    - id: b\n"
	          "      token: \"2:x\"\n"
	          "      mode: webhook\n"
	          "      chunk_limit: 5000\n"
	          "    - id: a\n"
	          "      token: \"2:x\"\n"
	          "      allowed_updates: [message, nonsense]\n"
	          "    - id: d\n"
	          "      token: \"4:y\"\n"
	          "      mode: webhook\n"
	          "      webhook: {secret: \"short\", set_on_start: true}\n"
	          "    - id: e\n"
	          "      token: \"5:z\"\n"
	          "      mode: webhook\n"
	          "    - id: f\n"
	          "      token: \"6:z\"\n"
	          "      mode: webhook\n"
	          "      webhook: {secret: \"0123456789abcdef0\", set_on_start: true}\n",
	          &c, &e),
	    SB_ERR_CONFIG);
	assert_true(has_error(&e, "telegram.accounts[0].token", "bot token", 4));
	assert_true(has_error(&e, "telegram.accounts[4].webhook.secret", "webhook mode needs", 0));
	assert_true(has_error(&e, "telegram.accounts[0].api_base", "http", 5));
	assert_true(has_error(&e, "telegram.accounts[1].chunk_limit", "", 9));
	assert_true(has_error(&e, "telegram.accounts[2].allowed_updates[1]", "nonsense", 12));
	assert_true(has_error(&e, "telegram.accounts[2].id", "defined twice", 10));
	assert_true(has_error(&e, "telegram.accounts[3].webhook.secret", "", 16));
	assert_true(has_error(&e, "telegram.accounts[5].webhook.url", "set_on_start", 0));
	if (getenv("SB_SHOW_ERRORS"))
		cfg_errors_print(&e, stderr);
	/* The token's value never appears in a message. */
	for (size_t i = 0; i < e.n; i++)
		assert_null(strstr(e.v[i].msg, "nocolon"));
	cfg_release(&channels_config_section, &c);
	cfg_errors_free(&e);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_private_message),
	    cmocka_unit_test(test_group_mentions),
	    cmocka_unit_test(test_topics_and_senders),
	    cmocka_unit_test(test_skips),
	    cmocka_unit_test(test_commands_for_other_bots),
	    cmocka_unit_test(test_utf16),
	    cmocka_unit_test(test_chunks),
	    cmocka_unit_test(test_chunks_code_fence),
	    cmocka_unit_test(test_html),
	    cmocka_unit_test(test_answers),
	    cmocka_unit_test(test_config_ok),
	    cmocka_unit_test(test_config_errors),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
