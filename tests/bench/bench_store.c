/*
 * bench_store.c - the store's inbox_put throughput: 50,000 puts with 256
 * outstanding (group commit at work) and 2,000 with one at a time (one
 * fsync each), on a fresh SQLite file in TMPDIR. Prints name: value lines
 * for tests/bench/run.sh.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <uv.h>

#include "gateway/core/clock.h"
#include "gateway/core/err.h"
#include "gateway/store/store.h"

struct bench {
	struct store *st;
	long sent, done, total;
	char payload[512];
};

static void bench_put(struct bench *b);

static void bench_cb(void *ud, int rc, int64_t id, bool dup)
{
	struct bench *b = ud;

	(void)id;
	(void)dup;
	if (rc != SB_OK) {
		fprintf(stderr, "bench_store: put failed: %s\n", sb_strerror(rc));
		exit(1);
	}
	b->done++;
	if (b->sent < b->total)
		bench_put(b);
}

static void bench_put(struct bench *b)
{
	char key[32];
	struct store_inbox_new m = {
	    .channel = "bench", .account = "default", .dedupe_key = key, .payload = b->payload};

	snprintf(key, sizeof key, "k%ld", b->sent);
	if (store_inbox_put(b->st, &m, bench_cb, b) != SB_OK) {
		fprintf(stderr, "bench_store: put refused\n");
		exit(1);
	}
	b->sent++;
}

static double bench_run(long total, long window)
{
	const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	struct store_options o = {0};
	struct bench b = {0};
	uv_loop_t loop;
	char path[512];
	double t0, s;

	snprintf(path, sizeof path, "%s/bench-store-%d.db", tmp, (int)getpid());
	memset(b.payload, 'x', sizeof b.payload - 1);
	b.total = total;
	uv_loop_init(&loop);
	o.path = path;
	if (store_open(&b.st, &loop, &o) != SB_OK) {
		fprintf(stderr, "bench_store: cannot open %s\n", path);
		exit(1);
	}
	t0 = clock_mono_s();
	for (long i = 0; i < window && b.sent < total; i++)
		bench_put(&b);
	while (b.done < total)
		uv_run(&loop, UV_RUN_ONCE);
	s = clock_mono_s() - t0;
	store_close(b.st);
	uv_run(&loop, UV_RUN_DEFAULT);
	uv_loop_close(&loop);
	unlink(path);
	snprintf(path + strlen(path), sizeof path - strlen(path), "-wal");
	unlink(path);
	path[strlen(path) - 4] = '\0';
	snprintf(path + strlen(path), sizeof path - strlen(path), "-shm");
	unlink(path);
	return (double)total / s;
}

int main(void)
{
	printf("store_inbox_put_per_s_256_outstanding: %.0f\n", bench_run(50000, 256));
	printf("store_inbox_put_per_s_1_outstanding: %.0f\n", bench_run(2000, 1));
	return 0;
}
