/*
 * resolve.h - name resolution off the loop thread.
 *
 * libwebsockets 4.1 resolves client host names synchronously inside its
 * connect call, which would stall the loop. Clients (Slack Socket Mode, ...)
 * resolve first with resolve_host (getaddrinfo on the libuv thread pool),
 * then connect lws to the numeric address with the name kept for the Host
 * header and TLS SNI. libcurl needs none of this: it resolves on its own
 * threads (its AsynchDNS feature).
 */
#ifndef SB_CORE_RESOLVE_H
#define SB_CORE_RESOLVE_H

#include <uv.h>

#define RESOLVE_ADDR_MAX 64

/* rc SB_OK with the first address as text ("127.0.0.1", "::1"), or
 * SB_ERR_NOTFOUND (no such name), SB_ERR_IO (resolver failure). */
typedef void (*resolve_cb)(void *ud, int rc, const char *addr);

/* Starts resolving host (IPv4 preferred). cb runs later on the loop thread.
 * Returns SB_OK, SB_ERR_INVAL (empty or over-long name) or SB_ERR_NOMEM.
 * Loop thread only. */
int resolve_host(uv_loop_t *loop, const char *host, resolve_cb cb, void *ud);

#endif
