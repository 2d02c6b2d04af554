/*
 * agent_config.h - the keys the agent runtime reads for each agent.
 */
#ifndef SB_AGENTS_AGENT_CONFIG_H
#define SB_AGENTS_AGENT_CONFIG_H

#include <stdbool.h>

#include "gateway/core/cfg.h"

struct agent_config {
	char *id;        /* [a-z0-9][a-z0-9_-]{0,63} */
	char *workspace; /* directory; relative to the home; default workspaces/<id> */
	char *model;     /* provider/model; empty until a provider is configured */
	bool is_default; /* YAML key "default" */
};

/* The schema of one element of the top-level `agents` list. */
extern const struct cfg_section agent_config_section;

#endif
