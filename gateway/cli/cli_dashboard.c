/*
 * cli_dashboard.c - `switchboard dashboard`: asks the running gateway for a
 * one-time sign-in code (dashboard.code, docs/ui.md) and prints the web UI's
 * address with the code after the '#', then opens it in a browser when
 * there is a desktop to open it on (xdg-open; --no-open does not).
 *
 * The long-lived token stays with the CLI: the URL carries only the code,
 * which works once, for gateway.ui.code_ttl (2 minutes by default), and is
 * never sent to a server (browsers keep the part after '#' to themselves).
 *
 * Blocking (CLI only).
 */
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gateway/cli/cli_ctl.h"
#include "gateway/core/num.h"

static bool dashboard_open_browser = true;

static void dashboard_usage(FILE *f)
{
	fprintf(f,
	        "usage: switchboard dashboard [--no-open] [--json]\n\n"
	        "Prints the web UI's address with a one-time sign-in code and opens it in\n"
	        "the browser when there is a desktop (xdg-open). The code works once and\n"
	        "for a short time (gateway.ui.code_ttl); the browser gets a session cookie\n"
	        "for it, and the gateway token never leaves this machine's CLI.\n"
	        "  --no-open         only print the address\n"
	        "  --json            machine-readable output (the gateway's JSON)\n"
	        "  --url URL         ws://HOST:PORT[/PATH] (default: from the home's config)\n"
	        "  --token TOKEN     default: $SWITCHBOARD_TOKEN, then gateway.auth_token,\n"
	        "                    else the home's gateway.token\n"
	        "  --config FILE     the configuration to find the gateway in\n"
	        "  --timeout SECONDS how long to wait for the gateway\n");
}

/* Starts xdg-open on url, detached; the CLI does not wait for it. */
static void dashboard_open(const char *url)
{
	pid_t pid;

	if (!getenv("DISPLAY") && !getenv("WAYLAND_DISPLAY"))
		return;
	pid = fork();
	if (pid == 0) {
		int null = open("/dev/null", O_RDWR | O_CLOEXEC);

		if (fork() != 0)
			_exit(0); /* the grandchild is adopted: no zombie, no wait */
		setsid();
		if (null >= 0) {
			dup2(null, STDIN_FILENO);
			dup2(null, STDOUT_FILENO);
			dup2(null, STDERR_FILENO);
		}
		execlp("xdg-open", "xdg-open", url, (char *)NULL);
		_exit(127);
	}
	if (pid > 0)
		waitpid(pid, NULL, 0);
}

static void dashboard_print(const json_t *p)
{
	const char *url = json_string_value(json_object_get(p, "url"));
	json_int_t ttl = json_integer_value(json_object_get(p, "ttlMs"));

	if (!url)
		return;
	printf("%s\n", url);
	fprintf(stderr, "open it within %lld s; the code works once.\n", (long long)(ttl / 1000));
	fflush(stdout);
	if (dashboard_open_browser)
		dashboard_open(url);
}

int cli_dashboard(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"json", no_argument, NULL, 'j'},       {"url", required_argument, NULL, 'u'},
	    {"token", required_argument, NULL, 't'}, {"config", required_argument, NULL, 'c'},
	    {"timeout", required_argument, NULL, 'T'}, {"no-open", no_argument, NULL, 'n'},
	    {"help", no_argument, NULL, 'h'},        {0},
	};
	struct cli_ctl_common o = {0};
	int ch;

	optind = 1;
	while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (ch) {
		case 'j':
			o.json = true;
			break;
		case 'u':
			o.url = optarg;
			break;
		case 't':
			o.token = optarg;
			break;
		case 'c':
			o.config = optarg;
			break;
		case 'T':
			if (num_parse_i64(optarg, 1, 86400, &o.timeout_s)) {
				fprintf(stderr, "switchboard dashboard: --timeout wants seconds\n");
				return 2;
			}
			break;
		case 'n':
			dashboard_open_browser = false;
			break;
		case 'h':
			dashboard_usage(stdout);
			return 0;
		default:
			dashboard_usage(stderr);
			return 2;
		}
	}
	if (optind != argc) {
		dashboard_usage(stderr);
		return 2;
	}
	return cli_ctl_call(&o, "dashboard", "dashboard.code", NULL, dashboard_print);
}
