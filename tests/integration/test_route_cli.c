/*
 * test_route_cli.c - the real binary's routing and pairing verbs:
 * `switchboard route` (text and JSON), `switchboard bindings`, and
 * `switchboard pairing list|approve|deny`, with their usage errors.
 *
 * A pending pairing request is made the way the gateway will make it: this
 * process opens the same store (the library it links) and asks for a code;
 * the CLI then lists and approves it, and the store is asked again whether
 * the sender is allowed.
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
#include <uv.h>

#include "gateway/core/err.h"
#include "gateway/core/log.h"
#include "gateway/store/store.h"
#include "harness.h"

static const char config_yaml[] =
    "agents:\n"
    "  - {id: main, default: true}\n"
    "  - {id: work}\n"
    "bindings:\n"
    "  - agent: work\n"
    "    match: {channel: slack, team: T1, peer: {kind: channel, id: C999}}\n"
    "  - agent: work\n"
    "    match: {channel: slack, account: \"*\", peer: {kind: channel, id: C123}}\n"
    "    comment: the work channel\n"
    "  - agent: main\n"
    "    match: {channel: slack, team: T1}\n"
    "session:\n"
    "  dm_scope: per-channel-peer\n"
    "channels:\n"
    "  slack:\n"
    "    groups: [{id: C123}]\n"
    "  webhook:\n"
    "    groups: [{id: orders}]\n";

struct fx {
	char home[512];
	char db[600];
};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof *f);
	char path[700];

	assert_non_null(f);
	assert_int_equal(harness_tmpdir(f->home, sizeof f->home), 0);
	snprintf(path, sizeof path, "%s/switchboard.yaml", f->home);
	assert_int_equal(harness_write_file(path, config_yaml), 0);
	snprintf(f->db, sizeof f->db, "%s/state.db", f->home);
	log_configure(LOG_WARN, LOG_FORMAT_LOGFMT, NULL);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	harness_rmrf(f->home);
	free(f);
	return 0;
}

/* Runs the CLI; returns its exit code and its output in *out (free it). */
static int run(const struct fx *f, char **out, const char *const *args)
{
	struct buf b;
	int rc;

	buf_init(&b, 1 << 20);
	rc = harness_cli(f->home, &b, args);
	*out = buf_steal(&b);
	buf_free(&b);
	return rc;
}

static void expect(const struct fx *f, int code, const char *output, const char *const *args)
{
	char *out;
	int rc = run(f, &out, args);

	assert_string_equal(out, output);
	assert_int_equal(rc, code);
	free(out);
}

/* ---- the store, opened by this process ---- */

struct op {
	bool done;
	int rc;
	bool flag;
	char code[16];
};

static void pair_cb(void *ud, int rc, const struct store_pairing *p, bool created)
{
	struct op *o = ud;

	o->done = true;
	o->rc = rc;
	o->flag = created;
	if (p)
		snprintf(o->code, sizeof o->code, "%s", p->code);
}

static void allow_cb(void *ud, int rc, bool allowed)
{
	struct op *o = ud;

	o->done = true;
	o->rc = rc;
	o->flag = allowed;
}

enum store_q { Q_REQUEST, Q_ALLOWED };

/* One store operation on a private loop: a pairing request (the code
 * lands in o->code) or an allow check (o->flag). */
static struct op store_do(const struct fx *f, enum store_q q, const char *channel,
                          const char *sender)
{
	struct store_options opt = {.path = f->db, .busy_timeout_ms = 5000};
	struct store *st = NULL;
	struct op o = {0};
	uv_loop_t loop;

	assert_int_equal(uv_loop_init(&loop), 0);
	assert_int_equal(store_open(&st, &loop, &opt), SB_OK);
	if (q == Q_REQUEST)
		assert_int_equal(store_pairing_request(st, channel, "default", sender, pair_cb, &o),
		                 SB_OK);
	else
		assert_int_equal(store_allow_check(st, channel, "default", sender, allow_cb, &o),
		                 SB_OK);
	while (!o.done && uv_run(&loop, UV_RUN_ONCE))
		;
	store_close(st);
	uv_run(&loop, UV_RUN_DEFAULT);
	assert_int_equal(uv_loop_close(&loop), 0);
	assert_true(o.done);
	return o;
}

/* ---- tests ---- */

static void test_route_explains(void **state)
{
	struct fx *f = *state;
	const char *args[] = {"route",  "--channel",    "slack",    "--team", "T1",
	                      "--peer", "channel:C123", "--thread", "1699.1", "--sender",
	                      "U9",     "--mention",    NULL};

	expect(f, 0,
	       "message: channel slack, account default, team T1, peer channel:C123, thread "
	       "1699.1, sender U9, mentioned\n"
	       "agent:   work\n"
	       "session: agent:work:slack:channel:C123:thread:1699.1 (thread; reset none)\n"
	       "binding: bindings[1] at switchboard.yaml:7 (tier peer)\n"
	       "access:  allow: channel C123 allowed by channels.slack.groups[0], and the bot was "
	       "mentioned\n"
	       "tiers, most specific first:\n"
	       "  1. peer (channel:C123): match\n"
	       "       bindings[0] (switchboard.yaml:5) -> work: no, peer id C999 != C123\n"
	       "       bindings[1] (switchboard.yaml:7) -> work: yes\n"
	       "  2. parent-peer: not tried\n"
	       "  3. peer-wildcard (channel:*): not tried\n"
	       "  4. guild: not tried\n"
	       "  5. team (T1): not tried\n"
	       "  6. account (default): not tried\n"
	       "  7. channel (slack): not tried\n"
	       "  8. default: not tried\n",
	       args);
}

/* A webhook delivery addresses the bot (the channel marks every one as a
 * mention), so route predicts it without --mention: a group that requires
 * a mention lets it in, as the gateway does. */
static void test_route_webhook(void **state)
{
	struct fx *f = *state;
	const char *args[] = {"route", "--channel", "webhook", "--peer", "group:orders",
	                      "--sender", "ci", NULL};
	char *out;

	assert_int_equal(run(f, &out, args), 0);
	if (!strstr(out, "access:  allow: group orders allowed by channels.webhook.groups[0], and "
	                 "the bot was mentioned\n"))
		fail_msg("route for a webhook delivery:\n%s", out);
	free(out);
}

static void test_route_json(void **state)
{
	struct fx *f = *state;
	const char *args[] = {"route",    "--channel", "slack", "--team", "T1", "--peer",
	                      "group:G7", "--sender",  "U9",    "--json", NULL};
	json_error_t err;
	json_t *j;
	char *out;

	assert_int_equal(run(f, &out, args), 0);
	j = json_loads(out, 0, &err);
	if (!j)
		fail_msg("not JSON (%s): %s", err.text, out);
	assert_string_equal(json_string_value(json_object_get(j, "agent")), "main");
	assert_string_equal(json_string_value(json_object_get(j, "tier")), "team");
	assert_string_equal(json_string_value(json_object_get(j, "session_key")),
	                    "agent:main:slack:group:G7");
	assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "binding"), "line")),
	                 10);
	assert_string_equal(
	    json_string_value(json_object_get(json_object_get(j, "access"), "verdict")), "deny");
	assert_int_equal(json_array_size(json_object_get(j, "tiers")), 8);
	json_decref(j);
	free(out);
}

static void test_bindings_list(void **state)
{
	struct fx *f = *state;
	const char *args[] = {"bindings", NULL};
	const char *json[] = {"bindings", "--json", NULL};
	json_t *j;
	char *out;

	expect(f, 0,
	       "3 bindings in switchboard.yaml, most specific tier first, file order within a "
	       "tier:\n"
	       "peer (also tried against a thread's parent, as parent-peer)\n"
	       "  bindings[0]  switchboard.yaml:5  slack account=(default) peer=channel:C999 "
	       "team=T1  -> work\n"
	       "  bindings[1]  switchboard.yaml:7  slack account=* peer=channel:C123  -> work  "
	       "# the work channel\n"
	       "team\n"
	       "  bindings[2]  switchboard.yaml:10  slack account=(default) team=T1  -> main\n"
	       "default: main (marked default)\n",
	       args);
	assert_int_equal(run(f, &out, json), 0);
	j = json_loads(out, 0, NULL);
	assert_non_null(j);
	assert_int_equal(json_array_size(json_object_get(j, "bindings")), 3);
	json_decref(j);
	free(out);
}

static void test_usage_errors(void **state)
{
	struct fx *f = *state;
	const char *no_channel[] = {"route", "--sender", "U1", NULL};
	const char *bad_peer[] = {"route", "--channel", "slack", "--peer", "room:1", NULL};
	const char *no_peer[] = {"route", "--channel", "slack", NULL};
	const char *extra[] = {"bindings", "now", NULL};
	const char *approve_short[] = {"pairing", "approve", "telegram", NULL};
	const char *unknown_verb[] = {"pairing", "forget", NULL};
	const char *unknown_channel[] = {"pairing", "approve", "irc", "ABCDEFGH", NULL};
	const char *help[] = {"route", "--help", NULL};
	const char *pairing_help[] = {"pairing", "--help", NULL};
	char *out;

	assert_int_equal(run(f, &out, no_channel), 2);
	assert_non_null(strstr(out, "switchboard route: --channel is required\n\nusage: "));
	free(out);
	assert_int_equal(run(f, &out, bad_peer), 2);
	assert_string_equal(out, "switchboard route: --peer wants KIND:ID with KIND direct, "
	                         "group or channel, got \"room:1\"\n");
	free(out);
	assert_int_equal(run(f, &out, no_peer), 2);
	assert_non_null(strstr(out, "give --peer, or --sender"));
	free(out);
	assert_int_equal(run(f, &out, extra), 2);
	assert_non_null(strstr(out, "usage: switchboard bindings"));
	free(out);
	assert_int_equal(run(f, &out, approve_short), 2);
	assert_non_null(strstr(out, "usage: switchboard pairing list"));
	free(out);
	assert_int_equal(run(f, &out, unknown_verb), 2);
	assert_non_null(strstr(out, "unknown subcommand \"forget\""));
	free(out);
	assert_int_equal(run(f, &out, unknown_channel), 2);
	assert_non_null(strstr(out, "unknown channel \"irc\""));
	free(out);
	assert_int_equal(run(f, &out, help), 0);
	assert_non_null(strstr(out, "usage: switchboard route --channel C"));
	free(out);
	assert_int_equal(run(f, &out, pairing_help), 0);
	assert_non_null(strstr(out, "approve  lets the sender"));
	free(out);
}

static void test_bad_config_fails(void **state)
{
	struct fx *f = *state;
	const char *args[] = {"bindings", NULL};
	char path[700], *out;

	snprintf(path, sizeof path, "%s/switchboard.yaml", f->home);
	assert_int_equal(harness_write_file(path, "agents: [{id: main}]\n"
	                                          "bindings: [{agent: ghost, match: {channel: "
	                                          "slack}}]\n"),
	                 0);
	assert_int_equal(run(f, &out, args), 1);
	assert_non_null(strstr(out, "switchboard.yaml:2:20: bindings[0].agent: unknown agent "
	                            "\"ghost\" (agents: main)\n"));
	free(out);
}

static void test_pairing_flow(void **state)
{
	struct fx *f = *state;
	const char *list_all[] = {"pairing", "list", NULL};
	const char *list_slack[] = {"pairing", "list", "slack", NULL};
	const char *route_dm[] = {"route", "--channel", "telegram", "--sender", "123", NULL};
	const char *list_json[] = {"pairing", "list", "--json", NULL};
	char code[16], lower[16], *out, line[256];
	const char *approve[] = {"pairing", "approve", "telegram", lower, NULL};
	const char *deny[] = {"pairing", "deny", "telegram", code, NULL};
	const char *approve_again[] = {"pairing", "approve", "telegram", code, NULL};
	struct op o;
	json_t *j;

	expect(f, 0, "no pending pairing requests\n", list_all);

	/* The gateway's side: an unknown sender asks, and gets a code. */
	o = store_do(f, Q_REQUEST, "telegram", "123");
	assert_int_equal(o.rc, SB_OK);
	assert_true(o.flag);
	snprintf(code, sizeof code, "%s", o.code);
	for (size_t i = 0; i <= strlen(code); i++)
		lower[i] = (char)(code[i] >= 'A' && code[i] <= 'Z' ? code[i] + 32 : code[i]);

	assert_int_equal(run(f, &out, list_all), 0);
	snprintf(line, sizeof line, "%-10s %-12s %-20s %-9s %s\n", "telegram", "default", "123",
	         code, "60m");
	assert_non_null(strstr(out, "CHANNEL    ACCOUNT      SENDER               CODE      "
	                            "EXPIRES IN\n"));
	assert_non_null(strstr(out, line));
	free(out);
	expect(f, 0, "no pending pairing requests on slack\n", list_slack);
	assert_int_equal(run(f, &out, list_json), 0);
	j = json_loads(out, 0, NULL);
	assert_non_null(j);
	assert_string_equal(json_string_value(json_object_get(json_array_get(j, 0), "code")), code);
	json_decref(j);
	free(out);

	/* Before approval the DM gets a pairing code; after, it reaches the agent. */
	assert_int_equal(run(f, &out, route_dm), 0);
	assert_non_null(strstr(out, "access:  pairing: sender 123 is unknown"));
	free(out);
	expect(f, 0, "approved: telegram sender 123 (account default) may now talk to the bot\n",
	       approve);
	o = store_do(f, Q_ALLOWED, "telegram", "123");
	assert_int_equal(o.rc, SB_OK);
	assert_true(o.flag);
	assert_int_equal(run(f, &out, route_dm), 0);
	assert_non_null(strstr(out, "access:  allow: sender 123 was approved by pairing (telegram "
	                            "account default)\n"));
	free(out);
	expect(f, 0, "no pending pairing requests\n", list_all);

	/* Deny: the request goes, the sender stays out. */
	o = store_do(f, Q_REQUEST, "telegram", "456");
	snprintf(code, sizeof code, "%s", o.code);
	expect(f, 0,
	       "denied: the request of telegram sender 456 (account default) is removed; they may "
	       "ask again\n",
	       deny);
	o = store_do(f, Q_ALLOWED, "telegram", "456");
	assert_false(o.flag);
	snprintf(line, sizeof line,
	         "switchboard pairing: no pending request on telegram with code %s (codes expire "
	         "after an hour; see `switchboard pairing list`)\n",
	         code);
	expect(f, 1, line, approve_again);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_route_explains, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_route_webhook, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_route_json, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_bindings_list, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_usage_errors, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_bad_config_fails, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_pairing_flow, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
