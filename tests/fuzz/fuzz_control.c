/*
 * fuzz_control.c - libFuzzer harness for the WebSocket control plane's frame
 * handling: each input is a sequence of text frames (separated by NUL bytes)
 * that one client sends on one connection after the challenge. The real
 * gateway/control/control.c runs them (frame validation, the connect handshake with
 * its hello parsing, token check, device identity and Ed25519 signature
 * check, scopes, lockout, dispatch and error replies); the transport is a
 * recorder in place of libwebsockets, the store answers device look-ups
 * asynchronously (unknown token, new device pending approval), and the
 * methods are one stub ("echo") so the dispatch rules are reached without
 * the rest of the daemon.
 *
 * Properties checked on every input, besides memory safety:
 *  - every frame the gateway sends is a JSON object: a "res" with the
 *    request's id and a boolean "ok" (with an "error" {code, message} when
 *    false), or an "event" with a name;
 *  - nothing is sent after the gateway closed the connection;
 *  - a connection is authenticated only by the gateway token.
 */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The transport and the method table are replaced (see above); the copy of
 * control.c compiled here gets its own names for its public functions so it
 * can sit beside the one in the gateway library. */
#define server_ws_send fuzz_ws_send
#define server_ws_close fuzz_ws_close
#define server_ws_set_max_message fuzz_ws_set_max_message
#define server_ws_peer fuzz_ws_peer
#define control_method_find fuzz_method_find
#define control_uptime_ms fz_control_uptime_ms
#define control_scopes_json fz_control_scopes_json
#define control_scopes_parse fz_control_scopes_parse
#define control_conn_ref fz_control_conn_ref
#define control_conn_unref fz_control_conn_unref
#define control_op_start fz_control_op_start
#define control_op_live fz_control_op_live
#define control_op_free fz_control_op_free
#define control_reply_ok fz_control_reply_ok
#define control_reply_raw fz_control_reply_raw
#define control_reply_error fz_control_reply_error
#define control_send_event fz_control_send_event
#define control_subscribe fz_control_subscribe
#define control_unsubscribe fz_control_unsubscribe
#define control_drop_device fz_control_drop_device
#define control_drop_web fz_control_drop_web
#define control_locked fz_control_locked
#define control_auth_failed fz_control_auth_failed
#define control_gateway_token fz_control_gateway_token
#define control_module fz_control_module
#include "gateway/control/control.c"
#include "gateway/store/store_backend.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_TOKEN "fuzz-gateway-token-0123456789abcdef"

static struct {
	bool closed;
	int sent;
	bool authed_by_token; /* the last connect carried the gateway token */
} rec;

static const json_t *current_id; /* the id of the frame being handled */

int fuzz_ws_send(struct server_ws *ws, const char *text, size_t len)
{
	json_t *f = json_loadb(text, len, 0, NULL);
	const char *type;

	(void)ws;
	if (rec.closed || !f || !json_is_object(f))
		abort();
	type = json_string_value(json_object_get(f, "type"));
	if (!type)
		abort();
	if (strcmp(type, "res") == 0) {
		const json_t *ok = json_object_get(f, "ok"), *err = json_object_get(f, "error");

		if (!json_is_boolean(ok) || !json_object_get(f, "id"))
			abort();
		if (json_is_false(ok) &&
		    (!json_is_object(err) || !json_is_string(json_object_get(err, "code")) ||
		     !json_is_string(json_object_get(err, "message"))))
			abort();
	} else if (strcmp(type, "event") == 0) {
		if (!json_is_string(json_object_get(f, "event")))
			abort();
	} else {
		abort();
	}
	json_decref(f);
	rec.sent++;
	return SB_OK;
}

void fuzz_ws_close(struct server_ws *ws, int code, const char *reason)
{
	(void)ws;
	(void)code;
	(void)reason;
	rec.closed = true;
}

void fuzz_ws_set_max_message(struct server_ws *ws, size_t max)
{
	(void)ws;
	(void)max;
}

const char *fuzz_ws_peer(const struct server_ws *ws)
{
	(void)ws;
	return "127.0.0.1";
}

static void fuzz_echo(struct control_conn *c, const json_t *id, json_t *params)
{
	fz_control_reply_ok(c, id, json_deep_copy(params));
}

static void fuzz_admin(struct control_conn *c, const json_t *id, json_t *params)
{
	(void)params;
	fz_control_reply_error(c, id, CONTROL_E_NOT_FOUND, "nothing here", NULL, true, 250);
}

static const struct control_method fuzz_methods[] = {
    {"echo", CONTROL_SCOPE_READ, fuzz_echo},
    {"admin.thing", CONTROL_SCOPE_ADMIN, fuzz_admin},
    {NULL, 0, NULL},
};

const struct control_method *fuzz_method_find(const char *name)
{
	for (size_t i = 0; fuzz_methods[i].name; i++)
		if (strcmp(fuzz_methods[i].name, name) == 0)
			return &fuzz_methods[i];
	return NULL;
}

/* ---- the store: device look-ups answered on the next turn ---- */

/* A backend that takes device_request and device_get (new device pending
 * approval; unknown token) and answers them from run_pending; any other
 * operation is refused as if the queue were full. */
static struct store_op *pend[8];
static size_t n_pend;
static struct store fuzz_store;

static int fuzz_submit(struct store *s, struct store_op *op)
{
	(void)s;
	if (n_pend == sizeof pend / sizeof *pend ||
	    (op->kind != STORE_OP_DEVICE_REQUEST && op->kind != STORE_OP_DEVICE_GET))
		return SB_ERR_AGAIN;
	pend[n_pend++] = op;
	return SB_OK;
}

static const struct store_backend fuzz_backend = {.name = "fuzz", .submit = fuzz_submit};

static void run_pending(void)
{
	size_t n = n_pend;
	struct store_op *copy[8];

	memcpy(copy, pend, n * sizeof *pend);
	n_pend = 0;
	for (size_t i = 0; i < n; i++) {
		struct store_op *op = copy[i];

		if (op->kind == STORE_OP_DEVICE_REQUEST) {
			op->a.device_request.d.state = "pending";
			op->a.device_request.created = true;
			op->rc = SB_OK;
		} else {
			op->rc = SB_ERR_NOTFOUND;
		}
		store_op_finish(&fuzz_store, op);
	}
}

static struct config *fuzz_cfg;
static struct host fuzz_host;
static uv_loop_t fuzz_loop;
static struct control fuzz_ctl;
static char fuzz_token[] = FUZZ_TOKEN;

static struct config *fuzz_config(void *ctx)
{
	(void)ctx;
	return config_ref(fuzz_cfg);
}

static int fuzz_init(void)
{
	static const char yaml[] = "agents:\n  - {id: main}\n";
	struct cfg_errors errs;

	cfg_errors_init(&errs);
	if (config_load_text(yaml, "fuzz.yaml", "/nonexistent", &fuzz_cfg, &errs) != SB_OK)
		abort();
	cfg_errors_free(&errs);
	uv_loop_init(&fuzz_loop);
	store_base_init(&fuzz_store, &fuzz_backend, &(struct store_options){0});
	fuzz_host.config = fuzz_config;
	log_configure(LOG_ERROR, LOG_FORMAT_LOGFMT, fopen("/dev/null", "w"));
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int ready = -1;
	struct control *ctl = &fuzz_ctl;
	struct control_conn *c;
	void *conn = NULL;
	const uint8_t *p = data, *end = data + size;

	if (ready < 0)
		ready = fuzz_init();
	memset(ctl, 0, sizeof *ctl);
	ctl->ctx.loop = &fuzz_loop;
	ctl->ctx.host = &fuzz_host;
	ctl->ctx.store = &fuzz_store;
	ctl->file_token = fuzz_token;
	ctl->tick_ms = 15000;
	ctl->max_buffered = 1 << 20;
	memset(&rec, 0, sizeof rec);
	if (control_on_open(ctl, (struct server_ws *)&rec, &conn) != SB_OK)
		return 0;
	c = conn;
	if (rec.sent != 1) /* the challenge */
		abort();
	control_conn_ref(c);
	while (p < end && !rec.closed) {
		const uint8_t *nul = memchr(p, 0, (size_t)(end - p));
		size_t n = (size_t)((nul ? nul : end) - p);
		bool was_authed = c->authed;

		rec.authed_by_token = n < 65536 && memmem(p, n, FUZZ_TOKEN, strlen(FUZZ_TOKEN));
		current_id = NULL;
		control_on_message(c, (const char *)p, n);
		run_pending();
		if (c->authed && !was_authed && !rec.authed_by_token)
			abort(); /* only the gateway token authenticates here */
		p = nul ? nul + 1 : end;
	}
	(void)current_id;
	if (!rec.closed)
		c->closing = true;
	control_on_closed(c, 1000);
	control_conn_unref(c);
	uv_run(&fuzz_loop, UV_RUN_NOWAIT);
	return 0;
}
