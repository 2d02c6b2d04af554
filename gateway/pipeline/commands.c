/*
 * commands.c - see commands.h.
 */
#include "gateway/pipeline/commands.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "agents/context/tokens.h"
#include "agents/message.h"
#include "agents/transcript.h"
#include "gateway/core/err.h"
#include "gateway/core/jsonw.h"

static const struct {
	const char *name;
	enum command_kind kind;
	bool args; /* takes an argument */
	const char *what;
} commands_table[] = {
    {"help", COMMAND_HELP, false, "what the gateway answers by itself (this list)"},
    {"status", COMMAND_STATUS, false,
     "this session: agent, model, workspace version, context used, queue"},
    {"stop", COMMAND_STOP, false,
     "stop this session's running turn (messages waiting behind it still get answered)"},
    {"compact", COMMAND_COMPACT, false,
     "compact this session's context now, with the token counts before and after"},
    {"model", COMMAND_MODEL, true,
     "list this agent's models; `/model NAME` switches this session to one of them"},
};
#define COMMANDS_N (sizeof commands_table / sizeof commands_table[0])

static bool commands_word_char(unsigned char c)
{
	return isalnum(c) || c == '_';
}

enum command_kind commands_parse(const char *text, struct command *out)
{
	const char *p = text, *name, *end;
	size_t n;

	memset(out, 0, sizeof *out);
	if (!text)
		return COMMAND_NONE;
	while (isspace((unsigned char)*p))
		p++;
	if (*p != '/')
		return COMMAND_NONE;
	name = ++p;
	while (commands_word_char((unsigned char)*p))
		p++;
	n = (size_t)(p - name);
	if (n == 0 || n > COMMANDS_NAME_MAX)
		return COMMAND_NONE;
	if (*p == '@') {
		const char *bot = ++p;

		while (commands_word_char((unsigned char)*p))
			p++;
		if (p == bot)
			return COMMAND_NONE;
		out->addressed = bot;
		out->addressed_len = (size_t)(p - bot);
	}
	/* "/etc/hosts", "/usr:x", "/a-b": a path or a word, not a command. */
	if (*p && !isspace((unsigned char)*p))
		return COMMAND_NONE;
	for (size_t i = 0; i < n; i++)
		out->name[i] = (char)tolower((unsigned char)name[i]);
	out->name[n] = '\0';
	while (isspace((unsigned char)*p))
		p++;
	end = p + strlen(p);
	while (end > p && isspace((unsigned char)end[-1]))
		end--;
	out->args = p;
	out->args_len = (size_t)(end - p);
	for (size_t i = 0; i < COMMANDS_N; i++) {
		if (strcmp(commands_table[i].name, out->name) != 0)
			continue;
		if (out->args_len && !commands_table[i].args)
			return COMMAND_NONE; /* "/stop the server": words for the agent */
		out->kind = commands_table[i].kind;
		return out->kind;
	}
	return COMMAND_NONE;
}

void commands_quote(const char *s, size_t n, char *out, size_t size)
{
	size_t k = 0;

	if (!size)
		return;
	if (n > size - 1) {
		n = size - 1;
		while (n && ((unsigned char)s[n] & 0xC0) == 0x80)
			n--; /* s[n] starts a character: cut before it */
	}
	for (; k < n; k++) {
		unsigned char c = (unsigned char)s[k];

		out[k] = c < 0x20 || c == 0x7f ? '?' : (char)c;
	}
	out[k] = '\0';
}

const char *commands_name(enum command_kind kind)
{
	for (size_t i = 0; i < COMMANDS_N; i++)
		if (commands_table[i].kind == kind)
			return commands_table[i].name;
	return "";
}

int commands_help(struct buf *out, const char *const *triggers, size_t n)
{
	int rc = buf_puts(out, "Commands (answered by the gateway, not the model):\n");

	for (size_t i = 0; i < COMMANDS_N && rc == SB_OK; i++)
		rc = buf_printf(out, "/%s%s - %s\n", commands_table[i].name,
		                commands_table[i].args ? " [NAME]" : "", commands_table[i].what);
	for (size_t i = 0; i < n && rc == SB_OK; i++)
		rc = buf_printf(out,
		                "%s - start a new session (text after it goes to the new one)\n",
		                triggers[i]);
	if (rc == SB_OK)
		rc = buf_puts(out, "Anything else, including other /words, goes to the agent.");
	return rc;
}

void commands_models_of(struct commands_models *m, const char *primary,
                        const char *const *fallbacks, size_t n_fallbacks)
{
	const size_t cap = sizeof m->v / sizeof m->v[0];

	m->n = 0;
	for (size_t i = 0; i <= n_fallbacks && m->n < cap; i++) {
		const char *name = i == 0 ? primary : fallbacks[i - 1];
		bool seen = false;

		if (!name || !*name)
			continue;
		for (size_t k = 0; k < m->n && !seen; k++)
			seen = strcmp(m->v[k], name) == 0;
		if (!seen)
			m->v[m->n++] = name;
	}
}

int commands_models_find(const struct commands_models *m, const char *name, size_t len)
{
	int found = -1;

	if (!len)
		return -1;
	for (size_t i = 0; i < m->n; i++)
		if (strlen(m->v[i]) == len && strncasecmp(m->v[i], name, len) == 0)
			return (int)i;
	for (size_t i = 0; i < m->n; i++) {
		const char *slash = strchr(m->v[i], '/');
		const char *tail = slash ? slash + 1 : m->v[i];

		if (strlen(tail) != len || strncasecmp(tail, name, len) != 0)
			continue;
		if (found >= 0)
			return -1; /* two providers serve a model of that name */
		found = (int)i;
	}
	return found;
}

int commands_models_list(struct buf *out, const struct commands_models *m, const char *current)
{
	int rc = SB_OK;

	if (!current && m->n)
		current = m->v[0];
	for (size_t i = 0; i < m->n && rc == SB_OK; i++)
		rc = buf_printf(out, "%s %s%s%s\n",
		                strcmp(m->v[i], current ? current : "") == 0 ? "*" : "-", m->v[i],
		                i == 0 ? " (primary)" : " (fallback)",
		                strcmp(m->v[i], current ? current : "") == 0 ? " <- in use" : "");
	return rc;
}

char *commands_session_model(const char *meta)
{
	json_t *o = meta ? json_loads(meta, 0, NULL) : NULL;
	const char *m = json_string_value(json_object_get(o, "model"));
	char *out = m && *m ? strdup(m) : NULL;

	json_decref(o);
	return out;
}

char *commands_session_meta_with(const char *meta, const char *model)
{
	json_t *o = meta ? json_loads(meta, 0, NULL) : NULL;
	char *out = NULL;

	if (!json_is_object(o)) {
		json_decref(o);
		o = json_object();
	}
	if (!o)
		return NULL;
	if (model)
		json_object_set_new(o, "model", json_string(model));
	else
		json_object_del(o, "model");
	out = jsonw_dumps(o, JSONW_SORT_KEYS, NULL);
	json_decref(o);
	return out;
}

/* Whether a user message holds text (not only tool results). */
static bool commands_user_text(const json_t *m)
{
	const json_t *b;
	size_t i;
	const char *role = json_string_value(json_object_get(m, "role"));

	if (!role || strcmp(role, "user") != 0)
		return false;
	json_array_foreach(json_object_get(m, "content"), i, b)
	{
		const char *type = json_string_value(json_object_get(b, "type"));

		if (type && strcmp(type, "text") == 0)
			return true;
	}
	return false;
}

int commands_status_read(const char *path, struct commands_status_facts *f)
{
	struct transcript_loaded tl;
	const json_t *e, *anchor = NULL;
	int64_t since = 0; /* estimates of the messages after the anchor */
	size_t i;
	int rc;

	memset(f, 0, sizeof *f);
	rc = transcript_load(path, &tl);
	if (rc == SB_ERR_NOTFOUND)
		return SB_OK;
	if (rc != SB_OK)
		return rc;
	f->found = true;
	f->messages = json_array_size(tl.messages);
	json_array_foreach(tl.messages, i, e)
	{
		if (commands_user_text(e))
			f->user_turns++;
	}
	json_array_foreach(tl.entries, i, e)
	{
		const char *type = json_string_value(json_object_get(e, "type"));
		const char *ev = json_string_value(json_object_get(e, "event"));

		if (!type)
			continue;
		if (strcmp(type, "message") == 0) {
			const char *model = json_string_value(json_object_get(e, "model"));
			const char *ts = json_string_value(json_object_get(e, "ts"));

			since += tokens_estimate_json(json_object_get(e, "message"));
			if (model && *model) {
				snprintf(f->last_model, sizeof f->last_model, "%s", model);
				snprintf(f->last_at, sizeof f->last_at, "%s", ts ? ts : "");
			}
		} else if (strcmp(type, "compaction") == 0) {
			f->compactions++;
			anchor = NULL; /* the history the anchor counted is gone */
		} else if (strcmp(type, "event") == 0 && ev &&
		           (strcmp(ev, "prompt") == 0 || strcmp(ev, "compacted") == 0) &&
		           json_is_integer(json_object_get(e, "tokens_estimate"))) {
			anchor = e;
			since = 0;
		} else if (strcmp(type, "event") == 0 && ev && strcmp(ev, "context") == 0) {
			f->window = json_integer_value(json_object_get(e, "window"));
		} else if (strcmp(type, "event") == 0 && ev && strcmp(ev, "workspace") == 0) {
			const json_t *w = json_object_get(e, "workspace");
			const char *commit = json_string_value(json_object_get(w, "commit"));
			const char *hash = json_string_value(json_object_get(w, "hash"));

			snprintf(f->commit, sizeof f->commit, "%s", commit ? commit : "");
			snprintf(f->hash, sizeof f->hash, "%.16s", hash ? hash : "");
			f->dirty = json_is_true(json_object_get(w, "dirty"));
		}
	}
	if (anchor) {
		double scale = json_real_value(json_object_get(anchor, "calibration"));

		if (!(scale >= TOKENS_SCALE_MIN && scale <= TOKENS_SCALE_MAX))
			scale = 1.0;
		f->tokens = json_integer_value(json_object_get(anchor, "tokens_estimate")) +
		            (int64_t)((double)since * scale);
		f->tokens_reported = true;
	} else {
		f->tokens = tokens_estimate_json(tl.messages);
	}
	transcript_loaded_free(&tl);
	return SB_OK;
}
