/*
 * test_bindings.c - the routing table (bindings/): every tier, wildcards,
 * thread inheritance, ties, fail-closed, session keys for every dm_scope,
 * identity links, resets and reset triggers, DM and group policies, mention
 * rules, loop prevention, shadowing, load-time validation, and the explain
 * and list output (asserted exactly). A randomised test compares the
 * indexed lookup with a plain scan of the rules.
 *
 * Tables are built the way the gateway builds them: YAML through
 * config_load_text, then config_bindings_table.
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

#include "bindings/bindings.h"
#include "gateway/config/config.h"
#include "gateway/core/buf.h"
#include "gateway/core/err.h"

/* ---- helpers ---- */

static char *errors_text(const struct cfg_errors *e)
{
	char *s = NULL;
	size_t n = 0;
	FILE *f = open_memstream(&s, &n);

	assert_non_null(f);
	cfg_errors_print(e, f);
	assert_int_equal(fclose(f), 0);
	return s;
}

static struct bindings_table *compile(const char *yaml)
{
	struct bindings_table *t = NULL;
	struct config *c = NULL;
	struct cfg_errors e;
	int rc;

	cfg_errors_init(&e);
	rc = config_load_text(yaml, "t.yaml", "/tmp", &c, &e);
	if (rc) {
		char *txt = errors_text(&e);

		fail_msg("config rc %d:\n%s", rc, txt);
	}
	cfg_errors_free(&e);
	assert_int_equal(config_bindings_table(c, &t), SB_OK);
	config_unref(c); /* the table keeps nothing of the snapshot */
	assert_non_null(t);
	return t;
}

/* Loads yaml expecting it to fail with exactly these printed errors. */
static void expect_errors(const char *yaml, const char *expected)
{
	struct config *c = NULL;
	struct cfg_errors e;
	char *txt;
	int rc;

	cfg_errors_init(&e);
	rc = config_load_text(yaml, "t.yaml", "/tmp", &c, &e);
	txt = errors_text(&e);
	assert_string_equal(txt, expected);
	assert_int_equal(rc, SB_ERR_CONFIG);
	assert_null(c);
	free(txt);
	cfg_errors_free(&e);
}

/* An envelope built from a compact description. */
struct msg {
	const char *channel, *account;
	enum envelope_peer_kind kind;
	const char *peer, *parent, *thread, *guild, *team, *sender, *text;
	bool mentioned;
	bool owner; /* the sender is the operator (bindings_input.owner) */
};

static struct envelope env_of(const struct msg *m)
{
	struct envelope e = {0};

	e.channel = m->channel;
	e.account = m->account;
	e.peer_kind = m->kind;
	e.peer_id = m->peer;
	e.parent_id = m->parent;
	e.thread_id = m->thread;
	e.guild_id = m->guild;
	e.team_id = m->team;
	e.sender_id = m->sender;
	e.text = m->text;
	e.mentioned = m->mentioned;
	return e;
}

static struct bindings_decision route(const struct bindings_table *t, const struct msg *m)
{
	struct envelope e = env_of(m);
	struct bindings_input in = {.env = &e, .owner = m->owner};
	struct bindings_decision d;

	assert_int_equal(bindings_route(t, &in, &d), SB_OK);
	return d;
}

static char *explain(const struct bindings_table *t, const struct bindings_input *in)
{
	struct buf b;

	buf_init(&b, 1 << 20);
	assert_int_equal(bindings_explain(t, in, &b), SB_OK);
	return buf_steal(&b);
}

#define DM(ch, who)                                                                                \
	((struct msg){                                                                             \
	    .channel = (ch), .kind = ENVELOPE_PEER_DIRECT, .peer = (who), .sender = (who)})

/* ---- tiers ---- */

static const char tiers_yaml[] =
    "agents:\n"
    "  - {id: main, default: true}\n"
    "  - {id: peer1}\n"
    "  - {id: wild}\n"
    "  - {id: guild}\n"
    "  - {id: team}\n"
    "  - {id: acct}\n"
    "  - {id: chan}\n"
    "  - {id: peerg}\n"
    "bindings:\n"
    "  - agent: peer1\n" /* 0 */
    "    match: {channel: slack, peer: {kind: channel, id: C1}}\n"
    "  - agent: wild\n" /* 1 */
    "    match: {channel: slack, peer: {kind: channel, id: \"*\"}}\n"
    "  - agent: guild\n" /* 2 */
    "    match: {channel: slack, guild: G1}\n"
    "  - agent: team\n" /* 3 */
    "    match: {channel: slack, team: T1}\n"
    "  - agent: acct\n" /* 4 */
    "    match: {channel: slack, account: A2}\n"
    "  - agent: chan\n" /* 5 */
    "    match: {channel: slack, account: \"*\"}\n"
    "  - agent: peerg\n" /* 6 */
    "    match: {channel: slack, peer: {kind: group, id: G9}, team: T2}\n";

struct tier_case {
	struct msg m;
	const char *agent;
	enum bindings_tier tier;
	size_t binding;
	int line;
};

static void test_every_tier(void **state)
{
	static const struct tier_case cases[] = {
	    /* exact peer */
	    {{"slack", NULL, ENVELOPE_PEER_CHANNEL, "C1", .sender = "U1"},
	     "peer1",
	     BINDINGS_TIER_PEER,
	     0,
	     11},
	    /* another channel of the same kind: the wildcard */
	    {{"slack", NULL, ENVELOPE_PEER_CHANNEL, "C2", .sender = "U1"},
	     "wild",
	     BINDINGS_TIER_PEER_WILDCARD,
	     1,
	     13},
	    /* a thread in C1 (its own peer id) inherits C1's binding */
	    {{"slack", NULL, ENVELOPE_PEER_CHANNEL, "TH1", .parent = "C1", .sender = "U1"},
	     "peer1",
	     BINDINGS_TIER_PARENT,
	     0,
	     11},
	    /* groups are not channels: the channel wildcard does not apply */
	    {{"slack", NULL, ENVELOPE_PEER_GROUP, "X", .guild = "G1", .team = "T1"},
	     "guild",
	     BINDINGS_TIER_GUILD,
	     2,
	     15},
	    {{"slack", NULL, ENVELOPE_PEER_GROUP, "X", .team = "T1"},
	     "team",
	     BINDINGS_TIER_TEAM,
	     3,
	     17},
	    {{"slack", "A2", ENVELOPE_PEER_GROUP, "X", .parent = NULL},
	     "acct",
	     BINDINGS_TIER_ACCOUNT,
	     4,
	     19},
	    {{"slack", "A3", ENVELOPE_PEER_GROUP, "X", .parent = NULL},
	     "chan",
	     BINDINGS_TIER_CHANNEL,
	     5,
	     21},
	    {{"slack", NULL, ENVELOPE_PEER_DIRECT, "U1", .sender = "U1"},
	     "chan",
	     BINDINGS_TIER_CHANNEL,
	     5,
	     21},
	    /* every field given must match: team T3 misses binding 6 */
	    {{"slack", NULL, ENVELOPE_PEER_GROUP, "G9", .team = "T2"},
	     "peerg",
	     BINDINGS_TIER_PEER,
	     6,
	     23},
	    {{"slack", NULL, ENVELOPE_PEER_GROUP, "G9", .team = "T3"},
	     "chan",
	     BINDINGS_TIER_CHANNEL,
	     5,
	     21},
	    /* nothing for telegram: the default agent */
	    {{"telegram", NULL, ENVELOPE_PEER_DIRECT, "7", .sender = "7"},
	     "main",
	     BINDINGS_TIER_DEFAULT,
	     BINDINGS_NONE,
	     0},
	    /* the account "" is the default account */
	    {{"slack", "", ENVELOPE_PEER_CHANNEL, "C1", .parent = NULL},
	     "peer1",
	     BINDINGS_TIER_PEER,
	     0,
	     11},
	    /* the exact peer beats its parent */
	    {{"slack", NULL, ENVELOPE_PEER_CHANNEL, "C1", .parent = "C2"},
	     "peer1",
	     BINDINGS_TIER_PEER,
	     0,
	     11},
	};
	struct bindings_table *t = compile(tiers_yaml);

	(void)state;
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		struct bindings_decision d = route(t, &cases[i].m);

		print_message("case %zu\n", i);
		assert_string_equal(d.agent_id, cases[i].agent);
		assert_int_equal(d.tier, cases[i].tier);
		assert_int_equal(d.binding, cases[i].binding);
		assert_int_equal(d.line, cases[i].line);
	}
	bindings_table_free(t);
}

static void test_parent_kind(void **state)
{
	struct bindings_table *t = compile(tiers_yaml);
	struct envelope e = {.channel = "slack",
	                     .peer_kind = ENVELOPE_PEER_GROUP,
	                     .peer_id = "TH9",
	                     .parent_id = "C1"};
	struct bindings_input in = {.env = &e};
	struct bindings_decision d;

	(void)state;
	/* By default the parent has the peer's kind: group C1 has no binding. */
	assert_int_equal(bindings_route(t, &in, &d), SB_OK);
	assert_string_equal(d.agent_id, "chan");
	/* Told the parent is a channel, the thread inherits channel C1's. */
	in.parent_kind_set = true;
	in.parent_kind = ENVELOPE_PEER_CHANNEL;
	assert_int_equal(bindings_route(t, &in, &d), SB_OK);
	assert_string_equal(d.agent_id, "peer1");
	assert_int_equal(d.tier, BINDINGS_TIER_PARENT);
	bindings_table_free(t);
}

static void test_ties_first_in_file(void **state)
{
	struct bindings_table *t = compile("agents: [{id: a}, {id: b}, {id: c}]\n"
	                                   "bindings:\n"
	                                   "  - agent: a\n"
	                                   "    match: {channel: slack, account: \"*\", "
	                                   "peer: {kind: channel, id: C1}}\n"
	                                   "  - agent: b\n"
	                                   "    match: {channel: slack, peer: {kind: channel, "
	                                   "id: C1}}\n"
	                                   "  - agent: c\n"
	                                   "    match: {channel: slack, team: T1, peer: {kind: "
	                                   "channel, id: C2}}\n"
	                                   "  - agent: a\n"
	                                   "    match: {channel: slack, peer: {kind: channel, "
	                                   "id: C2}}\n"
	                                   "  - agent: b\n"
	                                   "    match: {channel: slack, account: A, peer: {kind: "
	                                   "channel, id: C3}}\n"
	                                   "  - agent: c\n"
	                                   "    match: {channel: slack, account: \"*\", peer: "
	                                   "{kind: channel, id: C3}}\n");
	struct bindings_decision d;

	(void)state;
	/* Both 0 ("*") and 1 (default account) match: the first in the file. */
	d = route(t, &(struct msg){"slack", NULL, ENVELOPE_PEER_CHANNEL, "C1", .parent = NULL});
	assert_string_equal(d.agent_id, "a");
	assert_int_equal(d.binding, 0);
	/* 2 needs team T1; with it, 2 is first; without, 3. */
	d = route(t, &(struct msg){"slack", NULL, ENVELOPE_PEER_CHANNEL, "C2", .team = "T1"});
	assert_int_equal(d.binding, 2);
	d = route(t, &(struct msg){"slack", NULL, ENVELOPE_PEER_CHANNEL, "C2", .team = "T9"});
	assert_int_equal(d.binding, 3);
	/* Account A: 4 and 5 both match, 4 first; another account only 5. */
	d = route(t, &(struct msg){"slack", "A", ENVELOPE_PEER_CHANNEL, "C3", .parent = NULL});
	assert_int_equal(d.binding, 4);
	d = route(t, &(struct msg){"slack", "B", ENVELOPE_PEER_CHANNEL, "C3", .parent = NULL});
	assert_int_equal(d.binding, 5);
	bindings_table_free(t);
}

static void test_fail_closed(void **state)
{
	struct bindings_table *t = compile("agents: [{id: a}, {id: b}]\n"
	                                   "bindings:\n"
	                                   "  - {agent: b, match: {channel: slack}}\n");
	struct bindings_decision d;

	(void)state;
	d = route(t, &DM("telegram", "1"));
	assert_null(d.agent_id);
	assert_int_equal(d.tier, BINDINGS_TIER_NONE);
	assert_int_equal(d.binding, BINDINGS_NONE);
	assert_int_equal(d.verdict, BINDINGS_DENY);
	assert_string_equal(d.session_key, "");
	assert_string_equal(d.reason, "not routed: no binding matches and none of the 2 agents "
	                              "is marked default (fail closed)");
	d = route(t, &DM("slack", "U1"));
	assert_string_equal(d.agent_id, "b");
	bindings_table_free(t);

	/* One agent, not marked: it is the default anyway. */
	t = compile("agents: [{id: solo}]\n");
	d = route(t, &DM("telegram", "1"));
	assert_string_equal(d.agent_id, "solo");
	assert_int_equal(d.tier, BINDINGS_TIER_DEFAULT);
	bindings_table_free(t);
}

static void test_bad_input(void **state)
{
	struct bindings_table *t = compile("agents: [{id: a}]\n");
	struct envelope e = {.peer_kind = ENVELOPE_PEER_GROUP};
	struct bindings_input in = {.env = &e};
	struct bindings_decision d;
	char key[16];

	(void)state;
	assert_int_equal(bindings_route(t, &in, &d), SB_ERR_INVAL); /* no channel */
	e.channel = "slack";
	assert_int_equal(bindings_route(t, &in, &d), SB_ERR_INVAL); /* no peer */
	e.peer_id = "C1";
	assert_int_equal(bindings_route(t, &in, &d), SB_OK);
	assert_int_equal(bindings_session_key(t, "a", &e, key, sizeof key), SB_ERR_TOOBIG);
	assert_string_equal(key, "");
	assert_int_equal(bindings_route(NULL, &in, &d), SB_ERR_INVAL);
	assert_int_equal(bindings_route(t, NULL, &d), SB_ERR_INVAL);
	bindings_table_free(t);
	bindings_table_free(NULL);
}

/* ---- session keys ---- */

struct key_case {
	const char *scope;
	struct msg m;
	const char *key;
};

static void test_session_keys(void **state)
{
	static const struct key_case cases[] = {
	    {"main",
	     {"slack", "A1", ENVELOPE_PEER_DIRECT, "U1", .sender = "U1", .owner = true},
	     "agent:main:main"},
	    /* the main session is the operator's: anyone else's direct
	     * messages are keyed per channel and peer under dm_scope main */
	    {"main",
	     {"slack", "A1", ENVELOPE_PEER_DIRECT, "U1", .sender = "U1"},
	     "agent:main:slack:direct:U1"},
	    {"main",
	     {"webhook", NULL, ENVELOPE_PEER_DIRECT, "ci", .sender = "ci"},
	     "agent:main:webhook:direct:ci"},
	    {"per-peer",
	     {"slack", "A1", ENVELOPE_PEER_DIRECT, "U1", .parent = NULL},
	     "agent:main:direct:U1"},
	    {"per-channel-peer",
	     {"slack", "A1", ENVELOPE_PEER_DIRECT, "U1", .parent = NULL},
	     "agent:main:slack:direct:U1"},
	    {"per-account-channel-peer",
	     {"slack", "A1", ENVELOPE_PEER_DIRECT, "U1", .parent = NULL},
	     "agent:main:slack:A1:direct:U1"},
	    {"per-account-channel-peer",
	     {"slack", NULL, ENVELOPE_PEER_DIRECT, "U1", .parent = NULL},
	     "agent:main:slack:default:direct:U1"},
	    /* identity links: one person across channels */
	    {"per-peer",
	     {"slack", NULL, ENVELOPE_PEER_DIRECT, "U456", .parent = NULL},
	     "agent:main:direct:alice"},
	    {"per-peer",
	     {"telegram", NULL, ENVELOPE_PEER_DIRECT, "123", .parent = NULL},
	     "agent:main:direct:alice"},
	    {"per-channel-peer",
	     {"telegram", NULL, ENVELOPE_PEER_DIRECT, "123", .parent = NULL},
	     "agent:main:telegram:direct:alice"},
	    /* the link is per channel: slack:123 is someone else */
	    {"per-peer",
	     {"slack", NULL, ENVELOPE_PEER_DIRECT, "123", .parent = NULL},
	     "agent:main:direct:123"},
	    {"main",
	     {"telegram", NULL, ENVELOPE_PEER_DIRECT, "123", .owner = true},
	     "agent:main:main"},
	    /* a direct message without peer id: the sender's */
	    {"per-peer",
	     {"slack", NULL, ENVELOPE_PEER_DIRECT, NULL, .sender = "U7"},
	     "agent:main:direct:U7"},
	    /* groups and channels ignore dm_scope */
	    {"per-peer",
	     {"telegram", NULL, ENVELOPE_PEER_GROUP, "-100", .sender = "1"},
	     "agent:main:telegram:group:-100"},
	    {"main",
	     {"slack", "A1", ENVELOPE_PEER_CHANNEL, "C1", .parent = NULL},
	     "agent:main:slack:channel:C1"},
	    /* threads; telegram's are forum topics */
	    {"main",
	     {"slack", NULL, ENVELOPE_PEER_CHANNEL, "C1", .thread = "1699.1"},
	     "agent:main:slack:channel:C1:thread:1699.1"},
	    {"main",
	     {"telegram", NULL, ENVELOPE_PEER_GROUP, "-100", .thread = "42"},
	     "agent:main:telegram:group:-100:topic:42"},
	    {"per-channel-peer",
	     {"slack", NULL, ENVELOPE_PEER_DIRECT, "U1", .thread = "17.5"},
	     "agent:main:slack:direct:U1:thread:17.5"},
	    {"main",
	     {"slack", NULL, ENVELOPE_PEER_DIRECT, "U1", .thread = "", .owner = true},
	     "agent:main:main"},
	};

	(void)state;
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		char yaml[512];
		struct bindings_table *t;
		struct bindings_decision d;

		snprintf(yaml, sizeof yaml,
		         "agents: [{id: main}]\n"
		         "session:\n"
		         "  dm_scope: %s\n"
		         "  identity_links:\n"
		         "    - {canonical: alice, ids: [\"telegram:123\", \"slack:U456\"]}\n",
		         cases[i].scope);
		t = compile(yaml);
		d = route(t, &cases[i].m);
		print_message("case %zu\n", i);
		assert_string_equal(d.session_key, cases[i].key);
		bindings_table_free(t);
	}
}

/* ---- resets ---- */

#define H (3600LL * 1000)
#define M (60LL * 1000)
/* 2026-01-10 00:00:00 UTC */
#define DAY0 1768003200000LL

static void test_reset_policies(void **state)
{
	struct session_reset_config daily = {.mode = SESSION_RESET_DAILY, .at_hour = 4};
	struct session_reset_config idle = {.mode = SESSION_RESET_IDLE, .idle_minutes = 30};
	struct session_reset_config none = {.mode = SESSION_RESET_NONE, .at_hour = 4};

	(void)state;
	/* daily at 04:00 UTC: 03:59 -> 04:01 crosses it; 04:01 -> 23:00 not */
	assert_true(
	    bindings_session_should_reset(&daily, DAY0 + 3 * H + 59 * M, DAY0 + 4 * H + M, 0));
	assert_false(bindings_session_should_reset(&daily, DAY0 + 4 * H + M, DAY0 + 23 * H, 0));
	/* exactly at the boundary: the last activity at 04:00:00 is after it */
	assert_false(bindings_session_should_reset(&daily, DAY0 + 4 * H, DAY0 + 5 * H, 0));
	assert_true(bindings_session_should_reset(&daily, DAY0 + 4 * H - 1, DAY0 + 4 * H, 0));
	/* 23:00 -> 02:00 the next day: 04:00 not passed yet */
	assert_false(bindings_session_should_reset(&daily, DAY0 + 23 * H, DAY0 + 26 * H, 0));
	/* two days later: reset */
	assert_true(bindings_session_should_reset(&daily, DAY0 + 5 * H, DAY0 + 53 * H, 0));
	/* local time UTC+2: 04:00 local is 02:00 UTC */
	assert_true(
	    bindings_session_should_reset(&daily, DAY0 + H + 59 * M, DAY0 + 2 * H + M, 2 * 3600));
	assert_false(bindings_session_should_reset(&daily, DAY0 + H + 59 * M, DAY0 + 2 * H + M, 0));
	/* UTC-5: 04:00 local is 09:00 UTC */
	assert_true(
	    bindings_session_should_reset(&daily, DAY0 + 8 * H, DAY0 + 9 * H + M, -5 * 3600));
	assert_false(bindings_session_should_reset(&daily, DAY0 + 3 * H, DAY0 + 8 * H, -5 * 3600));
	/* idle 30 minutes */
	assert_false(bindings_session_should_reset(&idle, DAY0, DAY0 + 29 * M, 0));
	assert_true(bindings_session_should_reset(&idle, DAY0, DAY0 + 30 * M, 0));
	/* none, no session yet, clock going back */
	assert_false(bindings_session_should_reset(&none, DAY0, DAY0 + 400 * H, 0));
	assert_false(bindings_session_should_reset(&idle, 0, DAY0, 0));
	assert_false(bindings_session_should_reset(&idle, DAY0, DAY0 - H, 0));
	assert_false(bindings_session_should_reset(NULL, DAY0, DAY0 + H, 0));
}

static void test_reset_by_type(void **state)
{
	struct bindings_table *t = compile("agents: [{id: main}]\n"
	                                   "session:\n"
	                                   "  reset: {mode: daily, at_hour: 6}\n"
	                                   "  reset_by_type:\n"
	                                   "    thread: {mode: idle, idle_minutes: 15}\n"
	                                   "    group: {mode: none}\n");
	struct bindings_decision d;

	(void)state;
	d = route(t, &DM("slack", "U1"));
	assert_int_equal(d.session_type, BINDINGS_SESSION_DIRECT);
	assert_int_equal(d.reset->mode, SESSION_RESET_DAILY);
	assert_int_equal(d.reset->at_hour, 6);
	d = route(t, &(struct msg){"slack", NULL, ENVELOPE_PEER_CHANNEL, "C1", .parent = NULL});
	assert_int_equal(d.session_type, BINDINGS_SESSION_GROUP);
	assert_int_equal(d.reset->mode, SESSION_RESET_NONE);
	d = route(t, &(struct msg){"slack", NULL, ENVELOPE_PEER_CHANNEL, "C1", .thread = "9"});
	assert_int_equal(d.session_type, BINDINGS_SESSION_THREAD);
	assert_int_equal(d.reset->mode, SESSION_RESET_IDLE);
	assert_int_equal(d.reset->idle_minutes, 15);
	bindings_table_free(t);

	/* Nothing configured: none for every type. */
	t = compile("agents: [{id: main}]\n");
	d = route(t, &(struct msg){"slack", NULL, ENVELOPE_PEER_CHANNEL, "C1", .thread = "9"});
	assert_int_equal(d.reset->mode, SESSION_RESET_NONE);
	bindings_table_free(t);
}

static void test_reset_triggers(void **state)
{
	struct bindings_table *t = compile("agents: [{id: main}]\n");
	const char *rest = NULL;
	struct bindings_decision d;

	(void)state;
	assert_true(bindings_reset_trigger(t, "/new", &rest));
	assert_string_equal(rest, "");
	assert_true(bindings_reset_trigger(t, "  /reset  let us start over", &rest));
	assert_string_equal(rest, "let us start over");
	assert_true(bindings_reset_trigger(t, "/new@switchboard_bot", &rest));
	assert_string_equal(rest, "");
	assert_true(bindings_reset_trigger(t, "/NEW\nhello", &rest));
	assert_string_equal(rest, "hello");
	assert_false(bindings_reset_trigger(t, "/newish", NULL));
	assert_false(bindings_reset_trigger(t, "please /new", NULL));
	assert_false(bindings_reset_trigger(t, "", NULL));
	assert_false(bindings_reset_trigger(t, NULL, NULL));
	d = route(t, &(struct msg){"slack", NULL, ENVELOPE_PEER_DIRECT, "U1", .text = "/reset"});
	assert_true(d.reset_trigger);
	d = route(t, &(struct msg){"slack", NULL, ENVELOPE_PEER_DIRECT, "U1", .text = "hi"});
	assert_false(d.reset_trigger);
	bindings_table_free(t);

	t = compile("agents: [{id: main}]\nsession: {reset_triggers: [\"!fresh\"]}\n");
	assert_true(bindings_reset_trigger(t, "!fresh", NULL));
	assert_false(bindings_reset_trigger(t, "/new", NULL));
	bindings_table_free(t);

	t = compile("agents: [{id: main}]\nsession: {reset_triggers: []}\n");
	assert_false(bindings_reset_trigger(t, "/new", NULL));
	bindings_table_free(t);
}

/* ---- access ---- */

static bool approve_u9(void *ud, const char *channel, const char *account, const char *sender)
{
	int *calls = ud;

	(*calls)++;
	assert_string_equal(account, "default");
	return strcmp(channel, "slack") == 0 && strcmp(sender, "U9") == 0;
}

struct access_case {
	const char *policy_yaml; /* the channels.slack section */
	struct msg m;
	bool from_bot, from_self;
	enum bindings_verdict verdict;
	const char *reason;
};

static void test_access(void **state)
{
	static const struct access_case cases[] = {
	    /* ---- DMs ---- */
	    {"{}", DM("slack", "U1"), false, false, BINDINGS_PAIRING,
	     "sender U1 is unknown: they get a pairing code for the operator to approve "
	     "(dm_policy pairing)"},
	    {"{}", DM("slack", "U9"), false, false, BINDINGS_ALLOW,
	     "sender U9 was approved by pairing (slack account default)"},
	    {"{allow_from: [U1]}", DM("slack", "U1"), false, false, BINDINGS_ALLOW,
	     "sender U1 is in channels.slack.allow_from"},
	    {"{allow_from: [\"slack:U1\"]}", DM("slack", "U1"), false, false, BINDINGS_ALLOW,
	     "sender U1 is in channels.slack.allow_from"},
	    {"{dm_policy: allowlist, allow_from: [U1]}", DM("slack", "U2"), false, false,
	     BINDINGS_DENY,
	     "sender U2 is neither in channels.slack.allow_from nor approved (dm_policy "
	     "allowlist)"},
	    {"{dm_policy: allowlist}", DM("slack", "U9"), false, false, BINDINGS_ALLOW,
	     "sender U9 was approved by pairing (slack account default)"},
	    {"{dm_policy: open, allow_from: [\"*\"]}", DM("slack", "U2"), false, false,
	     BINDINGS_ALLOW, "anyone may write (channels.slack.dm_policy open)"},
	    {"{dm_policy: disabled, allow_from: [U1]}", DM("slack", "U1"), false, false,
	     BINDINGS_DENY, "direct messages are off (channels.slack.dm_policy disabled)"},
	    {"{}",
	     {"slack", NULL, ENVELOPE_PEER_DIRECT, "U1", .parent = NULL},
	     false,
	     false,
	     BINDINGS_DENY,
	     "the message has no sender id to check"},
	    /* ---- groups ---- */
	    {"{group_policy: disabled, groups: [{id: C1}]}",
	     {"slack", NULL, ENVELOPE_PEER_CHANNEL, "C1", .sender = "U1", .mentioned = true},
	     false,
	     false,
	     BINDINGS_DENY,
	     "groups are off (channels.slack.group_policy disabled)"},
	    {"{groups: [{id: C1}]}",
	     {"slack", NULL, ENVELOPE_PEER_CHANNEL, "C2", .sender = "U1", .mentioned = true},
	     false,
	     false,
	     BINDINGS_DENY,
	     "channel C2 is not in channels.slack.groups (group_policy allowlist)"},
	    {"{}",
	     {"slack", NULL, ENVELOPE_PEER_GROUP, "G1", .sender = "U1", .mentioned = true},
	     false,
	     false,
	     BINDINGS_DENY,
	     "group G1 is not in channels.slack.groups (group_policy allowlist)"},
	    {"{groups: [{id: C0}, {id: C1}]}",
	     {"slack", NULL, ENVELOPE_PEER_CHANNEL, "C1", .sender = "U1"},
	     false,
	     false,
	     BINDINGS_MENTION_REQUIRED,
	     "channels.slack.groups[1] requires a mention and the message has none (no native "
	     "mention, reply to the bot or mention pattern match)"},
	    {"{groups: [{id: C1}]}",
	     {"slack", NULL, ENVELOPE_PEER_CHANNEL, "C1", .sender = "U1", .mentioned = true},
	     false,
	     false,
	     BINDINGS_ALLOW,
	     "channel C1 allowed by channels.slack.groups[0], and the bot was mentioned"},
	    {"{groups: [{id: C1}], mention_patterns: [\"\\\\bjarvis\\\\b\"]}",
	     {"slack", NULL, ENVELOPE_PEER_CHANNEL, "C1", .sender = "U1", .text = "hey Jarvis!"},
	     false,
	     false,
	     BINDINGS_ALLOW,
	     "channel C1 allowed by channels.slack.groups[0], and mention pattern "
	     "\"\\bjarvis\\b\" matched"},
	    {"{groups: [{id: C1}], mention_patterns: [\"\\\\bjarvis\\\\b\"]}",
	     {"slack", NULL, ENVELOPE_PEER_CHANNEL, "C1", .sender = "U1", .text = "jarvisian"},
	     false,
	     false,
	     BINDINGS_MENTION_REQUIRED,
	     "channels.slack.groups[0] requires a mention and the message has none (no native "
	     "mention, reply to the bot or mention pattern match)"},
	    /* UTF-8 aware: \\b and case-folding know non-ASCII letters. */
	    {"{groups: [{id: C1}], mention_patterns: [\"\\\\bджарвис\\\\b\"]}",
	     {"slack", NULL, ENVELOPE_PEER_CHANNEL, "C1", .sender = "U1",
	      .text = "Привет, ДЖАРВИС!"},
	     false,
	     false,
	     BINDINGS_ALLOW,
	     "channel C1 allowed by channels.slack.groups[0], and mention pattern "
	     "\"\\bджарвис\\b\" matched"},
	    {"{groups: [{id: C1}], mention_patterns: [\"\\\\bджарвис\\\\b\"]}",
	     {"slack", NULL, ENVELOPE_PEER_CHANNEL, "C1", .sender = "U1", .text = "джарвисов"},
	     false,
	     false,
	     BINDINGS_MENTION_REQUIRED,
	     "channels.slack.groups[0] requires a mention and the message has none (no native "
	     "mention, reply to the bot or mention pattern match)"},
	    /* Text that is not UTF-8 is still searched. */
	    {"{groups: [{id: C1}], mention_patterns: [\"\\\\bjarvis\\\\b\"]}",
	     {"slack", NULL, ENVELOPE_PEER_CHANNEL, "C1", .sender = "U1",
	      .text = "\xff\xfe\xc3 hey jarvis"},
	     false,
	     false,
	     BINDINGS_ALLOW,
	     "channel C1 allowed by channels.slack.groups[0], and mention pattern "
	     "\"\\bjarvis\\b\" matched"},
	    {"{groups: [{id: C1, require_mention: false}]}",
	     {"slack", NULL, ENVELOPE_PEER_CHANNEL, "C1", .sender = "U1"},
	     false,
	     false,
	     BINDINGS_ALLOW,
	     "channel C1 allowed by channels.slack.groups[0], no mention required"},
	    {"{groups: [{id: C1, allow_from: [U1]}]}",
	     {"slack", NULL, ENVELOPE_PEER_CHANNEL, "C1", .sender = "U2", .mentioned = true},
	     false,
	     false,
	     BINDINGS_DENY,
	     "sender U2 is not in channels.slack.groups[0].allow_from"},
	    {"{groups: [{id: C1, allow_from: [U1, U2]}]}",
	     {"slack", NULL, ENVELOPE_PEER_CHANNEL, "C1", .sender = "U2", .mentioned = true},
	     false,
	     false,
	     BINDINGS_ALLOW,
	     "channel C1 allowed by channels.slack.groups[0], and the bot was mentioned"},
	    {"{groups: [{id: \"*\", require_mention: false}, {id: C1}]}",
	     {"slack", NULL, ENVELOPE_PEER_CHANNEL, "C7", .sender = "U1"},
	     false,
	     false,
	     BINDINGS_ALLOW,
	     "channel C7 allowed by channels.slack.groups[0], no mention required"},
	    {"{groups: [{id: \"*\", require_mention: false}, {id: C1}]}",
	     {"slack", NULL, ENVELOPE_PEER_CHANNEL, "C1", .sender = "U1"},
	     false,
	     false,
	     BINDINGS_MENTION_REQUIRED,
	     "channels.slack.groups[1] requires a mention and the message has none (no native "
	     "mention, reply to the bot or mention pattern match)"},
	    {"{group_policy: open}",
	     {"slack", NULL, ENVELOPE_PEER_CHANNEL, "C5", .sender = "U1"},
	     false,
	     false,
	     BINDINGS_MENTION_REQUIRED,
	     "channels.slack.group_policy open requires a mention and the message has none (no "
	     "native mention, reply to the bot or mention pattern match)"},
	    {"{group_policy: open}",
	     {"slack", NULL, ENVELOPE_PEER_CHANNEL, "C5", .sender = "U1", .mentioned = true},
	     false,
	     false,
	     BINDINGS_ALLOW,
	     "channel C5 allowed by channels.slack.group_policy open, and the bot was mentioned"},
	    /* a thread whose peer is its own id: the parent's group entry applies */
	    {"{groups: [{id: C1, require_mention: false}]}",
	     {"slack", NULL, ENVELOPE_PEER_CHANNEL, "TH1", .parent = "C1", .sender = "U1"},
	     false,
	     false,
	     BINDINGS_ALLOW,
	     "channel TH1 allowed by channels.slack.groups[0], no mention required"},
	    /* ---- loop prevention ---- */
	    {"{dm_policy: open, allow_from: [\"*\"]}", DM("slack", "B1"), true, false,
	     BINDINGS_DROP,
	     "the sender is a bot and channels.slack.allow_bots is false (loop prevention)"},
	    {"{dm_policy: open, allow_from: [\"*\"], allow_bots: true}", DM("slack", "B1"), true,
	     false, BINDINGS_ALLOW, "anyone may write (channels.slack.dm_policy open)"},
	    {"{dm_policy: open, allow_from: [\"*\"], allow_bots: true}", DM("slack", "ME"), false,
	     true, BINDINGS_DROP, "the bot's own message (loop prevention)"},
	};

	(void)state;
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		char yaml[512];
		struct bindings_table *t;
		struct envelope e = env_of(&cases[i].m);
		int calls = 0;
		struct bindings_input in = {.env = &e,
		                            .sender_is_bot = cases[i].from_bot,
		                            .sender_is_self = cases[i].from_self,
		                            .approved = approve_u9,
		                            .approved_ud = &calls};
		struct bindings_decision d;

		snprintf(yaml, sizeof yaml, "agents: [{id: main}]\nchannels:\n  slack: %s\n",
		         cases[i].policy_yaml);
		t = compile(yaml);
		print_message("case %zu\n", i);
		assert_int_equal(bindings_route(t, &in, &d), SB_OK);
		assert_string_equal(d.reason, cases[i].reason);
		assert_int_equal(d.verdict, cases[i].verdict);
		assert_true(calls <= 1);
		bindings_table_free(t);
	}
}

/* A sender's text cannot make a mention pattern spin: one that backtracks
 * without end on it gives up at its step limit, counts as no match and says
 * so, and the next pattern is still tried. (glibc's regexec took 38 s on
 * this.) */
static void test_mention_pattern_limit(void **state)
{
	struct bindings_table *t =
	    compile("agents: [{id: main}]\n"
	            "channels:\n"
	            "  slack: {groups: [{id: C1}], mention_patterns: [\"(a|aa)+$\"]}\n"
	            "  telegram: {groups: [{id: G1}], mention_patterns: [\"\\\\w*\\\\w*\\\\w*!$\", "
	            "\"b$\"]}\n");
	char *text = malloc(40001);
	struct bindings_decision d;

	(void)state;
	assert_non_null(text);
	memset(text, 'a', 40000);
	text[39999] = 'b';
	text[40000] = '\0';
	d = route(t, &(struct msg){"slack", NULL, ENVELOPE_PEER_CHANNEL, "C1", .sender = "U1",
	                           .text = text});
	assert_int_equal(d.verdict, BINDINGS_MENTION_REQUIRED);
	assert_string_equal(d.reason,
	                    "channels.slack.groups[0] requires a mention and the message has none "
	                    "(mention pattern \"(a|aa)+$\" gave up at its step limit on this "
	                    "text)");
	d = route(t, &(struct msg){"telegram", NULL, ENVELOPE_PEER_GROUP, "G1", .sender = "U1",
	                           .text = text});
	assert_int_equal(d.verdict, BINDINGS_ALLOW);
	assert_string_equal(d.reason, "group G1 allowed by channels.telegram.groups[0], and "
	                              "mention pattern \"b$\" matched");
	free(text);
	bindings_table_free(t);
}

/* An unconfigured channel gets the defaults: pairing, groups closed. */
static void test_access_unknown_channel(void **state)
{
	struct bindings_table *t = compile("agents: [{id: main}]\n");
	struct bindings_decision d;

	(void)state;
	d = route(t, &DM("irc", "nick"));
	assert_int_equal(d.verdict, BINDINGS_PAIRING);
	d = route(t, &(struct msg){"irc", NULL, ENVELOPE_PEER_GROUP, "#x", .sender = "n",
	                           .mentioned = true});
	assert_int_equal(d.verdict, BINDINGS_DENY);
	bindings_table_free(t);
}

/* ---- shadowing and the listing ---- */

static const char shadow_yaml[] =
    "agents: [{id: main, default: true}, {id: a}, {id: b}]\n"
    "bindings:\n"
    "  - agent: a\n"
    "    match: {channel: slack, account: \"*\", peer: {kind: channel, id: C1}}\n"
    "    comment: everything in C1\n"
    "  - agent: b\n"
    "    match: {channel: slack, peer: {kind: channel, id: C1}, team: T1}\n"
    "  - agent: b\n"
    "    match: {channel: slack, team: T1}\n"
    "  - agent: a\n"
    "    match: {channel: telegram}\n"
    "  - agent: b\n"
    "    match: {channel: telegram, account: \"*\"}\n"
    "  - agent: a\n"
    "    match: {channel: webchat, account: \"*\"}\n"
    "  - agent: b\n"
    "    match: {channel: webchat}\n";

static void test_shadowing(void **state)
{
	struct bindings_table *t = compile(shadow_yaml);

	(void)state;
	assert_int_equal(bindings_shadowed_by(t, 0), BINDINGS_NONE);
	/* 1 is narrower than 0 (adds a team; 0 takes any account). */
	assert_int_equal(bindings_shadowed_by(t, 1), 0);
	assert_int_equal(bindings_shadowed_by(t, 2), BINDINGS_NONE); /* another tier */
	/* "default account" first, "any account" after: both can win. */
	assert_int_equal(bindings_shadowed_by(t, 3), BINDINGS_NONE);
	assert_int_equal(bindings_shadowed_by(t, 4), BINDINGS_NONE);
	/* "any account" first covers the default account after it. */
	assert_int_equal(bindings_shadowed_by(t, 5), BINDINGS_NONE);
	assert_int_equal(bindings_shadowed_by(t, 6), 5);
	assert_int_equal(bindings_shadowed_by(t, 7), BINDINGS_NONE);
	bindings_table_free(t);
}

static void test_list_exact(void **state)
{
	struct bindings_table *t = compile(shadow_yaml);
	struct buf b;
	json_t *j = NULL;
	char *s;

	(void)state;
	buf_init(&b, 1 << 20);
	assert_int_equal(bindings_list(t, &b), SB_OK);
	assert_string_equal(
	    b.data,
	    "7 bindings in t.yaml, most specific tier first, file order within a tier:\n"
	    "peer (also tried against a thread's parent, as parent-peer)\n"
	    "  bindings[0]  t.yaml:3  slack account=* peer=channel:C1  -> a  # everything in C1\n"
	    "  bindings[1]  t.yaml:6  slack account=(default) peer=channel:C1 team=T1  -> b\n"
	    "    never wins: bindings[0] (t.yaml:3) matches everything it does and comes first\n"
	    "team\n"
	    "  bindings[2]  t.yaml:8  slack account=(default) team=T1  -> b\n"
	    "channel\n"
	    "  bindings[3]  t.yaml:10  telegram account=(default)  -> a\n"
	    "  bindings[4]  t.yaml:12  telegram account=*  -> b\n"
	    "  bindings[5]  t.yaml:14  webchat account=*  -> a\n"
	    "  bindings[6]  t.yaml:16  webchat account=(default)  -> b\n"
	    "    never wins: bindings[5] (t.yaml:14) matches everything it does and comes first\n"
	    "default: main (marked default)\n");
	buf_free(&b);

	assert_int_equal(bindings_list_json(t, &j), SB_OK);
	s = json_dumps(json_array_get(json_object_get(j, "bindings"), 1), JSON_COMPACT);
	assert_string_equal(s, "{\"index\":1,\"file\":\"t.yaml\",\"line\":6,\"tier\":\"peer\","
	                       "\"agent\":\"b\",\"channel\":\"slack\",\"account\":null,"
	                       "\"matches_account\":\"default\",\"peer\":{\"kind\":\"channel\","
	                       "\"id\":\"C1\"},\"guild\":null,\"team\":\"T1\",\"comment\":null,"
	                       "\"shadowed_by\":0}");
	free(s);
	/* In precedence order: the team binding (2) before the channel ones. */
	assert_int_equal(json_integer_value(json_object_get(
	                     json_array_get(json_object_get(j, "bindings"), 2), "index")),
	                 2);
	assert_string_equal(json_string_value(json_object_get(j, "default_agent")), "main");
	json_decref(j);
	bindings_table_free(t);
}

/* ---- explain ---- */

static const char explain_yaml[] =
    "agents:\n"
    "  - {id: main, default: true}\n"
    "  - {id: work}\n"
    "  - {id: ops}\n"
    "bindings:\n"
    "  - agent: ops\n"
    "    match: {channel: slack, team: T1, peer: {kind: channel, id: C999}}\n"
    "  - agent: work\n"
    "    match: {channel: slack, account: \"*\", peer: {kind: channel, id: C123}}\n"
    "  - agent: ops\n"
    "    match: {channel: slack, peer: {kind: channel, id: \"*\"}, team: T2}\n"
    "  - agent: work\n"
    "    match: {channel: slack, team: T1}\n"
    "  - agent: ops\n"
    "    match: {channel: telegram, account: bot2}\n"
    "session:\n"
    "  dm_scope: per-channel-peer\n"
    "channels:\n"
    "  slack:\n"
    "    groups: [{id: C123}, {id: C555, require_mention: false}]\n"
    "    mention_patterns: [\"\\\\bops\\\\b\"]\n";

static void test_explain_exact(void **state)
{
	struct bindings_table *t = compile(explain_yaml);
	struct envelope e = {.channel = "slack",
	                     .account = "A",
	                     .team_id = "T1",
	                     .peer_kind = ENVELOPE_PEER_CHANNEL,
	                     .peer_id = "C123",
	                     .thread_id = "1699.1",
	                     .sender_id = "U9",
	                     .text = "ping the ops team"};
	struct bindings_input in = {.env = &e};
	char *s;

	(void)state;
	/* The peer tier wins; the earlier candidate's reason is given. */
	s = explain(t, &in);
	assert_string_equal(
	    s, "message: channel slack, account A, team T1, peer channel:C123, thread 1699.1, "
	       "sender U9, text \"ping the ops team\"\n"
	       "agent:   work\n"
	       "session: agent:work:slack:channel:C123:thread:1699.1 (thread; reset none)\n"
	       "binding: bindings[1] at t.yaml:8 (tier peer)\n"
	       "access:  allow: channel C123 allowed by channels.slack.groups[0], and mention "
	       "pattern \"\\bops\\b\" matched\n"
	       "tiers, most specific first:\n"
	       "  1. peer (channel:C123): match\n"
	       "       bindings[0] (t.yaml:6) -> ops: no, account default (implied) != A\n"
	       "       bindings[1] (t.yaml:8) -> work: yes\n"
	       "  2. parent-peer: not tried\n"
	       "  3. peer-wildcard (channel:*): not tried\n"
	       "  4. guild: not tried\n"
	       "  5. team (T1): not tried\n"
	       "  6. account (A): not tried\n"
	       "  7. channel (slack): not tried\n"
	       "  8. default: not tried\n");
	free(s);

	/* Default account, another channel: falls through to the team tier. */
	e.account = NULL;
	e.peer_id = "C777";
	e.thread_id = NULL;
	e.text = NULL;
	e.mentioned = true;
	s = explain(t, &in);
	assert_string_equal(
	    s, "message: channel slack, account default, team T1, peer channel:C777, sender U9, "
	       "mentioned\n"
	       "agent:   work\n"
	       "session: agent:work:slack:channel:C777 (group; reset none)\n"
	       "binding: bindings[3] at t.yaml:12 (tier team)\n"
	       "access:  deny: channel C777 is not in channels.slack.groups (group_policy "
	       "allowlist)\n"
	       "tiers, most specific first:\n"
	       "  1. peer (channel:C777): no match\n"
	       "       bindings[0] (t.yaml:6) -> ops: no, peer id C999 != C777\n"
	       "       bindings[1] (t.yaml:8) -> work: no, peer id C123 != C777\n"
	       "  2. parent-peer: skipped, the message has no parent\n"
	       "  3. peer-wildcard (channel:*): no match\n"
	       "       bindings[2] (t.yaml:10) -> ops: no, team T2 != T1\n"
	       "  4. guild: skipped, the message has no guild\n"
	       "  5. team (T1): match\n"
	       "       bindings[3] (t.yaml:12) -> work: yes\n"
	       "  6. account (default): not tried\n"
	       "  7. channel (slack): not tried\n"
	       "  8. default: not tried\n");
	free(s);

	/* A DM on telegram's default account: only the default agent. */
	memset(&e, 0, sizeof e);
	e.channel = "telegram";
	e.peer_kind = ENVELOPE_PEER_DIRECT;
	e.peer_id = "42";
	e.sender_id = "42";
	e.text = "/new";
	s = explain(t, &in);
	assert_string_equal(
	    s, "message: channel telegram, account default, peer direct:42, sender 42, text "
	       "\"/new\"\n"
	       "agent:   main\n"
	       "session: agent:main:telegram:direct:42 (direct; reset none)\n"
	       "         the text is a reset trigger: a fresh session starts\n"
	       "binding: none (tier default)\n"
	       "access:  pairing: sender 42 is unknown: they get a pairing code for the operator "
	       "to approve (dm_policy pairing)\n"
	       "tiers, most specific first:\n"
	       "  1. peer (direct:42): no telegram bindings in this tier\n"
	       "  2. parent-peer: skipped, the message has no parent\n"
	       "  3. peer-wildcard (direct:*): no telegram bindings in this tier\n"
	       "  4. guild: skipped, the message has no guild\n"
	       "  5. team: skipped, the message has no team\n"
	       "  6. account (default): no match\n"
	       "       bindings[4] (t.yaml:14) -> ops: no, account bot2 != default\n"
	       "  7. channel (telegram): no telegram bindings in this tier\n"
	       "  8. default: main (marked default)\n");
	free(s);

	/* A bot writing in a thread of C555, inherited through its parent. */
	memset(&e, 0, sizeof e);
	e.channel = "slack";
	e.account = "bot2";
	e.peer_kind = ENVELOPE_PEER_CHANNEL;
	e.peer_id = "TH1";
	e.parent_id = "C123";
	e.sender_id = "B7";
	in.sender_is_bot = true;
	s = explain(t, &in);
	assert_string_equal(
	    s, "message: channel slack, account bot2, peer channel:TH1, parent channel:C123, "
	       "sender B7, from a bot\n"
	       "agent:   work\n"
	       "session: agent:work:slack:channel:TH1 (group; reset none)\n"
	       "binding: bindings[1] at t.yaml:8 (tier parent-peer)\n"
	       "access:  drop: the sender is a bot and channels.slack.allow_bots is false (loop "
	       "prevention)\n"
	       "tiers, most specific first:\n"
	       "  1. peer (channel:TH1): no match\n"
	       "       bindings[0] (t.yaml:6) -> ops: no, account default (implied) != bot2\n"
	       "       bindings[1] (t.yaml:8) -> work: no, peer id C123 != TH1\n"
	       "  2. parent-peer (channel:C123): match\n"
	       "       bindings[0] (t.yaml:6) -> ops: no, account default (implied) != bot2\n"
	       "       bindings[1] (t.yaml:8) -> work: yes\n"
	       "  3. peer-wildcard (channel:*): not tried\n"
	       "  4. guild: not tried\n"
	       "  5. team: not tried\n"
	       "  6. account (bot2): not tried\n"
	       "  7. channel (slack): not tried\n"
	       "  8. default: not tried\n");
	free(s);
	bindings_table_free(t);
}

static void test_explain_refused_and_more(void **state)
{
	struct buf yaml;
	struct bindings_table *t;
	struct envelope e = {.channel = "webchat",
	                     .peer_kind = ENVELOPE_PEER_DIRECT,
	                     .peer_id = "u1",
	                     .sender_id = "u1"};
	struct bindings_input in = {.env = &e};
	char *s;

	(void)state;
	/* 25 peer bindings on webchat: 20 shown, then a count. */
	buf_init(&yaml, 1 << 16);
	assert_int_equal(buf_puts(&yaml, "agents: [{id: a}, {id: b}]\nbindings:\n"), SB_OK);
	for (int i = 0; i < 25; i++)
		assert_int_equal(buf_printf(&yaml,
		                            "  - {agent: a, match: {channel: webchat, peer: "
		                            "{kind: direct, id: p%d}}}\n",
		                            i),
		                 SB_OK);
	t = compile(yaml.data);
	buf_free(&yaml);
	s = explain(t, &in);
	assert_non_null(strstr(s, "agent:   none, refused: 2 agents and none is marked default "
	                          "(fail closed)\n"
	                          "binding: none (tier none)\n"
	                          "access:  deny: not routed: no binding matches and none of the "
	                          "2 agents is marked default (fail closed)\n"));
	assert_non_null(strstr(s, "       bindings[19] (t.yaml:22) -> a: no, peer id p19 != u1\n"
	                          "       ... and 5 more\n"
	                          "  2. parent-peer: skipped"));
	assert_non_null(strstr(s, "  8. default: refused: 2 agents and none is marked default "
	                          "(fail closed)\n"));
	assert_null(strstr(s, "bindings[20]"));
	free(s);
	bindings_table_free(t);
}

static void test_explain_json(void **state)
{
	struct bindings_table *t = compile(explain_yaml);
	struct envelope e = {.channel = "slack",
	                     .team_id = "T1",
	                     .peer_kind = ENVELOPE_PEER_CHANNEL,
	                     .peer_id = "C777",
	                     .sender_id = "U9",
	                     .mentioned = true};
	struct bindings_input in = {.env = &e};
	json_t *j = NULL, *tiers, *peer;
	char *s;

	(void)state;
	assert_int_equal(bindings_explain_json(t, &in, &j), SB_OK);
	assert_string_equal(json_string_value(json_object_get(j, "agent")), "work");
	assert_string_equal(json_string_value(json_object_get(j, "session_key")),
	                    "agent:work:slack:channel:C777");
	assert_string_equal(json_string_value(json_object_get(j, "tier")), "team");
	assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "binding"), "line")),
	                 12);
	s = json_dumps(json_object_get(j, "access"), JSON_COMPACT);
	assert_string_equal(s, "{\"verdict\":\"deny\",\"reason\":\"channel C777 is not in "
	                       "channels.slack.groups (group_policy allowlist)\"}");
	free(s);
	tiers = json_object_get(j, "tiers");
	assert_int_equal(json_array_size(tiers), 8);
	peer = json_array_get(tiers, 0);
	s = json_dumps(peer, JSON_COMPACT);
	assert_string_equal(
	    s, "{\"tier\":\"peer\",\"status\":\"no-match\",\"looked_for\":\"channel:C777\","
	       "\"candidates\":[{\"index\":0,\"line\":6,\"agent\":\"ops\",\"match\":false,"
	       "\"winner\":false,\"reason\":\"no, peer id C999 != C777\",\"shadowed_by\":null},"
	       "{\"index\":1,\"line\":8,\"agent\":\"work\",\"match\":false,\"winner\":false,"
	       "\"reason\":\"no, peer id C123 != C777\",\"shadowed_by\":null}],\"more\":0}");
	free(s);
	s = json_dumps(json_array_get(tiers, 1), JSON_COMPACT);
	assert_string_equal(s, "{\"tier\":\"parent-peer\",\"status\":\"skipped\",\"looked_for\":"
	                       "null,\"reason\":\"the message has no parent\"}");
	free(s);
	s = json_dumps(json_array_get(tiers, 7), JSON_COMPACT);
	assert_string_equal(s, "{\"tier\":\"default\",\"status\":\"not-tried\",\"looked_for\":null,"
	                       "\"reason\":\"main (marked default)\",\"agent\":\"main\"}");
	free(s);
	json_decref(j);
	bindings_table_free(t);
}

/* ---- validation at load ---- */

static void test_validation(void **state)
{
	(void)state;
	expect_errors("agents: [{id: main}]\n"
	              "bindings:\n"
	              "  - {agent: mian, match: {channel: slack}}\n"
	              "  - {agent: main, match: {channel: slak}}\n",
	              "t.yaml:3:13: bindings[0].agent: unknown agent \"mian\" (agents: main)\n"
	              "t.yaml:4:36: bindings[1].match.channel: unknown channel \"slak\" (channels: "
	              "telegram, slack, webhook, webchat)\n");
	expect_errors("agents: [{id: a}, {id: b}]\n"
	              "bindings:\n"
	              "  - agent: a\n"
	              "    match: {channel: slack, peer: {kind: group, id: G1}}\n"
	              "  - agent: b\n"
	              "    match: {channel: slack, peer: {id: G1, kind: group}}\n"
	              "  - agent: b\n"
	              "    match: {channel: slack, account: default}\n"
	              "  - agent: b\n"
	              "    match: {channel: slack}\n"
	              "  - agent: a\n"
	              "    match: {channel: slack}\n",
	              "t.yaml:6:12: bindings[1].match: the same match as bindings[0] (line 3), "
	              "which comes first, so this binding would never apply (hint: remove one of "
	              "them, or make the matches differ)\n"
	              "t.yaml:12:12: bindings[4].match: the same match as bindings[3] (line 9), "
	              "which comes first, so this binding would never apply (hint: remove one of "
	              "them, or make the matches differ)\n");
	expect_errors(
	    "agents: [{id: a}]\n"
	    "bindings:\n"
	    "  - {agent: a, match: {channel: slack, peer: {id: C1}}}\n"
	    "  - {agent: a, match: {channel: slack, peer: {kind: group}}}\n"
	    "  - {agent: a, match: {channel: slack, peer: {kind: room, id: x}}}\n",
	    "t.yaml:3:46: bindings[0].match.peer: a peer needs \"kind\" (direct, group or "
	    "channel) (hint: write e.g. peer: {kind: group, id: \"-100123\"})\n"
	    "t.yaml:4:46: bindings[1].match.peer: a peer needs \"id\" (hint: use id: "
	    "\"*\" to match any peer of that kind)\n"
	    "t.yaml:5:53: bindings[2].match.peer.kind: expected one of direct, group, "
	    "channel, found \"room\"\n");
	expect_errors(
	    "agents: [{id: a}]\n"
	    "channels:\n"
	    "  telegram:\n"
	    "    dm_policy: open\n"
	    "    groups: [{id: \"-1\"}, {id: \"-1\"}]\n"
	    "    mention_patterns: [\"(unclosed\"]\n",
	    "t.yaml:4:16: channels.telegram.dm_policy: dm_policy open needs \"*\" in "
	    "allow_from (hint: add allow_from: [\"*\"] to let anyone in)\n"
	    "t.yaml:5:31: channels.telegram.groups[1].id: duplicate group id \"-1\" (also "
	    "groups[0].id) (hint: keep one entry per group)\n"
	    "t.yaml:6:24: channels.telegram.mention_patterns[0]: not a valid regular "
	    "expression: missing closing parenthesis at offset 9 (hint: write a PCRE2 regular "
	    "expression, e.g. \"\\\\bbot\\\\b\")\n");
	expect_errors("agents: [{id: a}]\n"
	              "session:\n"
	              "  dm_scope: per-person\n"
	              "  identity_links:\n"
	              "    - {canonical: alice, ids: [\"telegram:1\", \"U456\"]}\n"
	              "    - {canonical: bob, ids: [\"telegram:1\"]}\n"
	              "  reset: {mode: daily, at_hour: 24}\n"
	              "  reset_triggers: [\"/new now\"]\n",
	              "t.yaml:3:13: session.dm_scope: expected one of main, per-peer, "
	              "per-channel-peer, per-account-channel-peer, found \"per-person\"\n"
	              "t.yaml:5:46: session.identity_links[0].ids[1]: \"U456\" is not of the form "
	              "channel:id (hint: write the channel, a colon and the id: \"telegram:123\")\n"
	              "t.yaml:7:33: session.reset.at_hour: expected an integer from 0 to 23, found "
	              "\"24\"\n");
	expect_errors("agents: [{id: a}]\n"
	              "session:\n"
	              "  identity_links:\n"
	              "    - {canonical: alice, ids: [\"telegram:1\"]}\n"
	              "    - {canonical: bob, ids: [\"telegram:1\"]}\n"
	              "  reset_triggers: [\"/new now\"]\n",
	              "t.yaml:5:30: session.identity_links[1].ids[0]: \"telegram:1\" is linked "
	              "already (identity_links[0]) (hint: list each id under one person only)\n"
	              "t.yaml:6:20: session.reset_triggers[0]: a reset trigger is one non-empty "
	              "word (hint: write one word such as \"/new\")\n");
}

/* The table refuses a source the config check would have caught. */
static void test_table_source_errors(void **state)
{
	struct binding_config b = {.agent = "ghost", .match = {.channel = "slack"}};
	const char *ids[] = {"main"};
	struct bindings_source src = {.bindings = &b,
	                              .n_bindings = 1,
	                              .agent_ids = ids,
	                              .n_agents = 1,
	                              .default_agent = BINDINGS_NONE};
	struct bindings_table *t = (struct bindings_table *)&src; /* must be reset to NULL */

	(void)state;
	assert_int_equal(bindings_table_new(&t, &src), SB_ERR_INVAL);
	assert_null(t);
	b.agent = "main";
	src.n_agents = 0;
	assert_int_equal(bindings_table_new(&t, &src), SB_ERR_INVAL);
	src.n_agents = 1;
	src.default_agent = 3;
	assert_int_equal(bindings_table_new(&t, &src), SB_ERR_INVAL);
	src.default_agent = BINDINGS_NONE;
	assert_int_equal(bindings_table_new(&t, &src), SB_OK);
	assert_true(bindings_table_memory(t) > sizeof(void *));
	assert_string_equal(bindings_table_file(t), "switchboard.yaml");
	bindings_table_free(t);
}

/* ---- the index against a plain scan ---- */

static const char *const rnd_channels[] = {"slack", "telegram"};
static const char *const rnd_accounts[] = {NULL, "*", "A", "B"};
static const char *const rnd_env_accounts[] = {NULL, "A", "B", "C"};
static const char *const rnd_ids[] = {"p1", "p2", "*"};
static const char *const rnd_tags[] = {NULL, "x1", "x2"};

static uint64_t rnd_state = 0x9e3779b97f4a7c15ULL;

static unsigned rnd(unsigned n)
{
	rnd_state ^= rnd_state << 13;
	rnd_state ^= rnd_state >> 7;
	rnd_state ^= rnd_state << 17;
	return (unsigned)(rnd_state % n);
}

static bool eq(const char *a, const char *b)
{
	return a && b && strcmp(a, b) == 0;
}

static enum bindings_tier ref_tier(const struct binding_config *b)
{
	if (b->match.peer.given)
		return eq(b->match.peer.id, "*") ? BINDINGS_TIER_PEER_WILDCARD : BINDINGS_TIER_PEER;
	if (b->match.guild)
		return BINDINGS_TIER_GUILD;
	if (b->match.team)
		return BINDINGS_TIER_TEAM;
	if (b->match.account && !eq(b->match.account, "*"))
		return BINDINGS_TIER_ACCOUNT;
	return BINDINGS_TIER_CHANNEL;
}

/* The rules read literally: tiers in order, bindings in file order. */
static size_t ref_route(const struct binding_config *v, size_t n, const struct envelope *e,
                        enum bindings_tier *tier_out)
{
	const char *acct = e->account ? e->account : "default";

	for (int tier = BINDINGS_TIER_PEER; tier <= BINDINGS_TIER_CHANNEL; tier++) {
		for (size_t i = 0; i < n; i++) {
			const struct binding_config *b = &v[i];
			const struct binding_match_config *m = &b->match;
			enum bindings_tier bt = ref_tier(b);
			bool ok;

			if ((int)bt !=
			    (tier == BINDINGS_TIER_PARENT ? (int)BINDINGS_TIER_PEER : tier))
				continue;
			if (!eq(m->channel, e->channel))
				continue;
			if (!eq(m->account, "*") && !eq(m->account ? m->account : "default", acct))
				continue;
			if (m->guild && !eq(m->guild, e->guild_id))
				continue;
			if (m->team && !eq(m->team, e->team_id))
				continue;
			if (tier == BINDINGS_TIER_PEER)
				ok = (int)m->peer.kind == (int)e->peer_kind &&
				     eq(m->peer.id, e->peer_id);
			else if (tier == BINDINGS_TIER_PARENT)
				ok = e->parent_id && (int)m->peer.kind == (int)e->peer_kind &&
				     eq(m->peer.id, e->parent_id);
			else if (tier == BINDINGS_TIER_PEER_WILDCARD)
				ok = (int)m->peer.kind == (int)e->peer_kind;
			else
				ok = true;
			if (ok) {
				*tier_out = (enum bindings_tier)tier;
				return i;
			}
		}
	}
	*tier_out = BINDINGS_TIER_DEFAULT;
	return BINDINGS_NONE;
}

static void test_index_matches_scan(void **state)
{
	const char *ids[] = {"main", "other"};

	(void)state;
	for (int round = 0; round < 200; round++) {
		size_t n = 1 + rnd(40);
		struct binding_config *v = calloc(n, sizeof *v);
		struct bindings_source src = {.agent_ids = ids,
		                              .n_agents = 2,
		                              .default_agent = 0,
		                              .bindings = v,
		                              .n_bindings = n};
		struct bindings_table *t = NULL;

		assert_non_null(v);
		for (size_t i = 0; i < n; i++) {
			v[i].agent = (char *)ids[rnd(2)];
			v[i].match.channel = (char *)rnd_channels[rnd(2)];
			v[i].match.account = (char *)rnd_accounts[rnd(4)];
			v[i].match.peer.given = rnd(2);
			v[i].match.peer.kind = (int)rnd(3);
			v[i].match.peer.id = (char *)rnd_ids[rnd(3)];
			v[i].match.guild = (char *)rnd_tags[rnd(3)];
			v[i].match.team = (char *)rnd_tags[rnd(3)];
			v[i].line = (int)i + 1;
		}
		assert_int_equal(bindings_table_new(&t, &src), SB_OK);
		for (int k = 0; k < 200; k++) {
			struct envelope e = {.channel = rnd_channels[rnd(2)],
			                     .account = rnd_env_accounts[rnd(4)],
			                     .peer_kind = (enum envelope_peer_kind)rnd(3),
			                     .peer_id = rnd_ids[rnd(2)],
			                     .parent_id = rnd_tags[rnd(3)] ? rnd_ids[rnd(2)] : NULL,
			                     .guild_id = rnd_tags[rnd(3)],
			                     .team_id = rnd_tags[rnd(3)],
			                     .sender_id = "s"};
			struct bindings_input in = {.env = &e};
			struct bindings_decision d;
			enum bindings_tier tier;
			size_t want = ref_route(v, n, &e, &tier);

			assert_int_equal(bindings_route(t, &in, &d), SB_OK);
			if (d.binding != want)
				fail_msg(
				    "round %d: route says %zu (tier %s), the scan %zu (tier %s)",
				    round, d.binding, bindings_tier_name(d.tier), want,
				    bindings_tier_name(tier));
			assert_int_equal(d.tier, tier);
			assert_string_equal(d.agent_id,
			                    want == BINDINGS_NONE ? "main" : v[want].agent);
			/* A shadowed binding never wins. */
			if (want != BINDINGS_NONE)
				assert_int_equal(bindings_shadowed_by(t, want), BINDINGS_NONE);
		}
		bindings_table_free(t);
		free(v);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_every_tier),
	    cmocka_unit_test(test_parent_kind),
	    cmocka_unit_test(test_ties_first_in_file),
	    cmocka_unit_test(test_fail_closed),
	    cmocka_unit_test(test_bad_input),
	    cmocka_unit_test(test_session_keys),
	    cmocka_unit_test(test_reset_policies),
	    cmocka_unit_test(test_reset_by_type),
	    cmocka_unit_test(test_reset_triggers),
	    cmocka_unit_test(test_access),
	    cmocka_unit_test(test_access_unknown_channel),
	    cmocka_unit_test(test_mention_pattern_limit),
	    cmocka_unit_test(test_shadowing),
	    cmocka_unit_test(test_list_exact),
	    cmocka_unit_test(test_explain_exact),
	    cmocka_unit_test(test_explain_refused_and_more),
	    cmocka_unit_test(test_explain_json),
	    cmocka_unit_test(test_validation),
	    cmocka_unit_test(test_table_source_errors),
	    cmocka_unit_test(test_index_matches_scan),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
