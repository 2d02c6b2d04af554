/*
 * backends.c - the store backends compiled in, and store_open, which picks one
 * by name. The only file of gateway/store/ that names a backend, so that the
 * arrows stay one way: backends.c -> store/sqlite/ -> store/
 * (scripts/check-source.sh).
 */
#include <stddef.h>
#include <string.h>

#include "gateway/core/err.h"
#include "gateway/store/store.h"
#include "gateway/store/store_backend.h"

static const struct store_backend *const store_backends[] = {
    &store_sqlite_backend,
    NULL,
};

int store_open(struct store **out, uv_loop_t *loop, const struct store_options *opt)
{
	const char *name = opt && opt->backend ? opt->backend : "sqlite";

	if (out)
		*out = NULL;
	if (!out || !opt)
		return SB_ERR_INVAL;
	for (size_t i = 0; store_backends[i]; i++)
		if (strcmp(store_backends[i]->name, name) == 0)
			return store_backends[i]->open(out, loop, opt);
	return SB_ERR_CONFIG;
}
