/*
 * cron_config.h - cron jobs declared in the config file (top-level `cron`
 * list) and the checks of the scheduling keys (job definitions, heartbeat
 * time zones and targets) that need the time zone database.
 */
#ifndef SB_GATEWAY_CRON_CONFIG_H
#define SB_GATEWAY_CRON_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "gateway/core/cfg.h"
#include "gateway/cron/cron.h"

struct agent_config;

struct cron_delivery_config {
	int mode; /* enum cron_delivery */
	char *channel;
	char *to;
	char *account;
};

/* One element of `cron`, as the walker fills it. */
struct cron_job_config {
	char *id;
	char *agent;
	char *at;
	int64_t every_ms;
	char *anchor;
	char *cron;
	char *tz;
	int session; /* enum cron_session */
	char *payload;
	bool enabled;
	bool delete_after_run;
	struct cron_delivery_config delivery;
};

extern const struct cfg_section cron_job_config_section;

/* The job as a definition (out zeroed first; release it either way).
 * SB_ERR_INVAL with err filled when it does not hold together. */
int cron_job_config_spec(const struct cron_job_config *c, struct cron_spec *out, char *err,
                         size_t err_size);

/* Checks the list (unique ids, agents that exist, schedules) and every
 * agent's heartbeat (time zone, target); adds errors to ctx under the
 * root section and returns how many. */
int cron_config_check(const struct cron_job_config *jobs, size_t n_jobs,
                      const struct agent_config *agents, size_t n_agents,
                      struct cfg_error_ctx *ctx);

#endif
