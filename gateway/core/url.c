/*
 * url.c - see url.h.
 */
#include "url.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "err.h"
#include "fmt.h"

static int url_fail(char *why, size_t size, const char *msg)
{
	if (why && size)
		snprintf(why, size, "%s", msg);
	return SB_ERR_INVAL;
}

/* A host name: labels of letters, digits and '-', separated by single dots
 * (a trailing dot allowed). A last label of digits only would make the
 * resolver read a number: only a strict dotted quad may look like one. */
static int url_check_name(const char *h, char *why, size_t size)
{
	char name[URL_HOST_MAX + 1];
	const char *label, *last;
	size_t n = strlen(h), len;
	struct in_addr a4;
	bool digits = true;

	if (n == 0)
		return url_fail(why, size, "the URL has no host");
	if (n > URL_HOST_MAX)
		return url_fail(why, size, "the URL's host is too long");
	memcpy(name, h, n + 1);
	if (n > 1 && name[n - 1] == '.')
		name[--n] = '\0'; /* the root's dot: "example.com." */
	label = last = name;
	for (const char *p = name;; p++) {
		if (*p != '.' && *p != '\0') {
			if (!isalnum((unsigned char)*p) && *p != '-')
				return url_fail(why, size,
				                "the URL's host may hold only letters, "
				                "digits, '-' and '.' (or be an IP address)");
			continue;
		}
		len = (size_t)(p - label);
		if (len == 0)
			return url_fail(why, size, "the URL's host has an empty label");
		if (len > 63)
			return url_fail(why, size, "a label of the URL's host is too long");
		if (label[0] == '-' || label[len - 1] == '-')
			return url_fail(why, size,
			                "a label of the URL's host starts or ends with '-'");
		last = label;
		if (*p == '\0')
			break;
		label = p + 1;
	}
	for (const char *p = last; *p; p++)
		if (!isdigit((unsigned char)*p))
			digits = false;
	if (digits || (last[0] == '0' && (last[1] == 'x' || last[1] == 'X'))) {
		/* inet_pton takes exactly four decimal parts, no octal or hex. */
		if (inet_pton(AF_INET, name, &a4) != 1)
			return url_fail(why, size,
			                "the URL's host is a number but not a dotted "
			                "IPv4 address (a.b.c.d)");
	}
	return SB_OK;
}

int url_parse(const char *text, struct url *u, char *why, size_t size)
{
	const char *p, *host, *host_end, *rest;
	size_t n, scheme_len;
	char port_text[8];
	struct in6_addr a6;
	int rc;

	if (!text || !u)
		return url_fail(why, size, "no URL");
	memset(u, 0, sizeof *u);
	n = strlen(text);
	if (n > URL_MAX)
		return url_fail(why, size, "the URL is too long");
	for (p = text; *p; p++) {
		unsigned char ch = (unsigned char)*p;

		if (ch <= 0x20 || ch >= 0x7f)
			return url_fail(why, size,
			                "the URL holds a space, a control character or a "
			                "non-ASCII byte (percent-encode it)");
		if (ch == '\\')
			return url_fail(why, size, "the URL holds a backslash");
	}
	if (strncasecmp(text, "https://", 8) == 0) {
		u->https = true;
		scheme_len = 8;
	} else if (strncasecmp(text, "http://", 7) == 0) {
		scheme_len = 7;
	} else {
		return url_fail(why, size, "only http:// and https:// URLs can be fetched");
	}
	host = text + scheme_len;
	rest = host + strcspn(host, "/?#");
	if (memchr(host, '@', (size_t)(rest - host)))
		return url_fail(why, size, "the URL holds user info (user@host), which is refused");
	if (*host == '[') {
		host_end = memchr(host, ']', (size_t)(rest - host));
		if (!host_end || (size_t)(host_end - host - 1) >= sizeof u->host)
			return url_fail(why, size, "the URL's IPv6 address is not closed by ']'");
		memcpy(u->host, host + 1, (size_t)(host_end - host - 1));
		if (inet_pton(AF_INET6, u->host, &a6) != 1)
			return url_fail(why, size, "the URL's IPv6 address is not valid");
		u->ipv6 = true;
		p = host_end + 1;
	} else {
		host_end = host;
		while (host_end < rest && *host_end != ':')
			host_end++;
		if ((size_t)(host_end - host) > URL_HOST_MAX)
			return url_fail(why, size, "the URL's host is too long");
		memcpy(u->host, host, (size_t)(host_end - host));
		for (char *q = u->host; *q; q++)
			*q = (char)tolower((unsigned char)*q);
		rc = url_check_name(u->host, why, size);
		if (rc)
			return rc;
		p = host_end;
	}
	u->port = u->https ? 443 : 80;
	if (*p == ':') {
		size_t pl = (size_t)(rest - p - 1);
		int port = 0;

		if (pl == 0 || pl > 5)
			return url_fail(why, size,
			                "the URL's port is not a number from 1 to 65535");
		memcpy(port_text, p + 1, pl);
		port_text[pl] = '\0';
		for (size_t i = 0; i < pl; i++) {
			if (!isdigit((unsigned char)port_text[i]))
				return url_fail(why, size,
				                "the URL's port is not a number from 1 to 65535");
			port = port * 10 + (port_text[i] - '0');
		}
		if (port < 1 || port > 65535)
			return url_fail(why, size,
			                "the URL's port is not a number from 1 to 65535");
		u->port = port;
	} else if (p != rest) {
		return url_fail(why, size,
		                "the URL's host is followed by something other than a "
		                "port or a path");
	}
	n = strcspn(rest, "#");
	{
		bool dflt = u->port == (u->https ? 443 : 80);
		char portbuf[8] = "";

		if (!dflt)
			snprintf(portbuf, sizeof portbuf, ":%d", u->port);
		rc = FMT(u->href, "%s://%s%s%s%s", u->https ? "https" : "http", u->ipv6 ? "[" : "",
		         u->host, u->ipv6 ? "]" : "", portbuf);
		u->path_off = strlen(u->href);
		if (rc == SB_OK)
			rc = FMT(u->href, "%s://%s%s%s%s%s%.*s", u->https ? "https" : "http",
			         u->ipv6 ? "[" : "", u->host, u->ipv6 ? "]" : "", portbuf,
			         *rest != '/' ? "/" : "", (int)n, rest);
		if (rc)
			return url_fail(why, size, "the URL is too long");
	}
	return SB_OK;
}

int url_join(const struct url *base, const char *ref, struct url *out, char *why, size_t size)
{
	char joined[URL_MAX + 1];
	const char *path = base->href + base->path_off;
	size_t dir;
	int rc;

	if (!ref || !*ref)
		return url_fail(why, size, "an empty redirect location");
	if (strncasecmp(ref, "http://", 7) == 0 || strncasecmp(ref, "https://", 8) == 0)
		return url_parse(ref, out, why, size);
	if (strstr(ref, "://") && strcspn(ref, ":") < strcspn(ref, "/?#"))
		return url_fail(why, size, "a redirect to a scheme other than http or https");
	if (ref[0] == '/' && ref[1] == '/')
		rc = FMT(joined, "%s:%s", base->https ? "https" : "http", ref);
	else if (ref[0] == '/')
		rc = FMT(joined, "%.*s%s", (int)base->path_off, base->href, ref);
	else if (ref[0] == '?')
		rc = FMT(joined, "%.*s%.*s%s", (int)base->path_off, base->href,
		         (int)strcspn(path, "?"), path, ref);
	else {
		/* Relative to the base's directory (dot segments are sent as
		 * they are: the server resolves them within its own host). */
		dir = strcspn(path, "?");
		while (dir > 0 && path[dir - 1] != '/')
			dir--;
		rc =
		    FMT(joined, "%.*s%.*s%s", (int)base->path_off, base->href, (int)dir, path, ref);
	}
	if (rc)
		return url_fail(why, size, "the redirect's URL is too long");
	return url_parse(joined, out, why, size);
}
