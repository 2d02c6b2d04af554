/*
 * control.c - the control plane's connections: frames, the connect
 * handshake and its authentication, failed-auth lockouts, and the events
 * that stream to clients. The methods are in control_methods.c. See
 * control.h and docs/protocol.md.
 *
 * Objects. A struct control_conn per WebSocket connection, reference
 * counted: the connection holds one reference until it closes, and every
 * asynchronous step of a request (struct control_op: a store operation, an
 * ingest, a wait for a run's reply, thread-pool work) holds another, so a
 * callback that arrives after the client left finds its connection gone
 * (ws NULL) and simply drops the answer. When the module stops before such
 * a callback arrives (the store and the dispatcher are closed after the
 * modules), the op is detached: ctl and conn become NULL and the callback
 * only frees it.
 *
 * Streams. The module follows every run on the event bus. Deltas reach
 * subscribed clients at once as agent events ({stream: "assistant", data:
 * {delta}}) and, at most every CONTROL_CHAT_THROTTLE_MS, as chat events
 * carrying the whole text so far (as OpenClaw does, so a client that missed
 * one loses nothing); the end of a run is a chat "final" (or "aborted",
 * "error") with the reply.
 */
#include "gateway/control/control.h"
#include "gateway/control/control_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "gateway/core/clock.h"
#include "gateway/core/err.h"
#include "gateway/core/secret.h"
#include "gateway/core/log.h"
#include "gateway/core/strmap.h"
#include "gateway/http/origin.h"

#define CONTROL_CHAT_THROTTLE_MS 150
#define CONTROL_PING_MS 30000
#define CONTROL_IDLE_MS 75000
#define CONTROL_ID_MAX 256
#define CONTROL_FIELD_MAX 63
#define CONTROL_TOKEN_FILE_MAX 4096
#define CONTROL_DEVICE_TOKEN_BYTES 32
#define CONTROL_SIGNED_AT_SKEW_MS (10LL * 60 * 1000)
#define CONTROL_TOOL_TEXT_MAX 4096

static const char *const control_default_paths[] = {"/", "/ws"};

static const char *const control_event_names[] = {
    "connect.challenge",
    "chat",
    "agent",
    "tick",
    "sessions.changed",
    "shutdown",
    "approval.requested",
    "approval.resolved",
};

/* ---- time ---- */

uint64_t control_uptime_ms(const struct control *ctl)
{
	return uv_now(ctl->ctx.loop) - ctl->started_ms;
}

/* ---- scopes ---- */

static const struct {
	const char *name;
	unsigned bit;
} control_scope_names[] = {
    {"operator.read", CONTROL_SCOPE_READ},
    {"operator.write", CONTROL_SCOPE_WRITE},
    {"operator.admin", CONTROL_SCOPE_ADMIN},
};

#define CONTROL_SCOPES_ALL (CONTROL_SCOPE_READ | CONTROL_SCOPE_WRITE | CONTROL_SCOPE_ADMIN)

static unsigned control_scope_bit(const char *name, size_t len)
{
	for (size_t i = 0; i < sizeof control_scope_names / sizeof *control_scope_names; i++)
		if (strlen(control_scope_names[i].name) == len &&
		    strncmp(control_scope_names[i].name, name, len) == 0)
			return control_scope_names[i].bit;
	return 0;
}

unsigned control_scopes_parse(const char *csv)
{
	unsigned bits = 0;

	while (csv && *csv) {
		size_t n = strcspn(csv, ",");

		bits |= control_scope_bit(csv, n);
		csv += n;
		if (*csv == ',')
			csv++;
	}
	return bits;
}

json_t *control_scopes_json(unsigned scopes)
{
	json_t *a = json_array();

	for (size_t i = 0; a && i < sizeof control_scope_names / sizeof *control_scope_names; i++)
		if (scopes & control_scope_names[i].bit)
			json_array_append_new(a, json_string(control_scope_names[i].name));
	return a;
}

/* admin implies write, write implies read. */
static unsigned control_scopes_effective(unsigned s)
{
	if (s & CONTROL_SCOPE_ADMIN)
		s |= CONTROL_SCOPE_WRITE;
	if (s & CONTROL_SCOPE_WRITE)
		s |= CONTROL_SCOPE_READ;
	return s;
}

static const char *control_scope_name(unsigned bit)
{
	for (size_t i = 0; i < sizeof control_scope_names / sizeof *control_scope_names; i++)
		if (control_scope_names[i].bit == bit)
			return control_scope_names[i].name;
	return "";
}

/* ---- connections ---- */

static void control_timer_closed(uv_handle_t *h)
{
	free(h);
}

static void control_timer_drop(uv_timer_t **t)
{
	if (!*t)
		return;
	uv_timer_stop(*t);
	uv_close((uv_handle_t *)*t, control_timer_closed);
	*t = NULL;
}

void control_conn_ref(struct control_conn *c)
{
	c->refs++;
}

void control_conn_unref(struct control_conn *c)
{
	if (!c || --c->refs > 0)
		return;
	control_timer_drop(&c->handshake);
	for (size_t i = 0; i < c->n_subs; i++)
		free(c->subs[i]);
	free(c);
}

/* Takes c out of the module's list (the connection is gone). */
static void control_conn_unlink(struct control_conn *c)
{
	struct control *ctl = c->ctl;

	if (!ctl)
		return;
	if (c->prev)
		c->prev->next = c->next;
	else if (ctl->conns == c)
		ctl->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	c->prev = c->next = NULL;
	ctl->n_conns--;
	c->ctl = NULL;
}

static void control_send_text(struct control_conn *c, const char *text, size_t len)
{
	if (!c->ws || c->closing)
		return;
	if (server_ws_send(c->ws, text, len) == SB_ERR_TOOBIG)
		c->closing = true; /* the server drops the slow client */
}

static void control_close(struct control_conn *c, int code, const char *reason)
{
	if (!c->ws || c->closing)
		return;
	c->closing = true;
	server_ws_close(c->ws, code, reason);
}

/* ---- ops ---- */

void control_op_start(struct control_op *op, struct control_conn *c, const json_t *id)
{
	struct control *ctl = c->ctl;

	op->ctl = ctl;
	op->conn = c;
	control_conn_ref(c);
	c->in_flight++;
	op->id = id ? json_deep_copy(id) : NULL;
	if (!ctl)
		return;
	op->next = ctl->ops;
	if (ctl->ops)
		ctl->ops->prev = op;
	ctl->ops = op;
}

bool control_op_live(const struct control_op *op)
{
	return op->ctl && op->conn && op->conn->ws;
}

static void control_op_detach(struct control_op *op)
{
	struct control *ctl = op->ctl;

	if (ctl) {
		if (op->prev)
			op->prev->next = op->next;
		else if (ctl->ops == op)
			ctl->ops = op->next;
		if (op->next)
			op->next->prev = op->prev;
	}
	op->prev = op->next = NULL;
	op->ctl = NULL;
	if (op->conn)
		op->conn->in_flight--;
	control_conn_unref(op->conn);
	op->conn = NULL;
}

/* While draining, a connection closes once nothing of it waits for an
 * answer (its agent runs have answered). */
static void control_close_if_idle(struct control_conn *c)
{
	if (c && c->ctl && c->ctl->draining && c->in_flight == 0)
		control_close(c, SERVER_WS_GOING_AWAY, "the gateway is stopping");
}

void control_op_free(struct control_op *op)
{
	struct control_conn *c;

	if (!op)
		return;
	c = op->conn;
	if (c)
		control_conn_ref(c);
	control_op_detach(op);
	control_close_if_idle(c);
	control_conn_unref(c);
	json_decref(op->id);
	if (op->release)
		op->release(op);
	else
		free(op);
}

/* ---- frames ---- */

/* Sends a frame object (taken). */
static void control_send_frame(struct control_conn *c, json_t *frame)
{
	char *text;

	if (!frame)
		return;
	text = json_dumps(frame, JSON_COMPACT);
	json_decref(frame);
	if (text)
		control_send_text(c, text, strlen(text));
	free(text);
}

void control_reply_ok(struct control_conn *c, const json_t *id, json_t *payload)
{
	json_t *f = json_object();

	if (!f) {
		json_decref(payload);
		return;
	}
	json_object_set_new(f, "type", json_string("res"));
	json_object_set_new(f, "id", id ? json_deep_copy(id) : json_null());
	json_object_set_new(f, "ok", json_true());
	json_object_set_new(f, "payload", payload ? payload : json_object());
	control_send_frame(c, f);
}

void control_reply_raw(struct control_conn *c, const json_t *id, const char *payload_json)
{
	struct buf b;
	char *idtext = json_dumps(id ? id : json_null(), JSON_ENCODE_ANY | JSON_COMPACT);

	buf_init(&b, SIZE_MAX / 2);
	if (idtext && buf_printf(&b, "{\"type\":\"res\",\"id\":%s,\"ok\":true,\"payload\":%s}",
	                         idtext, payload_json) == SB_OK)
		control_send_text(c, b.data, b.len);
	buf_free(&b);
	free(idtext);
}

void control_reply_error(struct control_conn *c, const json_t *id, const char *code,
                         const char *message, json_t *details, bool retryable,
                         int64_t retry_after_ms)
{
	json_t *f = json_object(), *e = json_object();

	if (!f || !e) {
		json_decref(f);
		json_decref(e);
		json_decref(details);
		return;
	}
	json_object_set_new(e, "code", json_string(code));
	json_object_set_new(e, "message", json_string(message));
	if (details)
		json_object_set_new(e, "details", details);
	if (retryable)
		json_object_set_new(e, "retryable", json_true());
	if (retry_after_ms > 0)
		json_object_set_new(e, "retryAfterMs", json_integer(retry_after_ms));
	json_object_set_new(f, "type", json_string("res"));
	json_object_set_new(f, "id", id ? json_deep_copy(id) : json_null());
	json_object_set_new(f, "ok", json_false());
	json_object_set_new(f, "error", e);
	control_send_frame(c, f);
}

/* Sends an event whose payload is already JSON text. */
static void control_send_event_text(struct control_conn *c, const char *event, const char *payload)
{
	struct buf b;

	buf_init(&b, SIZE_MAX / 2);
	if (buf_printf(&b,
	               "{\"type\":\"event\",\"event\":\"%s\",\"payload\":%s,\"seq\":%" PRId64 "}",
	               event, payload, c->seq + 1) == SB_OK) {
		c->seq++;
		control_send_text(c, b.data, b.len);
	}
	buf_free(&b);
}

void control_send_event(struct control_conn *c, const char *event, json_t *payload)
{
	char *text = payload ? json_dumps(payload, JSON_COMPACT) : NULL;

	json_decref(payload);
	if (text)
		control_send_event_text(c, event, text);
	free(text);
}

/* ---- subscriptions ---- */

static bool control_follows(const struct control_conn *c, const char *key)
{
	for (size_t i = 0; i < c->n_subs; i++)
		if (strcmp(c->subs[i], "*") == 0 || (key && strcmp(c->subs[i], key) == 0))
			return true;
	return false;
}

int control_subscribe(struct control_conn *c, const char *key)
{
	char *copy;

	for (size_t i = 0; i < c->n_subs; i++)
		if (strcmp(c->subs[i], key) == 0)
			return SB_OK;
	if (c->n_subs >= CONTROL_SUBS_MAX)
		return SB_ERR_TOOBIG;
	copy = strdup(key);
	if (!copy)
		return SB_ERR_NOMEM;
	c->subs[c->n_subs++] = copy;
	return SB_OK;
}

void control_unsubscribe(struct control_conn *c, const char *key)
{
	for (size_t i = 0; i < c->n_subs; i++) {
		if (strcmp(c->subs[i], key) != 0)
			continue;
		free(c->subs[i]);
		c->subs[i] = c->subs[--c->n_subs];
		return;
	}
}

/* Sends an event to every connected client that follows session_key (NULL:
 * every connected client) and holds scope. */
static bool control_hears(const struct control_conn *c, const char *session_key, unsigned scope)
{
	return c->authed && (control_scopes_effective(c->scopes) & scope) == scope &&
	       (!session_key || control_follows(c, session_key));
}

/* Whether an event for session_key (NULL: every connection) under scope
 * would reach a connection: when none would, the event is neither built
 * nor serialised (most messages arrive with nobody watching). */
static bool control_listening(const struct control *ctl, const char *session_key, unsigned scope)
{
	for (const struct control_conn *c = ctl->conns; c; c = c->next)
		if (control_hears(c, session_key, scope))
			return true;
	return false;
}

static void control_broadcast(struct control *ctl, const char *session_key, unsigned scope,
                              const char *event, json_t *payload)
{
	char *text = payload && control_listening(ctl, session_key, scope)
	                 ? json_dumps(payload, JSON_COMPACT)
	                 : NULL;

	json_decref(payload);
	if (!text)
		return;
	for (struct control_conn *c = ctl->conns; c; c = c->next)
		if (control_hears(c, session_key, scope))
			control_send_event_text(c, event, text);
	free(text);
}

void control_drop_web(struct control *ctl, const unsigned char *hash, const char *reason)
{
	for (struct control_conn *c = ctl->conns; c; c = c->next)
		if (c->via_web && sodium_memcmp(c->web_hash, hash, CONTROL_WEB_HASH) == 0)
			control_close(c, SERVER_WS_POLICY, reason);
}

void control_drop_device(struct control *ctl, const char *device_id)
{
	for (struct control_conn *c = ctl->conns; c; c = c->next)
		if (*c->device_id && strcmp(c->device_id, device_id) == 0)
			control_close(c, SERVER_WS_POLICY, "device revoked");
}

/* ---- failed-auth lockout ---- */

static struct control_lock *control_lock_find(struct control *ctl, const char *addr, bool create)
{
	int64_t now = (int64_t)uv_now(ctl->ctx.loop);
	size_t oldest = 0;

	for (size_t i = 0; i < ctl->n_locks; i++) {
		if (strcmp(ctl->locks[i].addr, addr) == 0)
			return &ctl->locks[i];
		if (ctl->locks[i].window_start < ctl->locks[oldest].window_start)
			oldest = i;
	}
	if (!create)
		return NULL;
	if (ctl->n_locks == CONTROL_LOCKOUT_ENTRIES) {
		/* Full: forget an entry that is neither locked nor counting,
		 * else the oldest. */
		for (size_t i = 0; i < ctl->n_locks; i++)
			if (ctl->locks[i].locked_until <= now) {
				oldest = i;
				break;
			}
		ctl->locks[oldest] = ctl->locks[--ctl->n_locks];
	}
	memset(&ctl->locks[ctl->n_locks], 0, sizeof ctl->locks[0]);
	snprintf(ctl->locks[ctl->n_locks].addr, sizeof ctl->locks[0].addr, "%s", addr);
	ctl->locks[ctl->n_locks].window_start = now;
	return &ctl->locks[ctl->n_locks++];
}

/* Milliseconds addr stays locked out; 0 when it is not. */
int64_t control_locked(struct control *ctl, const char *addr)
{
	struct control_lock *l = control_lock_find(ctl, addr, false);
	int64_t now = (int64_t)uv_now(ctl->ctx.loop);

	return l && l->locked_until > now ? l->locked_until - now : 0;
}

void control_auth_failed(struct control *ctl, const char *addr)
{
	struct config *cfg = ctl->ctx.host->config(ctl->ctx.host->ctx);
	const struct config_control *cc = &cfg->gateway.control;
	struct control_lock *l = control_lock_find(ctl, addr, true);
	int64_t now = (int64_t)uv_now(ctl->ctx.loop);

	if (l) {
		if (now - l->window_start > cc->auth_window_ms) {
			l->window_start = now;
			l->failures = 0;
		}
		if (++l->failures >= cc->auth_failures && l->locked_until <= now) {
			l->locked_until = now + cc->lockout_ms;
			l->failures = 0;
			l->window_start = now;
			log_warn("control", "too many failed connects; address locked out",
			         LOG_S("peer", addr), LOG_I("lockout_ms", cc->lockout_ms));
		}
	}
	config_unref(cfg);
}

/* ---- authentication ---- */

bool control_gateway_token(struct control *ctl, const char *token)
{
	struct config *cfg = ctl->ctx.host->config(ctl->ctx.host->ctx);
	/* gateway.auth_token, when set, is the one gateway token: the
	 * home's gateway.token no longer opens anything (an operator who set
	 * a token, say to expose the gateway, expects that token and no
	 * other). */
	bool ok = cfg->gateway.auth_token && *cfg->gateway.auth_token
	              ? secret_equal(token, cfg->gateway.auth_token)
	              : secret_equal(token, ctl->file_token);

	config_unref(cfg);
	return ok;
}

/* hex BLAKE2b-256 of a device token, as the store keeps it. */
static void control_token_hash(const char *token, char out[65])
{
	unsigned char h[32];

	crypto_generichash(h, sizeof h, (const unsigned char *)token, strlen(token), NULL, 0);
	sodium_bin2hex(out, 65, h, sizeof h);
}

/* Decodes base64url or base64, padded or not. Returns the length or -1. */
int control_b64_decode(const char *in, unsigned char *out, size_t size)
{
	static const int variants[] = {
	    sodium_base64_VARIANT_URLSAFE_NO_PADDING, sodium_base64_VARIANT_URLSAFE,
	    sodium_base64_VARIANT_ORIGINAL, sodium_base64_VARIANT_ORIGINAL_NO_PADDING};
	size_t n;

	for (size_t i = 0; i < sizeof variants / sizeof *variants; i++)
		if (sodium_base642bin(out, size, in, strlen(in), " \r\n\t", &n, NULL,
		                      variants[i]) == 0)
			return (int)n;
	return -1;
}

/* The raw Ed25519 key from base64(url) of the raw 32 bytes, of an SPKI DER
 * structure, or a PEM "PUBLIC KEY" block. */
bool control_public_key(const char *text, unsigned char key[32])
{
	static const unsigned char spki[12] = {0x30, 0x2a, 0x30, 0x05, 0x06, 0x03,
	                                       0x2b, 0x65, 0x70, 0x03, 0x21, 0x00};
	unsigned char der[128];
	char body[256];
	const char *b = text;
	int n;

	if (strncmp(text, "-----BEGIN PUBLIC KEY-----", 26) == 0) {
		const char *end = strstr(text + 26, "-----END PUBLIC KEY-----");
		size_t len;

		if (!end)
			return false;
		len = (size_t)(end - (text + 26));
		if (len >= sizeof body)
			return false;
		memcpy(body, text + 26, len);
		body[len] = '\0';
		b = body;
	}
	n = control_b64_decode(b, der, sizeof der);
	if (n == 32) {
		memcpy(key, der, 32);
		return true;
	}
	if (n == 44 && memcmp(der, spki, sizeof spki) == 0) {
		memcpy(key, der + 12, 32);
		return true;
	}
	return false;
}

/* What a connect request said, borrowed from its params. */
struct control_hello {
	int protocol;
	const char *role;
	const char *client_id, *client_mode, *client_version, *platform, *device_family;
	const char *token;        /* auth.token */
	const char *device_token; /* auth.deviceToken */
	const char *web_sig;      /* auth.webSignature (a web session's) */
	unsigned want;            /* scopes asked for */
	struct buf scopes_csv;    /* as given, joined with "," */
	const json_t *device;     /* the device object, or NULL */
};

/* Lower-cases ASCII A-Z (metadata fields of the v3 payload). */
static void control_lower(const char *in, char *out, size_t size)
{
	size_t i = 0;

	for (; in && in[i] && i + 1 < size; i++)
		out[i] = (char)(in[i] >= 'A' && in[i] <= 'Z' ? in[i] + 32 : in[i]);
	out[i] = '\0';
}

/* Verifies the device signature of the challenge. On success device_id
 * (65) and pub_b64 (64) describe the device. why says what failed. */
static bool control_device_verify(const struct control_conn *c, const struct control_hello *h,
                                  char *device_id, char *pub_b64, const char **why)
{
	const char *id = json_string_value(json_object_get(h->device, "id"));
	const char *pub = json_string_value(json_object_get(h->device, "publicKey"));
	const char *sig_text = json_string_value(json_object_get(h->device, "signature"));
	const char *nonce = json_string_value(json_object_get(h->device, "nonce"));
	const json_t *signed_at = json_object_get(h->device, "signedAt");
	unsigned char key[32], sig[64], digest[32];
	char hex[65], platform[64], family[64];
	const char *token = h->token ? h->token : (h->device_token ? h->device_token : "");
	struct buf payload;
	bool ok = false;

	*why = "the device signature is invalid";
	if (!id || !pub || !sig_text || !json_is_integer(signed_at)) {
		*why = "device needs id, publicKey, signature and signedAt";
		return false;
	}
	if (nonce && strcmp(nonce, c->nonce) != 0) {
		*why = "device.nonce is not this connection's challenge";
		return false;
	}
	if (llabs(json_integer_value(signed_at) - clock_wall_ms()) > CONTROL_SIGNED_AT_SKEW_MS) {
		*why = "device.signedAt is more than 10 minutes off";
		return false;
	}
	if (!control_public_key(pub, key) ||
	    control_b64_decode(sig_text, sig, sizeof sig) != (int)sizeof sig) {
		*why = "device.publicKey or device.signature is not valid base64 of an Ed25519 "
		       "key or signature";
		return false;
	}
	crypto_hash_sha256(digest, key, sizeof key);
	sodium_bin2hex(hex, sizeof hex, digest, sizeof digest);
	if (strcasecmp(hex, id) != 0) {
		*why = "device.id is not the SHA-256 of device.publicKey";
		return false;
	}
	control_lower(h->platform, platform, sizeof platform);
	control_lower(h->device_family, family, sizeof family);
	buf_init(&payload, 4096);
	/* v3 first (it adds platform and device family), then v2. */
	for (int v = 3; v >= 2 && !ok; v--) {
		buf_reset(&payload);
		if (buf_printf(&payload, "v%d|%s|%s|%s|%s|%s|%" PRId64 "|%s|%s", v, id,
		               h->client_id ? h->client_id : "",
		               h->client_mode ? h->client_mode : "", h->role,
		               h->scopes_csv.data ? h->scopes_csv.data : "",
		               (int64_t)json_integer_value(signed_at), token, c->nonce) != SB_OK ||
		    (v == 3 && buf_printf(&payload, "|%s|%s", platform, family) != SB_OK))
			break;
		ok = crypto_sign_verify_detached(sig, (const unsigned char *)payload.data,
		                                 payload.len, key) == 0;
	}
	buf_free(&payload);
	if (!ok)
		return false;
	snprintf(device_id, 65, "%s", hex);
	sodium_bin2base64(pub_b64, 64, key, sizeof key, sodium_base64_VARIANT_URLSAFE_NO_PADDING);
	return true;
}

/* A connect that waits for the store. */
struct control_connect {
	struct control_op base;
	int protocol;
	unsigned want;
	char client_id[CONTROL_FIELD_MAX + 1];
	char client_mode[32];
	char platform[CONTROL_FIELD_MAX + 1];
	char *scopes_csv;
	bool has_device; /* the signature checked out */
	char device_id[65];
	char public_key[64];
	char token[64]; /* a device token being issued */
	bool browser;   /* the upgrade came from a browser page (it sent an Origin) */
};

static void control_connect_release(struct control_op *op)
{
	struct control_connect *k = (struct control_connect *)op;

	free(k->scopes_csv);
	sodium_memzero(k->token, sizeof k->token);
	free(k);
}

static json_t *control_hello_ok(struct control_conn *c, const char *device_token)
{
	struct control *ctl = c->ctl;
	struct config *cfg = ctl->ctx.host->config(ctl->ctx.host->ctx);
	const struct agent_config *def = config_default_agent(cfg);
	json_t *methods = json_array(), *events = json_array(), *auth, *out;
	char main_key[CONTROL_KEY_MAX];

	for (size_t i = 0; methods && control_methods[i].name; i++)
		json_array_append_new(methods, json_string(control_methods[i].name));
	for (size_t i = 0; methods && control_ops_methods[i].name; i++)
		json_array_append_new(methods, json_string(control_ops_methods[i].name));
	for (size_t i = 0; events && i < sizeof control_event_names / sizeof *control_event_names;
	     i++)
		json_array_append_new(events, json_string(control_event_names[i]));
	snprintf(main_key, sizeof main_key, "agent:%s:main", def ? def->id : "main");
	auth = json_pack("{ss so}", "role", "operator", "scopes", control_scopes_json(c->scopes));
	if (auth && *c->device_id)
		json_object_set_new(auth, "deviceId", json_string(c->device_id));
	if (auth && device_token)
		json_object_set_new(auth, "deviceToken", json_string(device_token));
	out =
	    json_pack("{ss si s{ss ss ss} s{so so} s{sI s{ss ss ss}} so s{sI sI sI}}", "type",
	              "hello-ok", "protocol", c->protocol, "server", "name", "switchboard",
	              "version", SB_VERSION, "connId", c->conn_id, "features", "methods",
	              methods ? methods : json_array(), "events", events ? events : json_array(),
	              "snapshot", "uptimeMs", (json_int_t)control_uptime_ms(ctl), "sessionDefaults",
	              "defaultAgentId", def ? def->id : "main", "mainKey", "main", "mainSessionKey",
	              main_key, "auth", auth ? auth : json_object(), "policy", "maxPayload",
	              (json_int_t)cfg->gateway.control.max_payload, "maxBufferedBytes",
	              (json_int_t)ctl->max_buffered, "tickIntervalMs", (json_int_t)ctl->tick_ms);
	config_unref(cfg);
	return out;
}

static void control_connected(struct control_conn *c, const json_t *id, int protocol,
                              unsigned scopes, const char *client_id, const char *client_mode,
                              const char *device_id, const char *device_token)
{
	struct config *cfg = c->ctl->ctx.host->config(c->ctl->ctx.host->ctx);

	c->connecting = false;
	c->authed = true;
	c->protocol = protocol;
	c->scopes = scopes;
	snprintf(c->client_id, sizeof c->client_id, "%s", client_id ? client_id : "");
	snprintf(c->client_mode, sizeof c->client_mode, "%s", client_mode ? client_mode : "");
	snprintf(c->device_id, sizeof c->device_id, "%s", device_id ? device_id : "");
	control_timer_drop(&c->handshake);
	server_ws_set_max_message(c->ws, (size_t)cfg->gateway.control.max_payload);
	server_ws_keep(c->ws);
	config_unref(cfg);
	log_info("control", "client connected", LOG_S("conn", c->conn_id), LOG_S("peer", c->peer),
	         LOG_S("client", c->client_id), LOG_S("device", device_id ? device_id : ""),
	         LOG_I("protocol", protocol));
	control_reply_ok(c, id, control_hello_ok(c, device_token));
}

static void control_refuse(struct control_conn *c, const json_t *id, const char *code,
                           const char *message, json_t *details, int close_code)
{
	c->connecting = false;
	control_reply_error(c, id, code, message, details, false, 0);
	control_close(c, close_code, message);
}

static void control_auth_refused(struct control_conn *c, const json_t *id, const char *why)
{
	log_info("control", "connect refused", LOG_S("conn", c->conn_id), LOG_S("peer", c->peer),
	         LOG_S("why", why));
	if (c->ctl)
		control_auth_failed(c->ctl, c->peer);
	control_refuse(c, id, CONTROL_E_UNAUTHORIZED, why, NULL, SERVER_WS_POLICY);
}

static void control_connect_token_set(void *ud, int rc)
{
	struct control_connect *k = ud;
	struct control_conn *c = k->base.conn;

	if (!control_op_live(&k->base)) {
		control_op_free(&k->base);
		return;
	}
	if (rc)
		control_refuse(c, k->base.id, CONTROL_E_UNAVAILABLE,
		               "cannot record the device token; try again", NULL,
		               SERVER_WS_TRY_LATER);
	else
		/* A page gets no token: it proves itself with its non-extractable
		 * key on every connection, and a bearer token its scripts could
		 * read would outlive that protection. The new hash is still
		 * stored, so any earlier token stops working. */
		control_connected(c, k->base.id, k->protocol, k->want, k->client_id, k->client_mode,
		                  k->device_id, k->browser ? NULL : k->token);
	control_op_free(&k->base);
}

static void control_connect_requested(void *ud, int rc, const struct store_device *d, bool created)
{
	struct control_connect *k = ud;
	struct control_conn *c = k->base.conn;
	unsigned char raw[CONTROL_DEVICE_TOKEN_BYTES];
	char hash[65];

	if (!control_op_live(&k->base)) {
		control_op_free(&k->base);
		return;
	}
	if (rc || !d) {
		control_refuse(c, k->base.id, CONTROL_E_UNAVAILABLE,
		               "cannot look up the device; try again", NULL, SERVER_WS_TRY_LATER);
		control_op_free(&k->base);
		return;
	}
	if (strcmp(d->state, "approved") != 0) {
		/* New identities count like failures, so that one address
		 * cannot churn the (bounded) pending list. */
		if (created)
			control_auth_failed(c->ctl, c->peer);
		log_info("control",
		         created ? "new device waits for approval"
		                 : "device still waits for approval",
		         LOG_S("device", d->device_id), LOG_S("peer", c->peer),
		         LOG_S("client", k->client_id));
		control_refuse(c, k->base.id, CONTROL_E_NOT_PAIRED,
		               "this device is waiting for approval: switchboard devices approve "
		               "<deviceId>",
		               json_pack("{ss ss sb}", "code", "PAIRING_REQUIRED", "deviceId",
		                         d->device_id, "created", created),
		               SERVER_WS_POLICY);
		control_op_free(&k->base);
		return;
	}
	/* Approved: a fresh token on every signed connect; the store keeps only
	 * its hash. */
	k->want &= control_scopes_parse(d->scopes);
	randombytes_buf(raw, sizeof raw);
	sodium_bin2base64(k->token, sizeof k->token, raw, sizeof raw,
	                  sodium_base64_VARIANT_URLSAFE_NO_PADDING);
	sodium_memzero(raw, sizeof raw);
	control_token_hash(k->token, hash);
	if (store_device_set_token(c->ctl->ctx.store, k->device_id, hash, control_connect_token_set,
	                           k) != SB_OK) {
		control_refuse(c, k->base.id, CONTROL_E_UNAVAILABLE, "the store is busy; try again",
		               NULL, SERVER_WS_TRY_LATER);
		control_op_free(&k->base);
	}
}

/* Continues with the device signature (if any) once tokens failed. */
static void control_connect_device(struct control_connect *k)
{
	struct control_conn *c = k->base.conn;
	struct store_device d;

	if (!k->has_device) {
		control_auth_refused(c, k->base.id, "the token is not valid");
		control_op_free(&k->base);
		return;
	}
	memset(&d, 0, sizeof d);
	d.device_id = k->device_id;
	d.public_key = k->public_key;
	d.client_id = k->client_id;
	d.platform = *k->platform ? k->platform : NULL;
	d.scopes = k->scopes_csv;
	d.remote_addr = c->peer;
	if (store_device_request(c->ctl->ctx.store, &d, control_connect_requested, k) != SB_OK) {
		control_refuse(c, k->base.id, CONTROL_E_UNAVAILABLE, "the store is busy; try again",
		               NULL, SERVER_WS_TRY_LATER);
		control_op_free(&k->base);
	}
}

static void control_connect_token_found(void *ud, int rc, const struct store_device *d,
                                        bool created)
{
	struct control_connect *k = ud;
	struct control_conn *c = k->base.conn;

	(void)created;
	if (!control_op_live(&k->base)) {
		control_op_free(&k->base);
		return;
	}
	if (rc == SB_OK && d && (!k->has_device || strcmp(d->device_id, k->device_id) == 0)) {
		control_connected(c, k->base.id, k->protocol,
		                  k->want & control_scopes_parse(d->scopes), k->client_id,
		                  k->client_mode, d->device_id, NULL);
		control_op_free(&k->base);
		return;
	}
	if (rc != SB_OK && rc != SB_ERR_NOTFOUND) {
		control_refuse(c, k->base.id, CONTROL_E_UNAVAILABLE,
		               "cannot look up the token; try again", NULL, SERVER_WS_TRY_LATER);
		control_op_free(&k->base);
		return;
	}
	control_connect_device(k);
}

/* Copies a short string field; false when it is there but not a string,
 * too long, or holds a '|' (the signed payload's separator). */
static bool control_field(const json_t *obj, const char *key, const char **out)
{
	const json_t *v = json_object_get(obj, key);

	*out = NULL;
	if (!v || json_is_null(v))
		return true;
	if (!json_is_string(v) || json_string_length(v) > CONTROL_FIELD_MAX ||
	    strchr(json_string_value(v), '|'))
		return false;
	*out = json_string_value(v);
	return true;
}

/* Reads the connect params into h; returns NULL or what is wrong. */
static const char *control_hello_parse(const json_t *params, struct control_hello *h)
{
	const json_t *minp = json_object_get(params, "minProtocol"),
	             *maxp = json_object_get(params, "maxProtocol"),
	             *client = json_object_get(params, "client"),
	             *scopes = json_object_get(params, "scopes"),
	             *auth = json_object_get(params, "auth"),
	             *role = json_object_get(params, "role");
	json_int_t lo, hi;
	size_t i;
	const json_t *s;

	if (!json_is_integer(minp) || !json_is_integer(maxp))
		return "minProtocol and maxProtocol are required integers";
	lo = json_integer_value(minp);
	hi = json_integer_value(maxp);
	if (lo > hi || hi < CONTROL_PROTOCOL_MIN || lo > CONTROL_PROTOCOL_MAX)
		return "protocol";
	h->protocol = (int)(hi > CONTROL_PROTOCOL_MAX ? CONTROL_PROTOCOL_MAX : hi);
	h->role = role && json_is_string(role) ? json_string_value(role) : "operator";
	if (client && !json_is_object(client))
		return "client must be an object";
	if (!control_field(client, "id", &h->client_id) ||
	    !control_field(client, "mode", &h->client_mode) ||
	    !control_field(client, "version", &h->client_version) ||
	    !control_field(client, "platform", &h->platform) ||
	    !control_field(client, "deviceFamily", &h->device_family))
		return "client fields are strings of at most 63 characters without '|'";
	if (scopes && !json_is_array(scopes))
		return "scopes must be an array of strings";
	if (!scopes)
		h->want = CONTROL_SCOPES_ALL;
	json_array_foreach(scopes, i, s)
	{
		const char *name = json_string_value(s);

		if (!name || strpbrk(name, ",|") || i >= 32)
			return "scopes must be at most 32 strings without ',' or '|'";
		h->want |= control_scope_bit(name, strlen(name));
		if ((i && buf_puts(&h->scopes_csv, ",")) || buf_puts(&h->scopes_csv, name))
			return "scopes are too long";
	}
	if (auth && !json_is_object(auth))
		return "auth must be an object";
	h->token = json_string_value(json_object_get(auth, "token"));
	h->device_token = json_string_value(json_object_get(auth, "deviceToken"));
	h->web_sig = json_string_value(json_object_get(auth, "webSignature"));
	h->device = json_object_get(params, "device");
	if (h->device && json_is_null(h->device))
		h->device = NULL;
	if (h->device && !json_is_object(h->device))
		return "device must be an object";
	return NULL;
}

static void control_connect(struct control_conn *c, const json_t *id, const json_t *params)
{
	struct control *ctl = c->ctl;
	struct control_hello h;
	struct control_connect *k = NULL;
	const char *why, *lookup;
	int64_t locked;
	char hash[65];

	memset(&h, 0, sizeof h);
	buf_init(&h.scopes_csv, 2048);
	if (c->connecting) {
		control_reply_error(c, id, CONTROL_E_INVALID, "connect is already in progress",
		                    NULL, false, 0);
		goto out;
	}
	locked = control_locked(ctl, c->peer);
	why = control_hello_parse(params, &h);
	/* The lockout slows down guessing; it must not keep the operator out.
	 * Every program on this host is 127.0.0.1, so a client that fails on
	 * purpose would lock out the CLI too: from loopback the gateway token
	 * still connects (a wrong one is refused as before, uncounted). */
	if (locked && !why && config_is_loopback(c->peer) && h.token &&
	    strcmp(h.role, "operator") == 0 && control_gateway_token(ctl, h.token)) {
		log_info("control", "locked-out loopback address connected with the gateway token",
		         LOG_S("peer", c->peer));
		locked = 0;
	}
	if (locked) {
		c->connecting = false;
		control_reply_error(c, id, CONTROL_E_RATE_LIMITED,
		                    "too many failed attempts from this address; try later", NULL,
		                    true, locked);
		control_close(c, SERVER_WS_POLICY, "rate limited");
		goto out;
	}
	if (why && strcmp(why, "protocol") == 0) {
		control_refuse(c, id, CONTROL_E_INVALID, "no common protocol version",
		               json_pack("{ss si si}", "code", "PROTOCOL_MISMATCH", "minProtocol",
		                         CONTROL_PROTOCOL_MIN, "maxProtocol", CONTROL_PROTOCOL_MAX),
		               SERVER_WS_PROTOCOL_ERROR);
		goto out;
	}
	if (why) {
		control_refuse(c, id, CONTROL_E_INVALID, why, NULL, SERVER_WS_POLICY);
		goto out;
	}
	if (strcmp(h.role, "operator") != 0) {
		control_refuse(c, id, CONTROL_E_INVALID, "only the operator role is served",
		               json_pack("{ss ss}", "code", "UNSUPPORTED_ROLE", "role", h.role),
		               SERVER_WS_POLICY);
		goto out;
	}
	if (h.token && control_gateway_token(ctl, h.token)) {
		control_connected(c, id, h.protocol, h.want & CONTROL_SCOPES_ALL, h.client_id,
		                  h.client_mode, NULL, NULL);
		goto out;
	}
	if (!h.token && !h.device_token && !h.device && c->has_cookie) {
		/* A signed-in browser: the session cookie came with the upgrade,
		 * and the page signed this connection's challenge with the key it
		 * made at sign-in. The cookie alone is not enough: browsers send
		 * it to every port of the host, so any program listening on
		 * 127.0.0.1 can read it. */
		unsigned granted =
		    control_web_session_verify(ctl, c->web_hash, c->nonce, h.web_sig, &why);

		if (!granted) {
			control_auth_refused(c, id, why);
			goto out;
		}
		c->via_web = true;
		control_connected(c, id, h.protocol, h.want & granted, h.client_id,
		                  h.client_mode, NULL, NULL);
		goto out;
	}
	k = calloc(1, sizeof *k);
	if (!k) {
		control_refuse(c, id, CONTROL_E_INTERNAL, "out of memory", NULL,
		               SERVER_WS_INTERNAL);
		goto out;
	}
	k->base.release = control_connect_release;
	k->browser = origin_from_browser(c->origin);
	k->protocol = h.protocol;
	k->want = h.want;
	snprintf(k->client_id, sizeof k->client_id, "%s", h.client_id ? h.client_id : "");
	snprintf(k->client_mode, sizeof k->client_mode, "%s", h.client_mode ? h.client_mode : "");
	snprintf(k->platform, sizeof k->platform, "%s", h.platform ? h.platform : "");
	k->scopes_csv = strdup(h.scopes_csv.data ? h.scopes_csv.data : "");
	control_op_start(&k->base, c, id);
	if (!k->scopes_csv) {
		control_refuse(c, id, CONTROL_E_INTERNAL, "out of memory", NULL,
		               SERVER_WS_INTERNAL);
		control_op_free(&k->base);
		goto out;
	}
	if (h.device) {
		if (!control_device_verify(c, &h, k->device_id, k->public_key, &why)) {
			control_auth_refused(c, id, why);
			control_op_free(&k->base);
			goto out;
		}
		k->has_device = true;
	}
	lookup = h.device_token ? h.device_token : h.token;
	c->connecting = true;
	if (!lookup) {
		if (!k->has_device) {
			control_auth_refused(c, id,
			                     "connect needs auth.token or a device identity");
			control_op_free(&k->base);
			goto out;
		}
		control_connect_device(k);
		goto out;
	}
	control_token_hash(lookup, hash);
	if (store_device_get(ctl->ctx.store, NULL, hash, control_connect_token_found, k) != SB_OK) {
		control_refuse(c, id, CONTROL_E_UNAVAILABLE, "the store is busy; try again", NULL,
		               SERVER_WS_TRY_LATER);
		control_op_free(&k->base);
	}
out:
	buf_free(&h.scopes_csv);
}

/* ---- requests ---- */

static void control_dispatch(struct control_conn *c, const json_t *id, const char *method,
                             json_t *params)
{
	const struct control_method *m;

	if (!c->authed) {
		if (strcmp(method, "connect") == 0) {
			control_connect(c, id, params);
			return;
		}
		control_refuse(c, id, CONTROL_E_INVALID, "the first request must be connect", NULL,
		               SERVER_WS_POLICY);
		return;
	}
	if (strcmp(method, "connect") == 0) {
		control_reply_error(c, id, CONTROL_E_INVALID, "already connected", NULL, false, 0);
		return;
	}
	m = control_method_find(method);
	if (!m) {
		control_reply_error(
		    c, id, CONTROL_E_INVALID, "unknown method",
		    json_pack("{ss ss}", "code", "UNKNOWN_METHOD", "method", method), false, 0);
		return;
	}
	if (c->in_flight >= CONTROL_INFLIGHT_MAX) {
		control_reply_error(c, id, CONTROL_E_UNAVAILABLE,
		                    "too many requests waiting for an answer on this connection",
		                    NULL, true, 1000);
		return;
	}
	if ((control_scopes_effective(c->scopes) & m->scope) != m->scope) {
		char msg[96];

		snprintf(msg, sizeof msg, "missing scope: %s", control_scope_name(m->scope));
		control_reply_error(c, id, CONTROL_E_FORBIDDEN, msg,
		                    json_pack("{ss ss}", "code", "MISSING_SCOPE", "scope",
		                              control_scope_name(m->scope)),
		                    false, 0);
		return;
	}
	m->fn(c, id, params);
}

static void control_on_message(void *conn, const char *data, size_t len)
{
	struct control_conn *c = conn;
	json_error_t err;
	json_t *f, *id, *params;
	const char *type, *method;

	if (c->closing)
		return;
	f = json_loadb(data, len, JSON_REJECT_DUPLICATES, &err);
	if (!f || !json_is_object(f)) {
		json_decref(f);
		control_close(c, SERVER_WS_POLICY, "frames are JSON objects");
		return;
	}
	type = json_string_value(json_object_get(f, "type"));
	id = json_object_get(f, "id");
	method = json_string_value(json_object_get(f, "method"));
	params = json_object_get(f, "params");
	if (!type || strcmp(type, "req") != 0 ||
	    !((json_is_string(id) && json_string_length(id) > 0 &&
	       json_string_length(id) <= CONTROL_ID_MAX) ||
	      json_is_integer(id))) {
		json_decref(f);
		control_close(c, SERVER_WS_POLICY, "expected {\"type\":\"req\",\"id\",...}");
		return;
	}
	if (!method || !*method) {
		if (c->authed)
			control_reply_error(c, id, CONTROL_E_INVALID, "method is required", NULL,
			                    false, 0);
		else
			control_refuse(c, id, CONTROL_E_INVALID,
			               "the first request must be connect", NULL, SERVER_WS_POLICY);
		json_decref(f);
		return;
	}
	if (params && json_is_null(params))
		params = NULL;
	if (params && !json_is_object(params)) {
		if (c->authed)
			control_reply_error(c, id, CONTROL_E_INVALID, "params must be an object",
			                    NULL, false, 0);
		else
			control_refuse(c, id, CONTROL_E_INVALID, "params must be an object", NULL,
			               SERVER_WS_POLICY);
		json_decref(f);
		return;
	}
	if (!params) {
		params = json_object();
		if (!params) {
			json_decref(f);
			return;
		}
		json_object_set_new(f, "params", params);
	}
	control_conn_ref(c);
	control_dispatch(c, id, method, params);
	control_conn_unref(c);
	json_decref(f);
}

/* ---- connections: open and close ---- */

static void control_handshake_expired(uv_timer_t *t)
{
	struct control_conn *c = t->data;

	if (c->authed || c->connecting)
		return;
	log_info("control", "no connect in time; closing", LOG_S("conn", c->conn_id),
	         LOG_S("peer", c->peer));
	control_close(c, SERVER_WS_POLICY, "handshake timeout");
}

static int control_on_open(void *ud, struct server_ws *ws, void **conn)
{
	struct control *ctl = ud;
	struct config *cfg = ctl->ctx.host->config(ctl->ctx.host->ctx);
	struct control_conn *c = calloc(1, sizeof *c);
	unsigned char raw[32];
	json_t *challenge;

	if (!c) {
		config_unref(cfg);
		return SB_ERR_NOMEM;
	}
	c->ctl = ctl;
	c->ws = ws;
	c->refs = 1;
	snprintf(c->conn_id, sizeof c->conn_id, "c%" PRIu64 "-%08" PRIx32, ++ctl->next_conn,
	         randombytes_random());
	snprintf(c->peer, sizeof c->peer, "%s", server_ws_peer(ws));
	snprintf(c->origin, sizeof c->origin, "%s", server_ws_origin(ws));
	c->has_cookie = control_web_cookie_hash(ctl, server_ws_cookie(ws), c->web_hash);
	randombytes_buf(raw, sizeof raw);
	sodium_bin2hex(c->nonce, sizeof c->nonce, raw, sizeof raw);
	c->challenge_ts = clock_wall_ms();
	c->handshake = calloc(1, sizeof *c->handshake);
	if (c->handshake) {
		uv_timer_init(ctl->ctx.loop, c->handshake);
		c->handshake->data = c;
		uv_timer_start(c->handshake, control_handshake_expired,
		               (uint64_t)cfg->gateway.control.handshake_timeout_ms, 0);
	}
	c->next = ctl->conns;
	if (ctl->conns)
		ctl->conns->prev = c;
	ctl->conns = c;
	ctl->n_conns++;
	*conn = c;
	/* A browser page (it sends Origin as scheme://host; other clients send
	 * none, or lws' bare host name) must be one of the allowed origins, or
	 * any site the operator visits could talk to the gateway on loopback
	 * with the browser's cookie. */
	if (origin_from_browser(server_ws_origin(ws)) && !origin_allowed(cfg, ctl->port, server_ws_origin(ws))) {
		log_info("control", "connection refused: origin not allowed",
		         LOG_S("origin", server_ws_origin(ws)), LOG_S("peer", c->peer),
		         LOG_S("hint", "add it to gateway.control.allowed_origins"));
		config_unref(cfg);
		control_close(c, SERVER_WS_POLICY, "origin not allowed");
		return SB_OK;
	}
	config_unref(cfg);
	challenge = json_pack("{ss sI}", "nonce", c->nonce, "ts", (json_int_t)c->challenge_ts);
	control_send_event(c, "connect.challenge", challenge);
	return SB_OK;
}

static void control_on_closed(void *conn, int code)
{
	struct control_conn *c = conn;

	if (c->authed)
		log_info("control", "client disconnected", LOG_S("conn", c->conn_id),
		         LOG_S("peer", c->peer), LOG_I("code", code));
	c->ws = NULL;
	control_timer_drop(&c->handshake);
	control_conn_unlink(c);
	control_conn_unref(c);
}

static const struct server_ws_ops control_ws_ops = {
    .open = control_on_open,
    .message = control_on_message,
    .closed = control_on_closed,
};

/* ---- runs and events ---- */

static void control_run_free(struct control_run *r)
{
	if (!r)
		return;
	buf_free(&r->text);
	free(r->run_id);
	free(r->session_key);
	free(r);
}

static struct control_run *control_run_get(struct control *ctl, const struct event *e)
{
	struct control_run *r;

	if (!e->run_id || !e->session_key)
		return NULL;
	r = strmap_get(ctl->runs, e->run_id);
	if (r)
		return r;
	r = calloc(1, sizeof *r);
	if (!r)
		return NULL;
	buf_init(&r->text, CONTROL_RUN_TEXT_MAX);
	r->run_id = strdup(e->run_id);
	r->session_key = strdup(e->session_key);
	if (!r->run_id || !r->session_key || strmap_put(ctl->runs, e->run_id, r) != SB_OK) {
		control_run_free(r);
		return NULL;
	}
	return r;
}

static json_t *control_assistant_message(const char *text)
{
	return json_pack("{ss s[{ss ss}]}", "role", "assistant", "content", "type", "text", "text",
	                 text ? text : "");
}

static void control_chat_event(struct control *ctl, struct control_run *r, const char *state,
                               const char *text, const char *stop_reason)
{
	json_t *p;

	/* Unheard, the sequence still counts: a client that subscribes
	 * mid-run sees the numbers a client subscribed from the start sees. */
	if (!control_listening(ctl, r->session_key, CONTROL_SCOPE_READ)) {
		++r->chat_seq;
		return;
	}
	p = json_pack("{ss ss sI ss}", "runId", r->run_id, "sessionKey", r->session_key, "seq",
	              (json_int_t)++r->chat_seq, "state", state);
	if (!p)
		return;
	if (strcmp(state, "error") == 0)
		json_object_set_new(p, "errorMessage", json_string(text ? text : ""));
	if (strcmp(state, "aborted") != 0 || (text && *text))
		json_object_set_new(p, "message", control_assistant_message(text));
	if (stop_reason)
		json_object_set_new(p, "stopReason", json_string(stop_reason));
	control_broadcast(ctl, r->session_key, CONTROL_SCOPE_READ, "chat", p);
}

/* Whether r's agent events would reach a connection; when not, counts the
 * event that is not built (as control_chat_event does). */
static bool control_agent_heard(struct control *ctl, struct control_run *r)
{
	if (control_listening(ctl, r->session_key, CONTROL_SCOPE_READ))
		return true;
	++r->agent_seq;
	return false;
}

static void control_agent_event(struct control *ctl, struct control_run *r, const char *stream,
                                json_t *data)
{
	json_t *p = json_pack("{ss ss sI ss sI}", "runId", r->run_id, "sessionKey", r->session_key,
	                      "seq", (json_int_t)++r->agent_seq, "stream", stream, "ts",
	                      (json_int_t)clock_wall_ms());

	if (!p) {
		json_decref(data);
		return;
	}
	json_object_set_new(p, "data", data ? data : json_object());
	control_broadcast(ctl, r->session_key, CONTROL_SCOPE_READ, "agent", p);
}

static void control_flush_run(void *ud, const char *key, void *value)
{
	struct control *ctl = ud;
	struct control_run *r = value;

	(void)key;
	if (!r->dirty)
		return;
	r->dirty = false;
	r->sent_at = uv_now(ctl->ctx.loop);
	control_chat_event(ctl, r, "delta", r->text.data, NULL);
}

static void control_flush_fire(uv_timer_t *t)
{
	struct control *ctl = t->data;

	ctl->flush_armed = false;
	strmap_each(ctl->runs, control_flush_run, ctl);
}

static const char *control_end_state(const char *status)
{
	if (!status)
		return "final";
	if (strcmp(status, "aborted") == 0 || strcmp(status, "interrupted") == 0)
		return "aborted";
	if (strcmp(status, "error") == 0 || strcmp(status, "timeout") == 0)
		return "error";
	return "final";
}

static void control_on_event(void *ud, const struct event *e)
{
	struct control *ctl = ud;
	struct control_run *r;
	json_t *data;

	switch (e->kind) {
	case EVENT_RUN_START:
		if ((r = control_run_get(ctl, e)) && control_agent_heard(ctl, r))
			control_agent_event(ctl, r, "lifecycle",
			                    json_pack("{ss ss sI}", "phase", "start", "agentId",
			                              e->agent_id ? e->agent_id : "", "startedAt",
			                              (json_int_t)clock_wall_ms()));
		return;
	case EVENT_DELTA:
		if (!(r = control_run_get(ctl, e)) || !e->text)
			return;
		buf_puts(&r->text, e->text);
		r->dirty = true;
		/* The first delta of a quiet spell goes out at once, the rest
		 * at most every CONTROL_CHAT_THROTTLE_MS. */
		if (!r->sent_at || uv_now(ctl->ctx.loop) - r->sent_at >= CONTROL_CHAT_THROTTLE_MS) {
			control_flush_run(ctl, r->run_id, r);
		} else if (!ctl->flush_armed) {
			ctl->flush_armed = true;
			uv_timer_start(ctl->flush, control_flush_fire, CONTROL_CHAT_THROTTLE_MS, 0);
		}
		if (control_agent_heard(ctl, r))
			control_agent_event(ctl, r, "assistant",
			                    json_pack("{ss}", "delta", e->text));
		return;
	case EVENT_TOOL_START:
	case EVENT_TOOL_END:
		if (!(r = control_run_get(ctl, e)) || !control_agent_heard(ctl, r))
			return;
		data = json_pack(
		    "{ss ss ss}", "phase", e->kind == EVENT_TOOL_START ? "start" : "result", "name",
		    e->tool_name ? e->tool_name : "", "toolCallId", e->tool_id ? e->tool_id : "");
		if (data && e->kind == EVENT_TOOL_START && e->input)
			json_object_set_new(data, "args", json_deep_copy(e->input));
		if (data && e->kind == EVENT_TOOL_END) {
			json_object_set_new(data, "isError", json_boolean(e->is_error));
			json_object_set_new(
			    data, "result",
			    json_stringn_nocheck(e->text ? e->text : "",
			                         e->text && strlen(e->text) > CONTROL_TOOL_TEXT_MAX
			                             ? CONTROL_TOOL_TEXT_MAX
			                             : strlen(e->text ? e->text : "")));
		}
		control_agent_event(ctl, r, "tool", data);
		return;
	case EVENT_RUN_END:
		if ((r = control_run_get(ctl, e))) {
			const char *state = control_end_state(e->status);

			control_chat_event(ctl, r, state, e->text, e->status);
			if (control_agent_heard(ctl, r))
				control_agent_event(
				    ctl, r, "lifecycle",
				    json_pack("{ss ss sI}", "phase",
				              strcmp(state, "error") == 0 ? "error" : "end",
				              "stopReason", e->status ? e->status : "", "endedAt",
				              (json_int_t)clock_wall_ms()));
			strmap_del(ctl->runs, r->run_id);
			control_run_free(r);
		}
		if (e->session_key && control_listening(ctl, NULL, CONTROL_SCOPE_READ))
			control_broadcast(ctl, NULL, CONTROL_SCOPE_READ, "sessions.changed",
			                  json_pack("{ss ss sI}", "sessionKey", e->session_key,
			                            "reason", "run_end", "ts",
			                            (json_int_t)clock_wall_ms()));
		return;
	case EVENT_SESSIONS_CHANGED:
		if (!control_listening(ctl, NULL, CONTROL_SCOPE_READ))
			return;
		control_broadcast(ctl, NULL, CONTROL_SCOPE_READ, "sessions.changed",
		                  json_pack("{ss sI}", "sessionKey",
		                            e->session_key ? e->session_key : "", "ts",
		                            (json_int_t)clock_wall_ms()));
		return;
	case EVENT_SHUTDOWN:
		control_broadcast(ctl, NULL, 0, "shutdown",
		                  json_pack("{ss sn}", "reason", e->text ? e->text : "shutdown",
		                            "restartExpectedMs"));
		return;
	case EVENT_APPROVAL_REQUESTED:
	case EVENT_APPROVAL_RESOLVED:
		/* operators who may answer them: the admin scope */
		if (e->input)
			control_broadcast(ctl, NULL, CONTROL_SCOPE_ADMIN,
			                  e->kind == EVENT_APPROVAL_REQUESTED ? "approval.requested"
			                                                      : "approval.resolved",
			                  json_deep_copy(e->input));
		return;
	}
}

static void control_tick(uv_timer_t *t)
{
	struct control *ctl = t->data;

	/* Web sessions end on time even when nobody signs in or out. */
	control_web_expire(ctl);
	control_broadcast(ctl, NULL, 0, "tick",
	                  json_pack("{sI}", "ts", (json_int_t)clock_wall_ms()));
}

/* ---- the module ---- */

/* Reads $HOME/gateway.token (written by init, 0600); NULL when absent. */
static char *control_read_token(const char *home)
{
	char path[4096];

	if (snprintf(path, sizeof path, "%s/gateway.token", home) >= (int)sizeof path)
		return NULL;
	return secret_read_file(path, CONTROL_TOKEN_FILE_MAX);
}

static void control_free_run_cb(void *ud, const char *key, void *value)
{
	(void)ud;
	(void)key;
	control_run_free(value);
}

static void control_free(struct control *ctl)
{
	if (!ctl)
		return;
	for (size_t i = 0; i < ctl->n_eps; i++)
		server_ws_endpoint_remove(ctl->eps[i], SERVER_WS_GOING_AWAY,
		                          "the gateway is stopping");
	events_unsubscribe(ctl->sub);
	while (ctl->ops)
		control_op_detach(ctl->ops); /* its callback frees it */
	while (ctl->conns) {
		struct control_conn *c = ctl->conns;

		c->ws = NULL;
		control_timer_drop(&c->handshake);
		control_conn_unlink(c);
		control_conn_unref(c);
	}
	control_timer_drop(&ctl->tick);
	control_timer_drop(&ctl->flush);
	if (ctl->runs) {
		strmap_each(ctl->runs, control_free_run_cb, NULL);
		strmap_free(ctl->runs);
	}
	if (ctl->file_token) {
		sodium_memzero(ctl->file_token, strlen(ctl->file_token));
		free(ctl->file_token);
	}
	sodium_memzero(ctl->codes, sizeof ctl->codes);
	sodium_memzero(ctl->web, sizeof ctl->web);
	free(ctl);
}

static uv_timer_t *control_timer_new(struct control *ctl)
{
	uv_timer_t *t = calloc(1, sizeof *t);

	if (!t)
		return NULL;
	uv_timer_init(ctl->ctx.loop, t);
	t->data = ctl;
	return t;
}

static int control_start(const struct gateway_ctx *ctx, void **state)
{
	struct config *cfg = ctx->host->config(ctx->host->ctx);
	const struct config_control *cc = &cfg->gateway.control;
	const char *const *paths =
	    cc->n_paths ? (const char *const *)cc->paths : control_default_paths;
	size_t n_paths = cc->n_paths ? cc->n_paths : 2;
	struct server_ws_limits lim;
	struct control *ctl = NULL;
	int rc = SB_OK;

	*state = NULL;
	if (!cc->enabled) {
		log_info("control", "the control plane is off (gateway.control.enabled: false)");
		goto out;
	}
	rc = SB_ERR_NOMEM;
	ctl = calloc(1, sizeof *ctl);
	if (!ctl)
		goto out;
	ctl->ctx = *ctx;
	ctl->started_ms = uv_now(ctx->loop);
	ctl->port = server_port(ctx->server);
	ctl->tick_ms = cc->tick_interval_ms;
	ctl->max_buffered = cc->max_buffered;
	if (strmap_new(&ctl->runs) != SB_OK)
		goto out;
	ctl->file_token = control_read_token(ctx->home);
	if (!ctl->file_token && !cfg->gateway.auth_token)
		log_warn("control", "no gateway token: only approved devices can connect",
		         LOG_S("hint", "run `switchboard init` to create gateway.token"));
	ctl->tick = control_timer_new(ctl);
	ctl->flush = control_timer_new(ctl);
	if (!ctl->tick || !ctl->flush)
		goto out;
	uv_timer_start(ctl->tick, control_tick, (uint64_t)cc->tick_interval_ms,
	               (uint64_t)cc->tick_interval_ms);
	if ((rc = events_subscribe(ctx->events, NULL, control_on_event, ctl, &ctl->sub)) != SB_OK)
		goto out;
	memset(&lim, 0, sizeof lim);
	lim.max_message = CONTROL_PREAUTH_MAX;
	lim.max_queued = (size_t)cc->max_buffered;
	lim.ping_interval_ms = CONTROL_PING_MS;
	lim.idle_timeout_ms = CONTROL_IDLE_MS;
	for (size_t i = 0; i < n_paths && i < sizeof ctl->eps / sizeof *ctl->eps; i++) {
		rc = server_ws_endpoint_add(ctx->server, paths[i], &control_ws_ops, ctl, &lim,
		                            &ctl->eps[ctl->n_eps]);
		if (rc) {
			log_error("control", "cannot serve the WebSocket path",
			          LOG_S("path", paths[i]), LOG_S("error", sb_strerror(rc)));
			goto out;
		}
		ctl->n_eps++;
	}
	if ((rc = control_web_start(ctl)) != SB_OK)
		goto out;
	log_info("control", "serving the control plane", LOG_S("path", paths[0]),
	         LOG_I("paths", (int64_t)n_paths), LOG_I("tick_ms", cc->tick_interval_ms));
	*state = ctl;
	ctl = NULL;
	rc = SB_OK;
out:
	control_free(ctl);
	config_unref(cfg);
	return rc;
}

static void control_drain(void *state)
{
	struct control *ctl = state;

	if (!ctl || ctl->draining)
		return;
	ctl->draining = true;
	control_broadcast(
	    ctl, NULL, 0, "shutdown",
	    json_pack("{ss sn}", "reason", "the gateway is stopping", "restartExpectedMs"));
	for (struct control_conn *c = ctl->conns; c; c = c->next)
		control_close_if_idle(c);
}

/* While draining: the connections not closed yet (each closes once its
 * pending answers are out), so that the shutdown event and the close frame
 * reach every client before the server goes away. */
static size_t control_busy(void *state)
{
	struct control *ctl = state;

	return ctl && ctl->draining ? ctl->n_conns : 0;
}

static void control_stop(void *state)
{
	control_free(state);
}

const struct gateway_module_ops control_module = {
    .name = "control",
    .start = control_start,
    .drain = control_drain,
    .busy = control_busy,
    .stop = control_stop,
};
