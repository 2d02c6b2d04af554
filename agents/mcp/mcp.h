/*
 * mcp.h - the agent's MCP client: the tools of Model Context Protocol servers
 * (docs/mcp.md).
 *
 * An agent's `mcp.servers` name the servers it may use: a program spoken to
 * over its stdin and stdout (started inside the agent's sandbox, with its
 * policy), or an HTTP endpoint (streamable HTTP, or the older HTTP+SSE
 * transport). Each server's tools join the agent's tool list as
 * `mcp__<server>__<tool>`, sorted with the built-in ones.
 *
 * The hub keeps every agent's servers for the life of the gateway: a server
 * starts when a run first needs its tool list (never at gateway start),
 * stops after `idle_timeout` without a call (its list is kept, so the next
 * run's tool list is the same bytes and the server starts again only when a
 * tool of it is called), and after a crash starts again on the next use,
 * no sooner than a back-off that doubles with each crash in a row.
 *
 * What a server says is untrusted: its names are sanitised and prefixed, its
 * descriptions and schemas capped, its annotations ignored for permissions,
 * its results labelled untrusted and put through the output budgets; a
 * message over `max_message` bytes, a list past the limits, or a call past
 * its time limit end with a clear error.
 *
 * Loop thread only.
 */
#ifndef SB_AGENTS_MCP_H
#define SB_AGENTS_MCP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "agents/safety/sandbox.h"
#include "agents/tool.h"
#include "gateway/core/cfg.h"

#define MCP_PREFIX "mcp__"
#define MCP_NAME_MAX 64          /* a tool name's length, as providers allow */
#define MCP_AGENT_TOOLS_MAX 128  /* one agent's MCP tools, all servers together */
#define MCP_DESCRIPTION_MAX 2000 /* characters of a tool's description kept */
#define MCP_SCHEMA_MAX 65536     /* bytes of a tool's input schema */
#define MCP_LIST_PAGES_MAX 32    /* tools/list pages read */
#define MCP_PENDING_MAX 64       /* requests in flight to one server */

enum mcp_transport {
	MCP_TRANSPORT_AUTO = 0,
	MCP_TRANSPORT_STDIO,
	MCP_TRANSPORT_HTTP,
	MCP_TRANSPORT_SSE
};

/* One entry of an agent's `mcp.servers` (config). */
struct mcp_server_config {
	char *name; /* [a-z0-9][a-z0-9-]{0,23} with single underscores */
	char *command;
	char **args;
	size_t n_args;
	char **env; /* "NAME=value" */
	size_t n_env;
	char **read_only_paths; /* host paths the sandboxed server may read */
	size_t n_read_only_paths;
	char *url;
	char **headers; /* "Name: value" */
	size_t n_headers;
	int transport; /* enum mcp_transport; auto: stdio with command, else by url */
	int64_t startup_timeout_ms;
	int64_t call_timeout_ms; /* 0: the agent's tool_timeout */
	int64_t idle_timeout_ms; /* 0: never stopped for idleness */
	int64_t max_message;     /* bytes of one message from the server */
	bool network;            /* a stdio server keeps the network in its sandbox */
};

/* The agent's `mcp` section. */
struct mcp_config {
	struct mcp_server_config *servers;
	size_t n_servers;
};

extern const struct cfg_section mcp_config_section;

/* The transport a server entry uses (auto resolved). */
enum mcp_transport mcp_server_transport(const struct mcp_server_config *c);

struct mcp_hub;
struct mcp_catalog;
struct mcp_wait;

struct mcp_hub_options {
	/* An agent's tool list changed (a server said so, or started with a
	 * list other than the one kept): old_key is the catalogue's
	 * fingerprint that no longer holds, why says what happened. May be
	 * NULL. */
	void (*changed)(void *ud, const char *agent_id, uint64_t old_key, const char *why);
	void *ud;
};

/* What starting a server needs, from the run that first needs it. Borrowed
 * for the call only (the hub copies what it keeps). */
struct mcp_env {
	const char *workspace;                /* the stdio server's directory */
	const struct sandbox_policy *sandbox; /* the agent's policy; NULL: none */
	const struct host *host;              /* its http_client, for HTTP servers */
	int64_t tool_timeout_ms;              /* calls without their own limit */
};

/* *out: a hub with no servers. SB_OK, SB_ERR_NOMEM. */
int mcp_hub_new(struct mcp_hub **out, uv_loop_t *loop, const struct mcp_hub_options *opt);

/* Stops every server (as mcp_hub_close does) and keeps the hub; returns how
 * many are still closing (stdio: not yet reaped; HTTP: their DELETE in
 * flight). The gateway's shutdown calls it once no run is left and waits,
 * briefly, for 0. */
size_t mcp_hub_stop(struct mcp_hub *h);

/* Stops every server (processes killed, their process groups with them,
 * requests in flight failed) and frees the hub once its handles closed: the
 * loop must run for that. NULL is a no-op. */
void mcp_hub_close(struct mcp_hub *h);

/* The agent's MCP tools, for a run: cb gets a catalogue (a new reference;
 * NULL only when out of memory) once every server of cfg has its list, has
 * failed to start (its tools are missing then, and the log says why), or
 * keeps a list from before. Servers whose entry changed since are stopped
 * and replaced. cb runs later, never from inside this call. SB_OK, or
 * SB_ERR_NOMEM (cb never runs). *out (may be NULL) cancels the wait. */
typedef void (*mcp_catalog_cb)(void *ud, struct mcp_catalog *cat);
int mcp_hub_catalog(struct mcp_hub *h, const char *agent_id, const struct mcp_config *cfg,
                    const struct mcp_env *env, mcp_catalog_cb cb, void *ud, struct mcp_wait **out);

/* The agent has no MCP server any more (its configuration dropped them):
 * its servers stop. Nothing when the hub has none of it. */
void mcp_hub_forget(struct mcp_hub *h, const char *agent_id);

/* cb never runs. Only before it ran. */
void mcp_wait_cancel(struct mcp_wait *w);

/* The catalogue's tools, sorted by name; *key its fingerprint (turn.h's
 * extra_key). Valid while the reference is held. */
const struct tool_def *const *mcp_catalog_tools(const struct mcp_catalog *c, size_t *n,
                                                uint64_t *key);
void mcp_catalog_unref(struct mcp_catalog *c); /* NULL is a no-op */

/* ---- what the pieces share (tests use them too) ---- */

/* The model's name of a server's tool: MCP_PREFIX server "__" tool, every
 * byte outside [A-Za-z0-9_-] made '_', cut to MCP_NAME_MAX with a hash of
 * the whole name so that two long names stay apart. out has MCP_NAME_MAX+1
 * bytes. */
void mcp_tool_name(const char *server, const char *tool, char *out);

/* The text the model gets for a tools/call result (borrowed): text parts as
 * they are, a line for each image, audio, resource or link, the structured
 * content when there is nothing else. *is_error from isError. New string;
 * NULL when out of memory. */
char *mcp_result_text(const json_t *result, bool *is_error);

#endif
