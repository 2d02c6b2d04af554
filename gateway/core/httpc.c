/*
 * httpc.c - libcurl multi driven by the libuv loop (curl's multi-uv pattern).
 *
 * Re-entrancy: user code (done and on_data callbacks) may start requests,
 * cancel any request and close the client. Three rules keep that safe:
 *  - every entry from the loop or the user (poll, timer, cancel, close) holds
 *    c->depth; a finished call only leaves the active list and moves to the
 *    dead list, and dead calls are removed from the multi and freed, and a
 *    requested close is carried out, only when depth drops back to zero;
 *  - while curl itself is on the stack (c->in_curl: on_data runs inside the
 *    write callback) curl forbids curl_multi_add_handle, so a new request
 *    waits (in_multi == 0) until curl_multi_socket_action returns;
 *  - a call whose done already ran gets no more callbacks: the write and
 *    header callbacks see its state and make curl stop the transfer.
 */
#include "httpc.h"

#include <ctype.h>
#include <stdio.h>
#include <sys/socket.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define CURL_LAZY_NAMES
#include "curl_lazy.h"
#include "err.h"
#include "log.h"
#include "num.h"

#define HTTPC_MAX_HEADERS 256
#define HTTPC_MAX_METHOD 16
/* The CA store is parsed on the first TLS connection and kept by the multi
 * handle for this long (seconds). */
#define HTTPC_CA_CACHE_S 86400L
#define HTTPC_DEFAULT_UA "switchboard/" SB_VERSION

_Static_assert(sizeof(curl_off_t) == sizeof(int64_t), "curl_off_t is 64-bit");

enum httpc_call_state { HTTPC_CALL_ACTIVE = 0, HTTPC_CALL_DONE };

/* One uv_poll_t per socket curl asked us to watch. */
struct httpc_sock {
	uv_poll_t poll;
	struct httpc *c;
	curl_socket_t fd;
	struct httpc_sock *prev, *next;
};

struct httpc_call {
	struct httpc *c;
	CURL *easy;
	struct curl_slist *hdrs;
	char *body; /* our copy; curl reads it during the transfer */
	httpc_done_cb done;
	httpc_data_cb on_data;
	void *ud;
	enum httpc_call_state state;
	int in_multi;
	int abort_rc;    /* why a callback made curl stop, 0 if none */
	size_t streamed; /* bytes handed to on_data */
	size_t max_bytes;
	struct httpc_response resp;
	size_t headers_cap;
	char errbuf[CURL_ERROR_SIZE];
	bool public_only;
	struct netaddr_policy allow;    /* public_only: what is allowed besides */
	char refused[160];              /* the address public_only refused */
	struct httpc_call *prev, *next; /* active list, or dead list (next only) */
};

struct httpc {
	uv_loop_t *loop;
	CURLM *multi;
	uv_timer_t timer;
	long timeout_ms;
	long connect_timeout_ms;
	size_t max_response_bytes;
	char *ca_file;
	char *user_agent;
	struct httpc_call *active;
	size_t n_active;
	size_t n_waiting; /* active calls not yet added to the multi */
	struct httpc_call *dead;
	struct httpc_sock *socks;
	size_t n_uv_handles; /* open or closing: the timer and the polls */
	int depth;
	int in_curl;
	int closing;         /* httpc_close was called */
	int handles_closing; /* teardown started: no new uv work */
};

/* libcurl's global state is process-wide by nature; it is set up once and
 * never changes afterwards, so it is the one static this module keeps. */
static pthread_once_t httpc_once = PTHREAD_ONCE_INIT;
static CURLcode httpc_global_rc = CURLE_FAILED_INIT;

static void httpc_global_init(void)
{
	const char *why = NULL;

	if (curl_lazy_load(&why) != SB_OK) {
		log_error("httpc", "no HTTP client", LOG_S("error", why));
		return;
	}
	httpc_global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

void httpc_global_cleanup(void)
{
	if (httpc_global_rc == CURLE_OK)
		curl_global_cleanup();
}

/* ---- freeing ---------------------------------------------------------- */

static void httpc_headers_reset(struct httpc_response *r)
{
	size_t i;

	for (i = 0; i < r->n_headers; i++) {
		free(r->headers[i].name);
		free(r->headers[i].value);
	}
	r->n_headers = 0;
}

static void httpc_call_free(struct httpc_call *call)
{
	if (!call)
		return;
	if (call->easy)
		curl_easy_cleanup(call->easy);
	curl_slist_free_all(call->hdrs);
	free(call->body);
	buf_free(&call->resp.body);
	httpc_headers_reset(&call->resp);
	free(call->resp.headers);
	free(call);
}

static void httpc_maybe_free(struct httpc *c)
{
	if (!c->handles_closing || c->n_uv_handles > 0)
		return;
	free(c->ca_file);
	free(c->user_agent);
	free(c);
}

static void httpc_on_sock_closed(uv_handle_t *h)
{
	struct httpc_sock *sk = h->data;
	struct httpc *c = sk->c;

	free(sk);
	c->n_uv_handles--;
	httpc_maybe_free(c);
}

static void httpc_on_timer_closed(uv_handle_t *h)
{
	struct httpc *c = h->data;

	c->n_uv_handles--;
	httpc_maybe_free(c);
}

/* Stops watching the socket now (before curl closes the fd, which it may then
 * reuse for a new socket) and frees the context once libuv is done with it. */
static void httpc_sock_close(struct httpc_sock *sk)
{
	struct httpc *c = sk->c;

	if (sk->prev)
		sk->prev->next = sk->next;
	else
		c->socks = sk->next;
	if (sk->next)
		sk->next->prev = sk->prev;
	sk->prev = sk->next = NULL;
	uv_close((uv_handle_t *)&sk->poll, httpc_on_sock_closed);
}

/* ---- completion ------------------------------------------------------- */

static void httpc_unlink_active(struct httpc_call *call)
{
	struct httpc *c = call->c;

	if (call->prev)
		call->prev->next = call->next;
	else
		c->active = call->next;
	if (call->next)
		call->next->prev = call->prev;
	call->prev = call->next = NULL;
	c->n_active--;
	if (!call->in_multi)
		c->n_waiting--;
}

/* Runs done for an active call and parks it on the dead list. Caller holds
 * c->depth, so the call is not freed before the caller's frame unwinds. */
static void httpc_finish(struct httpc_call *call, int rc, CURLcode res)
{
	struct httpc *c = call->c;
	long status = 0;
	double total = 0;

	httpc_unlink_active(call);
	call->state = HTTPC_CALL_DONE;
	call->next = c->dead;
	c->dead = call;

	if (curl_easy_getinfo(call->easy, CURLINFO_RESPONSE_CODE, &status) == CURLE_OK)
		call->resp.status = status;
	if (curl_easy_getinfo(call->easy, CURLINFO_TOTAL_TIME, &total) == CURLE_OK)
		call->resp.total_s = total;
	call->resp.error = NULL;
	if (rc != SB_OK) {
		if (rc == SB_ERR_PERM && call->refused[0])
			call->resp.error = call->refused;
		else if (call->abort_rc || res == CURLE_OK)
			call->resp.error = sb_strerror(rc);
		else if (call->errbuf[0])
			call->resp.error = call->errbuf;
		else
			call->resp.error = curl_easy_strerror(res);
	}
	call->done(call->ud, rc, &call->resp);
}

static int httpc_map(const struct httpc_call *call, CURLcode res)
{
	if (res == CURLE_OK)
		return SB_OK;
	if (call->abort_rc)
		return call->abort_rc;
	if (call->refused[0])
		return SB_ERR_PERM;
	if (res == CURLE_OPERATION_TIMEDOUT)
		return SB_ERR_TIMEOUT;
	if (res == CURLE_FILESIZE_EXCEEDED)
		return SB_ERR_TOOBIG;
	return SB_ERR_HTTP;
}

static void httpc_reap(struct httpc *c)
{
	struct httpc_call *call;

	while ((call = c->dead)) {
		c->dead = call->next;
		if (call->in_multi)
			curl_multi_remove_handle(c->multi, call->easy);
		httpc_call_free(call);
	}
}

/* Closes the uv handles and the multi. Every call is dead by now. */
static void httpc_teardown(struct httpc *c)
{
	c->handles_closing = 1;
	/* Forget the sockets before curl closes them, so its REMOVE callbacks
	 * during cleanup find nothing and no fd is watched after its close. */
	while (c->socks) {
		curl_multi_assign(c->multi, c->socks->fd, NULL);
		httpc_sock_close(c->socks);
	}
	curl_multi_cleanup(c->multi);
	c->multi = NULL;
	uv_close((uv_handle_t *)&c->timer, httpc_on_timer_closed);
}

static void httpc_enter(struct httpc *c)
{
	c->depth++;
}

/* The only place dead calls are freed and a close is carried out. c may be
 * freed by the loop after this returns (never before). */
static void httpc_leave(struct httpc *c)
{
	if (--c->depth > 0)
		return;
	httpc_reap(c);
	if (c->closing && !c->handles_closing)
		httpc_teardown(c);
}

/* Adds requests that were started while curl was on the stack. */
static void httpc_add_waiting(struct httpc *c)
{
	struct httpc_call *call, *next;

	for (call = c->active; call && c->n_waiting > 0; call = next) {
		next = call->next;
		if (call->in_multi)
			continue;
		if (curl_multi_add_handle(c->multi, call->easy) == CURLM_OK) {
			call->in_multi = 1;
			c->n_waiting--;
			continue;
		}
		/* done may start or cancel requests: rescan from the head. */
		httpc_finish(call, SB_ERR_NOMEM, CURLE_OK);
		next = c->active;
	}
}

static void httpc_collect(struct httpc *c)
{
	struct httpc_call *call;
	CURLMsg *m;
	CURLcode res;
	char *priv;
	int left;

	while (c->multi && (m = curl_multi_info_read(c->multi, &left))) {
		if (m->msg != CURLMSG_DONE)
			continue;
		/* m belongs to curl: copy what we need before user code runs. */
		res = m->data.result;
		priv = NULL;
		if (curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, &priv) != CURLE_OK || !priv)
			continue;
		call = (struct httpc_call *)(void *)priv;
		if (call->state != HTTPC_CALL_ACTIVE)
			continue;
		httpc_finish(call, httpc_map(call, res), res);
	}
}

static void httpc_drive(struct httpc *c, curl_socket_t s, int flags)
{
	int running = 0;

	httpc_enter(c);
	if (c->multi && !c->closing) {
		c->in_curl = 1;
		curl_multi_socket_action(c->multi, s, flags, &running);
		c->in_curl = 0;
		if (!c->closing)
			httpc_add_waiting(c);
		httpc_collect(c);
	}
	httpc_leave(c);
}

/* ---- libuv and curl callbacks ----------------------------------------- */

static void httpc_on_poll(uv_poll_t *h, int status, int events)
{
	struct httpc_sock *sk = h->data;
	int flags = 0;

	if (status < 0)
		flags = CURL_CSELECT_ERR;
	if (events & UV_READABLE)
		flags |= CURL_CSELECT_IN;
	if (events & UV_WRITABLE)
		flags |= CURL_CSELECT_OUT;
	httpc_drive(sk->c, sk->fd, flags);
}

static void httpc_on_timer(uv_timer_t *t)
{
	httpc_drive(t->data, CURL_SOCKET_TIMEOUT, 0);
}

static int httpc_on_curl_socket(CURL *easy, curl_socket_t s, int what, void *userp, void *socketp)
{
	struct httpc *c = userp;
	struct httpc_sock *sk = socketp;
	int events = 0;

	if (c->handles_closing)
		return 0;
	if (what == CURL_POLL_REMOVE) {
		if (sk) {
			httpc_sock_close(sk);
			curl_multi_assign(c->multi, s, NULL);
		}
		return 0;
	}
	if (!sk) {
		sk = calloc(1, sizeof(*sk));
		if (!sk)
			return -1;
		if (uv_poll_init_socket(c->loop, &sk->poll, s) != 0) {
			free(sk);
			return -1;
		}
		sk->poll.data = sk;
		sk->c = c;
		sk->fd = s;
		sk->next = c->socks;
		if (c->socks)
			c->socks->prev = sk;
		c->socks = sk;
		c->n_uv_handles++;
		curl_multi_assign(c->multi, s, sk);
	}
	if (what & CURL_POLL_IN)
		events |= UV_READABLE;
	if (what & CURL_POLL_OUT)
		events |= UV_WRITABLE;
	if (!events)
		return uv_poll_stop(&sk->poll) == 0 ? 0 : -1;
	return uv_poll_start(&sk->poll, events, httpc_on_poll) == 0 ? 0 : -1;
}

/* curl's timer callback must not drive curl itself: it only arms the uv
 * timer, whose callback calls curl_multi_socket_action (0 ms = next loop
 * iteration). */
static int httpc_on_curl_timer(CURLM *multi, long timeout_ms, void *userp)
{
	struct httpc *c = userp;

	if (c->handles_closing)
		return 0;
	if (timeout_ms < 0)
		return uv_timer_stop(&c->timer) == 0 ? 0 : -1;
	return uv_timer_start(&c->timer, httpc_on_timer, (uint64_t)timeout_ms, 0) == 0 ? 0 : -1;
}

/* Returning a count other than n makes curl fail the transfer with
 * CURLE_WRITE_ERROR; abort_rc records why. */
static size_t httpc_on_write(char *p, size_t size, size_t nmemb, void *ud)
{
	struct httpc_call *call = ud;
	size_t n = size * nmemb;
	int rc;

	if (call->state != HTTPC_CALL_ACTIVE)
		return n ? 0 : 1;
	if (n == 0)
		return 0;
	if (!call->on_data) {
		rc = buf_append(&call->resp.body, p, n);
		if (rc) {
			call->abort_rc = rc;
			return 0;
		}
		return n;
	}
	if (n > call->max_bytes - call->streamed) {
		call->abort_rc = SB_ERR_TOOBIG;
		return 0;
	}
	call->streamed += n;
	rc = call->on_data(call->ud, p, n);
	/* on_data may have cancelled this call or closed the client. */
	if (call->state != HTTPC_CALL_ACTIVE)
		return 0;
	if (rc) {
		call->abort_rc = SB_ERR_ABORTED;
		return 0;
	}
	return n;
}

static int httpc_header_add(struct httpc_response *r, size_t *cap, const char *name,
                            size_t name_len, const char *value, size_t value_len)
{
	struct httpc_header *h;
	size_t i, ncap;
	char *nm = NULL, *val = NULL;
	int rc = SB_ERR_TOOBIG;

	if (r->n_headers >= HTTPC_MAX_HEADERS)
		goto out;
	rc = SB_ERR_NOMEM;
	if (r->n_headers == *cap) {
		ncap = *cap ? *cap * 2 : 16;
		h = realloc(r->headers, ncap * sizeof(*h));
		if (!h)
			goto out;
		r->headers = h;
		*cap = ncap;
	}
	nm = strndup(name, name_len);
	val = strndup(value, value_len);
	if (!nm || !val)
		goto out;
	for (i = 0; nm[i]; i++)
		nm[i] = (char)tolower((unsigned char)nm[i]);
	r->headers[r->n_headers].name = nm;
	r->headers[r->n_headers].value = val;
	r->n_headers++;
	nm = val = NULL;
	rc = SB_OK;
out:
	free(val);
	free(nm);
	return rc;
}

static size_t httpc_on_header(char *p, size_t size, size_t nitems, void *ud)
{
	struct httpc_call *call = ud;
	size_t n = size * nitems;
	const char *colon, *v, *end = p + n;
	int rc;

	if (call->state != HTTPC_CALL_ACTIVE)
		return 0;
	/* A status line starts a new response (1xx, redirect, proxy CONNECT):
	 * only the last one's headers are kept. */
	if (n >= 5 && memcmp(p, "HTTP/", 5) == 0) {
		httpc_headers_reset(&call->resp);
		return n;
	}
	colon = memchr(p, ':', n);
	/* The blank end line, folded continuations and junk are skipped. */
	if (!colon || colon == p || p[0] == ' ' || p[0] == '\t')
		return n;
	v = colon + 1;
	while (v < end && (*v == ' ' || *v == '\t'))
		v++;
	while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ' || end[-1] == '\t'))
		end--;
	rc = httpc_header_add(&call->resp, &call->headers_cap, p, (size_t)(colon - p), v,
	                      (size_t)(end - v));
	if (rc) {
		call->abort_rc = rc;
		return 0;
	}
	return n;
}

/* Every socket curl opens for a public_only request: the address it is
 * about to connect to, after name resolution (and for each redirect hop,
 * which is a request of its own). A refusal makes curl try the name's next
 * address, then fail. */
static curl_socket_t httpc_on_open_socket(void *ud, curlsocktype purpose, struct curl_sockaddr *a)
{
	struct httpc_call *call = ud;
	char text[64];
	const char *why = NULL;

	if (purpose != CURLSOCKTYPE_IPCXN || !netaddr_allowed(&call->allow, &a->addr, &why)) {
		netaddr_format(&a->addr, text, sizeof text);
		snprintf(call->refused, sizeof call->refused,
		         "refused to connect to %s: a %s address (not public; an allow-list "
		         "entry opens it)",
		         text, why ? why : "special");
		return CURL_SOCKET_BAD;
	}
	/* close-on-exec, like every socket curl opens (no fd crosses into a command) */
	return socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
}

/* ---- public API ------------------------------------------------------- */

int httpc_new(struct httpc **out, uv_loop_t *loop, const struct httpc_options *opt)
{
	struct httpc *c = NULL;
	long host_max;
	int rc = SB_ERR_INVAL;

	if (!out || !loop || !opt || opt->timeout_ms <= 0 || opt->connect_timeout_ms < 0 ||
	    opt->max_connections <= 0 || opt->max_host_connections < 0 ||
	    opt->max_response_bytes == 0)
		goto out;
	rc = SB_ERR_HTTP;
	if (pthread_once(&httpc_once, httpc_global_init) != 0 || httpc_global_rc != CURLE_OK)
		goto out;
	rc = SB_ERR_NOMEM;
	c = calloc(1, sizeof(*c));
	if (!c)
		goto out;
	c->loop = loop;
	c->timeout_ms = opt->timeout_ms;
	c->connect_timeout_ms = opt->connect_timeout_ms ? opt->connect_timeout_ms : opt->timeout_ms;
	c->max_response_bytes = opt->max_response_bytes;
	c->user_agent = strdup(opt->user_agent ? opt->user_agent : HTTPC_DEFAULT_UA);
	if (!c->user_agent)
		goto out;
	if (opt->ca_file && !(c->ca_file = strdup(opt->ca_file)))
		goto out;
	c->multi = curl_multi_init();
	if (!c->multi)
		goto out;
	host_max = opt->max_host_connections ? opt->max_host_connections : opt->max_connections;
	rc = SB_ERR_HTTP;
	if (curl_multi_setopt(c->multi, CURLMOPT_SOCKETFUNCTION, httpc_on_curl_socket) ||
	    curl_multi_setopt(c->multi, CURLMOPT_SOCKETDATA, c) ||
	    curl_multi_setopt(c->multi, CURLMOPT_TIMERFUNCTION, httpc_on_curl_timer) ||
	    curl_multi_setopt(c->multi, CURLMOPT_TIMERDATA, c) ||
	    curl_multi_setopt(c->multi, CURLMOPT_MAXCONNECTS, opt->max_connections) ||
	    curl_multi_setopt(c->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, opt->max_connections) ||
	    curl_multi_setopt(c->multi, CURLMOPT_MAX_HOST_CONNECTIONS, host_max))
		goto out;
	/* Last fallible step: once the timer exists, freeing needs the loop. */
	if (uv_timer_init(loop, &c->timer) != 0)
		goto out;
	c->timer.data = c;
	c->n_uv_handles = 1;
	*out = c;
	c = NULL;
	rc = SB_OK;
out:
	if (c) {
		if (c->multi)
			curl_multi_cleanup(c->multi);
		free(c->ca_file);
		free(c->user_agent);
		free(c);
	}
	return rc;
}

void httpc_close(struct httpc *c)
{
	if (!c || c->closing)
		return;
	c->closing = 1;
	httpc_enter(c);
	while (c->active)
		httpc_finish(c->active, SB_ERR_CLOSED, CURLE_OK);
	httpc_leave(c);
}

static int httpc_method_ok(const char *m)
{
	size_t i;

	for (i = 0; m[i]; i++)
		if (i >= HTTPC_MAX_METHOD || m[i] < 'A' || m[i] > 'Z')
			return 0;
	return i > 0;
}

/* Sets the method and body options. */
static int httpc_set_method(struct httpc_call *call, const struct httpc_request *req)
{
	const char *method = req->method;
	CURL *e = call->easy;

	if (!method)
		method = req->body ? "POST" : "GET";
	if (req->body) {
		call->body = malloc(req->body_len ? req->body_len : 1);
		if (!call->body)
			return SB_ERR_NOMEM;
		memcpy(call->body, req->body, req->body_len);
		if (curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->body_len) ||
		    curl_easy_setopt(e, CURLOPT_POSTFIELDS, call->body))
			return SB_ERR_NOMEM;
		if (strcmp(method, "POST") != 0 &&
		    curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method))
			return SB_ERR_NOMEM;
		return SB_OK;
	}
	if (strcmp(method, "GET") == 0)
		return curl_easy_setopt(e, CURLOPT_HTTPGET, 1L) ? SB_ERR_NOMEM : SB_OK;
	if (strcmp(method, "HEAD") == 0)
		return curl_easy_setopt(e, CURLOPT_NOBODY, 1L) ? SB_ERR_NOMEM : SB_OK;
	if (strcmp(method, "POST") == 0)
		return curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)0) ||
		               curl_easy_setopt(e, CURLOPT_POSTFIELDS, "")
		           ? SB_ERR_NOMEM
		           : SB_OK;
	return curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method) ? SB_ERR_NOMEM : SB_OK;
}

/* libcurl's sockets, opened close-on-exec: a command the gateway runs
 * must never hold the gateway's connection to a model provider. */
static curl_socket_t httpc_open_socket(void *ud, curlsocktype purpose, struct curl_sockaddr *a)
{
	(void)ud;
	(void)purpose;
	return socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
}

static int httpc_set_headers(struct httpc_call *call, const char *const *headers)
{
	struct curl_slist *l;
	size_t i;

	for (i = 0; headers && headers[i]; i++) {
		/* A CR or LF would let a value inject headers of its own. */
		if (strpbrk(headers[i], "\r\n"))
			return SB_ERR_INVAL;
		l = curl_slist_append(call->hdrs, headers[i]);
		if (!l)
			return SB_ERR_NOMEM;
		call->hdrs = l;
	}
	/* No "Expect: 100-continue" round trip before a body. */
	l = curl_slist_append(call->hdrs, "Expect:");
	if (!l)
		return SB_ERR_NOMEM;
	call->hdrs = l;
	return curl_easy_setopt(call->easy, CURLOPT_HTTPHEADER, call->hdrs) ? SB_ERR_NOMEM : SB_OK;
}

int httpc_request(struct httpc *c, const struct httpc_request *req, httpc_done_cb done, void *ud,
                  struct httpc_call **out_call)
{
	struct httpc_call *call = NULL;
	CURL *e;
	curl_off_t max_file;
	long timeout;
	int rc = SB_ERR_INVAL;

	if (!c || !req || !req->url || !done || (req->body_len && !req->body) ||
	    (req->method && !httpc_method_ok(req->method)) || req->timeout_ms < 0)
		goto out;
	rc = SB_ERR_CLOSED;
	if (c->closing)
		goto out;
	rc = SB_ERR_NOMEM;
	call = calloc(1, sizeof(*call));
	if (!call)
		goto out;
	call->c = c;
	call->done = done;
	call->ud = ud;
	call->on_data = req->on_data;
	call->max_bytes = req->max_response_bytes ? req->max_response_bytes : c->max_response_bytes;
	buf_init(&call->resp.body, call->max_bytes);
	call->easy = e = curl_easy_init();
	if (!e)
		goto out;
	timeout = req->timeout_ms ? req->timeout_ms : c->timeout_ms;
	/* Lets curl refuse a Content-Length above the cap before any body. */
	max_file = call->max_bytes > (size_t)INT64_MAX ? INT64_MAX : (curl_off_t)call->max_bytes;
	if (curl_easy_setopt(e, CURLOPT_URL, req->url) ||
	    curl_easy_setopt(e, CURLOPT_PRIVATE, (char *)call) ||
	    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, call->errbuf) ||
	    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L) ||
	    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout) ||
	    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
	                     c->connect_timeout_ms < timeout ? c->connect_timeout_ms : timeout) ||
	    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L) ||
	    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https") ||
	    curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https") ||
	    curl_easy_setopt(e, CURLOPT_USERAGENT, c->user_agent) ||
	    curl_easy_setopt(e, CURLOPT_MAXFILESIZE_LARGE, max_file) ||
	    curl_easy_setopt(e, CURLOPT_CA_CACHE_TIMEOUT, HTTPC_CA_CACHE_S) ||
	    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, httpc_on_write) ||
	    curl_easy_setopt(e, CURLOPT_WRITEDATA, call) ||
	    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, httpc_on_header) ||
	    curl_easy_setopt(e, CURLOPT_HEADERDATA, call) ||
	    curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, httpc_open_socket))
		goto out;
	if (c->ca_file && curl_easy_setopt(e, CURLOPT_CAINFO, c->ca_file))
		goto out;
	if (req->public_only) {
		call->public_only = true;
		if (req->allow)
			call->allow = *req->allow;
		if (curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, httpc_on_open_socket) ||
		    curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, call) ||
		    curl_easy_setopt(e, CURLOPT_FRESH_CONNECT, 1L) ||
		    curl_easy_setopt(e, CURLOPT_FORBID_REUSE, 1L) ||
		    curl_easy_setopt(e, CURLOPT_PROXY, ""))
			goto out;
	}
	rc = httpc_set_headers(call, req->headers);
	if (rc)
		goto out;
	rc = httpc_set_method(call, req);
	if (rc)
		goto out;
	/* curl refuses add_handle from inside its callbacks (on_data): such a
	 * request is added when curl_multi_socket_action returns. */
	if (!c->in_curl) {
		rc = SB_ERR_NOMEM;
		if (curl_multi_add_handle(c->multi, e) != CURLM_OK)
			goto out;
		call->in_multi = 1;
	} else {
		c->n_waiting++;
	}
	call->next = c->active;
	if (c->active)
		c->active->prev = call;
	c->active = call;
	c->n_active++;
	if (out_call)
		*out_call = call;
	call = NULL;
	rc = SB_OK;
out:
	httpc_call_free(call);
	return rc;
}

void httpc_cancel(struct httpc_call *call)
{
	struct httpc *c;

	if (!call || call->state != HTTPC_CALL_ACTIVE)
		return;
	c = call->c;
	httpc_enter(c);
	httpc_finish(call, SB_ERR_ABORTED, CURLE_OK);
	httpc_leave(c);
}

const char *httpc_response_header(const struct httpc_response *r, const char *name)
{
	size_t i;

	if (!r || !name)
		return NULL;
	for (i = 0; i < r->n_headers; i++)
		if (strcasecmp(r->headers[i].name, name) == 0)
			return r->headers[i].value;
	return NULL;
}

int64_t httpc_retry_after_ms(const struct httpc_response *r)
{
	const char *v = httpc_response_header(r, "retry-after");
	int64_t secs;
	time_t when, now;

	if (!v || !*v)
		return -1;
	if (isdigit((unsigned char)*v)) {
		/* Delta-seconds; anything above a year is clamped to a year. */
		switch (num_parse_i64(v, 0, INT64_MAX, &secs)) {
		case SB_OK:
			break;
		case SB_ERR_TOOBIG:
			secs = INT64_MAX;
			break;
		default:
			return -1;
		}
		if (secs > 365L * 24 * 3600)
			secs = 365L * 24 * 3600;
		return secs * 1000;
	}
	when = curl_getdate(v, NULL);
	if (when == (time_t)-1)
		return -1;
	now = time(NULL);
	if (when <= now)
		return 0;
	if (when - now > 365L * 24 * 3600)
		return (int64_t)365 * 24 * 3600 * 1000;
	return (int64_t)(when - now) * 1000;
}

size_t httpc_in_flight(const struct httpc *c)
{
	return c ? c->n_active : 0;
}
