/*
 * rng.c - random bytes drawn from the kernel in batches. See rng.h.
 */
#include "gateway/core/rng.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <sodium.h>
#include <stdint.h>
#include <string.h>
#include <sys/random.h>

#include "gateway/core/err.h"

struct rng_pool {
	unsigned char buf[RNG_BATCH];
	size_t left; /* unread bytes at the end of buf */
	size_t refills;
};

static _Thread_local struct rng_pool rng_pool;

/* Fills p from the kernel; false when it cannot (the caller falls back). */
static bool rng_kernel(void *p, size_t n)
{
	unsigned char *at = p;

	while (n) {
		ssize_t got = getrandom(at, n, 0);

		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			return false;
		at += got;
		n -= (size_t)got;
	}
	return true;
}

static void rng_buf(void *const out, const size_t n)
{
	struct rng_pool *p = &rng_pool;
	unsigned char *to = out;
	size_t left = n;

	if (n > RNG_BATCH / 4) {
		randombytes_sysrandom_implementation.buf(out, n);
		return;
	}
	while (left) {
		size_t take;

		if (!p->left) {
			if (!rng_kernel(p->buf, sizeof p->buf)) {
				randombytes_sysrandom_implementation.buf(to, left);
				return;
			}
			p->left = sizeof p->buf;
			p->refills++;
		}
		take = left < p->left ? left : p->left;
		memcpy(to, p->buf + sizeof p->buf - p->left, take);
		sodium_memzero(p->buf + sizeof p->buf - p->left, take);
		p->left -= take;
		to += take;
		left -= take;
	}
}

static uint32_t rng_random(void)
{
	uint32_t v;

	rng_buf(&v, sizeof v);
	return v;
}

static void rng_stir(void)
{
	sodium_memzero(rng_pool.buf, sizeof rng_pool.buf);
	rng_pool.left = 0;
}

static const char *rng_name(void)
{
	return "switchboard-batched-getrandom";
}

static int rng_close(void)
{
	rng_stir();
	return 0;
}

/* In the child of a fork: only the forking thread is left, and its buffer
 * is the parent's. */
static void rng_after_fork(void)
{
	rng_stir();
}

static struct randombytes_implementation rng_impl = {
    .implementation_name = rng_name,
    .random = rng_random,
    .stir = rng_stir,
    .uniform = NULL, /* libsodium's, over rng_random */
    .buf = rng_buf,
    .close = rng_close,
};

int rng_install(void)
{
	if (pthread_atfork(NULL, NULL, rng_after_fork) != 0)
		return SB_ERR_IO;
	return randombytes_set_implementation(&rng_impl) == 0 ? SB_OK : SB_ERR_IO;
}

size_t rng_refills(void)
{
	return rng_pool.refills;
}
