/*
 * rng.h - random bytes drawn from the kernel in batches.
 *
 * libsodium's default source asks the kernel (getrandom) for every call:
 * a transcript entry's id, a run id, a webhook id, a jitter. The gateway
 * makes about fifteen such calls per message, each a system call. rng
 * installs a source for libsodium (randombytes_buf, randombytes_random,
 * randombytes_uniform) that fills a small per-thread buffer from getrandom
 * and hands it out, each byte once, wiping what it hands out. Requests larger
 * than the buffer, and any failure of getrandom, go to libsodium's own
 * kernel source. A child made by fork starts with an empty buffer (a
 * pthread_atfork handler), so parent and child never share bytes.
 *
 * The buffer is per thread, the one piece of process-wide state here: like
 * libsodium's own source it has to be, since randombytes_buf takes no
 * context.
 */
#ifndef SB_CORE_RNG_H
#define SB_CORE_RNG_H

#include <stddef.h>

/* Bytes fetched from the kernel at a time, per thread. */
#define RNG_BATCH 512

/* Makes rng libsodium's source of random bytes. Call before sodium_init,
 * once, before other threads use libsodium (main thread, at start-up).
 * 0 or SB_ERR_IO (libsodium refused it; its default source stays). */
int rng_install(void);

/* How many times this thread asked the kernel for a batch (for tests). */
size_t rng_refills(void);

#endif
