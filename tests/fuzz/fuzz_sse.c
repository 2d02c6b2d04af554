/*
 * fuzz_sse.c - libFuzzer harness for the Server-Sent Events parser
 * (agents/providers/sse.h), differential: the input is parsed once in one sse_feed
 * and once in pseudo-random chunks (sizes 0 to 64, and now and then one byte
 * at a time), and both must give the same events, in order, and the same
 * outcome. Every event is checked (a name, data NUL-terminated at len, data
 * within the bound), the parser's buffers stay within the bound, and an
 * error sticks.
 *
 * The parameters come from a hash of the input, so the seeds in
 * tests/fuzz/corpus/sse/ are plain event streams: the event bound (the 4 MiB
 * default, or 8, 64 or 1,024 bytes, to reach the "too big" paths) and
 * whether the callback refuses the k-th event (k = 1..7) or never.
 * Built by `make fuzz` (clang, -fsanitize=fuzzer,address,undefined).
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agents/providers/sse.h"
#include "gateway/core/err.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* What a run saw: a digest of the events, in order. */
struct seen {
	size_t max_event;
	unsigned refuse_at; /* refuse the k-th event (1-based); 0 = never */
	unsigned events;
	uint64_t digest;
	size_t bytes;
};

static uint64_t fnv1a(uint64_t h, const void *p, size_t n)
{
	const unsigned char *c = p;

	for (size_t i = 0; i < n; i++) {
		h ^= c[i];
		h *= 1099511628211ull;
	}
	return h;
}

static int on_event(void *ud, const char *name, const char *d, size_t len)
{
	struct seen *s = ud;
	size_t nlen;

	if (!name || !d || d[len] != '\0' || len >= s->max_event)
		abort();
	/* The name is within the bound, or "message" (no "event:" named
	 * the event), which may pass a tiny bound. A name may hold NUL bytes,
	 * so its C string may be shorter (even empty). */
	nlen = strlen(name);
	if (nlen > s->max_event && strcmp(name, "message") != 0)
		abort();
	s->events++;
	s->bytes += len;
	s->digest = fnv1a(s->digest, name, nlen + 1);
	s->digest = fnv1a(s->digest, &len, sizeof len);
	s->digest = fnv1a(s->digest, d, len);
	if (s->refuse_at && s->events == s->refuse_at)
		return SB_ERR_INVAL;
	return SB_OK;
}

static void check_bounds(const struct sse *p)
{
	if (p->line.len > p->max_event || p->data.len > p->max_event ||
	    p->name.len > p->max_event || p->id.len > p->max_event ||
	    strlen(sse_last_id(p)) > p->max_event)
		abort();
}

/* xorshift64*: chunk sizes from the input's hash. */
static uint64_t next_rand(uint64_t *x)
{
	*x ^= *x >> 12;
	*x ^= *x << 25;
	*x ^= *x >> 27;
	return *x * 2685821657736338717ull;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const size_t bounds[4] = {0, 8, 64, 1024};
	const char *in = (const char *)data;
	uint64_t h = fnv1a(14695981039346656037ull, data, size), rnd = h | 1;
	struct seen whole, chunked;
	struct sse a, b;
	int rc_a, rc_b, fin_a, fin_b;
	size_t off = 0;

	memset(&whole, 0, sizeof whole);
	whole.max_event = bounds[h & 3] ? bounds[h & 3] : SSE_MAX_EVENT_DEFAULT;
	whole.refuse_at = (unsigned)((h >> 2) & 7);
	chunked = whole;

	sse_init(&a, bounds[h & 3], on_event, &whole);
	rc_a = sse_feed(&a, in, size);
	check_bounds(&a);
	fin_a = sse_finish(&a);

	sse_init(&b, bounds[h & 3], on_event, &chunked);
	rc_b = SB_OK;
	while (off < size && rc_b == SB_OK) {
		uint64_t r = next_rand(&rnd);
		size_t n = (r >> 8) % 8 == 0 ? 1 : (size_t)(r % 65);

		if (n > size - off)
			n = size - off;
		rc_b = sse_feed(&b, n ? in + off : NULL, n);
		check_bounds(&b);
		off += n;
	}
	if (rc_b == SB_OK)
		rc_b = sse_feed(&b, NULL, 0);
	fin_b = sse_finish(&b);

	/* Splitting the stream changes nothing. */
	if (rc_a != rc_b || fin_a != fin_b || whole.events != chunked.events ||
	    whole.digest != chunked.digest || whole.bytes != chunked.bytes ||
	    strcmp(sse_last_id(&a), sse_last_id(&b)) != 0)
		abort();
	/* An error sticks; so does the refusal. */
	if (rc_a != SB_OK && (sse_feed(&a, "\n\n", 2) != rc_a || sse_finish(&a) != rc_a))
		abort();
	if (whole.refuse_at && whole.events >= whole.refuse_at &&
	    (rc_a != SB_ERR_INVAL || whole.events != whole.refuse_at))
		abort();
	sse_free(&a);
	sse_free(&b);
	sse_free(&b); /* twice is harmless */
	return 0;
}
