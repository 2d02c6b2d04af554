/*
 * git_lazy.c - see git_lazy.h.
 */
#include "workspaces/git_lazy.h"

#include <pthread.h>
#include <stddef.h>

#include "gateway/core/err.h"
#include "gateway/core/lazylib.h"

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

static const struct lazylib_symbol git_lazy_symbols[] = {
#define GIT_LAZY_SYMBOL(f) {#f, offsetof(struct git_lazy, f)},
    GIT_LAZY_FUNCTIONS(GIT_LAZY_SYMBOL)
#undef GIT_LAZY_SYMBOL
};

static void git_lazy_open(void)
{
	int rc = lazylib_load(GIT_LAZY_SONAME, git_lazy_symbols,
	                      sizeof git_lazy_symbols / sizeof *git_lazy_symbols, &git_lazy_table);

	if (rc == SB_ERR_NOTFOUND)
		git_lazy_why = "cannot load " GIT_LAZY_SONAME
		               " (install libgit2, the version the gateway was built with)";
	else if (rc != SB_OK)
		git_lazy_why = GIT_LAZY_SONAME " lacks a function the gateway needs";
	else
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
