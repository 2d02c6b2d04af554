/*
 * cli_ctl.h - the CLI verbs that talk to a running gateway over its
 * WebSocket control plane (docs/protocol.md): status, chat, send, sessions,
 * devices. Each takes the arguments after its name (argv[0] is the verb)
 * and returns the exit code: 0 success, 1 failure (including a refusal by
 * the gateway), 2 misuse.
 *
 * Common options: --json (machine-readable output), --url ws://HOST:PORT
 * [/PATH] (default: the home's gateway.bind and gateway.port), --token T
 * (default: $SWITCHBOARD_TOKEN, then $SWITCHBOARD_HOME/gateway.token, then
 * gateway.auth_token), --config FILE, --timeout SECONDS.
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

#endif
