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

static const char *const agent_queue_modes[] = {"steer", "followup", "collect", "interrupt", NULL};
static const char *const agent_queue_drops[] = {"oldest", "newest", NULL};

const char *agent_queue_mode_name(int mode)
{
	return mode >= 0 && mode < 4 ? agent_queue_modes[mode] : "unknown";
}

static const struct cfg_key agent_context_keys[] = {
    {
        .name = "window",
        .type = CFG_INT,
        .offset = offsetof(struct agent_context_config, window),
        .min = 256,
        .max = 10000000,
        .def = "200000",
        .doc = "The model's context window in tokens; the levels below are "
               "percentages of it.",
    },
    {
        .name = "trim_at",
        .type = CFG_INT,
        .offset = offsetof(struct agent_context_config, trim_at),
        .min = 1,
        .max = 1000,
        .def = "50",
        .doc = "Level 1: from this percentage of the window, old tool results "
               "(all but `keep_results`) are replaced by a note naming the file "
               "that holds them. Above 100 turns the level off.",
    },
    {
        .name = "archive_at",
        .type = CFG_INT,
        .offset = offsetof(struct agent_context_config, archive_at),
        .min = 1,
        .max = 1000,
        .def = "75",
        .doc = "Level 2: from this percentage, the middle of the history is "
               "archived to a JSONL file next to the transcript, with a marker. "
               "Above 100 turns the level off.",
    },
    {
        .name = "summarize_at",
        .type = CFG_INT,
        .offset = offsetof(struct agent_context_config, summarize_at),
        .min = 1,
        .max = 1000,
        .def = "90",
        .doc = "Level 3: from this percentage, the older history is summarised "
               "by the model; the last `keep_messages` stay. Above 100 turns the "
               "level off (a \"prompt too long\" answer still compacts).",
    },
    {
        .name = "block_at",
        .type = CFG_INT,
        .offset = offsetof(struct agent_context_config, block_at),
        .min = 1,
        .max = 1000,
        .def = "97",
        .doc = "Above this percentage no model call is made until compaction "
               "succeeds; after 3 failed summaries in a row the run ends with an "
               "error instead.",
    },
    {
        .name = "keep_results",
        .type = CFG_INT,
        .offset = offsetof(struct agent_context_config, keep_results),
        .min = 0,
        .max = 1000,
        .def = "3",
        .doc = "The most recent tool results that level 1 leaves as they are.",
    },
    {
        .name = "keep_head",
        .type = CFG_INT,
        .offset = offsetof(struct agent_context_config, keep_head),
        .min = 1,
        .max = 1000,
        .def = "2",
        .doc = "The first messages that level 2 leaves in place.",
    },
    {
        .name = "keep_messages",
        .type = CFG_INT,
        .offset = offsetof(struct agent_context_config, keep_messages),
        .min = 1,
        .max = 1000,
        .def = "8",
        .doc = "The most recent messages that levels 2 and 3 leave intact.",
    },
    {
        .name = "tool_result_max",
        .type = CFG_INT,
        .offset = offsetof(struct agent_context_config, tool_result_max),
        .min = 1000,
        .max = 10000000,
        .def = "50000",
        .doc = "The default maximum of one tool result in the context, in "
               "characters (a tool may declare its own); a longer result is saved "
               "to the session's result store and replaced by a 2,000-character "
               "preview. `read` pages instead.",
    },
    {
        .name = "batch_result_max",
        .type = CFG_INT,
        .offset = offsetof(struct agent_context_config, batch_result_max),
        .min = 1000,
        .max = 100000000,
        .def = "200000",
        .doc = "The most characters the results of one batch of tool calls may put "
               "into the context together; past it the largest are saved first.",
    },
};

static const struct cfg_section agent_context_section = {
    .name = "context",
    .size = sizeof(struct agent_context_config),
    .keys = agent_context_keys,
    .nkeys = sizeof agent_context_keys / sizeof agent_context_keys[0],
    .doc = "Output budgets and context compaction (docs/context.md).",
};

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
        .name = "context",
        .type = CFG_SECTION,
        .offset = offsetof(struct agent_config, context),
        .section = &agent_context_section,
        .doc = "Output budgets and context compaction (docs/context.md).",
    },
    {
        .name = "bootstrap_max_chars",
        .type = CFG_INT,
        .offset = offsetof(struct agent_config, bootstrap_max_chars),
        .min = 100,
        .max = 1000000,
        .def = "20000",
        .doc = "The most bytes of one workspace file (AGENTS.md, SOUL.md, ...) in "
               "the system prompt; a longer file keeps its first 70% and last 20% "
               "around a marker naming the file to read for the rest.",
    },
    {
        .name = "bootstrap_total_max_chars",
        .type = CFG_INT,
        .offset = offsetof(struct agent_config, bootstrap_total_max_chars),
        .min = 100,
        .max = 4000000,
        .def = "150000",
        .doc = "The most bytes of all workspace files together in the system "
               "prompt; once spent, the remaining files are listed, not included.",
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
