/*
 * boot.c - see boot.h.
 */
#include "gateway/daemon/boot.h"

#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/core/beneath.h"
#include "gateway/core/err.h"
#include "gateway/core/fmt.h"
#include "gateway/core/fsutil.h"
#include "gateway/core/jsonw.h"
#include "gateway/core/log.h"

#define BOOT_FIELD_MAX 256

struct boot_item {
	struct boot *b;
	char *agent_id;
	char *workspace;
	char *text; /* read on the thread pool; NULL when there is no BOOT.md */
	char channel[BOOT_FIELD_MAX], account[BOOT_FIELD_MAX], target[BOOT_FIELD_MAX];
	bool deliver;
	bool bad_line;
	struct run_job *job;
	bool running;
};

struct boot {
	uv_loop_t *loop;
	const struct host *host;
	struct runner *runner;
	struct boot_item *items;
	size_t n;
	uv_work_t work;
	bool reading;
	bool aborted;
	bool freed; /* boot_free ran while the read was in flight */
};

int boot_parse(const char *text, char *channel, char *account, char *target, size_t size,
               const char **body)
{
	const char *p = text, *eol, *c1, *c2;
	size_t n;

	channel[0] = account[0] = target[0] = '\0';
	*body = text;
	if (strncmp(p, "deliver:", 8) != 0)
		return 0;
	eol = strchr(p, '\n');
	if (!eol)
		eol = p + strlen(p);
	p += 8;
	while (p < eol && (*p == ' ' || *p == '\t'))
		p++;
	while (eol > p && (eol[-1] == ' ' || eol[-1] == '\t' || eol[-1] == '\r'))
		eol--;
	c1 = memchr(p, ':', (size_t)(eol - p));
	c2 = c1 ? memchr(c1 + 1, ':', (size_t)(eol - c1 - 1)) : NULL;
	if (!c1 || !c2 || c1 == p || c2 == c1 + 1 || c2 + 1 >= eol)
		return -1;
	n = (size_t)(c1 - p);
	if (n >= size || (size_t)(c2 - c1 - 1) >= size || (size_t)(eol - c2 - 1) >= size)
		return -1;
	memcpy(channel, p, n);
	channel[n] = '\0';
	memcpy(account, c1 + 1, (size_t)(c2 - c1 - 1));
	account[c2 - c1 - 1] = '\0';
	memcpy(target, c2 + 1, (size_t)(eol - c2 - 1));
	target[eol - c2 - 1] = '\0';
	{
		const char *nl = strchr(eol, '\n');

		*body = nl ? nl + 1 : eol + strlen(eol);
	}
	return 1;
}

static bool boot_blank(const char *s)
{
	for (; *s; s++)
		if (*s != ' ' && *s != '\t' && *s != '\n' && *s != '\r')
			return false;
	return true;
}

static void boot_really_free(struct boot *b)
{
	for (size_t i = 0; i < b->n; i++) {
		free(b->items[i].agent_id);
		free(b->items[i].workspace);
		free(b->items[i].text);
	}
	free(b->items);
	free(b);
}

/* Thread pool: reads each BOOT.md. */
static void boot_read_work(uv_work_t *w)
{
	struct boot *b = w->data;

	for (size_t i = 0; i < b->n; i++) {
		struct boot_item *it = &b->items[i];
		size_t len = 0;

		/* Beneath the workspace, no symlinks, a regular file only. */
		if (beneath_read_in(it->workspace, BOOT_FILE, BOOT_FILE_MAX, &it->text, &len) !=
		    SB_OK) {
			free(it->text);
			it->text = NULL;
		}
	}
}

/* The reply is in the outbox (or could not be put there). */
struct boot_delivery {
	char *agent_id;
};

static void boot_delivered(void *ud, int rc, int64_t outbox_id, bool duplicate)
{
	struct boot_delivery *bd = ud;

	(void)duplicate;
	if (rc)
		log_error("boot", "cannot queue the BOOT.md reply", LOG_S("agent", bd->agent_id),
		          LOG_S("error", sb_strerror(rc)));
	else
		log_info("boot", "BOOT.md reply queued", LOG_S("agent", bd->agent_id),
		         LOG_I("outbox_id", outbox_id));
	free(bd->agent_id);
	free(bd);
}

static void boot_deliver(struct boot_item *it, const struct run_outcome *o)
{
	struct host_outbound msg;
	struct boot_delivery *bd;
	char key[128 + 64], session_key[128];
	json_t *p;
	char *payload;

	if (FMT(session_key, "agent:%s:boot", it->agent_id) != SB_OK) {
		log_error("boot", "the agent id is too long for a session key",
		          LOG_S("agent", it->agent_id));
		return;
	}
	p = json_pack("{s:s,s:s,s:s,s:s}", "text", o->result->text, "status",
	              turn_end_name(o->result->end), "session_key", session_key, "agent",
	              it->agent_id);
	payload = p ? jsonw_dumps(p, JSONW_SORT_KEYS, NULL) : NULL;
	json_decref(p);
	bd = calloc(1, sizeof *bd);
	if (bd)
		bd->agent_id = strdup(it->agent_id);
	if (!payload || !bd || !bd->agent_id) {
		log_error("boot", "out of memory delivering the BOOT.md reply");
		free(payload);
		if (bd)
			free(bd->agent_id);
		free(bd);
		return;
	}
	if (FMT(key, "boot:%s:%s", it->agent_id, o->session_id) != SB_OK) {
		log_error("boot", "the reply's idempotency key is too long",
		          LOG_S("agent", it->agent_id));
		free(payload);
		free(bd->agent_id);
		free(bd);
		return;
	}
	memset(&msg, 0, sizeof msg);
	msg.idempotency_key = key;
	msg.channel = it->channel;
	msg.account = it->account;
	msg.target = it->target;
	msg.payload = payload;
	if (it->b->host->deliver(it->b->host->ctx, &msg, boot_delivered, bd) != SB_OK) {
		log_error("boot", "cannot queue the BOOT.md reply", LOG_S("agent", it->agent_id));
		free(bd->agent_id);
		free(bd);
	}
	free(payload);
}

static bool boot_any_running(const struct boot *b)
{
	for (size_t i = 0; i < b->n; i++)
		if (b->items[i].running)
			return true;
	return false;
}

static void boot_run_done(void *ud, const struct run_outcome *o)
{
	struct boot_item *it = ud;
	struct boot *b = it->b;

	it->job = NULL;
	it->running = false;
	if (b->freed) {
		if (!boot_any_running(b))
			boot_really_free(b);
		return;
	}
	if (o->rc != SB_OK) {
		log_warn("boot", "the BOOT.md turn failed", LOG_S("agent", it->agent_id),
		         LOG_S("error", o->error ? o->error : sb_strerror(o->rc)));
		return;
	}
	log_info("boot", "BOOT.md turn done", LOG_S("agent", it->agent_id),
	         LOG_S("session", o->session_id), LOG_S("end", turn_end_name(o->result->end)),
	         LOG_S("delivered_to", it->deliver ? it->channel : "nowhere"));
	if (it->deliver && !it->b->aborted && o->result->text && *o->result->text &&
	    o->result->end != TURN_END_ERROR)
		boot_deliver(it, o);
}

static void boot_run(struct boot_item *it)
{
	struct run_request req;
	struct buf text;
	char key[128];
	const char *body;
	int rc;

	rc = boot_parse(it->text, it->channel, it->account, it->target, BOOT_FIELD_MAX, &body);
	if (rc < 0) {
		log_warn("boot",
		         "BOOT.md: the deliver line is not \"deliver: channel:account:target\";"
		         " the reply will not be delivered",
		         LOG_S("agent", it->agent_id));
		it->bad_line = true;
		body = strchr(it->text, '\n') ? strchr(it->text, '\n') + 1 : "";
	}
	it->deliver = rc == 1;
	if (boot_blank(body))
		return;
	buf_init(&text, BOOT_FILE_MAX + 1024);
	buf_printf(&text,
	           "The gateway has just started. Follow the start-up instructions of your "
	           "workspace's BOOT.md:\n\n%s%s",
	           body,
	           it->deliver ? "\n\n(Your reply will be delivered to the operator.)"
	                       : "\n\n(Your reply is kept in this session's transcript only.)");
	snprintf(key, sizeof key, "agent:%s:boot", it->agent_id);
	memset(&req, 0, sizeof req);
	req.agent_id = it->agent_id;
	req.session_key = key;
	req.text = text.data ? text.data : "";
	req.new_session = true; /* isolated: a fresh session at every start */
	rc = runner_run(it->b->runner, &req, boot_run_done, it, &it->job);
	buf_free(&text);
	if (rc) {
		log_warn("boot", "cannot start the BOOT.md turn", LOG_S("agent", it->agent_id),
		         LOG_S("error", sb_strerror(rc)));
		return;
	}
	it->running = true;
	log_info("boot", "running BOOT.md", LOG_S("agent", it->agent_id));
}

static void boot_read_done(uv_work_t *w, int status)
{
	struct boot *b = w->data;

	b->reading = false;
	if (b->freed) {
		if (!boot_any_running(b))
			boot_really_free(b);
		return;
	}
	if (status != 0 || b->aborted)
		return;
	for (size_t i = 0; i < b->n; i++)
		if (b->items[i].text && !boot_blank(b->items[i].text))
			boot_run(&b->items[i]);
}

int boot_start(struct boot **out, uv_loop_t *loop, const struct host *host, struct runner *runner,
               const struct config *cfg)
{
	struct boot *b = calloc(1, sizeof *b);
	int rc = SB_ERR_NOMEM;

	*out = NULL;
	if (!b)
		return rc;
	b->loop = loop;
	b->host = host;
	b->runner = runner;
	b->items = calloc(cfg->n_agents ? cfg->n_agents : 1, sizeof *b->items);
	if (!b->items)
		goto fail;
	for (size_t i = 0; i < cfg->n_agents; i++) {
		struct boot_item *it = &b->items[b->n++];

		it->b = b;
		it->agent_id = strdup(cfg->agents[i].id);
		it->workspace = strdup(cfg->agents[i].workspace);
		if (!it->agent_id || !it->workspace)
			goto fail;
	}
	b->work.data = b;
	rc = SB_ERR_IO;
	if (uv_queue_work(loop, &b->work, boot_read_work, boot_read_done) != 0)
		goto fail;
	b->reading = true;
	*out = b;
	return SB_OK;
fail:
	boot_really_free(b);
	return rc;
}

void boot_abort(struct boot *b)
{
	if (!b)
		return;
	b->aborted = true;
	for (size_t i = 0; i < b->n; i++)
		if (b->items[i].running && b->items[i].job)
			runner_abort(b->items[i].job, "the gateway is stopping");
}

void boot_free(struct boot *b)
{
	if (!b)
		return;
	boot_abort(b);
	if (b->reading || boot_any_running(b)) {
		b->freed = true; /* the last callback frees it */
		return;
	}
	boot_really_free(b);
}
