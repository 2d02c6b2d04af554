/*
 * origin.c - allowed browser origins. See origin.h.
 */
#include "gateway/http/origin.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "gateway/config/config.h"

#define ORIGIN_MAX 300

/* Whether bind is a wildcard or loopback address (the defaults cover it). */
static bool origin_bind_is_own(const char *bind)
{
	return !bind || !*bind || strcmp(bind, "0.0.0.0") == 0 || strcmp(bind, "::") == 0 ||
	       strcmp(bind, "localhost") == 0 || strcmp(bind, "::1") == 0 ||
	       strncmp(bind, "127.", 4) == 0;
}

/* Compares origins ignoring case and one trailing slash. */
static bool origin_same(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);

	if (la && a[la - 1] == '/')
		la--;
	if (lb && b[lb - 1] == '/')
		lb--;
	return la == lb && strncasecmp(a, b, la) == 0;
}

bool origin_allowed(const struct config *cfg, int port, const char *origin)
{
	const struct config_control *cc = &cfg->gateway.control;
	const char *bind = cfg->gateway.bind;
	char own[ORIGIN_MAX];

	if (!origin || !*origin || strcmp(origin, "null") == 0 || strlen(origin) >= ORIGIN_MAX)
		return false;
	if (cc->n_allowed_origins) {
		for (size_t i = 0; i < cc->n_allowed_origins; i++)
			if (origin_same(cc->allowed_origins[i], origin))
				return true;
		return false;
	}
	static const char *const loopback[] = {"127.0.0.1", "localhost", "[::1]"};
	for (size_t i = 0; i < sizeof loopback / sizeof *loopback; i++) {
		snprintf(own, sizeof own, "http://%s:%d", loopback[i], port);
		if (origin_same(own, origin))
			return true;
	}
	if (!origin_bind_is_own(bind)) {
		snprintf(own, sizeof own, strchr(bind, ':') ? "http://[%s]:%d" : "http://%s:%d", bind,
		         port);
		if (origin_same(own, origin))
			return true;
	}
	return false;
}

bool origin_from_browser(const char *origin)
{
	return origin && (strcmp(origin, "null") == 0 || strstr(origin, "://") != NULL);
}

bool origin_host_allowed(const struct config *cfg, int port, const char *host)
{
	char o[ORIGIN_MAX];

	if (!host || !*host || strlen(host) + 9 >= sizeof o || strpbrk(host, "/?#@ \t"))
		return false;
	snprintf(o, sizeof o, "http://%s", host);
	if (origin_allowed(cfg, port, o))
		return true;
	snprintf(o, sizeof o, "https://%s", host);
	return origin_allowed(cfg, port, o);
}

void origin_default(const struct config *cfg, int port, char *out, size_t size)
{
	const struct config_control *cc = &cfg->gateway.control;
	const char *bind = cfg->gateway.bind;

	if (cc->n_allowed_origins) {
		snprintf(out, size, "%s", cc->allowed_origins[0]);
		size_t n = strlen(out);
		if (n && out[n - 1] == '/')
			out[n - 1] = '\0';
		return;
	}
	if (origin_bind_is_own(bind))
		snprintf(out, size, "http://127.0.0.1:%d", port);
	else
		snprintf(out, size, strchr(bind, ':') ? "http://[%s]:%d" : "http://%s:%d", bind,
		         port);
}
