/*
 * models.c - model routing over the providers of one configuration: retries
 * with backoff, fallback along a chain, and per-provider cooldown. See
 * models.h.
 *
 * A call is a small state machine on the loop: STARTING (a zero timer, so
 * that nothing runs inside models_call) → CALLING (a provider call in
 * flight) → WAITING (the backoff timer before a retry) → ... → DONE. Each
 * provider error is classified once:
 *
 *   prompt_too_long, aborted        end the call, reported as they are
 *   auth, bad_request (and any      the next model at once; no retry, no
 *   other kind that is not          cooldown
 *   retryable)
 *   retryable (model_error_         retry the same model after
 *   retryable: 429, 5xx, timeout,   min(base * 2^attempt ±20%, max), or after
 *   network, bad response)          Retry-After when the error has one; after
 *                                   max_retries retries, or when Retry-After
 *                                   is beyond backoff_max_ms, the provider
 *                                   cools down and the next model is tried
 *
 * Cooldown: 30 s, 60 s, then 300 s for a provider's consecutive give-ups
 * (never shorter than its Retry-After); any success resets it. An entry of
 * the chain whose provider is cooling down is skipped when a later entry is
 * not; when every remaining entry is cooling down, the one whose cooldown
 * ends first is tried anyway rather than failing without a call.
 */
#include "agents/models.h"

#include <sodium.h>
#include <stdlib.h>
#include <string.h>

/* The snapshot's `providers` list. (The layering check of DESIGN §1 allows
 * agents/ only gateway/core/; models_new's contract takes the snapshot.) */
#include "gateway/core/err.h"
#include "gateway/core/log.h"

#define MODELS_PROVIDER_ID_MAX 65
#define MODELS_NAME_MAX 512

struct models_provider {
	const struct provider_config *cfg; /* borrowed (see models_new) */
	struct provider *p;
	uint64_t cooldown_until; /* uv_now ms; 0 = none */
	int cooldowns;           /* consecutive give-ups, for the cooldown ladder */
};

struct models_known;

struct models {
	uv_loop_t *loop;
	struct models_options opt;
	struct models_provider *v;
	size_t n;
	struct models_known *known; /* context windows asked for */
};

enum models_call_state { MODELS_STARTING, MODELS_CALLING, MODELS_WAITING, MODELS_DONE };

struct models_call {
	struct models *m;
	char **chain;
	size_t n;
	size_t idx;  /* the chain entry being tried */
	int attempt; /* retries made on it */
	struct models_provider *cur;
	char label[MODELS_NAME_MAX]; /* "provider/model" of the entry */
	struct model_request req;    /* its pointers borrowed until done */
	struct model_stream_events ev;
	bool has_ev;
	struct models_observer obs;
	model_done_cb done;
	void *ud;
	struct provider_call *pc;
	bool cancelling;
	enum models_call_state state;
	uv_timer_t timer;
	int rc; /* the last error, reported when the chain runs out */
	struct model_error err;
};

static void models_attempt(struct models_call *c);
static void models_start_entry(struct models_call *c);
static void models_on_timer(uv_timer_t *t);

/* ---- helpers ---- */

int models_split(const char *name, char *provider, size_t psize, const char **model)
{
	const char *slash = name ? strchr(name, '/') : NULL;
	size_t plen;

	if (!slash || slash == name || slash[1] == '\0')
		return SB_ERR_INVAL;
	plen = (size_t)(slash - name);
	if (!provider || plen >= psize)
		return SB_ERR_INVAL;
	memcpy(provider, name, plen);
	provider[plen] = '\0';
	if (model)
		*model = slash + 1;
	return SB_OK;
}

static struct models_provider *models_find(const struct models *m, const char *id)
{
	for (size_t i = 0; i < m->n; i++)
		if (strcmp(m->v[i].cfg->id, id) == 0)
			return &m->v[i];
	return NULL;
}

/* The provider of chain entry i, or NULL when the name is malformed or
 * names no provider. */
static struct models_provider *models_entry_provider(const struct models_call *c, size_t i,
                                                     const char **model)
{
	char id[MODELS_PROVIDER_ID_MAX];

	if (models_split(c->chain[i], id, sizeof id, model) != SB_OK)
		return NULL;
	return models_find(c->m, id);
}

int models_cooldown_until(const struct models *m, const char *provider_id, uint64_t *until)
{
	const struct models_provider *mp = m && provider_id ? models_find(m, provider_id) : NULL;
	uint64_t u = mp ? mp->cooldown_until : 0;

	if (mp && u <= uv_now(m->loop))
		u = 0;
	if (until)
		*until = u;
	return u != 0;
}

static void models_emit(struct models_call *c, enum models_event what, const char *model,
                        const struct model_error *err, int64_t delay_ms)
{
	if (c->obs.event)
		c->obs.event(c->obs.ud, what, model, err, delay_ms);
}

static int64_t models_backoff(const struct models *m, int attempt)
{
	int64_t d = m->opt.backoff_base_ms;

	for (int i = 0; i < attempt && d < m->opt.backoff_max_ms; i++)
		d *= 2;
	if (d > m->opt.backoff_max_ms)
		d = m->opt.backoff_max_ms;
	/* ±20% so that many sessions hit by one 429 do not come back together. */
	d = d * (80 + (int64_t)randombytes_uniform(41)) / 100;
	if (d > m->opt.backoff_max_ms)
		d = m->opt.backoff_max_ms;
	return d;
}

/* ---- the end of a call ---- */

static void models_call_closed(uv_handle_t *h)
{
	struct models_call *c = h->data;

	for (size_t i = 0; i < c->n; i++)
		free(c->chain[i]);
	free(c->chain);
	free(c);
}

/* Reports once (resp or the error in c) and lets the call go. */
static void models_finish(struct models_call *c, int rc, const struct model_response *resp)
{
	if (c->state == MODELS_DONE)
		return;
	c->state = MODELS_DONE;
	uv_timer_stop(&c->timer);
	if (rc == SB_OK)
		c->done(c->ud, SB_OK, resp, NULL);
	else
		c->done(c->ud, rc, NULL, &c->err);
	uv_close((uv_handle_t *)&c->timer, models_call_closed);
}

static void models_finish_error(struct models_call *c)
{
	models_finish(c, c->rc != SB_OK ? c->rc : SB_ERR_INVAL, NULL);
}

static void models_finish_aborted(struct models_call *c)
{
	memset(&c->err, 0, sizeof c->err);
	c->err.kind = MODEL_ERR_ABORTED;
	c->err.retry_after_ms = -1;
	snprintf(c->err.message, sizeof c->err.message, "cancelled");
	models_finish(c, SB_ERR_ABORTED, NULL);
}

/* ---- moving along the chain ---- */

/* Whether an entry after i has a provider that is not cooling down. */
static bool models_later_available(const struct models_call *c, size_t i, uint64_t now)
{
	for (size_t j = i + 1; j < c->n; j++) {
		const struct models_provider *mp = models_entry_provider(c, j, NULL);

		if (mp && mp->cooldown_until <= now)
			return true;
	}
	return false;
}

/* One info line per failed attempt on the current entry (its error is in
 * c): which provider and model, the kind, and what happens next ("retry",
 * "failover" to the next entry, "give_up" at the end of the chain, or
 * "compact" for the caller to make room). */
static void models_log_error(const struct models_call *c, const char *then)
{
	char provider[MODELS_NAME_MAX];
	const char *model = NULL;

	if (models_split(c->chain[c->idx], provider, sizeof provider, &model) != SB_OK) {
		provider[0] = '\0';
		model = c->chain[c->idx];
	}
	log_info("models", "model error", LOG_S("provider", provider), LOG_S("model", model),
	         LOG_S("kind", model_error_kind_name(c->err.kind)),
	         LOG_I("attempt", c->attempt + 1), LOG_S("then", then),
	         LOG_S("failover", strcmp(then, "failover") == 0 ? "yes" : "no"),
	         LOG_S("error", c->err.message));
}

/* What follows giving up the current entry. */
static const char *models_after(const struct models_call *c)
{
	return c->idx + 1 < c->n ? "failover" : "give_up";
}

/* Gives up the current entry (its error is in c) and moves on. */
static void models_next(struct models_call *c)
{
	if (c->idx + 1 >= c->n) {
		models_finish_error(c);
		return;
	}
	log_info("models", "model failover", LOG_S("from", c->chain[c->idx]),
	         LOG_S("to", c->chain[c->idx + 1]),
	         LOG_S("kind", model_error_kind_name(c->err.kind)), LOG_S("error", c->err.message));
	models_emit(c, MODELS_FALLBACK, c->chain[c->idx], &c->err, 0);
	if (c->state == MODELS_DONE)
		return;
	c->idx++;
	models_start_entry(c);
}

/* Starts on chain entry c->idx, skipping entries that cannot be called and
 * those cooling down while a later one is not. */
static void models_start_entry(struct models_call *c)
{
	uint64_t now = uv_now(c->m->loop);

	while (c->state != MODELS_DONE) {
		struct models_provider *mp;
		const char *model;

		if (c->idx >= c->n) {
			models_finish_error(c);
			return;
		}
		mp = models_entry_provider(c, c->idx, &model);
		if (!mp) {
			memset(&c->err, 0, sizeof c->err);
			c->err.kind = MODEL_ERR_BAD_REQUEST;
			c->err.retry_after_ms = -1;
			snprintf(
			    c->err.message, sizeof c->err.message,
			    "\"%.300s\" names no configured provider (expected provider/model)",
			    c->chain[c->idx]);
			c->rc = SB_ERR_NOTFOUND;
			models_next(c);
			return;
		}
		if (mp->cooldown_until > now) {
			uint64_t best = mp->cooldown_until;
			size_t pick = c->idx;

			if (!models_later_available(c, c->idx, now)) {
				/* All cooling down: the one that is back first. */
				for (size_t j = c->idx + 1; j < c->n; j++) {
					const struct models_provider *o =
					    models_entry_provider(c, j, NULL);

					if (o && o->cooldown_until < best) {
						best = o->cooldown_until;
						pick = j;
					}
				}
				if (pick == c->idx) {
					c->cur = mp;
					break;
				}
			}
			log_info("models", "model skipped while its provider cools down",
			         LOG_S("model", c->chain[c->idx]),
			         LOG_I("cooldown_left_ms", (int64_t)(mp->cooldown_until - now)));
			models_emit(c, MODELS_FALLBACK, c->chain[c->idx], NULL,
			            (int64_t)(mp->cooldown_until - now));
			c->idx++;
			continue;
		}
		c->cur = mp;
		break;
	}
	if (c->state == MODELS_DONE)
		return;
	c->attempt = 0;
	models_attempt(c);
}

/* The provider's answer to one attempt. */
static void models_on_done(void *ud, int rc, const struct model_response *resp,
                           const struct model_error *err)
{
	struct models_call *c = ud;
	struct models_provider *mp = c->cur;
	struct model_response r;
	int64_t delay;

	c->pc = NULL;
	if (c->state == MODELS_DONE)
		return;
	if (rc == SB_OK && resp) {
		mp->cooldowns = 0;
		mp->cooldown_until = 0;
		r = *resp;
		r.model = c->label;
		models_finish(c, SB_OK, &r);
		return;
	}
	c->rc = rc != SB_OK ? rc : SB_ERR_PROTO;
	if (err && err->kind != MODEL_ERR_NONE) {
		c->err = *err;
	} else {
		memset(&c->err, 0, sizeof c->err);
		c->err.kind = MODEL_ERR_BAD_RESPONSE;
		c->err.retry_after_ms = -1;
		snprintf(c->err.message, sizeof c->err.message,
		         "%.300s failed without an error: %s", c->label, sb_strerror(c->rc));
	}
	if (c->cancelling || c->err.kind == MODEL_ERR_ABORTED) {
		models_finish_aborted(c);
		return;
	}
	if (c->err.kind == MODEL_ERR_PROMPT_TOO_LONG) {
		models_log_error(c, "compact");
		models_finish_error(c);
		return;
	}
	if (!model_error_retryable(c->err.kind)) {
		models_log_error(c, models_after(c));
		models_next(c);
		return;
	}
	delay =
	    c->err.retry_after_ms >= 0 ? c->err.retry_after_ms : models_backoff(c->m, c->attempt);
	if (c->attempt < mp->cfg->max_retries && delay <= c->m->opt.backoff_max_ms) {
		models_log_error(c, "retry");
		c->state = MODELS_WAITING;
		uv_timer_start(&c->timer, models_on_timer, (uint64_t)delay, 0);
		models_emit(c, MODELS_RETRY, c->label, &c->err, delay);
		return;
	}
	/* Given up on this model with an error that time may cure. */
	models_log_error(c, models_after(c));
	{
		int step = mp->cooldowns < 3 ? mp->cooldowns : 2;
		int64_t d = c->m->opt.cooldown_ms[step];

		if (c->err.retry_after_ms > d)
			d = c->err.retry_after_ms;
		mp->cooldowns++;
		mp->cooldown_until = uv_now(c->m->loop) + (uint64_t)d;
		models_emit(c, MODELS_COOLDOWN, c->label, &c->err, d);
		if (c->state == MODELS_DONE)
			return;
	}
	models_next(c);
}

static void models_on_timer(uv_timer_t *t)
{
	struct models_call *c = t->data;

	if (c->state == MODELS_STARTING) {
		models_start_entry(c);
	} else if (c->state == MODELS_WAITING) {
		c->attempt++;
		models_attempt(c);
	}
}

/* One provider call on the current entry. */
static void models_attempt(struct models_call *c)
{
	struct models_provider *mp = c->cur;
	const char *model = strchr(c->chain[c->idx], '/') + 1;
	int rc;

	snprintf(c->label, sizeof c->label, "%s", c->chain[c->idx]);
	c->req.model = model;
	c->state = MODELS_CALLING;
	rc = mp->p->ops->call(mp->p, &c->req, c->has_ev ? &c->ev : NULL, models_on_done, c, &c->pc);
	if (rc == SB_OK)
		return;
	c->pc = NULL;
	c->rc = rc;
	memset(&c->err, 0, sizeof c->err);
	c->err.kind = MODEL_ERR_BAD_REQUEST;
	c->err.retry_after_ms = -1;
	snprintf(c->err.message, sizeof c->err.message, "%.300s: the call could not start: %s",
	         c->label, sb_strerror(rc));
	models_next(c);
}

/* ---- public ---- */

int models_new(struct models **out, const struct provider_config *providers, size_t n,
               const struct host *host, const struct models_options *opt)
{
	static const struct models_options defaults = {
	    .backoff_base_ms = 500,
	    .backoff_max_ms = 30000,
	    .cooldown_ms = {30000, 60000, 300000},
	};
	struct models *m = NULL;
	int rc = SB_ERR_INVAL;

	*out = NULL;
	if ((n && !providers) || !host || !host->loop)
		goto out;
	rc = SB_ERR_NOMEM;
	if (sodium_init() < 0)
		goto out;
	m = calloc(1, sizeof *m);
	if (!m || !(m->v = calloc(n ? n : 1, sizeof *m->v)))
		goto out;
	m->loop = host->loop;
	m->opt = defaults;
	if (opt) {
		if (opt->backoff_base_ms > 0)
			m->opt.backoff_base_ms = opt->backoff_base_ms;
		if (opt->backoff_max_ms > 0)
			m->opt.backoff_max_ms = opt->backoff_max_ms;
		for (int i = 0; i < 3; i++)
			if (opt->cooldown_ms[i] > 0)
				m->opt.cooldown_ms[i] = opt->cooldown_ms[i];
	}
	for (size_t i = 0; i < n; i++) {
		const struct provider_config *pc = &providers[i];
		const char *api = provider_api_name(pc->api);
		const struct provider_ops *ops = provider_ops_for(api);

		rc = SB_ERR_CONFIG;
		if (!ops || !ops->create || !ops->destroy || !ops->call || !ops->cancel) {
			log_error("models", "no provider implementation", LOG_S("provider", pc->id),
			          LOG_S("api", api));
			goto out;
		}
		rc = ops->create(&m->v[i].p, pc, host);
		if (rc != SB_OK) {
			log_error("models", "provider could not be created",
			          LOG_S("provider", pc->id), LOG_S("api", api),
			          LOG_S("error", sb_strerror(rc)));
			rc = SB_ERR_CONFIG;
			goto out;
		}
		m->v[i].cfg = pc;
		m->n = i + 1;
	}
	*out = m;
	m = NULL;
	rc = SB_OK;
out:
	models_free(m);
	return rc;
}

static void models_known_free_all(struct models *m);

void models_free(struct models *m)
{
	if (!m)
		return;
	models_known_free_all(m);
	for (size_t i = 0; i < m->n; i++)
		m->v[i].p->ops->destroy(m->v[i].p);
	free(m->v);
	free(m);
}

int models_call(struct models *m, const char *const *chain, size_t n,
                const struct model_request *req, const struct model_stream_events *ev,
                const struct models_observer *obs, model_done_cb done, void *ud,
                struct models_call **out)
{
	struct models_call *c = NULL;
	int rc = SB_ERR_INVAL;

	if (out)
		*out = NULL;
	if (!m || !chain || n == 0 || !req || !done)
		goto out;
	rc = SB_ERR_NOMEM;
	c = calloc(1, sizeof *c);
	if (!c || !(c->chain = calloc(n, sizeof *c->chain)))
		goto out;
	for (size_t i = 0; i < n; i++) {
		rc = chain[i] ? SB_ERR_NOMEM : SB_ERR_INVAL;
		if (!chain[i] || !(c->chain[i] = strdup(chain[i])))
			goto out;
		c->n = i + 1;
	}
	rc = SB_ERR_NOMEM;
	if (uv_timer_init(m->loop, &c->timer) != 0)
		goto out;
	c->m = m;
	c->req = *req;
	if (ev) {
		c->ev = *ev;
		c->has_ev = true;
	}
	if (obs)
		c->obs = *obs;
	c->done = done;
	c->ud = ud;
	c->state = MODELS_STARTING;
	c->timer.data = c;
	uv_timer_start(&c->timer, models_on_timer, 0, 0);
	if (out)
		*out = c;
	c = NULL;
	rc = SB_OK;
out:
	if (c) {
		for (size_t i = 0; i < c->n; i++)
			free(c->chain[i]);
		free(c->chain);
		free(c);
	}
	return rc;
}

void models_cancel(struct models_call *c)
{
	if (!c || c->state == MODELS_DONE)
		return;
	if (c->state == MODELS_CALLING && c->pc) {
		c->cancelling = true;
		/* The provider reports ABORTED before its cancel returns. */
		c->cur->p->ops->cancel(c->pc);
	}
	models_finish_aborted(c); /* a no-op when that already finished it */
}

/* ---- context windows ---- */

#define MODELS_WINDOW_RETRY_MS (10 * 60 * 1000)

struct models_window_wait {
	struct models_window_wait *next;
	struct models *m;
	struct models_known *k; /* while it waits for the server */
	models_window_cb cb;
	void *ud;
	uv_timer_t timer;
	bool cancelled, answered;
	int64_t window;
	char source[200];
};

struct models_known {
	struct models_known *next;
	struct models_provider *mp;
	char *model;
	bool asking;
	bool answered;
	int64_t window; /* the server's; 0 when it did not say */
	char source[160];
	uint64_t asked_at;
	struct provider_probe *probe;
	struct models_window_wait *waiters;
};

static const struct {
	const char *prefix;
	int64_t window;
} models_families[] = {
    /* Longest prefixes first where one is a prefix of another. */
    {"claude", 200000},
    {"gpt-4.1", 1047576},
    {"gpt-4o", 128000},
    {"chatgpt-4o", 128000},
    {"gpt-4-turbo", 128000},
    {"gpt-4-32k", 32768},
    {"gpt-4", 8192},
    {"gpt-3.5-turbo", 16385},
    {"gpt-5", 400000},
    {"o1", 200000},
    {"o3", 200000},
    {"o4-mini", 200000},
    {"gemini-1.5", 1000000},
    {"gemini-2", 1000000},
    {"llama3.1", 131072},
    {"llama-3.1", 131072},
    {"llama3.2", 131072},
    {"llama-3.2", 131072},
    {"llama3.3", 131072},
    {"llama-3.3", 131072},
    {"llama3", 8192},
    {"llama-3", 8192},
    {"meta-llama-3.1", 131072},
    {"meta-llama-3", 8192},
    {"llama2", 4096},
    {"llama-2", 4096},
    {"qwen2.5", 32768},
    {"qwen3", 32768},
    {"qwen2", 32768},
    {"qwq", 32768},
    {"mistral-large", 131072},
    {"mistral-nemo", 131072},
    {"mistral-small", 32768},
    {"mistral", 32768},
    {"mixtral", 32768},
    {"codestral", 32768},
    {"gemma3", 131072},
    {"gemma-3", 131072},
    {"gemma2", 8192},
    {"gemma-2", 8192},
    {"gemma", 8192},
    {"phi4", 16384},
    {"phi-4", 16384},
    {"phi3", 4096},
    {"phi-3", 4096},
    {"deepseek", 65536},
    {"command-r", 131072},
};

int64_t models_window_table(const char *model, const char **family)
{
	char id[128];
	const char *last;
	size_t n, i, best = 0;
	int64_t window = 0;

	if (family)
		*family = NULL;
	if (!model)
		return 0;
	last = strrchr(model, '/');
	last = last ? last + 1 : model;
	for (n = 0; last[n] && last[n] != ':' && n + 1 < sizeof id; n++)
		id[n] = (char)(last[n] >= 'A' && last[n] <= 'Z' ? last[n] - 'A' + 'a' : last[n]);
	id[n] = '\0';
	for (i = 0; i < sizeof models_families / sizeof models_families[0]; i++) {
		size_t k = strlen(models_families[i].prefix);

		if (k > best && strncmp(id, models_families[i].prefix, k) == 0) {
			best = k;
			window = models_families[i].window;
			if (family)
				*family = models_families[i].prefix;
		}
	}
	return window;
}

static void models_wait_closed(uv_handle_t *h)
{
	free(h->data);
}

/* Fills the answer for k's model: the server's, else the table, else the
 * default. */
static void models_window_answer(const struct models_known *k, const char *model,
                                 struct models_window_wait *w)
{
	const char *family;
	int64_t t;

	if (k && k->window > 0) {
		w->window = k->window;
		snprintf(w->source, sizeof w->source, "provider (%s)", k->source);
	} else if ((t = models_window_table(model, &family)) > 0) {
		w->window = t;
		snprintf(w->source, sizeof w->source, "table (%s)", family);
	} else {
		w->window = MODELS_WINDOW_DEFAULT;
		snprintf(w->source, sizeof w->source, "default");
	}
}

static void models_wait_fire(uv_timer_t *t)
{
	struct models_window_wait *w = t->data;

	if (!w->cancelled && !w->answered) {
		w->answered = true;
		w->cb(w->ud, w->window, w->source);
	}
	uv_close((uv_handle_t *)&w->timer, models_wait_closed);
}

static void models_on_window(void *ud, int64_t window, const char *source)
{
	struct models_known *k = ud;
	struct models_window_wait *w;

	k->probe = NULL;
	k->asking = false;
	k->answered = true;
	k->window = window;
	snprintf(k->source, sizeof k->source, "%s", source ? source : "");
	if (window > 0)
		log_info("models", "context window learnt from the provider",
		         LOG_S("provider", k->mp->cfg->id), LOG_S("model", k->model),
		         LOG_I("window", window), LOG_S("source", k->source));
	while ((w = k->waiters) != NULL) {
		k->waiters = w->next;
		w->k = NULL;
		models_window_answer(k, k->model, w);
		uv_timer_start(&w->timer, models_wait_fire, 0, 0);
	}
}

int models_window(struct models *m, const char *name, models_window_cb cb, void *ud,
                  struct models_window_wait **out)
{
	char id[MODELS_PROVIDER_ID_MAX];
	struct models_window_wait *w;
	struct models_provider *mp = NULL;
	struct models_known *k = NULL;
	const char *model = NULL;
	uint64_t now;

	if (out)
		*out = NULL;
	if (!m || !name || !cb)
		return SB_ERR_INVAL;
	w = calloc(1, sizeof *w);
	if (!w)
		return SB_ERR_NOMEM;
	w->m = m;
	w->cb = cb;
	w->ud = ud;
	uv_timer_init(m->loop, &w->timer);
	w->timer.data = w;
	if (models_split(name, id, sizeof id, &model) == SB_OK)
		mp = models_find(m, id);
	now = uv_now(m->loop);
	if (mp && mp->p->ops->window) {
		for (k = m->known; k; k = k->next)
			if (k->mp == mp && strcmp(k->model, model) == 0)
				break;
		if (!k && (k = calloc(1, sizeof *k)) != NULL) {
			k->mp = mp;
			k->model = strdup(model);
			if (!k->model) {
				free(k);
				k = NULL;
			} else {
				k->next = m->known;
				m->known = k;
			}
		}
		if (k && !k->asking &&
		    (!k->answered ||
		     (k->window <= 0 && now - k->asked_at >= MODELS_WINDOW_RETRY_MS))) {
			k->asked_at = now;
			k->asking = mp->p->ops->window(mp->p, k->model, models_on_window, k,
			                               &k->probe) == SB_OK;
			if (!k->asking)
				k->answered = true;
		}
		if (k && k->asking) {
			w->k = k;
			w->next = k->waiters;
			k->waiters = w;
			if (out)
				*out = w;
			return SB_OK;
		}
	}
	models_window_answer(k, model ? model : name, w);
	uv_timer_start(&w->timer, models_wait_fire, 0, 0);
	if (out)
		*out = w;
	return SB_OK;
}

void models_window_cancel(struct models_window_wait *w)
{
	struct models_window_wait **pp;

	if (!w || w->cancelled || w->answered)
		return;
	w->cancelled = true;
	if (w->k) {
		for (pp = &w->k->waiters; *pp; pp = &(*pp)->next)
			if (*pp == w) {
				*pp = w->next;
				break;
			}
		w->k = NULL;
		uv_close((uv_handle_t *)&w->timer, models_wait_closed);
		return;
	}
	/* Its timer is started: it closes itself when it fires. */
}

/* Probes still asking are cancelled (their answer never comes); waiters
 * must have been cancelled by their owners (models_free's contract). */
static void models_known_free_all(struct models *m)
{
	struct models_known *k;

	while ((k = m->known) != NULL) {
		m->known = k->next;
		if (k->probe && k->mp->p->ops->window_cancel)
			k->mp->p->ops->window_cancel(k->probe);
		free(k->model);
		free(k);
	}
}
