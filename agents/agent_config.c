/*
 * agent_config.c - the schema of one entry of the top-level `agents` list.
 *
 * Cross-agent rules (unique ids, one default) live with the list, in the
 * gateway's root section check; the workspace default (workspaces/<id>)
 * needs the home directory and is filled in by config.c.
 */
#include "agents/agent_config.h"

#include <stddef.h>
#include <string.h>

/* [a-z0-9][a-z0-9_-]{0,63}; the length is bounded by the key's max. */
static const char *agent_config_check_id(const void *field)
{
	const char *id = *(char *const *)field;

	if (!id || !*id)
		return "must not be empty";
	if (!((id[0] >= 'a' && id[0] <= 'z') || (id[0] >= '0' && id[0] <= '9')))
		return "must match [a-z0-9][a-z0-9_-]{0,63}";
	for (const char *p = id + 1; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_' ||
		      *p == '-'))
			return "must match [a-z0-9][a-z0-9_-]{0,63}";
	return NULL;
}

static const struct cfg_key agent_config_keys[] = {
    {
        .name = "id",
        .type = CFG_STRING,
        .offset = offsetof(struct agent_config, id),
        .min = 1,
        .max = 64,
        .flags = CFG_REQUIRED,
        .validate = agent_config_check_id,
        .doc = "The agent's name in bindings, session keys, the CLI and logs. Lower-case "
               "letters, digits, `_` and `-`, starting with a letter or digit; unique.",
        .hint = "use lower-case letters, digits, \"_\" and \"-\", starting with a letter or "
                "digit",
    },
    {
        .name = "workspace",
        .type = CFG_STRING,
        .offset = offsetof(struct agent_config, workspace),
        .min = 1,
        .max = 4096,
        .doc = "The agent's workspace directory (AGENTS.md, SOUL.md, ...). A relative path "
               "is resolved against the home directory. Default: `workspaces/<id>` under "
               "the home directory.",
    },
    {
        .name = "model",
        .type = CFG_STRING,
        .offset = offsetof(struct agent_config, model),
        .min = 1,
        .max = 256,
        .doc = "The model, as `provider/model`. Unset until a provider is configured.",
    },
    {
        .name = "default",
        .type = CFG_BOOL,
        .offset = offsetof(struct agent_config, is_default),
        .def = "false",
        .doc = "Receives messages that no binding routes elsewhere. At most one agent "
               "may be the default; with a single agent, it is the default anyway.",
    },
};

const struct cfg_section agent_config_section = {
    .name = "agent",
    .size = sizeof(struct agent_config),
    .keys = agent_config_keys,
    .nkeys = sizeof agent_config_keys / sizeof agent_config_keys[0],
    .doc = "One entry of the `agents` list: an agent with its own workspace, sessions and "
           "transcripts.",
};
