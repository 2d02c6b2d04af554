/*
 * budget.c - output budgets. See budget.h.
 */
#include "agents/context/budget.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agents/tools/common.h"
#include "gateway/core/buf.h"
#include "gateway/core/err.h"
#include "gateway/core/fsutil.h"

/* The first line of every preview; budget_is_preview looks for it. */
#define BUDGET_PREVIEW_HEAD "[Result too large for the context ("

static const char *budget_str(const json_t *v)
{
	const char *s = json_string_value(v);

	return s ? s : "";
}

bool budget_tool_pages(const struct tool_def *def)
{
	/* read pages by offset and limit; persisting its result would make
	 * the model read the copy, and so on. */
	return def && def->result_pages;
}

static size_t budget_max_of(const struct tool_def *def, size_t tool_max)
{
	if (def && def->max_result_chars)
		return def->max_result_chars;
	return tool_max ? tool_max : TOOL_RESULT_MAX_DEFAULT;
}

/* The length of the longest prefix of s (len bytes) of at most max bytes
 * that ends on a character boundary. */
static size_t budget_utf8_floor(const char *s, size_t len, size_t max)
{
	size_t n = len < max ? len : max;

	if (n == len)
		return n;
	while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
		n--;
	return n;
}

char *budget_finalise(void *ud, const struct tool_def *def, const char *id, char *content)
{
	static const char note[] = "\n[... %zu more characters not shown: the result is longer "
	                           "than the %zu this tool may return. Read on with offset and "
	                           "limit ...]";
	const struct budget_limits *lim = ud;
	size_t len, max, head;
	struct buf b;

	(void)id;
	if (!content)
		return NULL;
	len = strlen(content);
	max = budget_tool_pages(def) ? budget_max_of(def, lim ? lim->tool_max : 0)
	                             : BUDGET_RESULT_HARD_MAX;
	if (len <= max)
		return content;
	/* Room for the note with the largest numbers it can show. */
	head = budget_utf8_floor(content, len, max > 200 ? max - 200 : 0);
	buf_init(&b, max + 256);
	if (buf_append(&b, content, head) != SB_OK ||
	    buf_printf(&b, note, len - head, max) != SB_OK) {
		buf_free(&b);
		free(content);
		return NULL;
	}
	free(content);
	return buf_steal(&b);
}

void budget_file_name(const char *tool_use_id, char *out, size_t size)
{
	char name[101];
	size_t i, n = 0;

	for (i = 0; tool_use_id && tool_use_id[i] && n < sizeof name - 1; i++) {
		char c = tool_use_id[i];
		bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		          (c >= '0' && c <= '9') || c == '_' || c == '-';

		name[n++] = ok ? c : '_';
	}
	name[n] = '\0';
	snprintf(out, size, "%s.txt", n ? name : "result");
}

char *budget_preview(const char *content, size_t len, const char *name)
{
	size_t room = len > BUDGET_PREVIEW_BYTES ? BUDGET_PREVIEW_BYTES - BUDGET_PREVIEW_TAIL
	                                         : BUDGET_PREVIEW_BYTES;
	size_t head = budget_utf8_floor(content, len, room), nl, tail = len;
	struct buf b;

	/* End on a line when one ends in the last quarter of the head. */
	for (nl = head; nl > head * 3 / 4; nl--)
		if (content[nl - 1] == '\n') {
			head = nl;
			break;
		}
	if (len > head + BUDGET_PREVIEW_TAIL) {
		/* The tail starts on a character, on a line when one starts in
		 * its first quarter. */
		tail = len - BUDGET_PREVIEW_TAIL;
		while (tail < len && ((unsigned char)content[tail] & 0xC0) == 0x80)
			tail++;
		for (nl = tail; nl < tail + BUDGET_PREVIEW_TAIL / 4 && nl < len; nl++)
			if (content[nl - 1] == '\n') {
				tail = nl;
				break;
			}
	} else {
		tail = len; /* little is left: the head says it all */
	}
	buf_init(&b, head + (len - tail) + 1024);
	if (buf_printf(&b,
	               BUDGET_PREVIEW_HEAD
	               "%zu characters). The whole result is saved as %s; "
	               "read it with the read tool (path \"%s\", offset and limit to page). ",
	               len, name, name) != SB_OK ||
	    (tail < len
	         ? buf_printf(&b, "Its first %zu and last %zu characters:]\n", head, len - tail)
	         : buf_printf(&b, "Its first %zu characters:]\n", head)) != SB_OK ||
	    buf_append(&b, content, head) != SB_OK)
		goto fail;
	if (tail < len) {
		if (buf_printf(&b, "%s[... %zu characters not shown ...]\n",
		               head && content[head - 1] == '\n' ? "" : "\n",
		               tail - head) != SB_OK ||
		    buf_append(&b, content + tail, len - tail) != SB_OK ||
		    buf_printf(&b, "%s[the whole result is in %s]",
		               content[len - 1] == '\n' ? "" : "\n", name) != SB_OK)
			goto fail;
	} else if (buf_printf(&b, "%s[... %zu more characters in %s]",
	                      head && content[head - 1] == '\n' ? "" : "\n", len - head,
	                      name) != SB_OK) {
		goto fail;
	}
	return buf_steal(&b);
fail:
	buf_free(&b);
	return NULL;
}

bool budget_is_preview(const char *content, char *name, size_t size)
{
	const char *p, *e;

	if (!content || strncmp(content, BUDGET_PREVIEW_HEAD, strlen(BUDGET_PREVIEW_HEAD)) != 0)
		return false;
	p = strstr(content, "saved as " BUDGET_RESULTS_PREFIX);
	if (!p)
		return false;
	p += strlen("saved as ");
	e = strchr(p, ';');
	if (!e || (size_t)(e - p) >= size)
		return false;
	memcpy(name, p, (size_t)(e - p));
	name[e - p] = '\0';
	return true;
}

/* ---- the plan ---- */

static const struct tool_def *budget_lookup(const struct tool_def *const *tools, size_t n,
                                            const char *name)
{
	if (!tools)
		return tool_find(name);
	for (size_t i = 0; i < n; i++)
		if (tools[i] && strcmp(tools[i]->name, name) == 0)
			return tools[i];
	return NULL;
}

/* The name of the tool that the tool_use id called in assistant. */
static const char *budget_tool_name(const json_t *assistant, const char *id)
{
	const json_t *b;
	size_t i;

	json_array_foreach(json_object_get(assistant, "content"), i, b)
	{
		if (strcmp(budget_str(json_object_get(b, "type")), "tool_use") == 0 &&
		    strcmp(budget_str(json_object_get(b, "id")), id) == 0)
			return budget_str(json_object_get(b, "name"));
	}
	return "";
}

struct budget_cand {
	size_t block;
	size_t len;
	bool pages;
	bool persist;
	const char *id;
	const char *content;
};

static int budget_add_item(struct budget_plan *p, const struct budget_cand *c,
                           const char *results_dir)
{
	struct budget_item *it;
	char file[128];
	size_t plen;

	it = realloc(p->items, (p->n + 1) * sizeof *it);
	if (!it)
		return SB_ERR_NOMEM;
	p->items = it;
	it = &p->items[p->n];
	memset(it, 0, sizeof *it);
	budget_file_name(c->id, file, sizeof file);
	plen = strlen(results_dir) + strlen(file) + 2;
	it->file.path = malloc(plen);
	it->name = malloc(strlen(BUDGET_RESULTS_PREFIX) + strlen(file) + 1);
	it->file.data = malloc(c->len + 1);
	if (!it->file.path || !it->name || !it->file.data) {
		free(it->file.path);
		free(it->name);
		free(it->file.data);
		return SB_ERR_NOMEM;
	}
	snprintf(it->file.path, plen, "%s/%s", results_dir, file);
	snprintf(it->name, strlen(BUDGET_RESULTS_PREFIX) + strlen(file) + 1, "%s%s",
	         BUDGET_RESULTS_PREFIX, file);
	memcpy(it->file.data, c->content, c->len + 1);
	it->file.len = c->len;
	it->block = c->block;
	it->size = c->len;
	p->n++;
	return SB_OK;
}

/* What a persisted result costs in the context: its preview's size. */
static size_t budget_preview_cost(size_t len)
{
	return (len < BUDGET_PREVIEW_BYTES ? len : BUDGET_PREVIEW_BYTES) + 400;
}

int budget_plan(const json_t *results, const json_t *assistant, const struct tool_def *const *tools,
                size_t n_tools, const char *results_dir, const struct budget_limits *lim,
                struct budget_plan *out)
{
	const json_t *content = json_object_get(results, "content"), *b;
	size_t n = json_array_size(content), i, nc = 0, total = 0;
	size_t batch_max = lim && lim->batch_max ? lim->batch_max : BUDGET_BATCH_MAX_DEFAULT;
	struct budget_cand *c = NULL;
	int rc = SB_ERR_NOMEM;

	memset(out, 0, sizeof *out);
	if (!results_dir || !*results_dir || n == 0)
		return SB_OK;
	c = calloc(n, sizeof *c);
	if (!c)
		goto out;
	json_array_foreach(content, i, b)
	{
		const json_t *v = json_object_get(b, "content");
		const struct tool_def *def;
		const char *id = budget_str(json_object_get(b, "tool_use_id"));

		if (strcmp(budget_str(json_object_get(b, "type")), "tool_result") != 0 ||
		    !json_is_string(v))
			continue;
		def = budget_lookup(tools, n_tools, budget_tool_name(assistant, id));
		c[nc].block = i;
		c[nc].id = id;
		c[nc].content = json_string_value(v);
		c[nc].len = json_string_length(v);
		c[nc].pages = budget_tool_pages(def);
		c[nc].persist =
		    !c[nc].pages && c[nc].len > budget_max_of(def, lim ? lim->tool_max : 0);
		total += c[nc].persist ? budget_preview_cost(c[nc].len) : c[nc].len;
		out->total_before += c[nc].len;
		nc++;
	}
	/* The batch: persist the largest remaining result until it fits. */
	while (total > batch_max) {
		struct budget_cand *big = NULL;

		for (i = 0; i < nc; i++)
			if (!c[i].persist && !c[i].pages && c[i].len > BUDGET_PREVIEW_BYTES + 400 &&
			    (!big || c[i].len > big->len))
				big = &c[i];
		if (!big)
			break; /* only paging tools' results are left: they were cut already */
		big->persist = true;
		total = total - big->len + budget_preview_cost(big->len);
	}
	for (i = 0; i < nc; i++)
		if (c[i].persist && (rc = budget_add_item(out, &c[i], results_dir)) != SB_OK)
			goto out;
	out->total_after = total;
	rc = SB_OK;
out:
	free(c);
	if (rc != SB_OK)
		budget_plan_free(out);
	return rc;
}

int budget_write(const char *dir, struct budget_file *files, size_t n)
{
	int rc = SB_OK;

	if (n && fs_mkdirs(dir, 0700) != SB_OK) {
		for (size_t i = 0; i < n; i++)
			files[i].rc = SB_ERR_IO;
		return SB_ERR_IO;
	}
	for (size_t i = 0; i < n; i++) {
		files[i].rc = fs_write_new(files[i].path, files[i].data, files[i].len, 0600);
		/* Already there: written by an earlier run of the same call
		 * (a replay); it is never rewritten. */
		if (files[i].rc != SB_OK && files[i].rc != SB_ERR_EXISTS && rc == SB_OK)
			rc = files[i].rc;
	}
	return rc;
}

int budget_apply(json_t *results, const struct budget_plan *plan, bool all)
{
	json_t *content = json_object_get(results, "content");

	for (size_t i = 0; i < plan->n; i++) {
		const struct budget_item *it = &plan->items[i];
		json_t *b = json_array_get(content, it->block);
		char *pv;

		if (!b || (!all && it->file.rc != SB_OK && it->file.rc != SB_ERR_EXISTS))
			continue; /* not written: the result stays (cut by the hard max) */
		pv = budget_preview(it->file.data, it->file.len, it->name);
		if (!pv || json_object_set_new(b, "content", json_string(pv))) {
			free(pv);
			return SB_ERR_NOMEM;
		}
		free(pv);
	}
	return SB_OK;
}

void budget_plan_free(struct budget_plan *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->n; i++) {
		free(p->items[i].name);
		free(p->items[i].file.path);
		free(p->items[i].file.data);
	}
	free(p->items);
	memset(p, 0, sizeof *p);
}

/* ---- reading the store ---- */

static bool budget_plain_name(const char *s)
{
	return *s && *s != '.' && !strchr(s, '/') && !strchr(s, '\\');
}

int budget_read_call(const struct tool_ctx *ctx, const json_t *input, tool_done_cb done, void *ud,
                     struct tool_run **run)
{
	const char *path = budget_str(json_object_get(input, "path"));
	struct tool_ctx c = *ctx;
	const char *name = NULL;
	json_t *in2;
	int rc;

	if (strncmp(path, BUDGET_RESULTS_PREFIX, strlen(BUDGET_RESULTS_PREFIX)) == 0) {
		name = path + strlen(BUDGET_RESULTS_PREFIX);
		c.workspace = ctx->results_dir;
	} else if (strncmp(path, BUDGET_ARCHIVE_PREFIX, strlen(BUDGET_ARCHIVE_PREFIX)) == 0) {
		size_t sl = ctx->session_id ? strlen(ctx->session_id) : 0;

		name = path + strlen(BUDGET_ARCHIVE_PREFIX);
		c.workspace = ctx->sessions_dir;
		/* Only this session's archives, never a transcript. */
		if (!sl || strncmp(name, ctx->session_id, sl) != 0 ||
		    strncmp(name + sl, ".archive-", 9) != 0)
			c.workspace = NULL;
	} else {
		return tool_read.call(ctx, input, done, ud, run);
	}
	if (!c.workspace || !budget_plain_name(name))
		return tool_job_error(ctx->loop, "no such saved result or archive in this session",
		                      done, ud, run);
	in2 = json_deep_copy(input);
	if (!in2 || json_object_set_new(in2, "path", json_string(name))) {
		json_decref(in2);
		return SB_ERR_NOMEM;
	}
	/* read copies what it needs before it returns. */
	rc = tool_read.call(&c, in2, done, ud, run);
	json_decref(in2);
	return rc;
}
