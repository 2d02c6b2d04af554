/*
 * lazylib.h - a shared library loaded on first use (curl_lazy.h,
 * workspaces/git_lazy.h): its soname opened with dlopen and a table of
 * function pointers filled from it.
 */
#ifndef SB_CORE_LAZYLIB_H
#define SB_CORE_LAZYLIB_H

#include <stddef.h>

/* One function of the table: its name in the library and where its pointer
 * goes in the table (offsetof). */
struct lazylib_symbol {
	const char *name;
	size_t offset;
};

/* Opens soname (RTLD_NOW | RTLD_LOCAL, never closed: such libraries keep
 * process-wide state until exit) and stores each symbol's address at its
 * offset in table. SB_OK; SB_ERR_NOTFOUND when the library cannot be
 * loaded; SB_ERR_PROTO when it lacks one of the symbols (the table must not
 * be used then). Call it once (pthread_once). */
int lazylib_load(const char *soname, const struct lazylib_symbol *syms, size_t n, void *table);

#endif
