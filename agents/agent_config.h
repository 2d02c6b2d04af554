/*
 * agent_config.h - the keys the agent runtime reads for each agent.
 */
#ifndef SB_AGENTS_AGENT_CONFIG_H
#define SB_AGENTS_AGENT_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agents/mcp/mcp.h"
#include "agents/safety/permissions.h"
#include "gateway/core/cfg.h"
#include "gateway/core/netaddr.h"

/* Output budgets and context levels (docs/context.md): the YAML mapping
 * `context` of an agent. Percentages are of the window. */
struct agent_context_config {
	int64_t window;           /* the model's context window, tokens */
	int64_t trim_at;          /* level 1 (old tool results) from this percent */
	int64_t trim_to;          /* ... clearing down to this percent */
	int64_t archive_at;       /* level 2 (archive the middle) */
	int64_t summarize_at;     /* level 3 (summary by the model) */
	int64_t block_at;         /* no model call above this until compaction succeeds */
	int64_t keep_results;     /* level 1 keeps this many recent tool results */
	int64_t keep_head;        /* level 2 keeps this many first messages */
	int64_t keep_messages;    /* levels 2 and 3 keep this many recent messages */
	int64_t tool_result_max;  /* a tool result's default maximum, characters */
	int64_t batch_result_max; /* one batch's results together, characters */
};

/* The heartbeat's active hours: ticks outside [start, end) are skipped. */
struct agent_active_hours {
	char *start;    /* "HH:MM"; NULL (with end NULL) = always active */
	char *end;      /* "HH:MM" or "24:00" */
	char *timezone; /* "local" (default), "UTC" or an IANA zone */
};

/* The agent's heartbeat (gateway/sched/scheduler.c): a turn in its main session
 * every `every`, with `prompt`; its reply goes to `target`. */
struct agent_heartbeat_config {
	int64_t every_ms; /* 0 disables */
	char *prompt;     /* NULL: the default prompt (HEARTBEAT.md, HEARTBEAT_OK) */
	char *target;     /* "none", "last", or a channel name (with to, account) */
	char *to;
	char *account;
	int64_t ack_max_chars; /* an acknowledgement may carry this many other characters */
	struct agent_active_hours active_hours;
};

/* web_search (docs/agents.md): off unless url is set. */
struct agent_web_search_config {
	char *url; /* a SearXNG instance's base URL */
	int64_t max_results;
	int safesearch; /* enum: off, moderate, strict */
	char *language;
	int64_t timeout_ms;
};

/* web_fetch (docs/agents.md): off unless fetch is true. */
struct agent_web_config {
	bool fetch;
	char **allow; /* networks opened besides public addresses ("127.0.0.1/32") */
	size_t n_allow;
	int64_t max_bytes;
	int64_t timeout_ms;
	int64_t max_redirects;
	struct netaddr_policy policy; /* allow, parsed by the section's check */
	struct agent_web_search_config search;
};

/* The agent's memory (docs/memory.md). */
struct agent_memory_config {
	bool transcripts; /* memory_search covers past transcripts too */
	bool flush;       /* the silent memory turn before compaction */
};

struct agent_config {
	char *id;         /* [a-z0-9][a-z0-9_-]{0,63} */
	char *workspace;  /* directory; relative to the home; default workspaces/<id> */
	char *model;      /* provider/model; NULL until a provider is configured */
	bool is_default;  /* YAML key "default" */
	char **fallbacks; /* provider/model, tried in order when model fails */
	size_t n_fallbacks;
	int64_t max_turns; /* model calls in one run */
	int64_t budget;    /* iterations shared with sub-runs */
	char **tools;      /* tool names the agent may use; none listed = all */
	size_t n_tools;
	int64_t tool_timeout_ms; /* default time limit of one tool call (bash, file tools) */
	int64_t run_timeout_ms;  /* a whole run; the watchdog aborts past it */
	int queue_mode;          /* enum agent_queue_mode: messages arriving during a run */
	int64_t queue_cap;       /* messages waiting per session */
	int queue_drop;          /* enum agent_queue_drop: which to drop past the cap */
	struct agent_context_config context;
	char *timezone; /* the date the model is told: "local", "UTC" or an IANA zone */
	int64_t bootstrap_max_chars;       /* a workspace file's cap in the prompt */
	int64_t bootstrap_total_max_chars; /* all workspace files' cap */
	struct agent_heartbeat_config heartbeat;
	int profile;                   /* enum perm_profile: the tools it may use */
	int sandbox;                   /* enum sandbox_mode: where its processes run */
	bool sandbox_network;          /* sandboxed processes keep the network */
	int64_t tool_memory;           /* address-space limit of a tool process (bytes) */
	int64_t tool_processes;        /* RLIMIT_NPROC of a sandboxed command */
	struct perm_rule *permissions; /* rules per channel/sender (permissions.h) */
	size_t n_permissions;
	struct agent_web_config web;
	struct agent_memory_config memory;
	struct mcp_config mcp; /* its MCP servers (agents/mcp/mcp.h) */
};

enum agent_queue_mode {
	AGENT_QUEUE_STEER = 0, /* into the running turn at its next model call */
	AGENT_QUEUE_FOLLOWUP,  /* each its own turn, in order */
	AGENT_QUEUE_COLLECT,   /* everything that waited, as one next turn */
	AGENT_QUEUE_INTERRUPT, /* abort the running turn; run the newest */
	/* The default: STEER for a conversation, FOLLOWUP for a delivery whose
	 * sender waits for its own answer (envelope.h, own_reply) and for any
	 * message that finds such a delivery's turn running. */
	AGENT_QUEUE_AUTO,
};

enum agent_queue_drop { AGENT_QUEUE_DROP_OLDEST = 0, AGENT_QUEUE_DROP_NEWEST };

const char *agent_queue_mode_name(int mode);

/* The schema of one element of the top-level `agents` list. */
extern const struct cfg_section agent_config_section;

#endif
