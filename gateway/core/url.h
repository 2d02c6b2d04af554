/*
 * url.h - a strict parser for the http(s) URLs the gateway fetches on the
 * model's behalf.
 *
 * Accepted: http:// or https:// (any case), a host that is a DNS name
 * (letters, digits, '-', '.'), a dotted-quad IPv4 address or a bracketed
 * IPv6 address, an optional port 1-65535, then a path and query of visible
 * ASCII. The fragment is dropped (it is never sent). Refused, with a reason
 * for the model: user info ("user:pass@", which hides the real host), other
 * schemes, spaces, control and non-ASCII bytes (percent-encode them),
 * backslashes, numeric host forms other than dotted quads ("0x7f.1",
 * "2130706433", "127.1"), empty hosts, URLs longer than URL_MAX.
 *
 * url_join resolves a redirect's Location against the URL it came from.
 * Pure functions; any thread.
 */
#ifndef SB_CORE_URL_H
#define SB_CORE_URL_H

#include <stdbool.h>
#include <stddef.h>

#define URL_MAX 4096
#define URL_HOST_MAX 255

struct url {
	bool https;
	char host[URL_HOST_MAX + 1]; /* lower case; IPv6 without brackets */
	bool ipv6;
	int port;               /* the explicit port, or 80/443 */
	char href[URL_MAX + 1]; /* the normalised URL (no fragment) */
	size_t path_off;        /* where the path starts in href */
};

/* Parses text into *u. SB_OK, or SB_ERR_INVAL with why (a sentence for the
 * model) filled. */
int url_parse(const char *text, struct url *u, char *why, size_t why_size);

/* Resolves ref (absolute, "//host/...", "/path", "path" or "?query")
 * against base and parses the result into *out. SB_OK or SB_ERR_INVAL with
 * why. */
int url_join(const struct url *base, const char *ref, struct url *out, char *why, size_t why_size);

#endif
