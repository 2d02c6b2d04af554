/*
 * test_notify.c - the service-manager notifications (gateway/daemon/
 * notify.c): NOTIFY_SOCKET leaves the environment, the socket is
 * close-on-exec, abstract and path addresses, one datagram per state, and
 * addresses that are refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "gateway/core/err.h"
#include "gateway/daemon/notify.h"
#include "tests/integration/harness.h"

static int listen_on(const char *name)
{
	struct sockaddr_un sa;
	size_t n = strlen(name);
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	memset(&sa, 0, sizeof sa);
	sa.sun_family = AF_UNIX;
	memcpy(sa.sun_path, name, n);
	if (name[0] == '@')
		sa.sun_path[0] = '\0';
	assert_int_equal(
	    bind(fd, (struct sockaddr *)&sa,
	         (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + (name[0] == '/'))),
	    0);
	return fd;
}

static void recv_equal(int fd, const char *want)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	char got[NOTIFY_MESSAGE_MAX + 1];
	ssize_t n;

	assert_int_equal(poll(&p, 1, 2000), 1);
	n = recv(fd, got, sizeof got - 1, 0);
	assert_true(n > 0);
	got[n] = '\0';
	assert_string_equal(got, want);
}

static void test_abstract_name(void **state)
{
	struct notify n;
	char name[100], want[64];
	int fd, flags;

	(void)state;
	snprintf(name, sizeof name, "@sb-test-notify-unit-%ld", (long)getpid());
	fd = listen_on(name);
	setenv("NOTIFY_SOCKET", name, 1);
	assert_int_equal(notify_init(&n), SB_OK);
	/* children must not inherit it: neither the variable nor the socket */
	assert_null(getenv("NOTIFY_SOCKET"));
	assert_true(n.fd >= 0);
	flags = fcntl(n.fd, F_GETFD);
	assert_true(flags >= 0 && (flags & FD_CLOEXEC));

	assert_int_equal(notify_ready(&n), SB_OK);
	snprintf(want, sizeof want, "READY=1\nMAINPID=%ld", (long)getpid());
	recv_equal(fd, want);
	assert_int_equal(notify_stopping(&n), SB_OK);
	recv_equal(fd, "STOPPING=1");
	notify_close(&n);
	assert_int_equal(n.fd, -1);
	notify_close(&n); /* twice is fine */
	close(fd);
}

static void test_path_and_reloading(void **state)
{
	struct notify n;
	char dir[512], path[600];
	struct pollfd p;
	char got[NOTIFY_MESSAGE_MAX + 1];
	ssize_t len;
	int fd;

	(void)state;
	assert_int_equal(harness_tmpdir(dir, sizeof dir), 0);
	snprintf(path, sizeof path, "%s/notify", dir);
	fd = listen_on(path);
	setenv("NOTIFY_SOCKET", path, 1);
	assert_int_equal(notify_init(&n), SB_OK);
	assert_null(getenv("NOTIFY_SOCKET"));
	assert_int_equal(notify_reloading(&n), SB_OK);
	p = (struct pollfd){.fd = fd, .events = POLLIN};
	assert_int_equal(poll(&p, 1, 2000), 1);
	len = recv(fd, got, sizeof got - 1, 0);
	assert_true(len > 0);
	got[len] = '\0';
	assert_int_equal(strncmp(got, "RELOADING=1\nMONOTONIC_USEC=", 27), 0);
	assert_true(strtoull(got + 27, NULL, 10) > 0);
	notify_close(&n);
	close(fd);
	harness_rmrf(dir);
}

static void test_unset_and_refused(void **state)
{
	struct notify n;
	char longname[200];

	(void)state;
	unsetenv("NOTIFY_SOCKET");
	assert_int_equal(notify_init(&n), SB_OK);
	assert_int_equal(n.fd, -1);
	assert_int_equal(notify_ready(&n), SB_OK); /* nobody listens: nothing to do */
	notify_close(&n);

	setenv("NOTIFY_SOCKET", "", 1);
	assert_int_equal(notify_init(&n), SB_OK);
	assert_int_equal(n.fd, -1);
	assert_null(getenv("NOTIFY_SOCKET"));

	setenv("NOTIFY_SOCKET", "relative/path", 1);
	assert_int_equal(notify_init(&n), SB_ERR_INVAL);
	assert_int_equal(n.fd, -1);
	assert_null(getenv("NOTIFY_SOCKET"));

	setenv("NOTIFY_SOCKET", "@", 1);
	assert_int_equal(notify_init(&n), SB_ERR_INVAL);

	memset(longname, 'a', sizeof longname - 1);
	longname[0] = '/';
	longname[sizeof longname - 1] = '\0';
	setenv("NOTIFY_SOCKET", longname, 1);
	assert_int_equal(notify_init(&n), SB_ERR_INVAL);
	assert_int_equal(n.fd, -1);
	assert_null(getenv("NOTIFY_SOCKET"));

	/* A path nobody listens on: the send fails, and says so. */
	setenv("NOTIFY_SOCKET", "/nonexistent-switchboard-notify", 1);
	assert_int_equal(notify_init(&n), SB_OK);
	assert_int_equal(notify_stopping(&n), SB_ERR_IO);
	notify_close(&n);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_abstract_name),
	    cmocka_unit_test(test_path_and_reloading),
	    cmocka_unit_test(test_unset_and_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
