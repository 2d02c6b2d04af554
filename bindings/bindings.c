/*
 * bindings.c - compiles the routing table and answers routing questions.
 *
 * Layout. Everything a table owns lives in one arena (a list of chunks
 * freed together), so that its size is known and freeing it is one walk.
 * One open-addressing hash table indexes it, with typed keys (a leading
 * letter, then fields joined by 0x1f):
 *   P channel account kind id   peer bindings (tiers peer and parent-peer)
 *   W channel account kind      peer wildcard bindings
 *   G channel account guild     guild bindings
 *   T channel account team      team bindings
 *   A channel account           account bindings
 *   C channel account           channel bindings ("*" or the default account)
 *   I channel:id                identity link -> canonical name
 *   a channel sender            DM allow_from entry
 *   g channel group             group entry -> its index
 *   m group-index sender        a group's allow_from entry
 * A binding key's value is the first binding with that key; the rest follow
 * through rule.next in file order. A lookup probes the envelope's account and
 * "*" in each tier and takes the earlier binding of the two chains.
 */
#include "bindings/bindings.h"

#include <ctype.h>
#include <stdalign.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "gateway/core/err.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#define BT_NIL UINT32_MAX
#define BT_KEY_MAX 1024 /* longer envelope ids cannot match a binding's */
#define BT_SEP '\x1f'
#define BT_CHUNK_FIRST 4096u       /* arena chunks double from here... */
#define BT_CHUNK_MAX (64u * 1024u) /* ...up to this */
#define BT_EXPLAIN_MAX 20          /* candidates shown per tier */
/* What one mention pattern may cost on one message. Routing runs on the
 * event loop, and the text is the sender's. PCRE2's match limit counts
 * afresh at each start position, so the pattern is compiled with automatic
 * callouts and the callout counts every item tried over the whole text: an
 * ordinary pattern takes a few a word, so a 40 KB Slack message of prose
 * stays well below this, while "(a|aa)+$" on a run of a's gives up within
 * a few milliseconds. */
#define BT_PATTERN_STEPS 500000
#define BT_PATTERN_DEPTH 1000
#define BT_PATTERN_HEAP_KIB 1024
#define BT_PATTERN_FLAGS                                                                   \
	(PCRE2_CASELESS | PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF |                \
	 PCRE2_NEVER_BACKSLASH_C | PCRE2_AUTO_CALLOUT)
#define BT_TEXT_SHOWN 60           /* bytes of message text shown by explain */
#define BT_DAY_MS (24LL * 3600 * 1000)

static const char *const bt_default_triggers[] = {"/new", "/reset"};

/* ---- the arena ---- */

struct bt_chunk {
	struct bt_chunk *next;
	size_t size, used;
	max_align_t data[]; /* aligned for anything */
};

struct bt_rule {
	const char *agent;
	const char *channel;
	const char *account;  /* as written; NULL when omitted */
	const char *acct_key; /* "*", the account, or the default account */
	const char *peer_id;  /* NULL without a peer */
	const char *guild, *team, *comment;
	uint32_t next;        /* next binding with the same index key, in file order */
	uint32_t shadowed_by; /* BT_NIL, or an earlier same-tier binding that always wins */
	int line;
	uint8_t tier;
	uint8_t peer_kind;
	bool has_peer;
};

struct bt_slot {
	const char *key; /* NULL: empty */
	uint32_t klen;
	uint32_t hash;
	uint32_t val;
};

struct bt_group {
	const char *id;
	size_t cfg_index; /* position in the channel's `groups` list */
	bool require_mention;
	bool allow_all; /* allow_from holds "*" */
	size_t n_allow;
};

struct bt_channel {
	const char *name; /* NULL for the defaults of an unconfigured channel */
	int dm_policy, group_policy;
	bool allow_bots, dm_allow_all;
	size_t n_dm_allow;
	uint32_t first_group, n_groups, wildcard_group; /* into table->groups */
	pcre2_code **patterns;
	const char **pattern_src;
	size_t n_patterns; /* compiled, so freed with the table */
};

struct bindings_table {
	struct bt_chunk *chunks;
	size_t bytes;
	const char *file;
	struct bt_rule *rules;
	size_t n_rules;
	struct bt_slot *slots;
	size_t mask; /* slots - 1; a power of two minus one */
	const char **agents;
	size_t n_agents;
	size_t default_agent; /* BINDINGS_NONE: refuse unmatched envelopes */
	bool default_marked;  /* marked default, rather than the only agent */
	const char **canon;
	size_t n_canon;
	struct bt_group *groups;
	size_t n_groups;
	struct bt_channel *channels;
	size_t n_channels;
	struct bt_channel fallback;
	int dm_scope;
	struct session_reset_config reset[3]; /* by enum bindings_session_type */
	const char *const *triggers;
	size_t n_triggers;
};

static void *bt_alloc(struct bindings_table *t, size_t size)
{
	const size_t align = alignof(max_align_t);
	struct bt_chunk *c = t->chunks;
	size_t need = (size + align - 1) / align * align;
	void *p;

	if (!need)
		need = align;
	if (!c || c->size - c->used < need) {
		size_t step = c ? c->size * 2 : BT_CHUNK_FIRST;
		size_t csize;

		if (step > BT_CHUNK_MAX)
			step = BT_CHUNK_MAX;
		csize = need > step ? need : step;
		c = malloc(sizeof *c + csize);
		if (!c)
			return NULL;
		c->size = csize;
		c->used = 0;
		/* A big block gets its own chunk behind the current one, so
		 * that the current one keeps filling. */
		if (t->chunks && need > step) {
			c->next = t->chunks->next;
			t->chunks->next = c;
		} else {
			c->next = t->chunks;
			t->chunks = c;
		}
		t->bytes += sizeof *c + csize;
	}
	p = (char *)c->data + c->used;
	c->used += need;
	memset(p, 0, need);
	return p;
}

static const char *bt_strdup(struct bindings_table *t, const char *s, bool *nomem)
{
	size_t n;
	char *p;

	if (!s)
		return NULL;
	n = strlen(s);
	p = bt_alloc(t, n + 1);
	if (!p) {
		*nomem = true;
		return NULL;
	}
	memcpy(p, s, n + 1);
	return p;
}

/* ---- the hash index ---- */

static uint32_t bt_hash(const char *s, size_t n)
{
	uint64_t h = 1469598103934665603ULL;

	for (size_t i = 0; i < n; i++) {
		h ^= (unsigned char)s[i];
		h *= 1099511628211ULL;
	}
	return (uint32_t)(h ^ (h >> 32));
}

/* Joins type and parts into out; returns the length, or 0 when a part is
 * NULL or the key would not fit. */
static size_t bt_key(char *out, size_t size, char type, const char *const *parts, size_t n)
{
	size_t len = 1;

	if (size < 2)
		return 0;
	out[0] = type;
	for (size_t i = 0; i < n; i++) {
		size_t pl;

		if (!parts[i])
			return 0;
		pl = strlen(parts[i]);
		if (len + 1 + pl + 1 > size)
			return 0;
		out[len++] = BT_SEP;
		memcpy(out + len, parts[i], pl);
		len += pl;
	}
	out[len] = '\0';
	return len;
}

static struct bt_slot *bt_find(const struct bindings_table *t, const char *key, size_t klen)
{
	uint32_t h = bt_hash(key, klen);

	if (!t->slots)
		return NULL;
	for (size_t i = h & t->mask;; i = (i + 1) & t->mask) {
		struct bt_slot *s = &t->slots[i];

		if (!s->key)
			return NULL;
		if (s->hash == h && s->klen == klen && memcmp(s->key, key, klen) == 0)
			return s;
	}
}

/* Finds or adds key. *added tells which; the new slot's val is BT_NIL. */
static struct bt_slot *bt_insert(struct bindings_table *t, const char *key, size_t klen,
                                 bool *added)
{
	uint32_t h = bt_hash(key, klen);
	char *copy;

	*added = false;
	for (size_t i = h & t->mask;; i = (i + 1) & t->mask) {
		struct bt_slot *s = &t->slots[i];

		if (s->key) {
			if (s->hash == h && s->klen == klen && memcmp(s->key, key, klen) == 0)
				return s;
			continue;
		}
		copy = bt_alloc(t, klen + 1);
		if (!copy)
			return NULL;
		memcpy(copy, key, klen + 1);
		s->key = copy;
		s->klen = (uint32_t)klen;
		s->hash = h;
		s->val = BT_NIL;
		*added = true;
		return s;
	}
}

/* ---- names ---- */

static const char *const bt_tier_names[] = {
    [BINDINGS_TIER_PEER] = "peer",
    [BINDINGS_TIER_PARENT] = "parent-peer",
    [BINDINGS_TIER_PEER_WILDCARD] = "peer-wildcard",
    [BINDINGS_TIER_GUILD] = "guild",
    [BINDINGS_TIER_TEAM] = "team",
    [BINDINGS_TIER_ACCOUNT] = "account",
    [BINDINGS_TIER_CHANNEL] = "channel",
    [BINDINGS_TIER_DEFAULT] = "default",
    [BINDINGS_TIER_NONE] = "none",
};

const char *bindings_tier_name(enum bindings_tier t)
{
	return (unsigned)t <= BINDINGS_TIER_NONE ? bt_tier_names[t] : "none";
}

static const char *const bt_verdict_names[] = {
    [BINDINGS_ALLOW] = "allow",
    [BINDINGS_PAIRING] = "pairing",
    [BINDINGS_MENTION_REQUIRED] = "mention-required",
    [BINDINGS_DENY] = "deny",
    [BINDINGS_DROP] = "drop",
};

const char *bindings_verdict_name(enum bindings_verdict v)
{
	return (unsigned)v <= BINDINGS_DROP ? bt_verdict_names[v] : "deny";
}

static const char *const bt_session_type_names[] = {"direct", "group", "thread"};

/* ---- classification ---- */

static bool bt_is_star(const char *s)
{
	return s && strcmp(s, "*") == 0;
}

/* NULL for NULL or "". */
static const char *bt_opt(const char *s)
{
	return s && *s ? s : NULL;
}

static enum bindings_tier bt_classify(const struct binding_config *b)
{
	const struct binding_match_config *m = &b->match;

	if (m->peer.given)
		return bt_is_star(m->peer.id) ? BINDINGS_TIER_PEER_WILDCARD : BINDINGS_TIER_PEER;
	if (m->guild)
		return BINDINGS_TIER_GUILD;
	if (m->team)
		return BINDINGS_TIER_TEAM;
	if (m->account && !bt_is_star(m->account))
		return BINDINGS_TIER_ACCOUNT;
	return BINDINGS_TIER_CHANNEL;
}

/* The index key of a rule (or of a lookup, with the same fields). */
static size_t bt_rule_key(char *out, size_t size, enum bindings_tier tier, const char *channel,
                          const char *acct, int kind, const char *id, const char *guild,
                          const char *team)
{
	char kc[2] = {(char)('0' + kind), '\0'};
	const char *parts[4] = {channel, acct, NULL, NULL};

	switch (tier) {
	case BINDINGS_TIER_PEER:
	case BINDINGS_TIER_PARENT:
		parts[2] = kc;
		parts[3] = id;
		return bt_key(out, size, 'P', parts, 4);
	case BINDINGS_TIER_PEER_WILDCARD:
		parts[2] = kc;
		return bt_key(out, size, 'W', parts, 3);
	case BINDINGS_TIER_GUILD:
		parts[2] = guild;
		return bt_key(out, size, 'G', parts, 3);
	case BINDINGS_TIER_TEAM:
		parts[2] = team;
		return bt_key(out, size, 'T', parts, 3);
	case BINDINGS_TIER_ACCOUNT:
		return bt_key(out, size, 'A', parts, 2);
	case BINDINGS_TIER_CHANNEL:
		return bt_key(out, size, 'C', parts, 2);
	default:
		return 0;
	}
}

/* Whether every input that reaches rule l through its key also matches
 * rule e (same key or e's account "*"): e's extra filters are absent or
 * equal to l's. */
static bool bt_covers(const struct bt_rule *e, const struct bt_rule *l)
{
	if (e->guild && (!l->guild || strcmp(e->guild, l->guild) != 0))
		return false;
	if (e->team && (!l->team || strcmp(e->team, l->team) != 0))
		return false;
	return true;
}

/* ---- compiling ---- */

static int bt_copy_rules(struct bindings_table *t, const struct bindings_source *src)
{
	bool nomem = false;

	if (src->n_bindings >= BT_NIL)
		return SB_ERR_TOOBIG;
	t->rules = bt_alloc(t, (src->n_bindings ? src->n_bindings : 1) * sizeof *t->rules);
	if (!t->rules)
		return SB_ERR_NOMEM;
	for (size_t i = 0; i < src->n_bindings; i++) {
		const struct binding_config *b = &src->bindings[i];
		struct bt_rule *r = &t->rules[i];
		size_t a;

		if (!b->agent || !b->match.channel || (b->match.peer.given && !b->match.peer.id) ||
		    b->match.peer.kind < 0 || b->match.peer.kind > ENVELOPE_PEER_CHANNEL)
			return SB_ERR_INVAL;
		for (a = 0; a < t->n_agents; a++)
			if (strcmp(t->agents[a], b->agent) == 0)
				break;
		if (a == t->n_agents)
			return SB_ERR_INVAL;
		r->agent = t->agents[a];
		r->tier = (uint8_t)bt_classify(b);
		r->channel = bt_strdup(t, b->match.channel, &nomem);
		r->account = bt_strdup(t, b->match.account, &nomem);
		r->acct_key = r->account ? r->account : BINDINGS_DEFAULT_ACCOUNT;
		r->has_peer = b->match.peer.given;
		r->peer_kind = (uint8_t)b->match.peer.kind;
		r->peer_id = r->has_peer ? bt_strdup(t, b->match.peer.id, &nomem) : NULL;
		r->guild = bt_strdup(t, b->match.guild, &nomem);
		r->team = bt_strdup(t, b->match.team, &nomem);
		r->comment = bt_strdup(t, b->comment, &nomem);
		r->line = b->line;
		r->next = BT_NIL;
		r->shadowed_by = BT_NIL;
		if (nomem)
			return SB_ERR_NOMEM;
	}
	t->n_rules = src->n_bindings;
	return SB_OK;
}

/* Chains the rules under their keys, in file order (built back to front,
 * each rule pushed at the head). */
static int bt_index_rules(struct bindings_table *t)
{
	char key[BT_KEY_MAX];

	for (size_t i = t->n_rules; i-- > 0;) {
		struct bt_rule *r = &t->rules[i];
		size_t klen = bt_rule_key(key, sizeof key, r->tier, r->channel, r->acct_key,
		                          r->peer_kind, r->peer_id, r->guild, r->team);
		struct bt_slot *s;
		bool added;

		if (!klen)
			return SB_ERR_INVAL; /* fields are bounded by the schema */
		s = bt_insert(t, key, klen, &added);
		if (!s)
			return SB_ERR_NOMEM;
		r->next = s->val;
		s->val = (uint32_t)i;
	}
	return SB_OK;
}

/* The first rule before limit on the chain of key that covers r. */
static uint32_t bt_first_cover(const struct bindings_table *t, const char *key, size_t klen,
                               const struct bt_rule *r, uint32_t limit)
{
	const struct bt_slot *s = klen ? bt_find(t, key, klen) : NULL;

	for (uint32_t e = s ? s->val : BT_NIL; e != BT_NIL && e < limit; e = t->rules[e].next)
		if (bt_covers(&t->rules[e], r))
			return e;
	return BT_NIL;
}

static void bt_find_shadows(struct bindings_table *t)
{
	char key[BT_KEY_MAX];

	for (size_t i = 0; i < t->n_rules; i++) {
		struct bt_rule *r = &t->rules[i];
		uint32_t best;
		size_t klen = bt_rule_key(key, sizeof key, r->tier, r->channel, r->acct_key,
		                          r->peer_kind, r->peer_id, r->guild, r->team);

		best = bt_first_cover(t, key, klen, r, (uint32_t)i);
		if (!bt_is_star(r->acct_key)) {
			uint32_t e;

			klen = bt_rule_key(key, sizeof key, r->tier, r->channel, "*", r->peer_kind,
			                   r->peer_id, r->guild, r->team);
			e = bt_first_cover(t, key, klen, r, best != BT_NIL ? best : (uint32_t)i);
			if (e != BT_NIL)
				best = e;
		}
		r->shadowed_by = best;
	}
}

/* Adds a membership key; a repeated one is simply kept once. */
static int bt_add_member(struct bindings_table *t, char type, const char *a, const char *b,
                         uint32_t val)
{
	char key[BT_KEY_MAX];
	const char *parts[2] = {a, b};
	size_t klen = bt_key(key, sizeof key, type, parts, 2);
	struct bt_slot *s;
	bool added;

	if (!klen)
		return SB_OK; /* cannot be looked up by a bounded envelope id either */
	s = bt_insert(t, key, klen, &added);
	if (!s)
		return SB_ERR_NOMEM;
	if (added)
		s->val = val;
	return SB_OK;
}

/* An allow_from entry without its "<channel>:" prefix. */
static const char *bt_sender_entry(const char *channel, const char *entry)
{
	size_t n = strlen(channel);

	if (strncmp(entry, channel, n) == 0 && entry[n] == ':' && entry[n + 1])
		return entry + n + 1;
	return entry;
}

static void bt_channel_defaults(struct bt_channel *c)
{
	memset(c, 0, sizeof *c);
	c->dm_policy = ACCESS_DM_PAIRING;
	c->group_policy = ACCESS_GROUP_ALLOWLIST;
	c->wildcard_group = BT_NIL;
}

/* Compiles a mention pattern (JIT where the machine has it); NULL with why
 * on a bad one. */
static pcre2_code *bt_pattern_compile(const char *src, char *why, size_t why_len)
{
	pcre2_code *re;
	PCRE2_SIZE off = 0;
	int err = 0;

	re = pcre2_compile((PCRE2_SPTR)src, PCRE2_ZERO_TERMINATED, BT_PATTERN_FLAGS, &err, &off,
	                   NULL);
	if (!re) {
		if (why && why_len) {
			char msg[160];

			if (pcre2_get_error_message(err, (PCRE2_UCHAR *)msg, sizeof msg) < 0)
				snprintf(msg, sizeof msg, "error %d", err);
			snprintf(why, why_len, "%s at offset %zu", msg, (size_t)off);
		}
		return NULL;
	}
	(void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* the interpreter otherwise */
	return re;
}

int bindings_pattern_check(const char *src, char *why, size_t why_len)
{
	pcre2_code *re = bt_pattern_compile(src, why, why_len);

	pcre2_code_free(re);
	return re ? 0 : -1;
}

static int bt_pattern_step(pcre2_callout_block *cb, void *ud)
{
	unsigned long *steps = ud;

	(void)cb;
	return ++*steps > BT_PATTERN_STEPS ? PCRE2_ERROR_CALLOUT : 0;
}

/* 1 when a pattern matches the text, 0 when not, -1 when it gave up at its
 * limits (counted as no match: the sender cannot make routing spin). Its
 * own match context, so any thread may route. */
static int bt_pattern_match(pcre2_code *re, const char *text)
{
	pcre2_match_data *md = pcre2_match_data_create(1, NULL);
	pcre2_match_context *mc = pcre2_match_context_create(NULL);
	unsigned long steps = 0;
	int rc = PCRE2_ERROR_NOMEMORY;

	if (md && mc) {
		pcre2_set_match_limit(mc, BT_PATTERN_STEPS);
		pcre2_set_depth_limit(mc, BT_PATTERN_DEPTH);
		pcre2_set_heap_limit(mc, BT_PATTERN_HEAP_KIB);
		pcre2_set_callout(mc, bt_pattern_step, &steps);
		rc = pcre2_match(re, (PCRE2_SPTR)text, strlen(text), 0, 0, md, mc);
	}
	pcre2_match_context_free(mc);
	pcre2_match_data_free(md);
	if (rc >= 0)
		return 1;
	return rc == PCRE2_ERROR_NOMATCH ? 0 : -1;
}

static int bt_copy_channel(struct bindings_table *t, struct bt_channel *c,
                           const struct bindings_channel_access *src, uint32_t *next_group)
{
	const struct access_config *a = src->access;
	char idx[24];
	bool nomem = false;
	int rc;

	bt_channel_defaults(c);
	c->name = bt_strdup(t, src->channel, &nomem);
	if (nomem)
		return SB_ERR_NOMEM;
	if (!a)
		return SB_OK;
	c->dm_policy = a->dm_policy;
	c->group_policy = a->group_policy;
	c->allow_bots = a->allow_bots;
	c->n_dm_allow = a->n_allow_from;
	for (size_t i = 0; i < a->n_allow_from; i++) {
		const char *who = bt_sender_entry(c->name, a->allow_from[i]);

		if (bt_is_star(who))
			c->dm_allow_all = true;
		else if ((rc = bt_add_member(t, 'a', c->name, who, 1)) != SB_OK)
			return rc;
	}
	c->first_group = *next_group;
	c->n_groups = (uint32_t)a->n_groups;
	for (size_t i = 0; i < a->n_groups; i++) {
		const struct access_group_config *gc = &a->groups[i];
		uint32_t gi = (*next_group)++;
		struct bt_group *g = &t->groups[gi];

		g->id = bt_strdup(t, gc->id, &nomem);
		if (nomem)
			return SB_ERR_NOMEM;
		g->cfg_index = i;
		g->require_mention = gc->require_mention;
		g->n_allow = gc->n_allow_from;
		if (bt_is_star(g->id)) {
			if (c->wildcard_group == BT_NIL)
				c->wildcard_group = gi;
		} else if ((rc = bt_add_member(t, 'g', c->name, g->id, gi)) != SB_OK) {
			return rc;
		}
		snprintf(idx, sizeof idx, "%u", (unsigned)gi);
		for (size_t j = 0; j < gc->n_allow_from; j++) {
			const char *who = bt_sender_entry(c->name, gc->allow_from[j]);

			if (bt_is_star(who))
				g->allow_all = true;
			else if ((rc = bt_add_member(t, 'm', idx, who, 1)) != SB_OK)
				return rc;
		}
	}
	if (a->n_mention_patterns) {
		c->patterns = bt_alloc(t, a->n_mention_patterns * sizeof *c->patterns);
		c->pattern_src = bt_alloc(t, a->n_mention_patterns * sizeof *c->pattern_src);
		if (!c->patterns || !c->pattern_src)
			return SB_ERR_NOMEM;
	}
	for (size_t i = 0; i < a->n_mention_patterns; i++) {
		c->pattern_src[i] = bt_strdup(t, a->mention_patterns[i], &nomem);
		if (nomem)
			return SB_ERR_NOMEM;
		c->patterns[i] = bt_pattern_compile(a->mention_patterns[i], NULL, 0);
		if (!c->patterns[i])
			return SB_ERR_CONFIG;
		c->n_patterns++;
	}
	return SB_OK;
}

static int bt_copy_session(struct bindings_table *t, const struct session_config *s)
{
	static const struct session_reset_config none = {
	    .mode = SESSION_RESET_NONE, .at_hour = 4, .idle_minutes = 60};
	bool nomem = false;

	t->dm_scope = s ? s->dm_scope : SESSION_DM_MAIN;
	t->reset[BINDINGS_SESSION_DIRECT] = none;
	if (s) {
		t->reset[BINDINGS_SESSION_DIRECT] = s->reset;
		t->reset[BINDINGS_SESSION_GROUP] = s->reset;
		t->reset[BINDINGS_SESSION_THREAD] = s->reset;
		if (s->reset_by_type.direct.given)
			t->reset[BINDINGS_SESSION_DIRECT] = s->reset_by_type.direct;
		if (s->reset_by_type.group.given)
			t->reset[BINDINGS_SESSION_GROUP] = s->reset_by_type.group;
		if (s->reset_by_type.thread.given)
			t->reset[BINDINGS_SESSION_THREAD] = s->reset_by_type.thread;
	} else {
		t->reset[BINDINGS_SESSION_GROUP] = none;
		t->reset[BINDINGS_SESSION_THREAD] = none;
	}
	if (s && s->reset_triggers_given) {
		size_t n = s->n_reset_triggers;
		const char **v = bt_alloc(t, (n ? n : 1) * sizeof *v);

		if (!v)
			return SB_ERR_NOMEM;
		for (size_t i = 0; i < n; i++)
			v[i] = bt_strdup(t, s->reset_triggers[i], &nomem);
		if (nomem)
			return SB_ERR_NOMEM;
		t->triggers = v;
		t->n_triggers = n;
	} else {
		t->triggers = bt_default_triggers;
		t->n_triggers = sizeof bt_default_triggers / sizeof *bt_default_triggers;
	}
	if (!s || !s->n_identity_links)
		return SB_OK;
	t->canon = bt_alloc(t, s->n_identity_links * sizeof *t->canon);
	if (!t->canon)
		return SB_ERR_NOMEM;
	for (size_t i = 0; i < s->n_identity_links; i++) {
		const struct session_identity_link *l = &s->identity_links[i];

		t->canon[i] = bt_strdup(t, l->canonical, &nomem);
		if (nomem)
			return SB_ERR_NOMEM;
		for (size_t j = 0; j < l->n_ids; j++) {
			char key[BT_KEY_MAX];
			const char *parts[1] = {l->ids[j]};
			size_t klen = bt_key(key, sizeof key, 'I', parts, 1);
			struct bt_slot *slot;
			bool added;

			if (!klen)
				continue;
			slot = bt_insert(t, key, klen, &added);
			if (!slot)
				return SB_ERR_NOMEM;
			if (added)
				slot->val = (uint32_t)i;
		}
	}
	t->n_canon = s->n_identity_links;
	return SB_OK;
}

/* How many keys the index will hold, at most. */
static size_t bt_count_keys(const struct bindings_source *src)
{
	size_t n = src->n_bindings;

	for (size_t i = 0; src->session && i < src->session->n_identity_links; i++)
		n += src->session->identity_links[i].n_ids;
	for (size_t i = 0; i < src->n_channels; i++) {
		const struct access_config *a = src->channels[i].access;

		if (!a)
			continue;
		n += a->n_allow_from + a->n_groups;
		for (size_t g = 0; g < a->n_groups; g++)
			n += a->groups[g].n_allow_from;
	}
	return n;
}

void bindings_table_free(struct bindings_table *t)
{
	struct bt_chunk *c;

	if (!t)
		return;
	for (size_t i = 0; i < t->n_channels; i++)
		for (size_t p = 0; p < t->channels[i].n_patterns; p++)
			pcre2_code_free(t->channels[i].patterns[p]);
	c = t->chunks;
	while (c) {
		struct bt_chunk *next = c->next;

		free(c);
		c = next;
	}
	free(t);
}

int bindings_table_new(struct bindings_table **out, const struct bindings_source *src)
{
	struct bindings_table *t = NULL;
	size_t keys, slots = 16, n_groups = 0;
	uint32_t next_group = 0;
	bool nomem = false;
	int rc = SB_ERR_INVAL;

	if (out)
		*out = NULL;
	if (!out || !src || !src->n_agents || !src->agent_ids ||
	    (src->n_bindings && !src->bindings) || (src->n_channels && !src->channels) ||
	    (src->default_agent != BINDINGS_NONE && src->default_agent >= src->n_agents))
		goto out;
	rc = SB_ERR_NOMEM;
	t = calloc(1, sizeof *t);
	if (!t)
		goto out;
	t->bytes = sizeof *t;
	t->file = bt_strdup(t, src->file ? src->file : "switchboard.yaml", &nomem);
	t->agents = bt_alloc(t, src->n_agents * sizeof *t->agents);
	if (nomem || !t->agents)
		goto out;
	for (size_t i = 0; i < src->n_agents; i++) {
		rc = SB_ERR_INVAL;
		if (!src->agent_ids[i])
			goto out;
		rc = SB_ERR_NOMEM;
		t->agents[i] = bt_strdup(t, src->agent_ids[i], &nomem);
		if (nomem)
			goto out;
	}
	t->n_agents = src->n_agents;
	t->default_agent = src->default_agent;
	t->default_marked = src->default_agent != BINDINGS_NONE;
	if (!t->default_marked && t->n_agents == 1)
		t->default_agent = 0;

	keys = bt_count_keys(src);
	while (slots < 2 * keys + 16)
		slots *= 2;
	t->slots = bt_alloc(t, slots * sizeof *t->slots);
	if (!t->slots)
		goto out;
	t->mask = slots - 1;

	if ((rc = bt_copy_rules(t, src)) != SB_OK || (rc = bt_index_rules(t)) != SB_OK)
		goto out;
	bt_find_shadows(t);

	rc = SB_ERR_NOMEM;
	for (size_t i = 0; i < src->n_channels; i++)
		n_groups += src->channels[i].access ? src->channels[i].access->n_groups : 0;
	if (n_groups) {
		t->groups = bt_alloc(t, n_groups * sizeof *t->groups);
		if (!t->groups)
			goto out;
	}
	if (src->n_channels) {
		t->channels = bt_alloc(t, src->n_channels * sizeof *t->channels);
		if (!t->channels)
			goto out;
	}
	bt_channel_defaults(&t->fallback);
	for (size_t i = 0; i < src->n_channels; i++) {
		rc = SB_ERR_INVAL;
		if (!src->channels[i].channel)
			goto out;
		/* Counted first so that a failure frees what compiled. */
		t->n_channels++;
		rc = bt_copy_channel(t, &t->channels[i], &src->channels[i], &next_group);
		if (rc)
			goto out;
	}
	t->n_groups = n_groups;
	rc = bt_copy_session(t, src->session);
	if (rc)
		goto out;
	*out = t;
	t = NULL;
	rc = SB_OK;
out:
	bindings_table_free(t);
	return rc;
}

size_t bindings_table_memory(const struct bindings_table *t)
{
	return t ? t->bytes : 0;
}

const char *bindings_table_file(const struct bindings_table *t)
{
	return t->file;
}

size_t bindings_shadowed_by(const struct bindings_table *t, size_t i)
{
	if (!t || i >= t->n_rules || t->rules[i].shadowed_by == BT_NIL)
		return BINDINGS_NONE;
	return t->rules[i].shadowed_by;
}

/* ---- matching ---- */

/* The facts of one routing question, normalised once. */
struct bt_query {
	const struct envelope *env;
	const char *channel;
	const char *account;
	const char *peer; /* NULL when none */
	int kind;
	const char *parent;
	int parent_kind;
	const char *thread, *guild, *team;
	bool owner;
};

static void bt_query_init(struct bt_query *q, const struct bindings_input *in)
{
	const struct envelope *e = in->env;

	q->env = e;
	q->channel = e->channel;
	q->account = bt_opt(e->account) ? e->account : BINDINGS_DEFAULT_ACCOUNT;
	q->kind = e->peer_kind;
	q->peer = bt_opt(e->peer_id);
	if (!q->peer && e->peer_kind == ENVELOPE_PEER_DIRECT)
		q->peer = bt_opt(e->sender_id);
	q->parent = bt_opt(e->parent_id);
	q->parent_kind = in->parent_kind_set ? (int)in->parent_kind : q->kind;
	q->thread = bt_opt(e->thread_id);
	q->guild = bt_opt(e->guild_id);
	q->team = bt_opt(e->team_id);
	q->owner = in->owner;
}

/* Whether the tier can apply to q at all. */
static bool bt_tier_applies(const struct bt_query *q, enum bindings_tier tier)
{
	switch (tier) {
	case BINDINGS_TIER_PEER:
		return q->peer != NULL;
	case BINDINGS_TIER_PARENT:
		return q->parent != NULL;
	case BINDINGS_TIER_GUILD:
		return q->guild != NULL;
	case BINDINGS_TIER_TEAM:
		return q->team != NULL;
	default:
		return true;
	}
}

static size_t bt_query_key(char *out, size_t size, const struct bt_query *q,
                           enum bindings_tier tier, const char *acct)
{
	bool parent = tier == BINDINGS_TIER_PARENT;

	return bt_rule_key(out, size, tier, q->channel, acct, parent ? q->parent_kind : q->kind,
	                   parent ? q->parent : q->peer, q->guild, q->team);
}

static bool bt_same(const char *a, const char *b)
{
	return a && b && strcmp(a, b) == 0;
}

/* The filters a key does not carry: guild and team, when the rule has
 * them. */
static bool bt_filters_pass(const struct bt_rule *r, const struct bt_query *q)
{
	return (!r->guild || bt_same(r->guild, q->guild)) &&
	       (!r->team || bt_same(r->team, q->team));
}

/* The first binding of tier that matches q, or BT_NIL. */
static uint32_t bt_tier_lookup(const struct bindings_table *t, const struct bt_query *q,
                               enum bindings_tier tier)
{
	const char *accts[2] = {q->account, "*"};
	size_t n = bt_is_star(q->account) ? 1 : 2;
	uint32_t best = BT_NIL;
	char key[BT_KEY_MAX];

	if (!bt_tier_applies(q, tier))
		return BT_NIL;
	for (size_t a = 0; a < n; a++) {
		size_t klen = bt_query_key(key, sizeof key, q, tier, accts[a]);
		const struct bt_slot *s = klen ? bt_find(t, key, klen) : NULL;

		for (uint32_t r = s ? s->val : BT_NIL; r != BT_NIL && r < best;
		     r = t->rules[r].next) {
			if (bt_filters_pass(&t->rules[r], q)) {
				best = r;
				break;
			}
		}
	}
	return best;
}

static void bt_match(const struct bindings_table *t, const struct bt_query *q,
                     enum bindings_tier *tier, uint32_t *rule)
{
	for (int i = BINDINGS_TIER_PEER; i <= BINDINGS_TIER_CHANNEL; i++) {
		uint32_t r = bt_tier_lookup(t, q, (enum bindings_tier)i);

		if (r != BT_NIL) {
			*tier = (enum bindings_tier)i;
			*rule = r;
			return;
		}
	}
	*rule = BT_NIL;
	*tier = t->default_agent != BINDINGS_NONE ? BINDINGS_TIER_DEFAULT : BINDINGS_TIER_NONE;
}

/* ---- session keys ---- */

struct bt_out {
	char *p;
	size_t size, len;
	bool over;
};

static void bt_put(struct bt_out *o, const char *s)
{
	size_t n = strlen(s);

	if (o->over || o->len + n + 1 > o->size) {
		o->over = true;
		return;
	}
	memcpy(o->p + o->len, s, n + 1);
	o->len += n;
}

static const char *bt_canonical(const struct bindings_table *t, const char *channel,
                                const char *peer)
{
	char key[BT_KEY_MAX];
	size_t cl = strlen(channel), pl = strlen(peer);
	const struct bt_slot *s;

	if (cl + pl + 3 > sizeof key)
		return peer;
	key[0] = 'I';
	key[1] = BT_SEP;
	memcpy(key + 2, channel, cl);
	key[2 + cl] = ':';
	memcpy(key + 3 + cl, peer, pl + 1);
	s = bt_find(t, key, cl + pl + 3);
	return s ? t->canon[s->val] : peer;
}

static int bt_session_key(const struct bindings_table *t, const char *agent,
                          const struct bt_query *q, char *out, size_t size)
{
	struct bt_out o = {.p = out, .size = size};

	if (!q->peer)
		return SB_ERR_INVAL;
	if (size)
		out[0] = '\0';
	bt_put(&o, "agent:");
	bt_put(&o, agent);
	if (q->kind == ENVELOPE_PEER_DIRECT) {
		/* the main session is the operator's alone */
		int scope = t->dm_scope == SESSION_DM_MAIN && !q->owner ? SESSION_DM_PER_CHANNEL_PEER
		                                                         : t->dm_scope;
		const char *peer =
		    scope == SESSION_DM_MAIN ? NULL : bt_canonical(t, q->channel, q->peer);

		switch (scope) {
		case SESSION_DM_PER_ACCOUNT_CHANNEL_PEER:
			bt_put(&o, ":");
			bt_put(&o, q->channel);
			bt_put(&o, ":");
			bt_put(&o, q->account);
			break;
		case SESSION_DM_PER_CHANNEL_PEER:
			bt_put(&o, ":");
			bt_put(&o, q->channel);
			break;
		default:
			break;
		}
		if (peer) {
			bt_put(&o, ":direct:");
			bt_put(&o, peer);
		} else {
			bt_put(&o, ":main");
		}
	} else {
		bt_put(&o, ":");
		bt_put(&o, q->channel);
		bt_put(&o, q->kind == ENVELOPE_PEER_GROUP ? ":group:" : ":channel:");
		bt_put(&o, q->peer);
	}
	if (q->thread) {
		bt_put(&o, strcmp(q->channel, "telegram") == 0 ? ":topic:" : ":thread:");
		bt_put(&o, q->thread);
	}
	if (o.over) {
		if (size)
			out[0] = '\0';
		return SB_ERR_TOOBIG;
	}
	return SB_OK;
}

int bindings_session_key(const struct bindings_table *t, const char *agent_id,
                         const struct envelope *env, char *out, size_t size)
{
	struct bindings_input in = {.env = env};
	struct bt_query q;

	if (!t || !agent_id || !env || !env->channel || !out)
		return SB_ERR_INVAL;
	bt_query_init(&q, &in);
	return bt_session_key(t, agent_id, &q, out, size);
}

/* ---- access ---- */

static const struct bt_channel *bt_channel_find(const struct bindings_table *t, const char *name)
{
	for (size_t i = 0; i < t->n_channels; i++)
		if (strcmp(t->channels[i].name, name) == 0)
			return &t->channels[i];
	return &t->fallback;
}

static bool bt_member(const struct bindings_table *t, char type, const char *a, const char *b)
{
	char key[BT_KEY_MAX];
	const char *parts[2] = {a, b};
	size_t klen = bt_key(key, sizeof key, type, parts, 2);

	return klen && bt_find(t, key, klen) != NULL;
}

static const struct bt_group *bt_group_find(const struct bindings_table *t,
                                            const struct bt_channel *c, const char *id)
{
	char key[BT_KEY_MAX];
	const char *parts[2] = {c->name, id};
	size_t klen;
	const struct bt_slot *s;

	if (!id || !c->name)
		return NULL;
	klen = bt_key(key, sizeof key, 'g', parts, 2);
	s = klen ? bt_find(t, key, klen) : NULL;
	return s ? &t->groups[s->val] : NULL;
}

static void bt_verdict(struct bindings_decision *d, enum bindings_verdict v, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void bt_verdict(struct bindings_decision *d, enum bindings_verdict v, const char *fmt, ...)
{
	va_list ap;

	d->verdict = v;
	va_start(ap, fmt);
	vsnprintf(d->reason, sizeof d->reason, fmt, ap);
	va_end(ap);
}

static void bt_access_direct(const struct bindings_table *t, const struct bindings_input *in,
                             const struct bt_query *q, const struct bt_channel *c,
                             struct bindings_decision *d)
{
	const char *sender = bt_opt(q->env->sender_id);
	const char *ch = q->channel;

	switch (c->dm_policy) {
	case ACCESS_DM_DISABLED:
		bt_verdict(d, BINDINGS_DENY,
		           "direct messages are off (channels.%s.dm_policy disabled)", ch);
		return;
	case ACCESS_DM_OPEN:
		bt_verdict(d, BINDINGS_ALLOW, "anyone may write (channels.%s.dm_policy open)", ch);
		return;
	default:
		break;
	}
	if (!sender) {
		bt_verdict(d, BINDINGS_DENY, "the message has no sender id to check");
		return;
	}
	if (c->dm_allow_all || (c->name && bt_member(t, 'a', c->name, sender))) {
		bt_verdict(d, BINDINGS_ALLOW, "sender %s is in channels.%s.allow_from", sender, ch);
		return;
	}
	if (in->approved && in->approved(in->approved_ud, ch, q->account, sender)) {
		bt_verdict(d, BINDINGS_ALLOW, "sender %s was approved by pairing (%s account %s)",
		           sender, ch, q->account);
		return;
	}
	if (c->dm_policy == ACCESS_DM_ALLOWLIST)
		bt_verdict(d, BINDINGS_DENY,
		           "sender %s is neither in channels.%s.allow_from nor approved "
		           "(dm_policy allowlist)",
		           sender, ch);
	else
		bt_verdict(
		    d, BINDINGS_PAIRING,
		    "sender %s is unknown: they get a pairing code for the operator to approve "
		    "(dm_policy pairing)",
		    sender);
}

static void bt_access_group(const struct bindings_table *t, const struct bt_query *q,
                            const struct bt_channel *c, struct bindings_decision *d)
{
	const char *sender = bt_opt(q->env->sender_id);
	const char *ch = q->channel, *what = envelope_peer_kind_name(q->kind);
	const char *gave_up = NULL;
	const struct bt_group *g;
	char where[96];
	bool require = true;

	if (c->group_policy == ACCESS_GROUP_DISABLED) {
		bt_verdict(d, BINDINGS_DENY, "groups are off (channels.%s.group_policy disabled)",
		           ch);
		return;
	}
	g = bt_group_find(t, c, q->peer);
	if (!g)
		g = bt_group_find(t, c, q->parent);
	if (!g && c->wildcard_group != BT_NIL)
		g = &t->groups[c->wildcard_group];
	if (!g && c->group_policy == ACCESS_GROUP_ALLOWLIST) {
		bt_verdict(d, BINDINGS_DENY,
		           "%s %s is not in channels.%s.groups (group_policy allowlist)", what,
		           q->peer, ch);
		return;
	}
	if (g) {
		snprintf(where, sizeof where, "channels.%s.groups[%zu]", ch, g->cfg_index);
		require = g->require_mention;
	} else {
		snprintf(where, sizeof where, "channels.%s.group_policy open", ch);
	}
	if (g && g->n_allow && !g->allow_all) {
		char idx[24];

		snprintf(idx, sizeof idx, "%u", (unsigned)(g - t->groups));
		if (!sender || !bt_member(t, 'm', idx, sender)) {
			bt_verdict(d, BINDINGS_DENY, "sender %s is not in %s.allow_from",
			           sender ? sender : "(none)", where);
			return;
		}
	}
	if (!require) {
		bt_verdict(d, BINDINGS_ALLOW, "%s %s allowed by %s, no mention required", what,
		           q->peer, where);
		return;
	}
	if (q->env->mentioned) {
		bt_verdict(d, BINDINGS_ALLOW, "%s %s allowed by %s, and the bot was mentioned",
		           what, q->peer, where);
		return;
	}
	for (size_t i = 0; q->env->text && i < c->n_patterns; i++) {
		int m = bt_pattern_match(c->patterns[i], q->env->text);

		if (m == 1) {
			bt_verdict(d, BINDINGS_ALLOW,
			           "%s %s allowed by %s, and mention pattern \"%s\" matched", what,
			           q->peer, where, c->pattern_src[i]);
			return;
		}
		if (m < 0)
			gave_up = c->pattern_src[i];
	}
	if (gave_up)
		bt_verdict(d, BINDINGS_MENTION_REQUIRED,
		           "%s requires a mention and the message has none (mention pattern \"%s\" "
		           "gave up at its step limit on this text)",
		           where, gave_up);
	else
		bt_verdict(d, BINDINGS_MENTION_REQUIRED,
		           "%s requires a mention and the message has none (no native mention, reply "
		           "to the bot or mention pattern match)",
		           where);
}

static void bt_access(const struct bindings_table *t, const struct bindings_input *in,
                      const struct bt_query *q, struct bindings_decision *d)
{
	const struct bt_channel *c = bt_channel_find(t, q->channel);

	if (in->sender_is_self) {
		bt_verdict(d, BINDINGS_DROP, "the bot's own message (loop prevention)");
		return;
	}
	if (in->sender_is_bot && !c->allow_bots) {
		bt_verdict(
		    d, BINDINGS_DROP,
		    "the sender is a bot and channels.%s.allow_bots is false (loop prevention)",
		    q->channel);
		return;
	}
	if (q->kind == ENVELOPE_PEER_DIRECT)
		bt_access_direct(t, in, q, c, d);
	else
		bt_access_group(t, q, c, d);
}

/* ---- routing ---- */

const char *const *bindings_reset_triggers(const struct bindings_table *t, size_t *n)
{
	*n = t ? t->n_triggers : 0;
	return t ? t->triggers : NULL;
}

bool bindings_reset_trigger(const struct bindings_table *t, const char *text, const char **rest)
{
	const char *p = text;

	if (!t || !text)
		return false;
	while (isspace((unsigned char)*p))
		p++;
	for (size_t i = 0; i < t->n_triggers; i++) {
		size_t n = strlen(t->triggers[i]);
		const char *q = p + n;

		if (!n || strncasecmp(p, t->triggers[i], n) != 0)
			continue;
		if (*q == '@')
			while (*q && !isspace((unsigned char)*q))
				q++;
		if (*q && !isspace((unsigned char)*q))
			continue;
		while (isspace((unsigned char)*q))
			q++;
		if (rest)
			*rest = q;
		return true;
	}
	return false;
}

/* Floor division for times before 1970 too. */
static int64_t bt_floor_div(int64_t a, int64_t b)
{
	int64_t q = a / b;

	return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

bool bindings_session_should_reset(const struct session_reset_config *p, int64_t last_activity_ms,
                                   int64_t now_ms, int32_t utc_offset_s)
{
	int64_t off = (int64_t)utc_offset_s * 1000, local, boundary;

	if (!p || last_activity_ms <= 0 || now_ms < last_activity_ms)
		return false;
	switch (p->mode) {
	case SESSION_RESET_IDLE:
		return now_ms - last_activity_ms >= p->idle_minutes * 60000;
	case SESSION_RESET_DAILY:
		local = now_ms + off;
		boundary = bt_floor_div(local, BT_DAY_MS) * BT_DAY_MS + p->at_hour * 3600000;
		if (boundary > local)
			boundary -= BT_DAY_MS;
		return last_activity_ms + off < boundary;
	default:
		return false;
	}
}

static int bt_route(const struct bindings_table *t, const struct bindings_input *in,
                    struct bt_query *q, struct bindings_decision *d)
{
	enum bindings_tier tier;
	uint32_t rule;
	int rc;

	memset(d, 0, sizeof *d);
	d->binding = BINDINGS_NONE;
	if (!t || !in || !in->env || !bt_opt(in->env->channel))
		return SB_ERR_INVAL;
	if ((unsigned)in->env->peer_kind > ENVELOPE_PEER_CHANNEL)
		return SB_ERR_INVAL;
	bt_query_init(q, in);
	bt_match(t, q, &tier, &rule);
	d->tier = tier;
	if (rule != BT_NIL) {
		d->agent_id = t->rules[rule].agent;
		d->binding = rule;
		d->line = t->rules[rule].line;
	} else if (tier == BINDINGS_TIER_DEFAULT) {
		d->agent_id = t->agents[t->default_agent];
	}
	d->session_type = q->thread                         ? BINDINGS_SESSION_THREAD
	                  : q->kind == ENVELOPE_PEER_DIRECT ? BINDINGS_SESSION_DIRECT
	                                                    : BINDINGS_SESSION_GROUP;
	d->reset = &t->reset[d->session_type];
	d->reset_trigger = bindings_reset_trigger(t, in->env->text, NULL);
	if (!d->agent_id) {
		bt_verdict(d, BINDINGS_DENY,
		           "not routed: no binding matches and none of the %zu agents is marked "
		           "default (fail closed)",
		           t->n_agents);
		return SB_OK;
	}
	rc = bt_session_key(t, d->agent_id, q, d->session_key, sizeof d->session_key);
	if (rc)
		return rc;
	bt_access(t, in, q, d);
	return SB_OK;
}

int bindings_route(const struct bindings_table *t, const struct bindings_input *in,
                   struct bindings_decision *out)
{
	struct bt_query q;

	if (!out)
		return SB_ERR_INVAL;
	return bt_route(t, in, &q, out);
}

/* ---- explain ---- */

/* The tier whose rules a tier looks at (parent-peer reuses the peer rules). */
static enum bindings_tier bt_rule_tier(enum bindings_tier tier)
{
	return tier == BINDINGS_TIER_PARENT ? BINDINGS_TIER_PEER : tier;
}

static const char *bt_kind(int k)
{
	return envelope_peer_kind_name((enum envelope_peer_kind)k);
}

/* Why rule r does not match q in tier, written to why; false when it
 * matches. The fields are checked in a fixed order: account, the tier's
 * own field, then guild and team. */
static bool bt_why_not(const struct bt_rule *r, const struct bt_query *q, enum bindings_tier tier,
                       char *why, size_t size)
{
	bool parent = tier == BINDINGS_TIER_PARENT;
	int kind = parent ? q->parent_kind : q->kind;
	const char *id = parent ? q->parent : q->peer, *what = parent ? "parent" : "peer";

	if (!bt_is_star(r->acct_key) && strcmp(r->acct_key, q->account) != 0) {
		snprintf(why, size, "account %s%s != %s", r->acct_key,
		         r->account ? "" : " (implied)", q->account);
		return true;
	}
	if (r->has_peer && r->peer_kind != kind) {
		snprintf(why, size, "%s kind %s != %s", what, bt_kind(r->peer_kind), bt_kind(kind));
		return true;
	}
	if (r->has_peer && !bt_is_star(r->peer_id) && !bt_same(r->peer_id, id)) {
		snprintf(why, size, "%s id %s != %s", what, r->peer_id, id ? id : "(none)");
		return true;
	}
	if (r->guild && !bt_same(r->guild, q->guild)) {
		if (q->guild)
			snprintf(why, size, "guild %s != %s", r->guild, q->guild);
		else
			snprintf(why, size, "guild %s, the message has none", r->guild);
		return true;
	}
	if (r->team && !bt_same(r->team, q->team)) {
		if (q->team)
			snprintf(why, size, "team %s != %s", r->team, q->team);
		else
			snprintf(why, size, "team %s, the message has none", r->team);
		return true;
	}
	return false;
}

static const char *bt_skip_reason(enum bindings_tier tier)
{
	switch (tier) {
	case BINDINGS_TIER_PEER:
		return "the message has no peer";
	case BINDINGS_TIER_PARENT:
		return "the message has no parent";
	case BINDINGS_TIER_GUILD:
		return "the message has no guild";
	case BINDINGS_TIER_TEAM:
		return "the message has no team";
	default:
		return "";
	}
}

/* What a tier looks for: "channel:C123", "channel:*", a guild, team,
 * account or channel name; "" when the message has none. */
static void bt_looked_for(const struct bt_query *q, enum bindings_tier tier, char *out, size_t size)
{
	out[0] = '\0';
	if (!bt_tier_applies(q, tier))
		return;
	switch (tier) {
	case BINDINGS_TIER_PEER:
		snprintf(out, size, "%s:%s", bt_kind(q->kind), q->peer ? q->peer : "");
		break;
	case BINDINGS_TIER_PARENT:
		snprintf(out, size, "%s:%s", bt_kind(q->parent_kind), q->parent ? q->parent : "");
		break;
	case BINDINGS_TIER_PEER_WILDCARD:
		snprintf(out, size, "%s:*", bt_kind(q->kind));
		break;
	case BINDINGS_TIER_GUILD:
		snprintf(out, size, "%s", q->guild ? q->guild : "");
		break;
	case BINDINGS_TIER_TEAM:
		snprintf(out, size, "%s", q->team ? q->team : "");
		break;
	case BINDINGS_TIER_ACCOUNT:
		snprintf(out, size, "%s", q->account);
		break;
	case BINDINGS_TIER_CHANNEL:
		snprintf(out, size, "%s", q->channel);
		break;
	default:
		out[0] = '\0';
		break;
	}
}

/* The default tier in words. */
static void bt_default_text(const struct bindings_table *t, char *out, size_t size)
{
	if (t->default_agent == BINDINGS_NONE)
		snprintf(out, size, "refused: %zu agents and none is marked default (fail closed)",
		         t->n_agents);
	else
		snprintf(out, size, "%s (%s)", t->agents[t->default_agent],
		         t->default_marked ? "marked default" : "the only agent");
}

/* The state of one tier in an explanation. */
enum bt_tier_state { BT_TS_SKIPPED, BT_TS_NOT_TRIED, BT_TS_EMPTY, BT_TS_NO_MATCH, BT_TS_MATCH };

static const char *const bt_tier_state_names[] = {"skipped", "not-tried", "empty", "no-match",
                                                  "match"};

static enum bt_tier_state bt_tier_state(const struct bindings_table *t, const struct bt_query *q,
                                        const struct bindings_decision *d, enum bindings_tier tier,
                                        size_t *candidates)
{
	enum bindings_tier rt = bt_rule_tier(tier);

	*candidates = 0;
	if (tier == BINDINGS_TIER_DEFAULT)
		return d->tier >= BINDINGS_TIER_DEFAULT ? BT_TS_MATCH : BT_TS_NOT_TRIED;
	if (tier > d->tier)
		return BT_TS_NOT_TRIED;
	if (!bt_tier_applies(q, tier))
		return BT_TS_SKIPPED;
	for (size_t i = 0; i < t->n_rules; i++)
		if (t->rules[i].tier == rt && strcmp(t->rules[i].channel, q->channel) == 0)
			(*candidates)++;
	if (tier == d->tier)
		return BT_TS_MATCH;
	return *candidates ? BT_TS_NO_MATCH : BT_TS_EMPTY;
}

/* One candidate's verdict in words: "yes", "no, <why>", or "matches too,
 * but bindings[k] comes first". Returns whether it matches. */
static bool bt_candidate(const struct bindings_table *t, const struct bt_query *q,
                         const struct bindings_decision *d, enum bindings_tier tier, size_t i,
                         char *out, size_t size)
{
	const struct bt_rule *r = &t->rules[i];
	char why[BINDINGS_REASON_MAX];

	if (bt_why_not(r, q, tier, why, sizeof why)) {
		snprintf(out, size, "no, %s", why);
		return false;
	}
	if (d->binding == i)
		snprintf(out, size, "yes");
	else
		snprintf(out, size, "matches too, but bindings[%zu] comes first", d->binding);
	return true;
}

static int bt_explain_text(const struct bindings_table *t, const struct bindings_input *in,
                           const struct bt_query *q, const struct bindings_decision *d,
                           struct buf *b)
{
	const struct envelope *e = in->env;
	char text[BT_TEXT_SHOWN + 4], line[BINDINGS_REASON_MAX * 2];
	int rc;

	rc = buf_printf(b, "message: channel %s, account %s", q->channel, q->account);
	if (!rc && q->guild)
		rc = buf_printf(b, ", guild %s", q->guild);
	if (!rc && q->team)
		rc = buf_printf(b, ", team %s", q->team);
	if (!rc && q->peer)
		rc = buf_printf(b, ", peer %s:%s", bt_kind(q->kind), q->peer);
	if (!rc && q->parent)
		rc = buf_printf(b, ", parent %s:%s", bt_kind(q->parent_kind), q->parent);
	if (!rc && q->thread)
		rc = buf_printf(b, ", thread %s", q->thread);
	if (!rc && bt_opt(e->sender_id))
		rc = buf_printf(b, ", sender %s", e->sender_id);
	if (!rc && e->mentioned)
		rc = buf_puts(b, ", mentioned");
	if (!rc && in->sender_is_bot)
		rc = buf_puts(b, ", from a bot");
	if (!rc && in->sender_is_self)
		rc = buf_puts(b, ", from the bot itself");
	if (!rc && e->text) {
		size_t n = 0;

		for (; e->text[n] && n < BT_TEXT_SHOWN; n++)
			text[n] = (unsigned char)e->text[n] < 0x20 ? ' ' : e->text[n];
		memcpy(text + n, e->text[n] ? "..." : "", e->text[n] ? 4 : 1);
		rc = buf_printf(b, ", text \"%s\"", text);
	}
	if (rc)
		return rc;
	if (d->agent_id) {
		rc = buf_printf(b, "\nagent:   %s\nsession: %s (%s; reset %s)", d->agent_id,
		                d->session_key, bt_session_type_names[d->session_type],
		                session_reset_mode_names[d->reset->mode]);
		if (!rc && d->reset_trigger)
			rc = buf_puts(
			    b, "\n         the text is a reset trigger: a fresh session starts");
	} else {
		bt_default_text(t, line, sizeof line);
		rc = buf_printf(b, "\nagent:   none, %s", line);
	}
	if (rc)
		return rc;
	if (d->binding != BINDINGS_NONE)
		rc = buf_printf(b, "\nbinding: bindings[%zu] at %s:%d (tier %s)", d->binding,
		                t->file, d->line, bindings_tier_name(d->tier));
	else
		rc = buf_printf(b, "\nbinding: none (tier %s)", bindings_tier_name(d->tier));
	if (!rc)
		rc = buf_printf(b, "\naccess:  %s: %s\ntiers, most specific first:\n",
		                bindings_verdict_name(d->verdict), d->reason);
	for (int ti = BINDINGS_TIER_PEER; !rc && ti <= BINDINGS_TIER_DEFAULT; ti++) {
		enum bindings_tier tier = (enum bindings_tier)ti;
		enum bindings_tier rt = bt_rule_tier(tier);
		size_t cands, shown = 0;
		enum bt_tier_state st = bt_tier_state(t, q, d, tier, &cands);
		char looked[BINDINGS_REASON_MAX];

		bt_looked_for(q, tier, looked, sizeof looked);
		rc = buf_printf(b, "  %d. %s", ti + 1, bindings_tier_name(tier));
		if (!rc && looked[0])
			rc = buf_printf(b, " (%s)", looked);
		if (rc)
			break;
		switch (st) {
		case BT_TS_SKIPPED:
			rc = buf_printf(b, ": skipped, %s\n", bt_skip_reason(tier));
			continue;
		case BT_TS_NOT_TRIED:
			rc = buf_puts(b, ": not tried\n");
			continue;
		case BT_TS_EMPTY:
			rc = buf_printf(b, ": no %s bindings in this tier\n", q->channel);
			continue;
		case BT_TS_NO_MATCH:
			rc = buf_puts(b, ": no match\n");
			break;
		case BT_TS_MATCH:
			if (tier == BINDINGS_TIER_DEFAULT) {
				bt_default_text(t, line, sizeof line);
				rc = buf_printf(b, ": %s\n", line);
				continue;
			}
			rc = buf_puts(b, ": match\n");
			break;
		}
		for (size_t i = 0; !rc && i < t->n_rules; i++) {
			const struct bt_rule *r = &t->rules[i];

			if (r->tier != rt || strcmp(r->channel, q->channel) != 0)
				continue;
			if (shown++ == BT_EXPLAIN_MAX) {
				rc = buf_printf(b, "       ... and %zu more\n",
				                cands - BT_EXPLAIN_MAX);
				break;
			}
			bt_candidate(t, q, d, tier, i, line, sizeof line);
			rc = buf_printf(b, "       bindings[%zu] (%s:%d) -> %s: %s", i, t->file,
			                r->line, r->agent, line);
			if (!rc && r->shadowed_by != BT_NIL)
				rc = buf_printf(b, "; never wins, shadowed by bindings[%u]",
				                (unsigned)r->shadowed_by);
			if (!rc)
				rc = buf_puts(b, "\n");
		}
	}
	return rc;
}

int bindings_explain(const struct bindings_table *t, const struct bindings_input *in,
                     struct buf *out)
{
	struct bindings_decision d;
	struct bt_query q;
	int rc;

	if (!out)
		return SB_ERR_INVAL;
	rc = bt_route(t, in, &q, &d);
	if (rc)
		return rc;
	return bt_explain_text(t, in, &q, &d, out);
}

/* ---- JSON ---- */

/* Sets key on o to v (taking v); a NULL v or a failure marks *ok false. */
static void bt_jset(json_t *o, const char *key, json_t *v, bool *ok)
{
	if (!v || json_object_set_new(o, key, v) != 0)
		*ok = false;
}

static json_t *bt_jstr(const char *s)
{
	return s ? json_string(s) : json_null();
}

static void bt_jappend(json_t *a, json_t *v, bool *ok)
{
	if (!v || json_array_append_new(a, v) != 0)
		*ok = false;
}

static json_t *bt_json_rule(const struct bindings_table *t, size_t i)
{
	const struct bt_rule *r = &t->rules[i];
	json_t *o = json_object(), *peer = NULL;
	bool ok = o != NULL;

	if (!ok)
		return NULL;
	if (r->has_peer) {
		peer = json_object();
		if (peer) {
			bt_jset(peer, "kind", json_string(bt_kind(r->peer_kind)), &ok);
			bt_jset(peer, "id", json_string(r->peer_id), &ok);
		}
	} else {
		peer = json_null();
	}
	bt_jset(o, "index", json_integer((json_int_t)i), &ok);
	bt_jset(o, "file", json_string(t->file), &ok);
	bt_jset(o, "line", json_integer(r->line), &ok);
	bt_jset(o, "tier", json_string(bindings_tier_name((enum bindings_tier)r->tier)), &ok);
	bt_jset(o, "agent", json_string(r->agent), &ok);
	bt_jset(o, "channel", json_string(r->channel), &ok);
	bt_jset(o, "account", bt_jstr(r->account), &ok);
	bt_jset(o, "matches_account", json_string(r->acct_key), &ok);
	bt_jset(o, "peer", peer, &ok);
	bt_jset(o, "guild", bt_jstr(r->guild), &ok);
	bt_jset(o, "team", bt_jstr(r->team), &ok);
	bt_jset(o, "comment", bt_jstr(r->comment), &ok);
	bt_jset(o, "shadowed_by",
	        r->shadowed_by == BT_NIL ? json_null() : json_integer((json_int_t)r->shadowed_by),
	        &ok);
	if (!ok) {
		json_decref(o);
		return NULL;
	}
	return o;
}

static json_t *bt_json_message(const struct bindings_input *in, const struct bt_query *q)
{
	const struct envelope *e = in->env;
	json_t *o = json_object();
	bool ok = o != NULL;

	if (!ok)
		return NULL;
	bt_jset(o, "channel", json_string(q->channel), &ok);
	bt_jset(o, "account", json_string(q->account), &ok);
	bt_jset(o, "peer_kind", json_string(bt_kind(q->kind)), &ok);
	bt_jset(o, "peer_id", bt_jstr(q->peer), &ok);
	bt_jset(o, "parent_kind", q->parent ? json_string(bt_kind(q->parent_kind)) : json_null(),
	        &ok);
	bt_jset(o, "parent_id", bt_jstr(q->parent), &ok);
	bt_jset(o, "thread_id", bt_jstr(q->thread), &ok);
	bt_jset(o, "guild_id", bt_jstr(q->guild), &ok);
	bt_jset(o, "team_id", bt_jstr(q->team), &ok);
	bt_jset(o, "sender_id", bt_jstr(bt_opt(e->sender_id)), &ok);
	bt_jset(o, "mentioned", json_boolean(e->mentioned), &ok);
	bt_jset(o, "from_bot", json_boolean(in->sender_is_bot), &ok);
	bt_jset(o, "from_self", json_boolean(in->sender_is_self), &ok);
	bt_jset(o, "text", bt_jstr(e->text), &ok);
	if (!ok) {
		json_decref(o);
		return NULL;
	}
	return o;
}

static json_t *bt_json_tier(const struct bindings_table *t, const struct bt_query *q,
                            const struct bindings_decision *d, enum bindings_tier tier)
{
	enum bindings_tier rt = bt_rule_tier(tier);
	size_t cands, shown = 0;
	enum bt_tier_state st = bt_tier_state(t, q, d, tier, &cands);
	char looked[BINDINGS_REASON_MAX], why[BINDINGS_REASON_MAX * 2];
	json_t *o = json_object(), *list;
	bool ok = o != NULL;

	if (!ok)
		return NULL;
	bt_looked_for(q, tier, looked, sizeof looked);
	bt_jset(o, "tier", json_string(bindings_tier_name(tier)), &ok);
	bt_jset(o, "status", json_string(bt_tier_state_names[st]), &ok);
	bt_jset(o, "looked_for", looked[0] ? json_string(looked) : json_null(), &ok);
	if (st == BT_TS_SKIPPED)
		bt_jset(o, "reason", json_string(bt_skip_reason(tier)), &ok);
	if (tier == BINDINGS_TIER_DEFAULT) {
		bt_default_text(t, why, sizeof why);
		bt_jset(o, "reason", json_string(why), &ok);
		bt_jset(o, "agent",
		        t->default_agent == BINDINGS_NONE
		            ? json_null()
		            : json_string(t->agents[t->default_agent]),
		        &ok);
	}
	if (ok && (st == BT_TS_NO_MATCH || (st == BT_TS_MATCH && tier != BINDINGS_TIER_DEFAULT))) {
		list = json_array();
		bt_jset(o, "candidates", list, &ok);
		for (size_t i = 0; ok && i < t->n_rules; i++) {
			const struct bt_rule *r = &t->rules[i];
			json_t *c;
			bool m;

			if (r->tier != rt || strcmp(r->channel, q->channel) != 0)
				continue;
			if (shown++ == BT_EXPLAIN_MAX)
				break;
			m = bt_candidate(t, q, d, tier, i, why, sizeof why);
			c = json_object();
			if (!c) {
				ok = false;
				break;
			}
			bt_jset(c, "index", json_integer((json_int_t)i), &ok);
			bt_jset(c, "line", json_integer(r->line), &ok);
			bt_jset(c, "agent", json_string(r->agent), &ok);
			bt_jset(c, "match", json_boolean(m), &ok);
			bt_jset(c, "winner", json_boolean(d->binding == i), &ok);
			bt_jset(c, "reason", json_string(why), &ok);
			bt_jset(c, "shadowed_by",
			        r->shadowed_by == BT_NIL ? json_null()
			                                 : json_integer((json_int_t)r->shadowed_by),
			        &ok);
			bt_jappend(list, c, &ok);
		}
		bt_jset(
		    o, "more",
		    json_integer((json_int_t)(cands > BT_EXPLAIN_MAX ? cands - BT_EXPLAIN_MAX : 0)),
		    &ok);
	}
	if (!ok) {
		json_decref(o);
		return NULL;
	}
	return o;
}

int bindings_explain_json(const struct bindings_table *t, const struct bindings_input *in,
                          json_t **out)
{
	struct bindings_decision d;
	struct bt_query q;
	json_t *o = NULL, *v, *tiers;
	bool ok;
	int rc;

	if (!out)
		return SB_ERR_INVAL;
	*out = NULL;
	rc = bt_route(t, in, &q, &d);
	if (rc)
		return rc;
	rc = SB_ERR_NOMEM;
	o = json_object();
	ok = o != NULL;
	if (!ok)
		goto out;
	bt_jset(o, "message", bt_json_message(in, &q), &ok);
	bt_jset(o, "agent", bt_jstr(d.agent_id), &ok);
	bt_jset(o, "session_key", d.agent_id ? json_string(d.session_key) : json_null(), &ok);
	bt_jset(o, "session_type", json_string(bt_session_type_names[d.session_type]), &ok);
	v = json_object();
	if (v) {
		bt_jset(v, "mode", json_string(session_reset_mode_names[d.reset->mode]), &ok);
		bt_jset(v, "at_hour", json_integer(d.reset->at_hour), &ok);
		bt_jset(v, "idle_minutes", json_integer(d.reset->idle_minutes), &ok);
	}
	bt_jset(o, "reset", v, &ok);
	bt_jset(o, "reset_trigger", json_boolean(d.reset_trigger), &ok);
	bt_jset(o, "tier", json_string(bindings_tier_name(d.tier)), &ok);
	bt_jset(o, "binding", d.binding == BINDINGS_NONE ? json_null() : bt_json_rule(t, d.binding),
	        &ok);
	v = json_object();
	if (v) {
		bt_jset(v, "verdict", json_string(bindings_verdict_name(d.verdict)), &ok);
		bt_jset(v, "reason", json_string(d.reason), &ok);
	}
	bt_jset(o, "access", v, &ok);
	tiers = json_array();
	bt_jset(o, "tiers", tiers, &ok);
	for (int ti = BINDINGS_TIER_PEER; ok && ti <= BINDINGS_TIER_DEFAULT; ti++)
		bt_jappend(tiers, bt_json_tier(t, &q, &d, (enum bindings_tier)ti), &ok);
	if (!ok)
		goto out;
	*out = o;
	o = NULL;
	rc = SB_OK;
out:
	json_decref(o);
	return rc;
}

/* ---- listing ---- */

static int bt_describe(const struct bt_rule *r, struct buf *b)
{
	int rc = buf_printf(b, "%s account=%s", r->channel, r->account ? r->account : "(default)");

	if (!rc && r->has_peer)
		rc = buf_printf(b, " peer=%s:%s", bt_kind(r->peer_kind), r->peer_id);
	if (!rc && r->guild)
		rc = buf_printf(b, " guild=%s", r->guild);
	if (!rc && r->team)
		rc = buf_printf(b, " team=%s", r->team);
	return rc;
}

int bindings_list(const struct bindings_table *t, struct buf *out)
{
	char line[BINDINGS_REASON_MAX];
	int rc;

	if (!t || !out)
		return SB_ERR_INVAL;
	rc = buf_printf(out,
	                "%zu binding%s in %s, most specific tier first, file order within a "
	                "tier:\n",
	                t->n_rules, t->n_rules == 1 ? "" : "s", t->file);
	for (int ti = BINDINGS_TIER_PEER; !rc && ti <= BINDINGS_TIER_CHANNEL; ti++) {
		bool first = true;

		if (ti == BINDINGS_TIER_PARENT)
			continue;
		for (size_t i = 0; !rc && i < t->n_rules; i++) {
			const struct bt_rule *r = &t->rules[i];

			if (r->tier != ti)
				continue;
			if (first) {
				rc = buf_printf(out, "%s%s\n",
				                bindings_tier_name((enum bindings_tier)ti),
				                ti == BINDINGS_TIER_PEER
				                    ? " (also tried against a thread's parent, as "
				                      "parent-peer)"
				                    : "");
				first = false;
			}
			if (!rc)
				rc = buf_printf(out, "  bindings[%zu]  %s:%d  ", i, t->file,
				                r->line);
			if (!rc)
				rc = bt_describe(r, out);
			if (!rc)
				rc = buf_printf(out, "  -> %s", r->agent);
			if (!rc && r->comment)
				rc = buf_printf(out, "  # %s", r->comment);
			if (!rc && r->shadowed_by != BT_NIL)
				rc = buf_printf(out,
				                "\n    never wins: bindings[%u] (%s:%d) matches "
				                "everything it does and comes first",
				                (unsigned)r->shadowed_by, t->file,
				                t->rules[r->shadowed_by].line);
			if (!rc)
				rc = buf_puts(out, "\n");
		}
	}
	if (rc)
		return rc;
	bt_default_text(t, line, sizeof line);
	return buf_printf(out, "default: %s\n", line);
}

int bindings_list_json(const struct bindings_table *t, json_t **out)
{
	json_t *o = NULL, *list;
	bool ok;

	if (!t || !out)
		return SB_ERR_INVAL;
	*out = NULL;
	o = json_object();
	ok = o != NULL;
	if (!ok)
		return SB_ERR_NOMEM;
	bt_jset(o, "file", json_string(t->file), &ok);
	list = json_array();
	bt_jset(o, "bindings", list, &ok);
	for (int ti = BINDINGS_TIER_PEER; ok && ti <= BINDINGS_TIER_CHANNEL; ti++)
		for (size_t i = 0; ok && i < t->n_rules; i++)
			if (t->rules[i].tier == ti)
				bt_jappend(list, bt_json_rule(t, i), &ok);
	if (t->default_agent == BINDINGS_NONE) {
		bt_jset(o, "default_agent", json_null(), &ok);
		bt_jset(o, "default_reason", json_null(), &ok);
	} else {
		bt_jset(o, "default_agent", json_string(t->agents[t->default_agent]), &ok);
		bt_jset(o, "default_reason",
		        json_string(t->default_marked ? "marked default" : "the only agent"), &ok);
	}
	if (!ok) {
		json_decref(o);
		return SB_ERR_NOMEM;
	}
	*out = o;
	return SB_OK;
}

/* ---- load-time checks ---- */

static bool bt_in(const char *s, const char *const *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (v[i] && strcmp(v[i], s) == 0)
			return true;
	return false;
}

/* "a, b, c" into out (truncated quietly). */
static void bt_join(const char *const *v, size_t n, char *out, size_t size)
{
	struct bt_out o = {.p = out, .size = size};

	out[0] = '\0';
	for (size_t i = 0; i < n && !o.over; i++) {
		if (!v[i])
			continue; /* an entry whose id failed to load */
		if (o.len)
			bt_put(&o, ", ");
		bt_put(&o, v[i]);
	}
}

struct bt_dup {
	char *key;
	size_t index;
};

static int bt_dup_cmp(const void *a, const void *b)
{
	const struct bt_dup *x = a, *y = b;
	int c = strcmp(x->key, y->key);

	if (c)
		return c;
	return (x->index > y->index) - (x->index < y->index);
}

/* A string naming everything a binding matches on, equal for two bindings
 * exactly when they match the same messages in the same tier. Each field
 * is length-prefixed so that no id can imitate another field. */
static char *bt_match_key(const struct binding_config *b)
{
	const struct binding_match_config *m = &b->match;
	const char *f[6] = {m->channel, m->account, NULL, m->peer.given ? m->peer.id : NULL,
	                    m->guild,   m->team};
	char kind[2] = {(char)('0' + (m->peer.given ? m->peer.kind : 9)), '\0'};
	struct buf k;

	f[2] = kind;
	buf_init(&k, 4096);
	if (buf_printf(&k, "%d", (int)bt_classify(b)))
		goto fail;
	for (size_t i = 0; i < 6; i++) {
		int rc = f[i] ? buf_printf(&k, "|%zu:%s", strlen(f[i]), f[i]) : buf_puts(&k, "|-");

		if (rc)
			goto fail;
	}
	return buf_steal(&k);
fail:
	buf_free(&k);
	return NULL;
}

int bindings_check(const struct binding_config *b, size_t n, const char *list_key,
                   const char *const *agent_ids, size_t n_agents, const char *const *channels,
                   size_t n_channels, struct cfg_error_ctx *ctx)
{
	struct bt_dup *dups = NULL;
	size_t nd = 0;
	char key[96], names[512];
	int added = 0;

	for (size_t i = 0; i < n; i++) {
		if (b[i].agent && !bt_in(b[i].agent, agent_ids, n_agents)) {
			snprintf(key, sizeof key, "%s[%zu].agent", list_key, i);
			bt_join(agent_ids, n_agents, names, sizeof names);
			cfg_error_add(ctx, key, NULL, "unknown agent \"%s\" (agents: %s)",
			              b[i].agent, names);
			added++;
		}
		if (b[i].match.channel && !bt_in(b[i].match.channel, channels, n_channels)) {
			snprintf(key, sizeof key, "%s[%zu].match.channel", list_key, i);
			bt_join(channels, n_channels, names, sizeof names);
			cfg_error_add(ctx, key, NULL, "unknown channel \"%s\" (channels: %s)",
			              b[i].match.channel, names);
			added++;
		}
	}
	/* Duplicates: sort the match keys; equal neighbours are duplicates.
	 * Without memory the check is skipped: loading fails anyway. */
	dups = calloc(n ? n : 1, sizeof *dups);
	if (!dups)
		return added;
	for (size_t i = 0; i < n; i++) {
		if (!b[i].match.channel || (b[i].match.peer.given && !b[i].match.peer.id))
			continue;
		dups[nd].key = bt_match_key(&b[i]);
		if (!dups[nd].key)
			goto out;
		dups[nd++].index = i;
	}
	qsort(dups, nd, sizeof *dups, bt_dup_cmp);
	for (size_t i = 1; i < nd; i++) {
		size_t first = i;

		while (first > 0 && strcmp(dups[first - 1].key, dups[i].key) == 0)
			first--;
		if (first == i)
			continue;
		snprintf(key, sizeof key, "%s[%zu].match", list_key, dups[i].index);
		cfg_error_add(ctx, key, "remove one of them, or make the matches differ",
		              "the same match as %s[%zu] (line %d), which comes first, so this "
		              "binding would never apply",
		              list_key, dups[first].index, b[dups[first].index].line);
		added++;
	}
out:
	for (size_t i = 0; i < nd; i++)
		free(dups[i].key);
	free(dups);
	return added;
}
