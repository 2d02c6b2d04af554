/*
 * cli_doctor.h - the parts of `switchboard doctor` shared by its files
 * (cli_doctor.c: the local checks; cli_doctor_net.c: the providers).
 */
#ifndef SB_GATEWAY_CLI_DOCTOR_H
#define SB_GATEWAY_CLI_DOCTOR_H

#include <jansson.h>

struct config;

/* The default time a provider check may take, in milliseconds. */
#define DOCTOR_PROVIDER_TIMEOUT_MS 5000

/* Prints one finding: "LEVEL  AREA: TEXT", or with --json one object a
 * line {"level", "area", "text"} plus the members of extra (borrowed; may
 * be NULL). */
void doctor_finding(const char *level, const char *area, const char *text, const json_t *extra);

/* Checks that every configured provider is reachable and takes its key
 * (one request each, concurrently, each within timeout_ms) and prints a
 * finding per provider. Blocks for at most about timeout_ms. Returns 1
 * when one is unreachable or rejects its key, else 0. */
int doctor_providers(const struct config *cfg, long timeout_ms);

#endif
