/*
 * test_slack.c - the Slack channel's pure parts: v0 signatures against
 * Slack's published vector and the replay window, the event normaliser,
 * markdown to mrkdwn, chunking, and the configuration's errors.
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

#include "channels/slack/slack_config.h"
#include "channels/slack/slack_proto.h"
#include "gateway/config/channels_config.h"
#include "gateway/config/config.h"
#include "gateway/core/cfg.h"
#include "gateway/core/err.h"

/* api.slack.com/authentication/verifying-requests-from-slack */
#define VEC_SECRET "8f742231b10e8888abcd99yyyzzz85a5"
#define VEC_TS "1531420618"
#define VEC_BODY                                                                                   \
	"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id="     \
	"G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-" \
	"collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%"         \
	"2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121."           \
	"803a0bc887a14d10d2c447fce8b6703c"
#define VEC_SIG "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"

static void test_signature_vector(void **state)
{
	char sig[SLACK_SIG_SIZE];
	const char *why = NULL;

	(void)state;
	assert_int_equal(slack_sig_compute(VEC_SECRET, VEC_TS, VEC_BODY, strlen(VEC_BODY), sig), 0);
	assert_string_equal(sig, VEC_SIG);
	assert_int_equal(slack_sig_verify(VEC_SECRET, VEC_TS, VEC_SIG, VEC_BODY, strlen(VEC_BODY),
	                                  1531420618 + 60, 300, &why),
	                 SB_OK);
	/* 5 minutes, in both directions. */
	assert_int_equal(slack_sig_verify(VEC_SECRET, VEC_TS, VEC_SIG, VEC_BODY, strlen(VEC_BODY),
	                                  1531420618 + 300, 300, &why),
	                 SB_OK);
	assert_int_equal(slack_sig_verify(VEC_SECRET, VEC_TS, VEC_SIG, VEC_BODY, strlen(VEC_BODY),
	                                  1531420618 + 301, 300, &why),
	                 SB_ERR_PERM);
	assert_non_null(strstr(why, "window"));
	assert_int_equal(slack_sig_verify(VEC_SECRET, VEC_TS, VEC_SIG, VEC_BODY, strlen(VEC_BODY),
	                                  1531420618 - 301, 300, &why),
	                 SB_ERR_PERM);
	/* One byte of the body, the secret, or the signature changed. */
	assert_int_equal(slack_sig_verify(VEC_SECRET, VEC_TS, VEC_SIG, VEC_BODY,
	                                  strlen(VEC_BODY) - 1, 1531420618, 300, &why),
	                 SB_ERR_PERM);
	assert_string_equal(why, "the signature does not match");
	assert_int_equal(slack_sig_verify("8f742231b10e8888abcd99yyyzzz85a6", VEC_TS, VEC_SIG,
	                                  VEC_BODY, strlen(VEC_BODY), 1531420618, 300, &why),
	                 SB_ERR_PERM);
	memcpy(sig, VEC_SIG, sizeof sig);
	sig[10] = sig[10] == 'a' ? 'b' : 'a';
	assert_int_equal(slack_sig_verify(VEC_SECRET, VEC_TS, sig, VEC_BODY, strlen(VEC_BODY),
	                                  1531420618, 300, &why),
	                 SB_ERR_PERM);
	/* Malformed headers. */
	assert_int_equal(slack_sig_verify(VEC_SECRET, "", VEC_SIG, VEC_BODY, strlen(VEC_BODY),
	                                  1531420618, 300, &why),
	                 SB_ERR_PERM);
	assert_int_equal(slack_sig_verify(VEC_SECRET, "15314x0618", VEC_SIG, VEC_BODY,
	                                  strlen(VEC_BODY), 1531420618, 300, &why),
	                 SB_ERR_PERM);
	assert_int_equal(slack_sig_verify(VEC_SECRET, VEC_TS, "v1=abc", VEC_BODY, strlen(VEC_BODY),
	                                  1531420618, 300, &why),
	                 SB_ERR_PERM);
	assert_int_equal(slack_sig_verify(NULL, VEC_TS, VEC_SIG, VEC_BODY, strlen(VEC_BODY),
	                                  1531420618, 300, &why),
	                 SB_ERR_PERM);
}

/* ---- the normaliser ---- */

static const struct slack_norm_opts opts = {.bot_user_id = "UBOT", .bot_id = "BBOT"};

static enum slack_event_kind parse(const char *json, const struct slack_norm_opts *o,
                                   struct slack_event *ev)
{
	json_error_t err;
	json_t *j = json_loads(json, 0, &err);
	enum slack_event_kind k;

	if (!j)
		fail_msg("bad test JSON: %s", err.text);
	k = slack_event_parse(j, o ? o : &opts, ev);
	json_decref(j);
	return k;
}

#define CB(ev)                                                                                     \
	"{\"type\":\"event_callback\",\"team_id\":\"T1\",\"event_id\":\"Ev1\",\"event\":" ev "}"

static void test_normalise_kinds(void **state)
{
	struct slack_event ev;

	(void)state;
	/* A DM. */
	assert_int_equal(
	    parse(CB("{\"type\":\"message\",\"channel\":\"D1\",\"channel_type\":\"im\","
	             "\"user\":\"U1\",\"text\":\"hi &amp; bye\",\"ts\":\"1.000100\"}"),
	          NULL, &ev),
	    SLACK_EVENT_MESSAGE);
	assert_int_equal(ev.peer_kind, ENVELOPE_PEER_DIRECT);
	assert_true(ev.mentioned);
	assert_string_equal(ev.team_id, "T1");
	assert_string_equal(ev.channel_id, "D1");
	assert_string_equal(ev.user_id, "U1");
	assert_string_equal(ev.text, "hi &amp; bye");
	assert_string_equal(ev.dedupe_key, "T1:D1:1.000100");
	assert_string_equal(ev.event_id, "Ev1");
	assert_null(ev.thread_ts);
	slack_event_release(&ev);

	/* mpim is a group; channel and group are channels. */
	assert_int_equal(
	    parse(CB("{\"type\":\"message\",\"channel\":\"G1\",\"channel_type\":\"mpim\","
	             "\"user\":\"U1\",\"text\":\"x\",\"ts\":\"2.0\"}"),
	          NULL, &ev),
	    SLACK_EVENT_MESSAGE);
	assert_int_equal(ev.peer_kind, ENVELOPE_PEER_GROUP);
	assert_false(ev.mentioned);
	slack_event_release(&ev);
	assert_int_equal(
	    parse(CB("{\"type\":\"message\",\"channel\":\"G2\",\"channel_type\":\"group\","
	             "\"user\":\"U1\",\"text\":\"x\",\"ts\":\"2.0\"}"),
	          NULL, &ev),
	    SLACK_EVENT_MESSAGE);
	assert_int_equal(ev.peer_kind, ENVELOPE_PEER_CHANNEL);
	slack_event_release(&ev);

	/* A mention in a thread: the leading mention goes from the text. */
	assert_int_equal(
	    parse(CB("{\"type\":\"message\",\"channel\":\"C1\",\"channel_type\":\"channel\","
	             "\"user\":\"U1\",\"text\":\"<@UBOT> what now?\",\"ts\":\"3.2\","
	             "\"thread_ts\":\"3.1\"}"),
	          NULL, &ev),
	    SLACK_EVENT_MESSAGE);
	assert_int_equal(ev.peer_kind, ENVELOPE_PEER_CHANNEL);
	assert_true(ev.mentioned);
	assert_string_equal(ev.text, "what now?");
	assert_string_equal(ev.thread_ts, "3.1");
	assert_string_equal(ev.dedupe_key, "T1:C1:3.2");
	slack_event_release(&ev);

	/* Someone else mentioned: not us. <@UBOTX> is not <@UBOT>. */
	assert_int_equal(
	    parse(CB("{\"type\":\"message\",\"channel\":\"C1\",\"channel_type\":"
	             "\"channel\",\"user\":\"U1\",\"text\":\"<@UBOTX> hey\",\"ts\":\"3.3\"}"),
	          NULL, &ev),
	    SLACK_EVENT_MESSAGE);
	assert_false(ev.mentioned);
	assert_string_equal(ev.text, "<@UBOTX> hey");
	slack_event_release(&ev);

	/* app_mention (no channel_type) and message of one ts: one key. */
	assert_int_equal(parse(CB("{\"type\":\"app_mention\",\"channel\":\"C1\",\"user\":\"U1\","
	                          "\"text\":\"<@UBOT|bot> hi\",\"ts\":\"3.2\"}"),
	                       NULL, &ev),
	                 SLACK_EVENT_MESSAGE);
	assert_true(ev.mentioned);
	assert_int_equal(ev.peer_kind, ENVELOPE_PEER_CHANNEL);
	assert_string_equal(ev.dedupe_key, "T1:C1:3.2");
	assert_string_equal(ev.text, "hi");
	slack_event_release(&ev);

	/* url_verification and other callbacks. */
	assert_int_equal(parse("{\"type\":\"url_verification\",\"challenge\":\"abc\"}", NULL, &ev),
	                 SLACK_EVENT_URL_VERIFICATION);
	assert_string_equal(ev.challenge, "abc");
	slack_event_release(&ev);
	assert_int_equal(
	    parse("{\"type\":\"app_rate_limited\",\"minute_rate_limited\":1}", NULL, &ev),
	    SLACK_EVENT_DROP);
	slack_event_release(&ev);
	assert_int_equal(parse(CB("{\"type\":\"reaction_added\",\"user\":\"U1\"}"), NULL, &ev),
	                 SLACK_EVENT_DROP);
	slack_event_release(&ev);
}

static void test_normalise_drops(void **state)
{
	struct slack_norm_opts bots = opts, edits = opts;
	struct slack_event ev;
	const char *edit =
	    CB("{\"type\":\"message\",\"subtype\":\"message_changed\",\"channel\":\"C1\","
	       "\"channel_type\":\"channel\",\"ts\":\"9.9\",\"event_ts\":\"9.9\","
	       "\"message\":{\"user\":\"U1\",\"text\":\"new <@UBOT>\",\"ts\":\"9.1\"},"
	       "\"previous_message\":{\"user\":\"U1\",\"text\":\"old\",\"ts\":\"9.1\"}}");

	(void)state;
	bots.allow_bots = true;
	edits.handle_edits = true;
	/* Own messages, by user and by bot id, always dropped. */
	assert_int_equal(
	    parse(CB("{\"type\":\"message\",\"channel\":\"D1\",\"channel_type\":\"im\","
	             "\"user\":\"UBOT\",\"text\":\"mine\",\"ts\":\"1.0\"}"),
	          &bots, &ev),
	    SLACK_EVENT_DROP);
	assert_string_equal(ev.why, "the bot's own message");
	slack_event_release(&ev);
	assert_int_equal(
	    parse(CB("{\"type\":\"message\",\"subtype\":\"bot_message\",\"channel\":"
	             "\"D1\",\"channel_type\":\"im\",\"bot_id\":\"BBOT\",\"text\":\"m\","
	             "\"ts\":\"1.0\"}"),
	          &bots, &ev),
	    SLACK_EVENT_DROP);
	slack_event_release(&ev);
	/* Other bots: only with allow_bots. */
	assert_int_equal(
	    parse(CB("{\"type\":\"message\",\"channel\":\"D1\",\"channel_type\":\"im\","
	             "\"bot_id\":\"B2\",\"user\":\"U9\",\"text\":\"beep\",\"ts\":\"1.0\"}"),
	          NULL, &ev),
	    SLACK_EVENT_DROP);
	slack_event_release(&ev);
	assert_int_equal(
	    parse(CB("{\"type\":\"message\",\"subtype\":\"bot_message\",\"channel\":"
	             "\"D1\",\"channel_type\":\"im\",\"bot_id\":\"B2\",\"text\":\"beep\","
	             "\"ts\":\"1.0\"}"),
	          &bots, &ev),
	    SLACK_EVENT_MESSAGE);
	assert_string_equal(ev.user_id, "B2");
	slack_event_release(&ev);
	/* Edits only when configured; deletions and joins never. */
	assert_int_equal(parse(edit, NULL, &ev), SLACK_EVENT_DROP);
	slack_event_release(&ev);
	assert_int_equal(parse(edit, &edits, &ev), SLACK_EVENT_MESSAGE);
	assert_true(ev.edited);
	assert_true(ev.mentioned);
	assert_string_equal(ev.text, "new <@UBOT>");
	assert_string_equal(ev.dedupe_key, "T1:C1:9.1:edit:9.9");
	slack_event_release(&ev);
	assert_int_equal(parse(CB("{\"type\":\"message\",\"subtype\":\"message_deleted\","
	                          "\"channel\":\"C1\",\"ts\":\"1.0\",\"deleted_ts\":\"0.5\"}"),
	                       &edits, &ev),
	                 SLACK_EVENT_DROP);
	assert_string_equal(ev.why, "a deletion");
	slack_event_release(&ev);
	assert_int_equal(parse(CB("{\"type\":\"message\",\"subtype\":\"channel_join\",\"channel\":"
	                          "\"C1\",\"user\":\"U1\",\"text\":\"joined\",\"ts\":\"1.0\"}"),
	                       NULL, &ev),
	                 SLACK_EVENT_DROP);
	slack_event_release(&ev);
	/* Malformed. */
	assert_int_equal(parse("[]", NULL, &ev), SLACK_EVENT_INVALID);
	slack_event_release(&ev);
	assert_int_equal(parse("{\"type\":\"event_callback\"}", NULL, &ev), SLACK_EVENT_INVALID);
	slack_event_release(&ev);
	assert_int_equal(parse(CB("{\"type\":\"message\",\"channel\":\"C:1\",\"user\":\"U1\","
	                          "\"text\":\"x\",\"ts\":\"1.0\"}"),
	                       NULL, &ev),
	                 SLACK_EVENT_INVALID);
	slack_event_release(&ev);
	assert_int_equal(parse(CB("{\"type\":\"message\",\"channel\":\"C1\",\"user\":\"U1\","
	                          "\"text\":\"\",\"ts\":\"1.0\"}"),
	                       NULL, &ev),
	                 SLACK_EVENT_DROP);
	slack_event_release(&ev);
}

static void test_dedupe_key_ts(void **state)
{
	char ts[64];

	(void)state;
	assert_string_equal(slack_dedupe_key_ts("T1:C1:3.2", ts, sizeof ts), "3.2");
	assert_string_equal(slack_dedupe_key_ts("T1:C1:9.1:edit:9.9", ts, sizeof ts), "9.1");
	assert_string_equal(slack_dedupe_key_ts("nothing", ts, sizeof ts), "");
	assert_string_equal(slack_dedupe_key_ts(NULL, ts, sizeof ts), "");
}

/* ---- mrkdwn ---- */

static void mrk(const char *md, const char *want)
{
	char *got = slack_mrkdwn(md);

	assert_non_null(got);
	assert_string_equal(got, want);
	free(got);
}

static void test_mrkdwn(void **state)
{
	(void)state;
	mrk("plain text", "plain text");
	mrk("**bold** and __also__", "*bold* and *also*");
	mrk("*italic* and _this_", "_italic_ and _this_");
	mrk("~~gone~~", "~gone~");
	mrk("see [the docs](https://x.io/a?b=1&c=2)", "see <https://x.io/a?b=1&amp;c=2|the docs>");
	mrk("# Title\n## Sub ##", "*Title*\n*Sub*");
	mrk("- one\n* two\n  + three", "\xe2\x80\xa2 one\n\xe2\x80\xa2 two\n  \xe2\x80\xa2 three");
	mrk("a < b && c > d", "a &lt; b &amp;&amp; c &gt; d");
	mrk("> quoted <x>", "> quoted &lt;x&gt;");
	mrk("hi <@U123> and <#C1|general> <!here> <https://a.b|ab>",
	    "hi <@U123> and <#C1|general> <!here> <https://a.b|ab>");
	mrk("`**not bold** <x>`", "`**not bold** &lt;x&gt;`");
	mrk("```\n**raw** & <b>\n```\n**bold**", "```\n**raw** &amp; &lt;b&gt;\n```\n*bold*");
	mrk("2 * 3 * 4", "2 * 3 * 4");
	mrk("a ** b", "a ** b");
	mrk("", "");
	mrk("**unclosed", "**unclosed");
	mrk("[not a link] (x)", "[not a link] (x)");
}

/* ---- chunks ---- */

static void free_chunks(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

static void test_chunk(void **state)
{
	char text[8192], **v;
	size_t n, pos = 0, total = 0;

	(void)state;
	/* Short: one piece, unchanged. */
	n = slack_chunk("hello", 100, &v);
	assert_int_equal(n, 1);
	assert_string_equal(v[0], "hello");
	free_chunks(v, n);
	n = slack_chunk("", 100, &v);
	assert_int_equal(n, 1);
	assert_string_equal(v[0], "");
	free_chunks(v, n);

	/* Paragraphs: cut between them, nothing lost. */
	for (int k = 0; k < 40; k++)
		pos += (size_t)snprintf(text + pos, sizeof text - pos,
		                        "paragraph %02d has a few words in it.\n\n", k);
	snprintf(text + pos, sizeof text - pos, "THE END");
	n = slack_chunk(text, 200, &v);
	assert_true(n >= 8);
	for (size_t i = 0; i < n; i++) {
		assert_true(slack_utf8_len(v[i], strlen(v[i])) <= 200);
		assert_true(strncmp(v[i], "paragraph ", 10) == 0 || strcmp(v[i], "THE END") == 0);
		total += strlen(v[i]);
	}
	assert_non_null(strstr(v[n - 1], "THE END"));
	assert_true(total + 2 * (n - 1) == strlen(text));
	free_chunks(v, n);

	/* No breaks at all: hard cuts on code points, never inside UTF-8. */
	pos = 0;
	for (int k = 0; k < 300; k++)
		pos += (size_t)snprintf(text + pos, sizeof text - pos, "\xc3\xa9");
	n = slack_chunk(text, 100, &v);
	assert_int_equal(n, 3);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(slack_utf8_len(v[i], strlen(v[i])), 100);
	free_chunks(v, n);

	/* An entity is never cut. */
	memset(text, 'x', 95);
	snprintf(text + 95, sizeof text - 95, "&amp;yyyyyyyyyy");
	n = slack_chunk(text, 98, &v);
	assert_int_equal(n, 2);
	assert_string_equal(v[1], "&amp;yyyyyyyyyy");
	free_chunks(v, n);

	/* A code block cut in two is closed and reopened. */
	pos = (size_t)snprintf(text, sizeof text, "```\n");
	for (int k = 0; k < 20; k++)
		pos += (size_t)snprintf(text + pos, sizeof text - pos, "code line %02d\n", k);
	snprintf(text + pos, sizeof text - pos, "```");
	n = slack_chunk(text, 120, &v);
	assert_true(n >= 2);
	for (size_t i = 0; i < n; i++) {
		assert_true(slack_utf8_len(v[i], strlen(v[i])) <= 120);
		assert_true(strncmp(v[i], "```", 3) == 0);
		assert_true(strlen(v[i]) >= 3 && strcmp(v[i] + strlen(v[i]) - 3, "```") == 0);
	}
	free_chunks(v, n);
}

/* ---- configuration ---- */

static char *load_errors(const char *yaml)
{
	struct cfg_errors e;
	struct config *c = NULL;
	char *out = NULL;
	size_t len = 0;
	FILE *f;

	cfg_errors_init(&e);
	if (config_load_text(yaml, "t.yaml", "/tmp", &c, &e) == SB_OK) {
		config_unref(c);
		cfg_errors_free(&e);
		return NULL;
	}
	f = open_memstream(&out, &len);
	cfg_errors_print(&e, f);
	fclose(f);
	cfg_errors_free(&e);
	return out;
}

static void test_config(void **state)
{
	struct config *c = NULL;
	struct cfg_errors e;
	const struct slack_config *sc;
	char *err;

	(void)state;
	cfg_errors_init(&e);
	assert_int_equal(config_load_text("agents: [{id: main}]\n"
	                                  "channels:\n"
	                                  "  slack:\n"
	                                  "    accounts:\n"
	                                  "      - {id: one, bot_token: xoxb-1, signing_secret: "
	                                  "abcdefgh12345678}\n"
	                                  "      - id: two\n"
	                                  "        mode: socket\n"
	                                  "        bot_token: xoxb-2\n"
	                                  "        app_token: xapp-2\n"
	                                  "        reply_in_thread: never\n"
	                                  "        chunk_limit: 2000\n",
	                                  "t.yaml", "/tmp", &c, &e),
	                 SB_OK);
	sc = &c->channels.slack.slack;
	assert_int_equal(sc->n_accounts, 2);
	assert_string_equal(sc->accounts[0].api_base, "https://slack.com/api/");
	assert_int_equal(sc->accounts[0].chunk_limit, 4000);
	assert_int_equal(sc->accounts[0].mode, SLACK_MODE_EVENTS);
	assert_int_equal(sc->accounts[0].reply_in_thread, SLACK_THREAD_AUTO);
	assert_int_equal(sc->accounts[0].tolerance_ms, 300000);
	assert_int_equal(sc->accounts[1].mode, SLACK_MODE_SOCKET);
	assert_int_equal(sc->accounts[1].reply_in_thread, SLACK_THREAD_NEVER);
	assert_int_equal(sc->accounts[1].chunk_limit, 2000);
	assert_non_null(slack_config_find(sc, "two"));
	{
		char p[SLACK_PATH_MAX + 1];

		assert_string_equal(slack_events_path(&sc->accounts[0], p, sizeof p),
		                    "/slack/events/one");
	}
	config_unref(c);
	cfg_errors_free(&e);

	err = load_errors("agents: [{id: main}]\n"
	                  "channels:\n"
	                  "  slack:\n"
	                  "    accounts:\n"
	                  "      - {id: one, bot_token: xoxb-1}\n"
	                  "      - {id: two, mode: socket, bot_token: xoxb-2}\n");
	assert_non_null(err);
	assert_non_null(strstr(err, "t.yaml:5:9: channels.slack.accounts[0].signing_secret: mode "
	                            "events needs signing_secret"));
	assert_non_null(strstr(err, "channels.slack.accounts[1].app_token: mode socket needs "
	                            "app_token"));
	free(err);

	err = load_errors(
	    "agents: [{id: main}]\n"
	    "channels:\n"
	    "  slack:\n"
	    "    accounts:\n"
	    "      - {id: one, bot_token: xoxp-user, signing_secret: abcdefgh12345678}\n"
	    "      - {id: one, bot_token: xoxb-2, signing_secret: abcdefgh12345678, "
	    "events_path: /elsewhere}\n");
	assert_non_null(err);
	assert_non_null(strstr(err,
	                       "t.yaml:5:30: channels.slack.accounts[0].bot_token: a bot token "
	                       "starts with xoxb-"));
	assert_non_null(
	    strstr(err, "accounts[1].events_path: an events path must start with /slack/"));
	assert_non_null(strstr(err, "account \"one\" is defined twice"));
	free(err);

	err = load_errors("agents: [{id: main}]\n"
	                  "channels:\n"
	                  "  slack:\n"
	                  "    accounts:\n"
	                  "      - {id: a, mode: socket, bot_token: xoxb-1, app_token: xapp-same}\n"
	                  "      - {id: b, mode: socket, bot_token: xoxb-2, app_token: xapp-same, "
	                  "ping_interval: 10s, ping_timeout: 5s}\n");
	assert_non_null(err);
	assert_non_null(strstr(err, "accounts \"a\" and \"b\" use the same app_token"));
	assert_non_null(strstr(err, "ping_timeout must be longer than ping_interval"));
	/* Secrets never appear in errors. */
	assert_null(strstr(err, "xapp-same"));
	free(err);

	err = load_errors("agents: [{id: main}]\n"
	                  "channels:\n"
	                  "  slack:\n"
	                  "    accounts:\n"
	                  "      - {id: a, bot_token: xoxb-1, signing_secret: abcdefgh12345678, "
	                  "chunk_limit: 50, mode: carrier-pigeon, api_base: ftp://example.com}\n");
	assert_non_null(err);
	assert_non_null(strstr(err, "accounts[0].chunk_limit"));
	assert_non_null(strstr(err, "accounts[0].mode"));
	assert_non_null(strstr(err, "accounts[0].api_base: expected an http:// or https:// URL"));
	free(err);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_signature_vector), cmocka_unit_test(test_normalise_kinds),
	    cmocka_unit_test(test_normalise_drops),  cmocka_unit_test(test_dedupe_key_ts),
	    cmocka_unit_test(test_mrkdwn),           cmocka_unit_test(test_chunk),
	    cmocka_unit_test(test_config),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
