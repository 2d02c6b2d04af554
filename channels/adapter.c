/*
 * adapter.c - the parts every channel adapter shares (see adapter.h).
 */
#include "channels/adapter.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/core/clock.h"
#include "gateway/core/err.h"
#include "gateway/core/log.h"

int channel_init(struct channel *c, const struct host *host, const char *account)
{
	const char *a = account ? account : "default";
	size_t n = strlen(a);

	c->host = host;
	if (n > ENVELOPE_ACCOUNT_MAX) {
		log_error("channel", "account id too long", LOG_S("account", a),
		          LOG_I("max", ENVELOPE_ACCOUNT_MAX));
		return SB_ERR_TOOBIG;
	}
	memcpy(c->account, a, n + 1);
	return SB_OK;
}

/* ---- the next loop turn ---- */

struct channel_later {
	uv_timer_t timer;
	channel_send_cb cb;
	void *ud;
	struct channel_send_result res;
	char *error, *msg_id;
};

static void channel_later_closed(uv_handle_t *h)
{
	struct channel_later *l = h->data;

	free(l->error);
	free(l->msg_id);
	free(l);
}

static void channel_later_fire(uv_timer_t *t)
{
	struct channel_later *l = t->data;

	l->res.error = l->error;
	l->res.channel_msg_id = l->msg_id;
	l->cb(l->ud, &l->res);
	uv_close((uv_handle_t *)t, channel_later_closed);
}

int channel_report_later(const struct host *host, const struct channel_send_result *res,
                         channel_send_cb cb, void *ud)
{
	struct channel_later *l = calloc(1, sizeof *l);

	if (!l)
		return SB_ERR_NOMEM;
	l->cb = cb;
	l->ud = ud;
	l->res = *res;
	if ((res->error && !(l->error = strdup(res->error))) ||
	    (res->channel_msg_id && !(l->msg_id = strdup(res->channel_msg_id)))) {
		free(l->error);
		free(l);
		return SB_ERR_NOMEM;
	}
	if (uv_timer_init(host->loop, &l->timer) != 0) {
		free(l->error);
		free(l->msg_id);
		free(l);
		return SB_ERR_NOMEM;
	}
	l->timer.data = l;
	uv_timer_start(&l->timer, channel_later_fire, 0, 0);
	return SB_OK;
}

/* ---- rate-limited logs ---- */

bool channel_ratelog_take(struct channel_ratelog *r, int64_t *suppressed)
{
	int64_t now = clock_mono_ms();

	if (now - r->window_ms >= CHANNEL_LOG_WINDOW_MS) {
		r->window_ms = now;
		r->count = 0;
	}
	if (r->count >= CHANNEL_LOG_BURST) {
		r->suppressed++;
		return false;
	}
	r->count++;
	if (suppressed)
		*suppressed = r->suppressed;
	r->suppressed = 0;
	return true;
}

/* ---- uniqueness across a section's entries ---- */

static const char *channel_unique_value(const struct channel_unique *u, const void *entry,
                                        char *buf, size_t size)
{
	const char *v = u->value(entry, buf, size);

	return v && *v ? v : NULL;
}

int channel_config_unique(struct cfg_error_ctx *ctx, const char *list, const char *noun,
                          const void *v, size_t n, size_t size, const struct channel_unique *rules,
                          size_t nrules)
{
	char na[CHANNEL_UNIQUE_VALUE_MAX], nb[CHANNEL_UNIQUE_VALUE_MAX];
	char va[CHANNEL_UNIQUE_VALUE_MAX], vb[CHANNEL_UNIQUE_VALUE_MAX], key[128];
	const char *base = v;
	int added = 0;

	for (size_t i = 0; i < n; i++) {
		const void *a = base + i * size;
		const char *name_a = channel_unique_value(&rules[0], a, na, sizeof na);
		bool clash = false;

		if (!name_a)
			continue;
		for (size_t j = 0; j < i && !clash; j++) {
			const void *b = base + j * size;
			const char *name_b = channel_unique_value(&rules[0], b, nb, sizeof nb);

			if (!name_b)
				continue;
			for (size_t k = 0; k < nrules && !clash; k++) {
				const struct channel_unique *u = &rules[k];
				const char *x =
				    k ? channel_unique_value(u, a, va, sizeof va) : name_a;
				const char *y =
				    k ? channel_unique_value(u, b, vb, sizeof vb) : name_b;

				if (!x || !y || strcmp(x, y) != 0)
					continue;
				clash = true;
				added++;
				snprintf(key, sizeof key, "%s[%zu].%s", list, i, u->key);
				if (k == 0)
					cfg_error_add(
					    ctx, key, u->hint,
					    "%s \"%s\" is defined twice (%s[%zu] and %s[%zu])",
					    noun, name_a, list, j, list, i);
				else
					cfg_error_add(ctx, key, u->hint,
					              "%ss \"%s\" and \"%s\" use the same %s%s%s",
					              noun, name_b, name_a, u->what,
					              u->show ? " " : "", u->show ? x : "");
			}
		}
	}
	return added;
}
