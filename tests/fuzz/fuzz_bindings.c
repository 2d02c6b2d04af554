/*
 * fuzz_bindings.c - libFuzzer harness for the inputs of a routing
 * explanation (`switchboard route`, bindings.explain): the input is split on
 * '\n' into a peer "kind:id", a parent "kind:id", channel, account, thread,
 * guild, team, sender, a flags byte and the text (the rest). The first byte
 * of the flags picks one of the fixed routing tables below (every tier of
 * match, mention patterns, identity links, access policies), or the text
 * becomes the `bindings:` list of a configuration of its own.
 *
 * Properties, besides memory safety: bindings_explain, bindings_explain_json
 * and bindings_route agree on success; the explanation names the agent and
 * session key the route chose; a session key is never longer than its cap.
 */
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bindings/bindings.h"
#include "gateway/config/config.h"
#include "gateway/core/buf.h"
#include "gateway/core/envelope.h"
#include "gateway/core/err.h"
#include "gateway/core/log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char base_yaml[] =
    "agents:\n"
    "  - {id: main, default: true}\n"
    "  - {id: ops}\n"
    "  - {id: work}\n"
    "session:\n"
    "  dm_scope: per-channel-peer\n"
    "  identity_links:\n"
    "    - {canonical: alice, ids: [\"telegram:1\", \"slack:U1\", \"webhook:a\"]}\n"
    "channels:\n"
    "  webchat: {dm_policy: open, allow_from: [\"*\"], group_policy: open}\n"
    "  webhook:\n"
    "    dm_policy: allowlist\n"
    "    allow_from: [\"a\", \"webhook:b\"]\n"
    "    group_policy: allowlist\n"
    "    groups:\n"
    "      - {id: g1, require_mention: true}\n"
    "      - {id: \"*\", require_mention: false, allow_from: [\"c\"]}\n"
    "    mention_patterns: [\"\\\\bbot\\\\b\", \"^hey (you|there)\"]\n";

static const char *const tables[] = {
    "bindings: []\n",
    "bindings:\n"
    "  - {agent: ops, match: {channel: webhook, peer: {kind: group, id: g1}}}\n"
    "  - {agent: work, match: {channel: webhook, account: acme}}\n"
    "  - {agent: ops, match: {channel: slack, team: T1}}\n"
    "  - {agent: work, match: {channel: slack, guild: G1}}\n"
    "  - {agent: ops, match: {channel: telegram, peer: {kind: channel, id: \"-100\"}}}\n"
    "  - {agent: main, match: {channel: webchat}}\n"
    "  - {agent: work, match: {channel: webchat, account: \"*\"}}\n",
    "bindings:\n"
    "  - {agent: work, match: {channel: webhook, peer: {kind: direct, id: alice}}}\n"
    "  - {agent: ops, match: {channel: webhook, account: x, peer: {kind: direct, id: alice}}}\n"
    "  - {agent: ops, match: {channel: webhook, account: \"*\"}}\n",
};

struct loaded {
	struct config *cfg;
	struct bindings_table *t;
};

static struct loaded fixed[sizeof tables / sizeof *tables];

static int load(const char *bindings_yaml, struct loaded *out)
{
	struct buf text;
	struct cfg_errors errs;
	int rc;

	memset(out, 0, sizeof *out);
	cfg_errors_init(&errs);
	buf_init(&text, 1 << 20);
	if (buf_puts(&text, base_yaml) || buf_puts(&text, bindings_yaml)) {
		cfg_errors_free(&errs);
		buf_free(&text);
		return SB_ERR_TOOBIG;
	}
	rc = config_load_text(text.data, "fuzz.yaml", "/nonexistent", &out->cfg, &errs);
	cfg_errors_free(&errs);
	buf_free(&text);
	if (rc == SB_OK && (rc = config_bindings_table(out->cfg, &out->t)) != SB_OK) {
		config_unref(out->cfg);
		out->cfg = NULL;
	}
	return rc;
}

/* The next field, split on '\n'; NULL when empty (copied; caller frees). */
static char *next_field(const uint8_t **p, const uint8_t *end)
{
	const uint8_t *start = *p, *nl = memchr(start, '\n', (size_t)(end - start));
	size_t n = (size_t)((nl ? nl : end) - start);
	char *s;

	*p = nl ? nl + 1 : end;
	if (!n)
		return NULL;
	s = malloc(n + 1);
	if (!s)
		abort();
	memcpy(s, start, n);
	s[n] = '\0';
	for (size_t i = 0; i < n; i++)
		if (!s[i])
			s[i] = ' ';
	return s;
}

static bool peer(const char *s, enum envelope_peer_kind *kind, const char **id)
{
	const char *colon = s ? strchr(s, ':') : NULL;
	char k[16];

	if (!colon || colon == s || (size_t)(colon - s) >= sizeof k || !colon[1])
		return false;
	memcpy(k, s, (size_t)(colon - s));
	k[colon - s] = '\0';
	*id = colon + 1;
	return envelope_peer_kind_parse(k, kind) == SB_OK;
}

static bool utf8(const char *s)
{
	json_t *j = s ? json_string(s) : NULL;

	json_decref(j);
	return !s || j != NULL;
}

static bool approved(void *ud, const char *channel, const char *account, const char *sender)
{
	(void)ud;
	(void)channel;
	(void)account;
	return sender && strcmp(sender, "paired") == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool ready;
	const uint8_t *p = data, *end = data + size;
	char *peer_s = next_field(&p, end), *parent_s = next_field(&p, end);
	char *channel = next_field(&p, end), *account = next_field(&p, end);
	char *thread = next_field(&p, end), *guild = next_field(&p, end);
	char *team = next_field(&p, end), *sender = next_field(&p, end);
	char *flags = next_field(&p, end);
	size_t text_len = (size_t)(end - p);
	char *text = malloc(text_len + 1);
	struct loaded own = {NULL, NULL};
	const struct bindings_table *t = NULL;
	struct bindings_input in;
	struct bindings_decision d;
	struct envelope e;
	struct buf out;
	json_t *j = NULL;
	const char *parent_id = NULL;
	unsigned f = flags ? (unsigned char)flags[0] : 0;
	int rc_route, rc_text, rc_json;
	bool all_utf8;

	if (!text)
		abort();
	memcpy(text, p, text_len);
	text[text_len] = '\0';
	if (!ready) {
		log_configure(LOG_ERROR, LOG_FORMAT_LOGFMT, fopen("/dev/null", "w"));
		for (size_t i = 0; i < sizeof tables / sizeof *tables; i++)
			if (load(tables[i], &fixed[i]) != SB_OK)
				abort();
		ready = true;
	}
	if ((f & 7) == 7) {
		/* The text is the bindings list of a configuration of its own. */
		if (memchr(p, 0, text_len) || text_len > 4096 || load(text, &own) != SB_OK)
			goto out;
		t = own.t;
	} else {
		t = fixed[(f & 7) % (sizeof tables / sizeof *tables)].t;
	}
	memset(&e, 0, sizeof e);
	memset(&in, 0, sizeof in);
	e.channel = channel;
	e.account = account;
	e.thread_id = thread;
	e.guild_id = guild;
	e.team_id = team;
	e.sender_id = sender;
	e.text = text;
	e.mentioned = (f & 8) != 0;
	e.event_id = "fuzz";
	if (!peer(peer_s, &e.peer_kind, &e.peer_id))
		e.peer_id = peer_s; /* kind stays direct; the id may be NULL */
	if (parent_s && peer(parent_s, &in.parent_kind, &parent_id)) {
		e.parent_id = parent_id;
		in.parent_kind_set = true;
	}
	in.env = &e;
	in.sender_is_self = (f & 16) != 0;
	in.sender_is_bot = (f & 32) != 0;
	if (f & 64)
		in.approved = approved;

	memset(&d, 0, sizeof d);
	rc_route = bindings_route(t, &in, &d);
	buf_init(&out, 16 << 20);
	rc_text = bindings_explain(t, &in, &out);
	rc_json = bindings_explain_json(t, &in, &j);
	/* JSON carries UTF-8 only (the control plane's input always is; the CLI
	 * refuses other arguments with --json): compare it on UTF-8 input. */
	all_utf8 = utf8(peer_s) && utf8(parent_s) && utf8(channel) && utf8(account) &&
	           utf8(thread) && utf8(guild) && utf8(team) && utf8(sender) && utf8(text);
	if ((rc_route == SB_OK) != (rc_text == SB_OK) ||
	    (all_utf8 && (rc_route == SB_OK) != (rc_json == SB_OK)))
		abort();
	if (rc_route == SB_OK && rc_json == SB_OK) {
		const char *agent = json_string_value(json_object_get(j, "agent"));
		const char *key = json_string_value(json_object_get(j, "session_key"));

		if (strnlen(d.session_key, sizeof d.session_key) >= sizeof d.session_key)
			abort();
		if (d.agent_id && (!agent || strcmp(agent, d.agent_id) != 0))
			abort();
		if (d.agent_id && (!key || strcmp(key, d.session_key) != 0))
			abort();
		if (!out.data || !strstr(out.data, d.agent_id ? d.agent_id : ""))
			abort();
	}
	json_decref(j);
	buf_free(&out);
out:
	bindings_table_free(own.t);
	config_unref(own.cfg);
	free(peer_s);
	free(parent_s);
	free(channel);
	free(account);
	free(thread);
	free(guild);
	free(team);
	free(sender);
	free(flags);
	free(text);
	return 0;
}
