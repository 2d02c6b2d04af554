/*
 * origin.h - which browser origins may use the gateway: the page of the web
 * UI, its sign-in, and the control plane's WebSocket.
 *
 * An origin is "scheme://host[:port]" as a browser sends it in the Origin
 * header (lower-case scheme and host; the port left out when it is the
 * scheme's default). gateway.control.allowed_origins lists the allowed ones;
 * when it is empty the gateway's own address is allowed:
 * http://127.0.0.1:PORT, http://localhost:PORT, http://[::1]:PORT, and
 * http://BIND:PORT when gateway.bind names one address (not 0.0.0.0 or ::).
 *
 * port is the port the gateway listens on (gateway.port, or the --port that
 * overrides it: server_port()).
 *
 * Any thread (pure functions of the configuration snapshot).
 */
#ifndef SB_GATEWAY_HTTP_ORIGIN_H
#define SB_GATEWAY_HTTP_ORIGIN_H

#include <stdbool.h>
#include <stddef.h>

struct config;

/* Whether a page of origin (an Origin header's value) may use the gateway.
 * NULL, "" and "null" are never allowed. */
bool origin_allowed(const struct config *cfg, int port, const char *origin);

/* Whether an Origin header's value is one a browser computes ("null" or
 * scheme://host...); other clients may send anything (lws clients send the
 * bare host name), and only browsers need the check. */
bool origin_from_browser(const char *origin);

/* Whether a request with this Host header ("127.0.0.1:8790") is one for an
 * allowed origin, over http or https: the page is served only there, so a
 * name that was pointed at the gateway (DNS rebinding) gets nothing. */
bool origin_host_allowed(const struct config *cfg, int port, const char *host);

/* The origin the CLI's sign-in link uses: the first allowed origin, else
 * http://127.0.0.1:PORT (or http://BIND:PORT for a specific bind). out gets
 * at most size bytes. */
void origin_default(const struct config *cfg, int port, char *out, size_t size);

#endif
