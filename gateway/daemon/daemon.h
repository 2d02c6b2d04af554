/*
 * daemon.h - the gateway process: one libuv loop carrying the HTTP server,
 * the store's completions, the HTTP client, signals, config reload and drain.
 */
#ifndef SB_GATEWAY_DAEMON_H
#define SB_GATEWAY_DAEMON_H

struct daemon_options {
	const char *home;        /* $SWITCHBOARD_HOME, absolute */
	const char *config_path; /* the YAML file */
	int port;                /* > 0 overrides gateway.port */
};

/* Runs the gateway in the foreground until SIGTERM/SIGINT and a drain.
 * Returns the process exit code: 0 after a clean stop, 1 when start-up
 * failed (the reason is logged). Main thread only. */
int daemon_run(const struct daemon_options *opt);

#endif
