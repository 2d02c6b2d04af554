/*
 * scheduler.c - see scheduler.h.
 *
 * Objects: one struct sched_hb per agent (rebuilt on reload, keeping the
 * status of agents that stay), a list of struct sched_job (loaded from the
 * store, kept in step with it), one timer. Asynchronous steps (store
 * operations, the thread-pool read of HEARTBEAT.md, ingests) hold a
 * reference on the scheduler; it is freed when the last one is dropped
 * after scheduler_free.
 */
#include "gateway/sched/scheduler.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gateway/config/config.h"
#include "gateway/core/beneath.h"
#include "gateway/core/clock.h"
#include "gateway/core/crash.h"
#include "gateway/core/err.h"
#include "gateway/core/fmt.h"
#include "gateway/core/jsonw.h"
#include "gateway/core/log.h"
#include "gateway/core/num.h"
#include "gateway/cron/cron.h"
#include "gateway/cron/scheduler_rules.h"

#define SCHED_HB_NS "heartbeat"
#define SCHED_ROUTE_NS "last_route"
#define SCHED_HB_FILE_MAX (256u << 10)
/* A tick that finds the session busy comes back this much later. */
#define SCHED_DEFER_MS 30000
#define SCHED_DETAIL_MAX 200

struct sched_hb {
	char *agent_id;
	int64_t every_ms;
	int64_t next_due; /* 0 = disabled */
	int64_t last_at;
	char last_status[32];
	char *last_detail;
	bool inflight; /* reading HEARTBEAT.md, or its run is in the inbox */
	char *route;   /* the agent's last route (JSON), for target "last" */
};

struct sched_job {
	struct cron_spec spec;
	struct cron_state st;
	char *spec_json;
	char source[8]; /* "config" or "api" */
	int64_t created_at;
	bool inflight;
	int64_t run_scheduled; /* the due time of the run in flight */
	int64_t run_started;
	char last_status[16];
	char *last_error;
	struct sched_job *next;
};

struct scheduler {
	struct scheduler_options opt;
	int refs;
	bool started, stopped, freed;
	uv_timer_t *timer;
	struct sched_hb *hbs;
	size_t n_hbs;
	struct sched_job *jobs;
	int64_t clock_base_ms; /* scheduler time at clock_real_ms */
	uint64_t clock_real_ms;
	int64_t clock_rate;
};

static void sched_arm(struct scheduler *s);

/* ---- lifetime ---- */

static void sched_job_free(struct sched_job *j)
{
	if (!j)
		return;
	cron_spec_release(&j->spec);
	free(j->spec_json);
	free(j->last_error);
	free(j);
}

static void sched_hbs_free(struct sched_hb *v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(v[i].agent_id);
		free(v[i].last_detail);
		free(v[i].route);
	}
	free(v);
}

static void sched_timer_closed(uv_handle_t *h)
{
	free(h);
}

static void sched_unref(struct scheduler *s)
{
	if (--s->refs > 0)
		return;
	while (s->jobs) {
		struct sched_job *j = s->jobs;

		s->jobs = j->next;
		sched_job_free(j);
	}
	sched_hbs_free(s->hbs, s->n_hbs);
	free(s);
}

/* ---- the clock ---- */

int64_t scheduler_now_ms(const struct scheduler *s)
{
	uint64_t real = uv_hrtime() / 1000000;

	return s->clock_base_ms + (int64_t)(real - s->clock_real_ms) * s->clock_rate;
}

static void sched_clock_init(struct scheduler *s)
{
	const char *now = getenv("SWITCHBOARD_TEST_NOW"),
	           *rate = getenv("SWITCHBOARD_TEST_CLOCK_RATE");
	int64_t v;

	s->clock_real_ms = uv_hrtime() / 1000000;
	s->clock_base_ms = clock_wall_ms();
	s->clock_rate = 1;
	if (now && *now && cron_parse_time(now, NULL, &v) == SB_OK) {
		s->clock_base_ms = v;
		log_warn("scheduler", "test clock in use (SWITCHBOARD_TEST_NOW)",
		         LOG_S("now", now));
	}
	if (rate && *rate && num_parse_i64(rate, 1, 100000, &v) == SB_OK) {
		s->clock_rate = v;
		log_warn("scheduler", "test clock rate in use (SWITCHBOARD_TEST_CLOCK_RATE)",
		         LOG_I("rate", v));
	}
}

/* ---- small helpers ---- */

static struct config *sched_config(struct scheduler *s)
{
	return s->opt.host->config(s->opt.host->ctx);
}

static void sched_set_str(char **dst, const char *src)
{
	free(*dst);
	*dst = src ? strndup(src, SCHED_DETAIL_MAX) : NULL;
}

static struct sched_hb *sched_hb_find(struct scheduler *s, const char *agent_id)
{
	for (size_t i = 0; agent_id && i < s->n_hbs; i++)
		if (strcmp(s->hbs[i].agent_id, agent_id) == 0)
			return &s->hbs[i];
	return NULL;
}

static struct sched_job *sched_job_find(struct scheduler *s, const char *id)
{
	for (struct sched_job *j = s->jobs; j; j = j->next)
		if (id && strcmp(j->spec.id, id) == 0)
			return j;
	return NULL;
}

static void sched_store_logged(void *ud, int rc)
{
	struct scheduler *s = ud;

	if (rc)
		log_warn("scheduler", "a store write failed", LOG_S("error", sb_strerror(rc)));
	sched_unref(s);
}

/* ---- heartbeat status in kv ---- */

static void sched_hb_save(struct scheduler *s, const struct sched_hb *h)
{
	json_t *o = json_pack("{sI sI ss ss?}", "next_due", (json_int_t)h->next_due, "last_at",
	                      (json_int_t)h->last_at, "last_status", h->last_status, "last_detail",
	                      h->last_detail);
	char *text = o ? jsonw_dumps(o, 0, NULL) : NULL;

	json_decref(o);
	SB_CRASH_POINT("sched.heartbeat.save");
	if (text && store_kv_put(s->opt.store, SCHED_HB_NS, h->agent_id, text, sched_store_logged,
	                         s) == SB_OK)
		s->refs++;
	free(text);
}

struct sched_kv_ctx {
	struct scheduler *s;
	char *agent_id;
	bool route;
};

static void sched_hb_loaded(void *ud, int rc, const char *value)
{
	struct sched_kv_ctx *c = ud;
	struct scheduler *s = c->s;
	struct sched_hb *h = sched_hb_find(s, c->agent_id);
	json_t *o = rc == SB_OK && value ? json_loads(value, 0, NULL) : NULL;

	if (h && o && !s->freed) {
		if (c->route) {
			if (!h->route)
				h->route = strdup(value);
		} else {
			int64_t now = scheduler_now_ms(s),
			        due = json_integer_value(json_object_get(o, "next_due"));

			h->last_at = json_integer_value(json_object_get(o, "last_at"));
			snprintf(h->last_status, sizeof h->last_status, "%s",
			         json_string_value(json_object_get(o, "last_status"))
			             ? json_string_value(json_object_get(o, "last_status"))
			             : "");
			sched_set_str(&h->last_detail,
			              json_string_value(json_object_get(o, "last_detail")));
			/* A due time that passed while the gateway was down is not
			 * made up: the next tick is one interval from now. */
			if (h->every_ms > 0 && due > now && due <= now + h->every_ms)
				h->next_due = due;
			sched_arm(s);
		}
	}
	json_decref(o);
	free(c->agent_id);
	free(c);
	sched_unref(s);
}

static void sched_kv_load(struct scheduler *s, const char *ns, const char *agent_id, bool route)
{
	struct sched_kv_ctx *c = calloc(1, sizeof *c);

	if (!c || !(c->agent_id = strdup(agent_id))) {
		free(c);
		return;
	}
	c->s = s;
	c->route = route;
	if (store_kv_get(s->opt.store, ns, agent_id, sched_hb_loaded, c) != SB_OK) {
		free(c->agent_id);
		free(c);
		return;
	}
	s->refs++;
}

/* Rebuilds the heartbeat table from the configuration, keeping the status
 * of agents that stay. */
static void sched_hbs_sync(struct scheduler *s, bool load)
{
	struct config *cfg = sched_config(s);
	struct sched_hb *v = calloc(cfg->n_agents ? cfg->n_agents : 1, sizeof *v);
	int64_t now = scheduler_now_ms(s);

	if (!v) {
		config_unref(cfg);
		return;
	}
	for (size_t i = 0; i < cfg->n_agents; i++) {
		const struct agent_config *a = &cfg->agents[i];
		struct sched_hb *old = sched_hb_find(s, a->id), *h = &v[i];

		h->agent_id = strdup(a->id);
		h->every_ms = a->heartbeat.every_ms;
		if (old) {
			h->last_at = old->last_at;
			memcpy(h->last_status, old->last_status, sizeof h->last_status);
			h->last_detail = old->last_detail;
			old->last_detail = NULL;
			h->route = old->route;
			old->route = NULL;
			h->inflight = old->inflight;
			if (old->every_ms == h->every_ms)
				h->next_due = old->next_due;
		}
		if (h->every_ms > 0 && !h->next_due)
			h->next_due = now + h->every_ms;
		if (h->every_ms == 0)
			h->next_due = 0;
	}
	sched_hbs_free(s->hbs, s->n_hbs);
	s->hbs = v;
	s->n_hbs = cfg->n_agents;
	for (size_t i = 0; load && i < s->n_hbs; i++) {
		if (!s->hbs[i].agent_id)
			continue;
		sched_kv_load(s, SCHED_HB_NS, s->hbs[i].agent_id, false);
		sched_kv_load(s, SCHED_ROUTE_NS, s->hbs[i].agent_id, true);
	}
	config_unref(cfg);
}

/* ---- routes ---- */

void scheduler_route_seen(struct scheduler *s, const char *agent_id, const struct envelope *env)
{
	struct sched_hb *h = sched_hb_find(s, agent_id);
	json_t *o;
	char *text;

	/* The HTTP endpoint answers in its response: nothing to announce to. */
	if (!h || !env->channel || strcmp(env->channel, "http") == 0 || !env->peer_id)
		return;
	o = json_pack("{ss ss ss ss}", "channel", env->channel, "account",
	              env->account ? env->account : "default", "target", env->peer_id, "peer_kind",
	              envelope_peer_kind_name(env->peer_kind));
	text = o ? jsonw_dumps(o, JSONW_SORT_KEYS, NULL) : NULL;
	json_decref(o);
	if (!text)
		return;
	if (h->route && strcmp(h->route, text) == 0) {
		free(text);
		return;
	}
	free(h->route);
	h->route = text;
	if (store_kv_put_lazy(s->opt.store, SCHED_ROUTE_NS, agent_id, text, sched_store_logged,
	                      s) == SB_OK)
		s->refs++;
}

/* The "deliver" object of a scheduled envelope (new reference), or NULL
 * when the reply goes nowhere. */
static json_t *sched_deliver(struct sched_hb *h, const char *target, const char *to,
                             const char *account)
{
	if (!target || strcmp(target, "none") == 0)
		return NULL;
	if (strcmp(target, "last") == 0)
		return h && h->route ? json_loads(h->route, 0, NULL) : NULL;
	if (!to)
		return NULL;
	/* A webhook's account is the hook: its name is the target. */
	if (strcmp(target, "webhook") == 0)
		return json_pack("{ss ss ss}", "channel", "webhook", "account",
		                 account ? account : to, "target", to);
	return json_pack("{ss ss ss}", "channel", target, "account", account ? account : "default",
	                 "target", to);
}

/* ---- ingest ---- */

struct sched_ingest {
	struct scheduler *s;
	char *id; /* agent (heartbeat) or job id (cron) */
	bool cron;
	scheduler_cb cb;
	void *ud;
};

static void sched_run_failed(struct scheduler *s, bool cron, const char *id, const char *why);

static void sched_ingested(void *ud, int rc, int64_t inbox_id, bool duplicate)
{
	struct sched_ingest *in = ud;
	struct scheduler *s = in->s;

	(void)inbox_id;
	(void)duplicate;
	if (rc && !s->freed)
		sched_run_failed(s, in->cron, in->id, sb_strerror(rc));
	if (in->cb) {
		json_t *r = json_pack("{sb}", "queued", rc == SB_OK);

		in->cb(in->ud, rc, rc ? "the run could not be queued" : NULL, r);
		json_decref(r);
	}
	free(in->id);
	free(in);
	sched_unref(s);
}

/* Puts a scheduled run in the inbox. raw is taken. */
static int sched_ingest(struct scheduler *s, bool cron, const char *id, const char *agent,
                        const char *session_key, const char *text, json_t *raw,
                        const char *event_id, scheduler_cb cb, void *ud)
{
	struct envelope e;
	struct sched_ingest *in = calloc(1, sizeof *in);
	char *raw_text = raw ? jsonw_dumps(raw, 0, NULL) : NULL;
	int rc = SB_ERR_NOMEM;

	json_decref(raw);
	if (!in || !raw_text || !(in->id = strdup(id)))
		goto out;
	in->s = s;
	in->cron = cron;
	in->cb = cb;
	in->ud = ud;
	memset(&e, 0, sizeof e);
	e.channel = cron ? "cron" : "heartbeat";
	e.account = "default";
	e.event_id = event_id;
	e.peer_kind = ENVELOPE_PEER_DIRECT;
	e.sender_id = cron ? "cron" : "heartbeat";
	e.sender_name = cron ? id : "heartbeat";
	e.text = text;
	e.received_at = scheduler_now_ms(s);
	e.raw = raw_text;
	e.route_agent = agent;
	e.route_session = session_key;
	rc = s->opt.host->ingest(s->opt.host->ctx, &e, sched_ingested, in);
	if (rc == SB_OK) {
		s->refs++;
		in = NULL;
	}
out:
	if (in)
		free(in->id);
	free(in);
	free(raw_text);
	return rc;
}

/* ---- heartbeat ---- */

struct sched_hb_work {
	uv_work_t req;
	struct scheduler *s;
	char *agent_id;
	char *path;
	bool empty; /* the file exists and has nothing to do */
};

static void sched_hb_read(uv_work_t *w)
{
	struct sched_hb_work *hw = w->data;
	char *buf = NULL;
	size_t n = 0;

	/* Beneath the workspace, never through a symlink, a regular file only:
	 * anything else counts as missing (the heartbeat runs, the model
	 * decides). */
	if (beneath_read_in(hw->path, "HEARTBEAT.md", SCHED_HB_FILE_MAX, &buf, &n) == SB_OK)
		hw->empty = heartbeat_file_empty(buf, n);
	free(buf);
}

static void sched_hb_status(struct scheduler *s, struct sched_hb *h, const char *status,
                            const char *detail)
{
	h->last_at = scheduler_now_ms(s);
	snprintf(h->last_status, sizeof h->last_status, "%s", status);
	sched_set_str(&h->last_detail, detail);
	sched_hb_save(s, h);
}

static void sched_hb_fire(struct scheduler *s, struct sched_hb *h)
{
	struct config *cfg = sched_config(s);
	const struct agent_config *a = config_agent(cfg, h->agent_id);
	const struct agent_heartbeat_config *hc = a ? &a->heartbeat : NULL;
	char key[160], event_id[160];
	json_t *raw, *del;
	int rc;

	if (!hc) {
		h->inflight = false;
		goto out;
	}
	if (FMT(key, "agent:%s:main", h->agent_id) != SB_OK ||
	    FMT(event_id, "hb:%s:%" PRId64, h->agent_id, scheduler_now_ms(s)) != SB_OK) {
		h->inflight = false;
		sched_hb_status(s, h, "error", "agent id too long for a session key");
		goto out;
	}
	raw = json_pack("{sI}", "ack_max", (json_int_t)hc->ack_max_chars);
	del = sched_deliver(h, hc->target, hc->to, hc->account);
	if (raw && del)
		json_object_set_new(raw, "deliver", del);
	else
		json_decref(del);
	rc = sched_ingest(s, false, h->agent_id, h->agent_id, key,
	                  hc->prompt ? hc->prompt : HEARTBEAT_DEFAULT_PROMPT, raw, event_id, NULL,
	                  NULL);
	if (rc) {
		h->inflight = false;
		sched_hb_status(s, h, "error", sb_strerror(rc));
	} else {
		log_info("scheduler", "heartbeat", LOG_S("agent", h->agent_id));
	}
out:
	config_unref(cfg);
}

static void sched_hb_read_done(uv_work_t *w, int status)
{
	struct sched_hb_work *hw = w->data;
	struct scheduler *s = hw->s;
	struct sched_hb *h = s->freed || s->stopped ? NULL : sched_hb_find(s, hw->agent_id);

	(void)status;
	if (h) {
		if (hw->empty) {
			h->inflight = false;
			sched_hb_status(s, h, "skipped", "empty-heartbeat-file");
			log_debug("scheduler", "heartbeat skipped: HEARTBEAT.md is empty",
			          LOG_S("agent", h->agent_id));
		} else {
			sched_hb_fire(s, h);
		}
		sched_arm(s);
	}
	free(hw->agent_id);
	free(hw->path);
	free(hw);
	sched_unref(s);
}

/* A heartbeat is due. */
static void sched_hb_tick(struct scheduler *s, struct sched_hb *h, int64_t now)
{
	struct config *cfg = sched_config(s);
	const struct agent_config *a = config_agent(cfg, h->agent_id);
	const struct agent_active_hours *ah = a ? &a->heartbeat.active_hours : NULL;
	struct sched_hb_work *hw;
	char key[160];

	h->next_due = now + h->every_ms;
	if (!a)
		goto out;
	if (ah->start && ah->end) {
		const struct cron_tz *z = NULL;
		int start = 0, end = 0;

		if (cron_tz_get(ah->timezone ? ah->timezone : "local", &z) == SB_OK &&
		    heartbeat_hhmm_parse(ah->start, false, &start) == SB_OK &&
		    heartbeat_hhmm_parse(ah->end, true, &end) == SB_OK &&
		    !heartbeat_in_window(start, end, z, now / 1000)) {
			sched_hb_status(s, h, "skipped", "quiet-hours");
			goto out;
		}
	}
	if (FMT(key, "agent:%s:main", h->agent_id) != SB_OK) {
		sched_hb_status(s, h, "error", "agent id too long for a session key");
		goto out;
	}
	if (h->inflight || s->opt.session_busy(s->opt.ud, key)) {
		/* Deferred, not stacked: one tick waits for the lane. */
		h->next_due = now + SCHED_DEFER_MS;
		snprintf(h->last_status, sizeof h->last_status, "deferred");
		goto out;
	}
	hw = calloc(1, sizeof *hw);
	if (!hw || !(hw->agent_id = strdup(h->agent_id)) || !(hw->path = strdup(a->workspace))) {
		if (hw)
			free(hw->agent_id);
		free(hw);
		goto out;
	}
	hw->s = s;
	hw->req.data = hw;
	if (uv_queue_work(s->opt.loop, &hw->req, sched_hb_read, sched_hb_read_done) != 0) {
		free(hw->agent_id);
		free(hw->path);
		free(hw);
		goto out;
	}
	s->refs++;
	h->inflight = true;
out:
	config_unref(cfg);
}

/* ---- cron ---- */

static char *sched_state_json(const struct sched_job *j)
{
	json_t *o =
	    json_pack("{sI sI si sb sb ss ss?}", "next_run_ms", (json_int_t)j->st.next_run_ms,
	              "last_run_ms", (json_int_t)j->st.last_run_ms, "errors", j->st.errors,
	              "auto_disabled", j->st.auto_disabled, "done", j->st.done, "last_status",
	              j->last_status, "last_error", j->last_error);
	char *text = o ? jsonw_dumps(o, 0, NULL) : NULL;

	json_decref(o);
	return text;
}

static void sched_job_state_read(struct sched_job *j, const char *text)
{
	json_t *o = text ? json_loads(text, 0, NULL) : NULL;

	j->st.next_run_ms = json_integer_value(json_object_get(o, "next_run_ms"));
	j->st.last_run_ms = json_integer_value(json_object_get(o, "last_run_ms"));
	j->st.errors = (int)json_integer_value(json_object_get(o, "errors"));
	j->st.auto_disabled = json_is_true(json_object_get(o, "auto_disabled"));
	j->st.done = json_is_true(json_object_get(o, "done"));
	snprintf(j->last_status, sizeof j->last_status, "%s",
	         json_string_value(json_object_get(o, "last_status"))
	             ? json_string_value(json_object_get(o, "last_status"))
	             : "");
	sched_set_str(&j->last_error, json_string_value(json_object_get(o, "last_error")));
	json_decref(o);
}

struct sched_op {
	struct scheduler *s;
	scheduler_cb cb;
	void *ud;
	json_t *result;
};

static void sched_job_saved(void *ud, int rc)
{
	struct sched_op *op = ud;

	if (rc)
		log_warn("scheduler", "cannot store a cron job", LOG_S("error", sb_strerror(rc)));
	if (op->cb)
		op->cb(op->ud, rc, rc ? "the store failed" : NULL, op->result);
	json_decref(op->result);
	sched_unref(op->s);
	free(op);
}

static int sched_job_save(struct scheduler *s, const struct sched_job *j, scheduler_cb cb, void *ud,
                          json_t *result)
{
	struct store_cron_job sj = {.id = j->spec.id,
	                            .spec = j->spec_json,
	                            .source = j->source,
	                            .created_at = j->created_at};
	struct sched_op *op = calloc(1, sizeof *op);
	char *state = sched_state_json(j);
	int rc = SB_ERR_NOMEM;

	sj.state = state;
	if (!op || !state)
		goto out;
	op->s = s;
	op->cb = cb;
	op->ud = ud;
	op->result = result;
	SB_CRASH_POINT("sched.job.save");
	rc = store_cron_job_put(s->opt.store, &sj, sched_job_saved, op);
	if (rc == SB_OK) {
		s->refs++;
		op = NULL;
		result = NULL;
	}
out:
	free(op);
	json_decref(result);
	free(state);
	return rc;
}

static void sched_run_recorded(void *ud, int rc, int64_t id, bool duplicate)
{
	(void)id;
	(void)duplicate;
	sched_store_logged(ud, rc);
}

static void sched_run_record(struct scheduler *s, const struct sched_job *j, int64_t scheduled,
                             int64_t started, const char *status, const char *detail,
                             const char *session_key)
{
	struct store_cron_run r = {.job_id = j->spec.id,
	                           .scheduled_at = scheduled,
	                           .started_at = started,
	                           .finished_at = scheduler_now_ms(s),
	                           .status = status,
	                           .session_key = session_key};
	char *d = detail ? strndup(detail, SCHED_DETAIL_MAX) : NULL;

	r.detail = d;
	if (store_cron_run_add(s->opt.store, &r, SCHEDULER_RUNS_KEEP, sched_run_recorded, s) ==
	    SB_OK)
		s->refs++;
	free(d);
}

static void sched_job_unlink(struct scheduler *s, struct sched_job *j)
{
	struct sched_job **pp = &s->jobs;

	while (*pp && *pp != j)
		pp = &(*pp)->next;
	if (*pp)
		*pp = j->next;
}

/* A job's run ended (ok or not) at now. */
static void sched_job_finish(struct scheduler *s, struct sched_job *j, bool ok, const char *detail,
                             const char *session_key)
{
	int64_t now = scheduler_now_ms(s);

	j->inflight = false;
	cron_state_after_run(&j->st, &j->spec, ok, now, j->created_at);
	snprintf(j->last_status, sizeof j->last_status, "%s", ok ? "ok" : "error");
	sched_set_str(&j->last_error, ok ? NULL : detail);
	sched_run_record(s, j, j->run_scheduled, j->run_started, ok ? "ok" : "error", detail,
	                 session_key);
	if (j->st.auto_disabled)
		log_warn("scheduler", "cron job disabled after repeated failures",
		         LOG_S("job", j->spec.id), LOG_I("failures", j->st.errors));
	if (j->st.done && j->spec.delete_after_run && strcmp(j->source, "api") == 0) {
		if (store_cron_job_delete(s->opt.store, j->spec.id, sched_store_logged, s) == SB_OK)
			s->refs++;
		sched_job_unlink(s, j);
		sched_job_free(j);
	} else {
		sched_job_save(s, j, NULL, NULL, NULL);
	}
	sched_arm(s);
}

static void sched_run_failed(struct scheduler *s, bool cron, const char *id, const char *why)
{
	if (cron) {
		struct sched_job *j = sched_job_find(s, id);

		if (j && j->inflight)
			sched_job_finish(s, j, false, why, NULL);
	} else {
		struct sched_hb *h = sched_hb_find(s, id);

		if (h) {
			h->inflight = false;
			sched_hb_status(s, h, "error", why);
		}
	}
}

static const char *sched_job_agent(struct scheduler *s, const struct sched_job *j, char *buf,
                                   size_t size)
{
	struct config *cfg = sched_config(s);
	const struct agent_config *a =
	    j->spec.agent ? config_agent(cfg, j->spec.agent) : config_default_agent(cfg);

	if (a)
		snprintf(buf, size, "%s", a->id);
	config_unref(cfg);
	return a ? buf : NULL;
}

/* Starts a run of j (due at scheduled). */
static int sched_job_fire(struct scheduler *s, struct sched_job *j, int64_t scheduled,
                          scheduler_cb cb, void *ud)
{
	char agent[80], key[256], event_id[160];
	const char *text = j->spec.payload;
	char *marked = NULL;
	json_t *raw, *del;
	int rc;

	if (!sched_job_agent(s, j, agent, sizeof agent)) {
		j->inflight = true;
		j->run_scheduled = scheduled;
		j->run_started = scheduler_now_ms(s);
		sched_job_finish(s, j, false, "the job's agent does not exist", NULL);
		return SB_ERR_NOTFOUND;
	}
	if (j->spec.session == CRON_SESSION_MAIN) {
		size_t n = strlen(j->spec.payload) + strlen(j->spec.id) + 32;

		rc = FMT(key, "agent:%s:main", agent);
		/* A system event in the main session, marked as such. */
		if ((marked = malloc(n)))
			snprintf(marked, n, "[System event: cron job %s]\n%s", j->spec.id,
			         j->spec.payload);
		text = marked ? marked : text;
	} else {
		rc = FMT(key, "agent:%s:cron:%s", agent, j->spec.id);
	}
	if (rc == SB_OK)
		rc = FMT(event_id, "cron:%s:%" PRId64, j->spec.id, scheduled);
	if (rc != SB_OK) {
		free(marked);
		j->inflight = true;
		j->run_scheduled = scheduled;
		j->run_started = scheduler_now_ms(s);
		sched_job_finish(s, j, false, "the job's session key or event id is too long", NULL);
		return rc;
	}
	raw = json_pack("{ss sI sb}", "job", j->spec.id, "scheduled_at", (json_int_t)scheduled,
	                "fresh", j->spec.session == CRON_SESSION_ISOLATED);
	switch (j->spec.delivery) {
	case CRON_DELIVERY_ANNOUNCE:
		del = sched_deliver(sched_hb_find(s, agent), j->spec.channel, j->spec.to,
		                    j->spec.account);
		break;
	case CRON_DELIVERY_WEBHOOK:
		del = sched_deliver(NULL, "webhook", j->spec.to, NULL);
		break;
	default:
		del = NULL;
	}
	if (raw && del)
		json_object_set_new(raw, "deliver", del);
	else
		json_decref(del);
	j->inflight = true;
	j->run_scheduled = scheduled;
	j->run_started = scheduler_now_ms(s);
	rc = sched_ingest(s, true, j->spec.id, agent, key, text, raw, event_id, cb, ud);
	free(marked);
	if (rc) {
		sched_job_finish(s, j, false, sb_strerror(rc), NULL);
		return rc;
	}
	log_info("scheduler", "cron job started", LOG_S("job", j->spec.id), LOG_S("session", key));
	return SB_OK;
}

/* ---- outcomes ---- */

void scheduler_run_done(struct scheduler *s, const struct envelope *env, const char *agent_id,
                        const char *session_key, const char *status, const char *text,
                        bool delivered)
{
	bool ok = strcmp(status, "error") != 0 && strcmp(status, "aborted") != 0 &&
	          strcmp(status, "timeout") != 0;

	if (s->freed)
		return;
	if (strcmp(env->channel, "heartbeat") == 0) {
		struct sched_hb *h = sched_hb_find(s, agent_id);

		if (!h)
			return;
		h->inflight = false;
		sched_hb_status(s, h,
		                !ok                                                ? "error"
		                : delivered                                        ? "sent"
		                : heartbeat_is_ack(text, HEARTBEAT_ACK_MAX * 1000) ? "ok"
		                                                                   : "no-target",
		                text);
		sched_arm(s);
		return;
	}
	{
		json_t *raw = env->raw ? json_loads(env->raw, 0, NULL) : NULL;
		struct sched_job *j =
		    sched_job_find(s, json_string_value(json_object_get(raw, "job")));

		if (j) {
			if (!j->inflight) {
				/* A run recovered from the inbox after a restart. */
				j->inflight = true;
				j->run_scheduled =
				    json_integer_value(json_object_get(raw, "scheduled_at"));
				j->run_started = j->run_scheduled;
			}
			sched_job_finish(s, j, ok, ok ? text : (text && *text ? text : status),
			                 session_key);
		}
		json_decref(raw);
	}
}

/* ---- the timer ---- */

static void sched_tick(uv_timer_t *t)
{
	struct scheduler *s = t->data;
	int64_t now = scheduler_now_ms(s);

	for (size_t i = 0; i < s->n_hbs; i++) {
		struct sched_hb *h = &s->hbs[i];

		if (h->every_ms > 0 && h->next_due && h->next_due <= now)
			sched_hb_tick(s, h, now);
	}
	for (struct sched_job *j = s->jobs, *next; j; j = next) {
		next = j->next;
		if (j->spec.enabled && !j->st.auto_disabled && !j->inflight && j->st.next_run_ms &&
		    j->st.next_run_ms <= now)
			sched_job_fire(s, j, j->st.next_run_ms, NULL, NULL);
	}
	sched_arm(s);
}

static void sched_arm(struct scheduler *s)
{
	int64_t due = INT64_MAX, now, delay;

	if (!s->started || s->stopped || s->freed)
		return;
	for (size_t i = 0; i < s->n_hbs; i++)
		if (s->hbs[i].every_ms > 0 && s->hbs[i].next_due && s->hbs[i].next_due < due)
			due = s->hbs[i].next_due;
	for (const struct sched_job *j = s->jobs; j; j = j->next)
		if (j->spec.enabled && !j->st.auto_disabled && !j->inflight && j->st.next_run_ms &&
		    j->st.next_run_ms < due)
			due = j->st.next_run_ms;
	uv_timer_stop(s->timer);
	if (due == INT64_MAX)
		return;
	now = scheduler_now_ms(s);
	delay = due > now ? (due - now + s->clock_rate - 1) / s->clock_rate : 0;
	uv_timer_start(s->timer, sched_tick, (uint64_t)delay, 0);
}

/* ---- loading and config jobs ---- */

static struct sched_job *sched_job_new(const json_t *spec_json, char *err, size_t err_size)
{
	struct sched_job *j = calloc(1, sizeof *j);
	json_t *canon;

	if (!j)
		return NULL;
	if (cron_spec_from_json(spec_json, &j->spec, err, err_size) != SB_OK) {
		sched_job_free(j);
		return NULL;
	}
	canon = cron_spec_to_json(&j->spec);
	j->spec_json = canon ? jsonw_dumps(canon, JSONW_SORT_KEYS, NULL) : NULL;
	json_decref(canon);
	if (!j->spec_json) {
		sched_job_free(j);
		return NULL;
	}
	return j;
}

/* The first run of a new (or changed) job. */
static void sched_job_schedule_new(struct scheduler *s, struct sched_job *j)
{
	int64_t now = scheduler_now_ms(s), next = 0;

	if (!j->created_at)
		j->created_at = now;
	memset(&j->st, 0, sizeof j->st);
	if (cron_spec_next(&j->spec, now - 1, j->created_at, &next) != SB_OK)
		next = 0;
	/* "every" without an anchor: the first run is one interval after adding. */
	if (j->spec.kind == CRON_KIND_EVERY && !j->spec.anchor_ms && next <= now)
		next = now + j->spec.every_ms;
	j->st.next_run_ms = next;
}

static void sched_jobs_sync_config(struct scheduler *s)
{
	struct config *cfg = sched_config(s);
	struct sched_job *j, *next;

	/* Config jobs that left the file go. */
	for (j = s->jobs; j; j = next) {
		bool kept = false;

		next = j->next;
		if (strcmp(j->source, "config") != 0)
			continue;
		for (size_t i = 0; i < cfg->n_cron && !kept; i++)
			kept = strcmp(cfg->cron[i].id, j->spec.id) == 0;
		if (kept || j->inflight)
			continue;
		if (store_cron_job_delete(s->opt.store, j->spec.id, sched_store_logged, s) == SB_OK)
			s->refs++;
		sched_job_unlink(s, j);
		sched_job_free(j);
	}
	for (size_t i = 0; i < cfg->n_cron; i++) {
		struct cron_spec spec;
		char err[256];
		json_t *o;
		struct sched_job *old = sched_job_find(s, cfg->cron[i].id), *nj;

		if (cron_job_config_spec(&cfg->cron[i], &spec, err, sizeof err) != SB_OK) {
			cron_spec_release(&spec);
			continue;
		}
		o = cron_spec_to_json(&spec);
		cron_spec_release(&spec);
		nj = o ? sched_job_new(o, err, sizeof err) : NULL;
		json_decref(o);
		if (!nj)
			continue;
		snprintf(nj->source, sizeof nj->source, "config");
		if (old && strcmp(old->spec_json, nj->spec_json) == 0 &&
		    strcmp(old->source, "config") == 0) {
			sched_job_free(nj);
			continue;
		}
		if (old && old->inflight) {
			sched_job_free(nj);
			continue;
		}
		if (old) {
			nj->created_at = old->created_at;
			sched_job_unlink(s, old);
			sched_job_free(old);
		}
		sched_job_schedule_new(s, nj);
		nj->next = s->jobs;
		s->jobs = nj;
		sched_job_save(s, nj, NULL, NULL, NULL);
	}
	config_unref(cfg);
}

static void sched_jobs_loaded(void *ud, int rc, const struct store_cron_job *v, size_t n)
{
	struct scheduler *s = ud;
	int64_t now = scheduler_now_ms(s);

	if (rc)
		log_error("scheduler", "cannot read cron jobs", LOG_S("error", sb_strerror(rc)));
	for (size_t i = 0; !s->freed && i < n; i++) {
		json_t *o = json_loads(v[i].spec, 0, NULL);
		char err[256];
		struct sched_job *j = o ? sched_job_new(o, err, sizeof err) : NULL;

		json_decref(o);
		if (!j) {
			log_warn("scheduler", "a stored cron job is unreadable; skipped",
			         LOG_S("job", v[i].id));
			continue;
		}
		snprintf(j->source, sizeof j->source, "%s", v[i].source);
		j->created_at = v[i].created_at;
		sched_job_state_read(j, v[i].state);
		if (j->spec.kind != CRON_KIND_AT && j->st.next_run_ms && j->st.next_run_ms < now) {
			/* Missed while the gateway was down: rescheduled, not replayed. */
			int64_t next;

			if (cron_spec_next(&j->spec, now, j->created_at, &next) == SB_OK) {
				log_info("scheduler",
				         "cron job missed runs while down; rescheduled",
				         LOG_S("job", j->spec.id));
				sched_run_record(s, j, j->st.next_run_ms, now, "skipped",
				                 "missed while the gateway was down", NULL);
				j->st.next_run_ms = next;
			}
		}
		j->next = s->jobs;
		s->jobs = j;
	}
	if (!s->freed) {
		sched_jobs_sync_config(s);
		s->started = true;
		sched_arm(s);
	}
	sched_unref(s);
}

/* ---- public ---- */

int scheduler_new(struct scheduler **out, const struct scheduler_options *opt)
{
	struct scheduler *s = calloc(1, sizeof *s);

	*out = NULL;
	if (!s || !(s->timer = malloc(sizeof *s->timer))) {
		free(s);
		return SB_ERR_NOMEM;
	}
	s->opt = *opt;
	s->refs = 1;
	uv_timer_init(opt->loop, s->timer);
	s->timer->data = s;
	sched_clock_init(s);
	*out = s;
	return SB_OK;
}

void scheduler_start(struct scheduler *s)
{
	sched_hbs_sync(s, true);
	if (store_cron_job_list(s->opt.store, sched_jobs_loaded, s) == SB_OK) {
		s->refs++;
	} else {
		s->started = true;
		sched_arm(s);
	}
}

void scheduler_reconfigure(struct scheduler *s)
{
	if (!s || s->stopped)
		return;
	sched_hbs_sync(s, false);
	if (s->started)
		sched_jobs_sync_config(s);
	sched_arm(s);
}

void scheduler_stop(struct scheduler *s)
{
	if (!s)
		return;
	s->stopped = true;
	uv_timer_stop(s->timer);
}

void scheduler_free(struct scheduler *s)
{
	if (!s)
		return;
	s->stopped = true;
	s->freed = true;
	uv_timer_stop(s->timer);
	uv_close((uv_handle_t *)s->timer, sched_timer_closed);
	s->timer = NULL;
	sched_unref(s);
}

/* ---- status and the control plane ---- */

static json_t *sched_job_json(const struct sched_job *j)
{
	json_t *o = cron_spec_to_json(&j->spec);

	if (!o)
		return NULL;
	json_object_set_new(o, "source", json_string(j->source));
	json_object_set_new(
	    o, "state",
	    json_pack("{sI sI si sb sb sb ss* ss?}", "nextRunMs", (json_int_t)j->st.next_run_ms,
	              "lastRunMs", (json_int_t)j->st.last_run_ms, "consecutiveErrors", j->st.errors,
	              "autoDisabled", j->st.auto_disabled, "running", j->inflight, "done",
	              j->st.done, "lastStatus", j->last_status, "lastError", j->last_error));
	return o;
}

json_t *scheduler_cron_list(struct scheduler *s)
{
	json_t *list = json_array();

	for (const struct sched_job *j = s->jobs; list && j; j = j->next)
		json_array_append_new(list, sched_job_json(j));
	return list;
}

json_t *scheduler_status(struct scheduler *s)
{
	struct config *cfg = sched_config(s);
	json_t *hbs = json_array();
	int64_t next = 0;
	size_t n = 0, enabled = 0;

	for (size_t i = 0; hbs && i < s->n_hbs; i++) {
		const struct sched_hb *h = &s->hbs[i];
		const struct agent_config *a = config_agent(cfg, h->agent_id);

		json_array_append_new(
		    hbs,
		    json_pack("{ss sb sI ss sI sI ss* ss?}", "agentId", h->agent_id, "enabled",
		              h->every_ms > 0, "everyMs", (json_int_t)h->every_ms, "target",
		              a && a->heartbeat.target ? a->heartbeat.target : "none", "nextDue",
		              (json_int_t)h->next_due, "lastAt", (json_int_t)h->last_at,
		              "lastStatus", h->last_status, "lastDetail", h->last_detail));
	}
	for (const struct sched_job *j = s->jobs; j; j = j->next) {
		n++;
		if (!j->spec.enabled || j->st.auto_disabled)
			continue;
		enabled++;
		if (j->st.next_run_ms && (!next || j->st.next_run_ms < next))
			next = j->st.next_run_ms;
	}
	config_unref(cfg);
	return json_pack("{sI so s{sI sI sI}}", "now", (json_int_t)scheduler_now_ms(s),
	                 "heartbeats", hbs ? hbs : json_array(), "cron", "jobs", (json_int_t)n,
	                 "enabled", (json_int_t)enabled, "nextDue", (json_int_t)next);
}

int scheduler_cron_add(struct scheduler *s, const json_t *spec, char *err, size_t err_size,
                       scheduler_cb cb, void *ud)
{
	struct sched_job *j, *old;
	json_t *result;
	int rc;

	if (err_size)
		err[0] = '\0';
	j = sched_job_new(spec, err, err_size);
	if (!j)
		return err_size && err[0] ? SB_ERR_INVAL : SB_ERR_NOMEM;
	old = sched_job_find(s, j->spec.id);
	if (old && (strcmp(old->source, "config") == 0 || old->inflight)) {
		snprintf(err, err_size, "%s",
		         old->inflight ? "a run of this job is going; try again when it ends"
		                       : "a job with this id is declared in the config file");
		sched_job_free(j);
		return SB_ERR_INVAL;
	}
	snprintf(j->source, sizeof j->source, "api");
	if (old) {
		j->created_at = old->created_at;
		sched_job_unlink(s, old);
		sched_job_free(old);
	}
	sched_job_schedule_new(s, j);
	j->next = s->jobs;
	s->jobs = j;
	result = sched_job_json(j);
	rc = sched_job_save(s, j, cb, ud, result);
	sched_arm(s);
	return rc;
}

int scheduler_cron_remove(struct scheduler *s, const char *id, scheduler_cb cb, void *ud)
{
	struct sched_job *j = sched_job_find(s, id);
	struct sched_op *op;
	int rc;

	if (!j)
		return SB_ERR_NOTFOUND;
	if (strcmp(j->source, "config") == 0)
		return SB_ERR_INVAL;
	op = calloc(1, sizeof *op);
	if (!op)
		return SB_ERR_NOMEM;
	op->s = s;
	op->cb = cb;
	op->ud = ud;
	op->result = json_pack("{ss sb}", "id", id, "removed", 1);
	rc = store_cron_job_delete(s->opt.store, id, sched_job_saved, op);
	if (rc) {
		json_decref(op->result);
		free(op);
		return rc;
	}
	s->refs++;
	sched_job_unlink(s, j);
	sched_job_free(j);
	sched_arm(s);
	return SB_OK;
}

int scheduler_cron_run(struct scheduler *s, const char *id, scheduler_cb cb, void *ud)
{
	struct sched_job *j = sched_job_find(s, id);

	if (!j)
		return SB_ERR_NOTFOUND;
	if (j->inflight)
		return SB_ERR_EXISTS;
	return sched_job_fire(s, j, scheduler_now_ms(s), cb, ud);
}

static void sched_runs_listed(void *ud, int rc, const struct store_cron_run *v, size_t n)
{
	struct sched_op *op = ud;
	json_t *list = json_array();

	for (size_t i = 0; list && rc == SB_OK && i < n; i++)
		json_array_append_new(list, json_pack("{sI ss sI sI sI ss ss? ss?}", "id",
		                                      (json_int_t)v[i].id, "jobId", v[i].job_id,
		                                      "scheduledAt", (json_int_t)v[i].scheduled_at,
		                                      "startedAt", (json_int_t)v[i].started_at,
		                                      "finishedAt", (json_int_t)v[i].finished_at,
		                                      "status", v[i].status, "detail", v[i].detail,
		                                      "sessionKey", v[i].session_key));
	op->result = json_pack("{so}", "runs", list ? list : json_array());
	op->cb(op->ud, rc, rc ? "the store failed" : NULL, op->result);
	json_decref(op->result);
	sched_unref(op->s);
	free(op);
}

int scheduler_cron_runs(struct scheduler *s, const char *id, size_t limit, scheduler_cb cb,
                        void *ud)
{
	struct sched_op *op;
	int rc;

	if (id && !sched_job_find(s, id))
		return SB_ERR_NOTFOUND;
	op = calloc(1, sizeof *op);
	if (!op)
		return SB_ERR_NOMEM;
	op->s = s;
	op->cb = cb;
	op->ud = ud;
	rc = store_cron_run_list(s->opt.store, id, limit, sched_runs_listed, op);
	if (rc) {
		free(op);
		return rc;
	}
	s->refs++;
	return SB_OK;
}

int scheduler_heartbeat_run(struct scheduler *s, const char *agent_id)
{
	struct sched_hb *h = agent_id ? sched_hb_find(s, agent_id) : NULL;

	if (!h)
		return SB_ERR_NOTFOUND;
	if (h->inflight)
		return SB_ERR_EXISTS;
	/* As if it were due now: quiet hours, a busy session and an empty
	 * HEARTBEAT.md apply as always; the next one is an interval away. */
	sched_hb_tick(s, h, scheduler_now_ms(s));
	sched_arm(s);
	return SB_OK;
}
