/*
 * webhook_verify.h - signatures of inbound and outbound webhooks.
 *
 * Standard Webhooks (spec v1.0.0, symmetric scheme): the signed content is
 * "<webhook-id>.<webhook-timestamp>.<raw body>", the MAC is HMAC-SHA256
 * keyed with the base64-decoded secret that follows "whsec_", and
 * webhook-signature holds one or more space-separated "v1,<base64 MAC>"
 * entries (several during a key rotation; other versions are ignored).
 * GitHub: X-Hub-Signature-256 is "sha256=<hex HMAC-SHA256(secret, body)>".
 * Bearer: "Authorization: Bearer <token>".
 *
 * Every comparison of a MAC or token runs in constant time (sodium_memcmp
 * over fixed-size digests). Nothing here logs or keeps a secret. Pure
 * functions over their arguments: any thread.
 */
#ifndef SB_CHANNELS_WEBHOOK_VERIFY_H
#define SB_CHANNELS_WEBHOOK_VERIFY_H

#include <stddef.h>
#include <stdint.h>

/* Secrets: 24 to 64 key bytes, as the spec asks ("at least 24 bytes, 512
 * bits maximum"). */
#define WEBHOOK_KEY_MIN 24
#define WEBHOOK_KEY_MAX 64
/* "v1," + base64 of a 32-byte MAC + NUL. */
#define WEBHOOK_SIGNATURE_MAX 48
/* Entries looked at in one webhook-signature header. */
#define WEBHOOK_SIGNATURES_MAX 16

/* Why a delivery failed verification; static text, safe to log and to
 * return to the sender (it never holds secret material). */
struct webhook_verdict {
	const char *why;
};

/* Decodes a Standard Webhooks secret ("whsec_<base64>", or the bare
 * base64) into key (cap bytes). Returns SB_OK with *len set, SB_ERR_INVAL
 * when it is not base64, or SB_ERR_TOOBIG when the key is outside
 * [WEBHOOK_KEY_MIN, WEBHOOK_KEY_MAX] bytes or cap. */
int webhook_secret_decode(const char *secret, unsigned char *key, size_t cap, size_t *len);

/* Verifies a Standard Webhooks delivery. id, timestamp and signatures are
 * the three header values (NULL when absent); now_s is the current Unix
 * time and tolerance_s the accepted skew in either direction. Returns
 * SB_OK; SB_ERR_PERM (missing or malformed header, or no v1 entry
 * matches) or SB_ERR_TIMEOUT (timestamp outside the tolerance), with v->why
 * saying which. */
int webhook_verify_standard(const unsigned char *key, size_t key_len, const char *id,
                            const char *timestamp, const char *signatures, const void *body,
                            size_t body_len, int64_t now_s, int64_t tolerance_s,
                            struct webhook_verdict *v);

/* Verifies X-Hub-Signature-256 (header NULL when absent) with the secret
 * as UTF-8 bytes. Returns SB_OK or SB_ERR_PERM with v->why. */
int webhook_verify_github(const char *secret, const char *header, const void *body, size_t body_len,
                          struct webhook_verdict *v);

/* Verifies an Authorization header (NULL when absent) against
 * "Bearer <token>"; the scheme name is case-insensitive. Returns SB_OK or
 * SB_ERR_PERM with v->why. */
int webhook_verify_bearer(const char *token, const char *authorization, struct webhook_verdict *v);

/* Signs like a Standard Webhooks sender: writes "v1,<base64 MAC>" into out
 * (at least WEBHOOK_SIGNATURE_MAX bytes). Returns SB_OK or SB_ERR_INVAL
 * (id holding "." or out too small). */
int webhook_sign_standard(const unsigned char *key, size_t key_len, const char *id,
                          int64_t timestamp, const void *body, size_t body_len, char *out,
                          size_t size);

/* "sha256=<hex>" of body under secret, as GitHub sends it, into out (at
 * least 72 bytes). For tests and tools. Returns SB_OK or SB_ERR_INVAL. */
int webhook_sign_github(const char *secret, const void *body, size_t body_len, char *out,
                        size_t size);

#endif
