/*
 * config.c - the gateway's schema tables and the snapshot built from them.
 *
 * The tables below are the single source of truth for every key: cfg_apply
 * reads them, docs/configuration.md is generated from them, and
 * config_restart_changes compares snapshots with them.
 */
#include "gateway/config/config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <sys/resource.h>

#include "gateway/core/buf.h"
#include "gateway/core/err.h"

#define CONFIG_FILE_MAX (1u << 20) /* the YAML file itself */
#define CONFIG_PATH_MAX 4096
#define CONFIG_ENUM_END NULL

/* ---- gateway ---- */

/* 127.0.0.0/8, ::1 (also as [::1] and ::ffff:127.x.y.z) and localhost. */
size_t config_max_runs(const struct config *c)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	struct rlimit rl;
	size_t n;

	if (c->gateway.max_concurrent_runs > 0)
		return (size_t)c->gateway.max_concurrent_runs;
	/* A run spends nearly all of its time waiting for the model: the
	 * cores bound the CPU, not the runs. */
	n = (size_t)(cpus > 0 ? cpus : 1) * 16;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
		size_t room = rl.rlim_cur > 256 + 8 * 4 ? (size_t)(rl.rlim_cur - 256) / 8 : 4;

		if (n > room)
			n = room;
	}
	return n < 4 ? 4 : n;
}

bool config_is_loopback(const char *host)
{
	char tmp[INET6_ADDRSTRLEN + 2];
	struct in_addr a4;
	struct in6_addr a6;
	size_t n;

	if (!host)
		return true;
	if (strcasecmp(host, "localhost") == 0)
		return true;
	if (inet_pton(AF_INET, host, &a4) == 1)
		return (ntohl(a4.s_addr) >> 24) == 127;
	n = strlen(host);
	if (n >= 2 && host[0] == '[' && host[n - 1] == ']' && n - 2 < sizeof tmp) {
		memcpy(tmp, host + 1, n - 2);
		tmp[n - 2] = '\0';
		host = tmp;
	}
	if (inet_pton(AF_INET6, host, &a6) == 1)
		return IN6_IS_ADDR_LOOPBACK(&a6) ||
		       (IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127);
	return false;
}

static int config_gateway_check(void *obj, struct cfg_error_ctx *ctx)
{
	const struct config_gateway *g = obj;

	if (config_is_loopback(g->bind) || (g->auth_token && *g->auth_token))
		return 0;
	cfg_error_add(ctx, "bind",
	              "set gateway.auth_token (e.g. auth_token: ${file:secrets/gateway-token}), "
	              "or bind 127.0.0.1",
	              "binding the non-loopback address \"%s\" requires gateway.auth_token",
	              g->bind);
	return 1;
}

/* ---- gateway.control ---- */

static int config_control_check(void *obj, struct cfg_error_ctx *ctx)
{
	const struct config_control *c = obj;
	int added = 0;
	char key[48];

	for (size_t i = 0; i < c->n_paths; i++) {
		const char *p = c->paths[i];

		if (p[0] == '/' && !strpbrk(p, "?# \t"))
			continue;
		snprintf(key, sizeof key, "paths[%zu]", i);
		cfg_error_add(ctx, key, "write a path such as /ws", "\"%s\" is not a path", p);
		added++;
	}
	for (size_t i = 0; i < c->n_allowed_origins; i++) {
		const char *o = c->allowed_origins[i];
		const char *host = strncmp(o, "http://", 7) == 0    ? o + 7
		                   : strncmp(o, "https://", 8) == 0 ? o + 8
		                                                    : NULL;

		if (host && *host && !strpbrk(host, "/?# \t*"))
			continue;
		snprintf(key, sizeof key, "allowed_origins[%zu]", i);
		cfg_error_add(ctx, key, "write scheme://host[:port], e.g. https://gw.example.com",
		              "\"%s\" is not an origin (no path, no wildcard)", o);
		added++;
	}
	if (c->max_buffered < c->max_payload) {
		cfg_error_add(ctx, "max_buffered", "raise it to at least max_payload",
		              "%lld is less than gateway.control.max_payload (%lld)",
		              (long long)c->max_buffered, (long long)c->max_payload);
		added++;
	}
	return added;
}

static const struct cfg_key config_control_keys[] = {
    {
        .name = "enabled",
        .type = CFG_BOOL,
        .offset = offsetof(struct config_control, enabled),
        .def = "true",
        .flags = CFG_RESTART,
        .doc = "Serve the WebSocket control plane (docs/protocol.md) on the gateway port; "
               "the CLI's `status`, `chat`, `send`, `sessions` and `devices` use it.",
    },
    {
        .name = "paths",
        .type = CFG_STRING_LIST,
        .offset = offsetof(struct config_control, paths),
        .count_offset = offsetof(struct config_control, n_paths),
        .min = 0,
        .max = 4,
        .flags = CFG_RESTART,
        .doc = "Paths that accept the WebSocket upgrade. Unset: `/` and `/ws`.",
    },
    {
        .name = "max_payload",
        .type = CFG_SIZE,
        .offset = offsetof(struct config_control, max_payload),
        .min = 65536,
        .max = 64LL << 20,
        .def = "1MiB",
        .doc = "Largest frame a connected client may send (before `connect` the cap is "
               "64 KiB); a larger one closes the connection (1009).",
    },
    {
        .name = "max_buffered",
        .type = CFG_SIZE,
        .offset = offsetof(struct config_control, max_buffered),
        .min = 65536,
        .max = 1LL << 30,
        .def = "8MiB",
        .flags = CFG_RESTART,
        .doc = "Bytes waiting to be sent to one client; a client that reads so slowly that "
               "more pile up is disconnected (1008).",
    },
    {
        .name = "tick_interval",
        .type = CFG_DURATION,
        .offset = offsetof(struct config_control, tick_interval_ms),
        .min = 1000,
        .max = 600000,
        .def = "15s",
        .flags = CFG_RESTART,
        .doc = "How often connected clients get a `tick` event (clients treat two missed "
               "ticks as a dead connection).",
    },
    {
        .name = "handshake_timeout",
        .type = CFG_DURATION,
        .offset = offsetof(struct config_control, handshake_timeout_ms),
        .min = 1000,
        .max = 600000,
        .def = "10s",
        .doc = "How long a new connection has to complete `connect`.",
    },
    {
        .name = "auth_failures",
        .type = CFG_INT,
        .offset = offsetof(struct config_control, auth_failures),
        .min = 1,
        .max = 100000,
        .def = "20",
        .doc = "Failed `connect` attempts (bad token or signature) from one address within "
               "`auth_window` that lock the address out.",
    },
    {
        .name = "auth_window",
        .type = CFG_DURATION,
        .offset = offsetof(struct config_control, auth_window_ms),
        .min = 1000,
        .max = 86400000,
        .def = "60s",
        .doc = "The window over which failed attempts are counted.",
    },
    {
        .name = "lockout",
        .type = CFG_DURATION,
        .offset = offsetof(struct config_control, lockout_ms),
        .min = 1000,
        .max = 86400000,
        .def = "60s",
        .doc = "How long a locked-out address is refused (`RATE_LIMITED`).",
    },
    {
        .name = "allowed_origins",
        .type = CFG_STRING_LIST,
        .offset = offsetof(struct config_control, allowed_origins),
        .count_offset = offsetof(struct config_control, n_allowed_origins),
        .min = 0,
        .max = 16,
        .doc = "Browser origins (`scheme://host[:port]`, e.g. `https://gw.example.com` behind "
               "a TLS proxy) whose pages may open the control plane and sign in to the web "
               "UI; a WebSocket upgrade that sends another `Origin` is refused. Unset: the "
               "gateway's own address, `http://127.0.0.1:PORT`, `http://localhost:PORT` and "
               "`http://[::1]:PORT` (and `http://BIND:PORT` for a specific `bind`). Clients "
               "that send no `Origin` (the CLI, scripts) are not affected.",
    },
};

static const struct cfg_section config_control_section = {
    .name = "control",
    .size = sizeof(struct config_control),
    .keys = config_control_keys,
    .nkeys = sizeof config_control_keys / sizeof config_control_keys[0],
    .check = config_control_check,
    .doc = "The WebSocket control plane on the gateway port.",
};

static const struct cfg_key config_ui_keys[] = {
    {
        .name = "enabled",
        .type = CFG_BOOL,
        .offset = offsetof(struct config_ui, enabled),
        .def = "true",
        .flags = CFG_RESTART,
        .doc = "Serve the web UI (control pages and web chat, docs/ui.md) at `/` on the "
               "gateway port. It needs the control plane.",
    },
    {
        .name = "session_ttl",
        .type = CFG_DURATION,
        .offset = offsetof(struct config_ui, session_ttl_ms),
        .min = 10000,
        .max = 30LL * 86400000,
        .def = "12h",
        .doc = "How long a browser stays signed in (an HttpOnly cookie; sign-ins are kept in "
               "memory, so a restart signs every browser out).",
    },
    {
        .name = "code_ttl",
        .type = CFG_DURATION,
        .offset = offsetof(struct config_ui, code_ttl_ms),
        .min = 10000,
        .max = 3600000,
        .def = "2m",
        .doc = "How long the one-time sign-in code of `switchboard dashboard` is valid (it "
               "works once).",
    },
};

static const struct cfg_section config_ui_section = {
    .name = "ui",
    .size = sizeof(struct config_ui),
    .keys = config_ui_keys,
    .nkeys = sizeof config_ui_keys / sizeof config_ui_keys[0],
    .doc = "The web UI on the gateway port.",
};

static const struct cfg_key config_gateway_keys[] = {
    {
        .name = "bind",
        .type = CFG_STRING,
        .offset = offsetof(struct config_gateway, bind),
        .min = 1,
        .max = 255,
        .def = "127.0.0.1",
        .flags = CFG_RESTART,
        .doc = "Address the HTTP and WebSocket server listens on. Any address other than "
               "loopback (127.0.0.0/8, ::1, localhost) requires `gateway.auth_token`.",
    },
    {
        .name = "port",
        .type = CFG_INT,
        .offset = offsetof(struct config_gateway, port),
        .min = 1,
        .max = 65535,
        .def = "8790",
        .flags = CFG_RESTART,
        .doc = "TCP port of the HTTP and WebSocket server.",
    },
    {
        .name = "drain_timeout",
        .type = CFG_DURATION,
        .offset = offsetof(struct config_gateway, drain_timeout_ms),
        .min = 0,
        .max = 3600000,
        .def = "10s",
        .doc = "On SIGTERM, how long in-flight work may run before the gateway exits.",
    },
    {
        .name = "max_body",
        .type = CFG_SIZE,
        .offset = offsetof(struct config_gateway, max_body_bytes),
        .min = 1024,
        .max = 1LL << 30,
        .def = "1MiB",
        .doc = "Largest HTTP request body accepted (webhooks, API calls); larger "
               "requests get 413.",
    },
    {
        .name = "max_connections",
        .type = CFG_INT,
        .offset = offsetof(struct config_gateway, max_connections),
        .min = 1,
        .max = 1000000,
        .def = "1024",
        .doc = "Most concurrent HTTP and WebSocket connections. When they are all open, "
               "a new one closes the oldest that is not doing anything yet (no request "
               "whole, or a WebSocket not signed in) to make room; only when none is idle "
               "is it refused.",
    },
    {
        .name = "max_connections_per_address",
        .type = CFG_INT,
        .offset = offsetof(struct config_gateway, max_connections_per_address),
        .min = 0,
        .max = 1000000,
        .def = "64",
        .flags = CFG_RESTART,
        .doc = "Most concurrent connections from one non-loopback address (0: no cap). "
               "Over it, a new connection closes that address's oldest idle one, or is "
               "refused. Loopback (the operator's CLI, a local reverse proxy) is bounded "
               "by `max_connections` only.",
    },
    {
        .name = "header_timeout",
        .type = CFG_DURATION,
        .offset = offsetof(struct config_gateway, header_timeout_ms),
        .min = 1000,
        .max = 600000,
        .def = "10s",
        .flags = CFG_RESTART,
        .doc = "How long a connection may take to send a request's headers (from its "
               "opening, or the end of the previous request) before it is closed.",
    },
    {
        .name = "body_timeout",
        .type = CFG_DURATION,
        .offset = offsetof(struct config_gateway, body_timeout_ms),
        .min = 1000,
        .max = 3600000,
        .def = "30s",
        .flags = CFG_RESTART,
        .doc = "How long a request's body may take to arrive, from the end of its headers, "
               "before the connection is closed.",
    },
    {
        .name = "max_concurrent_runs",
        .type = CFG_INT,
        .offset = offsetof(struct config_gateway, max_concurrent_runs),
        .min = 0,
        .max = 10000,
        .def = "0",
        .doc = "Most agent runs at once over all sessions (each session runs one at a "
               "time); more wait their turn in order. 0: sized from the machine, 16 per "
               "CPU core (a run mostly waits for its model), fewer when the open-file "
               "limit leaves no room for 8 descriptors a run; the gateway's `ready` log "
               "line shows the number.",
        .flags = CFG_RESTART,
    },
    {
        .name = "auth_token",
        .type = CFG_STRING,
        .offset = offsetof(struct config_gateway, auth_token),
        .min = 16,
        .max = 4096,
        .flags = CFG_SECRET,
        .doc = "Bearer token for the control plane and the HTTP API. Required when "
               "`bind` is not loopback. When set, it is the only gateway token: the "
               "home's `gateway.token` is no longer accepted. Keep it out of the file: "
               "`${file:secrets/gateway-token}` or `${SWITCHBOARD_TOKEN}`.",
        .hint = "generate one with: openssl rand -hex 32",
    },
    {
        .name = "watch_config",
        .type = CFG_BOOL,
        .offset = offsetof(struct config_gateway, watch_config),
        .def = "true",
        .doc = "Reload the configuration when this file changes (SIGHUP always reloads).",
    },
    {
        .name = "control",
        .type = CFG_SECTION,
        .offset = offsetof(struct config_gateway, control),
        .section = &config_control_section,
        .doc = "The WebSocket control plane (docs/protocol.md).",
    },
    {
        .name = "ui",
        .type = CFG_SECTION,
        .offset = offsetof(struct config_gateway, ui),
        .section = &config_ui_section,
        .doc = "The web UI (docs/ui.md).",
    },
};

static const struct cfg_section config_gateway_section = {
    .name = "gateway",
    .size = sizeof(struct config_gateway),
    .keys = config_gateway_keys,
    .nkeys = sizeof config_gateway_keys / sizeof config_gateway_keys[0],
    .check = config_gateway_check,
    .doc = "The daemon's listener and its limits.",
};

/* ---- log ---- */

static const char *const config_log_levels[] = {"debug", "info", "warn", "error", CONFIG_ENUM_END};
static const char *const config_log_formats[] = {"logfmt", "json", CONFIG_ENUM_END};

static const struct cfg_key config_log_keys[] = {
    {
        .name = "level",
        .type = CFG_ENUM,
        .offset = offsetof(struct config_log, level),
        .def = "info",
        .choices = config_log_levels,
        .doc = "Least severe level written.",
    },
    {
        .name = "format",
        .type = CFG_ENUM,
        .offset = offsetof(struct config_log, format),
        .def = "logfmt",
        .choices = config_log_formats,
        .doc = "One event per line, as logfmt (`key=value`) or JSON.",
    },
    {
        .name = "file_max",
        .type = CFG_SIZE,
        .offset = offsetof(struct config_log, file_max),
        .min = 0,
        .max = 1LL << 40,
        .def = "10MiB",
        .doc = "The gateway also writes every line to `logs/gateway.log` in the home; "
               "when a line would take it past this size it is renamed `gateway.log.1` "
               "and a new one started. 0 writes no file; otherwise at least 4KiB.",
    },
    {
        .name = "file_keep",
        .type = CFG_INT,
        .offset = offsetof(struct config_log, file_keep),
        .min = 0,
        .max = 100,
        .def = "5",
        .doc = "Rotated files kept (`gateway.log.1` newest ... `gateway.log.N` oldest); "
               "the oldest is removed at each rotation.",
    },
};

#define CONFIG_LOG_FILE_MIN 4096

static int config_log_check(void *obj, struct cfg_error_ctx *ctx)
{
	const struct config_log *l = obj;

	if (l->file_max == 0 || l->file_max >= CONFIG_LOG_FILE_MIN)
		return 0;
	cfg_error_add(ctx, "file_max", "use 0 for no log file, or at least 4KiB",
	              "%lld bytes is too small for a log file", (long long)l->file_max);
	return 1;
}

static const struct cfg_section config_log_section = {
    .name = "log",
    .size = sizeof(struct config_log),
    .keys = config_log_keys,
    .nkeys = sizeof config_log_keys / sizeof config_log_keys[0],
    .check = config_log_check,
    .doc = "Structured logs on stderr and in `logs/gateway.log` in the home, rotated by "
           "size. Secret values are always redacted.",
};

/* ---- store ---- */

static const char *const config_store_backends[] = {"sqlite", CONFIG_ENUM_END};

static const struct cfg_key config_store_keys[] = {
    {
        .name = "backend",
        .type = CFG_ENUM,
        .offset = offsetof(struct config_store, backend),
        .def = "sqlite",
        .choices = config_store_backends,
        .flags = CFG_RESTART,
        .doc = "Where inbox, outbox, sessions and cursors are kept.",
    },
    {
        .name = "path",
        .type = CFG_STRING,
        .offset = offsetof(struct config_store, path),
        .min = 1,
        .max = CONFIG_PATH_MAX,
        .def = "state.db",
        .flags = CFG_RESTART,
        .doc = "The SQLite database file; a relative path is resolved against the home "
               "directory.",
    },
    {
        .name = "busy_timeout",
        .type = CFG_DURATION,
        .offset = offsetof(struct config_store, busy_timeout_ms),
        .min = 0,
        .max = 600000,
        .def = "5s",
        .doc = "How long SQLite waits for a lock held by another process.",
    },
    {
        .name = "batch_max",
        .type = CFG_INT,
        .offset = offsetof(struct config_store, batch_max),
        .min = 1,
        .max = 100000,
        .def = "256",
        .doc = "Most operations in one group commit.",
    },
    {
        .name = "queue_max",
        .type = CFG_INT,
        .offset = offsetof(struct config_store, queue_max),
        .min = 1,
        .max = 10000000,
        .def = "10000",
        .doc = "Most operations waiting for the store writer; beyond it, callers are told "
               "to try again later.",
    },
};

static const struct cfg_section config_store_section = {
    .name = "store",
    .size = sizeof(struct config_store),
    .keys = config_store_keys,
    .nkeys = sizeof config_store_keys / sizeof config_store_keys[0],
    .doc = "The durable store.",
};

/* ---- http_client ---- */

static int config_http_client_check(void *obj, struct cfg_error_ctx *ctx)
{
	const struct config_http_client *h = obj;

	if (h->max_host_connections <= h->max_connections)
		return 0;
	cfg_error_add(ctx, "max_host_connections", "raise http_client.max_connections",
	              "%lld is more than http_client.max_connections (%lld)",
	              (long long)h->max_host_connections, (long long)h->max_connections);
	return 1;
}

static const struct cfg_key config_http_client_keys[] = {
    {
        .name = "timeout",
        .type = CFG_DURATION,
        .offset = offsetof(struct config_http_client, timeout_ms),
        .min = 100,
        .max = 3600000,
        .def = "30s",
        .doc = "Default limit for a whole outbound request, where the caller sets none.",
    },
    {
        .name = "connect_timeout",
        .type = CFG_DURATION,
        .offset = offsetof(struct config_http_client, connect_timeout_ms),
        .min = 100,
        .max = 600000,
        .def = "10s",
        .doc = "Limit for establishing a connection (DNS, TCP and TLS).",
    },
    {
        .name = "max_connections",
        .type = CFG_INT,
        .offset = offsetof(struct config_http_client, max_connections),
        .min = 1,
        .max = 10000,
        .def = "32",
        .doc = "Most open outbound connections, and the size of the connection cache.",
    },
    {
        .name = "max_host_connections",
        .type = CFG_INT,
        .offset = offsetof(struct config_http_client, max_host_connections),
        .min = 1,
        .max = 10000,
        .def = "8",
        .doc = "Most open connections to one host; at most `max_connections`.",
    },
    {
        .name = "max_response",
        .type = CFG_SIZE,
        .offset = offsetof(struct config_http_client, max_response_bytes),
        .min = 1024,
        .max = 1LL << 30,
        .def = "8MiB",
        .doc = "Default cap on a response body, where the caller sets none.",
    },
    {
        .name = "ca_file",
        .type = CFG_STRING,
        .offset = offsetof(struct config_http_client, ca_file),
        .min = 1,
        .max = CONFIG_PATH_MAX,
        .doc = "PEM bundle of trusted CAs. Unset: the system store.",
    },
};

static const struct cfg_section config_http_client_section = {
    .name = "http_client",
    .size = sizeof(struct config_http_client),
    .keys = config_http_client_keys,
    .nkeys = sizeof config_http_client_keys / sizeof config_http_client_keys[0],
    .check = config_http_client_check,
    .doc = "Outbound HTTP (model providers, channel APIs).",
};

/* ---- openai_api ---- */

/* "/v1", "/api/openai/v1": a rooted path of plain segments, no trailing "/". */
static const char *config_openai_check_prefix(const void *field)
{
	const char *p = *(const char *const *)field;

	if (!p || p[0] != '/' || !p[1] || p[strlen(p) - 1] == '/' || strstr(p, "//"))
		return "expected a path such as /v1 (a leading /, no trailing /)";
	for (const char *c = p; *c; c++)
		if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
		      (*c >= '0' && *c <= '9') || strchr("/-_.", *c)))
			return "expected letters, digits, '-', '_', '.' and '/' only";
	return NULL;
}

static const struct cfg_key config_openai_api_keys[] = {
    {
        .name = "enabled",
        .type = CFG_BOOL,
        .offset = offsetof(struct config_openai_api, enabled),
        .def = "false",
        .doc = "Serve `POST <path_prefix>/chat/completions` and `GET <path_prefix>/models` "
               "(docs/openai-api.md). Off: those paths answer 404.",
    },
    {
        .name = "path_prefix",
        .type = CFG_STRING,
        .offset = offsetof(struct config_openai_api, path_prefix),
        .min = 2,
        .max = 64,
        .def = "/v1",
        .flags = CFG_RESTART,
        .validate = config_openai_check_prefix,
        .doc = "Where the endpoint lives; clients use `http://HOST:PORT<path_prefix>` as "
               "their base URL.",
    },
    {
        .name = "sync_timeout",
        .type = CFG_DURATION,
        .offset = offsetof(struct config_openai_api, sync_timeout_ms),
        .min = 1000,
        .max = 86400000,
        .def = "10m",
        .doc = "How long a request waits for the agent's reply before it is answered 504 "
               "(the run goes on and its reply is kept in the session).",
    },
    {
        .name = "stream_keepalive",
        .type = CFG_DURATION,
        .offset = offsetof(struct config_openai_api, stream_keepalive_ms),
        .min = 1000,
        .max = 600000,
        .def = "15s",
        .doc = "While a streamed answer waits for the agent, an SSE comment is sent this "
               "often so that proxies keep the connection open.",
    },
};

static const struct cfg_section config_openai_api_section = {
    .name = "openai_api",
    .size = sizeof(struct config_openai_api),
    .keys = config_openai_api_keys,
    .nkeys = sizeof config_openai_api_keys / sizeof config_openai_api_keys[0],
    .doc = "The OpenAI-compatible HTTP endpoint.",
};

/* ---- the top level ---- */

/* An agent's "provider/model" must name a configured provider. */
static int config_check_model_ref(const struct config *c, const char *ref, const char *key,
                                  struct cfg_error_ctx *ctx)
{
	const char *slash = ref ? strchr(ref, '/') : NULL;

	if (!ref)
		return 0;
	if (!slash || slash == ref || !slash[1]) {
		cfg_error_add(ctx, key, "write it as provider/model, e.g. openai/gpt-4o-mini",
		              "\"%s\" is not of the form provider/model", ref);
		return 1;
	}
	for (size_t i = 0; i < c->n_providers; i++)
		if (c->providers[i].id && strlen(c->providers[i].id) == (size_t)(slash - ref) &&
		    strncmp(c->providers[i].id, ref, (size_t)(slash - ref)) == 0)
			return 0;
	cfg_error_add(ctx, key, "add it under \"providers:\" or fix the name",
	              "no provider \"%.*s\" is configured", (int)(slash - ref), ref);
	return 1;
}

static int config_check_providers(const struct config *c, struct cfg_error_ctx *ctx)
{
	int added = 0;
	char key[64];

	for (size_t i = 0; i < c->n_providers; i++) {
		const struct provider_config *p = &c->providers[i];

		for (size_t j = 0; p->id && j < i; j++) {
			if (!c->providers[j].id || strcmp(c->providers[j].id, p->id) != 0)
				continue;
			snprintf(key, sizeof key, "providers[%zu].id", i);
			cfg_error_add(ctx, key, "give each provider its own id",
			              "duplicate provider id \"%s\" (also providers[%zu].id)",
			              p->id, j);
			added++;
			break;
		}
		if (p->api == PROVIDER_API_SCRIPTED && !p->script) {
			snprintf(key, sizeof key, "providers[%zu]", i);
			cfg_error_add(ctx, key, "add \"script: builtin:offline\" or a script file",
			              "a scripted provider needs \"script\"");
			added++;
		}
	}
	for (size_t i = 0; i < c->n_agents; i++) {
		const struct agent_config *a = &c->agents[i];

		snprintf(key, sizeof key, "agents[%zu].model", i);
		added += config_check_model_ref(c, a->model, key, ctx);
		for (size_t f = 0; f < a->n_fallbacks; f++) {
			snprintf(key, sizeof key, "agents[%zu].fallbacks[%zu]", i, f);
			added += config_check_model_ref(c, a->fallbacks[f], key, ctx);
		}
	}
	return added;
}

/* Bindings name agents and channels that exist, and no two match alike. */
static int config_check_bindings(const struct config *c, struct cfg_error_ctx *ctx)
{
	const char **ids;
	int added;

	if (!c->n_bindings)
		return 0;
	ids = calloc(c->n_agents ? c->n_agents : 1, sizeof *ids);
	if (!ids) {
		/* Unchecked bindings must not load. */
		cfg_error_add(ctx, "bindings", NULL, "out of memory while checking the bindings");
		return 1;
	}
	for (size_t i = 0; i < c->n_agents; i++)
		ids[i] = c->agents[i].id;
	added = bindings_check(c->bindings, c->n_bindings, "bindings", ids, c->n_agents,
	                       channels_config_names, CHANNELS_CONFIG_COUNT, ctx);
	free(ids);
	return added;
}

static int config_root_check(void *obj, struct cfg_error_ctx *ctx)
{
	const struct config *c = obj;
	size_t first_default = SIZE_MAX;
	int added = config_check_providers(c, ctx) + config_check_bindings(c, ctx) +
	            cron_config_check(c->cron, c->n_cron, c->agents, c->n_agents, ctx);
	char key[64];

	for (size_t i = 0; i < c->n_agents; i++) {
		const struct agent_config *a = &c->agents[i];

		for (size_t j = 0; a->id && j < i; j++) {
			if (!c->agents[j].id || strcmp(c->agents[j].id, a->id) != 0)
				continue;
			snprintf(key, sizeof key, "agents[%zu].id", i);
			cfg_error_add(ctx, key, "give each agent its own id",
			              "duplicate agent id \"%s\" (also agents[%zu].id)", a->id, j);
			added++;
			break;
		}
		if (!a->is_default)
			continue;
		if (first_default == SIZE_MAX) {
			first_default = i;
			continue;
		}
		snprintf(key, sizeof key, "agents[%zu].default", i);
		cfg_error_add(ctx, key, "keep \"default: true\" on one agent only",
		              "more than one default agent (agents[%zu] is the default already)",
		              first_default);
		added++;
	}
	return added;
}

static const struct cfg_key config_root_keys[] = {
    {
        .name = "gateway",
        .type = CFG_SECTION,
        .offset = offsetof(struct config, gateway),
        .section = &config_gateway_section,
        .doc = "Listener, authentication and limits.",
    },
    {
        .name = "log",
        .type = CFG_SECTION,
        .offset = offsetof(struct config, log),
        .section = &config_log_section,
        .doc = "Log level and format.",
    },
    {
        .name = "store",
        .type = CFG_SECTION,
        .offset = offsetof(struct config, store),
        .section = &config_store_section,
        .doc = "The durable store.",
    },
    {
        .name = "http_client",
        .type = CFG_SECTION,
        .offset = offsetof(struct config, http_client),
        .section = &config_http_client_section,
        .doc = "Outbound HTTP defaults.",
    },
    {
        .name = "agents",
        .type = CFG_LIST,
        .offset = offsetof(struct config, agents),
        .count_offset = offsetof(struct config, n_agents),
        .min = 1,
        .max = 1000,
        .section = &agent_config_section,
        .flags = CFG_REQUIRED,
        .doc = "The agents this gateway runs; at least one.",
        .hint = "run \"switchboard init\", or add \"agents: [{id: main}]\"",
    },
    {
        .name = "providers",
        .type = CFG_LIST,
        .offset = offsetof(struct config, providers),
        .count_offset = offsetof(struct config, n_providers),
        .min = 0,
        .max = 64,
        .section = &provider_config_section,
        .doc = "The model APIs agents call; an agent names one as `model: <provider>/<model>`.",
    },
    {
        .name = "bindings",
        .type = CFG_LIST,
        .offset = offsetof(struct config, bindings),
        .count_offset = offsetof(struct config, n_bindings),
        .min = 0,
        .max = 100000,
        .section = &binding_config_section,
        .doc = "Which agent answers which messages, most specific first (docs/routing.md). "
               "Unmatched messages go to the agent marked default, else the only agent; with "
               "several agents and no default they are refused.",
    },
    {
        .name = "session",
        .type = CFG_SECTION,
        .offset = offsetof(struct config, session),
        .section = &session_config_section,
        .doc = "Session keys (how DMs share sessions) and resets.",
    },
    {
        .name = "channels",
        .type = CFG_SECTION,
        .offset = offsetof(struct config, channels),
        .section = &channels_config_section,
        .doc = "The chat channels and who may talk to the bot on each.",
    },
    {
        .name = "openai_api",
        .type = CFG_SECTION,
        .offset = offsetof(struct config, openai_api),
        .section = &config_openai_api_section,
        .doc = "The OpenAI-compatible endpoint (off by default).",
    },
    {
        .name = "cron",
        .type = CFG_LIST,
        .offset = offsetof(struct config, cron),
        .count_offset = offsetof(struct config, n_cron),
        .min = 0,
        .max = 10000,
        .section = &cron_job_config_section,
        .doc = "Scheduled agent turns (docs/scheduling.md). Jobs can also be added with "
               "`switchboard cron add`; those live in the store only.",
    },
    {
        .name = "security",
        .type = CFG_SECTION,
        .offset = offsetof(struct config, security),
        .section = &security_config_section,
        .doc = "Who the operator is, the hard deny list, and approvals (docs/security.md).",
    },
};

const struct cfg_section config_root_section = {
    .name = "switchboard.yaml",
    .size = sizeof(struct config),
    .keys = config_root_keys,
    .nkeys = sizeof config_root_keys / sizeof config_root_keys[0],
    .check = config_root_check,
    .doc = "The keys at the top of `switchboard.yaml`.",
};

/* ---- the snapshot ---- */

/* base/rel, or rel when it is absolute. NULL on allocation failure. */
static char *config_join(const char *base, const char *rel)
{
	struct buf b;

	if (rel[0] == '/')
		return strdup(rel);
	buf_init(&b, 2 * CONFIG_PATH_MAX + 64);
	if (buf_printf(&b, "%s/%s", base, rel)) {
		buf_free(&b);
		return NULL;
	}
	return buf_steal(&b);
}

/* An absolute form of p: realpath() when p exists, else cwd/p. */
static char *config_absolute(const char *p)
{
	char *r = realpath(p, NULL), cwd[PATH_MAX];

	if (r)
		return r;
	if (p[0] == '/')
		return strdup(p);
	if (!getcwd(cwd, sizeof cwd))
		return NULL;
	return config_join(cwd, p);
}

static void config_free(struct config *c)
{
	if (!c)
		return;
	cfg_release(&config_root_section, c);
	for (size_t i = 0; i < c->n_secrets; i++)
		free(c->secrets[i]);
	free(c->secrets);
	for (size_t i = 0; i < c->n_private_paths; i++)
		free(c->private_paths[i]);
	free(c->private_paths);
	free(c->path);
	free(c->home);
	free(c);
}

struct config_secret_acc {
	struct config *c;
	size_t cap;
	bool nomem;
};

static void config_collect_secret(void *ud, const char *value)
{
	struct config_secret_acc *acc = ud;
	struct config *c = acc->c;
	char *copy;

	if (acc->nomem)
		return;
	for (size_t i = 0; i < c->n_secrets; i++)
		if (strcmp(c->secrets[i], value) == 0)
			return;
	if (c->n_secrets == acc->cap) {
		size_t cap = acc->cap ? acc->cap * 2 : 4;
		char **v = realloc(c->secrets, cap * sizeof *v);

		if (!v) {
			acc->nomem = true;
			return;
		}
		c->secrets = v;
		acc->cap = cap;
	}
	copy = strdup(value);
	if (!copy) {
		acc->nomem = true;
		return;
	}
	c->secrets[c->n_secrets++] = copy;
}

/* Appends "<a><b>" to the private paths. */
static int config_private(struct config *c, const char *a, const char *b)
{
	char **v = realloc(c->private_paths, (c->n_private_paths + 1) * sizeof *v);
	size_t n = strlen(a) + strlen(b) + 1;

	if (!v)
		return SB_ERR_NOMEM;
	c->private_paths = v;
	if (!(v[c->n_private_paths] = malloc(n)))
		return SB_ERR_NOMEM;
	snprintf(v[c->n_private_paths++], n, "%s%s", a, b);
	return SB_OK;
}

/* The private paths of a snapshot (config.h); secret files from doc. */
static int config_private_paths(struct config *c, const struct cfg_doc *doc)
{
	static const char *const store_parts[] = {"", "-wal", "-shm", "-journal", NULL};
	static const char *const home_parts[] = {"", "/gateway.token", "/secrets", "/agents",
	                                         NULL};
	const char *const *files;
	size_t n = cfg_doc_secret_files(doc, &files);
	int rc = SB_OK;

	for (size_t i = 0; home_parts[i] && rc == SB_OK; i++)
		rc = config_private(c, c->home, home_parts[i]);
	if (rc == SB_OK)
		rc = config_private(c, c->path, "");
	for (size_t i = 0; store_parts[i] && rc == SB_OK; i++)
		rc = config_private(c, c->store.path, store_parts[i]);
	for (size_t i = 0; i < n && rc == SB_OK; i++)
		rc = config_private(c, files[i], "");
	return rc;
}

/* Resolves relative paths against the home and fills derived values. */
static int config_finish(struct config *c)
{
	struct config_secret_acc acc = {.c = c};
	char *p;

	p = config_join(c->home, c->store.path);
	if (!p)
		return SB_ERR_NOMEM;
	free(c->store.path);
	c->store.path = p;
	for (size_t i = 0; i < c->n_providers; i++) {
		struct provider_config *pc = &c->providers[i];
		static const char *const base_urls[] = {"https://api.openai.com/v1",
		                                        "https://api.anthropic.com", NULL};

		if (!pc->base_url && base_urls[pc->api]) {
			pc->base_url = strdup(base_urls[pc->api]);
			if (!pc->base_url)
				return SB_ERR_NOMEM;
		}
		if (pc->script && strncmp(pc->script, "builtin:", 8) != 0) {
			p = config_join(c->home, pc->script);
			if (!p)
				return SB_ERR_NOMEM;
			free(pc->script);
			pc->script = p;
		}
	}
	for (size_t i = 0; i < c->n_agents; i++) {
		struct agent_config *a = &c->agents[i];
		struct buf b;

		if (a->workspace) {
			p = config_join(c->home, a->workspace);
		} else {
			buf_init(&b, 2 * CONFIG_PATH_MAX);
			p = buf_printf(&b, "%s/workspaces/%s", c->home, a->id) ? NULL
			                                                       : buf_steal(&b);
			buf_free(&b);
		}
		if (!p)
			return SB_ERR_NOMEM;
		free(a->workspace);
		a->workspace = p;
	}
	cfg_each_secret(&config_root_section, c, config_collect_secret, &acc);
	return acc.nomem ? SB_ERR_NOMEM : SB_OK;
}

/* Builds a snapshot from text. file names the source in errors, path is
 * the absolute path recorded in the snapshot. */
static int config_build(const char *text, size_t len, const char *file, const char *path,
                        const char *home, struct config **out, struct cfg_errors *errs)
{
	struct cfg_doc *doc = NULL;
	struct config *c = NULL;
	int rc, arc;

	*out = NULL;
	rc = SB_ERR_NOMEM;
	if (sodium_init() < 0)
		goto out;
	c = calloc(1, sizeof *c);
	if (!c)
		goto out;
	c->home = config_absolute(home ? home : ".");
	c->path = c->home ? config_join(c->home, path) : NULL;
	if (!c->home || !c->path)
		goto out;
	rc = cfg_doc_parse(text, len, file, c->home, &doc, errs);
	if (rc == SB_ERR_NOMEM || !doc)
		goto out;
	arc = cfg_apply(doc, &config_root_section, c, errs);
	if (arc == SB_ERR_NOMEM || rc == SB_OK)
		rc = arc;
	if (rc)
		goto out;
	rc = config_finish(c);
	if (rc)
		goto out;
	rc = config_private_paths(c, doc);
	if (rc)
		goto out;
	crypto_generichash(c->digest, sizeof c->digest, (const unsigned char *)text, len, NULL, 0);
	c->refs = 1;
	*out = c;
	c = NULL;
out:
	cfg_doc_free(doc);
	config_free(c);
	return rc;
}

/* Adds an error about the file as a whole (no position, no key). */
static void config_file_error(struct cfg_errors *errs, const char *file, const char *hint,
                              const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void config_file_error(struct cfg_errors *errs, const char *file, const char *hint,
                              const char *fmt, ...)
{
	struct cfg_error x = {0};
	struct buf msg;
	va_list ap;
	int rc;

	if (errs->n == errs->cap) {
		size_t cap = errs->cap ? errs->cap * 2 : 4;
		struct cfg_error *v = realloc(errs->v, cap * sizeof *v);

		if (!v)
			return;
		errs->v = v;
		errs->cap = cap;
	}
	buf_init(&msg, 4096);
	va_start(ap, fmt);
	rc = buf_vprintf(&msg, fmt, ap);
	va_end(ap);
	x.msg = rc ? NULL : buf_steal(&msg);
	buf_free(&msg);
	x.file = strdup(file);
	x.path = strdup("");
	x.hint = hint ? strdup(hint) : NULL;
	if (!x.file || !x.path || !x.msg || (hint && !x.hint)) {
		free(x.file);
		free(x.path);
		free(x.msg);
		free(x.hint);
		return;
	}
	errs->v[errs->n++] = x;
}

int config_load(const char *path, const char *home, struct config **out, struct cfg_errors *errs)
{
	struct buf text;
	struct stat st;
	char chunk[8192], *abs = NULL;
	int fd = -1, rc = SB_ERR_IO;

	*out = NULL;
	buf_init(&text, CONFIG_FILE_MAX);
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		bool missing = errno == ENOENT;

		config_file_error(errs, path,
		                  missing ? "run \"switchboard init\" to create it, or pass "
		                            "--config FILE"
		                          : NULL,
		                  "cannot open the configuration: %s", strerror(errno));
		goto out;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		config_file_error(errs, path, NULL, "the configuration is not a regular file");
		goto out;
	}
	for (;;) {
		ssize_t got = read(fd, chunk, sizeof chunk);
		int brc;

		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			config_file_error(errs, path, NULL, "cannot read the configuration: %s",
			                  strerror(errno));
			goto out;
		}
		if (got == 0)
			break;
		brc = buf_append(&text, chunk, (size_t)got);
		if (brc == SB_ERR_TOOBIG) {
			config_file_error(errs, path, NULL,
			                  "the configuration is larger than 1 MiB");
			rc = SB_ERR_CONFIG;
			goto out;
		}
		if (brc) {
			rc = brc;
			goto out;
		}
	}
	rc = SB_ERR_NOMEM;
	abs = config_absolute(path);
	if (!abs)
		goto out;
	rc = config_build(text.data ? text.data : "", text.len, path, abs, home, out, errs);
out:
	if (fd >= 0)
		close(fd);
	free(abs);
	buf_free(&text);
	return rc;
}

int config_load_text(const char *text, const char *file, const char *home, struct config **out,
                     struct cfg_errors *errs)
{
	const char *name = file ? file : "switchboard.yaml";

	return config_build(text, strlen(text), name, name, home, out, errs);
}

struct config *config_ref(struct config *c)
{
	if (c)
		__atomic_add_fetch(&c->refs, 1, __ATOMIC_RELAXED);
	return c;
}

void config_unref(struct config *c)
{
	if (!c)
		return;
	if (__atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) == 0)
		config_free(c);
}

int config_restart_changes(const struct config *old, const struct config *new_,
                           void (*fn)(void *ud, const char *path), void *ud)
{
	return cfg_restart_changes(&config_root_section, old, new_, fn, ud);
}

const struct agent_config *config_default_agent(const struct config *c)
{
	for (size_t i = 0; i < c->n_agents; i++)
		if (c->agents[i].is_default)
			return &c->agents[i];
	return c->n_agents == 1 ? &c->agents[0] : NULL;
}

static const char config_default_text[] =
    "# Switchboard configuration ($SWITCHBOARD_HOME/switchboard.yaml).\n"
    "#\n"
    "# Every key with its default and bounds: docs/configuration.md, or run\n"
    "# `switchboard config schema`. The gateway reloads this file on SIGHUP and\n"
    "# when it changes; keys marked \"restart\" there need a restart.\n"
    "#\n"
    "# Keep secrets out of this file. A value may read them from elsewhere:\n"
    "#   auth_token: ${SWITCHBOARD_TOKEN}            # an environment variable\n"
    "#   auth_token: ${file:secrets/gateway-token}   # a file under this directory,\n"
    "#                                               # which must be chmod 600\n"
    "# Write $${ for a literal \"${\".\n"
    "\n"
    "gateway:\n"
    "  # Listen address. Anything but loopback (127.0.0.1, ::1, localhost)\n"
    "  # requires auth_token.\n"
    "  bind: 127.0.0.1\n"
    "  port: 8790\n"
    "  # auth_token: ${file:secrets/gateway-token}\n"
    "  drain_timeout: 10s\n"
    "  max_body: 1MiB\n"
    "  max_connections: 1024\n"
    "  watch_config: true\n"
    "\n"
    "log:\n"
    "  level: info      # debug | info | warn | error\n"
    "  format: logfmt   # logfmt | json\n"
    "\n"
    "# store:\n"
    "#   path: state.db   # relative to this directory\n"
    "#   busy_timeout: 5s\n"
    "\n"
    "# http_client:\n"
    "#   timeout: 30s\n"
    "#   ca_file: /etc/ssl/certs/ca-certificates.crt\n"
    "\n"
    "# Model providers. \"offline\" replays a built-in script that says how to\n"
    "# connect a real model; add yours and point the agent's model at it:\n"
    "#   - id: openai\n"
    "#     api: openai-chat          # OpenAI, Ollama, llama.cpp, vLLM, OpenRouter\n"
    "#     base_url: https://api.openai.com/v1\n"
    "#     api_key: ${OPENAI_API_KEY}\n"
    "#   - id: anthropic\n"
    "#     api: anthropic-messages\n"
    "#     api_key: ${ANTHROPIC_API_KEY}\n"
    "providers:\n"
    "  - id: offline\n"
    "    api: scripted\n"
    "    script: builtin:offline\n"
    "\n"
    "agents:\n"
    "  - id: main\n"
    "    default: true\n"
    "    workspace: workspaces/main\n"
    "    model: offline/demo          # e.g. openai/gpt-4o-mini\n"
    "    # fallbacks: [anthropic/claude-sonnet-4-5]\n"
    "\n"
    "# Which agent answers which chat (docs/routing.md); the most specific\n"
    "# binding wins, and unmatched messages go to the default agent.\n"
    "#   `switchboard route --channel telegram --peer group:-100123` explains.\n"
    "# bindings:\n"
    "#   - agent: main\n"
    "#     match: {channel: telegram, account: \"*\", peer: {kind: group, id: "
    "\"-1001234567890\"}}\n"
    "#   (without `account` a binding matches only the account called \"default\";\n"
    "#   `switchboard config check` warns about one that can never match)\n"
    "\n"
    "# session:\n"
    "#   dm_scope: main       # main | per-peer | per-channel-peer | per-account-channel-peer\n"
    "#   reset: {mode: none}  # none | daily (at_hour: 4) | idle (idle_minutes: 60)\n"
    "\n"
    "# Who may talk to the bot, per channel. Unknown DM senders get a pairing\n"
    "# code: `switchboard pairing list`, then `switchboard pairing approve`.\n"
    "# channels:\n"
    "#   telegram:\n"
    "#     dm_policy: pairing      # pairing | allowlist | open | disabled\n"
    "#     group_policy: allowlist # allowlist | open | disabled\n"
    "#     groups: [{id: \"-1001234567890\", require_mention: true}]\n";

int config_write_default(const char *path, int port)
{
	static const char port_line[] = "  port: 8790\n";
	char text[sizeof config_default_text + 32];
	const char *p = text, *at;
	size_t left;
	int fd, rc = SB_ERR_IO;

	/* The default text with the port chosen for this home. */
	at = strstr(config_default_text, port_line);
	if (port > 0 && port <= 65535 && port != 8790 && at)
		snprintf(text, sizeof text, "%.*s  port: %d\n%s", (int)(at - config_default_text),
		         config_default_text, port % 65536, at + sizeof port_line - 1);
	else
		snprintf(text, sizeof text, "%s", config_default_text);
	left = strlen(text);

	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY, 0600);
	if (fd < 0)
		return errno == EEXIST ? SB_ERR_EXISTS : SB_ERR_IO;
	if (fchmod(fd, 0600) != 0)
		goto out;
	while (left) {
		ssize_t n = write(fd, p, left);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			goto out;
		p += n;
		left -= (size_t)n;
	}
	if (fsync(fd) != 0)
		goto out;
	rc = SB_OK;
out:
	if (close(fd) != 0 && rc == SB_OK)
		rc = SB_ERR_IO;
	if (rc)
		unlink(path);
	return rc;
}

int config_bindings_table(const struct config *c, struct bindings_table **out)
{
	struct bindings_channel_access ch[CHANNELS_CONFIG_COUNT];
	struct bindings_source src = {0};
	const char **ids = NULL;
	const char *base;
	int rc = SB_ERR_NOMEM;

	if (out)
		*out = NULL;
	if (!c || !out)
		return SB_ERR_INVAL;
	ids = calloc(c->n_agents ? c->n_agents : 1, sizeof *ids);
	if (!ids)
		goto out;
	src.default_agent = BINDINGS_NONE;
	for (size_t i = 0; i < c->n_agents; i++) {
		ids[i] = c->agents[i].id;
		if (c->agents[i].is_default && src.default_agent == BINDINGS_NONE)
			src.default_agent = i;
	}
	for (size_t i = 0; i < CHANNELS_CONFIG_COUNT; i++) {
		ch[i].channel = channels_config_names[i];
		ch[i].access = channels_config_access(&c->channels, channels_config_names[i]);
	}
	base = c->path ? strrchr(c->path, '/') : NULL;
	src.file = base ? base + 1 : (c->path ? c->path : "switchboard.yaml");
	src.bindings = c->bindings;
	src.n_bindings = c->n_bindings;
	src.agent_ids = ids;
	src.n_agents = c->n_agents;
	src.session = &c->session;
	src.channels = ch;
	src.n_channels = CHANNELS_CONFIG_COUNT;
	rc = bindings_table_new(out, &src);
out:
	free(ids);
	return rc;
}

const struct provider_config *config_provider(const struct config *c, const char *id)
{
	for (size_t i = 0; c && id && i < c->n_providers; i++)
		if (strcmp(c->providers[i].id, id) == 0)
			return &c->providers[i];
	return NULL;
}

const struct agent_config *config_agent(const struct config *c, const char *id)
{
	for (size_t i = 0; c && id && i < c->n_agents; i++)
		if (strcmp(c->agents[i].id, id) == 0)
			return &c->agents[i];
	return NULL;
}

void config_print_reference(FILE *out)
{
	cfg_print_reference(&config_root_section, out);
}

/* ---- a private copy for one evaluation run ---- */

static int config_set_str(char **field, const char *value)
{
	char *p = strdup(value);

	if (!p)
		return SB_ERR_NOMEM;
	free(*field);
	*field = p;
	return SB_OK;
}

/* Appends a scripted provider that replays script; its id (not one the
 * file uses) goes to id. */
static int config_add_scripted(struct config *c, const char *script, char *id, size_t id_size)
{
	static const char text[] = "id: placeholder\napi: scripted\nscript: placeholder\n"
	                           "max_retries: 0\n";
	struct cfg_doc *doc = NULL;
	struct cfg_errors errs;
	struct provider_config pc, *v;
	int rc;

	memset(&pc, 0, sizeof pc);
	cfg_errors_init(&errs);
	for (int n = 1;; n++) {
		if ((n == 1 ? snprintf(id, id_size, "eval")
		            : snprintf(id, id_size, "eval-%d", n)) >= (int)id_size)
			return SB_ERR_INVAL;
		if (!config_provider(c, id))
			break;
	}
	rc = cfg_doc_parse(text, sizeof text - 1, "<eval>", c->home, &doc, &errs);
	if (rc == SB_OK)
		rc = cfg_apply(doc, &provider_config_section, &pc, &errs);
	if (rc == SB_OK)
		rc = config_set_str(&pc.id, id);
	if (rc == SB_OK)
		rc = config_set_str(&pc.script, script);
	if (rc)
		goto out;
	rc = SB_ERR_NOMEM;
	v = realloc(c->providers, (c->n_providers + 1) * sizeof *v);
	if (!v)
		goto out;
	c->providers = v;
	c->providers[c->n_providers++] = pc;
	memset(&pc, 0, sizeof pc);
	rc = SB_OK;
out:
	/* The fixed text always applies: an error here is a broken table. */
	if (rc == SB_ERR_CONFIG)
		rc = SB_ERR_INVAL;
	cfg_release(&provider_config_section, &pc);
	cfg_errors_free(&errs);
	cfg_doc_free(doc);
	return rc;
}

int config_isolate_agent(struct config *c, const struct config_isolation *iso, char *why,
                         size_t why_size)
{
	static const char *const home_parts[] = {"", "/gateway.token", "/secrets", "/agents",
	                                         NULL};
	static const char *const store_parts[] = {"", "-wal", "-shm", "-journal", NULL};
	struct agent_config *a = NULL;
	char model[512], id[64];
	const char *slash;
	int rc = SB_OK;

	why[0] = '\0';
	for (size_t i = 0; i < c->n_agents; i++)
		if (strcmp(c->agents[i].id, iso->agent_id) == 0)
			a = &c->agents[i];
	if (!a) {
		snprintf(why, why_size, "no agent \"%s\"", iso->agent_id);
		return SB_ERR_NOTFOUND;
	}
	if (iso->script) {
		rc = config_add_scripted(c, iso->script, id, sizeof id);
		if (rc == SB_OK && (size_t)snprintf(model, sizeof model, "%s/scripted", id) >=
		                       sizeof model)
			rc = SB_ERR_INVAL;
	} else if (iso->model) {
		slash = strchr(iso->model, '/');
		if (!slash || slash == iso->model || !slash[1]) {
			snprintf(why, why_size, "model \"%s\" is not PROVIDER/MODEL", iso->model);
			return SB_ERR_INVAL;
		}
		snprintf(id, sizeof id, "%.*s", (int)(slash - iso->model), iso->model);
		if (!config_provider(c, id)) {
			snprintf(why, why_size, "no provider \"%s\" in %s", id, c->path);
			return SB_ERR_NOTFOUND;
		}
		if ((size_t)snprintf(model, sizeof model, "%s", iso->model) >= sizeof model)
			return SB_ERR_INVAL;
	}
	if (rc == SB_OK && (iso->script || iso->model)) {
		rc = config_set_str(&a->model, model);
		/* The run tests this model, not whichever answers. */
		for (size_t i = 0; i < a->n_fallbacks; i++)
			free(a->fallbacks[i]);
		free(a->fallbacks);
		a->fallbacks = NULL;
		a->n_fallbacks = 0;
	}
	if (rc == SB_OK && iso->workspace)
		rc = config_set_str(&a->workspace, iso->workspace);
	if (rc == SB_OK && iso->home) {
		/* The operator's home and store stay private; the new ones are
		 * added. */
		rc = config_set_str(&c->home, iso->home);
		if (rc == SB_OK) {
			free(c->store.path);
			c->store.path = config_join(iso->home, "state.db");
			if (!c->store.path)
				rc = SB_ERR_NOMEM;
		}
		for (size_t i = 0; home_parts[i] && rc == SB_OK; i++)
			rc = config_private(c, iso->home, home_parts[i]);
		for (size_t i = 0; store_parts[i] && rc == SB_OK; i++)
			rc = config_private(c, c->store.path, store_parts[i]);
	}
	if (rc && !why[0])
		snprintf(why, why_size, "%s", sb_strerror(rc));
	return rc;
}
