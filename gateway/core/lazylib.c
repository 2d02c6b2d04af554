/*
 * lazylib.c - see lazylib.h.
 */
#include "gateway/core/lazylib.h"

#include <dlfcn.h>

#include "gateway/core/err.h"

int lazylib_load(const char *soname, const struct lazylib_symbol *syms, size_t n, void *table)
{
	void *lib = dlopen(soname, RTLD_NOW | RTLD_LOCAL);

	if (!lib)
		return SB_ERR_NOTFOUND;
	for (size_t i = 0; i < n; i++) {
		void *sym = dlsym(lib, syms[i].name);

		if (!sym)
			return SB_ERR_PROTO;
		/* POSIX guarantees data and function pointers convert. */
		*(void **)((char *)table + syms[i].offset) = sym;
	}
	return SB_OK;
}
