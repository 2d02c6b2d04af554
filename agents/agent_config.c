/*
 * agent_config.c - the schema of one entry of the top-level `agents` list.
 *
 * Cross-agent rules (unique ids, one default) live with the list, in the
 * gateway's root section check; the workspace default (workspaces/<id>)
 * needs the home directory and is filled in by config.c.
 */
#include "agents/agent_config.h"

#include "gateway/core/err.h"
#include "gateway/core/url.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
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

static const char *const agent_queue_modes[] = {"steer",     "followup", "collect",
                                                "interrupt", "auto",     NULL};
static const char *const agent_queue_drops[] = {"oldest", "newest", NULL};
/* In the order of enum perm_profile and enum sandbox_mode. */
static const char *const agent_profiles[] = {"inherit", "minimal", "messaging",
                                             "coding",  "full",    NULL};
static const char *const agent_sandboxes[] = {"read-only", "workspace-write", "full", NULL};

static const char *agent_config_check_profile(const void *field)
{
	return *(const int *)field == 0 ? "must be minimal, messaging, coding or full" : NULL;
}

const char *agent_queue_mode_name(int mode)
{
	return mode >= 0 && mode <= AGENT_QUEUE_AUTO ? agent_queue_modes[mode] : "unknown";
}

static const struct cfg_key agent_context_keys[] = {
    {
        .name = "window",
        .type = CFG_INT,
        .offset = offsetof(struct agent_context_config, window),
        .min = 0,
        .max = 10000000,
        .def = "0",
        .doc = "The model's context window in tokens; the levels below are "
               "percentages of it. 0 (the default): learnt from the provider where "
               "it says (`/models` of vLLM, OpenRouter, llama.cpp; Ollama's "
               "`/api/show`), else from a table of known model families, else "
               "32768.",
    },
    {
        .name = "trim_at",
        .type = CFG_INT,
        .offset = offsetof(struct agent_context_config, trim_at),
        .min = 1,
        .max = 1000,
        .def = "50",
        .doc = "Level 1: from this percentage of the window, old tool results "
               "(never the `keep_results` most recent) are replaced by a note naming "
               "the file that holds them, oldest first, in one batch down to "
               "`trim_to`. Above 100 turns the level off.",
    },
    {
        .name = "trim_to",
        .type = CFG_INT,
        .offset = offsetof(struct agent_context_config, trim_to),
        .min = 0,
        .max = 1000,
        .def = "20",
        .doc = "Level 1's low-water mark: a batch clears old results until the "
               "context is at this percentage, so the request prefix (and the "
               "provider's prompt cache) changes once per batch; a batch that would "
               "free less than half of `trim_at` - `trim_to` waits (unless "
               "`archive_at` is reached).",
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
               "succeeds; when it cannot (3 failed summaries in a row open a breaker "
               "for 10 minutes), the conversation goes on in a new session that "
               "starts from a summary of the full one.",
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

/* "HH:MM" (00:00..23:59, or 24:00 where allow_24). */
static const char *agent_config_hhmm(const char *v, bool allow_24)
{
	if (!v)
		return NULL;
	if (strlen(v) != 5 || v[2] != ':' || v[0] < '0' || v[0] > '2' || v[1] < '0' || v[1] > '9' ||
	    v[3] < '0' || v[3] > '5' || v[4] < '0' || v[4] > '9')
		return "expected a time as HH:MM";
	if ((v[0] - '0') * 10 + (v[1] - '0') > 24 ||
	    ((v[0] - '0') * 10 + (v[1] - '0') == 24 && (!allow_24 || strcmp(v, "24:00") != 0)))
		return allow_24 ? "expected 00:00 to 24:00" : "expected 00:00 to 23:59";
	return NULL;
}

static const char *agent_config_check_start(const void *field)
{
	return agent_config_hhmm(*(char *const *)field, false);
}

static const char *agent_config_check_end(const void *field)
{
	return agent_config_hhmm(*(char *const *)field, true);
}

static int agent_active_hours_check(void *obj, struct cfg_error_ctx *ctx)
{
	const struct agent_active_hours *h = obj;

	if (!h->start != !h->end) {
		cfg_error_add(ctx, h->start ? "end" : "start", "give both start and end",
		              "active hours need both start and end");
		return 1;
	}
	return 0;
}

static const struct cfg_key agent_active_hours_keys[] = {
    {
        .name = "start",
        .type = CFG_STRING,
        .offset = offsetof(struct agent_active_hours, start),
        .min = 5,
        .max = 5,
        .validate = agent_config_check_start,
        .doc = "The first minute of the window, `HH:MM` (inclusive).",
    },
    {
        .name = "end",
        .type = CFG_STRING,
        .offset = offsetof(struct agent_active_hours, end),
        .min = 5,
        .max = 5,
        .validate = agent_config_check_end,
        .doc = "The end of the window, `HH:MM` (exclusive; `24:00` is midnight). An end "
               "before the start wraps past midnight; an end equal to the start is an "
               "empty window (every tick is skipped).",
    },
    {
        .name = "timezone",
        .type = CFG_STRING,
        .offset = offsetof(struct agent_active_hours, timezone),
        .min = 1,
        .max = 128,
        .def = "local",
        .doc = "`local` (the host's zone), `UTC`, or an IANA zone such as "
               "`Europe/Berlin`.",
    },
};

static const struct cfg_section agent_active_hours_section = {
    .name = "active_hours",
    .size = sizeof(struct agent_active_hours),
    .keys = agent_active_hours_keys,
    .nkeys = sizeof agent_active_hours_keys / sizeof agent_active_hours_keys[0],
    .check = agent_active_hours_check,
    .doc = "When heartbeats may run. Not given: at any hour.",
};

static const struct cfg_key agent_heartbeat_keys[] = {
    {
        .name = "every",
        .type = CFG_DURATION,
        .offset = offsetof(struct agent_heartbeat_config, every_ms),
        .min = 0,
        .max = 7LL * 86400000,
        .def = "30m",
        .doc = "How often the agent wakes up; `0` disables the heartbeat.",
    },
    {
        .name = "prompt",
        .type = CFG_STRING,
        .offset = offsetof(struct agent_heartbeat_config, prompt),
        .min = 1,
        .max = 16384,
        .doc = "The text of each heartbeat turn. Default: read HEARTBEAT.md, follow it, "
               "and reply `HEARTBEAT_OK` when nothing needs attention.",
    },
    {
        .name = "target",
        .type = CFG_STRING,
        .offset = offsetof(struct agent_heartbeat_config, target),
        .min = 1,
        .max = 64,
        .def = "none",
        .doc = "Where replies that are not `HEARTBEAT_OK` go: `none` (the run is kept in "
               "the transcript only), `last` (the channel and peer the agent last talked "
               "with), or a channel name with `to` (and `account`).",
    },
    {
        .name = "to",
        .type = CFG_STRING,
        .offset = offsetof(struct agent_heartbeat_config, to),
        .min = 1,
        .max = 2048,
        .doc = "The channel's target when `target` names a channel (a chat id, a "
               "webchat session key, a webhook's name, ...).",
    },
    {
        .name = "account",
        .type = CFG_STRING,
        .offset = offsetof(struct agent_heartbeat_config, account),
        .min = 1,
        .max = 64,
        .doc = "The channel account when `target` names a channel. Default: `default` "
               "(for `webhook`: the hook named by `to`).",
    },
    {
        .name = "ack_max_chars",
        .type = CFG_INT,
        .offset = offsetof(struct agent_heartbeat_config, ack_max_chars),
        .min = 0,
        .max = 100000,
        .def = "300",
        .doc = "A reply that starts or ends with `HEARTBEAT_OK` and has at most this many "
               "other characters is not delivered.",
    },
    {
        .name = "active_hours",
        .type = CFG_SECTION,
        .offset = offsetof(struct agent_heartbeat_config, active_hours),
        .section = &agent_active_hours_section,
        .doc = "The daily window in which heartbeats run.",
    },
};

static const struct cfg_section agent_heartbeat_section = {
    .name = "heartbeat",
    .size = sizeof(struct agent_heartbeat_config),
    .keys = agent_heartbeat_keys,
    .nkeys = sizeof agent_heartbeat_keys / sizeof agent_heartbeat_keys[0],
    .doc = "The agent's periodic wake-up (docs/scheduling.md).",
};

static int agent_web_check(void *obj, struct cfg_error_ctx *ctx)
{
	struct agent_web_config *w = obj;
	size_t bad = 0;
	char key[32];
	int rc = netaddr_policy_init(&w->policy, w->allow, w->n_allow, &bad);

	if (rc == SB_ERR_INVAL) {
		snprintf(key, sizeof key, "allow[%zu]", bad);
		cfg_error_add(ctx, key,
		              "write an address (\"127.0.0.1\", \"::1\") or a network with its "
		              "prefix length (\"10.1.2.0/24\"), with no bits set past the prefix",
		              "\"%s\" is not an IP address or network", w->allow[bad]);
		return 1;
	}
	return 0;
}

static const struct cfg_key agent_memory_keys[] = {
    {
        .name = "transcripts",
        .type = CFG_BOOL,
        .offset = offsetof(struct agent_memory_config, transcripts),
        .def = "false",
        .doc = "`memory_search` also searches the agent's past transcripts (each user or "
               "assistant message, named `sessions/<id>.jsonl` and its line), besides "
               "`MEMORY.md` and `memory/`.",
    },
    {
        .name = "flush",
        .type = CFG_BOOL,
        .offset = offsetof(struct agent_memory_config, flush),
        .def = "true",
        .doc = "Before the context is compacted (archived or summarised), one silent turn "
               "asks the model to save what it must keep with `memory_write`; nothing of "
               "that turn reaches the chat. Once per compaction cycle, only in sessions "
               "that may write memory (the operator's).",
    },
};

static const struct cfg_section agent_memory_section = {
    .name = "memory",
    .size = sizeof(struct agent_memory_config),
    .keys = agent_memory_keys,
    .nkeys = sizeof agent_memory_keys / sizeof agent_memory_keys[0],
    .doc = "The agent's memory tools (docs/memory.md).",
};

static const char *const agent_safesearch[] = {"off", "moderate", "strict", NULL};

static int agent_web_search_check(void *obj, struct cfg_error_ctx *ctx)
{
	struct agent_web_search_config *s = obj;
	struct url u;
	char why[256];

	if (!s->url)
		return 0;
	if (url_parse(s->url, &u, why, sizeof why) != SB_OK) {
		cfg_error_add(ctx, "url",
		              "write the instance's base URL, e.g. \"http://127.0.0.1:8888\"",
		              "\"%s\" is not a search instance's URL: %s", s->url, why);
		return 1;
	}
	if (strchr(s->url, '?')) {
		cfg_error_add(ctx, "url",
		              "write the instance's base URL, e.g. \"http://127.0.0.1:8888\"",
		              "\"%s\" has a query; the gateway adds its own to the instance's "
		              "/search",
		              s->url);
		return 1;
	}
	return 0;
}

static const struct cfg_key agent_web_search_keys[] = {
    {
        .name = "url",
        .type = CFG_STRING,
        .offset = offsetof(struct agent_web_search_config, url),
        .doc = "Give the agent the `web_search` tool, through this search instance: the base "
               "URL of a SearXNG instance whose settings allow the `json` format "
               "(`search.formats`). The operator's address, so it may be private or "
               "local; the model only chooses the query.",
    },
    {
        .name = "max_results",
        .type = CFG_INT,
        .offset = offsetof(struct agent_web_search_config, max_results),
        .min = 1,
        .max = 20,
        .def = "5",
        .doc = "Results one `web_search` returns at most (a call may ask for fewer).",
    },
    {
        .name = "safesearch",
        .type = CFG_ENUM,
        .offset = offsetof(struct agent_web_search_config, safesearch),
        .choices = agent_safesearch,
        .def = "moderate",
        .doc = "The instance's safe-search filter: `off`, `moderate` or `strict`.",
    },
    {
        .name = "language",
        .type = CFG_STRING,
        .offset = offsetof(struct agent_web_search_config, language),
        .doc = "The language of results (`en`, `de-CH`); unset: the instance's default.",
    },
    {
        .name = "timeout",
        .type = CFG_DURATION,
        .offset = offsetof(struct agent_web_search_config, timeout_ms),
        .min = 100,
        .max = 120000,
        .def = "15s",
        .doc = "The time one `web_search` may take.",
    },
};

static const struct cfg_section agent_web_search_section = {
    .name = "search",
    .size = sizeof(struct agent_web_search_config),
    .keys = agent_web_search_keys,
    .nkeys = sizeof agent_web_search_keys / sizeof agent_web_search_keys[0],
    .check = agent_web_search_check,
    .doc = "The agent's web search (docs/agents.md).",
};

static const struct cfg_key agent_web_keys[] = {
    {
        .name = "fetch",
        .type = CFG_BOOL,
        .offset = offsetof(struct agent_web_config, fetch),
        .def = "false",
        .doc = "Give the agent the `web_fetch` tool (an HTTP GET whose page comes back as "
               "untrusted text). Loopback, private, link-local and metadata addresses are "
               "refused after name resolution and on every redirect, unless `allow` names "
               "them.",
    },
    {
        .name = "allow",
        .type = CFG_STRING_LIST,
        .offset = offsetof(struct agent_web_config, allow),
        .count_offset = offsetof(struct agent_web_config, n_allow),
        .min = 0,
        .max = NETADDR_ALLOW_MAX,
        .doc = "Addresses or networks `web_fetch` may reach although they are not public "
               "(`127.0.0.1`, `10.1.2.0/24`, `fd00::/8`). Empty: public addresses only.",
    },
    {
        .name = "max_bytes",
        .type = CFG_SIZE,
        .offset = offsetof(struct agent_web_config, max_bytes),
        .min = 1024,
        .max = 64 << 20,
        .def = "2MiB",
        .doc = "The largest response body `web_fetch` reads; a larger one is refused.",
    },
    {
        .name = "timeout",
        .type = CFG_DURATION,
        .offset = offsetof(struct agent_web_config, timeout_ms),
        .min = 100,
        .max = 600000,
        .def = "30s",
        .doc = "The time one `web_fetch` may take, redirects included.",
    },
    {
        .name = "max_redirects",
        .type = CFG_INT,
        .offset = offsetof(struct agent_web_config, max_redirects),
        .min = 0,
        .max = 20,
        .def = "5",
        .doc = "Redirects `web_fetch` follows (each to an address checked again).",
    },
    {
        .name = "search",
        .type = CFG_SECTION,
        .offset = offsetof(struct agent_web_config, search),
        .section = &agent_web_search_section,
        .doc = "`web_search` and its instance (docs/agents.md).",
    },
};

static const struct cfg_section agent_web_section = {
    .name = "web",
    .size = sizeof(struct agent_web_config),
    .keys = agent_web_keys,
    .nkeys = sizeof agent_web_keys / sizeof agent_web_keys[0],
    .check = agent_web_check,
    .doc = "The agent's reach to the web (docs/agents.md).",
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
               "`write`, `edit`, `ls`, `glob`, `grep`, `bash`, `message`, `todo`, and "
               "`web_fetch` when `web.fetch` is on.",
    },
    {
        .name = "tool_timeout",
        .type = CFG_DURATION,
        .offset = offsetof(struct agent_config, tool_timeout_ms),
        .min = 100,
        .max = 3600000,
        .def = "120s",
        .doc = "The time limit of one tool call: a `bash` command (which may ask for "
               "less) and the file tools (`grep`, `glob` and `read` hand back what "
               "they found by then, cut).",
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
        .def = "auto",
        .doc = "What happens to a message that arrives while the session's run is "
               "busy: `steer` (it joins the running turn at its next model call), "
               "`followup` (it gets a turn of its own after), `collect` (everything "
               "that waited becomes one next turn), `interrupt` (the running turn "
               "is aborted and the newest message runs), `auto` (`steer` for chat "
               "messages; `followup` for a delivery whose sender waits for its own "
               "answer: a `sync` or `callback` webhook, the OpenAI-compatible "
               "endpoint; docs/routing.md, \"Queue modes\").",
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
        .name = "timezone",
        .type = CFG_STRING,
        .offset = offsetof(struct agent_config, timezone),
        .min = 1,
        .max = 128,
        .def = "local",
        .doc = "The time zone of the date the model is told (the day, the zone and its "
               "UTC offset, in the newest message when the day changes): `local` (the "
               "host's zone), `UTC`, or an IANA zone such as `Europe/Berlin`.",
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
    {
        .name = "heartbeat",
        .type = CFG_SECTION,
        .offset = offsetof(struct agent_config, heartbeat),
        .section = &agent_heartbeat_section,
        .doc = "Periodic turns in the agent's main session (docs/scheduling.md).",
    },
    {
        .name = "profile",
        .type = CFG_ENUM,
        .offset = offsetof(struct agent_config, profile),
        .choices = agent_profiles,
        .def = "coding",
        .validate = agent_config_check_profile,
        .doc = "The tools the agent may use (docs/security.md): `minimal` (read, ls, glob, "
               "grep, todo), `messaging` (those and message), `coding` (every built-in tool; "
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
        .name = "tool_processes",
        .type = CFG_INT,
        .offset = offsetof(struct agent_config, tool_processes),
        .min = 8,
        .max = 65536,
        .def = "256",
        .doc = "How many processes one sandboxed command may have at once (RLIMIT_NPROC "
               "in its own user namespace): a fork bomb stops there, and neither the "
               "gateway nor other sessions run short of processes.",
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
    {
        .name = "web",
        .type = CFG_SECTION,
        .offset = offsetof(struct agent_config, web),
        .section = &agent_web_section,
        .doc = "`web_fetch`, `web_search` and their limits (docs/agents.md).",
    },
    {
        .name = "memory",
        .type = CFG_SECTION,
        .offset = offsetof(struct agent_config, memory),
        .section = &agent_memory_section,
        .doc = "What `memory_search` covers, and the silent memory turn before "
               "compaction (docs/memory.md).",
    },
    {
        .name = "mcp",
        .type = CFG_SECTION,
        .offset = offsetof(struct agent_config, mcp),
        .section = &mcp_config_section,
        .doc = "The MCP servers whose tools the agent may use (docs/mcp.md).",
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
