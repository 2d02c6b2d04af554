/*
 * netaddr.h - which network addresses an outbound request may reach.
 *
 * A fetch on the model's behalf (web_fetch, an MCP server's URL) must not
 * reach the gateway's own machine or network: loopback, private ranges,
 * link-local (cloud metadata at 169.254.169.254 and fd00:ec2::254),
 * carrier-grade NAT, multicast, reserved and unspecified addresses are
 * refused unless an explicit allow-list names them. IPv4 addresses inside
 * IPv6 (mapped ::ffff:a.b.c.d, NAT64 64:ff9b::/96, 6to4 2002::/16) are
 * judged by the IPv4 address they carry.
 *
 * The check is made on the socket address being connected to (after name
 * resolution), so a name that resolves to 127.0.0.1 is refused like the
 * literal. Pure functions; any thread.
 */
#ifndef SB_CORE_NETADDR_H
#define SB_CORE_NETADDR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define NETADDR_ALLOW_MAX 64

/* One allowed network: an address and a prefix length. */
struct netaddr_net {
	int family; /* AF_INET or AF_INET6 */
	uint8_t addr[16];
	int prefix; /* bits */
};

/* What an outbound request may reach besides public addresses. */
struct netaddr_policy {
	struct netaddr_net nets[NETADDR_ALLOW_MAX];
	size_t n_nets;
};

/* Parses "a.b.c.d", "a.b.c.d/n", "::1", "fd00::/8" into *out. SB_OK or
 * SB_ERR_INVAL (not an address, a prefix out of range, bits set past the
 * prefix). */
int netaddr_net_parse(const char *text, struct netaddr_net *out);

/* Builds a policy from a list of networks (config text). On SB_ERR_INVAL,
 * *bad is the index of the entry that did not parse. SB_ERR_TOOBIG past
 * NETADDR_ALLOW_MAX entries. */
int netaddr_policy_init(struct netaddr_policy *p, char *const *nets, size_t n, size_t *bad);

/* Why the address is not public, as a short phrase ("loopback", "private",
 * "link-local", ...), or NULL when it is a public unicast address. */
const char *netaddr_special(const struct sockaddr *sa);

/* Whether a request may connect to sa: a public address, or one inside a
 * network of p (p may be NULL: public only). *why (may be NULL) receives
 * netaddr_special's phrase when refused. Families other than IPv4 and IPv6
 * are refused. */
bool netaddr_allowed(const struct netaddr_policy *p, const struct sockaddr *sa, const char **why);

/* The address as text ("127.0.0.1", "::1") into out. */
void netaddr_format(const struct sockaddr *sa, char *out, size_t size);

#endif
