/*
 * cli.h - the switchboard subcommands. Each takes the arguments after its
 * name (argv[0] is the command name) and returns the process exit code:
 * 0 success, 1 failure, 2 misuse (after printing usage to stderr).
 */
#ifndef SB_GATEWAY_CLI_H
#define SB_GATEWAY_CLI_H

#include <stddef.h>

int cli_init(int argc, char **argv);
int cli_gateway(int argc, char **argv);
int cli_config(int argc, char **argv);
int cli_agent(int argc, char **argv);
int cli_workspace(int argc, char **argv); /* cli_workspace.c */
/* `switchboard skills` (gateway/cli/cli_skills.c). */
int cli_skills(int argc, char **argv);
/* `switchboard doctor` (gateway/cli/cli_doctor.c). */
int cli_doctor(int argc, char **argv);

/* `switchboard eval` (gateway/cli/cli_eval.c). */
int cli_eval(int argc, char **argv);

/* `switchboard logs` (gateway/cli/cli_logs.c). */
int cli_logs(int argc, char **argv);

/* Resolves $SWITCHBOARD_HOME (default ~/.switchboard) to an absolute path.
 * Returns 0, or -1 after printing why. */
int cli_home(char *out, size_t size);

/* The config file: explicit (made absolute) or <home>/switchboard.yaml. */
int cli_config_path(const char *home, const char *explicit_path, char *out, size_t size);

#endif
