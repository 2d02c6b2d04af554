/*
 * curl_lazy.h - libcurl, loaded on first use.
 *
 * libcurl brings in some twenty shared libraries (TLS, Kerberos, LDAP, SSH,
 * IDN, ...) whose loading and constructors cost about 4 ms at every process
 * start, more than the rest of the gateway's start-up together. The gateway
 * starts without it and loads libcurl.so.4 with dlopen the first time an HTTP
 * client is created. The API is libcurl's own: a file that includes this
 * header with CURL_LAZY_NAMES defined keeps calling curl_easy_setopt() and
 * friends, which become calls through the loaded table.
 */
#ifndef SB_CORE_CURL_LAZY_H
#define SB_CORE_CURL_LAZY_H

/* The type-checking macros of curl.h would wrap our names a second time. */
#define CURL_DISABLE_TYPECHECK 1
#include <curl/curl.h>
#include <time.h>

struct curl_lazy {
	CURLcode (*global_init)(long flags);
	void (*global_cleanup)(void);
	CURL *(*easy_init)(void);
	void (*easy_cleanup)(CURL *h);
	CURLcode (*easy_setopt)(CURL *h, CURLoption opt, ...);
	CURLcode (*easy_getinfo)(CURL *h, CURLINFO info, ...);
	const char *(*easy_strerror)(CURLcode rc);
	time_t (*getdate)(const char *s, const time_t *unused);
	CURLM *(*multi_init)(void);
	CURLMcode (*multi_cleanup)(CURLM *m);
	CURLMcode (*multi_add_handle)(CURLM *m, CURL *h);
	CURLMcode (*multi_remove_handle)(CURLM *m, CURL *h);
	CURLMcode (*multi_assign)(CURLM *m, curl_socket_t s, void *p);
	CURLMsg *(*multi_info_read)(CURLM *m, int *left);
	CURLMcode (*multi_setopt)(CURLM *m, CURLMoption opt, ...);
	CURLMcode (*multi_socket_action)(CURLM *m, curl_socket_t s, int ev, int *running);
	struct curl_slist *(*slist_append)(struct curl_slist *l, const char *s);
	void (*slist_free_all)(struct curl_slist *l);
};

/* The loaded table; NULL until curl_lazy_load succeeded. Written once. */
extern const struct curl_lazy *curl_lazy_fns;

/* Loads libcurl once (thread-safe; later calls return the first result).
 * Returns SB_OK, or SB_ERR_NOTFOUND with *why (static text) when the library
 * or one of its functions is missing. */
int curl_lazy_load(const char **why);

#ifdef CURL_LAZY_NAMES
/* curl.h wraps these three in argument-count macros; ours replace them. */
#undef curl_easy_setopt
#undef curl_easy_getinfo
#undef curl_multi_setopt
#define curl_global_init (curl_lazy_fns->global_init)
#define curl_global_cleanup (curl_lazy_fns->global_cleanup)
#define curl_easy_init (curl_lazy_fns->easy_init)
#define curl_easy_cleanup (curl_lazy_fns->easy_cleanup)
#define curl_easy_setopt (curl_lazy_fns->easy_setopt)
#define curl_easy_getinfo (curl_lazy_fns->easy_getinfo)
#define curl_easy_strerror (curl_lazy_fns->easy_strerror)
#define curl_getdate (curl_lazy_fns->getdate)
#define curl_multi_init (curl_lazy_fns->multi_init)
#define curl_multi_cleanup (curl_lazy_fns->multi_cleanup)
#define curl_multi_add_handle (curl_lazy_fns->multi_add_handle)
#define curl_multi_remove_handle (curl_lazy_fns->multi_remove_handle)
#define curl_multi_assign (curl_lazy_fns->multi_assign)
#define curl_multi_info_read (curl_lazy_fns->multi_info_read)
#define curl_multi_setopt (curl_lazy_fns->multi_setopt)
#define curl_multi_socket_action (curl_lazy_fns->multi_socket_action)
#define curl_slist_append (curl_lazy_fns->slist_append)
#define curl_slist_free_all (curl_lazy_fns->slist_free_all)
#endif

#endif
