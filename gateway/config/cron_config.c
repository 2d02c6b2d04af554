/*
 * cron_config.c - see cron_config.h.
 */
#include "gateway/config/cron_config.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "agents/agent_config.h"
#include "gateway/core/err.h"

static const char *const cron_config_sessions[] = {"isolated", "main", NULL};
static const char *const cron_config_modes[] = {"none", "announce", "webhook", NULL};

static const struct cfg_key cron_delivery_keys[] = {
    {
        .name = "mode",
        .type = CFG_ENUM,
        .offset = offsetof(struct cron_delivery_config, mode),
        .choices = cron_config_modes,
        .def = "none",
        .doc = "`none` (the reply stays in the transcript), `announce` (to a channel "
               "target, or `last`) or `webhook` (a signed POST to a callback hook's URL, "
               "through the outbox).",
    },
    {
        .name = "channel",
        .type = CFG_STRING,
        .offset = offsetof(struct cron_delivery_config, channel),
        .min = 1,
        .max = 64,
        .doc = "announce: a channel name, or `last` (where the agent last talked).",
    },
    {
        .name = "to",
        .type = CFG_STRING,
        .offset = offsetof(struct cron_delivery_config, to),
        .min = 1,
        .max = 2048,
        .doc = "announce: the channel's target (chat id, webchat session key, ...); "
               "webhook: the name of a hook under `channels.webhook` in callback mode.",
    },
    {
        .name = "account",
        .type = CFG_STRING,
        .offset = offsetof(struct cron_delivery_config, account),
        .min = 1,
        .max = 64,
        .doc = "announce: the channel account (default `default`).",
    },
};

static const struct cfg_section cron_delivery_section = {
    .name = "delivery",
    .size = sizeof(struct cron_delivery_config),
    .keys = cron_delivery_keys,
    .nkeys = sizeof cron_delivery_keys / sizeof cron_delivery_keys[0],
    .doc = "Where the run's reply goes.",
};

static int cron_job_config_check(void *obj, struct cfg_error_ctx *ctx)
{
	const struct cron_job_config *c = obj;
	struct cron_spec s;
	char err[256];
	int rc;

	if (!c->id || !c->payload)
		return 0; /* reported as missing already */
	rc = cron_job_config_spec(c, &s, err, sizeof err);
	cron_spec_release(&s);
	if (rc == SB_OK)
		return 0;
	{
		/* Messages start with the key they are about ("cron: ..."). */
		char key[64] = "";
		size_t n = strcspn(err, ": ");

		if (n < sizeof key && err[n] == ':' && err[n + 1] == ' ') {
			memcpy(key, err, n);
			key[n] = '\0';
		}
		cfg_error_add(ctx, key[0] ? key : NULL, NULL, "%s", key[0] ? err + n + 2 : err);
	}
	return 1;
}

static const struct cfg_key cron_job_keys[] = {
    {
        .name = "id",
        .type = CFG_STRING,
        .offset = offsetof(struct cron_job_config, id),
        .min = 1,
        .max = CRON_ID_MAX,
        .flags = CFG_REQUIRED,
        .doc = "The job's name in the CLI, logs and run history; unique.",
    },
    {
        .name = "agent",
        .type = CFG_STRING,
        .offset = offsetof(struct cron_job_config, agent),
        .min = 1,
        .max = 64,
        .doc = "The agent that runs the job. Default: the default agent.",
    },
    {
        .name = "at",
        .type = CFG_STRING,
        .offset = offsetof(struct cron_job_config, at),
        .min = 1,
        .max = 64,
        .doc = "Run once at this ISO 8601 time (`2026-03-08T09:30:00Z`; without an "
               "offset, in `tz`, else UTC).",
    },
    {
        .name = "every",
        .type = CFG_DURATION,
        .offset = offsetof(struct cron_job_config, every_ms),
        .min = 0,
        .max = 366LL * 86400000,
        .def = "0",
        .doc = "Run at this interval (at least 1s), counted from `anchor`.",
    },
    {
        .name = "anchor",
        .type = CFG_STRING,
        .offset = offsetof(struct cron_job_config, anchor),
        .min = 1,
        .max = 64,
        .doc = "every: the ISO 8601 time the intervals count from. Default: when the job "
               "was first seen.",
    },
    {
        .name = "cron",
        .type = CFG_STRING,
        .offset = offsetof(struct cron_job_config, cron),
        .min = 1,
        .max = 256,
        .doc = "A 5-field cron expression (`minute hour day-of-month month "
               "day-of-week`), in `tz`. When day-of-month and day-of-week are both "
               "restricted, either may match.",
    },
    {
        .name = "tz",
        .type = CFG_STRING,
        .offset = offsetof(struct cron_job_config, tz),
        .min = 1,
        .max = 128,
        .doc = "The IANA time zone of `cron` (and of `at` without an offset). Default: "
               "the host's zone.",
    },
    {
        .name = "session",
        .type = CFG_ENUM,
        .offset = offsetof(struct cron_job_config, session),
        .choices = cron_config_sessions,
        .def = "isolated",
        .doc = "`isolated`: a fresh session `agent:<agent>:cron:<id>` for each run; "
               "`main`: a system event in the agent's main session.",
    },
    {
        .name = "payload",
        .type = CFG_STRING,
        .offset = offsetof(struct cron_job_config, payload),
        .min = 1,
        .max = CRON_PAYLOAD_MAX,
        .flags = CFG_REQUIRED,
        .doc = "The text the agent gets.",
    },
    {
        .name = "enabled",
        .type = CFG_BOOL,
        .offset = offsetof(struct cron_job_config, enabled),
        .def = "true",
        .doc = "A disabled job is kept but never runs on its own.",
    },
    {
        .name = "delete_after_run",
        .type = CFG_BOOL,
        .offset = offsetof(struct cron_job_config, delete_after_run),
        .def = "false",
        .doc = "at: forget the job after its run (jobs added through the control plane "
               "only; a job in this file stays until it is removed from it).",
    },
    {
        .name = "delivery",
        .type = CFG_SECTION,
        .offset = offsetof(struct cron_job_config, delivery),
        .section = &cron_delivery_section,
        .doc = "Where the reply goes.",
    },
};

const struct cfg_section cron_job_config_section = {
    .name = "cron job",
    .size = sizeof(struct cron_job_config),
    .keys = cron_job_keys,
    .nkeys = sizeof cron_job_keys / sizeof cron_job_keys[0],
    .check = cron_job_config_check,
    .doc = "One entry of the `cron` list: a scheduled agent turn (docs/scheduling.md). "
           "Give exactly one of `at`, `every` and `cron`.",
};

int cron_job_config_spec(const struct cron_job_config *c, struct cron_spec *out, char *err,
                         size_t err_size)
{
	json_t *o =
	    json_pack("{ss? ss? ss? ss? ss? ss? ss? sb sb}", "id", c->id, "agent", c->agent, "at",
	              c->at, "anchor", c->anchor, "cron", c->cron, "tz", c->tz, "payload",
	              c->payload, "enabled", c->enabled, "delete_after_run", c->delete_after_run);
	json_t *del;
	int rc;

	memset(out, 0, sizeof *out);
	if (!o)
		return SB_ERR_NOMEM;
	json_object_set_new(o, "session",
	                    json_string(c->session == CRON_SESSION_MAIN ? "main" : "isolated"));
	if (c->every_ms > 0)
		json_object_set_new(o, "every", json_integer(c->every_ms));
	del = json_pack("{ss ss? ss? ss?}", "mode",
	                cron_delivery_name((enum cron_delivery)c->delivery.mode), "channel",
	                c->delivery.channel, "to", c->delivery.to, "account", c->delivery.account);
	if (del)
		json_object_set_new(o, "delivery", del);
	rc = cron_spec_from_json(o, out, err, err_size);
	json_decref(o);
	return rc;
}

int cron_config_check(const struct cron_job_config *jobs, size_t n_jobs,
                      const struct agent_config *agents, size_t n_agents, struct cfg_error_ctx *ctx)
{
	char key[96];
	int added = 0;

	for (size_t i = 0; i < n_jobs; i++) {
		bool known = !jobs[i].agent;

		for (size_t j = 0; jobs[i].id && j < i; j++)
			if (jobs[j].id && strcmp(jobs[j].id, jobs[i].id) == 0) {
				snprintf(key, sizeof key, "cron[%zu].id", i);
				cfg_error_add(ctx, key, "give each job its own id",
				              "duplicate job id \"%s\" (also cron[%zu].id)",
				              jobs[i].id, j);
				added++;
				break;
			}
		for (size_t k = 0; !known && k < n_agents; k++)
			known = agents[k].id && strcmp(agents[k].id, jobs[i].agent) == 0;
		if (!known) {
			snprintf(key, sizeof key, "cron[%zu].agent", i);
			cfg_error_add(ctx, key, "name an agent from the agents list",
			              "unknown agent \"%s\"", jobs[i].agent);
			added++;
		}
	}
	for (size_t i = 0; i < n_agents; i++) {
		const struct agent_heartbeat_config *h = &agents[i].heartbeat;
		const struct cron_tz *z;

		if (h->active_hours.timezone &&
		    cron_tz_get(h->active_hours.timezone, &z) != SB_OK) {
			snprintf(key, sizeof key, "agents[%zu].heartbeat.active_hours.timezone", i);
			cfg_error_add(ctx, key,
			              "use local, UTC or an IANA name such as Europe/Berlin",
			              "unknown time zone \"%s\"", h->active_hours.timezone);
			added++;
		}
		if (agents[i].timezone && cron_tz_get(agents[i].timezone, &z) != SB_OK) {
			snprintf(key, sizeof key, "agents[%zu].timezone", i);
			cfg_error_add(ctx, key,
			              "use local, UTC or an IANA name such as Europe/Berlin",
			              "unknown time zone \"%s\"", agents[i].timezone);
			added++;
		}
		if (h->target && strcmp(h->target, "none") != 0 && strcmp(h->target, "last") != 0 &&
		    !h->to) {
			snprintf(key, sizeof key, "agents[%zu].heartbeat.to", i);
			cfg_error_add(ctx, key, "give the channel's target, or use target: last",
			              "a heartbeat target channel needs \"to\"");
			added++;
		}
	}
	return added;
}
