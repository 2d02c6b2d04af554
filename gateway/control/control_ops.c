/*
 * control_ops.c - the control plane's methods for operating the gateway
 * from a page or a script (docs/protocol.md "Methods for the operator's
 * pages"): sign-in codes for `switchboard dashboard`, channel pairing,
 * transcripts with their provenance, workspace history, metrics, the log
 * tail, the configuration file's state, cron enable/disable and heartbeats
 * run now. The web UI (gateway/ui/) uses nothing else, so everything it
 * shows is scriptable.
 *
 * Same pattern as control_methods.c: validate, answer at once or start a
 * struct control_op (store operation, thread-pool work) whose callback
 * answers if the client is still there.
 */
#include "gateway/control/control_internal.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agents/transcript.h"
#include "gateway/core/clock.h"
#include "gateway/core/err.h"
#include "gateway/core/log.h"
#include "gateway/http/origin.h"
#include "gateway/obs/metrics.h"
#include "gateway/sched/scheduler.h"
#include "gateway/store/store.h"
#include "workspaces/history.h"

#define OPS_TRANSCRIPT_DEFAULT 500
#define OPS_TRANSCRIPT_MAX 5000
#define OPS_TEXT_MAX 4096                      /* a tool result or text block in a transcript view */
#define OPS_FILE_MAX ((size_t)256 << 10)       /* workspace.file text */
#define OPS_DIFF_MAX ((size_t)512 << 10)       /* workspace.diff patches in all */
#define OPS_LOG_LINES_DEFAULT 200

/* ---- helpers ---- */

static const char *ops_str(const json_t *params, const char *key)
{
	return json_string_value(json_object_get(params, key));
}

static void ops_bad(struct control_conn *c, const json_t *id, const char *msg)
{
	control_reply_error(c, id, CONTROL_E_INVALID, msg, NULL, false, 0);
}

static void ops_nomem(struct control_conn *c, const json_t *id)
{
	control_reply_error(c, id, CONTROL_E_INTERNAL, "out of memory", NULL, false, 0);
}

static void ops_store_busy(struct control_conn *c, const json_t *id, int rc)
{
	control_reply_error(c, id, CONTROL_E_UNAVAILABLE,
	                    rc == SB_ERR_AGAIN ? "the store is busy; try again"
	                                       : "the store failed; try again",
	                    NULL, true, rc == SB_ERR_AGAIN ? 1000 : 0);
}

/* An optional integer in [1, max]; def when absent; -1 when bad. */
static int64_t ops_int(const json_t *params, const char *key, int64_t def, int64_t max)
{
	const json_t *v = json_object_get(params, key);

	if (!v || json_is_null(v))
		return def;
	if (!json_is_integer(v) || json_integer_value(v) < 1)
		return -1;
	return json_integer_value(v) > max ? max : json_integer_value(v);
}

/* A plain op with a fixed-size id field. */
struct ops_op {
	struct control_op base;
	char what[160];
};

static struct ops_op *ops_op_new(struct control_conn *c, const json_t *id)
{
	struct ops_op *op = calloc(1, sizeof *op);

	if (!op) {
		ops_nomem(c, id);
		return NULL;
	}
	control_op_start(&op->base, c, id);
	return op;
}

/* ---- dashboard.code ---- */

static void ops_dashboard_code(struct control_conn *c, const json_t *id, json_t *params)
{
	struct config *cfg = c->ctl->ctx.host->config(c->ctl->ctx.host->ctx);
	char code[64], origin[300], url[400];
	int64_t expires;

	(void)params;
	/* The browser gets what this connection has, never more. */
	if (control_web_code(c->ctl, c->scopes, code, sizeof code, &expires) != SB_OK) {
		config_unref(cfg);
		ops_nomem(c, id);
		return;
	}
	origin_default(cfg, c->ctl->port, origin, sizeof origin);
	snprintf(url, sizeof url, "%s/#code=%s", origin, code);
	log_info("control", "one-time sign-in code issued", LOG_S("conn", c->conn_id),
	         LOG_I("ttl_ms", cfg->gateway.ui.code_ttl_ms));
	control_reply_ok(c, id,
	                 json_pack("{ss ss ss sI sI}", "code", code, "url", url, "origin", origin,
	                           "expiresAt", (json_int_t)expires, "ttlMs",
	                           (json_int_t)cfg->gateway.ui.code_ttl_ms));
	config_unref(cfg);
}

/* ---- pairing (channel senders) ---- */

static json_t *ops_pairing_json(const struct store_pairing *p)
{
	return json_pack("{ss ss ss ss sI sI}", "channel", p->channel, "account", p->account,
	                 "senderId", p->sender_id, "code", p->code, "createdAt",
	                 (json_int_t)p->created_at, "expiresAt", (json_int_t)p->expires_at);
}

static void ops_pairing_listed(void *ud, int rc, const struct store_pairing *v, size_t n)
{
	struct ops_op *op = ud;
	json_t *list;

	if (!control_op_live(&op->base))
		goto out;
	if (rc) {
		ops_store_busy(op->base.conn, op->base.id, rc);
		goto out;
	}
	list = json_array();
	for (size_t i = 0; list && i < n; i++)
		json_array_append_new(list, ops_pairing_json(&v[i]));
	control_reply_ok(op->base.conn, op->base.id,
	                 json_pack("{so}", "pending", list ? list : json_array()));
out:
	control_op_free(&op->base);
}

static void ops_pairing_list(struct control_conn *c, const json_t *id, json_t *params)
{
	const char *channel = ops_str(params, "channel");
	struct ops_op *op = ops_op_new(c, id);
	int rc;

	if (!op)
		return;
	rc = store_pairing_list(c->ctl->ctx.store, channel && *channel ? channel
	                                                                                   : NULL,
	                                          ops_pairing_listed, op);
	if (rc) {
		ops_store_busy(c, id, rc);
		control_op_free(&op->base);
	}
}

static void ops_pairing_answered(void *ud, int rc, const struct store_pairing *p, bool created)
{
	struct ops_op *op = ud;
	json_t *out;

	(void)created;
	if (!control_op_live(&op->base))
		goto out;
	if (rc == SB_ERR_NOTFOUND) {
		control_reply_error(op->base.conn, op->base.id, CONTROL_E_NOT_FOUND,
		                    "no pending pairing request with that code on that channel "
		                    "(answered, expired, or mistyped)",
		                    NULL, false, 0);
		goto out;
	}
	if (rc || !p) {
		ops_store_busy(op->base.conn, op->base.id, rc);
		goto out;
	}
	log_info("control", op->what[0] == 'a' ? "pairing approved" : "pairing denied",
	         LOG_S("channel", p->channel), LOG_S("sender", p->sender_id),
	         LOG_S("by", op->base.conn->conn_id));
	out = ops_pairing_json(p);
	if (out)
		json_object_set_new(out, "decision",
		                    json_string(op->what[0] == 'a' ? "approved" : "denied"));
	control_reply_ok(op->base.conn, op->base.id, out);
out:
	control_op_free(&op->base);
}

static void ops_pairing_answer(struct control_conn *c, const json_t *id, json_t *params,
                               bool approve)
{
	const char *channel = ops_str(params, "channel"), *code = ops_str(params, "code");
	char upper[STORE_PAIRING_CODE_LEN + 1];
	struct ops_op *op;
	size_t n;
	int rc;

	if (!channel || !*channel || !code || (n = strlen(code)) != STORE_PAIRING_CODE_LEN) {
		ops_bad(c, id, "params: channel and code (the 8 characters the sender got)");
		return;
	}
	for (size_t i = 0; i <= n; i++)
		upper[i] = (char)(code[i] >= 'a' && code[i] <= 'z' ? code[i] - 32 : code[i]);
	if (!(op = ops_op_new(c, id)))
		return;
	snprintf(op->what, sizeof op->what, "%s", approve ? "approve" : "deny");
	rc = approve ? store_pairing_approve(c->ctl->ctx.store, channel, upper,
	                                                       ops_pairing_answered, op)
	             : store_pairing_deny(c->ctl->ctx.store, channel, upper,
	                                                    ops_pairing_answered, op);
	if (rc) {
		ops_store_busy(c, id, rc);
		control_op_free(&op->base);
	}
}

static void ops_pairing_approve(struct control_conn *c, const json_t *id, json_t *params)
{
	ops_pairing_answer(c, id, params, true);
}

static void ops_pairing_deny(struct control_conn *c, const json_t *id, json_t *params)
{
	ops_pairing_answer(c, id, params, false);
}

static void ops_allow_listed(void *ud, int rc, const struct store_allow_entry *v, size_t n)
{
	struct ops_op *op = ud;
	json_t *list;

	if (!control_op_live(&op->base))
		goto out;
	if (rc) {
		ops_store_busy(op->base.conn, op->base.id, rc);
		goto out;
	}
	list = json_array();
	for (size_t i = 0; list && i < n; i++)
		json_array_append_new(list, json_pack("{ss ss ss sI}", "channel", v[i].channel,
		                                      "account", v[i].account, "senderId",
		                                      v[i].sender_id, "approvedAt",
		                                      (json_int_t)v[i].approved_at));
	control_reply_ok(op->base.conn, op->base.id,
	                 json_pack("{so}", "approved", list ? list : json_array()));
out:
	control_op_free(&op->base);
}

static void ops_pairing_approved(struct control_conn *c, const json_t *id, json_t *params)
{
	const char *channel = ops_str(params, "channel");
	struct ops_op *op = ops_op_new(c, id);
	int rc;

	if (!op)
		return;
	rc = store_allow_list(c->ctl->ctx.store, channel && *channel ? channel : NULL,
	                                        ops_allow_listed, op);
	if (rc) {
		ops_store_busy(c, id, rc);
		control_op_free(&op->base);
	}
}

static void ops_allow_removed(void *ud, int rc)
{
	struct ops_op *op = ud;

	if (!control_op_live(&op->base))
		goto out;
	if (rc == SB_ERR_NOTFOUND)
		control_reply_error(op->base.conn, op->base.id, CONTROL_E_NOT_FOUND,
		                    "that sender is not approved on that channel", NULL, false, 0);
	else if (rc)
		ops_store_busy(op->base.conn, op->base.id, rc);
	else
		control_reply_ok(op->base.conn, op->base.id, json_pack("{sb}", "revoked", 1));
out:
	control_op_free(&op->base);
}

static void ops_pairing_revoke(struct control_conn *c, const json_t *id, json_t *params)
{
	const char *channel = ops_str(params, "channel"), *sender = ops_str(params, "senderId");
	const char *account = ops_str(params, "account");
	struct ops_op *op;
	int rc;

	if (!channel || !*channel || !sender || !*sender) {
		ops_bad(c, id, "params: channel and senderId (account optional)");
		return;
	}
	if (!(op = ops_op_new(c, id)))
		return;
	rc = store_allow_remove(c->ctl->ctx.store, channel,
	                                          account && *account ? account : NULL, sender,
	                                          ops_allow_removed, op);
	if (rc) {
		ops_store_busy(c, id, rc);
		control_op_free(&op->base);
	}
}

/* ---- work on the thread pool ---- */

/* An op whose work runs on the thread pool and serialises its answer. */
struct ops_work {
	struct control_op base;
	uv_work_t work;
	void (*run)(struct ops_work *w);
	int rc;
	char *answer; /* JSON text, built on the pool */
	const char *what; /* for the error message */
	/* inputs */
	char dir[PATH_MAX];
	char path[PATH_MAX];
	char rev_a[64], rev_b[64];
	char key[CONTROL_KEY_MAX];
	char agent[65];
	char session_id[64];
	size_t limit;
	bool has_path;
	char *cfg_path, *home;
};

static void ops_work_release(struct control_op *op)
{
	struct ops_work *w = (struct ops_work *)op;

	free(w->answer);
	free(w->cfg_path);
	free(w->home);
	free(w);
}

static void ops_work_run(uv_work_t *req)
{
	struct ops_work *w = req->data;

	w->run(w);
}

static void ops_work_done(uv_work_t *req, int status)
{
	struct ops_work *w = req->data;

	if (!control_op_live(&w->base))
		goto out;
	if (status != 0)
		w->rc = SB_ERR_IO;
	if (w->rc == SB_OK && w->answer)
		control_reply_raw(w->base.conn, w->base.id, w->answer);
	else if (w->rc == SB_ERR_NOTFOUND)
		control_reply_error(w->base.conn, w->base.id, CONTROL_E_NOT_FOUND, w->what, NULL,
		                    false, 0);
	else if (w->rc == SB_ERR_INVAL)
		ops_bad(w->base.conn, w->base.id, w->what);
	else
		control_reply_error(w->base.conn, w->base.id, CONTROL_E_UNAVAILABLE,
		                    sb_strerror(w->rc ? w->rc : SB_ERR_NOMEM), NULL, true, 0);
out:
	control_op_free(&w->base);
}

static struct ops_work *ops_work_new(struct control_conn *c, const json_t *id,
                                     void (*run)(struct ops_work *w), const char *what)
{
	struct ops_work *w = calloc(1, sizeof *w);

	if (!w) {
		ops_nomem(c, id);
		return NULL;
	}
	w->run = run;
	w->what = what;
	w->base.release = ops_work_release;
	return w;
}

/* Starts w (registers the op and queues the work); answers on failure. */
static void ops_work_queue(struct control_conn *c, const json_t *id, struct ops_work *w)
{
	control_op_start(&w->base, c, id);
	w->work.data = w;
	if (uv_queue_work(c->ctl->ctx.loop, &w->work, ops_work_run, ops_work_done) != 0) {
		control_reply_error(c, id, CONTROL_E_UNAVAILABLE, "cannot queue the work", NULL, true,
		                    0);
		control_op_free(&w->base);
	}
}

/* Sets w->answer from out (taken). */
static void ops_work_answer(struct ops_work *w, int rc, json_t *out)
{
	w->rc = rc;
	if (rc == SB_OK) {
		w->answer = out ? json_dumps(out, JSON_COMPACT) : NULL;
		if (!w->answer)
			w->rc = SB_ERR_NOMEM;
	}
	json_decref(out);
}

/* ---- sessions.transcript ---- */

/* Cuts the long texts of a transcript entry for the viewer (in place). */
static void ops_trim_blocks(json_t *content)
{
	size_t i;
	json_t *b;

	json_array_foreach(content, i, b)
	{
		const char *type = json_string_value(json_object_get(b, "type"));
		const char *field = type && strcmp(type, "tool_result") == 0 ? "content" : "text";
		json_t *v = json_object_get(b, field);

		if (json_is_string(v) && json_string_length(v) > OPS_TEXT_MAX) {
			const char *s = json_string_value(v);
			size_t n = OPS_TEXT_MAX;

			while (n && ((unsigned char)s[n] & 0xC0) == 0x80)
				n--;
			json_object_set_new(b, field, json_stringn(s, n));
			json_object_set_new(b, "cut", json_integer((json_int_t)json_string_length(v)));
		}
	}
}

static void ops_transcript_run(struct ops_work *w)
{
	struct transcript_loaded tl;
	json_t *entries = json_array(), *e, *out = NULL;
	size_t i, n, skip;
	int rc;

	memset(&tl, 0, sizeof tl);
	rc = transcript_load(w->path, &tl);
	if (rc || !entries)
		goto out;
	n = json_array_size(tl.entries);
	skip = n > w->limit ? n - w->limit : 0;
	json_array_foreach(tl.entries, i, e)
	{
		json_t *copy;

		if (i < skip)
			continue;
		copy = json_deep_copy(e);
		if (!copy)
			continue;
		ops_trim_blocks(json_object_get(json_object_get(copy, "message"), "content"));
		json_array_append_new(entries, copy);
	}
	out = json_pack("{ss ss ss sI sb sO? so}", "sessionKey", w->key, "agentId", w->agent,
	                "sessionId", w->session_id, "total", (json_int_t)n, "truncated", skip > 0,
	                "header", tl.header, "entries", entries);
	entries = NULL;
	rc = out ? SB_OK : SB_ERR_NOMEM;
out:
	json_decref(entries);
	transcript_loaded_free(&tl);
	ops_work_answer(w, rc, out);
}

static bool ops_session_id_ok(const char *s)
{
	size_t n = s ? strlen(s) : 0;

	return n >= 1 && n < 64 && strspn(s, "0123456789abcdefghijklmnopqrstuvwxyz") == n;
}

static void ops_transcript_found(void *ud, int rc, const struct store_session *s)
{
	struct ops_work *w = ud;
	struct control *ctl = w->base.ctl;

	if (!control_op_live(&w->base)) {
		control_op_free(&w->base);
		return;
	}
	if (rc == SB_ERR_NOTFOUND) {
		control_reply_error(w->base.conn, w->base.id, CONTROL_E_NOT_FOUND, "no such session",
		                    json_pack("{ss}", "sessionKey", w->key), false, 0);
		control_op_free(&w->base);
		return;
	}
	if (rc) {
		ops_store_busy(w->base.conn, w->base.id, rc);
		control_op_free(&w->base);
		return;
	}
	if (!*w->session_id)
		snprintf(w->session_id, sizeof w->session_id, "%s", s->session_id);
	if (!ops_session_id_ok(w->session_id) || strchr(s->agent_id, '/') ||
	    snprintf(w->path, sizeof w->path, "%s/agents/%s/sessions/%s.jsonl", ctl->ctx.home,
	             s->agent_id, w->session_id) >= (int)sizeof w->path) {
		control_reply_error(w->base.conn, w->base.id, CONTROL_E_INTERNAL,
		                    "the session's transcript path is not valid", NULL, false, 0);
		control_op_free(&w->base);
		return;
	}
	w->work.data = w;
	if (uv_queue_work(ctl->ctx.loop, &w->work, ops_work_run, ops_work_done) != 0) {
		control_reply_error(w->base.conn, w->base.id, CONTROL_E_UNAVAILABLE,
		                    "cannot queue the read", NULL, true, 0);
		control_op_free(&w->base);
	}
}

static void ops_sessions_transcript(struct control_conn *c, const json_t *id, json_t *params)
{
	const char *name = ops_str(params, "sessionKey"), *sid = ops_str(params, "sessionId");
	int64_t limit = ops_int(params, "limit", OPS_TRANSCRIPT_DEFAULT, OPS_TRANSCRIPT_MAX);
	struct config *cfg;
	struct ops_work *w;
	int rc;

	if (limit < 0) {
		ops_bad(c, id, "limit is a positive integer");
		return;
	}
	if (sid && !ops_session_id_ok(sid)) {
		ops_bad(c, id, "sessionId is a transcript id (lower-case letters and digits)");
		return;
	}
	if (!(w = ops_work_new(c, id, ops_transcript_run, "no transcript for that session yet")))
		return;
	cfg = c->ctl->ctx.host->config(c->ctl->ctx.host->ctx);
	rc = control_session_key(cfg, name ? name : ops_str(params, "key"), w->key, sizeof w->key,
	                         w->agent, sizeof w->agent);
	config_unref(cfg);
	if (rc) {
		ops_bad(c, id, rc == SB_ERR_NOTFOUND ? "the session key names no configured agent"
		                                     : "sessionKey is not a valid session key");
		ops_work_release(&w->base);
		return;
	}
	if (sid)
		snprintf(w->session_id, sizeof w->session_id, "%s", sid);
	w->limit = (size_t)limit;
	control_op_start(&w->base, c, id);
	rc = store_session_get(c->ctl->ctx.store, w->key, ops_transcript_found, w);
	if (rc) {
		ops_store_busy(c, id, rc);
		control_op_free(&w->base);
	}
}

/* ---- workspace.* ---- */

static void ops_ws_log_run(struct ops_work *w)
{
	json_t *out = NULL;
	int rc = workspace_git_log(w->dir, w->has_path ? w->path : NULL, w->limit, &out);

	if (rc == SB_OK)
		json_object_set_new(out, "agentId", json_string(w->agent));
	ops_work_answer(w, rc, out);
}

static void ops_ws_files_run(struct ops_work *w)
{
	json_t *out = NULL;
	int rc = workspace_git_files(w->dir, *w->rev_a ? w->rev_a : NULL, &out);

	if (rc == SB_OK)
		json_object_set_new(out, "agentId", json_string(w->agent));
	ops_work_answer(w, rc, out);
}

static void ops_ws_file_run(struct ops_work *w)
{
	json_t *out = NULL;
	int rc = workspace_git_show(w->dir, *w->rev_a ? w->rev_a : NULL, w->path, OPS_FILE_MAX, &out);

	ops_work_answer(w, rc, out);
}

static void ops_ws_diff_run(struct ops_work *w)
{
	json_t *out = NULL;
	int rc = workspace_git_diff(w->dir, w->rev_a, *w->rev_b ? w->rev_b : NULL,
	                            w->has_path ? w->path : NULL, OPS_DIFF_MAX, &out);

	ops_work_answer(w, rc, out);
}

/* The agent's workspace into w->dir; answers and returns false when the
 * agent is unknown. */
static bool ops_ws_agent(struct control_conn *c, const json_t *id, const json_t *params,
                         struct ops_work *w)
{
	struct config *cfg = c->ctl->ctx.host->config(c->ctl->ctx.host->ctx);
	const char *agent = ops_str(params, "agentId");
	const struct agent_config *a = agent ? config_agent(cfg, agent) : config_default_agent(cfg);
	bool ok = a && a->workspace && strlen(a->workspace) < sizeof w->dir;

	if (ok) {
		snprintf(w->dir, sizeof w->dir, "%s", a->workspace);
		snprintf(w->agent, sizeof w->agent, "%s", a->id);
	}
	config_unref(cfg);
	if (!ok)
		control_reply_error(c, id, CONTROL_E_INVALID, "agentId names no configured agent",
		                    json_pack("{ss}", "code", "UNKNOWN_AGENT"), false, 0);
	return ok;
}

static bool ops_copy(char *dst, size_t size, const char *src)
{
	return src && snprintf(dst, size, "%s", src) < (int)size;
}

static void ops_workspace(struct control_conn *c, const json_t *id, json_t *params, int which)
{
	static void (*const runs[])(struct ops_work *) = {ops_ws_log_run, ops_ws_files_run,
	                                                   ops_ws_file_run, ops_ws_diff_run};
	static const char *const nf[] = {
	    "the workspace is not a git repository",
	    "no such version (or the workspace is not a git repository)",
	    "no such file at that version",
	    "no such version (or the workspace is not a git repository)",
	};
	const char *path = ops_str(params, "path");
	const char *rev = ops_str(params, which == 3 ? "from" : "rev");
	const char *to = ops_str(params, "to");
	int64_t limit = ops_int(params, "limit", 50, 1000);
	struct ops_work *w;

	if (limit < 0) {
		ops_bad(c, id, "limit is a positive integer");
		return;
	}
	if ((which == 2 && !path) || (which == 3 && !rev)) {
		ops_bad(c, id, which == 2 ? "params.path names the file" : "params.from is a version");
		return;
	}
	if (!(w = ops_work_new(c, id, runs[which], nf[which])))
		return;
	if (!ops_ws_agent(c, id, params, w) || (path && !ops_copy(w->path, sizeof w->path, path)) ||
	    (rev && !ops_copy(w->rev_a, sizeof w->rev_a, rev)) ||
	    (to && !ops_copy(w->rev_b, sizeof w->rev_b, to))) {
		if (*w->agent)
			ops_bad(c, id, "a param is too long");
		ops_work_release(&w->base);
		return;
	}
	w->has_path = path != NULL;
	w->limit = (size_t)limit;
	ops_work_queue(c, id, w);
}

static void ops_workspace_log(struct control_conn *c, const json_t *id, json_t *params)
{
	ops_workspace(c, id, params, 0);
}

static void ops_workspace_files(struct control_conn *c, const json_t *id, json_t *params)
{
	ops_workspace(c, id, params, 1);
}

static void ops_workspace_file(struct control_conn *c, const json_t *id, json_t *params)
{
	ops_workspace(c, id, params, 2);
}

static void ops_workspace_diff(struct control_conn *c, const json_t *id, json_t *params)
{
	ops_workspace(c, id, params, 3);
}

/* ---- metrics.get, logs.tail ---- */

/* Resident memory in bytes (/proc/self/statm); 0 when unknown. */
static int64_t ops_rss(void)
{
	FILE *f = fopen("/proc/self/statm", "re");
	long long size = 0, rss = 0;

	if (!f)
		return 0;
	if (fscanf(f, "%lld %lld", &size, &rss) != 2)
		rss = 0;
	fclose(f);
	return rss * (int64_t)sysconf(_SC_PAGESIZE);
}

static void ops_metrics_get(struct control_conn *c, const json_t *id, json_t *params)
{
	json_t *m = c->ctl->ctx.metrics ? metrics_json(c->ctl->ctx.metrics) : json_object();

	(void)params;
	if (!m) {
		ops_nomem(c, id);
		return;
	}
	json_object_set_new(m, "ts", json_integer(clock_wall_ms()));
	json_object_set_new(m, "uptimeMs", json_integer((json_int_t)control_uptime_ms(c->ctl)));
	json_object_set_new(m, "version", json_string(SB_VERSION));
	json_object_set_new(m, "rssBytes", json_integer(ops_rss()));
	json_object_set_new(m, "controlConnections", json_integer((json_int_t)c->ctl->n_conns));
	control_reply_ok(c, id, m);
}

static void ops_log_line(void *ud, uint64_t seq, const char *line)
{
	json_t *lines = ud;

	json_array_append_new(lines, json_pack("{sI ss}", "seq", (json_int_t)seq, "line", line));
}

static void ops_logs_tail(struct control_conn *c, const json_t *id, json_t *params)
{
	const json_t *after = json_object_get(params, "after");
	int64_t limit = ops_int(params, "limit", OPS_LOG_LINES_DEFAULT, LOG_RING_LINES);
	json_t *lines = json_array();
	uint64_t last;

	if (limit < 0 || (after && !json_is_null(after) &&
	                  (!json_is_integer(after) || json_integer_value(after) < 0))) {
		json_decref(lines);
		ops_bad(c, id, "after is a line number (0 or more), limit a positive integer");
		return;
	}
	if (!lines) {
		ops_nomem(c, id);
		return;
	}
	/* The lines are copied under the log's lock, so nothing may log here. */
	last = log_ring_read(json_is_integer(after) ? (uint64_t)json_integer_value(after) : 0,
	                     (size_t)limit, ops_log_line, lines);
	control_reply_ok(c, id,
	                 json_pack("{so sI sI}", "lines", lines, "last", (json_int_t)last, "kept",
	                           (json_int_t)LOG_RING_LINES));
}

/* ---- config.status ---- */

static void ops_config_status_run(struct ops_work *w)
{
	struct config *next = NULL;
	struct cfg_errors errs;
	json_t *list = json_array(), *out;
	int rc;

	memset(&errs, 0, sizeof errs);
	rc = config_load(w->cfg_path, w->home, &next, &errs);
	for (size_t i = 0; list && i < errs.n; i++) {
		const struct cfg_error *e = &errs.v[i];

		json_array_append_new(list, json_pack("{ss? si si ss? ss? ss?}", "file", e->file, "line",
		                                      e->line, "col", e->col, "key", e->path, "message",
		                                      e->msg, "hint", e->hint));
	}
	out = json_pack("{ss sb so}", "path", w->cfg_path, "valid", rc == SB_OK, "errors",
	                list ? list : json_array());
	if (out && rc != SB_OK && !errs.n)
		json_object_set_new(out, "error", json_string(sb_strerror(rc)));
	config_unref(next);
	cfg_errors_free(&errs);
	ops_work_answer(w, out ? SB_OK : SB_ERR_NOMEM, out);
}

static void ops_config_status(struct control_conn *c, const json_t *id, json_t *params)
{
	struct config *cfg = c->ctl->ctx.host->config(c->ctl->ctx.host->ctx);
	struct ops_work *w;

	(void)params;
	if (!(w = ops_work_new(c, id, ops_config_status_run, "no configuration file"))) {
		config_unref(cfg);
		return;
	}
	w->cfg_path = cfg->path ? strdup(cfg->path) : NULL;
	w->home = strdup(c->ctl->ctx.home);
	config_unref(cfg);
	if (!w->cfg_path || !w->home) {
		ops_nomem(c, id);
		ops_work_release(&w->base);
		return;
	}
	ops_work_queue(c, id, w);
}

/* ---- cron.enable, heartbeat.run ---- */

static void ops_cron_done(void *ud, int rc, const char *error, const json_t *result)
{
	struct ops_op *op = ud;

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

static void ops_cron_enable(struct control_conn *c, const json_t *id, json_t *params)
{
	struct scheduler *s = c->ctl->ctx.scheduler;
	const char *job = ops_str(params, "id");
	const json_t *enabled = json_object_get(params, "enabled");
	json_t *jobs, *spec = NULL, *j;
	struct ops_op *op;
	char err[256];
	size_t i;
	int rc;

	if (!s) {
		control_reply_error(c, id, CONTROL_E_UNAVAILABLE, "the scheduler is not running", NULL,
		                    false, 0);
		return;
	}
	if (!job || !json_is_boolean(enabled)) {
		ops_bad(c, id, "params: id (the job) and enabled (true or false)");
		return;
	}
	jobs = scheduler_cron_list(s);
	json_array_foreach(jobs, i, j)
	{
		if (json_is_string(json_object_get(j, "id")) &&
		    strcmp(json_string_value(json_object_get(j, "id")), job) == 0) {
			spec = json_deep_copy(j);
			break;
		}
	}
	json_decref(jobs);
	if (!spec) {
		control_reply_error(c, id, CONTROL_E_NOT_FOUND, "no such cron job", NULL, false, 0);
		return;
	}
	if (json_is_string(json_object_get(spec, "source")) &&
	    strcmp(json_string_value(json_object_get(spec, "source")), "config") == 0) {
		json_decref(spec);
		ops_bad(c, id, "this job is declared in the configuration file: set its enabled "
		               "there (the file stays the one source of truth)");
		return;
	}
	json_object_del(spec, "source");
	json_object_del(spec, "state");
	json_object_set(spec, "enabled", (json_t *)enabled);
	if (!(op = ops_op_new(c, id))) {
		json_decref(spec);
		return;
	}
	rc = scheduler_cron_add(s, spec, err, sizeof err, ops_cron_done, op);
	json_decref(spec);
	if (rc) {
		if (rc == SB_ERR_INVAL || rc == SB_ERR_EXISTS)
			ops_bad(c, id, err);
		else
			ops_store_busy(c, id, rc);
		control_op_free(&op->base);
	}
}

static void ops_heartbeat_run(struct control_conn *c, const json_t *id, json_t *params)
{
	struct scheduler *s = c->ctl->ctx.scheduler;
	const char *agent = ops_str(params, "agentId");
	int rc;

	if (!s) {
		control_reply_error(c, id, CONTROL_E_UNAVAILABLE, "the scheduler is not running", NULL,
		                    false, 0);
		return;
	}
	if (!agent || !*agent) {
		ops_bad(c, id, "params.agentId names the agent");
		return;
	}
	rc = scheduler_heartbeat_run(s, agent);
	if (rc == SB_ERR_NOTFOUND)
		control_reply_error(c, id, CONTROL_E_NOT_FOUND, "that agent has no heartbeat", NULL,
		                    false, 0);
	else if (rc == SB_ERR_EXISTS)
		control_reply_error(c, id, CONTROL_E_UNAVAILABLE, "a heartbeat of that agent is running",
		                    NULL, true, 5000);
	else if (rc)
		ops_store_busy(c, id, rc);
	else
		control_reply_ok(c, id, json_pack("{ss sb}", "agentId", agent, "started", 1));
}

const struct control_method control_ops_methods[] = {
    {"dashboard.code", CONTROL_SCOPE_ADMIN, ops_dashboard_code},
    {"pairing.list", CONTROL_SCOPE_ADMIN, ops_pairing_list},
    {"pairing.approve", CONTROL_SCOPE_ADMIN, ops_pairing_approve},
    {"pairing.deny", CONTROL_SCOPE_ADMIN, ops_pairing_deny},
    {"pairing.approved", CONTROL_SCOPE_ADMIN, ops_pairing_approved},
    {"pairing.revoke", CONTROL_SCOPE_ADMIN, ops_pairing_revoke},
    {"sessions.transcript", CONTROL_SCOPE_READ, ops_sessions_transcript},
    {"workspace.log", CONTROL_SCOPE_READ, ops_workspace_log},
    {"workspace.files", CONTROL_SCOPE_READ, ops_workspace_files},
    {"workspace.file", CONTROL_SCOPE_ADMIN, ops_workspace_file},
    {"workspace.diff", CONTROL_SCOPE_ADMIN, ops_workspace_diff},
    {"metrics.get", CONTROL_SCOPE_READ, ops_metrics_get},
    {"logs.tail", CONTROL_SCOPE_ADMIN, ops_logs_tail},
    {"config.status", CONTROL_SCOPE_ADMIN, ops_config_status},
    {"cron.enable", CONTROL_SCOPE_ADMIN, ops_cron_enable},
    {"heartbeat.run", CONTROL_SCOPE_WRITE, ops_heartbeat_run},
    {NULL, 0, NULL},
};
