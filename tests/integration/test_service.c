/*
 * test_service.c - the gateway as a systemd Type=notify service, seen from
 * the service manager's side: this test plays the manager, with its own
 * AF_UNIX datagram socket in NOTIFY_SOCKET (a path, then an abstract
 * "@name"), and checks that READY=1 (with MAINPID= the gateway's pid) comes
 * only when /readyz answers 200, that a SIGHUP gives RELOADING=1 then
 * READY=1, that SIGTERM gives STOPPING=1 before a clean exit, and that an
 * unusable NOTIFY_SOCKET does not stop the gateway from serving.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"

#define NOTIFY_WAIT_MS 30000

/* The manager's end: a datagram socket bound to name ("/path" or "@name"),
 * its address length in *len. -1 on error. */
static int manager_socket(const char *name)
{
	struct sockaddr_un sa;
	size_t n = strlen(name);
	socklen_t len;
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	if (fd < 0 || n >= sizeof sa.sun_path)
		return -1;
	memset(&sa, 0, sizeof sa);
	sa.sun_family = AF_UNIX;
	memcpy(sa.sun_path, name, n);
	if (name[0] == '@')
		sa.sun_path[0] = '\0';
	len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + (name[0] == '/'));
	if (bind(fd, (struct sockaddr *)&sa, len) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* The next datagram within timeout_ms into out (NUL-terminated); its
 * length, or -1 when none came. */
static int manager_recv(int fd, char *out, size_t size, int timeout_ms)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	ssize_t n;

	if (poll(&p, 1, timeout_ms) != 1)
		return -1;
	n = recv(fd, out, size - 1, 0);
	if (n < 0)
		return -1;
	out[n] = '\0';
	return (int)n;
}

/* Whether msg (newline-separated KEY=VALUE) has the line line. */
static int has_line(const char *msg, const char *line)
{
	size_t len = strlen(line);

	for (const char *p = msg; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
		if (strncmp(p, line, len) == 0 && (p[len] == '\n' || p[len] == '\0'))
			return 1;
	return 0;
}

/* Starts a gateway in a fresh home with NOTIFY_SOCKET=name (only the
 * gateway's environment has it). */
static void start_with_notify(struct harness_daemon *d, char *home, size_t size, const char *name)
{
	const char *init[] = {"init", NULL};

	assert_int_equal(harness_tmpdir(home, size), 0);
	assert_int_equal(harness_cli(home, NULL, init), 0);
	assert_int_equal(setenv("NOTIFY_SOCKET", name, 1), 0);
	assert_int_equal(harness_daemon_start(d, home, NULL), 0);
	unsetenv("NOTIFY_SOCKET");
}

/* Waits for READY=1 as the first datagram, and checks that the gateway
 * serves /readyz 200 the moment it arrives. */
static void expect_ready(struct harness_daemon *d, int fd)
{
	char msg[512], pid[64];

	assert_true(manager_recv(fd, msg, sizeof msg, NOTIFY_WAIT_MS) > 0);
	assert_true(has_line(msg, "READY=1"));
	snprintf(pid, sizeof pid, "MAINPID=%ld", (long)d->pid);
	if (!has_line(msg, pid))
		fail_msg("READY=1 without %s: \"%s\"", pid, msg);
	assert_int_equal(harness_http(d->port, "GET", "/readyz", NULL, NULL, NULL), 200);
}

/* Each test's gateway, killed by the teardown when a failed assertion
 * left it running. */
static int setup(void **state)
{
	*state = calloc(1, sizeof(struct harness_daemon));
	return *state ? 0 : -1;
}

static int teardown(void **state)
{
	struct harness_daemon *d = *state;

	if (d->pid > 0 && waitpid(d->pid, NULL, WNOHANG) == 0) {
		kill(d->pid, SIGKILL);
		waitpid(d->pid, NULL, 0);
	}
	free(d);
	return 0;
}

static void test_ready_reload_stop(void **state)
{
	struct harness_daemon *gw = *state;
	char home[512], dir[512], sock[600], msg[512];
	int fd;
	long code;

	assert_int_equal(harness_tmpdir(dir, sizeof dir), 0);
	snprintf(sock, sizeof sock, "%s/notify", dir);
	fd = manager_socket(sock);
	assert_true(fd >= 0);
	start_with_notify(gw, home, sizeof home, sock);

	/* Nothing is said while the gateway starts: the first datagram is
	 * READY=1, and by then /readyz is 200. Before it, /readyz is never
	 * 200 (or not answered at all). */
	for (;;) {
		struct pollfd p = {.fd = fd, .events = POLLIN};

		if (poll(&p, 1, 0) == 1)
			break;
		code = harness_http(gw->port, "GET", "/readyz", NULL, NULL, NULL);
		if (code == 200) {
			/* The gateway may have turned ready between the poll and
			 * the request: READY=1 must then be on its way. */
			assert_true(manager_recv(fd, msg, sizeof msg, 2000) > 0);
			assert_true(has_line(msg, "READY=1"));
			goto ready;
		}
		usleep(5000);
	}
	expect_ready(gw, fd);
ready:
	/* A reload is bracketed: RELOADING=1, then READY=1 again. */
	assert_int_equal(kill(gw->pid, SIGHUP), 0);
	assert_true(manager_recv(fd, msg, sizeof msg, NOTIFY_WAIT_MS) > 0);
	if (!has_line(msg, "RELOADING=1"))
		fail_msg("after SIGHUP, expected RELOADING=1, got \"%s\"", msg);
	assert_non_null(strstr(msg, "MONOTONIC_USEC="));
	expect_ready(gw, fd);

	/* SIGTERM: STOPPING=1, then a clean exit. */
	assert_int_equal(kill(gw->pid, SIGTERM), 0);
	assert_true(manager_recv(fd, msg, sizeof msg, NOTIFY_WAIT_MS) > 0);
	if (!has_line(msg, "STOPPING=1"))
		fail_msg("after SIGTERM, expected STOPPING=1, got \"%s\"", msg);
	assert_int_equal(harness_wait(gw->pid, 20000), 0);
	close(fd);
	harness_rmrf(home);
	harness_rmrf(dir);
}

static void test_abstract_socket(void **state)
{
	struct harness_daemon *gw = *state;
	char home[512], name[108], msg[512];
	int fd;

	snprintf(name, sizeof name, "@switchboard-test-notify-%ld-%ld", (long)getpid(),
	         (long)time(NULL));
	fd = manager_socket(name);
	assert_true(fd >= 0);
	start_with_notify(gw, home, sizeof home, name);
	expect_ready(gw, fd);
	assert_int_equal(harness_daemon_stop(gw, SIGTERM, 20000), 0);
	assert_true(manager_recv(fd, msg, sizeof msg, 1000) > 0);
	assert_true(has_line(msg, "STOPPING=1"));
	close(fd);
	harness_rmrf(home);
}

static void test_unusable_socket_still_serves(void **state)
{
	struct harness_daemon *gw = *state;
	char home[512];
	struct buf log;

	start_with_notify(gw, home, sizeof home, "not/absolute");
	assert_int_equal(harness_wait_ready(gw, NOTIFY_WAIT_MS), 0);
	assert_int_equal(harness_daemon_stop(gw, SIGTERM, 20000), 0);
	buf_init(&log, 1 << 20);
	assert_int_equal(harness_daemon_log(gw, &log), 0);
	assert_non_null(strstr(log.data, "NOTIFY_SOCKET is unusable"));
	buf_free(&log);
	harness_rmrf(home);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_ready_reload_stop, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_abstract_socket, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_unusable_socket_still_serves, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
