/*
 * openai_api.h - the OpenAI-compatible HTTP endpoint, a gateway module
 * (docs/openai-api.md).
 *
 *   POST <prefix>/chat/completions   a message into an agent's session; the
 *                                    reply as a chat.completion, or streamed
 *                                    as chat.completion.chunk events (SSE)
 *   GET  <prefix>/models             the agents, as "switchboard/<id>"
 *   GET  <prefix>/models/<id>        one of them
 *
 * <prefix> is openai_api.path_prefix ("/v1"). Every request needs
 * "Authorization: Bearer <token>": gateway.auth_token when set, else the
 * home's gateway.token. While openai_api.enabled is false (the default;
 * it is read per request, so a reload switches it) the paths answer 404.
 *
 * A completion request ingests one envelope on channel "http" naming its
 * agent and session (route_agent, route_session), so the dispatcher runs
 * it on that session's lane whatever the bindings say; the session key is
 *   x-switchboard-session: agent:<agent>:...   that key (same agent only)
 *   x-switchboard-session: NAME                agent:<agent>:http:NAME
 *   body "user": U                             agent:<agent>:http:user:U
 *   neither                                    agent:<agent>:http:run:<event id>
 *                                              (a fresh session per request)
 * and the event id (the inbox dedupe key) is the Idempotency-Key header,
 * else a random one. The answer waits for the run's reply
 * (dispatcher_await_reply) up to openai_api.sync_timeout; a stream carries
 * the run's text deltas (events.h), subscribed before the ingest so that
 * none is missed.
 *
 * Errors use OpenAI's shape: {"error": {"message", "type", "code"}}.
 *
 * Loop thread only.
 */
#ifndef SB_GATEWAY_OPENAI_API_H
#define SB_GATEWAY_OPENAI_API_H

#include "gateway/module.h"

/* The module (listed in gateway/daemon/modules.c). */
extern const struct gateway_module_ops openai_api_module;

#endif
