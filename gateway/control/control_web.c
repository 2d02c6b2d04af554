/*
 * control_web.c - signing a browser in to the control plane (docs/ui.md,
 * docs/protocol.md "Web sessions").
 *
 * Two ways in, both ending in a session cookie the browser cannot read:
 *
 *   - a one-time code from `switchboard dashboard` (the dashboard.code
 *     method, admin): 24 random bytes, valid gateway.ui.code_ttl, good for
 *     one sign-in; the CLI puts it after the '#' of the URL it prints, so it
 *     never reaches a server log or a Referer;
 *   - the gateway token, pasted into the page once.
 *
 * POST /auth/login {code, key} or {token, key} answers Set-Cookie:
 * sb_session_<port>=<32 random bytes>; HttpOnly; SameSite=Strict; Path=/
 * (Secure when the page is https). key is the public half of an Ed25519
 * pair the page made with WebCrypto (non-extractable, kept in the origin's
 * IndexedDB). The gateway keeps only BLAKE2b-256 hashes of codes and
 * sessions, and the session's public key, in memory: a restart signs every
 * browser out. The page then opens the control plane: the browser sends
 * the cookie with the upgrade, and the page signs the connection's
 * challenge with its key (auth.webSignature); a connect without other
 * credentials is authenticated by the two together. The cookie alone is
 * worth nothing: browsers do not keep cookies apart by port, so any
 * program listening on another port of the host receives it, but only the
 * page's own origin can use the key.
 * POST /auth/logout forgets the session and closes its connections;
 * GET /auth/session says whether the cookie is good (so the page does not
 * spend a failed connect finding out). Expired sessions are forgotten, and
 * their connections closed, on the control plane's tick.
 *
 * Every /auth request must come from a page of an allowed origin (Origin
 * header), with Content-Type application/json for the POSTs (no form can
 * send that across sites); failures count against the address like failed
 * connects, and a locked-out address is answered 429.
 *
 * Loop thread only.
 */
#include "gateway/control/control_internal.h"

#include <inttypes.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "gateway/core/clock.h"
#include "gateway/core/err.h"
#include "gateway/core/log.h"
#include "gateway/http/origin.h"
#include "gateway/http/server.h"

#define WEB_CODE_BYTES 24
#define WEB_SESSION_BYTES 32
#define WEB_BODY_MAX 8192
#define WEB_HDR_MAX 512
#define WEB_COOKIES_MAX 16 /* cookies of our name looked at in one header */

static struct config *web_config(struct control *ctl)
{
	return ctl->ctx.host->config(ctl->ctx.host->ctx);
}

static void web_hash(const char *secret, unsigned char out[CONTROL_WEB_HASH])
{
	crypto_generichash(out, CONTROL_WEB_HASH, (const unsigned char *)secret, strlen(secret),
	                   NULL, 0);
}

static void web_random(char *out, size_t size, size_t bytes)
{
	unsigned char raw[64];

	randombytes_buf(raw, bytes);
	sodium_bin2base64(out, size, raw, bytes, sodium_base64_VARIANT_URLSAFE_NO_PADDING);
	sodium_memzero(raw, sizeof raw);
}

void control_web_expire(struct control *ctl)
{
	int64_t now = clock_wall_ms();

	for (size_t i = 0; i < ctl->n_codes;)
		if (ctl->codes[i].expires_at <= now)
			ctl->codes[i] = ctl->codes[--ctl->n_codes];
		else
			i++;
	for (size_t i = 0; i < ctl->n_web;)
		if (ctl->web[i].expires_at <= now) {
			control_drop_web(ctl, ctl->web[i].hash, "the web session expired");
			ctl->web[i] = ctl->web[--ctl->n_web];
		} else {
			i++;
		}
}

int control_web_code(struct control *ctl, unsigned scopes, char *code, size_t size,
                     int64_t *expires_at)
{
	struct config *cfg = web_config(ctl);
	struct control_web_code *slot;

	if (size < sodium_base64_ENCODED_LEN(WEB_CODE_BYTES,
	                                     sodium_base64_VARIANT_URLSAFE_NO_PADDING)) {
		config_unref(cfg);
		return SB_ERR_INVAL;
	}
	control_web_expire(ctl);
	if (ctl->n_codes == CONTROL_WEB_CODES_MAX) {
		/* Full: the oldest code goes. */
		size_t oldest = 0;

		for (size_t i = 1; i < ctl->n_codes; i++)
			if (ctl->codes[i].expires_at < ctl->codes[oldest].expires_at)
				oldest = i;
		ctl->codes[oldest] = ctl->codes[--ctl->n_codes];
	}
	slot = &ctl->codes[ctl->n_codes++];
	web_random(code, size, WEB_CODE_BYTES);
	web_hash(code, slot->hash);
	slot->scopes = scopes;
	slot->expires_at = clock_wall_ms() + cfg->gateway.ui.code_ttl_ms;
	*expires_at = slot->expires_at;
	config_unref(cfg);
	return SB_OK;
}

/* The session whose hash is h, or NULL. */
static struct control_web_session *web_find(struct control *ctl, const unsigned char *h)
{
	control_web_expire(ctl);
	for (size_t i = 0; i < ctl->n_web; i++)
		if (sodium_memcmp(ctl->web[i].hash, h, CONTROL_WEB_HASH) == 0)
			return &ctl->web[i];
	return NULL;
}

void control_web_cookie_name(const struct control *ctl, char *out, size_t size)
{
	/* Cookies do not tell ports apart: two gateways on one host must not
	 * overwrite each other's. */
	snprintf(out, size, "sb_session_%d", ctl->port);
}

bool control_web_cookie_hash(struct control *ctl, const char *cookies,
                             unsigned char out[CONTROL_WEB_HASH])
{
	char name[32], value[128];
	unsigned char h[CONTROL_WEB_HASH];
	const char *p = cookies;
	bool found = false;
	size_t nl;

	control_web_cookie_name(ctl, name, sizeof name);
	nl = strlen(name);
	for (int seen = 0; p && *p && seen < WEB_COOKIES_MAX;) {
		p += strspn(p, " ;");
		if (strncmp(p, name, nl) == 0 && p[nl] == '=') {
			size_t vl = strcspn(p + nl + 1, ";");

			seen++;
			if (vl > 0 && vl < sizeof value) {
				memcpy(value, p + nl + 1, vl);
				value[vl] = '\0';
				web_hash(value, h);
				sodium_memzero(value, sizeof value);
				if (web_find(ctl, h)) {
					memcpy(out, h, CONTROL_WEB_HASH);
					return true;
				}
				if (!found)
					memcpy(out, h, CONTROL_WEB_HASH);
				found = true;
			}
		}
		p = strchr(p, ';');
	}
	return found;
}

/* The signed bytes of a web session's connect: the page's key signs them
 * with the connection's challenge nonce. */
#define WEB_SIGNED_PREFIX "switchboard-web-v1|"

unsigned control_web_session_verify(struct control *ctl, const unsigned char *hash,
                                    const char *nonce, const char *sig_b64, const char **why)
{
	struct control_web_session *s = web_find(ctl, hash);
	unsigned char sig[64];
	char text[sizeof WEB_SIGNED_PREFIX + 128];

	if (!s) {
		*why = "the web session is not valid (signed out or expired); sign in again";
		return 0;
	}
	if (!sig_b64 || control_b64_decode(sig_b64, sig, sizeof sig) != (int)sizeof sig) {
		*why = "a web session's connect must carry auth.webSignature, the page key's "
		       "signature of this connection's challenge; sign in again";
		return 0;
	}
	snprintf(text, sizeof text, "%s%s", WEB_SIGNED_PREFIX, nonce);
	if (crypto_sign_verify_detached(sig, (const unsigned char *)text, strlen(text), s->key) !=
	    0) {
		*why = "the web session's signature is not valid (another key, or another "
		       "connection's challenge)";
		return 0;
	}
	return s->scopes;
}

/* ---- HTTP ---- */

static void web_json(struct server_request *r, int status, json_t *body, const char *cookie)
{
	char *text = json_dumps(body, JSON_COMPACT);
	const char *hdrs[4];
	size_t n = 0;

	json_decref(body);
	hdrs[n++] = "Cache-Control: no-store";
	hdrs[n++] = "X-Content-Type-Options: nosniff";
	if (cookie)
		hdrs[n++] = cookie;
	hdrs[n] = NULL;
	server_respond(r, status, "application/json", text ? text : "{}", text ? strlen(text) : 2,
	               hdrs);
	free(text);
}

static void web_error(struct server_request *r, int status, const char *msg)
{
	web_json(r, status, json_pack("{ss}", "error", msg), NULL);
}

/* Whether a Content-Type is application/json itself, with parameters or
 * not ("application/json; charset=utf-8", not "application/jsonp"). */
static bool web_is_json(const char *type)
{
	static const char json[] = "application/json";
	const char *rest = type + strspn(type, " \t");

	if (strncasecmp(rest, json, sizeof json - 1) != 0)
		return false;
	rest += sizeof json - 1;
	rest += strspn(rest, " \t");
	return *rest == '\0' || *rest == ';';
}

/* Checks what every /auth request needs; answers and returns false when it
 * fails. secure: the page's origin is https. */
static bool web_request_ok(struct control *ctl, struct server_request *r, bool post, bool *secure)
{
	struct config *cfg = web_config(ctl);
	char origin[WEB_HDR_MAX], host[WEB_HDR_MAX], type[WEB_HDR_MAX];
	bool ok = false;
	int64_t locked;

	if (server_req_header(r, "origin", origin, sizeof origin) <= 0)
		origin[0] = '\0';
	if (server_req_header(r, "host", host, sizeof host) <= 0)
		host[0] = '\0';
	/* Browsers send Origin with every POST; a same-origin GET comes
	 * without one (and a cross-origin page cannot read the answer). */
	if ((post || *origin) && !origin_allowed(cfg, ctl->port, origin)) {
		log_info("control", "web sign-in refused: origin not allowed", LOG_S("origin", origin),
		         LOG_S("host", host), LOG_S("peer", server_req_peer(r)));
		web_error(r, 403, "this origin may not sign in (gateway.control.allowed_origins)");
		goto out;
	}
	if (!origin_host_allowed(cfg, ctl->port, host)) {
		log_info("control", "web sign-in refused: the Host is not an allowed origin",
		         LOG_S("host", host), LOG_S("peer", server_req_peer(r)));
		web_error(r, 403, "this address is not an allowed origin (gateway.control.allowed_origins)");
		goto out;
	}
	*secure = strncasecmp(origin, "https:", 6) == 0;
	if (post &&
	    (server_req_header(r, "content-type", type, sizeof type) <= 0 || !web_is_json(type))) {
		web_error(r, 415, "send application/json");
		goto out;
	}
	locked = control_locked(ctl, server_req_peer(r));
	if (locked) {
		char retry[48];
		const char *hdrs[] = {retry, "Cache-Control: no-store", NULL};
		static const char body[] = "{\"error\":\"too many failed attempts from this address; "
		                           "try later\"}";

		snprintf(retry, sizeof retry, "Retry-After: %" PRId64, (locked + 999) / 1000);
		server_respond(r, 429, "application/json", body, sizeof body - 1, hdrs);
		goto out;
	}
	ok = true;
out:
	config_unref(cfg);
	return ok;
}

static void web_login(void *ud, struct server_request *r)
{
	struct control *ctl = ud;
	struct config *cfg = NULL;
	size_t len;
	const char *body = server_req_body(r, &len);
	json_t *in = NULL;
	const char *code, *token;
	unsigned char h[CONTROL_WEB_HASH], key[32];
	unsigned scopes = 0;
	const char *how = NULL;
	char session[64], cookie[256], name[32];
	struct control_web_session *s;
	bool secure = false;

	if (!web_request_ok(ctl, r, true, &secure))
		return;
	if (len > WEB_BODY_MAX || !(in = json_loadb(body, len, 0, NULL)) || !json_is_object(in)) {
		web_error(r, 400,
		          "the body is {\"code\": ..., \"key\": ...} or "
		          "{\"token\": ..., \"key\": ...}");
		goto out;
	}
	code = json_string_value(json_object_get(in, "code"));
	token = json_string_value(json_object_get(in, "token"));
	/* The page's key, checked before a code is spent. */
	if (!json_is_string(json_object_get(in, "key")) ||
	    !control_public_key(json_string_value(json_object_get(in, "key")), key)) {
		web_error(r, 400,
		          "key is required: the Ed25519 public key the page made for this session "
		          "(base64url of its 32 bytes); the page needs WebCrypto Ed25519, in a "
		          "secure context (https, or the gateway's own loopback address)");
		goto out;
	}
	if (code && *code) {
		web_hash(code, h);
		control_web_expire(ctl);
		for (size_t i = 0; i < ctl->n_codes; i++)
			if (sodium_memcmp(ctl->codes[i].hash, h, CONTROL_WEB_HASH) == 0) {
				scopes = ctl->codes[i].scopes;
				ctl->codes[i] = ctl->codes[--ctl->n_codes]; /* once only */
				how = "code";
				break;
			}
	} else if (token && *token && control_gateway_token(ctl, token)) {
		scopes = CONTROL_SCOPE_READ | CONTROL_SCOPE_WRITE | CONTROL_SCOPE_ADMIN;
		how = "token";
	}
	if (!how) {
		log_info("control", "web sign-in refused", LOG_S("peer", server_req_peer(r)),
		         LOG_S("why", code ? "unknown, used or expired code" : "bad token"));
		control_auth_failed(ctl, server_req_peer(r));
		web_error(r, 401,
		          code ? "this sign-in code is not valid: it was used already, or it expired; "
		                 "run `switchboard dashboard` for a new one"
		               : "that is not the gateway token");
		goto out;
	}
	cfg = web_config(ctl);
	if (ctl->n_web == CONTROL_WEB_SESSIONS_MAX) {
		size_t oldest = 0;

		for (size_t i = 1; i < ctl->n_web; i++)
			if (ctl->web[i].created_at < ctl->web[oldest].created_at)
				oldest = i;
		control_drop_web(ctl, ctl->web[oldest].hash, "signed out: too many web sessions");
		ctl->web[oldest] = ctl->web[--ctl->n_web];
	}
	s = &ctl->web[ctl->n_web++];
	web_random(session, sizeof session, WEB_SESSION_BYTES);
	web_hash(session, s->hash);
	memcpy(s->key, key, sizeof key);
	s->scopes = scopes;
	s->created_at = clock_wall_ms();
	s->expires_at = s->created_at + cfg->gateway.ui.session_ttl_ms;
	control_web_cookie_name(ctl, name, sizeof name);
	snprintf(cookie, sizeof cookie,
	         "Set-Cookie: %s=%s; Path=/; HttpOnly; SameSite=Strict; Max-Age=%" PRId64 "%s", name,
	         session, cfg->gateway.ui.session_ttl_ms / 1000, secure ? "; Secure" : "");
	sodium_memzero(session, sizeof session);
	log_info("control", "web session started", LOG_S("peer", server_req_peer(r)),
	         LOG_S("with", how));
	web_json(r, 200,
	         json_pack("{sb so sI}", "ok", 1, "scopes", control_scopes_json(scopes), "expiresAt",
	                   (json_int_t)s->expires_at),
	         cookie);
	sodium_memzero(cookie, sizeof cookie);
out:
	json_decref(in);
	config_unref(cfg);
}

/* The session of the request's cookie, or NULL. */
static struct control_web_session *web_of_request(struct control *ctl, struct server_request *r,
                                                  unsigned char h[CONTROL_WEB_HASH])
{
	char cookies[CONTROL_COOKIE_MAX];

	if (server_req_header(r, "cookie", cookies, sizeof cookies) <= 0 ||
	    !control_web_cookie_hash(ctl, cookies, h))
		return NULL;
	return web_find(ctl, h);
}

static void web_logout(void *ud, struct server_request *r)
{
	struct control *ctl = ud;
	unsigned char h[CONTROL_WEB_HASH];
	struct control_web_session *s;
	char cookie[128], name[32];
	bool secure = false;

	if (!web_request_ok(ctl, r, true, &secure))
		return;
	s = web_of_request(ctl, r, h);
	if (s) {
		control_drop_web(ctl, s->hash, "signed out");
		*s = ctl->web[--ctl->n_web];
		log_info("control", "web session ended", LOG_S("peer", server_req_peer(r)));
	}
	control_web_cookie_name(ctl, name, sizeof name);
	snprintf(cookie, sizeof cookie,
	         "Set-Cookie: %s=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0%s", name,
	         secure ? "; Secure" : "");
	web_json(r, 200, json_pack("{sb sb}", "ok", 1, "signedOut", s != NULL), cookie);
}

static void web_session(void *ud, struct server_request *r)
{
	struct control *ctl = ud;
	unsigned char h[CONTROL_WEB_HASH];
	struct control_web_session *s;
	bool secure = false;

	if (!web_request_ok(ctl, r, false, &secure))
		return;
	s = web_of_request(ctl, r, h);
	if (!s) {
		web_json(r, 200, json_pack("{sb}", "signedIn", 0), NULL);
		return;
	}
	web_json(r, 200,
	         json_pack("{sb so sI}", "signedIn", 1, "scopes", control_scopes_json(s->scopes),
	                   "expiresAt", (json_int_t)s->expires_at),
	         NULL);
}

int control_web_start(struct control *ctl)
{
	int rc;

	if ((rc = server_route(ctl->ctx.server, "auth", "/auth/login", 0, SERVER_POST, web_login,
	                       ctl)) ||
	    (rc = server_route(ctl->ctx.server, "auth", "/auth/logout", 0, SERVER_POST, web_logout,
	                       ctl)))
		return rc;
	return server_route(ctl->ctx.server, "auth", "/auth/session", 0, SERVER_GET, web_session,
	                    ctl);
}
