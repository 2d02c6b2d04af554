/*
 * mcp_internal.h - what the MCP client's files share (not for other modules).
 *
 * client.c speaks JSON-RPC and keeps the servers; a transport (stdio.c,
 * http.c) moves whole messages. A transport reports each message it reads
 * with mcp_server_message and its end (a crash, a stop) with
 * mcp_server_closed, exactly once per open, never from inside open or send.
 *
 * Loop thread only.
 */
#ifndef SB_AGENTS_MCP_INTERNAL_H
#define SB_AGENTS_MCP_INTERNAL_H

#include <jansson.h>

#include "agents/mcp/mcp.h"

struct mcp_server;

struct mcp_transport_ops {
	const char *name;
	/* Starts the transport (*tr its state). SB_OK: mcp_server_closed
	 * runs once it ends. Otherwise why says why and nothing runs. */
	int (*open)(struct mcp_server *s, const struct mcp_env *env, void **tr, char *why,
	            size_t why_size);
	/* Sends one message (id: the request's, or -1 for a notification or a
	 * response). SB_OK or an error (the transport is broken: it closes). */
	int (*send)(void *tr, const char *msg, size_t len, int64_t id);
	/* Ends it: mcp_server_closed runs later. */
	void (*close)(void *tr);
	/* The session is initialised (optional): a transport that has a
	 * channel for the server's own messages opens it now. */
	void (*ready)(void *tr);
};

extern const struct mcp_transport_ops mcp_stdio_ops, mcp_http_ops;

/* For the transports. */
uv_loop_t *mcp_server_loop(const struct mcp_server *s);
const struct mcp_server_config *mcp_server_cfg(const struct mcp_server *s);
const char *mcp_server_label(const struct mcp_server *s);    /* "agent/server", for logs */
const char *mcp_server_protocol(const struct mcp_server *s); /* "" until initialised */
void mcp_server_message(struct mcp_server *s, const char *text, size_t len);
/* A request got no answer but an error of the transport (an HTTP status). */
void mcp_server_request_failed(struct mcp_server *s, int64_t id, const char *why);
void mcp_server_closed(struct mcp_server *s, const char *why);

#endif
