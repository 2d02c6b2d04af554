/*
 * approvals_notify.h - the gateway's side of gate 3: announces each
 * approval request (agents/safety/approvals.h) on the event bus, which the control
 * plane forwards to operator clients as `approval.requested` /
 * `approval.resolved`, and as a message to security.approval_channel /
 * approval_target when configured.
 *
 * Loop thread only.
 */
#ifndef SB_GATEWAY_APPROVALS_NOTIFY_H
#define SB_GATEWAY_APPROVALS_NOTIFY_H

#include <uv.h>

#include "agents/safety/approvals.h"
#include "gateway/core/host.h"
#include "gateway/obs/events.h"

/* Creates the approvals of a gateway. events and host are borrowed for its
 * life. SB_OK or SB_ERR_NOMEM. */
int approvals_notify_new(struct approvals **out, uv_loop_t *loop, struct events *events,
                         const struct host *host);

/* Frees what approvals_notify_new made (pending approvals are denied). */
void approvals_notify_free(struct approvals *a);

#endif
