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

static const char *const agent_queue_modes[] = {"steer", "followup", "collect", "interrupt",
                                                NULL};
static const char *const agent_queue_drops[] = {"oldest", "newest", NULL};
/* In the order of enum perm_profile and enum sandbox_mode. */
static const char *const agent_profiles[] = {"inherit", "minimal", "messaging", "coding", "full",
                                             NULL};
static const char *const agent_sandboxes[] = {"read-only", "workspace-write", "full", NULL};

static const char *agent_config_check_profile(const void *field)
{
	return *(const int *)field == 0 ? "must be minimal, messaging, coding or full" : NULL;
}

const char *agent_queue_mode_name(int mode)
{
	return mode >= 0 && mode < 4 ? agent_queue_modes[mode] : "unknown";
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
    {
        .name = "fallbacks",
        .type = CFG_STRING_LIST,
        .offset = offsetof(struct agent_config, fallbacks),
        .count_offset = offsetof(struct agent_config, n_fallbacks),
        .min = 0,
        .max = 8,
        .doc = "More `provider/model` names, tried in order when the model fails "
               "after its retries (or its provider is cooling down).",
    },
    {
        .name = "max_turns",
        .type = CFG_INT,
        .offset = offsetof(struct agent_config, max_turns),
        .min = 1,
        .max = 1000,
        .def = "25",
        .doc = "The most model calls one run may make before it stops with "
               "`max_turns`.",
    },
    {
        .name = "budget",
        .type = CFG_INT,
        .offset = offsetof(struct agent_config, budget),
        .min = 1,
        .max = 10000,
        .def = "60",
        .doc = "Iterations one run may spend, shared with the runs it starts; when "
               "it is spent the model gets one last call to wrap up.",
    },
    {
        .name = "tools",
        .type = CFG_STRING_LIST,
        .offset = offsetof(struct agent_config, tools),
        .count_offset = offsetof(struct agent_config, n_tools),
        .min = 0,
        .max = 64,
        .doc = "The tools the agent may use, by name. Absent or empty: all of `read`, "
               "`write`, `edit`, `ls`, `glob`, `grep`, `bash`, `message`.",
    },
    {
        .name = "tool_timeout",
        .type = CFG_DURATION,
        .offset = offsetof(struct agent_config, tool_timeout_ms),
        .min = 100,
        .max = 3600000,
        .def = "120s",
        .doc = "The default time limit of one tool call (a `bash` command may ask "
               "for less).",
    },
    {
        .name = "run_timeout",
        .type = CFG_DURATION,
        .offset = offsetof(struct agent_config, run_timeout_ms),
        .min = 1000,
        .max = 86400000,
        .def = "10m",
        .doc = "The longest one run may take; past it the run is aborted and the "
               "session's queue moves on.",
    },
    {
        .name = "queue_mode",
        .type = CFG_ENUM,
        .offset = offsetof(struct agent_config, queue_mode),
        .choices = agent_queue_modes,
        .def = "steer",
        .doc = "What happens to a message that arrives while the session's run is "
               "busy: `steer` (it joins the running turn at its next model call), "
               "`followup` (it gets a turn of its own after), `collect` (everything "
               "that waited becomes one next turn), `interrupt` (the running turn "
               "is aborted and the newest message runs).",
    },
    {
        .name = "queue_cap",
        .type = CFG_INT,
        .offset = offsetof(struct agent_config, queue_cap),
        .min = 1,
        .max = 10000,
        .def = "20",
        .doc = "The most messages that may wait for one session; past it "
               "`queue_drop` decides which one is dropped (it is marked done "
               "without a reply, and counted).",
    },
    {
        .name = "queue_drop",
        .type = CFG_ENUM,
        .offset = offsetof(struct agent_config, queue_drop),
        .choices = agent_queue_drops,
        .def = "oldest",
        .doc = "Which waiting message is dropped when the queue is full: `oldest` "
               "or `newest`.",
    },
    {
        .name = "profile",
        .type = CFG_ENUM,
        .offset = offsetof(struct agent_config, profile),
        .choices = agent_profiles,
        .def = "coding",
        .validate = agent_config_check_profile,
        .doc = "The tools the agent may use (docs/security.md): `minimal` (read, ls, glob, "
               "grep), `messaging` (those and message), `coding` (every built-in tool; "
               "others than the operator need approval to change files or run commands "
               "that do more than read) or `full` (every tool; no default approvals).",
    },
    {
        .name = "sandbox",
        .type = CFG_ENUM,
        .offset = offsetof(struct agent_config, sandbox),
        .choices = agent_sandboxes,
        .def = "workspace-write",
        .doc = "Where the agent's commands run (bubblewrap): `read-only` (the workspace "
               "read-only too), `workspace-write` (the workspace read-write, its `.git` "
               "read-only) or `full` (no sandbox: only for agents you trust with the "
               "gateway's own rights). Without bwrap, sandboxed tools are refused.",
    },
    {
        .name = "sandbox_network",
        .type = CFG_BOOL,
        .offset = offsetof(struct agent_config, sandbox_network),
        .def = "false",
        .doc = "Let sandboxed commands use the network.",
    },
    {
        .name = "tool_memory",
        .type = CFG_SIZE,
        .offset = offsetof(struct agent_config, tool_memory),
        .min = 16 << 20,
        .max = (int64_t)1 << 40,
        .def = "4GiB",
        .doc = "The address-space limit (RLIMIT_AS) of each sandboxed tool process.",
    },
    {
        .name = "permissions",
        .type = CFG_LIST,
        .offset = offsetof(struct agent_config, permissions),
        .count_offset = offsetof(struct agent_config, n_permissions),
        .min = 0,
        .max = 256,
        .section = &perm_rule_section,
        .doc = "Permission rules by channel and sender (docs/security.md): which tools, "
               "commands and paths are allowed, need approval, or are denied.",
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
