/*
 * daemon_host.c - what the daemon hands to modules: the host interface
 * (ingest, deliver, HTTP client, config, HTTP routes, synchronous replies),
 * model router generations, and channel lookup for the outbox sender.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "gateway/core/err.h"
#include "gateway/core/log.h"
#include "gateway/daemon/daemon_internal.h"
#include "gateway/daemon/host_common.h"
#include "gateway/http/server_wsc.h"

/* ---- ingest / deliver ---- */

struct daemon_ingest {
	struct daemon *d;
	host_ingest_cb cb;
	void *ud;
	struct envelope env; /* a claimed entry's envelope as stored, for its run */
	bool claimed;        /* inserted claimed: the dispatcher runs it once stored */
};

static void daemon_ingest_done(void *ud, int rc, int64_t id, bool duplicate)
{
	struct daemon_ingest *in = ud;
	struct daemon *d = in->d;

	if (rc)
		d->metrics.ingest_rejected++;
	else if (duplicate)
		d->metrics.ingest_duplicates++;
	else
		d->metrics.ingest_accepted++;
	in->cb(in->ud, rc, id, duplicate);
	if (in->claimed)
		dispatcher_put_done(d->dispatcher, true, rc, id, duplicate, &in->env);
	else if (!rc && !duplicate)
		dispatcher_kick(d->dispatcher);
	free(in);
}

static int daemon_ingest(void *ctx, const struct envelope *env, host_ingest_cb cb, void *ud)
{
	struct daemon *d = ctx;
	struct store_inbox_new m = {0};
	struct daemon_ingest *in;
	char *json;
	int rc;

	if (d->state != DAEMON_READY)
		return SB_ERR_AGAIN;
	if (!env->channel || !env->event_id)
		return SB_ERR_INVAL;
	in = calloc(1, sizeof *in);
	if (!in)
		return SB_ERR_NOMEM;
	/* When the dispatcher has room and nothing older waits in the inbox,
	 * the entry goes in claimed and runs once its commit lands: one
	 * commit less than a put and a claim. Its envelope is then kept as
	 * the inbox holds it, so that the run does not read the JSON back. */
	m.claim_lease_ms = dispatcher_put_lease(d->dispatcher);
	in->claimed = m.claim_lease_ms > 0;
	json = in->claimed ? envelope_to_json_copy(env, &in->env) : envelope_to_json(env);
	if (!json) {
		if (in->claimed)
			dispatcher_put_done(d->dispatcher, true, SB_ERR_NOMEM, 0, false, &in->env);
		free(in);
		return SB_ERR_NOMEM;
	}
	in->d = d;
	in->cb = cb;
	in->ud = ud;
	m.channel = env->channel;
	m.account = env->account ? env->account : "default";
	m.dedupe_key = env->event_id;
	m.payload = json;
	rc = store_inbox_put(d->store, &m, daemon_ingest_done, in);
	free(json); /* the store has its copy */
	if (rc) {
		if (in->claimed)
			dispatcher_put_done(d->dispatcher, true, rc, 0, false, &in->env);
		d->metrics.ingest_rejected++;
		free(in);
	}
	return rc;
}

static void daemon_kick_outbox(void *ud)
{
	outbox_kick(((struct daemon *)ud)->outbox);
}

static int daemon_deliver(void *ctx, const struct host_outbound *msg, host_deliver_cb cb, void *ud)
{
	struct daemon *d = ctx;

	return host_common_deliver(d->store, msg, cb, ud, daemon_kick_outbox, d);
}

/* Created on first use: most start-ups never need it, and curl's TLS set-up
 * is the costliest part of initialisation. */
static struct httpc *daemon_http_client(void *ctx)
{
	struct daemon *d = ctx;

	if (d->httpc || d->state >= DAEMON_CLOSING)
		return d->httpc;
	if (host_common_httpc_new(&d->httpc, &d->loop, d->cfg)) {
		log_error("gateway", "cannot create the HTTP client");
		d->httpc = NULL;
	}
	return d->httpc;
}

struct config *daemon_config_get(void *ud)
{
	struct daemon *d = ud;

	return config_ref(d->cfg);
}

const struct bindings_table *daemon_table_get(void *ud)
{
	struct daemon *d = ud;

	return d->table;
}

void daemon_outbox_kick(void *ud)
{
	daemon_kick_outbox(ud);
}

int64_t daemon_outbox_lease(void *ud)
{
	struct daemon *d = ud;

	return d->state == DAEMON_READY ? outbox_put_lease(d->outbox) : 0;
}

void daemon_outbox_take(void *ud, size_t leased, int rc, const struct store_outbox_item *items,
                        size_t n)
{
	struct daemon *d = ud;

	/* Committed while stopping (the outbox may be gone): the entries
	 * stay claimed, and the next start sends them. */
	if (d->outbox && d->state < DAEMON_CLOSING)
		outbox_put_done(d->outbox, leased, rc, items, n);
}

/* ---- HTTP routes for modules ---- */

static const char *daemon_req_method(const struct host_http_req *r)
{
	switch (server_req_method((const struct server_request *)r)) {
	case SERVER_GET:
		return "GET";
	case SERVER_POST:
		return "POST";
	case SERVER_PUT:
		return "PUT";
	case SERVER_DELETE:
		return "DELETE";
	case SERVER_PATCH:
		return "PATCH";
	case SERVER_HEAD:
		return "HEAD";
	case SERVER_OPTIONS:
		return "OPTIONS";
	}
	return "";
}

static const char *daemon_req_path(const struct host_http_req *r)
{
	return server_req_path((const struct server_request *)r);
}

static const char *daemon_req_query(const struct host_http_req *r)
{
	return server_req_query((const struct server_request *)r);
}

static const char *daemon_req_body(const struct host_http_req *r, size_t *len)
{
	return server_req_body((const struct server_request *)r, len);
}

static int daemon_req_header(struct host_http_req *r, const char *name, char *out, size_t size)
{
	return server_req_header((struct server_request *)r, name, out, size);
}

static const char *daemon_req_peer(const struct host_http_req *r)
{
	return server_req_peer((const struct server_request *)r);
}

static int daemon_req_respond(struct host_http_req *r, int status, const char *content_type,
                              const void *body, size_t len, const char *const *headers)
{
	return server_respond((struct server_request *)r, status, content_type, body, len, headers);
}

static const struct host_http_ops daemon_http_ops = {
    .method = daemon_req_method,
    .path = daemon_req_path,
    .query = daemon_req_query,
    .body = daemon_req_body,
    .header = daemon_req_header,
    .peer = daemon_req_peer,
    .respond = daemon_req_respond,
};

static void daemon_route_trampoline(void *ud, struct server_request *req)
{
	struct daemon_route *r = ud;

	r->fn(r->ud, (struct host_http_req *)req);
}

static unsigned daemon_methods(const char *list)
{
	static const struct {
		const char *name;
		unsigned bit;
	} names[] = {{"GET", SERVER_GET},        {"POST", SERVER_POST},   {"PUT", SERVER_PUT},
	             {"DELETE", SERVER_DELETE},  {"PATCH", SERVER_PATCH}, {"HEAD", SERVER_HEAD},
	             {"OPTIONS", SERVER_OPTIONS}};
	unsigned mask = 0;

	while (list && *list) {
		size_t n = strcspn(list, ",");

		for (size_t i = 0; i < sizeof names / sizeof *names; i++)
			if (strlen(names[i].name) == n && strncasecmp(list, names[i].name, n) == 0)
				mask |= names[i].bit;
		list += n;
		while (*list == ',' || *list == ' ')
			list++;
	}
	return mask;
}

static int daemon_http_route(void *ctx, const char *name, const char *path, bool prefix,
                             const char *methods, host_http_handler handler, void *ud)
{
	struct daemon *d = ctx;
	struct daemon_route *r = calloc(1, sizeof *r);
	int rc;

	if (!r)
		return SB_ERR_NOMEM;
	r->fn = handler;
	r->ud = ud;
	rc = server_route(d->server, name, path, prefix ? SERVER_PREFIX : 0,
	                  daemon_methods(methods), daemon_route_trampoline, r);
	if (rc) {
		free(r);
		return rc;
	}
	r->next = d->routes;
	d->routes = r;
	return SB_OK;
}

void daemon_routes_free(struct daemon *d)
{
	while (d->routes) {
		struct daemon_route *r = d->routes;

		d->routes = r->next;
		free(r);
	}
}

static int daemon_await_reply(void *ctx, int64_t inbox_id, int64_t timeout_ms, host_reply_cb cb,
                              void *ud)
{
	struct daemon *d = ctx;

	return dispatcher_await_reply(d->dispatcher, inbox_id, timeout_ms, cb, ud);
}

static void daemon_config_release(void *ctx, struct config *cfg)
{
	(void)ctx;
	config_unref(cfg);
}

static int daemon_kv_get(void *ctx, const char *ns, const char *key, host_kv_get_cb cb, void *ud)
{
	struct daemon *d = ctx;

	if (!d->store)
		return SB_ERR_CLOSED;
	return store_kv_get(d->store, ns, key, cb, ud);
}

static int daemon_kv_put(void *ctx, const char *ns, const char *key, const char *value,
                         host_kv_put_cb cb, void *ud)
{
	struct daemon *d = ctx;

	if (!d->store)
		return SB_ERR_CLOSED;
	return store_kv_put(d->store, ns, key, value, cb, ud);
}

static int daemon_ws_connect(void *ctx, const char *url, const struct host_ws_handlers *h, void *ud,
                             struct host_ws **out)
{
	struct daemon *d = ctx;

	if (!d->server || d->state >= DAEMON_CLOSING)
		return SB_ERR_CLOSED;
	return server_wsc_connect(d->server, url, h, ud, out);
}

static int daemon_ws_send(void *ctx, struct host_ws *ws, const char *data, size_t len)
{
	(void)ctx;
	return server_wsc_send(ws, data, len);
}

static int daemon_ws_ping(void *ctx, struct host_ws *ws)
{
	(void)ctx;
	return server_wsc_ping(ws);
}

static void daemon_ws_close(void *ctx, struct host_ws *ws)
{
	(void)ctx;
	server_wsc_close(ws);
}

static void daemon_ws_shutdown(void *ctx, struct host_ws *ws, bool abrupt)
{
	(void)ctx;
	server_wsc_shutdown(ws, abrupt);
}

void daemon_host_init(struct daemon *d)
{
	d->host = (struct host){
	    .ctx = d,
	    .loop = &d->loop,
	    .ingest = daemon_ingest,
	    .deliver = daemon_deliver,
	    .http_client = daemon_http_client,
	    .config = daemon_config_get,
	    .config_release = daemon_config_release,
	    .http_route = daemon_http_route,
	    .http_ops = &daemon_http_ops,
	    .await_reply = daemon_await_reply,
	    .kv_get = daemon_kv_get,
	    .kv_put = daemon_kv_put,
	    .ws_connect = daemon_ws_connect,
	    .ws_send = daemon_ws_send,
	    .ws_ping = daemon_ws_ping,
	    .ws_close = daemon_ws_close,
	    .ws_shutdown = daemon_ws_shutdown,
	};
}

/* ---- model router generations ---- */

struct models_gen *daemon_gen_new(struct daemon *d, struct config *cfg)
{
	struct models_gen *g = calloc(1, sizeof *g);

	if (!g)
		return NULL;
	if (models_new(&g->models, cfg->providers, cfg->n_providers, &d->host, NULL) != SB_OK) {
		free(g);
		return NULL;
	}
	g->cfg = config_ref(cfg);
	g->refs = 1;
	return g;
}

void daemon_gen_unref(struct models_gen *g)
{
	if (!g || --g->refs > 0)
		return;
	models_free(g->models);
	config_unref(g->cfg);
	free(g);
}

struct models *daemon_models_acquire(void *ud, struct config **cfg, void **token)
{
	struct daemon *d = ud;

	*cfg = config_ref(d->cfg);
	*token = d->gen;
	if (!d->gen)
		return NULL;
	d->gen->refs++;
	return d->gen->models;
}

void daemon_models_release(void *ud, struct config *cfg, void *token)
{
	(void)ud;
	config_unref(cfg);
	daemon_gen_unref(token);
}

/* ---- channels ---- */

/* The instance for (name, account); an adapter that serves every account
 * of its channel from one instance is found by name alone. */
struct channel *daemon_channel(void *ud, const char *name, const char *account)
{
	struct daemon *d = ud;
	struct channel *any = NULL;
	size_t n = 0;

	for (size_t i = 0; i < d->n_channels; i++) {
		if (strcmp(d->channels[i]->ops->name, name) != 0)
			continue;
		if (strcmp(d->channels[i]->account, account ? account : "default") == 0)
			return d->channels[i];
		if (!any)
			any = d->channels[i];
		n++;
	}
	/* Several accounts (two bots): never send with another one's token. */
	return n == 1 ? any : NULL;
}

void daemon_channel_activity(void *ud, const struct envelope *env, bool running)
{
	struct channel *c = daemon_channel(ud, env->channel ? env->channel : "", env->account);

	if (c && c->ops->activity)
		c->ops->activity(c, env, running);
}

/* channels.status: every built-in adapter, with one entry per account
 * instance and what the instance reports about itself. */
json_t *daemon_channels_status(void *ud)
{
	struct daemon *d = ud;
	json_t *map = json_object();

	for (size_t i = 0; map && channel_registry[i]; i++) {
		const struct channel_ops *ops = channel_registry[i];
		json_t *accounts = json_array();
		bool any = false;

		for (size_t k = 0; accounts && k < d->n_channels; k++) {
			struct channel *c = d->channels[k];
			json_t *a;

			if (c->ops != ops)
				continue;
			a = json_pack("{ss sb}", "accountId", c->account, "running",
			              d->state == DAEMON_READY);
			if (a && ops->status)
				ops->status(c, a);
			json_array_append_new(accounts, a);
			any = true;
		}
		json_object_set_new(map, ops->name,
		                    json_pack("{sb sb so}", "available", 1, "running", any,
		                              "accounts", accounts ? accounts : json_array()));
	}
	return map;
}
