/*
 * cli.c - subcommands: init, gateway, config check|schema.
 */
#include "gateway/cli/cli.h"

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <pwd.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gateway/config/config.h"
#include "gateway/core/err.h"
#include "gateway/core/fmt.h"
#include "gateway/core/fsutil.h"
#include "gateway/core/num.h"
#include "gateway/daemon/daemon.h"
#include "workspaces/scaffold.h"
#include "workspaces/workspace.h"

#define CLI_TOKEN_BYTES 32

static int cli_absolute(const char *path, char *out, size_t size)
{
	char cwd[PATH_MAX];

	if (path[0] == '/')
		return snprintf(out, size, "%s", path) < (int)size ? 0 : -1;
	if (!getcwd(cwd, sizeof cwd))
		return -1;
	return snprintf(out, size, "%s/%s", cwd, path) < (int)size ? 0 : -1;
}

int cli_home(char *out, size_t size)
{
	const char *env = getenv("SWITCHBOARD_HOME"), *home;
	char tmp[PATH_MAX];

	if (env && *env)
		return cli_absolute(env, out, size) == 0
		           ? 0
		           : (fprintf(stderr, "switchboard: SWITCHBOARD_HOME is too long\n"), -1);
	home = getenv("HOME");
	if (!home || !*home) {
		struct passwd *pw = getpwuid(getuid());

		home = pw ? pw->pw_dir : NULL;
	}
	if (!home) {
		fprintf(stderr,
		        "switchboard: cannot find a home directory; set SWITCHBOARD_HOME\n");
		return -1;
	}
	if (snprintf(tmp, sizeof tmp, "%s/.switchboard", home) >= (int)sizeof tmp)
		return -1;
	return cli_absolute(tmp, out, size);
}

int cli_config_path(const char *home, const char *explicit_path, char *out, size_t size)
{
	if (explicit_path)
		return cli_absolute(explicit_path, out, size);
	return snprintf(out, size, "%s/switchboard.yaml", home) < (int)size ? 0 : -1;
}

/* ---- init ---- */

static void cli_init_usage(FILE *f)
{
	fprintf(f, "usage: switchboard init\n\n"
	           "Creates the Switchboard home ($SWITCHBOARD_HOME, default ~/.switchboard):\n"
	           "  switchboard.yaml   a working default configuration (one agent, \"main\")\n"
	           "  gateway.token      the control-plane token (mode 0600)\n"
	           "  secrets/           a place for secret files used as ${file:secrets/NAME}\n"
	           "  workspaces/main/   the main agent's markdown (AGENTS.md, SOUL.md, ...)\n"
	           "                     as a git repository with a first commit\n"
	           "Files that exist are never overwritten, so it is safe to run again.\n");
}

/* The first port from want on that nothing holds on 127.0.0.1 (tried by
 * binding it), within a hundred; *taken says want itself was in use. 0
 * when none is free. */
static int cli_free_port(int want, bool *taken)
{
	*taken = false;
	for (int port = want; port < want + 100; port++) {
		struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1, ok;

		if (fd < 0)
			return want;
		a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
		close(fd);
		if (ok)
			return port;
		*taken = true;
	}
	return 0;
}

static int cli_write_token(const char *home, bool *created)
{
	unsigned char raw[CLI_TOKEN_BYTES];
	char hex[CLI_TOKEN_BYTES * 2 + 2], path[PATH_MAX + 64];
	int rc;

	*created = false;
	if (FMT(path, "%s/gateway.token", home) != SB_OK)
		return SB_ERR_TOOBIG;
	if (access(path, F_OK) == 0)
		return SB_OK;
	randombytes_buf(raw, sizeof raw);
	sodium_bin2hex(hex, sizeof hex - 1, raw, sizeof raw);
	sodium_memzero(raw, sizeof raw);
	hex[CLI_TOKEN_BYTES * 2] = '\n';
	hex[CLI_TOKEN_BYTES * 2 + 1] = '\0';
	rc = fs_write_new(path, hex, strlen(hex), 0600);
	sodium_memzero(hex, sizeof hex);
	*created = rc == SB_OK;
	return rc == SB_ERR_EXISTS ? SB_OK : rc;
}

int cli_init(int argc, char **argv)
{
	static const struct option opts[] = {{"help", no_argument, NULL, 'h'}, {0}};
	char home[PATH_MAX], path[PATH_MAX + 64];
	struct cfg_errors errs;
	struct config *cfg = NULL;
	bool token_created, taken = false;
	int c, rc = 1, wrc, port;

	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (c == 'h') {
			cli_init_usage(stdout);
			return 0;
		}
		cli_init_usage(stderr);
		return 2;
	}
	if (optind != argc) {
		cli_init_usage(stderr);
		return 2;
	}
	if (sodium_init() < 0 || cli_home(home, sizeof home))
		return 1;
	cfg_errors_init(&errs);
	if (fs_mkdirs(home, 0700)) {
		fprintf(stderr, "switchboard: cannot create %s: %s\n", home, strerror(errno));
		goto out;
	}
	printf("home: %s\n", home);
	snprintf(path, sizeof path, "%s/switchboard.yaml", home);
	port = access(path, F_OK) == 0 ? 0 : cli_free_port(8790, &taken);
	wrc = config_write_default(path, port);
	if (wrc && wrc != SB_ERR_EXISTS) {
		fprintf(stderr, "switchboard: cannot write %s: %s\n", path, sb_strerror(wrc));
		goto out;
	}
	printf("  %-18s %s\n", "switchboard.yaml", wrc == SB_ERR_EXISTS ? "kept" : "created");
	if (wrc == SB_OK && taken)
		printf("  %-18s 8790 is in use on 127.0.0.1 (another gateway?): this home listens "
		       "on %d (gateway.port)\n",
		       "port", port);
	else if (wrc == SB_OK && port <= 0)
		printf("  %-18s 8790 and the next hundred ports are in use: set gateway.port "
		       "before you start\n",
		       "port");
	if (cli_write_token(home, &token_created)) {
		fprintf(stderr, "switchboard: cannot write %s/gateway.token\n", home);
		goto out;
	}
	printf("  %-18s %s\n", "gateway.token", token_created ? "created (0600)" : "kept");
	snprintf(path, sizeof path, "%s/secrets", home);
	if (fs_mkdirs(path, 0700) || chmod(path, 0700) != 0) {
		fprintf(stderr, "switchboard: cannot create %s\n", path);
		goto out;
	}
	snprintf(path, sizeof path, "%s/switchboard.yaml", home);
	if (config_load(path, home, &cfg, &errs)) {
		cfg_errors_print(&errs, stderr);
		fprintf(stderr, "switchboard: %s has errors; fix them and run init again\n", path);
		goto out;
	}
	for (size_t i = 0; i < cfg->n_agents; i++) {
		const struct agent_config *a = &cfg->agents[i];
		size_t created = 0;
		char commit[41] = "", why[512] = "";

		snprintf(path, sizeof path, "%s/agents/%s/sessions", home, a->id);
		if (fs_mkdirs(path, 0700)) {
			fprintf(stderr, "switchboard: cannot create %s\n", path);
			goto out;
		}
		if (workspace_init(a->workspace, a->id, &created, commit, why, sizeof why)) {
			fprintf(stderr, "switchboard: cannot create the workspace %s: %s\n",
			        a->workspace, why);
			goto out;
		}
		printf("  %-18s %s (%zu file%s written%s%.12s)\n", a->id, a->workspace, created,
		       created == 1 ? "" : "s", commit[0] ? ", first commit " : "", commit);
	}
	printf("next: switchboard gateway   (or `make run` from the source tree)\n");
	rc = 0;
out:
	config_unref(cfg);
	cfg_errors_free(&errs);
	return rc;
}

/* ---- gateway ---- */

static void cli_gateway_usage(FILE *f)
{
	fprintf(
	    f,
	    "usage: switchboard gateway [--config FILE] [--port N]\n\n"
	    "Runs the gateway in the foreground until SIGTERM or Ctrl-C.\n"
	    "  -c, --config FILE  configuration file (default $SWITCHBOARD_HOME/switchboard.yaml)\n"
	    "  -p, --port N       listen on port N instead of gateway.port (1-65535)\n"
	    "SIGHUP (or saving the file) reloads the configuration.\n");
}

int cli_gateway(int argc, char **argv)
{
	static const struct option opts[] = {{"config", required_argument, NULL, 'c'},
	                                     {"port", required_argument, NULL, 'p'},
	                                     {"help", no_argument, NULL, 'h'},
	                                     {0}};
	char home[PATH_MAX], cfg_path[PATH_MAX];
	const char *explicit_cfg = NULL;
	struct daemon_options o;
	int64_t port = 0;
	int c;

	optind = 1;
	while ((c = getopt_long(argc, argv, "c:p:h", opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			explicit_cfg = optarg;
			break;
		case 'p':
			if (num_parse_i64(optarg, 1, 65535, &port)) {
				fprintf(stderr,
				        "switchboard gateway: --port wants a number from 1 "
				        "to 65535, got \"%s\"\n",
				        optarg);
				return 2;
			}
			break;
		case 'h':
			cli_gateway_usage(stdout);
			return 0;
		default:
			cli_gateway_usage(stderr);
			return 2;
		}
	}
	if (optind != argc) {
		cli_gateway_usage(stderr);
		return 2;
	}
	if (cli_home(home, sizeof home) ||
	    cli_config_path(home, explicit_cfg, cfg_path, sizeof cfg_path))
		return 1;
	if (access(cfg_path, R_OK) != 0) {
		fprintf(stderr,
		        "switchboard: no configuration at %s (%s)\n  run `switchboard init` "
		        "to create a home with a working default\n",
		        cfg_path, strerror(errno));
		return EX_CONFIG;
	}
	memset(&o, 0, sizeof o);
	o.home = home;
	o.config_path = cfg_path;
	o.port = (int)port;
	return daemon_run(&o);
}

/* ---- config ---- */

static void cli_config_usage(FILE *f)
{
	fprintf(f, "usage: switchboard config check [--config FILE]\n"
	           "       switchboard config schema\n\n"
	           "  check   validates the configuration and prints every problem as\n"
	           "          FILE:LINE:COL: KEY: what is wrong (hint: how to fix it)\n"
	           "  schema  prints the reference of every key (markdown)\n");
}

static int cli_config_check(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"config", required_argument, NULL, 'c'}, {"help", no_argument, NULL, 'h'}, {0}};
	char home[PATH_MAX], cfg_path[PATH_MAX];
	const char *explicit_cfg = NULL;
	struct cfg_errors errs;
	struct config *cfg = NULL;
	int c, rc;

	optind = 1;
	while ((c = getopt_long(argc, argv, "c:h", opts, NULL)) != -1) {
		if (c == 'c') {
			explicit_cfg = optarg;
		} else if (c == 'h') {
			cli_config_usage(stdout);
			return 0;
		} else {
			cli_config_usage(stderr);
			return 2;
		}
	}
	if (optind != argc) {
		cli_config_usage(stderr);
		return 2;
	}
	if (sodium_init() < 0 || cli_home(home, sizeof home) ||
	    cli_config_path(home, explicit_cfg, cfg_path, sizeof cfg_path))
		return 1;
	cfg_errors_init(&errs);
	rc = config_load(cfg_path, home, &cfg, &errs);
	if (rc) {
		cfg_errors_print(&errs, stderr);
		fprintf(stderr, "%zu error%s in %s\n", errs.n, errs.n == 1 ? "" : "s", cfg_path);
	} else {
		struct cfg_errors warns;

		cfg_errors_init(&warns);
		config_lint(cfg, &errs, &warns);
		if (warns.n) {
			cfg_errors_print(&warns, stderr);
			fprintf(stderr, "%zu warning%s in %s\n", warns.n, warns.n == 1 ? "" : "s",
			        cfg_path);
		}
		if (errs.n) {
			cfg_errors_print(&errs, stderr);
			fprintf(stderr, "%zu error%s in %s\n", errs.n, errs.n == 1 ? "" : "s",
			        cfg_path);
			rc = SB_ERR_CONFIG;
		} else {
			printf("ok: %s (%zu agent%s%s)\n", cfg_path, cfg->n_agents,
			       cfg->n_agents == 1 ? "" : "s", warns.n ? ", with warnings" : "");
		}
		cfg_errors_free(&warns);
	}
	config_unref(cfg);
	cfg_errors_free(&errs);
	return rc ? 1 : 0;
}

int cli_config(int argc, char **argv)
{
	if (argc < 2) {
		cli_config_usage(stderr);
		return 2;
	}
	if (strcmp(argv[1], "check") == 0)
		return cli_config_check(argc - 1, argv + 1);
	if (strcmp(argv[1], "schema") == 0) {
		if (argc > 2 && (strcmp(argv[2], "-h") == 0 || strcmp(argv[2], "--help") == 0)) {
			cli_config_usage(stdout);
			return 0;
		}
		if (argc != 2) {
			cli_config_usage(stderr);
			return 2;
		}
		config_print_reference(stdout);
		return 0;
	}
	if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
		cli_config_usage(stdout);
		return 0;
	}
	fprintf(stderr, "switchboard config: unknown subcommand \"%s\"\n", argv[1]);
	cli_config_usage(stderr);
	return 2;
}
