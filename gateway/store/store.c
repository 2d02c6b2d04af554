/*
 * store.c - picks a store backend by name.
 */
#include "gateway/store/store.h"

#include <string.h>

static const struct store_ops *const store_backends[] = {
    &store_sqlite_ops,
};

const struct store_ops *store_backend(const char *name)
{
	for (size_t i = 0; i < sizeof store_backends / sizeof *store_backends; i++)
		if (strcmp(store_backends[i]->name, name) == 0)
			return store_backends[i];
	return NULL;
}
