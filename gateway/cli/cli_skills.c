/*
 * cli_skills.c - `switchboard skills list [AGENT]`: each skill an agent
 * would see, read from the configuration and the workspace as a session
 * would (workspaces/skills.h): its name, where it comes from (the
 * workspace or the gateway home's shared skills/), and whether it is in
 * the prompt, with the gates that failed, the skill that shadows it, or
 * why it cannot be read.
 *
 * Blocking (CLI only).
 */
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agents/safety/spawn.h"
#include "gateway/cli/cli.h"
#include "gateway/config/config.h"
#include "gateway/core/err.h"
#include "gateway/core/fmt.h"
#include "workspaces/skills.h"

static void cli_skills_usage(FILE *f)
{
	fprintf(f,
	        "usage: switchboard skills list [--json] [--config FILE] [AGENT]\n\n"
	        "  list  each skill of the agent (every agent without AGENT): its name, where it\n"
	        "        comes from (workspace: <workspace>/skills/, home: $SWITCHBOARD_HOME/\n"
	        "        skills/), and its state: ready (listed in the prompt), gated (the\n"
	        "        gates that failed), shadowed (the workspace has one of that name) or\n"
	        "        broken (why it cannot be read)\n"
	        "  --json              one JSON object per agent\n"
	        "  -c, --config FILE   configuration file (default "
	        "$SWITCHBOARD_HOME/switchboard.yaml)\n");
}

static const char *cli_skill_state(const struct skill *sk)
{
	if (sk->error)
		return "broken";
	if (sk->shadowed)
		return "shadowed";
	return sk->eligible ? "ready" : "gated";
}

static int cli_skills_agent(const struct agent_config *a, const char *home_skills, bool json)
{
	struct skills_env e = {.workspace = a->workspace, .home = home_skills, .path = SPAWN_PATH};
	char ws[PATH_MAX];
	struct skill_list l;
	json_t *arr = NULL;

	if (!realpath(a->workspace, ws)) {
		fprintf(stderr, "switchboard skills: agent %s: the workspace %s does not exist\n",
		        a->id, a->workspace);
		return 1;
	}
	e.workspace = ws;
	if (skills_scan(&e, &l) != SB_OK) {
		fprintf(stderr, "switchboard skills: out of memory\n");
		return 1;
	}
	if (json)
		arr = json_array();
	else
		printf("agent %s (workspace %s)\n", a->id, ws);
	if (!json && l.n == 0)
		printf("  no skills (add %s/skills/<name>/SKILL.md, or %s/<name>/SKILL.md for "
		       "every agent)\n",
		       ws, home_skills);
	for (size_t i = 0; i < l.n; i++) {
		const struct skill *sk = &l.v[i];
		const char *state = cli_skill_state(sk);

		if (json) {
			json_t *o =
			    json_pack("{s:s,s:s,s:s,s:b,s:I}", "name", sk->name, "source",
			              skill_source_name(sk->source), "state", state, "eligible",
			              sk->eligible && !sk->shadowed && !sk->error, "patches",
			              (json_int_t)sk->patches);

			if (o && sk->description)
				json_object_set_new(o, "description", json_string(sk->description));
			if (o && sk->failed)
				json_object_set_new(o, "failed", json_string(sk->failed));
			if (o && sk->error)
				json_object_set_new(o, "error", json_string(sk->error));
			if (o)
				json_array_append_new(arr, o);
			continue;
		}
		printf("  %-24s %-9s %-8s", sk->name, skill_source_name(sk->source), state);
		if (sk->error)
			printf(" %s", sk->error);
		else if (sk->shadowed)
			printf(" (the workspace's %s is used)", sk->name);
		else if (sk->failed)
			printf(" failed: %s", sk->failed);
		else
			printf(" %.100s%s", sk->description,
			       strlen(sk->description) > 100 ? "..." : "");
		if (sk->patches && !sk->error)
			printf(" [%lld patch%s]", (long long)sk->patches,
			       sk->patches == 1 ? "" : "es");
		putchar('\n');
	}
	if (l.left_out && !json)
		printf("  (%zu more folders not looked at: at most %d per source)\n", l.left_out,
		       SKILLS_SCAN_MAX);
	if (json) {
		json_t *o = json_pack("{s:s,s:s,s:o}", "agent", a->id, "workspace", ws, "skills",
		                      arr ? arr : json_array());
		char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;

		if (s)
			printf("%s\n", s);
		free(s);
		json_decref(o);
	}
	skill_list_free(&l);
	return 0;
}

static int cli_skills_list(int argc, char **argv)
{
	static const struct option opts[] = {{"json", no_argument, NULL, 'j'},
	                                     {"config", required_argument, NULL, 'c'},
	                                     {"help", no_argument, NULL, 'h'},
	                                     {0}};
	const char *explicit_cfg = NULL, *agent = NULL;
	char home[PATH_MAX], cfg_path[PATH_MAX], home_skills[PATH_MAX + 16];
	struct cfg_errors errs;
	struct config *cfg = NULL;
	bool json = false;
	int c, code = 0;

	optind = 1;
	while ((c = getopt_long(argc, argv, "jc:h", opts, NULL)) != -1) {
		switch (c) {
		case 'j':
			json = true;
			break;
		case 'c':
			explicit_cfg = optarg;
			break;
		case 'h':
			cli_skills_usage(stdout);
			return 0;
		default:
			cli_skills_usage(stderr);
			return 2;
		}
	}
	if (optind < argc - 1) {
		fprintf(stderr, "switchboard skills list: give at most one agent id\n");
		cli_skills_usage(stderr);
		return 2;
	}
	if (optind == argc - 1)
		agent = argv[optind];
	if (sodium_init() < 0 || cli_home(home, sizeof home) ||
	    cli_config_path(home, explicit_cfg, cfg_path, sizeof cfg_path))
		return 1;
	cfg_errors_init(&errs);
	if (config_load(cfg_path, home, &cfg, &errs)) {
		cfg_errors_print(&errs, stderr);
		fprintf(stderr, "switchboard: cannot load %s (run `switchboard init` first?)\n",
		        cfg_path);
		cfg_errors_free(&errs);
		return 1;
	}
	cfg_errors_free(&errs);
	if (FMT(home_skills, "%s/" SKILLS_DIR, cfg->home) != SB_OK) {
		config_unref(cfg);
		return 1;
	}
	if (agent) {
		const struct agent_config *a = config_agent(cfg, agent);

		if (!a) {
			fprintf(stderr, "switchboard skills: no agent \"%s\" in %s\n", agent,
			        cfg_path);
			config_unref(cfg);
			return 1;
		}
		code = cli_skills_agent(a, home_skills, json);
	} else {
		for (size_t i = 0; i < cfg->n_agents; i++)
			if (cli_skills_agent(&cfg->agents[i], home_skills, json))
				code = 1;
	}
	config_unref(cfg);
	return code;
}

int cli_skills(int argc, char **argv)
{
	if (argc < 2) {
		cli_skills_usage(stderr);
		return 2;
	}
	if (strcmp(argv[1], "list") == 0)
		return cli_skills_list(argc - 1, argv + 1);
	if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
		cli_skills_usage(stdout);
		return 0;
	}
	fprintf(stderr, "switchboard skills: unknown subcommand \"%s\"\n", argv[1]);
	cli_skills_usage(stderr);
	return 2;
}
