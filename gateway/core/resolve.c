/*
 * resolve.c - see resolve.h.
 */
#include "gateway/core/resolve.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/core/err.h"

#define RESOLVE_HOST_MAX 253

struct resolve_req {
	uv_getaddrinfo_t req;
	resolve_cb cb;
	void *ud;
};

static const struct addrinfo *resolve_pick(const struct addrinfo *res)
{
	for (const struct addrinfo *a = res; a; a = a->ai_next)
		if (a->ai_family == AF_INET)
			return a;
	return res;
}

static void resolve_done(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
	struct resolve_req *r = req->data;
	char addr[RESOLVE_ADDR_MAX] = "";
	int rc = SB_OK;
	const struct addrinfo *a;

	if (status == UV_EAI_NONAME || status == UV_EAI_NODATA) {
		rc = SB_ERR_NOTFOUND;
	} else if (status < 0 || !res) {
		rc = SB_ERR_IO;
	} else {
		a = resolve_pick(res);
		if (uv_ip_name(a->ai_addr, addr, sizeof addr) != 0)
			rc = SB_ERR_IO;
	}
	uv_freeaddrinfo(res);
	r->cb(r->ud, rc, rc ? NULL : addr);
	free(r);
}

int resolve_host(uv_loop_t *loop, const char *host, resolve_cb cb, void *ud)
{
	struct addrinfo hints;
	struct resolve_req *r;

	if (!host || !*host || strlen(host) > RESOLVE_HOST_MAX)
		return SB_ERR_INVAL;
	r = calloc(1, sizeof *r);
	if (!r)
		return SB_ERR_NOMEM;
	r->cb = cb;
	r->ud = ud;
	r->req.data = r;
	memset(&hints, 0, sizeof hints);
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_ADDRCONFIG;
	if (uv_getaddrinfo(loop, &r->req, resolve_done, host, NULL, &hints) != 0) {
		free(r);
		return SB_ERR_IO;
	}
	return SB_OK;
}
