/*
 * cli_doctor.c - `switchboard doctor`: checks what the gateway's safety
 * depends on and says what is wrong, one finding a line:
 *
 *   ok|warn|fail  AREA: what was found (and what to do)
 *
 * The sandbox: is bubblewrap installed, can it build a sandbox here (user
 * namespaces), which agents run their tools without one. The permission
 * setup: approvals that cannot reach the operator. Exit code 0 when
 * nothing failed, 1 when something did (a sandboxed agent on a host where
 * the sandbox does not work), 2 misuse.
 */
#include <getopt.h>
#include <limits.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "agents/safety/sandbox.h"
#include "gateway/cli/cli.h"
#include "gateway/config/config.h"
#include "gateway/core/err.h"

static void doctor_usage(FILE *f)
{
	fprintf(f, "usage: switchboard doctor [--config FILE]\n\n"
	           "Checks the sandbox (bubblewrap, user namespaces) and the permission\n"
	           "settings of every agent, one finding a line. Exit code 1 when an agent's\n"
	           "tools could not run safely here.\n");
}

static void doctor_line(const char *level, const char *area, const char *text)
{
	printf("%-4s  %s: %s\n", level, area, text);
}

int cli_doctor(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"config", required_argument, NULL, 'c'}, {"help", no_argument, NULL, 'h'}, {0}};
	char home[PATH_MAX], cfg_path[PATH_MAX], bwrap[PATH_MAX], why[1024], line[PATH_MAX + 1400];
	const char *explicit_cfg = NULL;
	struct cfg_errors errs;
	struct config *cfg = NULL;
	struct sandbox_policy probe;
	int c, failed = 0, sandbox_rc;

	optind = 1;
	while ((c = getopt_long(argc, argv, "c:h", opts, NULL)) != -1) {
		if (c == 'c') {
			explicit_cfg = optarg;
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
	config_unref(cfg);
	return failed;
}
