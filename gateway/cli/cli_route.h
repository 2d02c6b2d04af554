/*
 * cli_route.h - the routing and pairing subcommands:
 *
 *   switchboard route ...            explain where a message would go
 *   switchboard bindings [--json]    the compiled table in precedence order
 *   switchboard pairing list|approve|deny ...
 *
 * Same contract as cli.h: argv[0] is the command name; the return value is
 * the exit code (0 success, 1 failure, 2 misuse after printing usage).
 */
#ifndef SB_GATEWAY_CLI_ROUTE_H
#define SB_GATEWAY_CLI_ROUTE_H

int cli_route(int argc, char **argv);
int cli_bindings(int argc, char **argv);
int cli_pairing(int argc, char **argv);

#endif
