/*
 * netaddr.c - see netaddr.h.
 */
#include "netaddr.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "err.h"
#include "num.h"

/* A special-purpose range and what it is called in a refusal. */
struct netaddr_range {
	uint8_t addr[16];
	int prefix;
	const char *why;
};

static const struct netaddr_range netaddr_v4[] = {
    {{0, 0, 0, 0}, 8, "unspecified"},
    {{10, 0, 0, 0}, 8, "private"},
    {{100, 64, 0, 0}, 10, "shared (carrier-grade NAT)"},
    {{127, 0, 0, 0}, 8, "loopback"},
    {{169, 254, 0, 0}, 16, "link-local (cloud metadata)"},
    {{172, 16, 0, 0}, 12, "private"},
    {{192, 0, 0, 0}, 24, "reserved"},
    {{192, 0, 2, 0}, 24, "documentation"},
    {{192, 88, 99, 0}, 24, "reserved"},
    {{192, 168, 0, 0}, 16, "private"},
    {{198, 18, 0, 0}, 15, "benchmarking"},
    {{198, 51, 100, 0}, 24, "documentation"},
    {{203, 0, 113, 0}, 24, "documentation"},
    {{224, 0, 0, 0}, 4, "multicast"},
    {{240, 0, 0, 0}, 4, "reserved"},
};

/* IPv6 ranges that do not carry an IPv4 address (those are unwrapped
 * first). */
static const struct netaddr_range netaddr_v6[] = {
    {{0}, 128, "unspecified"},
    {{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, 128, "loopback"},
    {{0}, 96, "reserved (IPv4-compatible)"},
    {{0, 0x64, 0xff, 0x9b, 0, 1}, 48, "private (local NAT64)"},
    {{0x01, 0x00}, 64, "reserved (discard)"},
    {{0x20, 0x01, 0x0d, 0xb8}, 32, "documentation"},
    {{0x20, 0x01, 0, 0}, 32, "reserved (Teredo)"},
    {{0xfc}, 7, "private (unique local)"},
    {{0xfe, 0x80}, 10, "link-local"},
    {{0xfe, 0xc0}, 10, "private (site-local)"},
    {{0xff}, 8, "multicast"},
};

static bool netaddr_in(const uint8_t *a, const uint8_t *net, int prefix)
{
	int full = prefix / 8, rest = prefix % 8;

	if (memcmp(a, net, (size_t)full) != 0)
		return false;
	if (!rest)
		return true;
	return ((a[full] ^ net[full]) & (uint8_t)(0xff << (8 - rest))) == 0;
}

/* The IPv4 address an IPv6 address carries (mapped, NAT64, 6to4). */
static bool netaddr_embedded_v4(const uint8_t *a6, uint8_t *v4)
{
	static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	static const uint8_t nat64[12] = {0, 0x64, 0xff, 0x9b};

	if (memcmp(a6, mapped, 12) == 0 || memcmp(a6, nat64, 12) == 0) {
		memcpy(v4, a6 + 12, 4);
		return true;
	}
	if (a6[0] == 0x20 && a6[1] == 0x02) {
		memcpy(v4, a6 + 2, 4);
		return true;
	}
	return false;
}

static const char *netaddr_special_v4(const uint8_t *a)
{
	for (size_t i = 0; i < sizeof netaddr_v4 / sizeof netaddr_v4[0]; i++)
		if (netaddr_in(a, netaddr_v4[i].addr, netaddr_v4[i].prefix))
			return netaddr_v4[i].why;
	return NULL;
}

const char *netaddr_special(const struct sockaddr *sa)
{
	uint8_t v4[4];

	if (!sa)
		return "no address";
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)(const void *)sa;

		memcpy(v4, &s4->sin_addr, 4);
		return netaddr_special_v4(v4);
	}
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)(const void *)sa;
		const uint8_t *a = s6->sin6_addr.s6_addr;

		if (netaddr_embedded_v4(a, v4))
			return netaddr_special_v4(v4);
		for (size_t i = 0; i < sizeof netaddr_v6 / sizeof netaddr_v6[0]; i++)
			if (netaddr_in(a, netaddr_v6[i].addr, netaddr_v6[i].prefix))
				return netaddr_v6[i].why;
		return NULL;
	}
	return "not an IP address";
}

static bool netaddr_net_has(const struct netaddr_net *n, const struct sockaddr *sa)
{
	uint8_t v4[4];

	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)(const void *)sa;

		memcpy(v4, &s4->sin_addr, 4);
		return n->family == AF_INET && netaddr_in(v4, n->addr, n->prefix);
	}
	if (sa->sa_family == AF_INET6) {
		const uint8_t *a =
		    ((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr.s6_addr;

		if (n->family == AF_INET6)
			return netaddr_in(a, n->addr, n->prefix);
		/* ::ffff:127.0.0.1 is 127.0.0.1 to an allow-list too. */
		return netaddr_embedded_v4(a, v4) && netaddr_in(v4, n->addr, n->prefix);
	}
	return false;
}

bool netaddr_allowed(const struct netaddr_policy *p, const struct sockaddr *sa, const char **why)
{
	const char *special = netaddr_special(sa);

	if (why)
		*why = special;
	if (!sa || (sa->sa_family != AF_INET && sa->sa_family != AF_INET6))
		return false;
	for (size_t i = 0; p && i < p->n_nets; i++)
		if (netaddr_net_has(&p->nets[i], sa)) {
			if (why)
				*why = NULL;
			return true;
		}
	return special == NULL;
}

int netaddr_net_parse(const char *text, struct netaddr_net *out)
{
	char host[64];
	const char *slash;
	size_t hl;
	int64_t prefix;
	int max;

	if (!text || !out)
		return SB_ERR_INVAL;
	memset(out, 0, sizeof *out);
	slash = strchr(text, '/');
	hl = slash ? (size_t)(slash - text) : strlen(text);
	if (hl == 0 || hl >= sizeof host)
		return SB_ERR_INVAL;
	memcpy(host, text, hl);
	host[hl] = '\0';
	if (inet_pton(AF_INET, host, out->addr) == 1) {
		out->family = AF_INET;
		max = 32;
	} else if (inet_pton(AF_INET6, host, out->addr) == 1) {
		out->family = AF_INET6;
		max = 128;
	} else {
		return SB_ERR_INVAL;
	}
	prefix = max;
	if (slash && num_parse_i64(slash + 1, 0, max, &prefix) != SB_OK)
		return SB_ERR_INVAL;
	out->prefix = (int)prefix;
	/* "10.0.0.1/8" is a typo for one address or for the network: say so. */
	for (int bit = out->prefix; bit < max; bit++)
		if (out->addr[bit / 8] & (0x80 >> (bit % 8)))
			return SB_ERR_INVAL;
	return SB_OK;
}

int netaddr_policy_init(struct netaddr_policy *p, char *const *nets, size_t n, size_t *bad)
{
	memset(p, 0, sizeof *p);
	if (n > NETADDR_ALLOW_MAX)
		return SB_ERR_TOOBIG;
	for (size_t i = 0; i < n; i++) {
		if (netaddr_net_parse(nets[i], &p->nets[i]) != SB_OK) {
			if (bad)
				*bad = i;
			p->n_nets = 0;
			return SB_ERR_INVAL;
		}
	}
	p->n_nets = n;
	return SB_OK;
}

void netaddr_format(const struct sockaddr *sa, char *out, size_t size)
{
	if (!size)
		return;
	out[0] = '\0';
	if (sa && sa->sa_family == AF_INET)
		inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, out,
		          (socklen_t)size);
	else if (sa && sa->sa_family == AF_INET6)
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr,
		          out, (socklen_t)size);
	else
		snprintf(out, size, "?");
}
