/*
 * test_slack_fake.c - the Slack test double (tests/fakes/fake_slack.js) is
 * faithful to Slack as Slack's own clients see it: runs
 * tests/fakes/slack_official_clients.js, which drives the fake with
 * @slack/web-api (auth.test, chat.postMessage, 429 with Retry-After,
 * ok:false errors) and @slack/socket-mode (connections.open, hello, ack by
 * envelope_id, refresh_requested, an unacked envelope redelivered after a
 * dropped socket), and checks the tests' request signer against Slack's
 * published vector and @slack/bolt's verifier. Every check must print
 * "ok"; the script ends with "ALL OK".
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"

static void test_official_clients(void **state)
{
	char script[1024], buf[4096];
	struct buf out;
	int fds[2], status = 0;
	pid_t pid;
	ssize_t n;

	(void)state;
	snprintf(script, sizeof script, "%s/tests/fakes/slack_official_clients.js", SB_SOURCE_DIR);
	assert_int_equal(pipe(fds), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(fds[1], STDOUT_FILENO);
		dup2(fds[1], STDERR_FILENO);
		close(fds[0]);
		close(fds[1]);
		execlp("node", "node", script, (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	buf_init(&out, 1 << 20);
	while ((n = read(fds[0], buf, sizeof buf)) > 0)
		buf_append(&out, buf, (size_t)n);
	close(fds[0]);
	waitpid(pid, &status, 0);
	printf("%s", out.data ? out.data : "");
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	assert_non_null(strstr(out.data, "ALL OK"));
	assert_null(strstr(out.data, "FAIL"));
	/* Every check ran: 15 "ok" lines. */
	{
		int oks = 0;

		for (const char *p = out.data; (p = strstr(p, "\nok ")); p++)
			oks++;
		assert_int_equal(oks, 15);
	}
	buf_free(&out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_official_clients),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
