/*
 * secret.h - handling shared secrets (tokens) the same way everywhere.
 */
#ifndef SB_CORE_SECRET_H
#define SB_CORE_SECRET_H

#include <stdbool.h>
#include <stddef.h>

/* Whether two secrets are equal, in time independent of their contents and
 * lengths: both are hashed (BLAKE2b-256) and the digests compared with
 * sodium_memcmp. NULL or empty never equals anything. Any thread. */
bool secret_equal(const char *a, const char *b);

/* The value after "Bearer " in an Authorization header (blanks skipped), or
 * NULL when the header is not a bearer token. Points inside header. */
const char *secret_bearer(const char *header);

/* Reads a one-line secret file (such as $SWITCHBOARD_HOME/gateway.token), at
 * most max bytes, trailing blanks and newlines removed. NULL when absent,
 * empty or unreadable (caller frees; blocking: start-up and CLI only). */
char *secret_read_file(const char *path, size_t max);

#endif
