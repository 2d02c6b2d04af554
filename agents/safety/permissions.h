/*
 * permissions.h - the gates every tool call passes before it runs.
 *
 * Gate 1, the hard deny list: commands and paths that are never allowed,
 * whatever the rules say (rm -rf /, sudo, mkfs, dd to a device, writing to
 * the workspace's .git, reading the gateway's home), plus the operator's
 * additions (security.deny_commands, security.deny_paths).
 *
 * Gate 2, the rules: the agent's tool profile, then every entry of its
 * `permissions` list whose match fits who is asking (owner or others, direct
 * message or group, channel, sender). Tools are allowed, asked for or
 * denied; paths are resolved (symlinks and "..") and must stay inside the
 * workspace; bash commands are parsed (pipelines, lists, subshells,
 * command substitutions, redirections) into the programs they run and the
 * files they write. A deny in any layer wins over an ask, an ask over an
 * allow. A command that cannot be parsed is asked for, never allowed.
 *
 * Gate 3 (the approval) is the executor's, with agents/safety/approvals.h: a
 * decision of PERM_ASK carries the scope an approval may be cached under.
 *
 * The decision is a structure: the action, a message for the model (a
 * denial reaches it as a normal tool result), and optionally the input
 * rewritten (a path replaced by its resolved, workspace-relative form).
 *
 * permissions_check is blocking (realpath): run it on the thread pool.
 * Everything here is thread-safe for distinct decisions; the config the
 * context points into is immutable.
 */
#ifndef SB_AGENTS_PERMISSIONS_H
#define SB_AGENTS_PERMISSIONS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gateway/core/cfg.h"

#define PERM_MSG_MAX 600
#define PERM_SCOPE_MAX 300
#define PERM_SHELL_MAX_CMDS 64
#define PERM_SHELL_MAX_WRITES 32

enum perm_action { PERM_ALLOW = 0, PERM_ASK, PERM_DENY };

enum perm_profile {
	PERM_PROFILE_INHERIT = 0, /* rules only: keep the agent's */
	PERM_PROFILE_MINIMAL,     /* read, ls, glob, grep */
	PERM_PROFILE_MESSAGING,   /* message, read, ls, glob, grep */
	PERM_PROFILE_CODING,      /* every built-in tool */
	PERM_PROFILE_FULL,        /* every tool; commands need no approval by default */
};

enum perm_who { PERM_WHO_ANY = 0, PERM_WHO_OWNER, PERM_WHO_OTHERS };
enum perm_chat { PERM_CHAT_ANY = 0, PERM_CHAT_DIRECT, PERM_CHAT_GROUP };

/* One entry of an agent's `permissions` list (config). */
struct perm_rule {
	char *channel; /* match: channel name, or NULL = any */
	char *sender;  /* match: sender id, or NULL = any */
	int who;       /* enum perm_who */
	int chat;      /* enum perm_chat */
	int profile;   /* enum perm_profile */
	char **allow_tools, **deny_tools, **ask_tools;
	size_t n_allow_tools, n_deny_tools, n_ask_tools;
	char **allow_commands, **deny_commands, **ask_commands;
	size_t n_allow_commands, n_deny_commands, n_ask_commands;
	char **deny_paths, **ask_paths; /* glob patterns, relative to the workspace */
	size_t n_deny_paths, n_ask_paths;
};

extern const struct cfg_section perm_rule_section;

/* The top-level `security` section (config). */
struct security_config {
	char **owners; /* "channel:sender" (or "*" for any sender of a channel) */
	size_t n_owners;
	char **deny_commands; /* more hard-denied programs or command-text globs */
	size_t n_deny_commands;
	char **deny_paths; /* more hard-denied absolute path globs */
	size_t n_deny_paths;
	int64_t approval_timeout_ms;
	char *approval_channel; /* where approval requests are announced */
	char *approval_account;
	char *approval_target;
	/* The uid and gid a root gateway's sandboxed commands run as
	 * (sandbox.h SANDBOX_UID by default); never 0, never the gateway's */
	int64_t sandbox_uid, sandbox_gid;
};

extern const struct cfg_section security_config_section;

/* What the agent config gives (a view, borrowed). */
struct perm_agent {
	int profile; /* enum perm_profile (never INHERIT) */
	const struct perm_rule *rules;
	size_t n_rules;
};

/* Who is asking, and everything the gates read. Borrowed by the executor
 * for the run; every pointer borrowed from the run's config snapshot. */
struct permissions {
	const struct security_config *security; /* may be NULL */
	struct perm_agent agent;
	bool owner; /* the operator (trusted channel or security.owners) */
	bool group; /* a group or channel conversation, not a DM */
	const char *channel;
	const char *sender;
	const char *home;            /* the gateway's home: never readable by tools */
	const char *workspace;       /* the workspace's real path */
	struct approvals *approvals; /* gate 3; NULL: an ask is denied */
	int64_t approval_timeout_ms;
};

struct perm_decision {
	enum perm_action action;
	char message[PERM_MSG_MAX]; /* for the model (deny), for the operator (ask) */
	char scope[PERM_SCOPE_MAX]; /* ask: the scope an approval may be cached under */
	json_t *input;              /* the rewritten input (a new reference), or NULL */
};

/* Decides whether tool may run with input (borrowed) for p. Fills *d (call
 * perm_decision_release after). Blocking (realpath); any thread. Returns
 * SB_OK (d->action says what) or SB_ERR_NOMEM. */
int permissions_check(const struct permissions *p, const char *tool, const json_t *input,
                      struct perm_decision *d);

void perm_decision_release(struct perm_decision *d);

/* Whether channel:sender is the operator: a channel that only the operator
 * reaches (cli, webchat, http, heartbeat, cron) or an entry of
 * security.owners. sec may be NULL. Any thread. */
bool permissions_is_owner(const struct security_config *sec, const char *channel,
                          const char *sender);

/* Whether tool is in profile's set. */
bool permissions_profile_has(int profile, const char *tool);

const char *perm_action_name(enum perm_action a);

/* ---- the shell parser (exposed for tests) ---- */

struct perm_shell {
	bool ok;                          /* false: the command could not be parsed */
	char why[160];                    /* when !ok */
	char *cmds[PERM_SHELL_MAX_CMDS];  /* each simple command's text: "git push origin" */
	char *names[PERM_SHELL_MAX_CMDS]; /* its program's base name: "git" */
	size_t n_cmds;
	char *writes[PERM_SHELL_MAX_WRITES]; /* files written by redirections */
	size_t n_writes;
};

/* Parses a shell command line into the programs it runs (through pipes,
 * lists, subshells, $(...) and `...`, sh -c '...', env/nice/timeout/xargs
 * prefixes) and the files its redirections write. Any thread. SB_OK (see
 * sh->ok) or SB_ERR_NOMEM. */
int perm_shell_parse(const char *command, struct perm_shell *sh);
void perm_shell_release(struct perm_shell *sh);

#endif
