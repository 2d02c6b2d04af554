/*
 * bench_bindings.c - the routing table's cost with 10, 1,000 and 10,000
 * bindings: compile time, memory, and full routing decisions per second
 * (tier lookup, session key and access verdict, as the dispatcher asks).
 *
 *   bench_bindings [SECONDS_PER_SIZE]      (default 0.5)
 *
 * The bindings spread over every tier (exact peers, peer wildcards per
 * account, guilds, teams, accounts, and one channel-wide binding per
 * channel); the messages hit each tier in turn, and one in eight matches
 * nothing and goes to the default agent. Memory is the table's own count
 * of the bytes it allocated, and the heap growth mallinfo2 sees while
 * compiling (in use plus mmapped blocks; zero under ASan, whose allocator
 * mallinfo2 does not see). Prints `name: value` lines.
 */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bindings/bindings.h"
#include "gateway/core/err.h"

#define BENCH_MSGS 4096
#define BENCH_ID 32

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static const char *const bench_channels[] = {"slack", "telegram", "webchat", "webhook"};

/* Binding i, by tier. Strings live in ids[i]. */
static void make_binding(struct binding_config *b, size_t i, char (*ids)[BENCH_ID])
{
	memset(b, 0, sizeof *b);
	b->agent = (char *)(i % 2 ? "work" : "ops");
	b->line = (int)(i * 2 + 2);
	b->match.channel = (char *)bench_channels[i % 4];
	snprintf(ids[i], BENCH_ID, "id%zu", i);
	switch (i % 6) {
	case 0:
	case 1: /* exact peer: channels and groups */
		b->match.peer.given = true;
		b->match.peer.kind = i % 6 == 0 ? ENVELOPE_PEER_CHANNEL : ENVELOPE_PEER_GROUP;
		b->match.peer.id = ids[i];
		break;
	case 2: /* peer wildcard on one account */
		b->match.peer.given = true;
		b->match.peer.kind = ENVELOPE_PEER_DIRECT;
		b->match.peer.id = (char *)"*";
		b->match.account = ids[i];
		break;
	case 3:
		b->match.guild = ids[i];
		break;
	case 4:
		b->match.team = ids[i];
		break;
	default:
		b->match.account = ids[i];
		break;
	}
}

/* Message k against n bindings: hits binding (k * 7919) % n through its
 * tier, or (one in eight) matches nothing. */
static void make_message(struct envelope *e, size_t k, size_t n, char (*ids)[BENCH_ID],
                         char (*senders)[BENCH_ID])
{
	size_t i = (k * 7919) % n;

	memset(e, 0, sizeof *e);
	snprintf(senders[k], BENCH_ID, "user%zu", k % 97);
	e->sender_id = senders[k];
	e->channel = bench_channels[i % 4];
	e->account = "default";
	e->peer_kind = ENVELOPE_PEER_GROUP;
	e->peer_id = "room-without-binding";
	e->mentioned = true;
	e->text = "hello";
	if (k % 8 == 7) {
		e->channel = "nowhere";
		return;
	}
	switch (i % 6) {
	case 0:
	case 1:
		e->peer_kind = i % 6 == 0 ? ENVELOPE_PEER_CHANNEL : ENVELOPE_PEER_GROUP;
		e->peer_id = ids[i];
		if (k % 3 == 0) { /* a thread in it: found through the parent */
			e->parent_id = ids[i];
			e->peer_id = "thread-peer";
			e->thread_id = "1699.1";
		}
		break;
	case 2:
		e->peer_kind = ENVELOPE_PEER_DIRECT;
		e->peer_id = senders[k];
		e->account = ids[i];
		break;
	case 3:
		e->guild_id = ids[i];
		break;
	case 4:
		e->team_id = ids[i];
		break;
	default:
		e->account = ids[i];
		break;
	}
}

static int bench_size(size_t n, double seconds)
{
	static const char *const agents[] = {"main", "ops", "work"};
	struct access_config open_groups = {.dm_policy = ACCESS_DM_OPEN,
	                                    .group_policy = ACCESS_GROUP_OPEN};
	struct bindings_channel_access ch[4];
	size_t nb = n - 4; /* plus one channel-wide binding per channel */
	struct binding_config *b = calloc(n, sizeof *b);
	char(*ids)[BENCH_ID] = calloc(n, sizeof *ids);
	char(*senders)[BENCH_ID] = calloc(BENCH_MSGS, sizeof *senders);
	struct envelope *msgs = calloc(BENCH_MSGS, sizeof *msgs);
	struct bindings_source src = {.file = "bench.yaml",
	                              .agent_ids = agents,
	                              .n_agents = 3,
	                              .default_agent = 0,
	                              .channels = ch,
	                              .n_channels = 4};
	struct bindings_table *t = NULL;
	struct mallinfo2 m0, m1;
	double t0, t1, compile_s, lookups = 0;
	size_t hits[BINDINGS_TIER_NONE + 1] = {0};
	int rc = 1;

	if (!b || !ids || !senders || !msgs)
		goto out;
	for (size_t i = 0; i < 4; i++) {
		ch[i].channel = bench_channels[i];
		ch[i].access = &open_groups;
	}
	for (size_t i = 0; i < nb; i++)
		make_binding(&b[i], i, ids);
	for (size_t i = 0; i < 4; i++) {
		b[nb + i].agent = (char *)"main";
		b[nb + i].match.channel = (char *)bench_channels[i];
		b[nb + i].match.account = (char *)"*";
		b[nb + i].match.peer.kind = ENVELOPE_PEER_DIRECT;
	}
	src.bindings = b;
	src.n_bindings = n;
	for (size_t k = 0; k < BENCH_MSGS; k++)
		make_message(&msgs[k], k, nb, ids, senders);

	m0 = mallinfo2();
	t0 = now_s();
	if (bindings_table_new(&t, &src) != SB_OK) {
		fprintf(stderr, "bench_bindings: compile failed\n");
		goto out;
	}
	compile_s = now_s() - t0;
	m1 = mallinfo2();

	t0 = now_s();
	do {
		for (size_t k = 0; k < BENCH_MSGS; k++) {
			struct bindings_input in = {.env = &msgs[k]};
			struct bindings_decision d;

			if (bindings_route(t, &in, &d) != SB_OK || !d.agent_id) {
				fprintf(stderr, "bench_bindings: message %zu not routed\n", k);
				goto out;
			}
			if (lookups < BENCH_MSGS)
				hits[d.tier]++;
			lookups++;
		}
		t1 = now_s();
	} while (t1 - t0 < seconds);

	printf("bindings_%zu_compile_ms: %.3f\n", n, compile_s * 1e3);
	printf("bindings_%zu_table_bytes: %zu\n", n, bindings_table_memory(t));
	printf("bindings_%zu_heap_growth_bytes: %zu\n", n,
	       (m1.uordblks + m1.hblkhd) - (m0.uordblks + m0.hblkhd));
	printf("bindings_%zu_lookups_per_sec: %.0f\n", n, lookups / (t1 - t0));
	printf("bindings_%zu_ns_per_lookup: %.1f\n", n, (t1 - t0) / lookups * 1e9);
	printf("bindings_%zu_tiers_hit:", n);
	for (int i = 0; i <= BINDINGS_TIER_NONE; i++)
		if (hits[i])
			printf(" %s=%zu", bindings_tier_name((enum bindings_tier)i), hits[i]);
	printf("\n");
	rc = 0;
out:
	bindings_table_free(t);
	free(msgs);
	free(senders);
	free(ids);
	free(b);
	return rc;
}

int main(int argc, char **argv)
{
	static const size_t sizes[] = {10, 1000, 10000};
	double seconds = 0.5;

	if (argc > 1) {
		char *end = NULL;

		seconds = strtod(argv[1], &end);
		if (!end || *end || seconds <= 0 || seconds > 60) {
			fprintf(stderr, "usage: bench_bindings [SECONDS_PER_SIZE (0-60]]\n");
			return 2;
		}
	}
	for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
		if (bench_size(sizes[i], seconds))
			return 1;
	return 0;
}
