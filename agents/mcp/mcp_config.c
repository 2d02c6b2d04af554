/*
 * mcp_config.c - the schema of an agent's `mcp` section (see mcp.h,
 * docs/mcp.md).
 */
#include <stdio.h>
#include <string.h>

#include "agents/mcp/mcp.h"
#include "gateway/core/err.h"
#include "gateway/core/url.h"

#define MCP_SERVER_NAME_MAX 24

static const char *const mcp_transports[] = {"auto", "stdio", "http", "sse", NULL};

/* [a-z0-9][a-z0-9_-]*, never "__" (it separates the server from the tool
 * in the model's names) nor a trailing '_'. */
static const char *mcp_check_name(const void *field)
{
	const char *n = *(char *const *)field;

	if (!n || !*n)
		return "must not be empty";
	if (!((n[0] >= 'a' && n[0] <= 'z') || (n[0] >= '0' && n[0] <= '9')))
		return "must start with a lower-case letter or a digit";
	for (const char *p = n; *p; p++) {
		if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_' ||
		      *p == '-'))
			return "may hold only a-z, 0-9, '_' and '-'";
		if (p[0] == '_' && p[1] == '_')
			return "must not hold \"__\" (it separates the server from the tool in "
			       "tool names)";
	}
	if (n[strlen(n) - 1] == '_')
		return "must not end with '_'";
	return NULL;
}

static bool mcp_env_name_ok(const char *e, size_t n)
{
	if (n == 0 || (e[0] >= '0' && e[0] <= '9'))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((e[i] >= 'A' && e[i] <= 'Z') || (e[i] >= 'a' && e[i] <= 'z') ||
		      (e[i] >= '0' && e[i] <= '9') || e[i] == '_'))
			return false;
	return true;
}

static bool mcp_header_ok(const char *h)
{
	const char *colon = strchr(h, ':');

	if (!colon || colon == h)
		return false;
	for (const char *p = h; p < colon; p++)
		if (*p <= 0x20 || *p >= 0x7f || strchr("()<>@,;\\\"/[]?={}", *p))
			return false;
	for (const char *p = colon + 1; *p; p++)
		if (*p == '\r' || *p == '\n' || *p == '\0')
			return false;
	return true;
}

static int mcp_server_check(void *obj, struct cfg_error_ctx *ctx)
{
	struct mcp_server_config *c = obj;
	enum mcp_transport tr;
	char key[48], why[256];
	struct url u;
	int errs = 0;

	if (c->command && c->url) {
		cfg_error_add(
		    ctx, "url",
		    "keep `command` for a server the gateway starts, or `url` for one it reaches",
		    "a server has either a command or a url, not both");
		return 1;
	}
	if (!c->command && !c->url) {
		cfg_error_add(
		    ctx, NULL,
		    "give `command` (and `args`) for a stdio server, or `url` for an HTTP one",
		    "the server has neither a command nor a url");
		return 1;
	}
	tr = mcp_server_transport(c);
	if (tr == MCP_TRANSPORT_STDIO && !c->command) {
		cfg_error_add(ctx, "transport",
		              "give `command`, or choose `http` or `sse` for a url",
		              "transport stdio needs a command");
		errs++;
	}
	if ((tr == MCP_TRANSPORT_HTTP || tr == MCP_TRANSPORT_SSE) && !c->url) {
		cfg_error_add(ctx, "transport", "give `url`, or choose `stdio` for a command",
		              "transport %s needs a url", mcp_transports[tr]);
		errs++;
	}
	if (c->url) {
		if (url_parse(c->url, &u, why, sizeof why) != SB_OK) {
			cfg_error_add(
			    ctx, "url",
			    "write an http:// or https:// URL, such as http://127.0.0.1:3001/mcp",
			    "%s", why);
			errs++;
		}
		if (c->n_args || c->n_env || c->n_read_only_paths) {
			cfg_error_add(ctx,
			              c->n_args  ? "args"
			              : c->n_env ? "env"
			                         : "read_only_paths",
			              "these belong to a stdio server (one with `command`)",
			              "a url server has no args, env or read_only_paths");
			errs++;
		}
	}
	if (c->command && c->n_headers) {
		cfg_error_add(ctx, "headers", "headers belong to a url server",
		              "a stdio server has no headers");
		errs++;
	}
	for (size_t i = 0; i < c->n_env; i++) {
		const char *eq = strchr(c->env[i], '=');

		if (!eq || !mcp_env_name_ok(c->env[i], (size_t)(eq - c->env[i]))) {
			snprintf(key, sizeof key, "env[%zu]", i);
			cfg_error_add(ctx, key, "write NAME=value, NAME of letters, digits and '_'",
			              "not an environment entry");
			errs++;
		}
	}
	for (size_t i = 0; i < c->n_headers; i++)
		if (!mcp_header_ok(c->headers[i])) {
			snprintf(key, sizeof key, "headers[%zu]", i);
			cfg_error_add(ctx, key, "write \"Name: value\" on one line",
			              "not an HTTP header");
			errs++;
		}
	for (size_t i = 0; i < c->n_read_only_paths; i++)
		if (c->read_only_paths[i][0] != '/' || strstr(c->read_only_paths[i], "/../") ||
		    strcmp(c->read_only_paths[i], "/") == 0) {
			snprintf(key, sizeof key, "read_only_paths[%zu]", i);
			cfg_error_add(
			    ctx, key, "write an absolute path other than / (such as /opt/mcp)",
			    "\"%s\" is not an absolute path below /", c->read_only_paths[i]);
			errs++;
		}
	return errs;
}

static const struct cfg_key mcp_server_keys[] = {
    {
        .name = "name",
        .type = CFG_STRING,
        .offset = offsetof(struct mcp_server_config, name),
        .min = 1,
        .max = MCP_SERVER_NAME_MAX,
        .flags = CFG_REQUIRED,
        .validate = mcp_check_name,
        .doc = "The server's name: its tools are `mcp__<name>__<tool>`. a-z, 0-9, `_` and `-`, at "
               "most 24 characters, no `__`.",
    },
    {
        .name = "command",
        .type = CFG_STRING,
        .offset = offsetof(struct mcp_server_config, command),
        .min = 1,
        .max = 4096,
        .doc = "A stdio server: the program to run (looked up in PATH inside the sandbox). It "
               "runs in the agent's sandbox with the agent's policy, in the workspace.",
    },
    {
        .name = "args",
        .type = CFG_STRING_LIST,
        .offset = offsetof(struct mcp_server_config, args),
        .count_offset = offsetof(struct mcp_server_config, n_args),
        .min = 0,
        .max = 256,
        .doc = "The program's arguments.",
    },
    {
        .name = "env",
        .type = CFG_STRING_LIST,
        .offset = offsetof(struct mcp_server_config, env),
        .count_offset = offsetof(struct mcp_server_config, n_env),
        .min = 0,
        .max = 64,
        .flags = CFG_SECRET,
        .doc = "`NAME=value` entries added to the program's environment (which otherwise holds "
               "only PATH, HOME (the workspace) and LANG).",
    },
    {
        .name = "read_only_paths",
        .type = CFG_STRING_LIST,
        .offset = offsetof(struct mcp_server_config, read_only_paths),
        .count_offset = offsetof(struct mcp_server_config, n_read_only_paths),
        .min = 0,
        .max = 16,
        .doc = "Host paths the sandboxed program may read besides the system directories and "
               "the workspace, such as the directory its code is installed in. Absolute.",
    },
    {
        .name = "network",
        .type = CFG_BOOL,
        .offset = offsetof(struct mcp_server_config, network),
        .def = "false",
        .doc = "The sandboxed program keeps the network (as `sandbox_network` does for "
               "commands); without it, it can open no socket but Unix ones.",
    },
    {
        .name = "url",
        .type = CFG_STRING,
        .offset = offsetof(struct mcp_server_config, url),
        .min = 1,
        .max = 2048,
        .doc = "An HTTP server: its endpoint (streamable HTTP), or its event stream for the "
               "older HTTP+SSE transport (a URL ending in `/sse`, or `transport: sse`).",
    },
    {
        .name = "headers",
        .type = CFG_STRING_LIST,
        .offset = offsetof(struct mcp_server_config, headers),
        .count_offset = offsetof(struct mcp_server_config, n_headers),
        .min = 0,
        .max = 32,
        .flags = CFG_SECRET,
        .doc = "`Name: value` headers sent with every request (`Authorization: Bearer "
               "${MCP_TOKEN}`).",
    },
    {
        .name = "transport",
        .type = CFG_ENUM,
        .offset = offsetof(struct mcp_server_config, transport),
        .choices = mcp_transports,
        .def = "auto",
        .doc = "`stdio`, `http` (streamable HTTP), `sse` (the older HTTP+SSE), or `auto`: "
               "stdio with a command, sse for a url ending in `/sse`, else http.",
    },
    {
        .name = "startup_timeout",
        .type = CFG_DURATION,
        .offset = offsetof(struct mcp_server_config, startup_timeout_ms),
        .min = 100,
        .max = 600000,
        .def = "30s",
        .doc = "How long a start may take: `initialize` and every page of `tools/list` "
               "together (a list read again later: each page).",
    },
    {
        .name = "call_timeout",
        .type = CFG_DURATION,
        .offset = offsetof(struct mcp_server_config, call_timeout_ms),
        .min = 0,
        .max = 86400000,
        .def = "0",
        .doc = "How long one tool call may take, never more than the agent's `tool_timeout`; "
               "`0`: the `tool_timeout`. Past it the call is cancelled "
               "(`notifications/cancelled`) and the model is told.",
    },
    {
        .name = "idle_timeout",
        .type = CFG_DURATION,
        .offset = offsetof(struct mcp_server_config, idle_timeout_ms),
        .min = 0,
        .max = 7LL * 86400000,
        .def = "10m",
        .doc = "A server with no call for this long is stopped (it starts again at the next "
               "call); `0`: it runs until the gateway stops.",
    },
    {
        .name = "max_message",
        .type = CFG_SIZE,
        .offset = offsetof(struct mcp_server_config, max_message),
        .min = 4096,
        .max = 256LL << 20,
        .def = "8MiB",
        .doc = "The largest message the server may send; a larger one ends the connection "
               "(the call in flight fails, saying so).",
    },
};

static const struct cfg_section mcp_server_section = {
    .name = "mcp server",
    .size = sizeof(struct mcp_server_config),
    .keys = mcp_server_keys,
    .nkeys = sizeof mcp_server_keys / sizeof mcp_server_keys[0],
    .check = mcp_server_check,
    .doc = "One MCP server of the agent (docs/mcp.md).",
};

static int mcp_config_check(void *obj, struct cfg_error_ctx *ctx)
{
	struct mcp_config *m = obj;
	char key[48];
	int errs = 0;

	for (size_t i = 0; i < m->n_servers; i++)
		for (size_t k = 0; k < i; k++)
			if (m->servers[i].name && m->servers[k].name &&
			    strcmp(m->servers[i].name, m->servers[k].name) == 0) {
				snprintf(key, sizeof key, "servers[%zu].name", i);
				cfg_error_add(ctx, key, "give each server of an agent its own name",
				              "\"%s\" names servers[%zu] already",
				              m->servers[i].name, k);
				errs++;
			}
	return errs;
}

static const struct cfg_key mcp_config_keys[] = {
    {
        .name = "servers",
        .type = CFG_LIST,
        .offset = offsetof(struct mcp_config, servers),
        .count_offset = offsetof(struct mcp_config, n_servers),
        .min = 0,
        .max = 32,
        .section = &mcp_server_section,
        .doc = "The MCP servers whose tools the agent may use, each with its `name` "
               "(docs/mcp.md).",
    },
};

const struct cfg_section mcp_config_section = {
    .name = "mcp",
    .size = sizeof(struct mcp_config),
    .keys = mcp_config_keys,
    .nkeys = sizeof mcp_config_keys / sizeof mcp_config_keys[0],
    .check = mcp_config_check,
    .doc = "The agent's MCP servers (docs/mcp.md).",
};
