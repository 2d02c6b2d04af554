/*
 * test_store_crash.c - the store keeps every acknowledged write across
 * SIGKILL.
 *
 * Each round forks a child that opens the store on one database and runs 16
 * producers on its uv loop, each putting inbox entries with fresh dedupe keys
 * "r<round>-p<k>-<n>" one after another, and now and then putting again a key
 * it (or an earlier round) already had acknowledged, which must come back as
 * the same id with duplicate=true. A put whose callback reports SB_OK is
 * acknowledged by writing "A <key> <id>" to a pipe. The parent SIGKILLs the
 * child at a random moment (5 to 150 ms after the fork), collects the
 * acknowledgements and starts the next round: 10 rounds, more (up to 40) while
 * fewer than 300 puts were acknowledged, as on a loaded machine. At the end it checks with a plain
 * sqlite3 connection that every acknowledged key is stored exactly once with its id and payload,
 * that no dedupe key appears twice and that the database passes integrity_check; then it reopens
 * the database with the store itself.
 *
 * SB_CRASH_SEED=<n> replays a run (the seed is printed).
 */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>
#include <uv.h>

#include "gateway/core/err.h"
#include "gateway/core/num.h"
#include "gateway/store/store.h"

#define CRASH_ROUNDS 10     /* at least */
#define CRASH_ROUNDS_MAX 40 /* more rounds only while acks < CRASH_MIN_ACKS */
#define CRASH_BUDGET_MS 20000
#define CRASH_PRODUCERS 16
#define CRASH_KILL_MIN_MS 5
#define CRASH_KILL_MAX_MS 150
#define CRASH_MIN_ACKS 300
#define CRASH_CHANNEL "crash"
#define CRASH_KEY_MAX 48

struct ack {
	char key[CRASH_KEY_MAX];
	int64_t id;
	int round;
};

/* The parent's record of every acknowledgement; the child inherits a copy
 * through fork and re-puts some of the earlier rounds' keys. */
static struct ack *g_acks;
static size_t g_nacks, g_capacks;

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- the child ---- */

struct producer {
	struct child *c;
	int k;
	int n;        /* next fresh key number */
	int64_t *ids; /* ids[i]: the acknowledged id of key i (0 = not yet) */
	size_t cap;
	/* the put in flight */
	int reput_of;          /* -1: a fresh key; else the key number put again */
	const struct ack *old; /* an earlier round's key put again */
	char key[CRASH_KEY_MAX];
};

struct child {
	uv_loop_t loop;
	uv_timer_t watchdog;
	struct store *st;
	int round;
	int fd;
	size_t prev_acks; /* acks of earlier rounds (inherited) */
	unsigned seed;
	struct producer p[CRASH_PRODUCERS];
};

static void child_write(struct child *c, const char *line)
{
	size_t len = strlen(line), off = 0;

	/* One line is one write of less than PIPE_BUF bytes: never split. */
	while (off < len) {
		ssize_t w = write(c->fd, line + off, len - off);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			_exit(5);
		off += (size_t)w;
	}
}

static void child_fail(struct child *c, const char *what, const char *key, int64_t a, int64_t b)
{
	char line[160];

	snprintf(line, sizeof line, "B %s %s %lld %lld\n", what, key, (long long)a, (long long)b);
	child_write(c, line);
	_exit(6);
}

static void producer_next(struct producer *p);

static void producer_done(void *ud, int rc, int64_t id, bool duplicate)
{
	struct producer *p = ud;
	struct child *c = p->c;
	char line[128];

	if (rc != SB_OK)
		child_fail(c, "put-failed", p->key, rc, 0);
	if (p->old) {
		if (!duplicate || id != p->old->id)
			child_fail(c, "old-reput", p->key, id, p->old->id);
	} else if (p->reput_of >= 0) {
		if (!duplicate || id != p->ids[p->reput_of])
			child_fail(c, "reput", p->key, id, p->ids[p->reput_of]);
	} else {
		if (duplicate || id <= 0)
			child_fail(c, "fresh-dup", p->key, id, duplicate);
		p->ids[p->n] = id;
		p->n++;
		snprintf(line, sizeof line, "A %s %lld\n", p->key, (long long)id);
		child_write(c, line); /* the acknowledgement */
	}
	producer_next(p);
}

static void producer_next(struct producer *p)
{
	struct child *c = p->c;
	unsigned r = (unsigned)rand_r(&c->seed);
	char payload[96];
	struct store_inbox_new m = {CRASH_CHANNEL, "default", p->key, payload, 0};
	int rc;

	p->old = NULL;
	p->reput_of = -1;
	if ((size_t)p->n + 1 >= p->cap) {
		size_t cap = p->cap ? p->cap * 2 : 256;
		int64_t *ids = realloc(p->ids, cap * sizeof *ids);

		if (!ids)
			_exit(7);
		p->ids = ids;
		p->cap = cap;
	}
	if (r % 8 == 0 && c->prev_acks > 0) {
		p->old = &g_acks[(r / 8) % c->prev_acks];
		snprintf(p->key, sizeof p->key, "%s", p->old->key);
	} else if (r % 8 == 1 && p->n > 0) {
		p->reput_of = (int)((r / 8) % (unsigned)p->n);
		snprintf(p->key, sizeof p->key, "r%d-p%d-%d", c->round, p->k, p->reput_of);
	} else {
		snprintf(p->key, sizeof p->key, "r%d-p%d-%d", c->round, p->k, p->n);
	}
	snprintf(payload, sizeof payload, "{\"key\":\"%s\"}", p->key);
	rc = store_inbox_put(c->st, &m, producer_done, p);
	if (rc != SB_OK)
		child_fail(c, "submit", p->key, rc, 0);
}

static void child_watchdog(uv_timer_t *t)
{
	_exit(8); /* the parent should have killed us long ago */
}

static void child_main(const char *path, int round, int fd, unsigned seed)
{
	struct child *c = calloc(1, sizeof *c);
	struct store_options o;

	if (!c)
		_exit(2);
	c->round = round;
	c->fd = fd;
	c->seed = seed;
	c->prev_acks = g_nacks;
	if (uv_loop_init(&c->loop) != 0 || uv_timer_init(&c->loop, &c->watchdog) != 0)
		_exit(2);
	uv_timer_start(&c->watchdog, child_watchdog, 10000, 0);
	memset(&o, 0, sizeof o);
	o.path = path;
	o.busy_timeout_ms = 5000;
	if (store_open(&c->st, &c->loop, &o) != SB_OK)
		_exit(3);
	child_write(c, "R\n");
	for (int k = 0; k < CRASH_PRODUCERS; k++) {
		c->p[k].c = c;
		c->p[k].k = k;
		producer_next(&c->p[k]);
	}
	uv_run(&c->loop, UV_RUN_DEFAULT);
	_exit(4);
}

/* ---- the parent ---- */

struct round_log {
	char buf[256]; /* a partial line carried to the next read */
	size_t len;
	size_t acks;
	bool ready;
};

static void add_ack(const char *key, int64_t id, int round)
{
	if (g_nacks == g_capacks) {
		size_t cap = g_capacks ? g_capacks * 2 : 1024;
		struct ack *a = realloc(g_acks, cap * sizeof *a);

		assert_non_null(a);
		g_acks = a;
		g_capacks = cap;
	}
	assert_true(strlen(key) < CRASH_KEY_MAX);
	snprintf(g_acks[g_nacks].key, CRASH_KEY_MAX, "%s", key);
	g_acks[g_nacks].id = id;
	g_acks[g_nacks].round = round;
	g_nacks++;
}

static void parse_line(struct round_log *rl, char *line, int round)
{
	char *sp;
	int64_t id;

	if (strcmp(line, "R") == 0) {
		rl->ready = true;
		return;
	}
	if (line[0] == 'B')
		fail_msg("child reported: %s", line);
	assert_true(line[0] == 'A' && line[1] == ' ');
	sp = strchr(line + 2, ' ');
	assert_non_null(sp);
	*sp = '\0';
	assert_int_equal(num_parse_i64(sp + 1, 1, INT64_MAX, &id), SB_OK);
	add_ack(line + 2, id, round);
	rl->acks++;
}

/* Reads what is available (or waits up to timeout_ms). Returns false at EOF. */
static bool read_pipe(int fd, struct round_log *rl, int round, int timeout_ms)
{
	struct pollfd pfd = {.fd = fd, .events = POLLIN};
	char chunk[4096];
	ssize_t n;
	int pr = poll(&pfd, 1, timeout_ms);

	if (pr < 0 && errno == EINTR)
		return true;
	assert_true(pr >= 0);
	if (pr == 0)
		return true;
	n = read(fd, chunk, sizeof chunk);
	if (n < 0 && errno == EINTR)
		return true;
	assert_true(n >= 0);
	if (n == 0)
		return false;
	for (ssize_t i = 0; i < n; i++) {
		if (chunk[i] == '\n') {
			rl->buf[rl->len] = '\0';
			parse_line(rl, rl->buf, round);
			rl->len = 0;
			continue;
		}
		assert_true(rl->len + 1 < sizeof rl->buf);
		rl->buf[rl->len++] = chunk[i];
	}
	return true;
}

static size_t run_round(const char *path, int round, unsigned *seed)
{
	struct round_log rl = {{0}, 0, 0, false};
	int fds[2];
	int delay = CRASH_KILL_MIN_MS + rand_r(seed) % (CRASH_KILL_MAX_MS - CRASH_KILL_MIN_MS + 1);
	unsigned child_seed = (unsigned)rand_r(seed);
	int64_t deadline;
	int status = 0;
	pid_t pid;

	assert_int_equal(pipe(fds), 0);
	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(fds[0]);
		child_main(path, round, fds[1], child_seed);
	}
	deadline = mono_ms() + delay;
	close(fds[1]);
	for (int64_t now = mono_ms(); now < deadline; now = mono_ms())
		if (!read_pipe(fds[0], &rl, round, (int)(deadline - now)))
			break;
	kill(pid, SIGKILL);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	/* Whatever was written before the kill is still in the pipe. */
	while (read_pipe(fds[0], &rl, round, 1000))
		;
	close(fds[0]);
	assert_int_equal(rl.len, 0); /* no torn line */
	if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL)
		fail_msg("round %d: the child exited by itself (status 0x%x)", round, status);
	print_message("round %d: killed after %d ms, store %s, %zu acks\n", round, delay,
	              rl.ready ? "open" : "still opening", rl.acks);
	return rl.acks;
}

static void stats_cb(void *ud, int rc, const struct store_stats *st)
{
	struct store_stats *out = ud;

	assert_int_equal(rc, SB_OK);
	*out = *st;
}

static void test_store_crash(void **state)
{
	char dir[256], path[320], sql_path[400], text[64];
	const char *env = getenv("SB_CRASH_SEED");
	uint64_t seed64 = (uint64_t)time(NULL) ^ (uint64_t)getpid();
	unsigned seed;
	sqlite3 *db = NULL;
	sqlite3_stmt *st = NULL;
	int64_t rows = 0, dup_keys = -1, mismatches = 0;
	size_t rounds_with_acks = 0;
	int rounds;
	int64_t t0 = mono_ms();
	int n;

	if (env)
		assert_int_equal(num_parse_u64(env, UINT32_MAX, &seed64), SB_OK);
	seed = (unsigned)seed64;
	print_message("seed %u (SB_CRASH_SEED to replay)\n", seed);
	n = snprintf(dir, sizeof dir, "%s/sb-crash-XXXXXX",
	             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	assert_true(n > 0 && (size_t)n < sizeof dir);
	assert_non_null(mkdtemp(dir));
	n = snprintf(path, sizeof path, "%s/state.db", dir);
	assert_true(n > 0 && (size_t)n < sizeof path);

	/* On a loaded machine a round acknowledges less: go on (within a
	 * budget) until there is enough evidence. */
	for (rounds = 0; rounds < CRASH_ROUNDS_MAX; rounds++) {
		if (rounds >= CRASH_ROUNDS &&
		    (g_nacks >= CRASH_MIN_ACKS || mono_ms() - t0 > CRASH_BUDGET_MS))
			break;
		if (run_round(path, rounds, &seed) > 0)
			rounds_with_acks++;
	}

	/* Check the file as it is after the last crash, with plain sqlite3. */
	assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, NULL),
	                 SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	snprintf(text, sizeof text, "%s", (const char *)sqlite3_column_text(st, 0));
	assert_string_equal(text, "ok");
	sqlite3_finalize(st);

	assert_int_equal(sqlite3_prepare_v2(db, "SELECT count(*) FROM inbox", -1, &st, NULL),
	                 SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	rows = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);

	assert_int_equal(sqlite3_prepare_v2(db,
	                                    "SELECT count(*) FROM (SELECT 1 FROM inbox GROUP BY"
	                                    " channel, account, dedupe_key HAVING count(*) > 1)",
	                                    -1, &st, NULL),
	                 SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	dup_keys = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	assert_int_equal(dup_keys, 0);

	/* Every acknowledged key: there exactly once, with its id and payload. */
	assert_int_equal(sqlite3_prepare_v2(db,
	                                    "SELECT count(*), min(id), min(payload) FROM inbox"
	                                    " WHERE channel = ?1 AND account = 'default'"
	                                    " AND dedupe_key = ?2",
	                                    -1, &st, NULL),
	                 SQLITE_OK);
	for (size_t i = 0; i < g_nacks; i++) {
		char want[96];

		snprintf(want, sizeof want, "{\"key\":\"%s\"}", g_acks[i].key);
		sqlite3_bind_text(st, 1, CRASH_CHANNEL, -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 2, g_acks[i].key, -1, SQLITE_STATIC);
		assert_int_equal(sqlite3_step(st), SQLITE_ROW);
		if (sqlite3_column_int64(st, 0) != 1 ||
		    sqlite3_column_int64(st, 1) != g_acks[i].id ||
		    strcmp((const char *)sqlite3_column_text(st, 2), want) != 0) {
			print_error("lost or changed: %s (acked id %lld, round %d)\n",
			            g_acks[i].key, (long long)g_acks[i].id, g_acks[i].round);
			mismatches++;
		}
		sqlite3_reset(st);
	}
	sqlite3_finalize(st);
	assert_int_equal(sqlite3_close(db), SQLITE_OK);
	snprintf(sql_path, sizeof sql_path, "%s", path);

	print_message("crash test: %d rounds (%zu with acks), %zu acknowledged, %lld rows, "
	              "%lld lost, %lld duplicate keys, %.1f s\n",
	              rounds, rounds_with_acks, g_nacks, (long long)rows, (long long)mismatches,
	              (long long)dup_keys, (double)(mono_ms() - t0) / 1000.0);
	assert_int_equal(mismatches, 0);
	assert_true(rows >= (int64_t)g_nacks);
	assert_true(g_nacks >= CRASH_MIN_ACKS);

	/* The store itself reopens the crashed file and sees every row. */
	{
		uv_loop_t loop;
		struct store *s = NULL;
		struct store_options o = {.path = sql_path};
		struct store_stats stats = {-1, -1, -1};

		assert_int_equal(uv_loop_init(&loop), 0);
		assert_int_equal(store_open(&s, &loop, &o), SB_OK);
		assert_int_equal(store_stats(s, stats_cb, &stats), SB_OK);
		store_close(s); /* runs the callback */
		uv_run(&loop, UV_RUN_DEFAULT);
		assert_int_equal(uv_loop_close(&loop), 0);
		assert_int_equal(stats.inbox_pending, rows);
	}

	{
		static const char *const suffix[] = {"", "-wal", "-shm"};

		for (size_t i = 0; i < sizeof suffix / sizeof *suffix; i++) {
			snprintf(sql_path, sizeof sql_path, "%s%s", path, suffix[i]);
			unlink(sql_path);
		}
		rmdir(dir);
	}
	free(g_acks);
	g_acks = NULL;
	g_nacks = g_capacks = 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_store_crash),
	};

	return cmocka_run_group_tests_name("store_crash", tests, NULL, NULL);
}
