/*
 * strmap.h - a hash map from strings to pointers (separate chaining, grows by
 * doubling). Keys are copied; values are the caller's. Not thread-safe.
 */
#ifndef SB_CORE_STRMAP_H
#define SB_CORE_STRMAP_H

#include <stddef.h>

struct strmap;

int strmap_new(struct strmap **out);
/* Frees the map (not the values). NULL is a no-op. */
void strmap_free(struct strmap *m);

/* Sets key to value (replacing). SB_OK or SB_ERR_NOMEM. */
int strmap_put(struct strmap *m, const char *key, void *value);
/* The value, or NULL. */
void *strmap_get(const struct strmap *m, const char *key);
/* Removes key; returns its value or NULL. */
void *strmap_del(struct strmap *m, const char *key);
size_t strmap_size(const struct strmap *m);

/* Calls fn for each entry; fn must not change the map. */
void strmap_each(const struct strmap *m, void (*fn)(void *ud, const char *key, void *value),
                 void *ud);

#endif
