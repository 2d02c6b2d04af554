/*
 * webhook_verify.c - see webhook_verify.h.
 */
#include "channels/webhook/webhook_verify.h"

#include <inttypes.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "gateway/core/err.h"
#include "gateway/core/secret.h"
#include "gateway/core/num.h"

#define WEBHOOK_MAC_LEN crypto_auth_hmacsha256_BYTES
#define WEBHOOK_ID_MAX 256
#define WEBHOOK_STANDARD_PREFIX "whsec_"

static int webhook_fail(struct webhook_verdict *v, int rc, const char *why)
{
	if (v)
		v->why = why;
	return rc;
}

/* Decodes base64 with or without padding into out (exactly cap bytes or
 * fewer); -1 when it is not base64 or does not fit. */
static int webhook_b64_decode(const char *s, size_t len, unsigned char *out, size_t cap,
                              size_t *out_len)
{
	const char *end = NULL;

	if (sodium_base642bin(out, cap, s, len, NULL, out_len, &end,
	                      sodium_base64_VARIANT_ORIGINAL) == 0 &&
	    end == s + len)
		return 0;
	if (sodium_base642bin(out, cap, s, len, NULL, out_len, &end,
	                      sodium_base64_VARIANT_ORIGINAL_NO_PADDING) == 0 &&
	    end == s + len)
		return 0;
	return -1;
}

int webhook_secret_decode(const char *secret, unsigned char *key, size_t cap, size_t *len)
{
	unsigned char tmp[WEBHOOK_KEY_MAX + 8];
	size_t n = 0, plen = strlen(WEBHOOK_STANDARD_PREFIX);

	if (!secret)
		return SB_ERR_INVAL;
	if (strncmp(secret, WEBHOOK_STANDARD_PREFIX, plen) == 0)
		secret += plen;
	if (!*secret)
		return SB_ERR_INVAL;
	/* Decode into a buffer a little larger than the maximum, so that a key
	 * that is too long is told apart from text that is not base64. */
	if (strlen(secret) > 4 * (sizeof tmp / 3))
		return SB_ERR_TOOBIG;
	if (webhook_b64_decode(secret, strlen(secret), tmp, sizeof tmp, &n) != 0)
		return SB_ERR_INVAL;
	if (n < WEBHOOK_KEY_MIN || n > WEBHOOK_KEY_MAX || n > cap) {
		sodium_memzero(tmp, sizeof tmp);
		return SB_ERR_TOOBIG;
	}
	memcpy(key, tmp, n);
	*len = n;
	sodium_memzero(tmp, sizeof tmp);
	return SB_OK;
}

static void webhook_mac_standard(const unsigned char *key, size_t key_len, const char *id,
                                 const char *ts, const void *body, size_t body_len,
                                 unsigned char mac[WEBHOOK_MAC_LEN])
{
	crypto_auth_hmacsha256_state st;

	crypto_auth_hmacsha256_init(&st, key, key_len);
	crypto_auth_hmacsha256_update(&st, (const unsigned char *)id, strlen(id));
	crypto_auth_hmacsha256_update(&st, (const unsigned char *)".", 1);
	crypto_auth_hmacsha256_update(&st, (const unsigned char *)ts, strlen(ts));
	crypto_auth_hmacsha256_update(&st, (const unsigned char *)".", 1);
	if (body_len)
		crypto_auth_hmacsha256_update(&st, body, body_len);
	crypto_auth_hmacsha256_final(&st, mac);
	sodium_memzero(&st, sizeof st);
}

/* An id the spec allows: printable ASCII without "." (the separator of the
 * signed content) and not too long. */
static bool webhook_id_valid(const char *id)
{
	size_t n = strlen(id);

	if (n == 0 || n > WEBHOOK_ID_MAX)
		return false;
	for (const char *p = id; *p; p++)
		if (*p <= ' ' || *p > '~' || *p == '.')
			return false;
	return true;
}

int webhook_verify_standard(const unsigned char *key, size_t key_len, const char *id,
                            const char *timestamp, const char *signatures, const void *body,
                            size_t body_len, int64_t now_s, int64_t tolerance_s,
                            struct webhook_verdict *v)
{
	unsigned char mac[WEBHOOK_MAC_LEN], got[WEBHOOK_MAC_LEN + 3];
	const char *p;
	int64_t ts;
	int seen = 0, rc;

	if (!id || !timestamp || !signatures)
		return webhook_fail(v, SB_ERR_PERM,
		                    "missing webhook-id, webhook-timestamp or webhook-signature");
	if (!webhook_id_valid(id))
		return webhook_fail(v, SB_ERR_PERM, "malformed webhook-id");
	if (num_parse_i64(timestamp, 0, INT64_MAX / 2, &ts) != SB_OK)
		return webhook_fail(v, SB_ERR_PERM, "malformed webhook-timestamp");
	if (ts < now_s - tolerance_s)
		return webhook_fail(v, SB_ERR_TIMEOUT, "webhook-timestamp is too old");
	if (ts > now_s + tolerance_s)
		return webhook_fail(v, SB_ERR_TIMEOUT, "webhook-timestamp is in the future");
	webhook_mac_standard(key, key_len, id, timestamp, body, body_len, mac);
	rc = webhook_fail(v, SB_ERR_PERM, "no matching v1 signature");
	for (p = signatures; *p && seen < WEBHOOK_SIGNATURES_MAX;) {
		size_t n, got_len = 0;

		while (*p == ' ')
			p++;
		n = strcspn(p, " ");
		if (!n)
			break;
		seen++;
		/* Other versions (v1a: ed25519) are skipped, as the spec says. */
		if (n > 3 && strncmp(p, "v1,", 3) == 0 &&
		    webhook_b64_decode(p + 3, n - 3, got, sizeof got, &got_len) == 0 &&
		    got_len == WEBHOOK_MAC_LEN && sodium_memcmp(got, mac, WEBHOOK_MAC_LEN) == 0) {
			rc = SB_OK;
			if (v)
				v->why = NULL;
			break;
		}
		p += n;
	}
	sodium_memzero(mac, sizeof mac);
	return rc;
}

static void webhook_mac_github(const char *secret, const void *body, size_t body_len,
                               unsigned char mac[WEBHOOK_MAC_LEN])
{
	crypto_auth_hmacsha256_state st;

	crypto_auth_hmacsha256_init(&st, (const unsigned char *)secret, strlen(secret));
	if (body_len)
		crypto_auth_hmacsha256_update(&st, body, body_len);
	crypto_auth_hmacsha256_final(&st, mac);
	sodium_memzero(&st, sizeof st);
}

int webhook_verify_github(const char *secret, const char *header, const void *body, size_t body_len,
                          struct webhook_verdict *v)
{
	unsigned char mac[WEBHOOK_MAC_LEN], got[WEBHOOK_MAC_LEN];
	const char *hex, *end = NULL;
	size_t got_len = 0;
	int rc;

	if (!secret || !*secret)
		return webhook_fail(v, SB_ERR_PERM, "no secret configured");
	if (!header)
		return webhook_fail(v, SB_ERR_PERM, "missing X-Hub-Signature-256");
	if (strncmp(header, "sha256=", 7) != 0 || strlen(header) != 7 + 2 * WEBHOOK_MAC_LEN)
		return webhook_fail(v, SB_ERR_PERM, "malformed X-Hub-Signature-256");
	hex = header + 7;
	if (sodium_hex2bin(got, sizeof got, hex, 2 * WEBHOOK_MAC_LEN, NULL, &got_len, &end) != 0 ||
	    got_len != WEBHOOK_MAC_LEN || end != hex + 2 * WEBHOOK_MAC_LEN)
		return webhook_fail(v, SB_ERR_PERM, "malformed X-Hub-Signature-256");
	webhook_mac_github(secret, body, body_len, mac);
	rc = sodium_memcmp(got, mac, WEBHOOK_MAC_LEN) == 0
	         ? SB_OK
	         : webhook_fail(v, SB_ERR_PERM, "X-Hub-Signature-256 does not match");
	if (rc == SB_OK && v)
		v->why = NULL;
	sodium_memzero(mac, sizeof mac);
	return rc;
}

int webhook_verify_bearer(const char *token, const char *authorization, struct webhook_verdict *v)
{
	const char *p;
	int rc;

	if (!token || !*token)
		return webhook_fail(v, SB_ERR_PERM, "no token configured");
	if (!authorization)
		return webhook_fail(v, SB_ERR_PERM, "missing Authorization");
	if (strncasecmp(authorization, "Bearer ", 7) != 0)
		return webhook_fail(v, SB_ERR_PERM, "Authorization is not a Bearer token");
	for (p = authorization + 7; *p == ' ';)
		p++;
	/* Neither the contents nor the length of the token show in timing. */
	rc = secret_equal(token, p) ? SB_OK : webhook_fail(v, SB_ERR_PERM, "wrong bearer token");
	if (rc == SB_OK && v)
		v->why = NULL;
	return rc;
}

int webhook_sign_standard(const unsigned char *key, size_t key_len, const char *id,
                          int64_t timestamp, const void *body, size_t body_len, char *out,
                          size_t size)
{
	unsigned char mac[WEBHOOK_MAC_LEN];
	char ts[24];
	size_t b64 = sodium_base64_ENCODED_LEN(WEBHOOK_MAC_LEN, sodium_base64_VARIANT_ORIGINAL);

	if (!id || !*id || strchr(id, '.') || timestamp < 0 || size < 3 + b64)
		return SB_ERR_INVAL;
	snprintf(ts, sizeof ts, "%" PRId64, timestamp);
	webhook_mac_standard(key, key_len, id, ts, body, body_len, mac);
	memcpy(out, "v1,", 3);
	sodium_bin2base64(out + 3, size - 3, mac, sizeof mac, sodium_base64_VARIANT_ORIGINAL);
	sodium_memzero(mac, sizeof mac);
	return SB_OK;
}

int webhook_sign_github(const char *secret, const void *body, size_t body_len, char *out,
                        size_t size)
{
	unsigned char mac[WEBHOOK_MAC_LEN];

	if (!secret || size < 7 + 2 * WEBHOOK_MAC_LEN + 1)
		return SB_ERR_INVAL;
	webhook_mac_github(secret, body, body_len, mac);
	memcpy(out, "sha256=", 7);
	sodium_bin2hex(out + 7, size - 7, mac, sizeof mac);
	sodium_memzero(mac, sizeof mac);
	return SB_OK;
}
