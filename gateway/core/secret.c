/*
 * secret.c - see secret.h.
 */
#include "gateway/core/secret.h"

#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "gateway/core/err.h"
#include "gateway/core/fsutil.h"

bool secret_equal(const char *a, const char *b)
{
	unsigned char ha[crypto_generichash_BYTES], hb[crypto_generichash_BYTES];

	if (!a || !b || !*a || !*b)
		return false;
	crypto_generichash(ha, sizeof ha, (const unsigned char *)a, strlen(a), NULL, 0);
	crypto_generichash(hb, sizeof hb, (const unsigned char *)b, strlen(b), NULL, 0);
	return sodium_memcmp(ha, hb, sizeof ha) == 0;
}

const char *secret_bearer(const char *header)
{
	if (!header || strncasecmp(header, "Bearer ", 7) != 0)
		return NULL;
	header += 7;
	while (*header == ' ')
		header++;
	return header;
}

char *secret_read_file(const char *path, size_t max)
{
	char *text = NULL;
	size_t len = 0;

	if (fs_read_all(path, max, &text, &len) != SB_OK)
		return NULL;
	while (len && (text[len - 1] == '\n' || text[len - 1] == '\r' || text[len - 1] == ' ' ||
	               text[len - 1] == '\t'))
		text[--len] = '\0';
	if (!len) {
		free(text);
		return NULL;
	}
	return text;
}
