/*
 * permissions.c - the hard deny list, the rules, and the shell parser they
 * read commands with (see permissions.h).
 */
#include "agents/safety/permissions.h"

#include <fnmatch.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agents/safety/paths.h"
#include "gateway/core/buf.h"
#include "gateway/core/err.h"
#include "gateway/core/fmt.h"
#include "gateway/core/url.h"

#define PERM_SHELL_DEPTH 6
#define PERM_WORDS_MAX 256
#define PERM_WORD_MAX 8192

/* ---- configuration ---- */

static const char *const perm_profiles[] = {"inherit", "minimal", "messaging",
                                            "coding",  "full",    NULL};
static const char *const perm_whos[] = {"any", "owner", "others", NULL};
static const char *const perm_chats[] = {"any", "direct", "group", NULL};

#define PERM_LIST_KEY(field, count, docs)                                                          \
	{                                                                                          \
		.name = #field, .type = CFG_STRING_LIST,                                           \
		.offset = offsetof(struct perm_rule, field),                                       \
		.count_offset = offsetof(struct perm_rule, count), .min = 0, .max = 256,           \
		.doc = docs,                                                                       \
	}

static const struct cfg_key perm_rule_keys[] = {
    {
        .name = "channel",
        .type = CFG_STRING,
        .offset = offsetof(struct perm_rule, channel),
        .min = 1,
        .max = 64,
        .doc = "The rule applies to messages from this channel only (`telegram`, `slack`, "
               "`webhook`, `webchat`, `cli`, ...). Unset: any channel.",
    },
    {
        .name = "sender",
        .type = CFG_STRING,
        .offset = offsetof(struct perm_rule, sender),
        .min = 1,
        .max = 256,
        .doc = "The rule applies to this sender id only. Unset: any sender.",
    },
    {
        .name = "who",
        .type = CFG_ENUM,
        .offset = offsetof(struct perm_rule, who),
        .choices = perm_whos,
        .def = "any",
        .doc = "`owner` (the operator: the CLI, web chat, the OpenAI-compatible endpoint, "
               "and `security.owners`), `others` (everyone else) or `any`.",
    },
    {
        .name = "chat",
        .type = CFG_ENUM,
        .offset = offsetof(struct perm_rule, chat),
        .choices = perm_chats,
        .def = "any",
        .doc = "`direct` (a direct message), `group` (a group or channel) or `any`.",
    },
    {
        .name = "profile",
        .type = CFG_ENUM,
        .offset = offsetof(struct perm_rule, profile),
        .choices = perm_profiles,
        .def = "inherit",
        .doc = "Replaces the agent's tool profile for matching messages; `inherit` keeps "
               "it.",
    },
    PERM_LIST_KEY(allow_tools, n_allow_tools, "Tools allowed besides the profile's."),
    PERM_LIST_KEY(deny_tools, n_deny_tools, "Tools never allowed (a deny in any rule wins)."),
    PERM_LIST_KEY(ask_tools, n_ask_tools,
                  "Tools that need the operator's approval for every call (or scope)."),
    PERM_LIST_KEY(allow_commands, n_allow_commands,
                  "Commands `bash` may run without approval: a program (`make`), a program "
                  "and subcommand (`git status`), a class (`class:read`, `class:write`, "
                  "`class:exec`, `class:network`) or a glob on the command text."),
    PERM_LIST_KEY(deny_commands, n_deny_commands,
                  "Commands never allowed (same forms as `allow_commands`)."),
    PERM_LIST_KEY(ask_commands, n_ask_commands,
                  "Commands that need approval (same forms as `allow_commands`)."),
    PERM_LIST_KEY(deny_paths, n_deny_paths,
                  "Workspace paths (globs on the resolved path relative to the workspace; "
                  "`dir/` covers a directory) that file tools may not touch."),
    PERM_LIST_KEY(ask_paths, n_ask_paths, "Workspace paths whose use needs approval."),
};

const struct cfg_section perm_rule_section = {
    .name = "permission rule",
    .size = sizeof(struct perm_rule),
    .keys = perm_rule_keys,
    .nkeys = sizeof perm_rule_keys / sizeof perm_rule_keys[0],
    .doc = "One permission rule of an agent (docs/security.md). Every rule whose match fits "
           "the message applies; a deny in any rule wins over an ask, an ask over an allow.",
};

/* The sandbox's uid and gid: an unprivileged id of the sandbox's own. */
static const char *perm_check_sandbox_id(const void *field, bool gid)
{
	int64_t v = *(const int64_t *)field;

	if (v == 0)
		return gid ? "0 is root's group: the sandbox's group must be one of its own"
		           : "0 is root: the sandbox's uid must be unprivileged";
	if (v == (int64_t)(gid ? getgid() : getuid()))
		return gid ? "this is the gateway's own group: the sandbox's must be another"
		           : "this is the gateway's own uid: the sandbox's must be another";
	return NULL;
}

static const char *perm_check_sandbox_uid(const void *field)
{
	return perm_check_sandbox_id(field, false);
}

static const char *perm_check_sandbox_gid(const void *field)
{
	return perm_check_sandbox_id(field, true);
}

static const struct cfg_key security_keys[] = {
    {
        .name = "owners",
        .type = CFG_STRING_LIST,
        .offset = offsetof(struct security_config, owners),
        .count_offset = offsetof(struct security_config, n_owners),
        .min = 0,
        .max = 1000,
        .doc = "Senders who count as the operator, as `channel:sender` (`telegram:12345`, "
               "`slack:U123`). The CLI, web chat and the OpenAI-compatible endpoint always "
               "do; everyone else is `others` in permission rules and their text is marked "
               "untrusted in prompts.",
    },
    {
        .name = "deny_commands",
        .type = CFG_STRING_LIST,
        .offset = offsetof(struct security_config, deny_commands),
        .count_offset = offsetof(struct security_config, n_deny_commands),
        .min = 0,
        .max = 256,
        .doc = "More commands on the hard deny list, which nothing overrides: a program "
               "name, a program and subcommand, or a glob on the command text.",
    },
    {
        .name = "deny_paths",
        .type = CFG_STRING_LIST,
        .offset = offsetof(struct security_config, deny_paths),
        .count_offset = offsetof(struct security_config, n_deny_paths),
        .min = 0,
        .max = 256,
        .doc = "More paths on the hard deny list: globs on absolute, resolved paths "
               "(`/srv/private/*`).",
    },
    {
        .name = "approval_timeout",
        .type = CFG_DURATION,
        .offset = offsetof(struct security_config, approval_timeout_ms),
        .min = 1000,
        .max = 86400000,
        .def = "5m",
        .doc = "How long a tool call waits for the operator's approval; then it is denied.",
    },
    {
        .name = "approval_channel",
        .type = CFG_STRING,
        .offset = offsetof(struct security_config, approval_channel),
        .min = 1,
        .max = 64,
        .doc = "The channel approval requests are sent to (besides the control plane's "
               "`approval.requested` event). Unset: the control plane only.",
    },
    {
        .name = "approval_account",
        .type = CFG_STRING,
        .offset = offsetof(struct security_config, approval_account),
        .min = 1,
        .max = 64,
        .doc = "The account of `approval_channel`. Unset: `default`.",
    },
    {
        .name = "approval_target",
        .type = CFG_STRING,
        .offset = offsetof(struct security_config, approval_target),
        .min = 1,
        .max = 256,
        .doc = "The conversation on `approval_channel` that receives approval requests "
               "(the operator's chat id).",
    },
    {
        .name = "sandbox_uid",
        .type = CFG_INT,
        .offset = offsetof(struct security_config, sandbox_uid),
        .min = 0,
        .max = 4294967294,
        .def = "65533",
        .validate = perm_check_sandbox_uid,
        .doc = "When the gateway runs as root: the uid its sandboxed commands run as, "
               "outside their user namespace too (inside they are `nobody`). The "
               "workspace is given to it before each command (docs/security.md, \"The "
               "sandbox\"). Never 0 nor the gateway's own uid; no account needs to exist. A "
               "gateway that is not root keeps its own uid for its commands, and this is "
               "not used.",
        .hint = "choose an unused, unprivileged uid of the sandbox's own, such as 65533 (the "
                "default; Debian reserves it, and systemd does not hand it out)",
    },
    {
        .name = "sandbox_gid",
        .type = CFG_INT,
        .offset = offsetof(struct security_config, sandbox_gid),
        .min = 0,
        .max = 4294967294,
        .def = "65533",
        .validate = perm_check_sandbox_gid,
        .doc = "The group of `sandbox_uid`: the commands' only group (no supplementary "
               "ones).",
        .hint = "choose an unused group of the sandbox's own, such as 65533 (the default)",
    },
};

const struct cfg_section security_config_section = {
    .name = "security",
    .size = sizeof(struct security_config),
    .keys = security_keys,
    .nkeys = sizeof security_keys / sizeof security_keys[0],
    .doc = "Who the operator is, the hard deny list, and approvals (docs/security.md).",
};

/* ---- small helpers ---- */

static void perm_set(struct perm_decision *d, enum perm_action a, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void perm_set(struct perm_decision *d, enum perm_action a, const char *fmt, ...)
{
	va_list ap;

	d->action = a;
	va_start(ap, fmt);
	if (vsnprintf(d->message, sizeof d->message, fmt, ap) < 0)
		d->message[0] = '\0';
	va_end(ap);
}

const char *perm_action_name(enum perm_action a)
{
	switch (a) {
	case PERM_ALLOW:
		return "allow";
	case PERM_ASK:
		return "ask";
	case PERM_DENY:
		return "deny";
	}
	return "unknown";
}

void perm_decision_release(struct perm_decision *d)
{
	if (!d)
		return;
	json_decref(d->input);
	d->input = NULL;
}

static bool perm_in_list(char *const *list, size_t n, const char *s)
{
	for (size_t i = 0; i < n; i++)
		if (list[i] && strcmp(list[i], s) == 0)
			return true;
	return false;
}

static bool perm_inside(const char *root, const char *p)
{
	size_t n = strlen(root);

	while (n > 1 && root[n - 1] == '/')
		n--;
	return strncmp(p, root, n) == 0 && (p[n] == '\0' || p[n] == '/');
}

bool permissions_is_owner(const struct security_config *sec, const char *channel,
                          const char *sender)
{
	static const char *const trusted[] = {"cli", "webchat", "http", "heartbeat", "cron", NULL};
	char buf[512];

	if (!channel)
		return true; /* the gateway itself (no inbound message) */
	for (size_t i = 0; trusted[i]; i++)
		if (strcmp(channel, trusted[i]) == 0)
			return true;
	if (!sec || !sender)
		return false;
	/* A cut "channel:sender" could equal an owner's entry: no owner then. */
	if (FMT(buf, "%s:%s", channel, sender) != SB_OK)
		return false;
	if (perm_in_list(sec->owners, sec->n_owners, buf))
		return true;
	return FMT(buf, "%s:*", channel) == SB_OK && perm_in_list(sec->owners, sec->n_owners, buf);
}

bool permissions_profile_has(int profile, const char *tool)
{
	static const char *const minimal[] = {"glob",       "grep", "ls", "read",
	                                      "skill_load", "todo", NULL};
	static const char *const messaging[] = {"glob", "grep",       "ls",   "message",
	                                        "read", "skill_load", "todo", NULL};
	const char *const *set;

	switch (profile) {
	case PERM_PROFILE_MINIMAL:
		set = minimal;
		break;
	case PERM_PROFILE_MESSAGING:
		set = messaging;
		break;
	case PERM_PROFILE_CODING:
	case PERM_PROFILE_FULL:
	case PERM_PROFILE_INHERIT:
	default:
		return true;
	}
	for (size_t i = 0; set[i]; i++)
		if (strcmp(set[i], tool) == 0)
			return true;
	return false;
}

/* ---- the shell parser ---- */

struct sh_word {
	char *text;
	bool dyn; /* holds an expansion: its value is not known here */
};

struct sh_cmd {
	struct sh_word w[PERM_WORDS_MAX];
	size_t n;
	bool redirect_next; /* the next word is a redirection's target */
	bool redirect_write;
};

struct sh_parser {
	struct perm_shell *sh;
	int depth;
	int rc; /* SB_ERR_NOMEM stops everything */
};

static void sh_fail(struct sh_parser *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void sh_fail(struct sh_parser *p, const char *fmt, ...)
{
	va_list ap;

	if (!p->sh->ok)
		return;
	p->sh->ok = false;
	va_start(ap, fmt);
	if (vsnprintf(p->sh->why, sizeof p->sh->why, fmt, ap) < 0)
		p->sh->why[0] = '\0';
	va_end(ap);
}

static void sh_cmd_clear(struct sh_cmd *c)
{
	for (size_t i = 0; i < c->n; i++)
		free(c->w[i].text);
	c->n = 0;
	c->redirect_next = false;
}

static int sh_parse(struct sh_parser *p, const char *s, size_t len);

/* The end of a $( ... ) starting at s[i] == '(' (after the '$'): the index
 * of its ')', or len when unbalanced. Quotes inside are honoured. */
static size_t sh_match_paren(const char *s, size_t len, size_t i)
{
	int depth = 0;

	for (; i < len; i++) {
		char ch = s[i];

		if (ch == '\\' && i + 1 < len) {
			i++;
		} else if (ch == '\'') {
			while (++i < len && s[i] != '\'')
				;
		} else if (ch == '"') {
			while (++i < len && s[i] != '"')
				if (s[i] == '\\')
					i++;
		} else if (ch == '(') {
			depth++;
		} else if (ch == ')') {
			if (--depth == 0)
				return i;
		}
	}
	return len;
}

/* Parses a $(...) or `...` body as commands of its own. */
static void sh_sub(struct sh_parser *p, const char *s, size_t len)
{
	if (p->depth >= PERM_SHELL_DEPTH) {
		sh_fail(p, "command substitutions nested too deep");
		return;
	}
	p->depth++;
	if (sh_parse(p, s, len) != SB_OK)
		p->rc = SB_ERR_NOMEM;
	p->depth--;
}

/* A '$' at s[*i]: parses what it expands (into the word as written). */
static void sh_dollar(struct sh_parser *p, const char *s, size_t len, size_t *i, struct buf *w,
                      bool *dyn)
{
	size_t j = *i + 1, e;

	*dyn = true;
	if (j < len && s[j] == '(') {
		if (j + 1 < len && s[j + 1] == '(') {
			/* $(( arithmetic )): no commands. */
			e = sh_match_paren(s, len, j);
			if (e >= len) {
				sh_fail(p, "unbalanced $((");
				*i = len;
				return;
			}
			(void)buf_append(w, s + *i, e + 1 - *i);
			*i = e + 1;
			return;
		}
		e = sh_match_paren(s, len, j);
		if (e >= len) {
			sh_fail(p, "unbalanced $(");
			*i = len;
			return;
		}
		sh_sub(p, s + j + 1, e - j - 1);
		(void)buf_append(w, s + *i, e + 1 - *i);
		*i = e + 1;
		return;
	}
	if (j < len && s[j] == '{') {
		e = j;
		while (e < len && s[e] != '}')
			e++;
		if (e >= len) {
			sh_fail(p, "unbalanced ${");
			*i = len;
			return;
		}
		if (memchr(s + j, '$', e - j) || memchr(s + j, '`', e - j))
			sh_fail(p, "a substitution inside ${...}");
		(void)buf_append(w, s + *i, e + 1 - *i);
		*i = e + 1;
		return;
	}
	e = j;
	while (e < len &&
	       (s[e] == '_' || (s[e] >= 'a' && s[e] <= 'z') || (s[e] >= 'A' && s[e] <= 'Z') ||
	        (s[e] >= '0' && s[e] <= '9') || (e == j && strchr("?#@*!$-", s[e]))))
		e++;
	if (e == j) {
		*dyn = false; /* a lone '$' is literal */
		e = j;
	}
	(void)buf_append(w, s + *i, e - *i);
	*i = e;
}

static const char *sh_base(const char *path)
{
	const char *b = strrchr(path, '/');

	return b ? b + 1 : path;
}

static bool sh_is_assignment(const char *w)
{
	const char *eq = strchr(w, '=');

	if (!eq || eq == w)
		return false;
	for (const char *c = w; c < eq; c++)
		if (!(*c == '_' || (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
		      (c > w && *c >= '0' && *c <= '9')))
			return false;
	return true;
}

static int sh_add_write(struct sh_parser *p, const char *target)
{
	struct perm_shell *sh = p->sh;

	if (strcmp(target, "/dev/null") == 0 || strcmp(target, "/dev/stdout") == 0 ||
	    strcmp(target, "/dev/stderr") == 0)
		return SB_OK;
	if (sh->n_writes == PERM_SHELL_MAX_WRITES) {
		sh_fail(p, "too many redirections");
		return SB_OK;
	}
	if (!(sh->writes[sh->n_writes] = strdup(target)))
		return SB_ERR_NOMEM;
	sh->n_writes++;
	return SB_OK;
}

/* Records the simple command words[from..n) (wrappers unwrapped). */
static int sh_emit(struct sh_parser *p, struct sh_word *w, size_t n)
{
	static const char *const wrappers[] = {"env",    "nice",    "nohup",   "timeout", "stdbuf",
	                                       "time",   "command", "exec",    "xargs",   "ionice",
	                                       "setsid", "chrt",    "taskset", NULL};
	struct perm_shell *sh = p->sh;
	size_t k = 0;
	struct buf text;
	const char *name;
	bool wrapper = false;

	while (k < n && sh_is_assignment(w[k].text))
		k++;
	if (k == n)
		return SB_OK;
	if (w[k].dyn) {
		sh_fail(p, "the program to run is computed (%s)", w[k].text);
		return SB_OK;
	}
	name = sh_base(w[k].text);
	if (strcmp(name, "eval") == 0 || strcmp(name, "alias") == 0 ||
	    strcmp(name, "function") == 0 || strcmp(name, "trap") == 0) {
		sh_fail(p, "%s runs text that cannot be checked", name);
		return SB_OK;
	}
	if (sh->n_cmds == PERM_SHELL_MAX_CMDS) {
		sh_fail(p, "too many commands");
		return SB_OK;
	}
	buf_init(&text, PERM_WORD_MAX);
	for (size_t i = k; i < n; i++) {
		if (i > k)
			(void)buf_puts(&text, " ");
		(void)buf_puts(&text, w[i].text);
	}
	sh->cmds[sh->n_cmds] = buf_steal(&text);
	sh->names[sh->n_cmds] = strdup(name);
	if (!sh->cmds[sh->n_cmds] || !sh->names[sh->n_cmds]) {
		free(sh->cmds[sh->n_cmds]);
		free(sh->names[sh->n_cmds]);
		sh->cmds[sh->n_cmds] = sh->names[sh->n_cmds] = NULL;
		return SB_ERR_NOMEM;
	}
	sh->n_cmds++;

	for (size_t i = 0; wrappers[i]; i++)
		if (strcmp(name, wrappers[i]) == 0)
			wrapper = true;
	if (wrapper) {
		/* The wrapped program is a command too: skip options, NAME=value
		 * and the wrapper's own operand. */
		size_t j = k + 1;

		while (j < n && (w[j].text[0] == '-' || sh_is_assignment(w[j].text))) {
			if (w[j].dyn) {
				sh_fail(p, "a computed option of %s", name);
				return SB_OK;
			}
			/* options that take a value */
			if ((strcmp(name, "nice") == 0 && strcmp(w[j].text, "-n") == 0) ||
			    (strcmp(name, "xargs") == 0 &&
			     (strcmp(w[j].text, "-I") == 0 || strcmp(w[j].text, "-n") == 0 ||
			      strcmp(w[j].text, "-P") == 0 || strcmp(w[j].text, "-d") == 0)) ||
			    (strcmp(name, "timeout") == 0 &&
			     (strcmp(w[j].text, "-s") == 0 || strcmp(w[j].text, "-k") == 0)))
				j++;
			j++;
		}
		if (strcmp(name, "timeout") == 0 || strcmp(name, "chrt") == 0 ||
		    strcmp(name, "taskset") == 0)
			j++;
		if (j < n)
			return sh_emit(p, w + j, n - j);
		return SB_OK;
	}
	if ((strcmp(name, "sh") == 0 || strcmp(name, "bash") == 0 || strcmp(name, "dash") == 0 ||
	     strcmp(name, "zsh") == 0) &&
	    n - k >= 3 && strcmp(w[k + 1].text, "-c") == 0) {
		if (w[k + 2].dyn) {
			sh_fail(p, "%s -c with a computed script", name);
			return SB_OK;
		}
		sh_sub(p, w[k + 2].text, strlen(w[k + 2].text));
		return p->rc;
	}
	return SB_OK;
}

static bool sh_keyword_skip(const char *w)
{
	static const char *const kw[] = {"if", "then", "elif", "else", "fi", "while", "until",
	                                 "do", "done", "!",    "{",    "}",  NULL};

	for (size_t i = 0; kw[i]; i++)
		if (strcmp(w, kw[i]) == 0)
			return true;
	return false;
}

/* Ends the current word (if any) into the command. */
static int sh_end_word(struct sh_parser *p, struct sh_cmd *c, struct buf *w, bool *in_word,
                       bool *dyn, bool quoted)
{
	char *text;

	if (!*in_word)
		return SB_OK;
	*in_word = false;
	text = w->data ? strndup(w->data, w->len) : strdup("");
	buf_reset(w);
	if (!text)
		return SB_ERR_NOMEM;
	if (c->redirect_next) {
		int rc = SB_OK;

		c->redirect_next = false;
		if (c->redirect_write)
			rc = *dyn ? (sh_fail(p, "a redirection to a computed file"), SB_OK)
			          : sh_add_write(p, text);
		free(text);
		*dyn = false;
		return rc;
	}
	if (c->n == 0 && !quoted) {
		static const char *const refused[] = {"for", "case", "select", "coproc", NULL};

		for (size_t i = 0; refused[i]; i++)
			if (strcmp(text, refused[i]) == 0) {
				sh_fail(p, "%s is not understood here", text);
				free(text);
				return SB_OK;
			}
		if (sh_keyword_skip(text)) {
			free(text);
			*dyn = false;
			return SB_OK;
		}
	}
	if (c->n == PERM_WORDS_MAX) {
		sh_fail(p, "a command with too many words");
		free(text);
		return SB_OK;
	}
	c->w[c->n].text = text;
	c->w[c->n].dyn = *dyn;
	c->n++;
	*dyn = false;
	return SB_OK;
}

static int sh_end_cmd(struct sh_parser *p, struct sh_cmd *c)
{
	int rc = SB_OK;

	if (c->redirect_next)
		sh_fail(p, "a redirection without a target");
	if (c->n)
		rc = sh_emit(p, c->w, c->n);
	sh_cmd_clear(c);
	return rc;
}

static int sh_parse(struct sh_parser *p, const char *s, size_t len)
{
	struct sh_cmd *c = calloc(1, sizeof *c);
	struct buf w;
	bool in_word = false, dyn = false, quoted = false;
	size_t i = 0;
	int rc = SB_ERR_NOMEM;

	if (!c)
		return SB_ERR_NOMEM;
	buf_init(&w, PERM_WORD_MAX);
	while (i < len && p->sh->ok && p->rc == SB_OK) {
		char ch = s[i];

		if (ch == ' ' || ch == '\t') {
			if ((rc = sh_end_word(p, c, &w, &in_word, &dyn, quoted)) != SB_OK)
				goto out;
			quoted = false;
			i++;
		} else if (ch == '#' && !in_word) {
			while (i < len && s[i] != '\n')
				i++;
		} else if (ch == '\\') {
			if (i + 1 < len && s[i + 1] == '\n') {
				i += 2;
				continue;
			}
			in_word = true;
			if (i + 1 < len)
				(void)buf_append(&w, s + i + 1, 1);
			i += 2;
		} else if (ch == '\'') {
			size_t e = i + 1;

			while (e < len && s[e] != '\'')
				e++;
			if (e >= len) {
				sh_fail(p, "an unterminated ' quote");
				break;
			}
			in_word = quoted = true;
			(void)buf_append(&w, s + i + 1, e - i - 1);
			i = e + 1;
		} else if (ch == '"') {
			in_word = quoted = true;
			i++;
			while (i < len && s[i] != '"' && p->sh->ok) {
				if (s[i] == '\\' && i + 1 < len) {
					(void)buf_append(&w, s + i + 1, 1);
					i += 2;
				} else if (s[i] == '$') {
					sh_dollar(p, s, len, &i, &w, &dyn);
				} else if (s[i] == '`') {
					size_t e = i + 1;

					while (e < len && s[e] != '`')
						e++;
					if (e >= len) {
						sh_fail(p, "an unterminated ` quote");
						break;
					}
					sh_sub(p, s + i + 1, e - i - 1);
					dyn = true;
					(void)buf_append(&w, s + i, e + 1 - i);
					i = e + 1;
				} else {
					(void)buf_append(&w, s + i, 1);
					i++;
				}
			}
			if (i >= len) {
				sh_fail(p, "an unterminated \" quote");
				break;
			}
			i++;
		} else if (ch == '$') {
			in_word = true;
			sh_dollar(p, s, len, &i, &w, &dyn);
		} else if (ch == '`') {
			size_t e = i + 1;

			while (e < len && s[e] != '`')
				e++;
			if (e >= len) {
				sh_fail(p, "an unterminated ` quote");
				break;
			}
			sh_sub(p, s + i + 1, e - i - 1);
			in_word = dyn = true;
			(void)buf_append(&w, s + i, e + 1 - i);
			i = e + 1;
		} else if (ch == '|' || ch == ';' || ch == '\n' ||
		           (ch == '&' && !(i + 1 < len && s[i + 1] == '>'))) {
			if ((rc = sh_end_word(p, c, &w, &in_word, &dyn, quoted)) != SB_OK ||
			    (rc = sh_end_cmd(p, c)) != SB_OK)
				goto out;
			quoted = false;
			if (ch == ';' && i + 1 < len && s[i + 1] == ';') {
				sh_fail(p, ";; outside a case");
				break;
			}
			i++;
		} else if (ch == '(' || ch == ')') {
			if ((rc = sh_end_word(p, c, &w, &in_word, &dyn, quoted)) != SB_OK)
				goto out;
			quoted = false;
			if (ch == '(' && c->n) {
				sh_fail(p, "a function definition or ( after a command");
				break;
			}
			if ((rc = sh_end_cmd(p, c)) != SB_OK)
				goto out;
			i++;
		} else if (ch == '<' || ch == '>' ||
		           (ch == '&' && i + 1 < len && s[i + 1] == '>')) {
			bool write = ch != '<';
			bool fd_word = in_word && !quoted && !dyn && w.len > 0;

			/* "2>": the digits before are a descriptor, not a word. */
			for (size_t k = 0; fd_word && k < w.len; k++)
				if (w.data[k] < '0' || w.data[k] > '9')
					fd_word = false;
			if (fd_word) {
				buf_reset(&w);
				in_word = false;
			} else if ((rc = sh_end_word(p, c, &w, &in_word, &dyn, quoted)) != SB_OK) {
				goto out;
			}
			quoted = false;
			if (ch == '&')
				i++; /* &> */
			if (ch == '<' && i + 1 < len && s[i + 1] == '<') {
				if (i + 2 < len && s[i + 2] == '<') {
					i += 3; /* <<< a here-string: its word is data */
					c->redirect_next = true;
					c->redirect_write = false;
					continue;
				}
				sh_fail(p, "here-documents are not understood here");
				break;
			}
			if (ch == '<' && i + 1 < len && s[i + 1] == '(') {
				sh_fail(p, "process substitution is not understood here");
				break;
			}
			i++;
			if (i < len && (s[i] == '>' || s[i] == '|'))
				i++; /* >> or >| */
			if (i < len && s[i] == '&') {
				/* >&2, <&0: a descriptor duplication, or &> */
				size_t e = i + 1;

				while (e < len && ((s[e] >= '0' && s[e] <= '9') || s[e] == '-'))
					e++;
				if (e > i + 1) {
					i = e;
					continue;
				}
				i++;
			}
			c->redirect_next = true;
			c->redirect_write = write;
		} else {
			in_word = true;
			(void)buf_append(&w, s + i, 1);
			i++;
		}
	}
	if (p->sh->ok && p->rc == SB_OK) {
		if ((rc = sh_end_word(p, c, &w, &in_word, &dyn, quoted)) != SB_OK ||
		    (rc = sh_end_cmd(p, c)) != SB_OK)
			goto out;
	}
	rc = p->rc;
out:
	sh_cmd_clear(c);
	free(c);
	buf_free(&w);
	return rc;
}

int perm_shell_parse(const char *command, struct perm_shell *sh)
{
	struct sh_parser p = {.sh = sh, .depth = 0, .rc = SB_OK};
	int rc;

	memset(sh, 0, sizeof *sh);
	sh->ok = true;
	if (!command)
		command = "";
	rc = sh_parse(&p, command, strlen(command));
	if (rc == SB_OK && sh->ok && sh->n_cmds == 0 && sh->n_writes == 0 && *command) {
		/* Only keywords or separators: nothing runs. */
	}
	return rc;
}

void perm_shell_release(struct perm_shell *sh)
{
	if (!sh)
		return;
	for (size_t i = 0; i < sh->n_cmds; i++) {
		free(sh->cmds[i]);
		free(sh->names[i]);
	}
	for (size_t i = 0; i < sh->n_writes; i++)
		free(sh->writes[i]);
	sh->n_cmds = sh->n_writes = 0;
}

/* ---- command classes ---- */

enum perm_class { PERM_CLASS_READ = 0, PERM_CLASS_WRITE, PERM_CLASS_EXEC, PERM_CLASS_NETWORK };

static const char *const perm_class_names[] = {"read", "write", "exec", "network"};

static bool perm_word_in(const char *w, const char *const *set)
{
	for (size_t i = 0; set[i]; i++)
		if (strcmp(w, set[i]) == 0)
			return true;
	return false;
}

/* The i-th word of a command's text (0 = the program), copied into out. */
static bool perm_cmd_word(const char *cmd, size_t i, char *out, size_t size)
{
	const char *p = cmd, *e;

	for (;;) {
		while (*p == ' ')
			p++;
		if (!*p)
			return false;
		e = strchr(p, ' ');
		if (!e)
			e = p + strlen(p);
		if (i-- == 0) {
			snprintf(out, size, "%.*s", (int)(e - p), p);
			return true;
		}
		p = e;
	}
}

static bool perm_cmd_has_word(const char *cmd, const char *word)
{
	char w[256];

	for (size_t i = 1; perm_cmd_word(cmd, i, w, sizeof w); i++)
		if (strcmp(w, word) == 0)
			return true;
	return false;
}

/* The command's key for rules and approval scopes: "git push", "make". */
static void perm_cmd_key(const char *name, const char *cmd, char *out, size_t size)
{
	char sub[128];

	if ((strcmp(name, "git") == 0 || strcmp(name, "npm") == 0 || strcmp(name, "pip") == 0 ||
	     strcmp(name, "pip3") == 0 || strcmp(name, "cargo") == 0 || strcmp(name, "go") == 0 ||
	     strcmp(name, "docker") == 0 || strcmp(name, "apt-get") == 0 ||
	     strcmp(name, "apt") == 0) &&
	    perm_cmd_word(cmd, 1, sub, sizeof sub) && sub[0] != '-')
		snprintf(out, size, "%.60s %.60s", name, sub);
	else
		snprintf(out, size, "%.120s", name);
}

/* Whether any word of cmd after the program starts with one of prefixes. */
static bool perm_cmd_has_prefix(const char *cmd, const char *const *prefixes)
{
	char w[256];

	for (size_t i = 1; perm_cmd_word(cmd, i, w, sizeof w); i++)
		for (size_t k = 0; prefixes[k]; k++)
			if (strncmp(w, prefixes[k], strlen(prefixes[k])) == 0)
				return true;
	return false;
}

/* Whether a cluster of short options ("-uo", "-o") holds the letter c. */
static bool perm_cmd_has_short(const char *cmd, char c)
{
	char w[256];

	for (size_t i = 1; perm_cmd_word(cmd, i, w, sizeof w); i++)
		if (w[0] == '-' && w[1] != '-' && strchr(w + 1, c))
			return true;
	return false;
}

/* How many words after the program do not start with '-'. */
static size_t perm_cmd_operands(const char *cmd)
{
	char w[256];
	size_t n = 0;

	for (size_t i = 1; perm_cmd_word(cmd, i, w, sizeof w); i++)
		if (w[0] != '-')
			n++;
	return n;
}

/* sed takes a program text: its e command and s///e flag run commands, w
 * and s///w write files. Read only in the plain forms: the options that
 * change neither (-n, -E, -r, -s, -u, -z), then one script that is an
 * address with p, d, q or = ("1p", "1,5d", "$p"), or s/x/y/ whose flags are
 * only g, p, I or a number, and the files. Anything else: exec; -i: write. */
static enum perm_class perm_classify_sed(const char *cmd)
{
	static const char *const plain_opts[] = {
	    "-n", "--quiet", "--silent", "-E", "-r", "--regexp-extended", "-s", "-u", "-z", NULL};
	char w[256];
	bool script = false;

	for (size_t i = 1; perm_cmd_word(cmd, i, w, sizeof w); i++) {
		if (strncmp(w, "-i", 2) == 0 || strncmp(w, "--in-place", 10) == 0)
			return PERM_CLASS_WRITE;
		if (w[0] == '-') {
			if (!perm_word_in(w, plain_opts))
				return PERM_CLASS_EXEC; /* -e, -f, --expression, anything unknown */
			continue;
		}
		if (script)
			continue; /* a file */
		script = true;
		if (w[0] == 's' && w[1] == '/') {
			const char *p = w + 2;
			int slashes = 0;

			for (; *p && slashes < 2; p++) {
				if (*p == '\\' && p[1])
					p++;
				else if (*p == '/')
					slashes++;
			}
			if (slashes < 2)
				return PERM_CLASS_EXEC;
			for (; *p; p++)
				if (!strchr("gpI0123456789", *p))
					return PERM_CLASS_EXEC;
			continue;
		}
		{
			size_t n = strspn(w, "0123456789,$");

			if (n == 0 || (w[n] && (!strchr("pdq=", w[n]) || w[n + 1])))
				return PERM_CLASS_EXEC;
		}
	}
	return PERM_CLASS_READ;
}

static enum perm_class perm_classify(const char *name, const char *cmd)
{
	static const char *const read[] = {
	    "ls",    "cat",    "head",     "tail",     "grep",     "egrep",    "fgrep",
	    "rg",    "find",   "wc",       "stat",     "file",     "echo",     "printf",
	    "pwd",   "true",   "false",    "test",     "[",        "[[",       "sort",
	    "uniq",  "cut",    "tr",       "diff",     "cmp",      "basename", "dirname",
	    "date",  "whoami", "id",       "which",    "type",     "printenv", "du",
	    "df",    "tree",   "realpath", "readlink", "md5sum",   "sha1sum",  "sha256sum",
	    "jq",    "nl",     "od",       "hexdump",  "xxd",      "column",   "comm",
	    "join",  "paste",  "fold",     "fmt",      "expr",     "seq",      "sleep",
	    "tac",   "rev",    "strings",  "uname",    "hostname", "cd",       "export",
	    "set",   "unset",  "read",     "local",    "return",   "exit",     "shift",
	    "wait",  ":",      "env",      "time",     "nice",     "timeout",  "command",
	    "nohup", "stdbuf", NULL};
	static const char *const network[] = {
	    "curl",   "wget",   "ssh", "scp",  "sftp", "rsync",    "nc",   "ncat",
	    "netcat", "telnet", "ftp", "ping", "dig",  "nslookup", "host", NULL};
	static const char *const git_read[] = {"status",   "log",       "diff",     "show",
	                                       "blame",    "rev-parse", "ls-files", "describe",
	                                       "shortlog", "grep",      NULL};
	static const char *const git_net[] = {"clone",     "fetch",     "pull", "push",
	                                      "ls-remote", "submodule", NULL};
	static const char *const pkg[] = {"npm", "pip", "pip3", "yarn",    "pnpm", "cargo",
	                                  "go",  "gem", "apt",  "apt-get", NULL};
	char sub[128];

	if (strcmp(name, "git") == 0) {
		if (!perm_cmd_word(cmd, 1, sub, sizeof sub))
			return PERM_CLASS_READ;
		if (perm_word_in(sub, git_read)) {
			/* git grep -O runs a pager on the matches; --output writes
			 * a file; --ext-diff and --textconv run configured
			 * programs. */
			if (perm_cmd_has_prefix(
			        cmd, (const char *const[]){"-O", "--open-files-in-pager",
			                                   "--ext-diff", "--textconv", NULL}))
				return PERM_CLASS_EXEC;
			if (perm_cmd_has_prefix(cmd, (const char *const[]){"--output", NULL}))
				return PERM_CLASS_WRITE;
			return PERM_CLASS_READ;
		}
		return perm_word_in(sub, git_net) ? PERM_CLASS_NETWORK : PERM_CLASS_WRITE;
	}
	if (perm_word_in(name, pkg) && perm_cmd_word(cmd, 1, sub, sizeof sub) &&
	    (strcmp(sub, "install") == 0 || strcmp(sub, "add") == 0 || strcmp(sub, "get") == 0 ||
	     strcmp(sub, "fetch") == 0 || strcmp(sub, "update") == 0 || strcmp(sub, "ci") == 0))
		return PERM_CLASS_NETWORK;
	if (perm_word_in(name, network))
		return PERM_CLASS_NETWORK;
	/* Programs that take a program text are exec, whatever the text. */
	if (perm_word_in(name, (const char *const[]){"awk", "gawk", "mawk", "nawk", "busybox",
	                                             "less", "more", "most", "pg", "vi", "vim",
	                                             "ed", "ex", NULL}))
		return PERM_CLASS_EXEC;
	if (strcmp(name, "sed") == 0)
		return perm_classify_sed(cmd);
	/* find runs (-exec, -execdir, -ok, -okdir), deletes, or writes files
	 * (-fprint, -fprint0, -fprintf, -fls). */
	if (strcmp(name, "find") == 0 &&
	    (perm_cmd_has_word(cmd, "-delete") ||
	     perm_cmd_has_prefix(cmd,
	                         (const char *const[]){"-exec", "-ok", "-fprint", "-fls", NULL})))
		return PERM_CLASS_EXEC;
	/* sort -o FILE writes it; --compress-program runs one. */
	if (strcmp(name, "sort") == 0) {
		if (perm_cmd_has_prefix(cmd, (const char *const[]){"--compress-program", NULL}))
			return PERM_CLASS_EXEC;
		if (perm_cmd_has_short(cmd, 'o') ||
		    perm_cmd_has_prefix(cmd, (const char *const[]){"--output", NULL}))
			return PERM_CLASS_WRITE;
	}
	/* xxd -r turns a dump back into bytes; "xxd IN OUT" and "uniq IN OUT"
	 * write OUT; tree -o and file -C write files. */
	if (strcmp(name, "xxd") == 0 &&
	    (perm_cmd_has_prefix(cmd, (const char *const[]){"-r", NULL}) ||
	     perm_cmd_operands(cmd) > 1))
		return PERM_CLASS_WRITE;
	if (strcmp(name, "uniq") == 0 && perm_cmd_operands(cmd) > 1)
		return PERM_CLASS_WRITE;
	if ((strcmp(name, "tree") == 0 && perm_cmd_has_short(cmd, 'o')) ||
	    (strcmp(name, "file") == 0 && perm_cmd_has_short(cmd, 'C')))
		return PERM_CLASS_WRITE;
	/* rg --pre runs a program on every file it searches. */
	if (strcmp(name, "rg") == 0 &&
	    perm_cmd_has_prefix(cmd, (const char *const[]){"--pre", NULL}))
		return PERM_CLASS_EXEC;
	if (perm_word_in(name, read))
		return PERM_CLASS_READ;
	if (perm_word_in(name,
	                 (const char *const[]){"cp", "mv", "mkdir", "touch", "rm", "rmdir", "ln",
	                                       "chmod", "tee", "truncate", "patch", "install",
	                                       "unzip", "tar", "gzip", "gunzip", NULL}))
		return PERM_CLASS_WRITE;
	return PERM_CLASS_EXEC;
}

/* Does a rule entry (program, "program sub", class:X, or glob) match? */
static bool perm_cmd_entry_matches(const char *entry, const char *name, const char *cmd,
                                   enum perm_class cls)
{
	size_t n;

	if (strncmp(entry, "class:", 6) == 0)
		return strcmp(entry + 6, perm_class_names[cls]) == 0;
	if (strpbrk(entry, "*?["))
		return fnmatch(entry, cmd, 0) == 0;
	if (!strchr(entry, ' '))
		return strcmp(entry, name) == 0;
	n = strlen(entry);
	return strncmp(cmd, entry, n) == 0 && (cmd[n] == '\0' || cmd[n] == ' ');
}

static bool perm_cmd_list_matches(char *const *list, size_t n, const char *name, const char *cmd,
                                  enum perm_class cls)
{
	for (size_t i = 0; i < n; i++)
		if (list[i] && perm_cmd_entry_matches(list[i], name, cmd, cls))
			return true;
	return false;
}

/* ---- gate 1: the hard deny list ---- */

/* Folds path (absolute, or relative to base) lexically into out. */
static void perm_fold(const char *base, const char *path, char *out, size_t size)
{
	char tmp[4096];
	char *comps[256];
	size_t n = 0;
	struct buf b;

	if (path[0] == '/')
		snprintf(tmp, sizeof tmp, "%s", path);
	else
		snprintf(tmp, sizeof tmp, "%s/%s", base, path);
	for (char *p = tmp, *s; p; p = s) {
		s = strchr(p, '/');
		if (s)
			*s++ = '\0';
		if (!*p || strcmp(p, ".") == 0)
			continue;
		if (strcmp(p, "..") == 0) {
			if (n)
				n--;
			continue;
		}
		if (n < 256)
			comps[n++] = p;
	}
	buf_init(&b, size - 1);
	for (size_t i = 0; i < n; i++) {
		(void)buf_puts(&b, "/");
		(void)buf_puts(&b, comps[i]);
	}
	snprintf(out, size, "%s", b.len ? b.data : "/");
	buf_free(&b);
}

/* Whether a word of a command names the gateway's home (outside the
 * workspace) or the workspace's .git. */
static const char *perm_word_hazard(const struct permissions *p, const char *word, bool *git)
{
	char folded[4096];
	const char *w = word;

	*git = false;
	/* NAME=value and --opt=value carry paths too */
	if (w[0] == '-' && strchr(w, '='))
		w = strchr(w, '=') + 1;
	if (!*w)
		return NULL;
	if (w[0] == '~')
		return "the home directory";
	if (!strchr(w, '/') && strcmp(w, "..") != 0 && strcmp(w, ".git") != 0)
		return NULL;
	if (!p->workspace)
		return NULL;
	perm_fold(p->workspace, w, folded, sizeof folded);
	if (perm_inside(p->workspace, folded)) {
		size_t n = strlen(p->workspace);
		const char *rel = folded[n] ? folded + n + 1 : "";

		if (strcmp(rel, ".git") == 0 || strncmp(rel, ".git/", 5) == 0)
			*git = true;
		return NULL;
	}
	if (p->home && perm_inside(p->home, folded))
		return "the gateway's home directory";
	return NULL;
}

static bool perm_rm_root(const char *cmd)
{
	char w[512];
	bool recursive = false;

	for (size_t i = 1; perm_cmd_word(cmd, i, w, sizeof w); i++) {
		if (w[0] == '-' && w[1] != '-' && (strchr(w, 'r') || strchr(w, 'R')))
			recursive = true;
		if (strcmp(w, "--recursive") == 0)
			recursive = true;
	}
	if (!recursive)
		return false;
	for (size_t i = 1; perm_cmd_word(cmd, i, w, sizeof w); i++) {
		size_t n = strlen(w);

		if (w[0] == '-')
			continue;
		while (n > 1 && w[n - 1] == '/')
			w[--n] = '\0';
		if (strcmp(w, "/") == 0 || strcmp(w, "/*") == 0 || strcmp(w, "~") == 0 ||
		    strcmp(w, "~/*") == 0 || strcmp(w, "$HOME") == 0 || strcmp(w, "${HOME}") == 0 ||
		    (w[0] == '/' && !strchr(w + 1, '/')))
			return true;
	}
	return false;
}

/* Gate 1 for one simple command. Returns the reason, or NULL. */
static bool perm_hard_cmd(const struct permissions *p, const char *name, const char *cmd, char *why,
                          size_t size)
{
	static const char *const never[] = {"sudo",   "su",     "doas",     "pkexec",   "mkswap",
	                                    "fdisk",  "sfdisk", "parted",   "wipefs",   "shutdown",
	                                    "reboot", "halt",   "poweroff", "telinit",  "mount",
	                                    "umount", "insmod", "rmmod",    "modprobe", "nsenter",
	                                    "chroot", "kexec",  "swapon",   "swapoff",  NULL};
	static const char *const writers[] = {
	    "rm",       "mv",    "cp",    "tee", "touch",   "chmod", "chown", "ln",
	    "truncate", "mkdir", "rmdir", "dd",  "install", "sed",   "patch", NULL};
	char w[1024];
	const struct security_config *sec = p->security;
	bool git, writes_git = false;
	const char *hz;

	if (perm_word_in(name, never) || strncmp(name, "mkfs", 4) == 0) {
		snprintf(why, size, "%s is never allowed", name);
		return true;
	}
	if (strcmp(name, "rm") == 0 && perm_rm_root(cmd)) {
		snprintf(why, size,
		         "recursive removal of / or a top-level directory is never allowed");
		return true;
	}
	if (strcmp(name, "dd") == 0) {
		for (size_t i = 1; perm_cmd_word(cmd, i, w, sizeof w); i++)
			if (strncmp(w, "of=/dev/", 8) == 0) {
				snprintf(why, size, "dd to a device is never allowed");
				return true;
			}
	}
	if (strcmp(name, "chmod") == 0 && perm_cmd_has_word(cmd, "-R") &&
	    perm_cmd_has_word(cmd, "/")) {
		snprintf(why, size, "changing permissions of / is never allowed");
		return true;
	}
	for (size_t i = 1; perm_cmd_word(cmd, i, w, sizeof w); i++) {
		if ((hz = perm_word_hazard(p, w, &git)) != NULL) {
			snprintf(why, size, "%.100s may not touch %s (%.300s)", name, hz, w);
			return true;
		}
		if (git)
			writes_git = true;
	}
	if (writes_git && perm_word_in(name, writers)) {
		snprintf(why, size, "writing to the workspace's .git is never allowed (%s)", cmd);
		return true;
	}
	if (sec && perm_cmd_list_matches(sec->deny_commands, sec->n_deny_commands, name, cmd,
	                                 perm_classify(name, cmd))) {
		snprintf(why, size, "%s is on the operator's deny list", name);
		return true;
	}
	return false;
}

/* ---- gate 2: rules ---- */

static bool perm_rule_applies(const struct permissions *p, const struct perm_rule *r)
{
	if (r->who == PERM_WHO_OWNER && !p->owner)
		return false;
	if (r->who == PERM_WHO_OTHERS && p->owner)
		return false;
	if (r->chat == PERM_CHAT_DIRECT && p->group)
		return false;
	if (r->chat == PERM_CHAT_GROUP && !p->group)
		return false;
	if (r->channel && (!p->channel || strcmp(r->channel, p->channel) != 0))
		return false;
	if (r->sender && (!p->sender || strcmp(r->sender, p->sender) != 0))
		return false;
	return true;
}

static int perm_profile_of(const struct permissions *p)
{
	int profile = p->agent.profile ? p->agent.profile : PERM_PROFILE_CODING;

	for (size_t i = 0; i < p->agent.n_rules; i++)
		if (perm_rule_applies(p, &p->agent.rules[i]) && p->agent.rules[i].profile)
			profile = p->agent.rules[i].profile;
	return profile;
}

static bool perm_path_matches(char *const *list, size_t n, const char *rel)
{
	for (size_t i = 0; i < n; i++) {
		const char *g = list[i];
		size_t gl;

		if (!g)
			continue;
		gl = strlen(g);
		if (gl && g[gl - 1] == '/') {
			if (strncmp(rel, g, gl) == 0 ||
			    (strncmp(rel, g, gl - 1) == 0 && !rel[gl - 1]))
				return true;
			continue;
		}
		if (fnmatch(g, rel, 0) == 0 || strcmp(g, rel) == 0)
			return true;
	}
	return false;
}

/* A tool list of the rules: names, or glob patterns ("mcp__github__*"). */
static bool perm_tool_in_list(char *const *list, size_t n, const char *tool)
{
	for (size_t i = 0; i < n; i++)
		if (list[i] && (strcmp(list[i], tool) == 0 || fnmatch(list[i], tool, 0) == 0))
			return true;
	return false;
}

static int perm_check_tool(const struct permissions *p, const char *tool, struct perm_decision *d)
{
	bool allowed = permissions_profile_has(perm_profile_of(p), tool), ask = false;

	for (size_t i = 0; i < p->agent.n_rules; i++) {
		const struct perm_rule *r = &p->agent.rules[i];

		if (!perm_rule_applies(p, r))
			continue;
		if (perm_tool_in_list(r->deny_tools, r->n_deny_tools, tool)) {
			perm_set(d, PERM_DENY, "tool %s is denied by this agent's permission rules",
			         tool);
			return PERM_DENY;
		}
		if (perm_tool_in_list(r->allow_tools, r->n_allow_tools, tool))
			allowed = true;
		if (perm_tool_in_list(r->ask_tools, r->n_ask_tools, tool))
			ask = true;
	}
	if (!allowed) {
		perm_set(d, PERM_DENY, "tool %s is not in the %s profile for this conversation",
		         tool, perm_profiles[perm_profile_of(p)]);
		return PERM_DENY;
	}
	if (ask) {
		perm_set(d, PERM_ASK, "%s needs the operator's approval", tool);
		snprintf(d->scope, sizeof d->scope, "%s:tool", tool);
		return PERM_ASK;
	}
	return PERM_ALLOW;
}

static enum paths_mode perm_path_mode(const char *tool)
{
	if (strcmp(tool, "write") == 0)
		return PATHS_WRITE;
	if (strcmp(tool, "edit") == 0)
		return PATHS_WRITE_EXISTING;
	return PATHS_EXISTING;
}

static int perm_check_path(const struct permissions *p, const char *tool, const json_t *input,
                           struct perm_decision *d)
{
	const char *path = json_string_value(json_object_get(input, "path"));
	bool writes = strcmp(tool, "write") == 0 || strcmp(tool, "edit") == 0;
	char why[PERM_MSG_MAX], *abs = NULL, *rel = NULL;
	const struct security_config *sec = p->security;
	int rc;

	if (!path) {
		if (strcmp(tool, "read") == 0 || writes)
			return SB_OK; /* the schema check says what is missing */
		path = ".";
	}
	rc = paths_resolve_real(p->workspace, path, perm_path_mode(tool), &abs, &rel, why,
	                        sizeof why);
	if (rc == SB_ERR_NOMEM)
		return rc;
	if (rc == SB_ERR_NOTFOUND) {
		/* The tool says so itself, the same way. */
		return SB_OK;
	}
	if (rc != SB_OK) {
		perm_set(d, PERM_DENY, "%s", why);
		return SB_OK;
	}
	if (p->home && perm_inside(p->home, abs) && !perm_inside(p->workspace, abs)) {
		perm_set(d, PERM_DENY, "%s is inside the gateway's home directory", path);
		goto out;
	}
	for (size_t i = 0; sec && i < sec->n_deny_paths; i++)
		if (sec->deny_paths[i] && fnmatch(sec->deny_paths[i], abs, 0) == 0) {
			perm_set(d, PERM_DENY, "%s is on the operator's deny list", path);
			goto out;
		}
	for (size_t i = 0; i < p->agent.n_rules; i++) {
		const struct perm_rule *r = &p->agent.rules[i];

		if (!perm_rule_applies(p, r))
			continue;
		if (perm_path_matches(r->deny_paths, r->n_deny_paths, rel)) {
			perm_set(d, PERM_DENY, "%s is denied by this agent's permission rules",
			         path);
			goto out;
		}
		if (perm_path_matches(r->ask_paths, r->n_ask_paths, rel) && d->action == PERM_ALLOW)
			d->action = PERM_ASK;
	}
	if (d->action == PERM_ALLOW && writes && !p->owner &&
	    perm_profile_of(p) != PERM_PROFILE_FULL)
		d->action = PERM_ASK; /* others change files only with approval */
	if (d->action == PERM_ASK || (d->action == PERM_ALLOW && d->scope[0])) {
		/* the directory is the scope: an approval covers it and below */
		const char *slash = strrchr(rel, '/');

		d->action = PERM_ASK;
		perm_set(d, PERM_ASK, "%s %s needs the operator's approval", tool, rel);
		if (slash)
			snprintf(d->scope, sizeof d->scope, "%s:path:%.*s/", tool,
			         (int)(slash - rel), rel);
		else
			snprintf(d->scope, sizeof d->scope, "%s:path:", tool);
	}
	/* The tool gets the resolved path: no symlink or ".." left to race. */
	d->input = json_deep_copy(input);
	if (!d->input || json_object_set_new(d->input, "path", json_string(rel))) {
		rc = SB_ERR_NOMEM;
		goto out;
	}
	rc = SB_OK;
out:
	free(abs);
	free(rel);
	return rc == SB_ERR_NOMEM ? rc : SB_OK;
}

static int perm_check_bash(const struct permissions *p, const json_t *input,
                           struct perm_decision *d)
{
	const char *command = json_string_value(json_object_get(input, "command"));
	struct perm_shell sh;
	char why[PERM_MSG_MAX], key[128];
	struct buf scope;
	bool ask = false;
	int profile = perm_profile_of(p), rc;

	if (!command)
		return SB_OK;
	rc = perm_shell_parse(command, &sh);
	if (rc != SB_OK)
		goto out;
	buf_init(&scope, sizeof d->scope - 1);
	(void)buf_puts(&scope, "bash:cmd:");
	for (size_t i = 0; i < sh.n_cmds; i++) {
		if (perm_hard_cmd(p, sh.names[i], sh.cmds[i], why, sizeof why)) {
			perm_set(d, PERM_DENY, "refused: %s", why);
			goto done;
		}
	}
	for (size_t i = 0; i < sh.n_writes; i++) {
		bool git;
		const char *hz = perm_word_hazard(p, sh.writes[i], &git);

		if (hz || git) {
			perm_set(d, PERM_DENY, "refused: writing to %s is never allowed (%s)",
			         hz ? hz : "the workspace's .git", sh.writes[i]);
			goto done;
		}
	}
	if (!sh.ok) {
		perm_set(d, PERM_ASK,
		         "the command could not be checked (%s); it needs the operator's approval",
		         sh.why);
		snprintf(d->scope, sizeof d->scope, "bash:text:%.*s", (int)(sizeof d->scope - 16),
		         command);
		goto done;
	}
	for (size_t i = 0; i < sh.n_cmds; i++) {
		enum perm_class cls = perm_classify(sh.names[i], sh.cmds[i]);
		bool allow = false, this_ask = false;

		/* the default: the operator runs what parses; others only read */
		if (!p->owner && profile != PERM_PROFILE_FULL && cls != PERM_CLASS_READ)
			this_ask = true;
		for (size_t k = 0; k < p->agent.n_rules; k++) {
			const struct perm_rule *r = &p->agent.rules[k];

			if (!perm_rule_applies(p, r))
				continue;
			if (perm_cmd_list_matches(r->deny_commands, r->n_deny_commands, sh.names[i],
			                          sh.cmds[i], cls)) {
				perm_set(d, PERM_DENY,
				         "%s is denied by this agent's permission rules (%s)",
				         sh.names[i], sh.cmds[i]);
				goto done;
			}
			if (perm_cmd_list_matches(r->ask_commands, r->n_ask_commands, sh.names[i],
			                          sh.cmds[i], cls))
				this_ask = true;
			else if (perm_cmd_list_matches(r->allow_commands, r->n_allow_commands,
			                               sh.names[i], sh.cmds[i], cls))
				allow = true;
		}
		/* an explicit ask beats an allow; an allow lifts the default ask */
		for (size_t k = 0; allow && k < p->agent.n_rules; k++) {
			const struct perm_rule *r = &p->agent.rules[k];

			if (perm_rule_applies(p, r) &&
			    perm_cmd_list_matches(r->ask_commands, r->n_ask_commands, sh.names[i],
			                          sh.cmds[i], cls))
				allow = false;
		}
		if (allow)
			this_ask = false;
		if (this_ask) {
			perm_cmd_key(sh.names[i], sh.cmds[i], key, sizeof key);
			if (ask)
				(void)buf_puts(&scope, "+");
			(void)buf_puts(&scope, key);
			ask = true;
		}
	}
	if (ask) {
		perm_set(d, PERM_ASK, "running `%.400s` needs the operator's approval", command);
		snprintf(d->scope, sizeof d->scope, "%s", scope.data ? scope.data : "bash:cmd:");
	}
done:
	buf_free(&scope);
out:
	perm_shell_release(&sh);
	return rc;
}

/* web_fetch reaches out of the gateway with a URL the model chose (which
 * can carry what it read): others than the operator fetch only with an
 * approval, cached per host. The address checks are the HTTP client's. */
static int perm_check_web(const struct permissions *p, const json_t *input, struct perm_decision *d)
{
	const char *text = json_string_value(json_object_get(input, "url"));
	char why[256];
	struct url u;

	if (!text)
		return SB_OK; /* the schema check says what is missing */
	if (url_parse(text, &u, why, sizeof why) != SB_OK) {
		perm_set(d, PERM_DENY, "%s", why);
		return SB_OK;
	}
	if (d->action == PERM_ALLOW && (p->owner || perm_profile_of(p) == PERM_PROFILE_FULL))
		return SB_OK;
	perm_set(d, PERM_ASK, "fetching %.400s needs the operator's approval", u.href);
	snprintf(d->scope, sizeof d->scope, "web_fetch:host:%.250s", u.host);
	return SB_OK;
}

/* An MCP server's tool may do anything its server can, whatever its
 * annotations claim (readOnlyHint is the server's word, not a grant): for
 * others than the operator it runs only with an approval, cached per tool,
 * unless a rule allows it by name (or pattern) or the profile is full. */
static int perm_check_mcp(const struct permissions *p, const char *tool, struct perm_decision *d)
{
	bool allowed = false;

	if (d->action != PERM_ALLOW || p->owner || perm_profile_of(p) == PERM_PROFILE_FULL)
		return SB_OK;
	for (size_t i = 0; i < p->agent.n_rules; i++) {
		const struct perm_rule *r = &p->agent.rules[i];

		if (perm_rule_applies(p, r) &&
		    perm_tool_in_list(r->allow_tools, r->n_allow_tools, tool))
			allowed = true;
	}
	if (allowed)
		return SB_OK;
	perm_set(d, PERM_ASK, "%s (a tool of an MCP server) needs the operator's approval", tool);
	snprintf(d->scope, sizeof d->scope, "%.250s:tool", tool);
	return SB_OK;
}

int permissions_check(const struct permissions *p, const char *tool, const json_t *input,
                      struct perm_decision *d)
{
	int rc = SB_OK;

	memset(d, 0, sizeof *d);
	d->action = PERM_ALLOW;
	if (!p)
		return SB_OK;
	if (perm_check_tool(p, tool, d) == PERM_DENY)
		return SB_OK;
	if (strcmp(tool, "bash") == 0) {
		enum perm_action tool_action = d->action;
		char tool_scope[PERM_SCOPE_MAX];

		snprintf(tool_scope, sizeof tool_scope, "%s", d->scope);
		rc = perm_check_bash(p, input, d);
		if (rc == SB_OK && d->action == PERM_ALLOW && tool_action == PERM_ASK) {
			d->action = PERM_ASK;
			snprintf(d->scope, sizeof d->scope, "%s", tool_scope);
			perm_set(d, PERM_ASK, "bash needs the operator's approval");
		}
		return rc;
	}
	if (strcmp(tool, "web_fetch") == 0)
		return perm_check_web(p, input, d);
	if (strncmp(tool, "mcp__", 5) == 0)
		return perm_check_mcp(p, tool, d);
	if (strcmp(tool, "read") == 0 || strcmp(tool, "write") == 0 || strcmp(tool, "edit") == 0 ||
	    strcmp(tool, "ls") == 0 || strcmp(tool, "glob") == 0 || strcmp(tool, "grep") == 0) {
		if (!p->workspace) {
			perm_set(d, PERM_DENY, "this agent has no workspace");
			return SB_OK;
		}
		/* an ask from the tool rule keeps its tool scope */
		if (d->action == PERM_ASK) {
			char keep[PERM_SCOPE_MAX];

			snprintf(keep, sizeof keep, "%s", d->scope);
			d->action = PERM_ALLOW;
			d->scope[0] = '\0';
			rc = perm_check_path(p, tool, input, d);
			if (rc == SB_OK && d->action != PERM_DENY) {
				d->action = PERM_ASK;
				snprintf(d->scope, sizeof d->scope, "%s", keep);
			}
			return rc;
		}
		return perm_check_path(p, tool, input, d);
	}
	return SB_OK;
}
