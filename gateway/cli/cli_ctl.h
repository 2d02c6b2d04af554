/*
 * cli_ctl.h - the CLI verbs that talk to a running gateway over its
 * WebSocket control plane (docs/protocol.md): status, chat, send, sessions,
 * devices. Each takes the arguments after its name (argv[0] is the verb)
 * and returns the exit code: 0 success, 1 failure (including a refusal by
 * the gateway), 2 misuse.
 *
 * Common options: --json (machine-readable output), --url ws://HOST:PORT
 * [/PATH] (default: the home's gateway.bind and gateway.port), --token T
 * (default: $SWITCHBOARD_TOKEN, then gateway.auth_token when the home's
 * configuration sets it, else $SWITCHBOARD_HOME/gateway.token), --config FILE, --timeout SECONDS.
 *
 * Each runs its own libuv loop with a libwebsockets client on it; the host
 * name is resolved off the loop (gateway/core/resolve.h) before lws
 * connects to the address.
 */
#ifndef SB_GATEWAY_CLI_CTL_H
#define SB_GATEWAY_CLI_CTL_H

int cli_status(int argc, char **argv);
int cli_chat(int argc, char **argv);
int cli_send(int argc, char **argv);
int cli_sessions(int argc, char **argv);
int cli_devices(int argc, char **argv);
int cli_approvals(int argc, char **argv);

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

/* The common options of a control-plane verb, parsed by the verb itself. */
struct cli_ctl_common {
	bool json;
	const char *url;
	const char *token;
	const char *token_file; /* "-": standard input; may be NULL */
	const char *config;
	int64_t timeout_s; /* 0 = the default */
};

/* One request: connects, calls method with params (taken; may be NULL),
 * and prints the payload of a successful answer with print (or as JSON
 * with --json, or when print is NULL). The exit code as above. */
int cli_ctl_call(const struct cli_ctl_common *o, const char *verb, const char *method,
                 json_t *params, void (*print)(const json_t *payload));

/* switchboard dashboard: the web UI's address with a one-time sign-in code
 * (gateway/cli/cli_dashboard.c). */
int cli_dashboard(int argc, char **argv);

/* switchboard prompt [AGENT] [--session KEY]: what the next turn would
 * send to the model (gateway/cli/cli_prompt.c). */
int cli_prompt(int argc, char **argv);

/* switchboard cron list|add|rm|run|runs (gateway/cli/cli_cron.c). */
int cli_cron(int argc, char **argv);

#endif
