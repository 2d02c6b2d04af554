/*
 * httpc.h - the shared HTTP client: libcurl multi on the libuv loop.
 *
 * One struct httpc per daemon. Requests run concurrently on the loop thread
 * (one uv_poll_t per curl socket, one uv_timer_t for curl's timeouts). Every
 * request has a timeout; the connection cache is bounded; the CA store is
 * loaded lazily by curl on the first TLS connection and then kept by the
 * multi handle (CURLOPT_CA_CACHE_TIMEOUT, one day).
 *
 * Redirects are not followed; only http and https are allowed; no
 * Accept-Encoding is sent; "Expect: 100-continue" is never used.
 *
 * All functions: loop thread only (httpc_global_cleanup: main, at exit).
 */
#ifndef SB_CORE_HTTPC_H
#define SB_CORE_HTTPC_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "buf.h"
#include "netaddr.h"

struct httpc;
struct httpc_call;

struct httpc_options {
	long timeout_ms;           /* default per-request timeout; > 0 */
	long connect_timeout_ms;   /* 0 = timeout_ms */
	long max_connections;      /* cache size and total concurrent connections; > 0 */
	long max_host_connections; /* 0 = max_connections */
	size_t max_response_bytes; /* default body cap; > 0 */
	const char *ca_file;       /* NULL = system default; copied */
	const char *user_agent;    /* NULL = "switchboard/<version>"; copied */
};

struct httpc_header {
	char *name; /* lower-cased */
	char *value;
};

struct httpc_response {
	long status;                  /* HTTP status, 0 if none was received */
	struct buf body;              /* empty when the request streamed with on_data */
	struct httpc_header *headers; /* of the final response only (not of
	                                 1xx/redirects); at most 256 */
	size_t n_headers;
	double total_s;    /* wall time of the transfer */
	const char *error; /* curl's message when rc != SB_OK, else NULL */
};

/* Streamed body bytes; return non-zero to abort the request (rc becomes
 * SB_ERR_ABORTED). */
typedef int (*httpc_data_cb)(void *ud, const char *data, size_t len);

/* Called exactly once per request, on the loop thread. rc: SB_OK when a
 * response was received (any status), SB_ERR_TIMEOUT, SB_ERR_TOOBIG (body cap),
 * SB_ERR_ABORTED (httpc_cancel or on_data said stop), SB_ERR_CLOSED (client
 * closing), SB_ERR_PERM (public_only refused the address), SB_ERR_HTTP
 * (connection/TLS/DNS). resp is borrowed. */
typedef void (*httpc_done_cb)(void *ud, int rc, const struct httpc_response *resp);

struct httpc_request {
	const char *method; /* default GET; POST when body is set */
	const char *url;
	const char *const *headers; /* "Name: value" strings, NULL-terminated */
	const void *body;
	size_t body_len;
	long timeout_ms;           /* 0 = client default */
	size_t max_response_bytes; /* 0 = client default; with on_data it
	                              bounds the total bytes streamed */
	httpc_data_cb on_data;     /* optional streaming; may call httpc_cancel
	                              and httpc_close, and start requests */
	/* A request made on an untrusted party's behalf (web_fetch, an MCP
	 * server's URL): every address curl connects to is checked after name
	 * resolution (netaddr_allowed with allow, which may be NULL: public
	 * addresses only); a refused one fails the request with SB_ERR_PERM
	 * and resp->error naming the address and why. Such a request never
	 * reuses a pooled connection (one made for another request may lead
	 * anywhere) and ignores proxy settings from the environment. */
	bool public_only;
	const struct netaddr_policy *allow; /* borrowed until done */
};

/* Creates a client on loop. opt is copied. The first call also runs
 * curl_global_init (once per process, pthread_once). Returns SB_OK,
 * SB_ERR_NOMEM, SB_ERR_INVAL (bad options) or SB_ERR_HTTP (libcurl failed to
 * initialise). */
int httpc_new(struct httpc **out, uv_loop_t *loop, const struct httpc_options *opt);

/* Cancels every request in flight (each gets SB_ERR_CLOSED), closes the uv
 * handles and frees the client once they are closed; the loop must run for
 * that to finish. Safe from inside a done or on_data callback (the teardown
 * then finishes when the callback returns). NULL or a second call is a
 * no-op. */
void httpc_close(struct httpc *c);

/* Starts a request. The request struct, its strings and the body are copied.
 * If out_call is not NULL it receives a handle valid until done runs.
 * Returns SB_OK (done will run exactly once, never from inside this call),
 * SB_ERR_INVAL (no url or done, bad method, body_len without body),
 * SB_ERR_CLOSED (httpc_close was called) or SB_ERR_NOMEM; on error done is
 * not called. May be called from done and on_data callbacks. */
int httpc_request(struct httpc *c, const struct httpc_request *req, httpc_done_cb done, void *ud,
                  struct httpc_call **out_call);

/* Aborts a request in flight; its done callback runs with SB_ERR_ABORTED
 * before this returns. NULL is a no-op; call must not be used after its done
 * callback ran. */
void httpc_cancel(struct httpc_call *call);

/* Case-insensitive header lookup (first match); NULL when absent. The value
 * is borrowed from r. */
const char *httpc_response_header(const struct httpc_response *r, const char *name);

/* Parses Retry-After (delta-seconds or an HTTP date) into milliseconds from
 * now; a date in the past gives 0, anything beyond a year is clamped to a
 * year; -1 when absent or unparseable. */
int64_t httpc_retry_after_ms(const struct httpc_response *r);

/* Requests in flight (for metrics and drain). NULL gives 0. */
size_t httpc_in_flight(const struct httpc *c);

/* Calls curl_global_cleanup. Optional: main may call it once at exit, after
 * every client was closed and the loop ran them to completion; no httpc_new
 * may follow. Without it libcurl/OpenSSL keep only still-reachable memory. */
void httpc_global_cleanup(void);

#endif
