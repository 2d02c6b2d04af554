/*
 * curl_lazy.c - see curl_lazy.h.
 */
#include "gateway/core/curl_lazy.h"

#include <pthread.h>
#include <stddef.h>

#include "gateway/core/err.h"
#include "gateway/core/lazylib.h"

/* The soname of libcurl 7.x/8.x (Debian's libcurl4 package). */
#define CURL_LAZY_SONAME "libcurl.so.4"

const struct curl_lazy *curl_lazy_fns;

static struct curl_lazy curl_lazy_table;
static pthread_once_t curl_lazy_once = PTHREAD_ONCE_INIT;
static const char *curl_lazy_why = "libcurl was not loaded";

static const struct lazylib_symbol curl_lazy_symbols[] = {
    {"curl_global_init", offsetof(struct curl_lazy, global_init)},
    {"curl_global_cleanup", offsetof(struct curl_lazy, global_cleanup)},
    {"curl_easy_init", offsetof(struct curl_lazy, easy_init)},
    {"curl_easy_cleanup", offsetof(struct curl_lazy, easy_cleanup)},
    {"curl_easy_setopt", offsetof(struct curl_lazy, easy_setopt)},
    {"curl_easy_getinfo", offsetof(struct curl_lazy, easy_getinfo)},
    {"curl_easy_strerror", offsetof(struct curl_lazy, easy_strerror)},
    {"curl_getdate", offsetof(struct curl_lazy, getdate)},
    {"curl_multi_init", offsetof(struct curl_lazy, multi_init)},
    {"curl_multi_cleanup", offsetof(struct curl_lazy, multi_cleanup)},
    {"curl_multi_add_handle", offsetof(struct curl_lazy, multi_add_handle)},
    {"curl_multi_remove_handle", offsetof(struct curl_lazy, multi_remove_handle)},
    {"curl_multi_assign", offsetof(struct curl_lazy, multi_assign)},
    {"curl_multi_info_read", offsetof(struct curl_lazy, multi_info_read)},
    {"curl_multi_setopt", offsetof(struct curl_lazy, multi_setopt)},
    {"curl_multi_socket_action", offsetof(struct curl_lazy, multi_socket_action)},
    {"curl_slist_append", offsetof(struct curl_lazy, slist_append)},
    {"curl_slist_free_all", offsetof(struct curl_lazy, slist_free_all)},
};

static void curl_lazy_open(void)
{
	int rc =
	    lazylib_load(CURL_LAZY_SONAME, curl_lazy_symbols,
	                 sizeof curl_lazy_symbols / sizeof *curl_lazy_symbols, &curl_lazy_table);

	if (rc == SB_ERR_NOTFOUND)
		curl_lazy_why = "cannot load " CURL_LAZY_SONAME " (install the libcurl4 package)";
	else if (rc != SB_OK)
		curl_lazy_why = CURL_LAZY_SONAME " lacks a function the gateway needs "
		                                 "(libcurl too old?)";
	else
		curl_lazy_fns = &curl_lazy_table;
}

int curl_lazy_load(const char **why)
{
	pthread_once(&curl_lazy_once, curl_lazy_open);
	if (curl_lazy_fns)
		return SB_OK;
	if (why)
		*why = curl_lazy_why;
	return SB_ERR_NOTFOUND;
}
