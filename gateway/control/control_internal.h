/*
 * control_internal.h - what gateway/control/control.c (connections, handshake,
 * events) and gateway/control/control_methods.c (the methods) share. Nothing else
 * includes it.
 *
 * Loop thread only.
 */
#ifndef SB_GATEWAY_CONTROL_INTERNAL_H
#define SB_GATEWAY_CONTROL_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "gateway/config/config.h"
#include "gateway/core/buf.h"
#include "gateway/obs/events.h"
#include "gateway/module.h"
#include "gateway/http/server_ws.h"
#include "gateway/store/store.h"

#define CONTROL_PROTOCOL_MIN 3
#define CONTROL_PROTOCOL_MAX 4
#define CONTROL_PREAUTH_MAX ((size_t)64 << 10)
#define CONTROL_SUBS_MAX 64
#define CONTROL_KEY_MAX 512 /* session keys a client may name */
#define CONTROL_IDEMPOTENCY_MAX 200
#define CONTROL_LOCKOUT_ENTRIES 1024
#define CONTROL_RUN_TEXT_MAX ((size_t)1 << 20)
#define CONTROL_INFLIGHT_MAX 64 /* requests of one connection waiting for an answer */
#define CONTROL_WEB_HASH 32         /* BLAKE2b-256 of a sign-in code or session */
#define CONTROL_WEB_CODES_MAX 16    /* one-time codes outstanding */
#define CONTROL_WEB_SESSIONS_MAX 64 /* browsers signed in */
#define CONTROL_COOKIE_MAX 8192

/* Scopes, each implying the ones below it. */
enum control_scope {
	CONTROL_SCOPE_READ = 1u << 0,
	CONTROL_SCOPE_WRITE = 1u << 1,
	CONTROL_SCOPE_ADMIN = 1u << 2,
};

/* Error codes of error frames (docs/protocol.md). */
#define CONTROL_E_INVALID "INVALID_REQUEST"
#define CONTROL_E_UNAUTHORIZED "UNAUTHORIZED"
#define CONTROL_E_FORBIDDEN "FORBIDDEN"
#define CONTROL_E_NOT_PAIRED "NOT_PAIRED"
#define CONTROL_E_RATE_LIMITED "RATE_LIMITED"
#define CONTROL_E_NOT_FOUND "NOT_FOUND"
#define CONTROL_E_UNAVAILABLE "UNAVAILABLE"
#define CONTROL_E_TIMEOUT "AGENT_TIMEOUT"
#define CONTROL_E_INTERNAL "INTERNAL"

struct control_op;

/* One failed-auth record per peer address. */
struct control_lock {
	char addr[64];
	int64_t window_start; /* uv_now ms */
	int64_t failures;
	int64_t locked_until; /* uv_now ms; 0 = not locked */
};

/* A run somebody may be watching: its streamed text so far. */
struct control_run {
	char *run_id;
	char *session_key;
	struct buf text;
	int64_t chat_seq;  /* chat events of this run */
	int64_t agent_seq; /* agent events of this run */
	bool dirty;        /* text grew since the last chat delta */
	uint64_t sent_at;  /* uv_now of the last chat delta; 0 = none yet */
};

/* A one-time sign-in code (control_web.c). */
struct control_web_code {
	unsigned char hash[CONTROL_WEB_HASH];
	unsigned scopes;
	int64_t expires_at; /* unix ms */
};

/* A signed-in browser: its cookie's hash, and the public half of the key
 * its page made at sign-in (every connection must be signed with it). */
struct control_web_session {
	unsigned char hash[CONTROL_WEB_HASH];
	unsigned char key[32]; /* Ed25519 */
	unsigned scopes;
	int64_t created_at, expires_at; /* unix ms */
};

struct control {
	struct gateway_ctx ctx;
	int port; /* gateway.port at start (the cookie's name) */
	struct server_ws_endpoint *eps[4];
	size_t n_eps;
	struct events_sub *sub;
	struct control_conn *conns;
	size_t n_conns;
	struct control_op *ops; /* waiting for a callback */
	struct strmap *runs;    /* run id -> struct control_run */
	uv_timer_t *tick;
	uv_timer_t *flush; /* throttled chat deltas */
	bool flush_armed;
	char *file_token; /* $HOME/gateway.token, or NULL */
	int64_t tick_ms;  /* the settings read at start (restart-only keys) */
	int64_t max_buffered;
	uint64_t started_ms;
	uint64_t next_conn;
	bool draining;
	struct control_lock locks[CONTROL_LOCKOUT_ENTRIES];
	size_t n_locks;
	struct control_web_code codes[CONTROL_WEB_CODES_MAX];
	size_t n_codes;
	struct control_web_session web[CONTROL_WEB_SESSIONS_MAX];
	size_t n_web;
};

struct control_conn {
	struct control *ctl;
	struct server_ws *ws; /* NULL once the connection is gone */
	int refs;             /* the connection itself, and each op for it */
	int in_flight;        /* ops for it */
	char conn_id[32];
	char peer[64];
	char nonce[65];
	int64_t challenge_ts; /* unix ms */
	uv_timer_t *handshake;
	bool connecting; /* a connect is being decided */
	bool authed;
	bool closing;
	int protocol;
	unsigned scopes;
	char client_id[64];
	char client_mode[32];
	char device_id[65]; /* "" unless authenticated as a device */
	char origin[128];   /* the upgrade's Origin ("" for non-browser clients) */
	bool has_cookie;    /* the upgrade carried a web session cookie ... */
	unsigned char web_hash[CONTROL_WEB_HASH]; /* ... whose hash this is */
	bool via_web;                             /* authenticated by it */
	int64_t seq;        /* events sent */
	char *subs[CONTROL_SUBS_MAX];
	size_t n_subs;
	struct control_conn *prev, *next;
};

/* An asynchronous step of a request (a store operation, an ingest, a wait
 * for a reply, thread-pool work). It outlives the module when the module
 * stops first: ctl and conn are then NULL and the callback only frees it. */
struct control_op {
	struct control *ctl;
	struct control_conn *conn; /* a reference */
	json_t *id;                /* the request id */
	void (*release)(struct control_op *op);
	struct control_op *prev, *next;
};

/* ---- control.c ---- */

uint64_t control_uptime_ms(const struct control *ctl);

void control_conn_ref(struct control_conn *c);
void control_conn_unref(struct control_conn *c);

/* Registers op (allocated by the caller with op->release set) for request
 * id of c; takes a reference on c and on id. */
void control_op_start(struct control_op *op, struct control_conn *c, const json_t *id);
/* Whether the module and the connection are still there. */
bool control_op_live(const struct control_op *op);
/* Unregisters and frees op (release, references). */
void control_op_free(struct control_op *op);

/* Answers request id: ok with payload (taken; NULL = {}), or an error with
 * code, message, details (taken; may be NULL) and retry hints. */
void control_reply_ok(struct control_conn *c, const json_t *id, json_t *payload);
void control_reply_raw(struct control_conn *c, const json_t *id, const char *payload_json);
void control_reply_error(struct control_conn *c, const json_t *id, const char *code,
                         const char *message, json_t *details, bool retryable,
                         int64_t retry_after_ms);

/* Sends an event (payload taken) to one connection. */
void control_send_event(struct control_conn *c, const char *event, json_t *payload);

/* Subscribes c to a session key ("*" = every session). */
int control_subscribe(struct control_conn *c, const char *key);
void control_unsubscribe(struct control_conn *c, const char *key);

/* Closes every connection authenticated as device_id. */
void control_drop_device(struct control *ctl, const char *device_id);

/* Failed-auth bookkeeping and the gateway token (control.c), shared with
 * the web sign-in. */
int64_t control_locked(struct control *ctl, const char *addr);
void control_auth_failed(struct control *ctl, const char *addr);
bool control_gateway_token(struct control *ctl, const char *token);

/* Closes every connection authenticated by the web session of hash. */
void control_drop_web(struct control *ctl, const unsigned char *hash, const char *reason);

/* Base64url/base64 decoding, and an Ed25519 public key in any of the
 * accepted forms (raw 32 bytes in base64url or base64, SPKI DER in base64,
 * PEM); control.c. */
int control_b64_decode(const char *in, unsigned char *out, size_t size);
bool control_public_key(const char *text, unsigned char key[32]);

/* ---- control_web.c ---- */

/* Registers /auth/login, /auth/logout and /auth/session on the server. */
int control_web_start(struct control *ctl);
/* A new one-time sign-in code (base64url, NUL-terminated in code) for a
 * session with scopes; *expires_at in unix ms. SB_ERR_INVAL when size is
 * too small. */
int control_web_code(struct control *ctl, unsigned scopes, char *code, size_t size,
                     int64_t *expires_at);
/* "sb_session_<port>". */
void control_web_cookie_name(const struct control *ctl, char *out, size_t size);
/* The hash of the session cookie in a Cookie header; false when absent.
 * When the header holds several cookies of that name (one planted for a
 * longer path by another program on the host comes first), the first that
 * names a live session wins. */
bool control_web_cookie_hash(struct control *ctl, const char *cookies,
                             unsigned char out[CONTROL_WEB_HASH]);
/* The scopes of the live web session of hash whose key signed
 * "switchboard-web-v1|<nonce>" with sig_b64; 0 when there is no such
 * session or the signature does not verify (*why says which). */
unsigned control_web_session_verify(struct control *ctl, const unsigned char *hash,
                                    const char *nonce, const char *sig_b64, const char **why);
/* Forgets expired codes and sessions, closing the connections of the
 * sessions (the control plane's tick). */
void control_web_expire(struct control *ctl);

/* ---- control_methods.c ---- */

struct control_method {
	const char *name;
	unsigned scope; /* enum control_scope needed */
	void (*fn)(struct control_conn *c, const json_t *id, json_t *params);
};

/* The methods, NULL-terminated by name: the core ones (control_methods.c)
 * and the operator's pages' (control_ops.c). */
extern const struct control_method control_methods[];
extern const struct control_method control_ops_methods[];

const struct control_method *control_method_find(const char *name);

/* The canonical session key of what a client named ("main",
 * "agent:ops:main"): agent id and key. SB_ERR_INVAL (malformed),
 * SB_ERR_NOTFOUND (no such agent, or no default agent for a short key). */
int control_session_key(const struct config *cfg, const char *name, char *key, size_t key_size,
                        char *agent, size_t agent_size);

/* The configuration as JSON with every secret replaced (new reference). */
json_t *control_config_json(const struct cfg_section *section, const void *obj);

/* Scope names ("operator.read,operator.write") and back. */
unsigned control_scopes_parse(const char *csv);
json_t *control_scopes_json(unsigned scopes);

#endif
