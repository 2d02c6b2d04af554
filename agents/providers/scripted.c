/*
 * scripted.c - the "scripted" provider: replays a script instead of calling
 * a model. For tests, demos, evaluation, and the built-in "offline" reply of
 * a fresh install.
 *
 * A script is a list of steps, read once when the provider is created:
 *
 *   YAML                                  JSONL (one step a line)
 *   steps:                                {"match": "weather", "tool_calls": [...]}
 *     - match: weather                    {"text": "It is sunny."}
 *       tool_calls:
 *         - name: get_weather
 *           input: {city: Paris}
 *     - text: It is sunny.
 *
 * The format is chosen by content: a first non-blank character "{" means
 * JSONL. The keys of a step (all optional, but one of text, tool_calls and
 * error is needed):
 *
 *   match           "substring" (case-sensitive) or "/regex/" ("/regex/i"
 *                   ignores case; POSIX extended), tested against the first
 *                   text block of the last user message that has text
 *   text            the reply; "{{user_text}}" is replaced by that user text,
 *                   "{{tool_result}}" by the content of the last tool result
 *                   in the request's last message ("" when none), so a test
 *                   sees in the reply what a tool gave the model
 *   tool_calls      [{name, input (object), id}]; ids default to call_<n>,
 *                   n counting the provider's tool calls from 1
 *   delay_ms        wait this long before answering (a slow model); past the
 *                   provider's timeout the call fails with "timeout" instead
 *   error           rate_limit | overloaded | timeout | network |
 *                   prompt_too_long | auth | bad_request | bad_response:
 *                   fail the call with that kind
 *   retry_after_ms  with error: the Retry-After the error carries
 *   stop            end_turn | max_tokens (default: tool_use when there are
 *                   tool calls, else end_turn)
 *   retry_on_error  with tool_calls: when a result of those calls is an
 *                   error (a refusal, a call a restart cut short), the
 *                   continuation is this step again, not the next one: a
 *                   model that tries a failed call once more
 *
 * Which step answers a call:
 *  1. A continuation (the last message is a user message with tool_result
 *     blocks) takes the step after the one whose tool calls the last
 *     assistant message holds (the same names and inputs; the step that
 *     answered the previous call is tried first), whatever its match says;
 *     so a gateway restarted in the middle of a turn goes on where the
 *     history says. No such step: the one after the previous answer.
 *  2. Otherwise the first step (in file order) whose match fits the user
 *     text; steps with a match are reusable triggers.
 *  3. Otherwise the next step without a match, from the one after the
 *     previous answer on: steps without a match are consumed in order.
 *  4. When the script is exhausted, its last step without a match repeats.
 *     With none at all, the call fails with bad_request.
 *
 * Text is streamed (when the request asks for it) as one delta per word with
 * its trailing white space, so deltas never split a UTF-8 character. Usage is
 * estimated as ceil(chars / 4) of the request (system, messages and tools as
 * JSON) and of the reply. Every answer comes from a uv timer, never from
 * inside call; cancel reports ABORTED before it returns.
 */
#include <regex.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


#include "agents/message.h"
#include "agents/provider.h"
#include "gateway/core/buf.h"
#include "gateway/core/err.h"
#include "gateway/core/yamljson.h"
#include "gateway/core/fsutil.h"
#include "gateway/core/log.h"

#define SCRIPTED_FILE_MAX ((size_t)1 << 20)
#define SCRIPTED_STEPS_MAX 10000
#define SCRIPTED_YAML_DEPTH_MAX 64
#define SCRIPTED_YAML_NODES_MAX 200000
#define SCRIPTED_TEXT_MAX ((size_t)4 << 20)
#define SCRIPTED_USER_ECHO_MAX 2000
#define SCRIPTED_USER_TEXT "{{user_text}}"
#define SCRIPTED_TOOL_RESULT "{{tool_result}}"
#define SCRIPTED_RESULT_ECHO_MAX 60000

/* The reply of `script: builtin:offline`, the provider of a fresh install. */
static const char scripted_offline_script[] =
    "steps:\n"
    "  - text: |\n"
    "      Hello! No model is connected yet, so this is Switchboard's built-in offline reply.\n"
    "\n"
    "      You said: {{user_text}}\n"
    "\n"
    "      To connect a real model, edit $SWITCHBOARD_HOME/switchboard.yaml "
    "(~/.switchboard/switchboard.yaml by default):\n"
    "\n"
    "      1. Add a provider under `providers:`, for example:\n"
    "\n"
    "             providers:\n"
    "               - id: openai\n"
    "                 api: openai-chat\n"
    "                 api_key: ${OPENAI_API_KEY}\n"
    "               - id: anthropic\n"
    "                 api: anthropic-messages\n"
    "                 api_key: ${ANTHROPIC_API_KEY}\n"
    "\n"
    "      2. Point the agent's `model:` at it, e.g. `model: openai/gpt-4o-mini` or "
    "`model: anthropic/claude-sonnet-4-5`.\n"
    "      3. Save the file. The gateway reloads it by itself, and your next message "
    "goes to the real model.\n";

struct scripted_step {
	char *match; /* substring; NULL when none (or a regex) */
	regex_t re;
	bool has_re;
	char *text;         /* NULL when none */
	json_t *tool_calls; /* [{name, input, id?}], validated; NULL when none */
	int64_t delay_ms;
	enum model_error_kind error; /* MODEL_ERR_NONE: answer */
	int64_t retry_after_ms;      /* -1 when absent */
	bool has_stop;
	enum model_stop stop;
	bool retry_on_error;
};

struct scripted_call;

struct scripted {
	struct provider base;
	uv_loop_t *loop;
	struct scripted_step *steps;
	size_t n;
	size_t cursor;         /* the step after the one that answered last */
	uint64_t tool_call_id; /* the last call_<n> given */
	struct scripted_call *calls;
};

struct scripted_call {
	struct scripted *sp; /* NULL once finished */
	struct scripted_call *next, **pprev;
	uv_timer_t timer;
	model_done_cb done;
	void *ud;
	struct model_stream_events ev; /* zeroed when the caller gave none */
	bool stream;
	bool finished;
	int rc; /* SB_OK: answer with message; else fail with err */
	struct model_error err;
	json_t *message;
	char *text; /* the text to stream */
	char *model;
	enum model_stop stop;
	struct model_usage usage;
};

/* ---- names ---- */

static const struct {
	const char *name;
	enum model_error_kind kind;
	int status;
	int rc;
} scripted_errors[] = {
    {"rate_limit", MODEL_ERR_RATE_LIMIT, 429, SB_ERR_AGAIN},
    {"overloaded", MODEL_ERR_OVERLOADED, 529, SB_ERR_AGAIN},
    {"timeout", MODEL_ERR_TIMEOUT, 0, SB_ERR_TIMEOUT},
    {"network", MODEL_ERR_NETWORK, 0, SB_ERR_HTTP},
    {"prompt_too_long", MODEL_ERR_PROMPT_TOO_LONG, 400, SB_ERR_TOOBIG},
    {"auth", MODEL_ERR_AUTH, 401, SB_ERR_PERM},
    {"bad_request", MODEL_ERR_BAD_REQUEST, 400, SB_ERR_INVAL},
    {"bad_response", MODEL_ERR_BAD_RESPONSE, 0, SB_ERR_PROTO},
};

static const char *const scripted_stop_raw[] = {
    [MODEL_STOP_END_TURN] = "end_turn",
    [MODEL_STOP_TOOL_USE] = "tool_use",
    [MODEL_STOP_MAX_TOKENS] = "max_tokens",
    [MODEL_STOP_OTHER] = "other",
};

static const char *scripted_error_name(enum model_error_kind kind)
{
	for (size_t i = 0; i < sizeof scripted_errors / sizeof scripted_errors[0]; i++)
		if (scripted_errors[i].kind == kind)
			return scripted_errors[i].name;
	return "error";
}

/* Fills err for kind (message formatted by the caller); returns the rc. */
static int scripted_error_fill(struct model_error *err, enum model_error_kind kind)
{
	memset(err, 0, sizeof *err);
	err->kind = kind;
	err->retry_after_ms = -1;
	if (kind == MODEL_ERR_ABORTED)
		return SB_ERR_ABORTED;
	for (size_t i = 0; i < sizeof scripted_errors / sizeof scripted_errors[0]; i++)
		if (scripted_errors[i].kind == kind) {
			err->http_status = scripted_errors[i].status;
			return scripted_errors[i].rc;
		}
	return SB_ERR_PROTO;
}

/* ---- the script ---- */

static void scripted_step_release(struct scripted_step *st)
{
	free(st->match);
	if (st->has_re)
		regfree(&st->re);
	free(st->text);
	json_decref(st->tool_calls);
	memset(st, 0, sizeof *st);
}

static int scripted_parse_ms(const json_t *v, int64_t *out)
{
	if (!json_is_integer(v) || json_integer_value(v) < 0 ||
	    json_integer_value(v) > 24 * 3600 * 1000)
		return SB_ERR_INVAL;
	*out = json_integer_value(v);
	return SB_OK;
}

static int scripted_parse_tool_calls(const json_t *v, json_t **out, char *why, size_t why_size)
{
	const json_t *call;
	size_t i;

	if (!json_is_array(v) || json_array_size(v) == 0) {
		snprintf(why, why_size, "tool_calls must be a non-empty list");
		return SB_ERR_INVAL;
	}
	json_array_foreach(v, i, call)
	{
		const char *key;
		const json_t *f;

		if (!json_is_object(call) || !json_is_string(json_object_get(call, "name")) ||
		    json_string_length(json_object_get(call, "name")) == 0) {
			snprintf(why, why_size, "tool_calls[%zu]: needs a \"name\"", i);
			return SB_ERR_INVAL;
		}
		json_object_foreach((json_t *)call, key, f)
		{
			if (strcmp(key, "name") == 0)
				continue;
			if (strcmp(key, "input") == 0 && (json_is_object(f) || json_is_null(f)))
				continue;
			if (strcmp(key, "id") == 0 && json_is_string(f) &&
			    json_string_length(f) > 0)
				continue;
			snprintf(why, why_size, "tool_calls[%zu]: bad or unknown key \"%s\"", i,
			         key);
			return SB_ERR_INVAL;
		}
	}
	*out = json_deep_copy(v);
	return *out ? SB_OK : SB_ERR_NOMEM;
}

static int scripted_parse_match(struct scripted_step *st, const char *m, char *why, size_t why_size)
{
	size_t len = strlen(m);
	int flags = REG_EXTENDED | REG_NOSUB;
	char *pat;
	int err;

	if (len >= 2 && m[0] == '/' &&
	    (m[len - 1] == '/' || (len >= 3 && m[len - 2] == '/' && m[len - 1] == 'i'))) {
		if (m[len - 1] == 'i') {
			flags |= REG_ICASE;
			len--;
		}
		pat = strndup(m + 1, len - 2);
		if (!pat)
			return SB_ERR_NOMEM;
		err = regcomp(&st->re, pat, flags);
		free(pat);
		if (err != 0) {
			char msg[128];

			regerror(err, &st->re, msg, sizeof msg);
			snprintf(why, why_size, "match %s: %s", m, msg);
			return SB_ERR_INVAL;
		}
		st->has_re = true;
		return SB_OK;
	}
	st->match = strdup(m);
	return st->match ? SB_OK : SB_ERR_NOMEM;
}

static int scripted_parse_step(const json_t *obj, struct scripted_step *st, char *why,
                               size_t why_size)
{
	const char *key;
	const json_t *v;
	int rc;

	memset(st, 0, sizeof *st);
	st->retry_after_ms = -1;
	if (!json_is_object(obj)) {
		snprintf(why, why_size, "a step must be a mapping");
		return SB_ERR_INVAL;
	}
	json_object_foreach((json_t *)obj, key, v)
	{
		rc = SB_ERR_INVAL;
		if (strcmp(key, "match") == 0) {
			if (!json_is_string(v) || json_string_length(v) == 0) {
				snprintf(why, why_size, "match must be a non-empty string");
				return SB_ERR_INVAL;
			}
			rc = scripted_parse_match(st, json_string_value(v), why, why_size);
		} else if (strcmp(key, "text") == 0) {
			if (!json_is_string(v)) {
				snprintf(why, why_size, "text must be a string");
				return SB_ERR_INVAL;
			}
			st->text = strdup(json_string_value(v));
			rc = st->text ? SB_OK : SB_ERR_NOMEM;
		} else if (strcmp(key, "tool_calls") == 0) {
			rc = scripted_parse_tool_calls(v, &st->tool_calls, why, why_size);
		} else if (strcmp(key, "delay_ms") == 0 || strcmp(key, "retry_after_ms") == 0) {
			rc = scripted_parse_ms(v,
			                       key[0] == 'd' ? &st->delay_ms : &st->retry_after_ms);
			if (rc != SB_OK)
				snprintf(why, why_size, "%s must be a number of milliseconds", key);
		} else if (strcmp(key, "error") == 0) {
			const char *s = json_string_value(v);

			for (size_t i = 0;
			     s && i < sizeof scripted_errors / sizeof *scripted_errors; i++)
				if (strcmp(s, scripted_errors[i].name) == 0) {
					st->error = scripted_errors[i].kind;
					rc = SB_OK;
				}
			if (rc != SB_OK)
				snprintf(why, why_size,
				         "error must be one of rate_limit, overloaded, timeout, "
				         "network, prompt_too_long, auth, bad_request, "
				         "bad_response");
		} else if (strcmp(key, "retry_on_error") == 0) {
			if (!json_is_boolean(v)) {
				snprintf(why, why_size, "retry_on_error must be true or false");
				return SB_ERR_INVAL;
			}
			st->retry_on_error = json_is_true(v);
			rc = SB_OK;
		} else if (strcmp(key, "stop") == 0) {
			const char *s = json_string_value(v);

			st->has_stop = true;
			if (s && strcmp(s, "end_turn") == 0) {
				st->stop = MODEL_STOP_END_TURN;
				rc = SB_OK;
			} else if (s && strcmp(s, "max_tokens") == 0) {
				st->stop = MODEL_STOP_MAX_TOKENS;
				rc = SB_OK;
			} else {
				snprintf(why, why_size, "stop must be end_turn or max_tokens");
			}
		} else {
			snprintf(why, why_size, "unknown key \"%s\"", key);
		}
		if (rc != SB_OK)
			return rc;
	}
	if (!st->text && !st->tool_calls && st->error == MODEL_ERR_NONE) {
		snprintf(why, why_size, "a step needs text, tool_calls or error");
		return SB_ERR_INVAL;
	}
	return SB_OK;
}

/* Turns the script's text into a list of step objects (a new reference). */
static int scripted_steps_json(const char *text, size_t len, json_t **out, char *why,
                               size_t why_size)
{
	const char *p = text, *end = text + len;
	json_t *doc = NULL, *steps = NULL;
	int rc = SB_ERR_INVAL;

	*out = NULL;
	while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n'))
		p++;
	if (p < end && *p == '{') {
		size_t line = 0;

		rc = SB_ERR_NOMEM;
		steps = json_array();
		if (!steps)
			goto out;
		for (p = text; p < end;) {
			const char *nl = memchr(p, '\n', (size_t)(end - p));
			const char *e = nl ? nl : end, *q = p;
			json_error_t jerr;
			json_t *step;

			line++;
			while (q < e && (*q == ' ' || *q == '\t' || *q == '\r'))
				q++;
			if (q < e) {
				rc = SB_ERR_INVAL;
				step = json_loadb(p, (size_t)(e - p), 0, &jerr);
				if (!step) {
					snprintf(why, why_size, "line %zu: %s", line, jerr.text);
					goto out;
				}
				rc = SB_ERR_NOMEM;
				if (json_array_append_new(steps, step) != 0)
					goto out;
			}
			p = e + (nl ? 1 : 0);
		}
	} else {
		static const struct yamljson_opt yo = {.what = "the script",
		                                       .line_label = "line",
		                                       .depth_max = SCRIPTED_YAML_DEPTH_MAX,
		                                       .nodes_max = SCRIPTED_YAML_NODES_MAX,
		                                       .core_schema = true};

		rc = yamljson_load(text, len, &yo, &doc, why, why_size);
		if (rc != SB_OK)
			goto out;
		rc = SB_ERR_INVAL;
		if (json_is_null(doc)) {
			snprintf(why, why_size, "the script is empty");
			goto out;
		}
		if (!json_is_object(doc) || !json_is_array(json_object_get(doc, "steps")) ||
		    json_object_size(doc) != 1) {
			snprintf(why, why_size, "expected a mapping with only a \"steps\" list");
			goto out;
		}
		steps = json_incref(json_object_get(doc, "steps"));
	}
	rc = SB_ERR_INVAL;
	if (json_array_size(steps) == 0 || json_array_size(steps) > SCRIPTED_STEPS_MAX) {
		snprintf(why, why_size, "a script needs 1 to %d steps", SCRIPTED_STEPS_MAX);
		goto out;
	}
	*out = steps;
	steps = NULL;
	rc = SB_OK;
out:
	json_decref(steps);
	json_decref(doc);
	return rc;
}

static int scripted_load(struct scripted *sp, const char *text, size_t len, char *why,
                         size_t why_size)
{
	json_t *steps = NULL, *obj;
	size_t i;
	int rc;

	rc = scripted_steps_json(text, len, &steps, why, why_size);
	if (rc != SB_OK)
		goto out;
	rc = SB_ERR_NOMEM;
	sp->steps = calloc(json_array_size(steps), sizeof *sp->steps);
	if (!sp->steps)
		goto out;
	json_array_foreach(steps, i, obj)
	{
		char what[256] = "";

		rc = scripted_parse_step(obj, &sp->steps[i], what, sizeof what);
		sp->n = i + 1; /* released by destroy, even half-parsed */
		if (rc != SB_OK) {
			snprintf(why, why_size, "steps[%zu]: %s", i, what);
			goto out;
		}
	}
	rc = SB_OK;
out:
	json_decref(steps);
	return rc;
}

/* ---- provider ---- */

static void scripted_destroy(struct provider *p);

static int scripted_create(struct provider **out, const struct provider_config *cfg,
                           const struct host *host)
{
	struct scripted *sp = NULL;
	char why[512] = "", *file = NULL;
	const char *text;
	size_t len = 0;
	int rc = SB_ERR_CONFIG;

	*out = NULL;
	if (!cfg || !host || !host->loop || !cfg->script)
		goto out;
	rc = SB_ERR_NOMEM;
	sp = calloc(1, sizeof *sp);
	if (!sp)
		goto out;
	sp->base.ops = &provider_scripted_ops;
	sp->base.cfg = cfg;
	sp->loop = host->loop;
	if (strcmp(cfg->script, "builtin:offline") == 0) {
		text = scripted_offline_script;
		len = sizeof scripted_offline_script - 1;
	} else if (strncmp(cfg->script, "builtin:", 8) == 0) {
		rc = SB_ERR_CONFIG;
		snprintf(why, sizeof why, "unknown built-in script (there is builtin:offline)");
		goto out;
	} else {
		rc = fs_read_all(cfg->script, SCRIPTED_FILE_MAX, &file, &len);
		if (rc != SB_OK) {
			snprintf(why, sizeof why, "cannot read the script: %s", sb_strerror(rc));
			rc = SB_ERR_CONFIG;
			goto out;
		}
		text = file;
	}
	rc = scripted_load(sp, text, len, why, sizeof why);
	if (rc == SB_ERR_INVAL)
		rc = SB_ERR_CONFIG;
	if (rc != SB_OK)
		goto out;
	*out = &sp->base;
	sp = NULL;
	rc = SB_OK;
out:
	if (rc != SB_OK)
		log_error("scripted", "bad script", LOG_S("provider", cfg ? cfg->id : NULL),
		          LOG_S("script", cfg ? cfg->script : NULL),
		          LOG_S("why", why[0] ? why : sb_strerror(rc)));
	free(file);
	if (sp)
		scripted_destroy(&sp->base);
	return rc;
}

/* ---- calls ---- */

static void scripted_call_closed(uv_handle_t *h)
{
	struct scripted_call *c = h->data;

	json_decref(c->message);
	free(c->text);
	free(c->model);
	free(c);
}

/* Reports the outcome once and lets the call go. */
static void scripted_finish(struct scripted_call *c)
{
	struct model_response resp;

	if (c->finished)
		return;
	c->finished = true;
	uv_timer_stop(&c->timer);
	if (c->sp) {
		*c->pprev = c->next;
		if (c->next)
			c->next->pprev = c->pprev;
		c->sp = NULL;
	}
	if (c->rc == SB_OK) {
		memset(&resp, 0, sizeof resp);
		resp.message = c->message;
		resp.stop = c->stop;
		resp.stop_raw = scripted_stop_raw[c->stop];
		resp.usage = c->usage;
		resp.model = c->model;
		c->done(c->ud, SB_OK, &resp, NULL);
	} else {
		c->done(c->ud, c->rc, NULL, &c->err);
	}
	uv_close((uv_handle_t *)&c->timer, scripted_call_closed);
}

static void scripted_on_timer(uv_timer_t *t)
{
	struct scripted_call *c = t->data;
	const json_t *block;
	size_t i;

	if (c->rc == SB_OK && c->stream && c->ev.text_delta && c->text) {
		const char *p = c->text;

		while (*p && !c->finished) {
			const char *q = p;

			while (*q && !(*q == ' ' || *q == '\n' || *q == '\t'))
				q++;
			while (*q == ' ' || *q == '\n' || *q == '\t')
				q++;
			c->ev.text_delta(c->ev.ud, p, (size_t)(q - p));
			p = q;
		}
	}
	if (c->rc == SB_OK && c->ev.tool_use_start) {
		json_array_foreach(json_object_get(c->message, "content"), i, block)
		{
			if (c->finished)
				break;
			if (strcmp(json_string_value(json_object_get(block, "type")), "tool_use") ==
			    0)
				c->ev.tool_use_start(
				    c->ev.ud, json_string_value(json_object_get(block, "id")),
				    json_string_value(json_object_get(block, "name")));
		}
	}
	scripted_finish(c); /* a no-op when a callback cancelled the call */
}

static bool scripted_step_matches(const struct scripted_step *st, const char *user_text)
{
	if (st->has_re)
		return regexec(&st->re, user_text, 0, NULL, 0) == 0;
	return st->match && strstr(user_text, st->match) != NULL;
}

static bool scripted_step_has_match(const struct scripted_step *st)
{
	return st->match || st->has_re;
}

/* Whether step st's tool calls are the tool_use blocks of msg (names and
 * inputs, in order). */
static bool scripted_step_made(const struct scripted_step *st, const json_t *msg)
{
	const json_t *b;
	size_t i, k = 0;

	if (!st->tool_calls || !msg)
		return false;
	json_array_foreach(json_object_get(msg, "content"), i, b)
	{
		const char *type = json_string_value(json_object_get(b, "type"));
		const json_t *call = json_array_get(st->tool_calls, k);

		if (!type || strcmp(type, "tool_use") != 0)
			continue;
		if (!call || !json_equal(json_object_get(call, "name"), json_object_get(b, "name")))
			return false;
		if (!json_equal(json_object_get(call, "input"), json_object_get(b, "input")) &&
		    !(json_object_size(json_object_get(call, "input")) == 0 &&
		      json_object_size(json_object_get(b, "input")) == 0))
			return false;
		k++;
	}
	return k > 0 && k == json_array_size(st->tool_calls);
}

/* A continuation's step: after the one that made the last assistant
 * message's calls (the same one again when it retries on an error), or -1
 * when no step made them. */
static long scripted_pick_continuation(const struct scripted *sp, const json_t *messages)
{
	size_t n = json_array_size(messages);
	const json_t *results = n ? json_array_get(messages, n - 1) : NULL;
	const json_t *calls = n > 1 ? json_array_get(messages, n - 2) : NULL, *b;
	long made = -1;
	bool error = false;
	size_t i;

	if (sp->cursor > 0 && scripted_step_made(&sp->steps[sp->cursor - 1], calls))
		made = (long)sp->cursor - 1;
	for (i = 0; made < 0 && i < sp->n; i++)
		if (scripted_step_made(&sp->steps[i], calls))
			made = (long)i;
	if (made < 0)
		return -1;
	json_array_foreach(json_object_get(results, "content"), i, b)
	error = error || json_is_true(json_object_get(b, "is_error"));
	if (error && sp->steps[made].retry_on_error)
		return made;
	return made + 1 < (long)sp->n ? made + 1 : -1;
}

/* The selection rule at the top of the file. Returns the index or -1. */
static long scripted_pick(const struct scripted *sp, bool continuation, const char *user_text,
                          const json_t *messages)
{
	size_t i;

	if (continuation) {
		long c = scripted_pick_continuation(sp, messages);

		if (c >= 0)
			return c;
	}
	if (continuation && sp->cursor < sp->n)
		return (long)sp->cursor;
	if (!continuation) {
		for (i = 0; i < sp->n; i++)
			if (scripted_step_has_match(&sp->steps[i]) &&
			    scripted_step_matches(&sp->steps[i], user_text))
				return (long)i;
		for (i = sp->cursor; i < sp->n; i++)
			if (!scripted_step_has_match(&sp->steps[i]))
				return (long)i;
	}
	for (i = sp->n; i-- > 0;)
		if (!scripted_step_has_match(&sp->steps[i]))
			return (long)i;
	return -1;
}

static bool scripted_is_user(const json_t *msg)
{
	const char *role = json_string_value(json_object_get(msg, "role"));

	return role && strcmp(role, "user") == 0;
}

/* The text of the last user message that has some ("" when none; caller
 * frees), and whether the last message carries tool results. */
static char *scripted_user_text(const json_t *messages, bool *continuation)
{
	size_t n = json_array_size(messages);
	const json_t *last = n ? json_array_get(messages, n - 1) : NULL;
	const json_t *block;
	size_t i;

	*continuation = false;
	if (last && scripted_is_user(last))
		json_array_foreach(json_object_get(last, "content"), i, block)
		{
			const char *type = json_string_value(json_object_get(block, "type"));

			if (type && strcmp(type, "tool_result") == 0)
				*continuation = true;
		}
	/* The first non-empty text block: what the user wrote, without the
	 * notes the gateway adds after it (the date, steered text). */
	for (i = n; i-- > 0;) {
		const json_t *m = json_array_get(messages, i);
		size_t k;

		if (!scripted_is_user(m))
			continue;
		json_array_foreach(json_object_get(m, "content"), k, block)
		{
			const char *type = json_string_value(json_object_get(block, "type"));
			const char *text = json_string_value(json_object_get(block, "text"));

			if (type && strcmp(type, "text") == 0 && text && *text)
				return strdup(text);
		}
	}
	return strdup("");
}

/* The content of the last tool_result block of the last message, or "". */
static const char *scripted_tool_result(const json_t *messages)
{
	size_t n = json_array_size(messages), i;
	const json_t *last = n ? json_array_get(messages, n - 1) : NULL, *block;
	const char *found = "";

	json_array_foreach(json_object_get(last, "content"), i, block)
	{
		const char *type = json_string_value(json_object_get(block, "type"));
		const char *content = json_string_value(json_object_get(block, "content"));

		if (type && strcmp(type, "tool_result") == 0 && content)
			found = content;
	}
	return found;
}

/* Appends s, cut to max bytes at a UTF-8 boundary ("..." after a cut). */
static int scripted_put_cut(struct buf *b, const char *s, size_t max)
{
	size_t len = strlen(s), n = len;
	int rc;

	if (n > max) {
		n = max;
		while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
			n--;
	}
	rc = buf_append(b, s, n);
	if (rc == SB_OK && n < len)
		rc = buf_puts(b, "...");
	return rc;
}

/* text with every "{{user_text}}" replaced by user and "{{tool_result}}"
 * by result (each cut to a bound at a UTF-8 boundary). */
static char *scripted_expand(const char *text, const char *user, const char *result)
{
	const char *p = text, *hu, *hr, *hit;
	struct buf b;
	int rc = SB_OK;

	buf_init(&b, SCRIPTED_TEXT_MAX);
	for (;;) {
		hu = strstr(p, SCRIPTED_USER_TEXT);
		hr = strstr(p, SCRIPTED_TOOL_RESULT);
		hit = hu && (!hr || hu < hr) ? hu : hr;
		if (!hit || rc != SB_OK)
			break;
		rc = buf_append(&b, p, (size_t)(hit - p));
		if (rc == SB_OK && hit == hu) {
			rc = scripted_put_cut(&b, user, SCRIPTED_USER_ECHO_MAX);
			p = hit + strlen(SCRIPTED_USER_TEXT);
		} else if (rc == SB_OK) {
			rc = scripted_put_cut(&b, result, SCRIPTED_RESULT_ECHO_MAX);
			p = hit + strlen(SCRIPTED_TOOL_RESULT);
		}
	}
	if (rc == SB_OK)
		rc = buf_puts(&b, p);
	if (rc != SB_OK) {
		buf_free(&b);
		return NULL;
	}
	return buf_steal(&b);
}

static int64_t scripted_tokens(size_t chars)
{
	return (int64_t)((chars + 3) / 4);
}

static size_t scripted_json_chars(const json_t *v)
{
	size_t n = v ? json_dumpb(v, NULL, 0, JSON_COMPACT) : 0;

	return n;
}

/* The length of v's compact JSON, known (the caller's figure) or 0 when it
 * must be measured. Debug builds measure anyway and stop on a stale figure,
 * so that the tests would catch one. */
static size_t scripted_request_chars(const json_t *v, size_t known)
{
	if (!v)
		return 0;
#ifndef NDEBUG
	if (known && known != scripted_json_chars(v))
		abort();
#endif
	return known ? known : scripted_json_chars(v);
}

/* Builds the answer of step st into c. */
static int scripted_answer(struct scripted *sp, const struct scripted_step *st,
                           const char *user_text, const char *tool_result, struct scripted_call *c)
{
	size_t out_chars = 0, i;
	const json_t *tc;

	c->message = msg_assistant_new();
	if (!c->message)
		return SB_ERR_NOMEM;
	if (st->text) {
		c->text = scripted_expand(st->text, user_text, tool_result);
		if (!c->text || msg_add_text(c->message, c->text) != SB_OK)
			return SB_ERR_NOMEM;
		out_chars += strlen(c->text);
	}
	json_array_foreach(st->tool_calls, i, tc)
	{
		const char *id = json_string_value(json_object_get(tc, "id"));
		const char *name = json_string_value(json_object_get(tc, "name"));
		json_t *input = json_object_get(tc, "input");
		char gen[32];

		if (!id) {
			snprintf(gen, sizeof gen, "call_%llu",
			         (unsigned long long)++sp->tool_call_id);
			id = gen;
		}
		if (msg_add_tool_use(c->message, id, name, json_is_object(input) ? input : NULL) !=
		    SB_OK)
			return SB_ERR_NOMEM;
		out_chars += strlen(name) + scripted_json_chars(input);
	}
	if (st->has_stop)
		c->stop = st->stop;
	else
		c->stop = st->tool_calls ? MODEL_STOP_TOOL_USE : MODEL_STOP_END_TURN;
	c->usage.output_tokens = scripted_tokens(out_chars);
	return SB_OK;
}

static int scripted_call(struct provider *p, const struct model_request *req,
                         const struct model_stream_events *ev, model_done_cb done, void *ud,
                         struct provider_call **out)
{
	struct scripted *sp = (struct scripted *)p;
	struct scripted_call *c = NULL;
	const struct scripted_step *st;
	char *user_text = NULL;
	bool continuation = false;
	int64_t delay;
	long idx;
	int rc = SB_ERR_INVAL;

	if (out)
		*out = NULL;
	if (!sp || !req || !done || !json_is_array(req->messages))
		goto out;
	rc = SB_ERR_NOMEM;
	c = calloc(1, sizeof *c);
	if (!c)
		goto out;
	c->done = done;
	c->ud = ud;
	if (ev)
		c->ev = *ev;
	c->stream = req->stream;
	c->model = strdup(req->model ? req->model : "");
	user_text = scripted_user_text(req->messages, &continuation);
	if (!c->model || !user_text)
		goto out;
	c->usage.input_tokens =
	    scripted_tokens((req->system ? strlen(req->system) : 0) +
	                    scripted_request_chars(req->messages, req->messages_chars) +
	                    scripted_request_chars(req->tools, req->tools_chars));
	idx = scripted_pick(sp, continuation, user_text, req->messages);
	delay = 0;
	if (idx < 0) {
		c->rc = scripted_error_fill(&c->err, MODEL_ERR_BAD_REQUEST);
		snprintf(c->err.message, sizeof c->err.message,
		         "scripted: no step of the script answers this request");
	} else {
		st = &sp->steps[idx];
		sp->cursor = (size_t)idx + 1;
		delay = st->delay_ms;
		if (st->error != MODEL_ERR_NONE) {
			c->rc = scripted_error_fill(&c->err, st->error);
			c->err.retry_after_ms = st->retry_after_ms;
			snprintf(c->err.message, sizeof c->err.message, "scripted %s (step %ld)",
			         scripted_error_name(st->error), idx);
		} else {
			rc = scripted_answer(sp, st, user_text, scripted_tool_result(req->messages),
			                     c);
			if (rc != SB_OK)
				goto out;
		}
		if (sp->base.cfg->timeout_ms > 0 && delay > sp->base.cfg->timeout_ms) {
			delay = sp->base.cfg->timeout_ms;
			c->rc = scripted_error_fill(&c->err, MODEL_ERR_TIMEOUT);
			snprintf(c->err.message, sizeof c->err.message,
			         "scripted: no answer within %lld ms",
			         (long long)sp->base.cfg->timeout_ms);
		}
	}
	rc = SB_ERR_NOMEM;
	if (uv_timer_init(sp->loop, &c->timer) != 0)
		goto out;
	c->timer.data = c;
	uv_timer_start(&c->timer, scripted_on_timer, (uint64_t)delay, 0);
	c->sp = sp;
	c->next = sp->calls;
	if (c->next)
		c->next->pprev = &c->next;
	c->pprev = &sp->calls;
	sp->calls = c;
	if (out)
		*out = (struct provider_call *)c;
	c = NULL;
	rc = SB_OK;
out:
	free(user_text);
	if (c) {
		json_decref(c->message);
		free(c->text);
		free(c->model);
		free(c);
	}
	return rc;
}

static void scripted_cancel(struct provider_call *pc)
{
	struct scripted_call *c = (struct scripted_call *)pc;

	if (!c || c->finished)
		return;
	json_decref(c->message);
	c->message = NULL;
	c->rc = scripted_error_fill(&c->err, MODEL_ERR_ABORTED);
	snprintf(c->err.message, sizeof c->err.message, "cancelled");
	scripted_finish(c);
}

static void scripted_destroy(struct provider *p)
{
	struct scripted *sp = (struct scripted *)p;

	if (!sp)
		return;
	/* Calls still in flight end as aborted; their timers close later. */
	while (sp->calls)
		scripted_cancel((struct provider_call *)sp->calls);
	for (size_t i = 0; i < sp->n; i++)
		scripted_step_release(&sp->steps[i]);
	free(sp->steps);
	free(sp);
}

const struct provider_ops provider_scripted_ops = {
    .api = "scripted",
    .create = scripted_create,
    .destroy = scripted_destroy,
    .call = scripted_call,
    .cancel = scripted_cancel,
};
