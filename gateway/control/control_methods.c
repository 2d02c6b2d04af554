/*
 * control_methods.c - the control plane's methods (docs/protocol.md lists
 * each with its params, result and scope). Connections, frames and
 * authentication are in control.c.
 *
 * Each method validates its params, answers at once or starts a
 * struct control_op (store operation, ingest, wait for a run's reply,
 * thread-pool work) whose callback answers later, if the client is still
 * there.
 */
#include "gateway/control/control_internal.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sodium.h>
#include <unistd.h>

#include "agents/safety/approvals.h"
#include "agents/safety/permissions.h"
#include "agents/transcript.h"
#include "bindings/bindings.h"
#include "channels/channel.h"
#include "gateway/core/clock.h"
#include "gateway/core/err.h"
#include "gateway/core/log.h"
#include "gateway/pipeline/dispatcher.h"
#include "gateway/obs/metrics.h"
#include "gateway/sched/scheduler.h"
#include "gateway/store/store.h"
#include "workspaces/workspace.h"

#define CONTROL_LIST_DEFAULT 200
#define CONTROL_LIST_MAX 1000
#define CONTROL_HISTORY_DEFAULT 200
#define CONTROL_HISTORY_MAX 1000
#define CONTROL_AGENT_WAIT_EXTRA_MS 60000
#define CONTROL_REDACTED "[REDACTED]"

/* ---- helpers ---- */

static struct config *control_config(const struct control_conn *c)
{
	return c->ctl->ctx.host->config(c->ctl->ctx.host->ctx);
}

static const char *control_str(const json_t *params, const char *key)
{
	return json_string_value(json_object_get(params, key));
}

/* An optional integer param in [1, max]; def when absent; -1 when bad. */
static int64_t control_int(const json_t *params, const char *key, int64_t def, int64_t max)
{
	const json_t *v = json_object_get(params, key);

	if (!v || json_is_null(v))
		return def;
	if (!json_is_integer(v) || json_integer_value(v) < 1)
		return -1;
	return json_integer_value(v) > max ? max : json_integer_value(v);
}

static void control_bad(struct control_conn *c, const json_t *id, const char *msg)
{
	control_reply_error(c, id, CONTROL_E_INVALID, msg, NULL, false, 0);
}

static void control_store_busy(struct control_conn *c, const json_t *id, int rc)
{
	control_reply_error(c, id, CONTROL_E_UNAVAILABLE,
	                    rc == SB_ERR_AGAIN ? "the store is busy; try again"
	                                       : "the store failed; try again",
	                    NULL, true, rc == SB_ERR_AGAIN ? 1000 : 0);
}

static const char *control_session_kind(const char *key)
{
	if (strstr(key, ":thread:") || strstr(key, ":topic:"))
		return "thread";
	if (strstr(key, ":group:"))
		return "group";
	if (strstr(key, ":channel:"))
		return "channel";
	return "direct";
}

int control_session_key(const struct config *cfg, const char *name, char *key, size_t key_size,
                        char *agent, size_t agent_size)
{
	const struct agent_config *a;
	size_t len;

	if (!name || !*name)
		name = "main";
	len = strlen(name);
	if (len >= CONTROL_KEY_MAX)
		return SB_ERR_INVAL;
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)name[i] < 0x20 || name[i] == 0x7f || name[i] == ' ')
			return SB_ERR_INVAL;
	if (strncmp(name, "agent:", 6) == 0) {
		const char *id = name + 6, *colon = strchr(id, ':');

		if (!colon || colon == id || !colon[1] || (size_t)(colon - id) >= agent_size)
			return SB_ERR_INVAL;
		memcpy(agent, id, (size_t)(colon - id));
		agent[colon - id] = '\0';
		if (!config_agent(cfg, agent))
			return SB_ERR_NOTFOUND;
		snprintf(key, key_size, "%s", name);
		return SB_OK;
	}
	a = config_default_agent(cfg);
	if (!a)
		a = config_agent(cfg, "main");
	if (!a)
		return SB_ERR_NOTFOUND;
	if (snprintf(agent, agent_size, "%s", a->id) >= (int)agent_size ||
	    snprintf(key, key_size, "agent:%s:%s", a->id, name) >= (int)key_size)
		return SB_ERR_INVAL;
	return SB_OK;
}

/* Resolves params[field] (or the default "main") to a canonical key;
 * answers the error itself and returns false when it cannot. */
static bool control_key_param(struct control_conn *c, const json_t *id, const char *name, char *key,
                              char *agent)
{
	struct config *cfg = control_config(c);
	int rc = control_session_key(cfg, name, key, CONTROL_KEY_MAX, agent, 65);

	if (rc == SB_ERR_NOTFOUND) {
		/* Name the agent that is missing and the ones there are. */
		const char *k = name ? name : "main", *who = k;
		char msg[1024], known[600] = "";
		size_t len = 0, wlen = strlen(k);

		if (strncmp(k, "agent:", 6) == 0) {
			who = k + 6;
			wlen = strcspn(who, ":");
		}
		for (size_t i = 0; i < cfg->n_agents && len < sizeof known; i++)
			len += (size_t)snprintf(known + len, sizeof known - len, "%s%s", i ? ", " : "",
			                        cfg->agents[i].id);
		snprintf(msg, sizeof msg, "no agent \"%.*s\" is configured (the agents are: %s)",
		         (int)(wlen > 200 ? 200 : wlen), who, known[0] ? known : "none");
		config_unref(cfg);
		control_reply_error(c, id, CONTROL_E_INVALID, msg,
		                    json_pack("{ss ss}", "code", "UNKNOWN_AGENT", "sessionKey", k),
		                    false, 0);
		return false;
	}
	config_unref(cfg);
	if (rc) {
		control_bad(c, id,
		            "sessionKey is \"agent:<id>:<rest>\" or a short key such as \"main\" "
		            "(printable, no spaces, under 512 bytes)");
		return false;
	}
	return true;
}

/* ---- health, status ---- */

static void control_health(struct control_conn *c, const json_t *id, json_t *params)
{
	(void)params;
	control_reply_ok(c, id,
	                 json_pack("{sb ss sI sI ss}", "ok", 1, "status",
	                           c->ctl->draining ? "draining" : "ok", "ts",
	                           (json_int_t)clock_wall_ms(), "uptimeMs",
	                           (json_int_t)control_uptime_ms(c->ctl), "version", SB_VERSION));
}

static void control_status(struct control_conn *c, const json_t *id, json_t *params)
{
	struct config *cfg = control_config(c);
	const struct agent_config *def = config_default_agent(cfg);
	const struct metrics *m = c->ctl->ctx.metrics;
	const struct gateway_ctx *g = &c->ctl->ctx;
	json_t *agents = json_array();
	json_t *channels = g->channels_status ? g->channels_status(g->ud) : json_object();
	json_t *payload;

	(void)params;
	for (size_t i = 0; agents && i < cfg->n_agents; i++)
		json_array_append_new(agents, json_string(cfg->agents[i].id));
	payload = json_pack(
	    "{ss ss sI sI sI s{so ss?} s{sI sI} s{sI sI} s{sI} s{sI sI sI} s{ss} so}", "version",
	    SB_VERSION, "state", c->ctl->draining ? "draining" : "ready", "ts",
	    (json_int_t)clock_wall_ms(), "uptimeMs", (json_int_t)control_uptime_ms(c->ctl), "pid",
	    (json_int_t)getpid(), "agents", "ids", agents ? agents : json_array(), "defaultId",
	    def ? def->id : NULL, "connections", "control", (json_int_t)c->ctl->n_conns,
	    "websocket", (json_int_t)server_ws_count(c->ctl->ctx.server), "runs", "active",
	    (json_int_t)(m ? m->runs_active : 0), "waiting",
	    (json_int_t)dispatcher_busy(c->ctl->ctx.dispatcher), "queues", "inbox",
	    (json_int_t)(m ? m->inbox_depth : 0), "ingest", "accepted",
	    (json_int_t)(m ? m->ingest_accepted : 0), "duplicates",
	    (json_int_t)(m ? m->ingest_duplicates : 0), "rejected",
	    (json_int_t)(m ? m->ingest_rejected : 0), "config", "path", cfg->path, "channels",
	    channels ? channels : json_object());
	if (payload && g->scheduler)
		json_object_set_new(payload, "scheduler", scheduler_status(g->scheduler));
	/* Each agent's model chain, and the last reload and why it was
	 * rejected (what `switchboard status` shows). */
	if (payload) {
		json_t *list = json_array();

		for (size_t i = 0; list && i < cfg->n_agents; i++) {
			const struct agent_config *a = &cfg->agents[i];
			json_t *fb = json_array();

			for (size_t k = 0; fb && k < a->n_fallbacks; k++)
				json_array_append_new(fb, json_string(a->fallbacks[k]));
			json_array_append_new(list, json_pack("{ss ss? so}", "id", a->id, "model",
			                                      a->model, "fallbacks",
			                                      fb ? fb : json_array()));
		}
		json_object_set_new(json_object_get(payload, "agents"), "list",
		                    list ? list : json_array());
		if (m && m->config_last_reload_ms)
			json_object_set_new(
			    json_object_get(payload, "config"), "lastReload",
			    json_pack("{sI sb ss?}", "at", (json_int_t)m->config_last_reload_ms, "ok",
			              m->config_last_reload_ok, "error",
			              m->config_last_reload_error[0] ? m->config_last_reload_error
			                                             : NULL));
	}
	control_reply_ok(c, id, payload);
	config_unref(cfg);
}

/* ---- agents, channels ---- */

static void control_agents_list(struct control_conn *c, const json_t *id, json_t *params)
{
	struct config *cfg = control_config(c);
	const struct agent_config *def = config_default_agent(cfg);
	json_t *list = json_array();

	(void)params;
	for (size_t i = 0; list && i < cfg->n_agents; i++) {
		const struct agent_config *a = &cfg->agents[i];

		json_array_append_new(list, json_pack("{ss ss sb ss? ss}", "id", a->id, "name",
		                                      a->id, "default", def == a, "model", a->model,
		                                      "workspace", a->workspace));
	}
	control_reply_ok(c, id,
	                 json_pack("{ss? ss so}", "defaultId", def ? def->id : NULL, "mainKey",
	                           "main", "agents", list ? list : json_array()));
	config_unref(cfg);
}

static void control_channels_status(struct control_conn *c, const json_t *id, json_t *params)
{
	const struct gateway_ctx *g = &c->ctl->ctx;
	json_t *order = json_array();
	json_t *map = g && g->channels_status ? g->channels_status(g->ud) : json_object();
	const char *name;
	json_t *v;

	(void)params;
	json_object_foreach(map, name, v)
	{
		(void)v;
		json_array_append_new(order, json_string(name));
	}
	/* Channels the configuration knows whose adapter is not built in. */
	for (size_t i = 0; order && map && i < CHANNELS_CONFIG_COUNT; i++) {
		name = channels_config_names[i];
		if (json_object_get(map, name))
			continue;
		json_array_append_new(order, json_string(name));
		json_object_set_new(
		    map, name, json_pack("{sb sb s[]}", "available", 0, "running", 0, "accounts"));
	}
	control_reply_ok(c, id,
	                 json_pack("{sI so so}", "ts", (json_int_t)clock_wall_ms(), "channelOrder",
	                           order ? order : json_array(), "channels",
	                           map ? map : json_object()));
}

/* ---- config.get ---- */

static json_t *control_value_json(const struct cfg_key *k, const char *field);

static json_t *control_section_json(const struct cfg_section *section, const char *obj)
{
	json_t *o = json_object();

	for (size_t i = 0; o && i < section->nkeys; i++) {
		const struct cfg_key *k = &section->keys[i];
		json_t *v = control_value_json(k, obj + k->offset);

		if (v && (k->type == CFG_LIST || k->type == CFG_STRING_LIST)) {
			size_t n = *(const size_t *)(obj + k->count_offset);
			json_t *a = json_array();

			json_decref(v);
			v = a;
			for (size_t j = 0; a && j < n; j++) {
				if (k->type == CFG_STRING_LIST) {
					char **list = *(char **const *)(obj + k->offset);

					json_array_append_new(a,
					                      json_string(list[j] ? list[j] : ""));
				} else {
					const char *base = *(const char *const *)(obj + k->offset);

					json_array_append_new(
					    a, control_section_json(k->section,
					                            base + j * k->section->size));
				}
			}
		}
		json_object_set_new(o, k->name, v ? v : json_null());
	}
	return o;
}

static json_t *control_value_json(const struct cfg_key *k, const char *field)
{
	switch (k->type) {
	case CFG_STRING: {
		const char *s = *(const char *const *)field;

		if (!s)
			return json_null();
		return json_string((k->flags & CFG_SECRET) ? CONTROL_REDACTED : s);
	}
	case CFG_INT:
	case CFG_DURATION:
	case CFG_SIZE:
		return json_integer(*(const int64_t *)field);
	case CFG_BOOL:
		return json_boolean(*(const bool *)field);
	case CFG_ENUM: {
		int idx = *(const int *)field;

		for (int i = 0; k->choices && k->choices[i]; i++)
			if (i == idx)
				return json_string(k->choices[i]);
		return json_integer(idx);
	}
	case CFG_SECTION:
		return control_section_json(k->section, field);
	case CFG_LIST:
	case CFG_STRING_LIST:
		return json_array(); /* filled by the caller, which knows the count */
	}
	return json_null();
}

json_t *control_config_json(const struct cfg_section *section, const void *obj)
{
	return control_section_json(section, obj);
}

static void control_config_get(struct control_conn *c, const json_t *id, json_t *params)
{
	struct config *cfg = control_config(c);
	char hash[65];

	(void)params;
	sodium_bin2hex(hash, sizeof hash, cfg->digest, sizeof cfg->digest);
	control_reply_ok(c, id,
	                 json_pack("{ss ss so s{ss ss}}", "path", cfg->path, "hash", hash, "config",
	                           control_config_json(&config_root_section, cfg), "units",
	                           "durations", "milliseconds", "sizes", "bytes"));
	config_unref(cfg);
}

/* ---- sessions ---- */

static json_t *control_session_json(const struct store_session *s)
{
	json_t *o = json_pack("{ss ss ss sI ss}", "key", s->key, "agentId", s->agent_id,
	                      "sessionId", s->session_id, "updatedAt", (json_int_t)s->updated_at,
	                      "kind", control_session_kind(s->key));
	json_t *meta = s->meta ? json_loads(s->meta, 0, NULL) : NULL;

	if (o && meta)
		json_object_set_new(o, "meta", meta);
	else
		json_decref(meta);
	return o;
}

struct control_sessions {
	struct control_op base;
	char key[CONTROL_KEY_MAX];
};

static void control_sessions_listed(void *ud, int rc, const struct store_session *v, size_t n)
{
	struct control_sessions *op = ud;
	json_t *list;

	if (!control_op_live(&op->base))
		goto out;
	if (rc) {
		control_store_busy(op->base.conn, op->base.id, rc);
		goto out;
	}
	list = json_array();
	for (size_t i = 0; list && i < n; i++)
		json_array_append_new(list, control_session_json(&v[i]));
	control_reply_ok(op->base.conn, op->base.id,
	                 json_pack("{sI sI so}", "ts", (json_int_t)clock_wall_ms(), "count",
	                           (json_int_t)n, "sessions", list ? list : json_array()));
out:
	control_op_free(&op->base);
}

static void control_sessions_list(struct control_conn *c, const json_t *id, json_t *params)
{
	int64_t limit = control_int(params, "limit", CONTROL_LIST_DEFAULT, CONTROL_LIST_MAX);
	const char *agent = control_str(params, "agentId");
	struct control_sessions *op;
	int rc;

	if (limit < 0) {
		control_bad(c, id, "limit is a positive integer");
		return;
	}
	op = calloc(1, sizeof *op);
	if (!op) {
		control_reply_error(c, id, CONTROL_E_INTERNAL, "out of memory", NULL, false, 0);
		return;
	}
	control_op_start(&op->base, c, id);
	rc = store_session_list(c->ctl->ctx.store, agent, (size_t)limit, control_sessions_listed,
	                        op);
	if (rc) {
		control_store_busy(c, id, rc);
		control_op_free(&op->base);
	}
}

static void control_session_found(void *ud, int rc, const struct store_session *s)
{
	struct control_sessions *op = ud;

	if (!control_op_live(&op->base))
		goto out;
	if (rc == SB_ERR_NOTFOUND)
		control_reply_error(op->base.conn, op->base.id, CONTROL_E_NOT_FOUND,
		                    "no such session", json_pack("{ss}", "sessionKey", op->key),
		                    false, 0);
	else if (rc)
		control_store_busy(op->base.conn, op->base.id, rc);
	else
		control_reply_ok(op->base.conn, op->base.id, control_session_json(s));
out:
	control_op_free(&op->base);
}

static const char *control_key_name(const json_t *params)
{
	const char *k = control_str(params, "sessionKey");

	return k ? k : control_str(params, "key");
}

static void control_sessions_get(struct control_conn *c, const json_t *id, json_t *params)
{
	char key[CONTROL_KEY_MAX], agent[65];
	struct control_sessions *op;
	int rc;

	if (!control_key_param(c, id, control_key_name(params), key, agent))
		return;
	op = calloc(1, sizeof *op);
	if (!op) {
		control_reply_error(c, id, CONTROL_E_INTERNAL, "out of memory", NULL, false, 0);
		return;
	}
	snprintf(op->key, sizeof op->key, "%s", key);
	control_op_start(&op->base, c, id);
	rc = store_session_get(c->ctl->ctx.store, key, control_session_found, op);
	if (rc) {
		control_store_busy(c, id, rc);
		control_op_free(&op->base);
	}
}

static json_t *control_subs_json(const struct control_conn *c)
{
	json_t *a = json_array();

	for (size_t i = 0; a && i < c->n_subs; i++)
		json_array_append_new(a, json_string(c->subs[i]));
	return a;
}

static void control_sessions_subscribe(struct control_conn *c, const json_t *id, json_t *params)
{
	const char *name = control_key_name(params);
	char key[CONTROL_KEY_MAX], agent[65];

	if (name && strcmp(name, "*") == 0)
		snprintf(key, sizeof key, "*");
	else if (!control_key_param(c, id, name, key, agent))
		return;
	if (control_subscribe(c, key) != SB_OK) {
		control_bad(c, id, "too many subscriptions on this connection (64)");
		return;
	}
	control_reply_ok(
	    c, id, json_pack("{ss so}", "sessionKey", key, "subscribed", control_subs_json(c)));
}

static void control_sessions_unsubscribe(struct control_conn *c, const json_t *id, json_t *params)
{
	const char *name = control_key_name(params);
	char key[CONTROL_KEY_MAX], agent[65];

	if (name && strcmp(name, "*") == 0)
		snprintf(key, sizeof key, "*");
	else if (!control_key_param(c, id, name, key, agent))
		return;
	control_unsubscribe(c, key);
	control_reply_ok(
	    c, id, json_pack("{ss so}", "sessionKey", key, "subscribed", control_subs_json(c)));
}

/* ---- chat.send, agent ---- */

struct control_submit {
	struct control_op base;
	bool two_stage; /* the agent method */
	char run_id[CONTROL_IDEMPOTENCY_MAX + 1];
	char key[CONTROL_KEY_MAX];
	char agent[65];
	int64_t wait_ms;
	int64_t accepted_at;
};

static const char *control_final_status(const char *status)
{
	if (!status || !*status)
		return "ok";
	if (strcmp(status, "aborted") == 0 || strcmp(status, "interrupted") == 0 ||
	    strcmp(status, "stopped") == 0)
		return "aborted";
	if (strcmp(status, "timeout") == 0)
		return "timeout";
	if (strcmp(status, "error") == 0 || strcmp(status, "denied") == 0 ||
	    strcmp(status, "dropped") == 0)
		return "error";
	return "ok";
}

static void control_submit_replied(void *ud, const struct host_reply *reply)
{
	struct control_submit *op = ud;
	struct control_conn *c = op->base.conn;

	if (!control_op_live(&op->base))
		goto out;
	if (reply->rc == SB_ERR_TIMEOUT) {
		control_reply_error(
		    c, op->base.id, CONTROL_E_TIMEOUT,
		    "no reply in time; the run goes on and its reply is kept in the "
		    "session",
		    json_pack("{ss}", "runId", op->run_id), true, 0);
	} else if (reply->rc) {
		control_reply_error(c, op->base.id, CONTROL_E_UNAVAILABLE, sb_strerror(reply->rc),
		                    json_pack("{ss}", "runId", op->run_id), true, 0);
	} else {
		control_reply_ok(c, op->base.id,
		                 json_pack("{ss ss ss ss ss sI s{s[{ss}]}}", "runId", op->run_id,
		                           "status", control_final_status(reply->status),
		                           "stopReason", reply->status ? reply->status : "",
		                           "sessionKey", op->key, "text",
		                           reply->text ? reply->text : "", "endedAt",
		                           (json_int_t)clock_wall_ms(), "result", "payloads",
		                           "text", reply->text ? reply->text : ""));
	}
out:
	control_op_free(&op->base);
}

static void control_submit_ingested(void *ud, int rc, int64_t inbox_id, bool duplicate)
{
	struct control_submit *op = ud;
	struct control_conn *c = op->base.conn;
	struct control *ctl = op->base.ctl;

	if (!control_op_live(&op->base))
		goto out;
	if (rc) {
		control_reply_error(c, op->base.id, CONTROL_E_UNAVAILABLE,
		                    rc == SB_ERR_AGAIN ? "the gateway is busy; try again"
		                                       : "the message could not be stored",
		                    NULL, true, rc == SB_ERR_AGAIN ? 1000 : 0);
		goto out;
	}
	if (duplicate) {
		/* Already accepted under this idempotency key: the first request
		 * gets (or got) the outcome. */
		control_reply_ok(c, op->base.id,
		                 json_pack("{ss ss ss}", "runId", op->run_id, "status", "in_flight",
		                           "sessionKey", op->key));
		goto out;
	}
	if (!op->two_stage) {
		control_reply_ok(c, op->base.id,
		                 json_pack("{ss ss ss}", "runId", op->run_id, "status", "started",
		                           "sessionKey", op->key));
		goto out;
	}
	control_reply_ok(c, op->base.id,
	                 json_pack("{ss ss ss sI}", "runId", op->run_id, "status", "accepted",
	                           "sessionKey", op->key, "acceptedAt",
	                           (json_int_t)op->accepted_at));
	rc = ctl->ctx.host->await_reply(ctl->ctx.host->ctx, inbox_id, op->wait_ms,
	                                control_submit_replied, op);
	if (rc == SB_OK)
		return; /* the op lives on until the reply */
	control_reply_error(c, op->base.id, CONTROL_E_UNAVAILABLE, "cannot wait for the reply",
	                    json_pack("{ss}", "runId", op->run_id), true, 0);
out:
	control_op_free(&op->base);
}

/* A message of the control plane's client c to session key, as chat.send
 * and agent hand it in: the webchat channel, a direct conversation whose
 * peer is the session, the client's device as the sender. */
static void control_webchat_envelope(struct control_conn *c, const char *key, struct envelope *env)
{
	memset(env, 0, sizeof *env);
	env->channel = "webchat";
	env->account = "default";
	env->peer_kind = ENVELOPE_PEER_DIRECT;
	env->peer_id = key;
	env->sender_id = *c->device_id ? c->device_id : "operator";
	env->sender_name = *c->client_id ? c->client_id : "operator";
}

static void control_submit(struct control_conn *c, const json_t *id, json_t *params, bool two_stage)
{
	const char *message = control_str(params, "message");
	const char *idem = control_str(params, "idempotencyKey");
	const char *name = control_str(params, "sessionKey");
	const char *agent_id = control_str(params, "agentId");
	const json_t *timeout = json_object_get(params, "timeout");
	char named[CONTROL_KEY_MAX];
	struct control_submit *op;
	struct config *cfg;
	const struct agent_config *ac;
	struct envelope env;
	int rc;

	if (c->ctl->draining) {
		control_reply_error(c, id, CONTROL_E_UNAVAILABLE, "the gateway is stopping", NULL,
		                    true, 5000);
		return;
	}
	if (!message || !*message) {
		control_bad(c, id, "message is a non-empty string");
		return;
	}
	if (!idem || !*idem || strlen(idem) > CONTROL_IDEMPOTENCY_MAX) {
		control_bad(c, id, "idempotencyKey is required (1 to 200 characters)");
		return;
	}
	if (timeout && !json_is_null(timeout) &&
	    (!json_is_integer(timeout) || json_integer_value(timeout) < 1)) {
		control_bad(c, id, "timeout is a positive number of seconds");
		return;
	}
	/* agentId names the agent of a short key (or of its main session). */
	if (agent_id && (!name || strncmp(name, "agent:", 6) != 0)) {
		if (snprintf(named, sizeof named, "agent:%s:%s", agent_id, name ? name : "main") >=
		    (int)sizeof named) {
			control_bad(c, id, "sessionKey is too long");
			return;
		}
		name = named;
	}
	op = calloc(1, sizeof *op);
	if (!op) {
		control_reply_error(c, id, CONTROL_E_INTERNAL, "out of memory", NULL, false, 0);
		return;
	}
	if (!control_key_param(c, id, name, op->key, op->agent)) {
		free(op);
		return;
	}
	op->two_stage = two_stage;
	snprintf(op->run_id, sizeof op->run_id, "%s", idem);
	op->accepted_at = clock_wall_ms();
	cfg = control_config(c);
	ac = config_agent(cfg, op->agent);
	op->wait_ms = (ac ? ac->run_timeout_ms : 600000) + CONTROL_AGENT_WAIT_EXTRA_MS;
	if (timeout && json_is_integer(timeout) && json_integer_value(timeout) < 86400)
		op->wait_ms = json_integer_value(timeout) * 1000;
	config_unref(cfg);
	/* The sender follows the session it writes to. */
	if (control_subscribe(c, op->key) != SB_OK)
		log_warn("control", "too many subscriptions; not following the session",
		         LOG_S("conn", c->conn_id), LOG_S("session", op->key));
	control_op_start(&op->base, c, id);
	control_webchat_envelope(c, op->key, &env);
	env.event_id = idem;
	env.text = message;
	env.received_at = clock_wall_ms();
	env.route_agent = op->agent;
	env.route_session = op->key;
	rc = c->ctl->ctx.host->ingest(c->ctl->ctx.host->ctx, &env, control_submit_ingested, op);
	if (rc) {
		control_reply_error(c, id, CONTROL_E_UNAVAILABLE,
		                    rc == SB_ERR_AGAIN
		                        ? "the gateway is busy or not ready; try again"
		                        : "the message could not be accepted",
		                    NULL, true, rc == SB_ERR_AGAIN ? 1000 : 0);
		control_op_free(&op->base);
	}
}

static void control_chat_send(struct control_conn *c, const json_t *id, json_t *params)
{
	control_submit(c, id, params, false);
}

static void control_agent(struct control_conn *c, const json_t *id, json_t *params)
{
	control_submit(c, id, params, true);
}

/* ---- agent.prompt ---- */

struct control_prompt {
	struct control_op base;
};

/* One workspace file of the prompt, as agent.prompt describes it. */
static json_t *control_prompt_file(const struct prompt_file *pf,
                                   const struct workspace_file_version *fv, bool git)
{
	json_t *o = json_pack("{ss sb sb sb sb sb sI}", "name", pf->name, "present", pf->present,
	                      "included", pf->included, "blank", pf->blank, "refused", pf->refused,
	                      "leftOut", pf->left_out, "bytes", (json_int_t)pf->bytes);
	char hex[2 * PROMPT_HASH_BYTES + 1];

	if (!o || !pf->present)
		return o;
	workspace_hash_hex(pf->hash, hex);
	json_object_set_new(o, "hash", json_string(hex));
	json_object_set_new(o, "blob", json_string(fv->blob));
	json_object_set_new(o, "committed", json_boolean(git && fv->committed));
	json_object_set_new(o, "mtimeMs", json_integer((json_int_t)(fv->mtime_ns / 1000000)));
	if (pf->truncated)
		json_object_set_new(o, "truncated",
		                    json_pack("{sI ss sI sI}", "cap", (json_int_t)pf->cap, "by",
		                              pf->cut_by_total ? "total" : "file", "headBytes",
		                              (json_int_t)pf->head_bytes, "tailFrom",
		                              (json_int_t)pf->tail_from));
	return o;
}

static json_t *control_prompt_payload(const struct run_preview *p)
{
	const struct workspace_version *v = p->version;
	char hex[2 * PROMPT_HASH_BYTES + 1];
	json_t *files = json_array(), *tools = json_array(), *notes = json_array(), *o;
	size_t i;
	const json_t *t;

	for (i = 0; files && i < v->info.n_files; i++)
		json_array_append_new(files,
		                      control_prompt_file(&v->info.files[i], &v->files[i], v->git));
	json_array_foreach(p->tools, i, t)
	{
		const json_t *schema = json_object_get(t, "input_schema");

		json_array_append_new(
		    tools,
		    json_pack(
		        "{ss sI sI}", "name", json_string_value(json_object_get(t, "name")),
		        "bytes", (json_int_t)json_dumpb(t, NULL, 0, JSON_COMPACT), "schemaBytes",
		        (json_int_t)(schema ? json_dumpb(schema, NULL, 0, JSON_COMPACT) : 0)));
	}
	for (i = 0; notes && i < p->n_notes; i++)
		json_array_append_new(notes,
		                      json_pack("{ss sI sI sb}", "name", p->notes[i].name, "bytes",
		                                (json_int_t)p->notes[i].bytes, "keptBytes",
		                                (json_int_t)p->notes[i].kept, "truncated",
		                                p->notes[i].kept < p->notes[i].bytes));
	workspace_hash_hex(v->hash, hex);
	o = json_pack(
	    "{ss ss ss sb ss s{ss ss sb sb ss} so so ss% sI so sO s{sI sI sI sI sf} sI}", "agentId",
	    p->agent_id, "sessionKey", p->session_key, "sessionId", p->session_id, "newSession",
	    p->new_session, "model", p->model ? p->model : "", "workspace", "dir", p->workspace,
	    "commit", v->commit, "git", v->git, "dirty", v->dirty, "hash", hex, "files", files,
	    "notes", notes, "system", p->system, p->system_len, "systemBytes",
	    (json_int_t)p->system_len, "tools", tools, "toolList", p->tools, "tokens", "system",
	    (json_int_t)p->tokens_system, "tools", (json_int_t)p->tokens_tools, "history",
	    (json_int_t)p->tokens_history, "total", (json_int_t)p->tokens_total, "calibration",
	    p->calibration, "historyMessages", (json_int_t)p->history_messages);
	return o;
}

static void control_prompt_done(void *ud, int rc, const char *error, const struct run_preview *p)
{
	struct control_prompt *op = ud;
	struct control_conn *c = op->base.conn;
	json_t *payload;

	if (!control_op_live(&op->base))
		goto out;
	if (rc) {
		control_reply_error(c, op->base.id,
		                    rc == SB_ERR_NOTFOUND ? CONTROL_E_NOT_FOUND
		                                          : CONTROL_E_UNAVAILABLE,
		                    error ? error : sb_strerror(rc), NULL, rc == SB_ERR_AGAIN, 0);
		goto out;
	}
	payload = control_prompt_payload(p);
	if (!payload)
		control_reply_error(c, op->base.id, CONTROL_E_INTERNAL,
		                    "the prompt could not be encoded (is a workspace file UTF-8?)",
		                    NULL, false, 0);
	else
		control_reply_ok(c, op->base.id, payload);
out:
	control_op_free(&op->base);
}

/* What the next turn of a session would send to the model, built by the
 * runner's own steps (dispatcher_preview) for a message from this client. */
static void control_agent_prompt(struct control_conn *c, const json_t *id, json_t *params)
{
	const char *name = control_str(params, "sessionKey");
	const char *agent_id = control_str(params, "agentId");
	char named[CONTROL_KEY_MAX], key[CONTROL_KEY_MAX], agent[65];
	struct control_prompt *op;
	struct envelope env;
	int rc;

	if (agent_id && (!name || strncmp(name, "agent:", 6) != 0)) {
		if (snprintf(named, sizeof named, "agent:%s:%s", agent_id, name ? name : "main") >=
		    (int)sizeof named) {
			control_bad(c, id, "sessionKey is too long");
			return;
		}
		name = named;
	}
	if (!control_key_param(c, id, name, key, agent))
		return;
	op = calloc(1, sizeof *op);
	if (!op) {
		control_reply_error(c, id, CONTROL_E_INTERNAL, "out of memory", NULL, false, 0);
		return;
	}
	control_op_start(&op->base, c, id);
	control_webchat_envelope(c, key, &env);
	rc = dispatcher_preview(c->ctl->ctx.dispatcher, agent, key, &env, control_prompt_done, op);
	if (rc) {
		control_reply_error(
		    c, id, rc == SB_ERR_NOTFOUND ? CONTROL_E_NOT_FOUND : CONTROL_E_UNAVAILABLE,
		    rc == SB_ERR_AGAIN ? "the gateway is not ready; try again" : sb_strerror(rc),
		    NULL, rc == SB_ERR_AGAIN, rc == SB_ERR_AGAIN ? 1000 : 0);
		control_op_free(&op->base);
	}
}

static void control_chat_abort(struct control_conn *c, const json_t *id, json_t *params)
{
	char key[CONTROL_KEY_MAX], agent[65];
	int rc;

	if (!control_key_param(c, id, control_key_name(params), key, agent))
		return;
	rc =
	    dispatcher_abort_session(c->ctl->ctx.dispatcher, key, "aborted from the control plane");
	control_reply_ok(
	    c, id, json_pack("{sb sb ss}", "ok", 1, "aborted", rc == SB_OK, "sessionKey", key));
}

/* ---- chat.history ---- */

struct control_history {
	struct control_op base;
	uv_work_t work;
	char key[CONTROL_KEY_MAX];
	char agent[65];
	char session_id[64];
	size_t limit;
	char path[PATH_MAX];
	int rc;
	char *payload; /* built on the thread pool */
};

static void control_history_release(struct control_op *op)
{
	struct control_history *h = (struct control_history *)op;

	free(h->payload);
	free(h);
}

/* "2026-11-30T01:02:03.456Z" -> unix ms; 0 when it does not parse. */
static int64_t control_rfc3339_ms(const char *ts)
{
	struct tm tm;
	int ms = 0;

	if (!ts)
		return 0;
	memset(&tm, 0, sizeof tm);
	if (sscanf(ts, "%4d-%2d-%2dT%2d:%2d:%2d.%3d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
	           &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &ms) < 6)
		return 0;
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	return (int64_t)timegm(&tm) * 1000 + ms;
}

/* Thread pool: loads the transcript and serialises the answer. */
static void control_history_work(uv_work_t *w)
{
	struct control_history *h = w->data;
	struct transcript_loaded tl;
	json_t *messages = json_array(), *out, *e;
	size_t i, n = 0, skip = 0;

	memset(&tl, 0, sizeof tl);
	h->rc = transcript_load(h->path, &tl);
	if (h->rc == SB_ERR_NOTFOUND)
		h->rc = SB_OK; /* a session whose first run has not written yet */
	if (h->rc || !messages)
		goto done;
	json_array_foreach(tl.entries, i, e)
	{
		const char *type = json_string_value(json_object_get(e, "type"));

		if (type && strcmp(type, "message") == 0 &&
		    json_is_object(json_object_get(e, "message")))
			n++;
	}
	skip = n > h->limit ? n - h->limit : 0;
	json_array_foreach(tl.entries, i, e)
	{
		const char *type = json_string_value(json_object_get(e, "type"));
		json_t *m = json_object_get(e, "message"), *copy;

		if (!type || strcmp(type, "message") != 0 || !json_is_object(m))
			continue;
		if (skip) {
			skip--;
			continue;
		}
		copy = json_deep_copy(m);
		if (!copy)
			continue;
		json_object_set_new(
		    copy, "timestamp",
		    json_integer(control_rfc3339_ms(json_string_value(json_object_get(e, "ts")))));
		json_array_append_new(messages, copy);
	}
done:
	if (h->rc == SB_OK) {
		out = json_pack("{ss ss? so}", "sessionKey", h->key, "sessionId",
		                *h->session_id ? h->session_id : NULL, "messages", messages);
		messages = NULL;
		/* The session's todo list (the todo tool), when it keeps one. */
		if (out && tl.todo)
			json_object_set_new(out, "todo", json_deep_copy(tl.todo));
		h->payload = out ? json_dumps(out, JSON_COMPACT) : NULL;
		json_decref(out);
		if (!h->payload)
			h->rc = SB_ERR_NOMEM;
	}
	json_decref(messages);
	transcript_loaded_free(&tl);
}

static void control_history_done(uv_work_t *w, int status)
{
	struct control_history *h = w->data;

	if (!control_op_live(&h->base))
		goto out;
	if (status != 0 || h->rc)
		control_reply_error(h->base.conn, h->base.id, CONTROL_E_UNAVAILABLE,
		                    "cannot read the transcript", NULL, true, 0);
	else
		control_reply_raw(h->base.conn, h->base.id, h->payload);
out:
	control_op_free(&h->base);
}

static void control_history_found(void *ud, int rc, const struct store_session *s)
{
	struct control_history *h = ud;
	struct control *ctl = h->base.ctl;

	if (!control_op_live(&h->base))
		goto out;
	if (rc == SB_ERR_NOTFOUND) {
		control_reply_ok(
		    h->base.conn, h->base.id,
		    json_pack("{ss sn s[]}", "sessionKey", h->key, "sessionId", "messages"));
		goto out;
	}
	if (rc) {
		control_store_busy(h->base.conn, h->base.id, rc);
		goto out;
	}
	snprintf(h->session_id, sizeof h->session_id, "%s", s->session_id);
	if (snprintf(h->path, sizeof h->path, "%s/agents/%s/sessions/%s.jsonl", ctl->ctx.home,
	             s->agent_id, s->session_id) >= (int)sizeof h->path ||
	    strchr(s->session_id, '/') || strchr(s->agent_id, '/')) {
		control_reply_error(h->base.conn, h->base.id, CONTROL_E_INTERNAL,
		                    "the session's transcript path is not valid", NULL, false, 0);
		goto out;
	}
	h->work.data = h;
	if (uv_queue_work(ctl->ctx.loop, &h->work, control_history_work, control_history_done) == 0)
		return;
	control_reply_error(h->base.conn, h->base.id, CONTROL_E_UNAVAILABLE,
	                    "cannot queue the read", NULL, true, 0);
out:
	control_op_free(&h->base);
}

static void control_chat_history(struct control_conn *c, const json_t *id, json_t *params)
{
	int64_t limit = control_int(params, "limit", CONTROL_HISTORY_DEFAULT, CONTROL_HISTORY_MAX);
	struct control_history *h;
	int rc;

	if (limit < 0) {
		control_bad(c, id, "limit is a positive integer");
		return;
	}
	h = calloc(1, sizeof *h);
	if (!h) {
		control_reply_error(c, id, CONTROL_E_INTERNAL, "out of memory", NULL, false, 0);
		return;
	}
	if (!control_key_param(c, id, control_key_name(params), h->key, h->agent)) {
		free(h);
		return;
	}
	h->limit = (size_t)limit;
	h->base.release = control_history_release;
	control_op_start(&h->base, c, id);
	rc = store_session_get(c->ctl->ctx.store, h->key, control_history_found, h);
	if (rc) {
		control_store_busy(c, id, rc);
		control_op_free(&h->base);
	}
}

/* ---- devices ---- */

static json_t *control_device_json(const struct store_device *d)
{
	json_t *scopes = json_array();
	const char *p = d->scopes ? d->scopes : "";
	json_t *o;

	while (scopes && *p) {
		size_t n = strcspn(p, ",");

		if (n)
			json_array_append_new(scopes, json_stringn(p, n));
		p += n;
		if (*p == ',')
			p++;
	}
	o = json_pack("{ss ss ss ss? ss? so ss? sI sI}", "deviceId", d->device_id, "publicKey",
	              d->public_key, "state", d->state, "clientId", d->client_id, "platform",
	              d->platform, "scopes", scopes ? scopes : json_array(), "remoteAddr",
	              d->remote_addr, "createdAt", (json_int_t)d->created_at, "lastSeenAt",
	              (json_int_t)d->last_seen_at);
	if (o && d->approved_at)
		json_object_set_new(o, "approvedAt", json_integer(d->approved_at));
	return o;
}

struct control_devices {
	struct control_op base;
	char device_id[65];
};

static void control_devices_listed(void *ud, int rc, const struct store_device *v, size_t n)
{
	struct control_devices *op = ud;
	json_t *pending, *paired;

	if (!control_op_live(&op->base))
		goto out;
	if (rc) {
		control_store_busy(op->base.conn, op->base.id, rc);
		goto out;
	}
	pending = json_array();
	paired = json_array();
	for (size_t i = 0; pending && paired && i < n; i++)
		json_array_append_new(strcmp(v[i].state, "approved") == 0 ? paired : pending,
		                      control_device_json(&v[i]));
	control_reply_ok(op->base.conn, op->base.id,
	                 json_pack("{so so}", "pending", pending ? pending : json_array(), "paired",
	                           paired ? paired : json_array()));
out:
	control_op_free(&op->base);
}

static void control_devices_list(struct control_conn *c, const json_t *id, json_t *params)
{
	struct control_devices *op = calloc(1, sizeof *op);
	int rc;

	(void)params;
	if (!op) {
		control_reply_error(c, id, CONTROL_E_INTERNAL, "out of memory", NULL, false, 0);
		return;
	}
	control_op_start(&op->base, c, id);
	rc = store_device_list(c->ctl->ctx.store, control_devices_listed, op);
	if (rc) {
		control_store_busy(c, id, rc);
		control_op_free(&op->base);
	}
}

static void control_device_approved(void *ud, int rc, const struct store_device *d, bool created)
{
	struct control_devices *op = ud;
	json_t *out;

	(void)created;
	if (!control_op_live(&op->base))
		goto out;
	if (rc == SB_ERR_NOTFOUND) {
		control_reply_error(op->base.conn, op->base.id, CONTROL_E_NOT_FOUND,
		                    "no device with that id asked to connect",
		                    json_pack("{ss}", "deviceId", op->device_id), false, 0);
		goto out;
	}
	if ((rc && rc != SB_ERR_EXISTS) || !d) {
		control_store_busy(op->base.conn, op->base.id, rc);
		goto out;
	}
	log_info("control", rc == SB_ERR_EXISTS ? "device was approved already" : "device approved",
	         LOG_S("device", d->device_id), LOG_S("by", op->base.conn->conn_id));
	out = control_device_json(d);
	if (out) {
		json_object_set_new(out, "approved", json_true());
		json_object_set_new(out, "alreadyApproved", json_boolean(rc == SB_ERR_EXISTS));
	}
	control_reply_ok(op->base.conn, op->base.id, out);
out:
	control_op_free(&op->base);
}

static void control_device_revoked(void *ud, int rc)
{
	struct control_devices *op = ud;

	if (!control_op_live(&op->base))
		goto out;
	if (rc == SB_ERR_NOTFOUND) {
		control_reply_error(op->base.conn, op->base.id, CONTROL_E_NOT_FOUND,
		                    "no such device", json_pack("{ss}", "deviceId", op->device_id),
		                    false, 0);
		goto out;
	}
	if (rc) {
		control_store_busy(op->base.conn, op->base.id, rc);
		goto out;
	}
	log_info("control", "device revoked", LOG_S("device", op->device_id),
	         LOG_S("by", op->base.conn->conn_id));
	control_drop_device(op->base.ctl, op->device_id);
	control_reply_ok(op->base.conn, op->base.id,
	                 json_pack("{ss sb}", "deviceId", op->device_id, "revoked", 1));
out:
	control_op_free(&op->base);
}

static void control_devices_change(struct control_conn *c, const json_t *id, json_t *params,
                                   bool approve)
{
	const char *dev = control_str(params, "deviceId");
	struct control_devices *op;
	int rc;

	if (!dev)
		dev = control_str(params, "requestId");
	if (!dev || !*dev || strlen(dev) >= sizeof op->device_id) {
		control_bad(c, id, "deviceId is required");
		return;
	}
	op = calloc(1, sizeof *op);
	if (!op) {
		control_reply_error(c, id, CONTROL_E_INTERNAL, "out of memory", NULL, false, 0);
		return;
	}
	snprintf(op->device_id, sizeof op->device_id, "%s", dev);
	for (char *p = op->device_id; *p; p++)
		*p = (char)(*p >= 'A' && *p <= 'F' ? *p + 32 : *p);
	control_op_start(&op->base, c, id);
	rc = approve ? store_device_approve(c->ctl->ctx.store, op->device_id,
	                                    control_device_approved, op)
	             : store_device_revoke(c->ctl->ctx.store, op->device_id, control_device_revoked,
	                                   op);
	if (rc) {
		control_store_busy(c, id, rc);
		control_op_free(&op->base);
	}
}

static void control_devices_approve(struct control_conn *c, const json_t *id, json_t *params)
{
	control_devices_change(c, id, params, true);
}

static void control_devices_revoke(struct control_conn *c, const json_t *id, json_t *params)
{
	control_devices_change(c, id, params, false);
}

/* ---- routing ---- */

/* "kind:id" into the envelope's peer fields; false when malformed. */
static bool control_peer(const char *s, enum envelope_peer_kind *kind, const char **id)
{
	const char *colon = s ? strchr(s, ':') : NULL;
	char k[16];

	if (!colon || colon == s || (size_t)(colon - s) >= sizeof k || !colon[1])
		return false;
	memcpy(k, s, (size_t)(colon - s));
	k[colon - s] = '\0';
	*id = colon + 1;
	return envelope_peer_kind_parse(k, kind) == SB_OK;
}

/* bindings.explain {channel, account?, peer "kind:id", parent? "kind:id",
 * thread?, guild?, team?, sender?, mention?, text?}: the routing decision
 * for such a message, as `switchboard route --json` prints it. */
static void control_bindings_explain(struct control_conn *c, const json_t *id, json_t *params)
{
	struct config *cfg = control_config(c);
	struct bindings_table *t = NULL;
	struct bindings_input in;
	struct envelope e;
	const char *parent_id = NULL;
	json_t *out = NULL;

	memset(&e, 0, sizeof e);
	memset(&in, 0, sizeof in);
	e.channel = json_string_value(json_object_get(params, "channel"));
	e.account = json_string_value(json_object_get(params, "account"));
	e.thread_id = json_string_value(json_object_get(params, "thread"));
	e.guild_id = json_string_value(json_object_get(params, "guild"));
	e.team_id = json_string_value(json_object_get(params, "team"));
	e.sender_id = json_string_value(json_object_get(params, "sender"));
	e.text = json_string_value(json_object_get(params, "text"));
	e.mentioned = json_is_true(json_object_get(params, "mention"));
	e.event_id = "explain";
	if (!e.channel ||
	    !control_peer(json_string_value(json_object_get(params, "peer")), &e.peer_kind,
	                  &e.peer_id) ||
	    (json_object_get(params, "parent") &&
	     !control_peer(json_string_value(json_object_get(params, "parent")), &in.parent_kind,
	                   &parent_id))) {
		control_reply_error(c, id, CONTROL_E_INVALID,
		                    "params: channel and peer (\"kind:id\") are required; parent "
		                    "is \"kind:id\"",
		                    NULL, false, -1);
		goto out;
	}
	e.parent_id = parent_id;
	in.parent_kind_set = parent_id != NULL;
	in.env = &e;
	/* as the dispatcher decides it: only the operator's DMs share main */
	in.owner = permissions_is_owner(&cfg->security, e.channel, e.sender_id);
	if (config_bindings_table(cfg, &t) != SB_OK ||
	    bindings_explain_json(t, &in, &out) != SB_OK) {
		control_reply_error(c, id, CONTROL_E_INVALID, "the message cannot be routed", NULL,
		                    false, -1);
		goto out;
	}
	control_reply_ok(c, id, out);
out:
	bindings_table_free(t);
	config_unref(cfg);
}

/* bindings.list: the compiled table in precedence order. */
static void control_bindings_list(struct control_conn *c, const json_t *id, json_t *params)
{
	struct config *cfg = control_config(c);
	struct bindings_table *t = NULL;
	json_t *out = NULL;

	(void)params;
	if (config_bindings_table(cfg, &t) != SB_OK || bindings_list_json(t, &out) != SB_OK)
		control_reply_error(c, id, CONTROL_E_INVALID, "the routing table does not compile",
		                    NULL, false, -1);
	else
		control_reply_ok(c, id, out);
	bindings_table_free(t);
	config_unref(cfg);
}

/* ---- the table ---- */

/* ---- cron (gateway/sched/scheduler.h) ---- */

struct control_cron {
	struct control_op base;
};

static void control_cron_done(void *ud, int rc, const char *error, const json_t *result)
{
	struct control_cron *op = ud;

	if (control_op_live(&op->base)) {
		if (rc)
			control_reply_error(op->base.conn, op->base.id, CONTROL_E_UNAVAILABLE,
			                    error ? error : sb_strerror(rc), NULL, true, 1000);
		else
			control_reply_ok(op->base.conn, op->base.id,
			                 result ? json_deep_copy(result) : json_object());
	}
	control_op_free(&op->base);
}

static struct scheduler *control_scheduler(struct control_conn *c, const json_t *id)
{
	struct scheduler *s = c->ctl->ctx.scheduler;

	if (!s)
		control_reply_error(c, id, CONTROL_E_UNAVAILABLE, "the scheduler is not running",
		                    NULL, false, 0);
	return s;
}

static struct control_cron *control_cron_op(struct control_conn *c, const json_t *id)
{
	struct control_cron *op = calloc(1, sizeof *op);

	if (!op) {
		control_reply_error(c, id, CONTROL_E_INTERNAL, "out of memory", NULL, false, 0);
		return NULL;
	}
	control_op_start(&op->base, c, id);
	return op;
}

/* Answers a scheduler call that did not start (rc != SB_OK). */
static void control_cron_refused(struct control_conn *c, const json_t *id, int rc, const char *what)
{
	if (rc == SB_ERR_NOTFOUND)
		control_reply_error(c, id, CONTROL_E_NOT_FOUND, "no such cron job", NULL, false, 0);
	else if (rc == SB_ERR_INVAL || rc == SB_ERR_EXISTS)
		control_reply_error(c, id, CONTROL_E_INVALID, what, NULL, false, 0);
	else
		control_store_busy(c, id, rc);
}

static void control_cron_list(struct control_conn *c, const json_t *id, json_t *params)
{
	struct scheduler *s = control_scheduler(c, id);

	(void)params;
	if (s)
		control_reply_ok(c, id,
		                 json_pack("{sI so}", "now", (json_int_t)scheduler_now_ms(s),
		                           "jobs", scheduler_cron_list(s)));
}

static void control_cron_status(struct control_conn *c, const json_t *id, json_t *params)
{
	struct scheduler *s = control_scheduler(c, id);

	(void)params;
	if (s)
		control_reply_ok(c, id, scheduler_status(s));
}

static void control_cron_add(struct control_conn *c, const json_t *id, json_t *params)
{
	struct scheduler *s = control_scheduler(c, id);
	const json_t *job = json_object_get(params, "job");
	struct control_cron *op;
	char err[256];
	int rc;

	if (!s)
		return;
	if (!json_is_object(job)) {
		control_bad(c, id, "params.job is the job: {id, cron|every|at, payload, ...}");
		return;
	}
	if (!(op = control_cron_op(c, id)))
		return;
	rc = scheduler_cron_add(s, job, err, sizeof err, control_cron_done, op);
	if (rc) {
		control_cron_refused(c, id, rc, err);
		control_op_free(&op->base);
	}
}

static void control_cron_by_id(struct control_conn *c, const json_t *id, json_t *params, int which)
{
	struct scheduler *s = control_scheduler(c, id);
	const char *job = control_str(params, "id");
	int64_t limit = control_int(params, "limit", 20, 1000);
	struct control_cron *op;
	int rc;

	if (!s)
		return;
	if (which != 2 && !job) {
		control_bad(c, id, "params.id names the job");
		return;
	}
	if (limit < 0) {
		control_bad(c, id, "limit is a positive integer");
		return;
	}
	if (!(op = control_cron_op(c, id)))
		return;
	if (which == 0)
		rc = scheduler_cron_remove(s, job, control_cron_done, op);
	else if (which == 1)
		rc = scheduler_cron_run(s, job, control_cron_done, op);
	else
		rc = scheduler_cron_runs(s, job, (size_t)limit, control_cron_done, op);
	if (rc) {
		control_cron_refused(c, id, rc,
		                     rc == SB_ERR_EXISTS ? "a run of this job is going already"
		                                         : "a job declared in the config file is "
		                                           "removed by editing the file");
		control_op_free(&op->base);
	}
}

static void control_cron_remove(struct control_conn *c, const json_t *id, json_t *params)
{
	control_cron_by_id(c, id, params, 0);
}

static void control_cron_run(struct control_conn *c, const json_t *id, json_t *params)
{
	control_cron_by_id(c, id, params, 1);
}

static void control_cron_runs(struct control_conn *c, const json_t *id, json_t *params)
{
	control_cron_by_id(c, id, params, 2);
}

/* ---- approvals (gate 3: agents/safety/approvals.h) ---- */

static void control_approvals_list(struct control_conn *c, const json_t *id, json_t *params)
{
	json_t *list;

	(void)params;
	list = approvals_list_json(c->ctl->ctx.approvals);
	if (!list) {
		control_reply_error(c, id, CONTROL_E_INTERNAL, "out of memory", NULL, true, 0);
		return;
	}
	control_reply_ok(c, id, json_pack("{so}", "approvals", list));
}

static void control_approvals_answer(struct control_conn *c, const json_t *id, json_t *params,
                                     bool approve)
{
	const char *aid = control_str(params, "id");
	const char *scope = control_str(params, "scope");
	enum approval_answer ans = APPROVAL_DENY;
	char by[128];

	if (!aid) {
		control_bad(c, id, "id is required");
		return;
	}
	if (approve) {
		if (!scope || strcmp(scope, "once") == 0)
			ans = APPROVAL_ONCE;
		else if (strcmp(scope, "session") == 0)
			ans = APPROVAL_SESSION;
		else if (strcmp(scope, "agent") == 0)
			ans = APPROVAL_AGENT;
		else {
			control_bad(c, id, "scope must be once, session or agent");
			return;
		}
	}
	snprintf(by, sizeof by, "%s%s", *c->device_id ? "device:" : "client:",
	         *c->device_id ? c->device_id : c->client_id);
	if (approvals_resolve(c->ctl->ctx.approvals, aid, ans, by) != SB_OK) {
		control_reply_error(c, id, CONTROL_E_NOT_FOUND,
		                    "no pending approval with that id (answered, timed out, or "
		                    "ambiguous)",
		                    NULL, false, 0);
		return;
	}
	control_reply_ok(c, id,
	                 json_pack("{ss ss}", "id", aid, "decision",
	                           !approve                  ? "denied"
	                           : ans == APPROVAL_SESSION ? "approved-session"
	                           : ans == APPROVAL_AGENT   ? "approved-agent"
	                                                     : "approved-once"));
}

static void control_approvals_approve(struct control_conn *c, const json_t *id, json_t *params)
{
	control_approvals_answer(c, id, params, true);
}

static void control_approvals_deny(struct control_conn *c, const json_t *id, json_t *params)
{
	control_approvals_answer(c, id, params, false);
}

const struct control_method control_methods[] = {
    {"health", CONTROL_SCOPE_READ, control_health},
    {"status", CONTROL_SCOPE_READ, control_status},
    {"agents.list", CONTROL_SCOPE_READ, control_agents_list},
    {"approvals.approve", CONTROL_SCOPE_ADMIN, control_approvals_approve},
    {"approvals.deny", CONTROL_SCOPE_ADMIN, control_approvals_deny},
    {"approvals.list", CONTROL_SCOPE_ADMIN, control_approvals_list},
    {"bindings.explain", CONTROL_SCOPE_READ, control_bindings_explain},
    {"bindings.list", CONTROL_SCOPE_READ, control_bindings_list},
    {"channels.status", CONTROL_SCOPE_READ, control_channels_status},
    {"sessions.list", CONTROL_SCOPE_READ, control_sessions_list},
    {"sessions.get", CONTROL_SCOPE_READ, control_sessions_get},
    {"sessions.subscribe", CONTROL_SCOPE_READ, control_sessions_subscribe},
    {"sessions.unsubscribe", CONTROL_SCOPE_READ, control_sessions_unsubscribe},
    {"chat.history", CONTROL_SCOPE_READ, control_chat_history},
    {"chat.send", CONTROL_SCOPE_WRITE, control_chat_send},
    {"chat.abort", CONTROL_SCOPE_WRITE, control_chat_abort},
    {"agent", CONTROL_SCOPE_WRITE, control_agent},
    {"agent.prompt", CONTROL_SCOPE_ADMIN, control_agent_prompt},
    {"config.get", CONTROL_SCOPE_ADMIN, control_config_get},
    {"devices.list", CONTROL_SCOPE_ADMIN, control_devices_list},
    {"devices.approve", CONTROL_SCOPE_ADMIN, control_devices_approve},
    {"devices.revoke", CONTROL_SCOPE_ADMIN, control_devices_revoke},
    {"cron.list", CONTROL_SCOPE_READ, control_cron_list},
    {"cron.status", CONTROL_SCOPE_READ, control_cron_status},
    {"cron.runs", CONTROL_SCOPE_READ, control_cron_runs},
    {"cron.add", CONTROL_SCOPE_ADMIN, control_cron_add},
    {"cron.remove", CONTROL_SCOPE_ADMIN, control_cron_remove},
    {"cron.run", CONTROL_SCOPE_WRITE, control_cron_run},
    {NULL, 0, NULL},
};

const struct control_method *control_method_find(const char *name)
{
	for (size_t i = 0; control_methods[i].name; i++)
		if (strcmp(control_methods[i].name, name) == 0)
			return &control_methods[i];
	for (size_t i = 0; control_ops_methods[i].name; i++)
		if (strcmp(control_ops_methods[i].name, name) == 0)
			return &control_ops_methods[i];
	return NULL;
}
