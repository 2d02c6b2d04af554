/*
 * host_common.h - pieces of the host interface that the daemon and the
 * one-shot CLI commands (agent run) implement the same way.
 *
 * Loop thread only.
 */
#ifndef SB_GATEWAY_HOST_COMMON_H
#define SB_GATEWAY_HOST_COMMON_H

#include <uv.h>

#include "gateway/config/config.h"
#include "gateway/core/host.h"
#include "gateway/core/httpc.h"
#include "gateway/store/store.h"

/* The shared HTTP client with the limits of cfg's http_client section. */
int host_common_httpc_new(struct httpc **out, uv_loop_t *loop, const struct config *cfg);

/* host->deliver over a store: puts msg in the outbox; cb runs after the
 * commit; then, on success, kick(kick_ud) when kick is not NULL. */
int host_common_deliver(struct store *s, const struct host_outbound *msg, host_deliver_cb cb,
                        void *ud, void (*kick)(void *kick_ud), void *kick_ud);

#endif
