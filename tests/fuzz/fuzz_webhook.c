/*
 * fuzz_webhook.c - libFuzzer harness for the webhook verification path and
 * the body mapping: the input is split into header values, a body and a
 * mapping path; Standard Webhooks, GitHub and bearer verification run on
 * them, then the body is parsed and the path looked up. A delivery signed
 * by our own signer must always verify (so the harness also checks
 * correctness, not only the absence of crashes).
 */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "channels/webhook/webhook_config.h"
#include "channels/webhook/webhook_verify.h"
#include "gateway/core/err.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The next NUL-free field of the input, split on '\n' (copied; caller frees). */
static char *next_field(const uint8_t **p, const uint8_t *end)
{
	const uint8_t *start = *p, *nl = memchr(start, '\n', (size_t)(end - start));
	size_t n = (size_t)((nl ? nl : end) - start);
	char *s = malloc(n + 1);

	if (!s)
		abort();
	memcpy(s, start, n);
	s[n] = '\0';
	for (size_t i = 0; i < n; i++)
		if (!s[i])
			s[i] = ' ';
	*p = nl ? nl + 1 : end;
	return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const unsigned char key[32] = "0123456789abcdef0123456789abcdef";
	const uint8_t *p = data, *end = data + size;
	char *id = next_field(&p, end), *ts = next_field(&p, end), *sig = next_field(&p, end);
	char *path = next_field(&p, end);
	const char *body = (const char *)p;
	size_t body_len = (size_t)(end - p);
	struct webhook_verdict v;
	char good[WEBHOOK_SIGNATURE_MAX], gh[128];
	unsigned char decoded[WEBHOOK_KEY_MAX];
	size_t dlen;
	json_t *root;
	const json_t *out;

	memset(&v, 0, sizeof v);
	webhook_verify_standard(key, sizeof key, id, ts, sig, body, body_len, 1700000000, 300, &v);
	webhook_verify_github("secret", sig, body, body_len, &v);
	webhook_verify_bearer("a-long-enough-token", sig, &v);
	webhook_secret_decode(sig, decoded, sizeof decoded, &dlen);
	/* Our own signature always verifies, for ids a sender may use. */
	if (*id && strlen(id) <= 256 && /* webhook_verify.c accepts ids up to 256 */
	    strspn(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") ==
	        strlen(id) &&
	    webhook_sign_standard(key, sizeof key, id, 1700000000, body, body_len, good,
	                          sizeof good) == SB_OK &&
	    webhook_verify_standard(key, sizeof key, id, "1700000000", good, body, body_len,
	                            1700000000, 300, &v) != SB_OK)
		abort();
	if (webhook_sign_github("secret", body, body_len, gh, sizeof gh) == SB_OK &&
	    webhook_verify_github("secret", gh, body, body_len, &v) != SB_OK)
		abort();
	root = json_loadb(body, body_len, 0, NULL);
	if (root && !webhook_path_error(path))
		webhook_path_get(root, path, &out);
	json_decref(root);
	free(id);
	free(ts);
	free(sig);
	free(path);
	return 0;
}
