/*
 * config_lint.c - what a valid configuration can still get wrong on this
 * machine (config.h, config_lint).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gateway/config/config.h"
#include "gateway/core/err.h"

static void lint_add(struct cfg_errors *e, const char *file, int line, int col, const char *path,
                     const char *hint, const char *fmt, ...) __attribute__((format(printf, 7, 8)));

static void lint_add(struct cfg_errors *e, const char *file, int line, int col, const char *path,
                     const char *hint, const char *fmt, ...)
{
	struct cfg_error *v;
	char msg[1024];
	va_list ap;

	if (e->n == e->cap) {
		size_t cap = e->cap ? e->cap * 2 : 8;

		v = realloc(e->v, cap * sizeof *v);
		if (!v)
			return;
		e->v = v;
		e->cap = cap;
	}
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	v = &e->v[e->n];
	memset(v, 0, sizeof *v);
	v->file = strdup(file ? file : "");
	v->line = line;
	v->col = col;
	v->path = strdup(path ? path : "");
	v->msg = strdup(msg);
	v->hint = hint ? strdup(hint) : NULL;
	if (!v->file || !v->path || !v->msg || (hint && !v->hint)) {
		free(v->file);
		free(v->path);
		free(v->msg);
		free(v->hint);
		return;
	}
	e->n++;
}

/* The account ids a channel has configured; *known false for a channel
 * this check does not know the accounts of. */
static size_t lint_accounts(const struct config *cfg, const char *channel, const char **ids,
                            size_t max, bool *known)
{
	size_t n = 0;

	*known = true;
	if (strcmp(channel, "telegram") == 0) {
		const struct telegram_config *t = &cfg->channels.telegram.telegram;

		for (size_t i = 0; i < t->n_accounts && n < max; i++)
			ids[n++] = t->accounts[i].id;
	} else if (strcmp(channel, "slack") == 0) {
		const struct slack_config *s = &cfg->channels.slack.slack;

		for (size_t i = 0; i < s->n_accounts && n < max; i++)
			ids[n++] = s->accounts[i].id;
	} else if (strcmp(channel, "webhook") == 0) {
		const struct webhook_config *w = &cfg->channels.webhook.webhook;

		for (size_t i = 0; i < w->n_hooks && n < max; i++)
			ids[n++] = w->hooks[i].name;
	} else {
		*known = false;
	}
	return n;
}

void config_lint(const struct config *cfg, struct cfg_errors *errors, struct cfg_errors *warnings)
{
	char key[64];

	for (size_t i = 0; i < cfg->n_agents; i++) {
		const struct agent_config *a = &cfg->agents[i];
		char path[4200];
		struct stat st;

		if (!a->workspace)
			continue;
		if (a->workspace[0] == '/')
			snprintf(path, sizeof path, "%s", a->workspace);
		else
			snprintf(path, sizeof path, "%s/%s", cfg->home ? cfg->home : ".", a->workspace);
		snprintf(key, sizeof key, "agents[%zu].workspace", i);
		if (stat(path, &st) != 0)
			lint_add(errors, cfg->path, 0, 0, key,
			         "`switchboard init` creates the workspaces that are missing, or "
			         "point agents[].workspace at the directory",
			         "agent \"%s\": the workspace %s does not exist, so every run of it "
			         "would fail",
			         a->id, path);
		else if (!S_ISDIR(st.st_mode))
			lint_add(errors, cfg->path, 0, 0, key, NULL,
			         "agent \"%s\": the workspace %s is not a directory", a->id, path);
	}
	for (size_t i = 0; i < cfg->n_bindings; i++) {
		const struct binding_config *b = &cfg->bindings[i];
		const char *ids[256], *want = b->match.account ? b->match.account : "default";
		bool known, found = false;
		size_t n;

		if (!b->match.channel)
			continue;
		n = lint_accounts(cfg, b->match.channel, ids, sizeof ids / sizeof *ids, &known);
		if (!known || strcmp(want, "*") == 0)
			continue;
		for (size_t k = 0; k < n && !found; k++)
			found = ids[k] && strcmp(ids[k], want) == 0;
		if (found)
			continue;
		snprintf(key, sizeof key, "bindings[%zu].match.account", i);
		if (n == 0)
			lint_add(warnings, cfg->path, b->line, b->col, key,
			         "configure the channel, or remove the binding",
			         "this binding can never match: channel \"%s\" has no account "
			         "configured",
			         b->match.channel);
		else if (!b->match.account)
			lint_add(warnings, cfg->path, b->line, b->col, key,
			         strcmp(b->match.channel, "webhook") == 0
			             ? "a webhook message's account is its hook's name: write "
			               "account: \"*\" (any hook) or account: <hook name>"
			             : "write account: \"*\" (any account) or the account's id",
			         "this binding can never match: without `account` it matches the "
			         "account \"default\", and channel \"%s\" has none of that id (it has "
			         "\"%s\"%s)",
			         b->match.channel, ids[0], n > 1 ? ", ..." : "");
		else
			lint_add(warnings, cfg->path, b->line, b->col, key,
			         "write one of the channel's account ids, or \"*\"",
			         "this binding can never match: channel \"%s\" has no account \"%s\"",
			         b->match.channel, want);
	}
}
