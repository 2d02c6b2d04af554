/*
 * cli_doctor.c - `switchboard doctor`: checks what the gateway's safety
 * depends on and says what is wrong, one finding a line:
 *
 *   ok|warn|fail  AREA: what was found (and what to do)
 *
 * The sandbox: is bubblewrap installed, can it build a sandbox here (user
 * namespaces), which agents run their tools without one. The permission
 * setup: approvals that cannot reach the operator. The machine: every
 * agent's workspace and the bindings (config_lint), the listen port (free,
 * this home's gateway, or held by something else), the open-file limit
 * against gateway.max_connections. The providers: each is reachable and
 * takes its key (cli_doctor_net.c; --no-network skips it). --json prints
 * one JSON object a line ({"level", "area", "text"}, and for a provider
 * "provider", "url", "result", "http_status"). Exit code 0 when nothing failed, 1 when
 * something did (a sandboxed agent on a host where the sandbox does not
 * work, a missing workspace, a port another program holds, a provider
 * that is unreachable or rejects its key), 2 misuse.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agents/agent_config.h"
#include "agents/mcp/mcp.h"
#include "agents/safety/sandbox.h"
#include "gateway/cli/cli.h"
#include "gateway/cli/cli_doctor.h"
#include "gateway/config/config.h"
#include "gateway/config/runtime.h"
#include "gateway/core/err.h"
#include "gateway/core/num.h"

static void doctor_usage(FILE *f)
{
	fprintf(f, "usage: switchboard doctor [--config FILE] [--json] [--no-network]\n"
	           "                          [--timeout SECONDS]\n\n"
	           "Checks the sandbox (bubblewrap, user namespaces), the permission settings\n"
	           "of every agent, its MCP servers' programs, the workspaces and bindings,\n"
	           "the listen port, the open-file limit, and that every provider is reachable\n"
	           "and accepts its key (one cheap request each: GET /models), one finding a\n"
	           "line.\n"
	           "Exit code 1 when something would fail here.\n"
	           "  --json            one JSON object a line\n"
	           "  --no-network      skip the provider checks (no request leaves the host)\n"
	           "  --timeout SECONDS how long each provider may take to answer (default 5)\n");
}

static bool doctor_json;

void doctor_finding(const char *level, const char *area, const char *text, const json_t *extra)
{
	if (doctor_json) {
		json_t *o = json_pack("{ss ss ss}", "level", level, "area", area, "text", text);
		char *t;

		if (o && extra)
			json_object_update(o, (json_t *)extra);
		t = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;

		if (t)
			printf("%s\n", t);
		free(t);
		json_decref(o);
		return;
	}
	printf("%-4s  %s: %s\n", level, area, text);
}

static void doctor_line(const char *level, const char *area, const char *text)
{
	doctor_finding(level, area, text, NULL);
}

/* The listen port: free, this home's gateway (its runtime file), or held by
 * another program. Returns 1 when it would keep the gateway from starting. */
static int doctor_port(const struct config *cfg, const char *home)
{
	struct runtime_info ri;
	struct sockaddr_in a = {.sin_family = AF_INET};
	char line[600];
	int fd, one = 1, rc = 0;
	bool loopback = strcmp(cfg->gateway.bind, "127.0.0.1") == 0 ||
	                strcmp(cfg->gateway.bind, "localhost") == 0;

	if (runtime_read(home, &ri) == SB_OK) {
		snprintf(line, sizeof line, "this home's gateway (pid %ld) listens on %s", ri.pid,
		         ri.http);
		doctor_line("ok", "port", line);
		return 0;
	}
	if (!loopback && strcmp(cfg->gateway.bind, "0.0.0.0") != 0) {
		snprintf(line, sizeof line,
		         "%s:%lld is not checked (only IPv4 loopback and 0.0.0.0 are)",
		         cfg->gateway.bind, (long long)cfg->gateway.port);
		doctor_line("ok", "port", line);
		return 0;
	}
	a.sin_port = htons((uint16_t)cfg->gateway.port);
	a.sin_addr.s_addr = loopback ? htonl(INADDR_LOOPBACK) : htonl(INADDR_ANY);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return 0;
	(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0) {
		snprintf(line, sizeof line, "%s:%lld is free", cfg->gateway.bind,
		         (long long)cfg->gateway.port);
		doctor_line("ok", "port", line);
	} else {
		snprintf(line, sizeof line,
		         "%s:%lld is held by another program (%s): the gateway would not start; "
		         "stop it or set gateway.port",
		         cfg->gateway.bind, (long long)cfg->gateway.port, strerror(errno));
		doctor_line("fail", "port", line);
		rc = 1;
	}
	close(fd);
	return rc;
}

/* The open-file limit against the connections the gateway may hold. */
static void doctor_limits(const struct config *cfg)
{
	struct rlimit rl;
	char line[300];

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return;
	if (rl.rlim_cur != RLIM_INFINITY &&
	    (long long)rl.rlim_cur < (long long)cfg->gateway.max_connections + 64) {
		snprintf(line, sizeof line,
		         "open files limited to %llu, below gateway.max_connections (%lld) and the "
		         "store's and tools' files: raise it (LimitNOFILE= in the unit, ulimit -n) "
		         "or lower max_connections",
		         (unsigned long long)rl.rlim_cur, (long long)cfg->gateway.max_connections);
		doctor_line("warn", "limits", line);
	} else {
		snprintf(line, sizeof line, "open files: %s%llu, enough for %lld connections",
		         rl.rlim_cur == RLIM_INFINITY ? "unlimited " : "",
		         rl.rlim_cur == RLIM_INFINITY ? 0ULL : (unsigned long long)rl.rlim_cur,
		         (long long)cfg->gateway.max_connections);
		doctor_line("ok", "limits", line);
	}
}

/* Whether path lies in dir (or is it). */
static bool doctor_under(const char *path, const char *dir)
{
	size_t n = strlen(dir);

	while (n > 1 && dir[n - 1] == '/')
		n--;
	return strncmp(path, dir, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

/* Whether the sandbox of agent a would show path (docs/security.md: the
 * system directories, the workspace, the server's read_only_paths). */
static bool doctor_visible(const struct agent_config *a, const struct mcp_server_config *c,
                           const char *path)
{
	static const char *const sys[] = {"/usr",   "/bin",   "/sbin",   "/lib",
	                                  "/lib32", "/lib64", "/libx32", NULL};
	char real[PATH_MAX];

	if (!realpath(path, real))
		return false;
	for (size_t i = 0; sys[i]; i++)
		if (doctor_under(real, sys[i]))
			return true;
	if (a->workspace && doctor_under(real, a->workspace))
		return true;
	for (size_t i = 0; i < c->n_read_only_paths; i++) {
		char ro[PATH_MAX];

		if (realpath(c->read_only_paths[i], ro) && doctor_under(real, ro))
			return true;
	}
	return false;
}

/* Each agent's MCP servers (docs/mcp.md): a stdio server's program must be
 * there, inside the agent's sandbox, and its read_only_paths must exist.
 * Returns 1 when a server could not start. */
static int doctor_mcp(const struct config *cfg)
{
	static const char *const path_dirs[] = {"/usr/local/bin", "/usr/bin", "/bin", NULL};
	char area[128], line[2 * PATH_MAX + 200], found[PATH_MAX];
	int rc = 0;

	for (size_t i = 0; i < cfg->n_agents; i++) {
		const struct agent_config *a = &cfg->agents[i];

		for (size_t k = 0; k < a->mcp.n_servers; k++) {
			const struct mcp_server_config *c = &a->mcp.servers[k];
			bool boxed = a->sandbox != SANDBOX_FULL, ok = false;

			snprintf(area, sizeof area, "agent %s mcp %s", a->id, c->name);
			if (mcp_server_transport(c) != MCP_TRANSPORT_STDIO) {
				snprintf(line, sizeof line, "%s %s (reached when first used)",
				         mcp_server_transport(c) == MCP_TRANSPORT_SSE
				             ? "HTTP+SSE"
				             : "streamable HTTP",
				         c->url);
				doctor_line("ok", area, line);
				continue;
			}
			for (size_t r = 0; r < c->n_read_only_paths; r++)
				if (access(c->read_only_paths[r], F_OK) != 0) {
					snprintf(line, sizeof line,
					         "read_only_paths: %s does not exist",
					         c->read_only_paths[r]);
					doctor_line("warn", area, line);
				}
			if (strchr(c->command, '/')) {
				snprintf(found, sizeof found, "%s", c->command);
				ok = c->command[0] == '/' && access(found, X_OK) == 0;
			} else {
				for (size_t d = 0; path_dirs[d] && !ok; d++)
					ok = snprintf(found, sizeof found, "%s/%s", path_dirs[d],
					              c->command) < (int)sizeof found &&
					     access(found, X_OK) == 0;
			}
			if (!ok) {
				snprintf(line, sizeof line,
				         "%s is not a program in %s: give its absolute path%s",
				         c->command,
				         strchr(c->command, '/')
				             ? "that place"
				             : "the sandbox's PATH (/usr/local/bin:/usr/bin:/bin)",
				         boxed ? " and add its directory to read_only_paths" : "");
				doctor_line("fail", area, line);
				rc = 1;
			} else if (boxed && !doctor_visible(a, c, found)) {
				snprintf(line, sizeof line,
				         "%s is outside the agent's sandbox: add its directory to "
				         "read_only_paths",
				         found);
				doctor_line("fail", area, line);
				rc = 1;
			} else {
				snprintf(line, sizeof line, "stdio: %s%s", found,
				         boxed ? (c->network || a->sandbox_network
				                      ? ", in the sandbox, with network"
				                      : ", in the sandbox, no network")
				               : ", without a sandbox");
				doctor_line("ok", area, line);
			}
		}
	}
	return rc;
}

/* Workspaces and bindings (config_lint). Returns 1 when one is an error. */
static int doctor_lint(const struct config *cfg)
{
	struct cfg_errors errs, warns;
	char line[1600];
	int rc;

	cfg_errors_init(&errs);
	cfg_errors_init(&warns);
	config_lint(cfg, &errs, &warns);
	for (size_t i = 0; i < errs.n; i++) {
		snprintf(line, sizeof line, "%s (%s)", errs.v[i].msg,
		         errs.v[i].hint ? errs.v[i].hint : errs.v[i].path);
		doctor_line("fail", "workspace", line);
	}
	for (size_t i = 0; i < warns.n; i++) {
		snprintf(line, sizeof line, "%s:%d: %s", cfg->path, warns.v[i].line,
		         warns.v[i].msg);
		doctor_line("warn", "bindings", line);
	}
	if (!errs.n)
		doctor_line("ok", "workspace", "every agent's workspace is a directory");
	rc = errs.n ? 1 : 0;
	cfg_errors_free(&errs);
	cfg_errors_free(&warns);
	return rc;
}

int cli_doctor(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"config", required_argument, NULL, 'c'}, {"json", no_argument, NULL, 'j'},
	    {"no-network", no_argument, NULL, 'N'},   {"timeout", required_argument, NULL, 'T'},
	    {"help", no_argument, NULL, 'h'},         {0}};
	char home[PATH_MAX], cfg_path[PATH_MAX], bwrap[PATH_MAX], why[1024], line[PATH_MAX + 1400];
	const char *explicit_cfg = NULL;
	struct cfg_errors errs;
	struct config *cfg = NULL;
	struct sandbox_policy probe;
	int c, failed = 0, sandbox_rc;
	bool network = true;
	int64_t timeout_s = DOCTOR_PROVIDER_TIMEOUT_MS / 1000;

	optind = 1;
	doctor_json = false;
	while ((c = getopt_long(argc, argv, "c:jh", opts, NULL)) != -1) {
		if (c == 'c') {
			explicit_cfg = optarg;
		} else if (c == 'N') {
			network = false;
		} else if (c == 'T') {
			if (num_parse_i64(optarg, 1, 120, &timeout_s)) {
				fprintf(stderr,
				        "switchboard doctor: --timeout wants seconds from 1 to "
				        "120, got \"%s\"\n",
				        optarg);
				return 2;
			}
		} else if (c == 'j') {
			doctor_json = true;
		} else if (c == 'h') {
			doctor_usage(stdout);
			return 0;
		} else {
			doctor_usage(stderr);
			return 2;
		}
	}
	if (optind != argc) {
		doctor_usage(stderr);
		return 2;
	}
	if (sodium_init() < 0 || cli_home(home, sizeof home) ||
	    cli_config_path(home, explicit_cfg, cfg_path, sizeof cfg_path))
		return 1;
	cfg_errors_init(&errs);
	if (config_load(cfg_path, home, &cfg, &errs) != SB_OK) {
		cfg_errors_print(&errs, stderr);
		snprintf(line, sizeof line, "%s does not load (run `switchboard config check`)",
		         cfg_path);
		doctor_line("fail", "config", line);
		cfg_errors_free(&errs);
		return 1;
	}
	cfg_errors_free(&errs);
	snprintf(line, sizeof line, "%s loads (%zu agent%s)", cfg_path, cfg->n_agents,
	         cfg->n_agents == 1 ? "" : "s");
	doctor_line("ok", "config", line);

	memset(&probe, 0, sizeof probe);
	if (sandbox_find_bwrap(&probe, bwrap, sizeof bwrap) != SB_OK) {
		sandbox_rc = SB_ERR_NOTFOUND;
		doctor_line("fail", "sandbox",
		            "bubblewrap (bwrap) is not installed: sandboxed tools (bash) are "
		            "refused; install the bubblewrap package");
	} else {
		sandbox_rc = sandbox_probe(&probe, why, sizeof why);
		if (sandbox_rc == SB_OK) {
			snprintf(
			    line, sizeof line,
			    "%s builds sandboxes here (new user, PID, IPC, UTS, network and mount "
			    "namespaces; %s)",
			    bwrap,
			    geteuid() == 0 ? "the gateway runs as root: tools run as uid 65534"
			                   : "tools run as the gateway's own user");
			doctor_line("ok", "sandbox", line);
		} else {
			doctor_line("fail", "sandbox", why);
		}
	}
	for (size_t i = 0; i < cfg->n_agents; i++) {
		const struct agent_config *a = &cfg->agents[i];
		char area[128];

		snprintf(area, sizeof area, "agent %s", a->id);
		if (a->sandbox == SANDBOX_FULL) {
			doctor_line(
			    "warn", area,
			    "sandbox: full — its commands run with the gateway's own rights "
			    "(files, network, secrets)");
		} else if (sandbox_rc != SB_OK) {
			snprintf(
			    line, sizeof line,
			    "sandbox: %s, but the sandbox does not work here: its commands will "
			    "be refused",
			    sandbox_mode_name((enum sandbox_mode)a->sandbox));
			doctor_line("fail", area, line);
			failed = 1;
		} else {
			snprintf(line, sizeof line, "sandbox: %s%s",
			         sandbox_mode_name((enum sandbox_mode)a->sandbox),
			         a->sandbox_network ? ", with network" : ", no network");
			doctor_line("ok", area, line);
		}
	}
	if (cfg->security.approval_channel && !cfg->security.approval_target)
		doctor_line("warn", "approvals",
		            "security.approval_channel is set without approval_target: requests "
		            "reach the control plane only");
	else if (!cfg->security.approval_channel)
		doctor_line("ok", "approvals",
		            "requests reach the control plane (`switchboard approvals list`)");
	else
		doctor_line("ok", "approvals", "requests also go to security.approval_channel");
	failed |= doctor_lint(cfg);
	failed |= doctor_mcp(cfg);
	failed |= doctor_port(cfg, home);
	doctor_limits(cfg);
	if (network)
		failed |= doctor_providers(cfg, (long)timeout_s * 1000);
	else
		doctor_line("ok", "providers", "not checked (--no-network)");
	config_unref(cfg);
	return failed;
}
