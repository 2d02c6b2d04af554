/*
 * control.h - the WebSocket control plane: a gateway module that serves
 * OpenClaw-shaped JSON frames on the gateway port (docs/protocol.md).
 *
 * Clients connect to one of gateway.control.paths, receive a
 * connect.challenge, and must answer with a connect request carrying the
 * gateway token, an approved device's token, or an Ed25519 device signature
 * of the challenge. Once connected they call methods (health, status,
 * chat.send, agent, chat.history, chat.abort, sessions.*, agents.list,
 * channels.status, config.get, devices.*) within the scopes they were
 * granted, and receive events: chat and agent streams of the sessions they
 * follow, tick, sessions.changed and shutdown.
 *
 * chat.send and agent put the message in the inbox as channel "webchat"
 * with the idempotency key as its event id and the session named
 * explicitly (envelope route_agent/route_session), so a retried request is
 * never run twice and the run happens in exactly the session asked for.
 *
 * Loop thread only.
 */
#ifndef SB_GATEWAY_CONTROL_H
#define SB_GATEWAY_CONTROL_H

#include "gateway/module.h"

extern const struct gateway_module_ops control_module;

#endif
