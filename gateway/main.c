/*
 * main.c - the switchboard command line: finds the verb and dispatches.
 * No feature lives here.
 */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "gateway/cli/cli.h"
#include "gateway/core/cfg.h"
#include "gateway/core/crash.h"
#include "gateway/cli/cli_ctl.h"
#include "gateway/cli/cli_route.h"

struct main_command {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *summary;
};

static int main_version(int argc, char **argv)
{
	(void)argv;
	if (argc > 1 && strcmp(argv[1], "--help") != 0 && strcmp(argv[1], "-h") != 0) {
		fprintf(stderr, "usage: switchboard version\n");
		return 2;
	}
	printf("switchboard %s\n", SB_VERSION);
	return 0;
}

static const struct main_command main_commands[] = {
    {"init", cli_init, "create the home with a default config and the main workspace"},
    {"gateway", cli_gateway, "run the gateway in the foreground"},
    {"config", cli_config, "check the configuration, or print its reference"},
    {"agent", cli_agent, "run one agent turn from the command line"},
    {"route", cli_route, "explain which agent and session a message would reach, and why"},
    {"bindings", cli_bindings, "list the routing table in precedence order"},
    {"pairing", cli_pairing, "list, approve or deny pending pairing codes"},
    {"status", cli_status, "ask the running gateway how it is"},
    {"chat", cli_chat, "chat with an agent through the running gateway"},
    {"send", cli_send, "send one message to an agent and print the reply"},
    {"prompt", cli_prompt, "print what the next turn would send to the model"},
    {"sessions", cli_sessions, "list sessions, or show one with its history"},
    {"devices", cli_devices, "list, approve or revoke control-plane devices"},
    {"eval", cli_eval, "run an agent's golden cases (evals/*.yaml) and report which held"},
    {"workspace", cli_workspace, "show, log or create an agent's workspace versions"},
    {"skills", cli_skills, "list an agent's skills, where each comes from, and its gates"},
    {"cron", cli_cron, "list, add, remove or run scheduled jobs, and show their runs"},
    {"dashboard", cli_dashboard, "open the web UI, signed in with a one-time code"},
    {"approvals", cli_approvals, "list, approve or deny tool calls waiting for the operator"},
    {"logs", cli_logs, "print the gateway's log file, or follow it (-f); --json for fields"},
    {"doctor", cli_doctor, "check the sandbox, permissions, workspaces, port and providers"},
    {"version", main_version, "print the version"},
};

static void main_usage(FILE *f)
{
	fprintf(f, "usage: switchboard <command> [options]\n\ncommands:\n");
	for (size_t i = 0; i < sizeof main_commands / sizeof *main_commands; i++)
		fprintf(f, "  %-10s %s\n", main_commands[i].name, main_commands[i].summary);
	fprintf(f, "\n`switchboard <command> --help` describes each command.\n"
	           "The home is $SWITCHBOARD_HOME (default ~/.switchboard).\n");
}

int main(int argc, char **argv)
{
	/* Everything Switchboard creates (the home, its config, token, store,
	 * transcripts, logs) is the operator's alone, whatever the umask it
	 * was started with; commands inherit it too. */
	umask(077);
	SB_CRASH_ARM();
	if (argc < 2) {
		main_usage(stderr);
		return 2;
	}
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
	    strcmp(argv[1], "help") == 0) {
		main_usage(stdout);
		return 0;
	}
	if (strcmp(argv[1], "--version") == 0)
		return main_version(1, argv + 1);
	for (size_t i = 0; i < sizeof main_commands / sizeof *main_commands; i++)
		if (strcmp(argv[1], main_commands[i].name) == 0)
			return main_commands[i].run(argc - 1, argv + 1);
	{
		const char *names[sizeof main_commands / sizeof *main_commands];
		const char *pick;

		for (size_t i = 0; i < sizeof main_commands / sizeof *main_commands; i++)
			names[i] = main_commands[i].name;
		pick = cfg_closest(argv[1], names, sizeof names / sizeof *names);
		if (pick) {
			fprintf(stderr,
			        "switchboard: unknown command \"%s\" (did you mean \"%s\"?)\n"
			        "`switchboard --help` lists the commands.\n",
			        argv[1], pick);
			return 2;
		}
	}
	fprintf(stderr, "switchboard: unknown command \"%s\"\n\n", argv[1]);
	main_usage(stderr);
	return 2;
}
