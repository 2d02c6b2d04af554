/*
 * git_lazy.c - see git_lazy.h.
 */
#include "workspaces/git_lazy.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>

#include "gateway/core/err.h"

/* The soname of the libgit2 the gateway was built against (CMakeLists.txt
 * reads it from the library): libgit2 changes it with every minor version,
 * and its ABI with it. */
#ifndef GIT_LAZY_SONAME
#error "GIT_LAZY_SONAME must name libgit2's soname (set by CMakeLists.txt)"
#endif

const struct git_lazy *git_lazy_fns;

static struct git_lazy git_lazy_table;
static pthread_once_t git_lazy_once = PTHREAD_ONCE_INIT;
static const char *git_lazy_why = "libgit2 was not loaded";

static const struct {
	const char *symbol;
	size_t offset;
} git_lazy_symbols[] = {
#define GIT_LAZY_SYMBOL(f) {#f, offsetof(struct git_lazy, f)},
    GIT_LAZY_FUNCTIONS(GIT_LAZY_SYMBOL)
#undef GIT_LAZY_SYMBOL
};

static void git_lazy_open(void)
{
	/* Never closed: libgit2 keeps process-wide state until exit. */
	void *lib = dlopen(GIT_LAZY_SONAME, RTLD_NOW | RTLD_LOCAL);

	if (!lib) {
		git_lazy_why = "cannot load " GIT_LAZY_SONAME
		               " (install libgit2, the version the gateway was built with)";
		return;
	}
	for (size_t i = 0; i < sizeof git_lazy_symbols / sizeof *git_lazy_symbols; i++) {
		void *sym = dlsym(lib, git_lazy_symbols[i].symbol);

		if (!sym) {
			git_lazy_why = GIT_LAZY_SONAME " lacks a function the gateway needs";
			return;
		}
		/* POSIX guarantees data and function pointers convert. */
		*(void **)((char *)&git_lazy_table + git_lazy_symbols[i].offset) = sym;
	}
	git_lazy_fns = &git_lazy_table;
}

int git_lazy_load(const char **why)
{
	pthread_once(&git_lazy_once, git_lazy_open);
	if (git_lazy_fns)
		return SB_OK;
	if (why)
		*why = git_lazy_why;
	return SB_ERR_NOTFOUND;
}
