/*
 * host_common.c - see host_common.h.
 */
#include "gateway/daemon/host_common.h"

#include <stdlib.h>
#include <string.h>

#include "gateway/core/err.h"

int host_common_httpc_new(struct httpc **out, uv_loop_t *loop, const struct config *cfg)
{
	struct httpc_options o;

	memset(&o, 0, sizeof o);
	o.timeout_ms = (long)cfg->http_client.timeout_ms;
	o.connect_timeout_ms = (long)cfg->http_client.connect_timeout_ms;
	o.max_connections = (long)cfg->http_client.max_connections;
	o.max_host_connections = (long)cfg->http_client.max_host_connections;
	o.max_response_bytes = (size_t)cfg->http_client.max_response_bytes;
	o.ca_file = cfg->http_client.ca_file;
	return httpc_new(out, loop, &o);
}

struct host_common_delivery {
	host_deliver_cb cb;
	void *ud;
	void (*kick)(void *kick_ud);
	void *kick_ud;
};

static void host_common_delivered(void *ud, int rc, int64_t id, bool duplicate)
{
	struct host_common_delivery *d = ud;

	d->cb(d->ud, rc, id, duplicate);
	if (!rc && d->kick)
		d->kick(d->kick_ud);
	free(d);
}

int host_common_deliver(struct store *s, const struct host_outbound *msg, host_deliver_cb cb,
                        void *ud, void (*kick)(void *kick_ud), void *kick_ud)
{
	struct host_common_delivery *d = malloc(sizeof *d);
	struct store_outbox_new m;
	int rc;

	if (!d)
		return SB_ERR_NOMEM;
	d->cb = cb;
	d->ud = ud;
	d->kick = kick;
	d->kick_ud = kick_ud;
	memset(&m, 0, sizeof m);
	m.idempotency_key = msg->idempotency_key;
	m.channel = msg->channel;
	m.account = msg->account ? msg->account : "default";
	m.target = msg->target;
	m.payload = msg->payload;
	m.due_at = msg->due_at;
	rc = store_outbox_put(s, &m, host_common_delivered, d);
	if (rc)
		free(d);
	return rc;
}
