/*
 * test_dispatch_lease.c - when the dispatcher lets a new inbox entry go in
 * already claimed (dispatcher_put_lease), against the real SQLite store: only
 * once a claim has come back short with no entry put pending since it was
 * asked, never past max_pending, never before the start or while draining;
 * an entry put pending (the dispatcher was full) stops it until a claim has
 * taken what waits, so that no new message passes an older one.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <uv.h>

#include "gateway/core/err.h"
#include "gateway/pipeline/dispatcher.h"
#include "gateway/store/store.h"

struct fx {
	char dir[256];
	char path[320];
	uv_loop_t loop;
	struct store *st;
	struct dispatcher *d;
};

static void spin(struct fx *f, int ms)
{
	for (int i = 0; i < ms; i++)
		uv_run(&f->loop, UV_RUN_NOWAIT), usleep(1000);
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof *f);
	struct store_options so = {0};
	struct dispatcher_options o;

	assert_non_null(f);
	snprintf(f->dir, sizeof f->dir, "%s/sb-lease-XXXXXX",
	         getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	assert_non_null(mkdtemp(f->dir));
	snprintf(f->path, sizeof f->path, "%s/state.db", f->dir);
	assert_int_equal(uv_loop_init(&f->loop), 0);
	so.path = f->path;
	assert_int_equal(store_open(&f->st, &f->loop, &so), SB_OK);
	memset(&o, 0, sizeof o);
	o.loop = &f->loop;
	o.store = f->st;
	o.max_pending = 3;
	assert_int_equal(dispatcher_new(&f->d, &o), SB_OK);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;
	char p[400];

	dispatcher_free(f->d);
	store_close(f->st);
	uv_run(&f->loop, UV_RUN_DEFAULT);
	assert_int_equal(uv_loop_close(&f->loop), 0);
	for (int i = 0; i < 3; i++) {
		static const char *const sfx[] = {"", "-wal", "-shm"};

		snprintf(p, sizeof p, "%s%s", f->path, sfx[i]);
		unlink(p);
	}
	rmdir(f->dir);
	free(f);
	return 0;
}

static void test_lease_rules(void **state)
{
	struct fx *f = *state;

	/* not started: the start's claim takes what a previous run left */
	assert_int_equal(dispatcher_put_lease(f->d), 0);
	dispatcher_start(f->d);
	/* the start's claim is still out: the inbox is not known yet */
	assert_int_equal(dispatcher_put_lease(f->d), 0);
	spin(f, 100);
	/* and an entry was put pending while it was out: still unknown */
	assert_int_equal(dispatcher_put_lease(f->d), 0);
	dispatcher_kick(f->d);
	spin(f, 100);
	/* a claim came back short with nothing put since: three leases
	 * (max_pending), then the dispatcher is full */
	for (int i = 0; i < 3; i++)
		assert_true(dispatcher_put_lease(f->d) > 0);
	assert_int_equal(dispatcher_put_lease(f->d), 0);
	/* the three puts failed: room again, but one entry went in pending
	 * (the fourth): no lease until a claim has taken it */
	for (int i = 0; i < 3; i++)
		dispatcher_put_done(f->d, true, SB_ERR_STORE, 0, false, NULL);
	assert_int_equal(dispatcher_put_lease(f->d), 0);
	dispatcher_kick(f->d);
	spin(f, 100);
	assert_true(dispatcher_put_lease(f->d) > 0);
	dispatcher_put_done(f->d, true, SB_ERR_STORE, 0, false, NULL);
	/* a put that was not leased changes nothing */
	dispatcher_put_done(f->d, false, SB_OK, 5, false, NULL);
	assert_true(dispatcher_put_lease(f->d) > 0);
	dispatcher_put_done(f->d, true, SB_ERR_STORE, 0, false, NULL);
	/* draining: never */
	dispatcher_drain(f->d);
	assert_int_equal(dispatcher_put_lease(f->d), 0);
	assert_int_equal(dispatcher_put_lease(NULL), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_lease_rules, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
