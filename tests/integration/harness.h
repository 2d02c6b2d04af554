/*
 * harness.h - the integration harness: run the real switchboard binary with a
 * temporary home on a free loopback port, wait for /readyz, talk to it over
 * HTTP, stop it, and check how it exited. Used by every integration test.
 *
 * Blocking helpers, for test processes only.
 */
#ifndef SB_TESTS_HARNESS_H
#define SB_TESTS_HARNESS_H

#include <stddef.h>
#include <sys/types.h>

#include "gateway/core/buf.h"

struct harness_daemon {
	pid_t pid;
	int port;
	char home[512];
	char log_path[600]; /* the daemon's stderr */
};

/* Whether the tests run under CI (CI=true), where everything the tests need
 * is installed: a missing piece is then a failure, not a skip. */
int harness_in_ci(void);

/* Skips the current test because the machine lacks what it needs (why),
 * saying so on stderr; under CI that is a failure instead. A macro: cmocka's
 * skip() and fail_msg() jump out of the test. */
#define HARNESS_SKIP(why)                                                                          \
	do {                                                                                       \
		if (harness_in_ci())                                                               \
			fail_msg("CI=true, and %s", (why));                                        \
		fprintf(stderr, "skipped: %s\n", (why));                                          \
		skip();                                                                            \
	} while (0)

/* The gateway binary the tests run: SWITCHBOARD_TEST_BINARY when set (to
 * point a test at another build, e.g. of an older commit, to see it fail),
 * else the one this tree built. */
const char *harness_binary(void);

/* Creates a fresh temporary directory (to be used as SWITCHBOARD_HOME). */
int harness_tmpdir(char *out, size_t size);

/* Removes a directory tree. */
void harness_rmrf(const char *path);

/* A port on 127.0.0.1 that was free a moment ago. */
int harness_free_port(void);

/* Runs `switchboard ARGS...` with SWITCHBOARD_HOME=home, waits for it,
 * captures stdout and stderr (merged) into out (may be NULL) and returns
 * the exit status (or -1 if it did not exit normally). */
int harness_cli(const char *home, struct buf *out, const char *const *args);

/* Starts `switchboard ARGS...` in the background with SWITCHBOARD_HOME=home,
 * its stdout and stderr appended to out_path. Returns the pid, -1 on error. */
pid_t harness_cli_start(const char *home, const char *out_path, const char *const *args);

/* Waits up to timeout_ms for pid to exit; its exit code (128+signal when
 * killed), or -1 on timeout (the process is then killed). */
int harness_wait(pid_t pid, int timeout_ms);

/* Reads a whole file into out. 0 on success. */
int harness_read_file(const char *path, struct buf *out);

/* Starts `switchboard gateway --port P` (plus extra args, NULL-terminated or
 * NULL) with SWITCHBOARD_HOME=home; stderr goes to home/gateway.log. Runs
 * `switchboard init` first when home has no config yet. */
int harness_daemon_start(struct harness_daemon *d, const char *home, const char *const *extra);

/* Polls GET /readyz until 200 or timeout. Returns 0 when ready. */
int harness_wait_ready(const struct harness_daemon *d, int timeout_ms);

/* One HTTP request to 127.0.0.1:port. Returns the status (0 on failure);
 * body receives the response body when not NULL. headers: NULL-terminated
 * "Name: value" list or NULL. */
long harness_http(int port, const char *method, const char *path, const char *const *headers,
                  const char *body, struct buf *resp);

/* A raw loopback connection to port (for partial requests); -1 on error. */
int harness_connect(int port);

/* Reads from fd until EOF (or timeout_ms) into out; returns the HTTP status
 * of the response it read, or 0. */
long harness_read_response(int fd, struct buf *out, int timeout_ms);

/* Sends sig and waits up to timeout_ms for the process to exit. Returns the
 * exit code, 128+signal if it died of a signal, or -1 on timeout (the process
 * is then killed). */
int harness_daemon_stop(struct harness_daemon *d, int sig, int timeout_ms);
/* The same, for a stop that may end in the status expected (a crash test's
 * gateway that dies of its crash point while stopping): only another
 * status shows the log's tail. */
int harness_daemon_stop_expect(struct harness_daemon *d, int sig, int timeout_ms, int expected);

/* Reads the daemon's log into out. */
int harness_daemon_log(const struct harness_daemon *d, struct buf *out);

/* A Node.js test peer from tests/fakes/: runs `node SB_SOURCE_DIR/tests/fakes/
 * NAME 0 ARGS...`, reads the "PORT n" line it prints first, and keeps its
 * stdin open (the peer exits when it closes). */
struct harness_peer {
	pid_t pid;
	int port;
	int stdin_fd;
	int stdout_fd; /* kept open so a later write does not kill the peer */
};

int harness_peer_start(struct harness_peer *p, const char *name, const char *const *args);
void harness_peer_stop(struct harness_peer *p);

/* How many user messages in a transcript file's text end with needle (the
 * JSON-escaped end of the message's first text block). */
int harness_count_user_texts(const char *data, const char *needle);

/* Writes text to path (creating or replacing it). */
int harness_write_file(const char *path, const char *text);

#endif
