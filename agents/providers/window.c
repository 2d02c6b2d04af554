/*
 * window.c - asking an OpenAI-compatible server how large a model's context
 * window is (see provider_http.h, provider_http_window).
 *
 * A probe is a small chain of GET/POST requests on the host's httpc, one at
 * a time, each bounded at WINDOW_TIMEOUT_MS and WINDOW_BODY_MAX bytes. What
 * it learns is only an answer to "how many tokens", never a failure of
 * anything: every error ends the probe with window 0 ("the server does not
 * say"), and the caller falls back to its table.
 *
 * Loop thread only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agents/providers/provider_http.h"
#include "gateway/core/buf.h"
#include "gateway/core/err.h"
#include "gateway/core/jsonw.h"
#include "gateway/core/num.h"

#define WINDOW_TIMEOUT_MS 5000
#define WINDOW_BODY_MAX ((size_t)4 << 20)
#define WINDOW_DEFAULT_BASE_URL "https://api.openai.com/v1"

enum window_stage { WINDOW_MODELS = 0, WINDOW_PROPS, WINDOW_SHOW };

struct provider_probe {
	struct provider_http *p;
	char *model;
	char *base; /* base_url */
	char *root; /* base_url without a trailing "/v1" */
	enum window_stage stage;
	struct httpc_call *http;
	provider_window_cb done;
	void *ud;
	bool cancelled;
	bool ollama;   /* the server looks like Ollama */
	bool llamacpp; /* ... like llama.cpp */
	int64_t train; /* llama.cpp's n_ctx_train, the last resort */
};

static void window_free(struct provider_probe *pr)
{
	free(pr->model);
	free(pr->base);
	free(pr->root);
	free(pr);
}

static void window_finish(struct provider_probe *pr, int64_t window, const char *source)
{
	if (!pr->cancelled)
		pr->done(pr->ud, window > 0 ? window : 0, window > 0 ? source : "");
	window_free(pr);
}

/* A positive integer member (numbers given as text too), else 0. */
static int64_t window_int(const json_t *o, const char *key)
{
	const json_t *v = json_object_get(o, key);
	int64_t n = 0;

	if (json_is_integer(v))
		n = json_integer_value(v);
	else if (json_is_real(v))
		n = (int64_t)json_real_value(v);
	else if (json_is_string(v) &&
	         num_parse_i64(json_string_value(v), 1, INT64_MAX, &n) != SB_OK)
		n = 0;
	return n > 0 && n < (int64_t)1 << 40 ? n : 0;
}

static int window_request(struct provider_probe *pr, const char *method, const char *path_root,
                          const char *path, const char *body);

/* GET /models: the model's entry (its id, or the only one). */
static bool window_from_models(struct provider_probe *pr, const json_t *j, int64_t *window,
                               char *src, size_t src_size)
{
	const json_t *data = json_object_get(j, "data"), *e, *pick = NULL;
	size_t i;
	static const char *const keys[] = {"max_model_len", "context_length", "context_window",
	                                   "max_context_length"};

	json_array_foreach(data, i, e)
	{
		const char *owner = json_string_value(json_object_get(e, "owned_by"));
		const char *id = json_string_value(json_object_get(e, "id"));

		if (owner && (strcmp(owner, "library") == 0 || strcmp(owner, "ollama") == 0))
			pr->ollama = true;
		if (owner && strcmp(owner, "llamacpp") == 0)
			pr->llamacpp = true;
		if (id && strcmp(id, pr->model) == 0)
			pick = e;
	}
	if (!pick && json_array_size(data) == 1)
		pick = json_array_get(data, 0); /* a one-model server names it its own way */
	if (!pick)
		return false;
	for (i = 0; i < sizeof keys / sizeof keys[0]; i++)
		if ((*window = window_int(pick, keys[i])) > 0) {
			snprintf(src, src_size, "GET /models %s", keys[i]);
			return true;
		}
	if ((*window = window_int(json_object_get(pick, "top_provider"), "context_length")) > 0) {
		snprintf(src, src_size, "GET /models top_provider.context_length");
		return true;
	}
	if ((*window = window_int(json_object_get(pick, "meta"), "n_ctx")) > 0) {
		snprintf(src, src_size, "GET /models meta.n_ctx");
		return true;
	}
	if (json_is_object(json_object_get(pick, "meta")))
		pr->llamacpp = true;
	pr->train = window_int(json_object_get(pick, "meta"), "n_ctx_train");
	return false;
}

/* Ollama's POST /api/show: num_ctx of the parameters (what the server runs
 * the model with), else the model's own <arch>.context_length. */
static bool window_from_show(const json_t *j, int64_t *window, char *src, size_t src_size)
{
	const char *params = json_string_value(json_object_get(j, "parameters"));
	const json_t *info = json_object_get(j, "model_info"), *v;
	const char *k, *p;

	for (p = params; p && (p = strstr(p, "num_ctx")) != NULL; p += 7) {
		int64_t n = 0;
		const char *q = p + 7;

		if (p != params && p[-1] != '\n')
			continue;
		while (*q == ' ' || *q == '\t')
			q++;
		n = strtoll(q, NULL, 10);
		if (n > 0) {
			*window = n;
			snprintf(src, src_size, "POST /api/show num_ctx");
			return true;
		}
	}
	json_object_foreach((json_t *)info, k, v)
	{
		size_t n = strlen(k);

		if (n > 15 && strcmp(k + n - 15, ".context_length") == 0 && json_is_integer(v) &&
		    json_integer_value(v) > 0) {
			*window = json_integer_value(v);
			snprintf(src, src_size, "POST /api/show %.60s", k);
			return true;
		}
	}
	return false;
}

/* The next request after a stage that did not say, or the end. */
static void window_next(struct provider_probe *pr)
{
	char body[600];
	json_t *b;
	char *text;

	if (pr->stage == WINDOW_MODELS && pr->llamacpp && !pr->ollama) {
		pr->stage = WINDOW_PROPS;
		if (window_request(pr, "GET", pr->root, "/props", NULL) == SB_OK)
			return;
	}
	if (pr->stage <= WINDOW_PROPS && (pr->ollama || strstr(pr->base, ":11434"))) {
		pr->stage = WINDOW_SHOW;
		b = json_pack("{ss}", "model", pr->model);
		text = b ? jsonw_dumps(b, 0, NULL) : NULL;
		json_decref(b);
		snprintf(body, sizeof body, "%s", text ? text : "{}");
		free(text);
		if (window_request(pr, "POST", pr->root, "/api/show", body) == SB_OK)
			return;
	}
	if (pr->train > 0) {
		window_finish(pr, pr->train, "GET /models meta.n_ctx_train");
		return;
	}
	window_finish(pr, 0, "");
}

static void window_on_http(void *ud, int rc, const struct httpc_response *r)
{
	struct provider_probe *pr = ud;
	int64_t window = 0;
	char src[128] = "";
	json_t *j = NULL;
	bool found = false;

	pr->http = NULL;
	if (pr->cancelled) {
		window_free(pr);
		return;
	}
	if (rc == SB_OK && r->status >= 200 && r->status < 300 && r->body.len)
		j = json_loadb(r->body.data, r->body.len, 0, NULL);
	if (j && pr->stage == WINDOW_MODELS)
		found = window_from_models(pr, j, &window, src, sizeof src);
	else if (j && pr->stage == WINDOW_PROPS) {
		window = window_int(json_object_get(j, "default_generation_settings"), "n_ctx");
		if (window <= 0)
			window = window_int(j, "n_ctx");
		found = window > 0;
		snprintf(src, sizeof src, "GET /props n_ctx");
	} else if (j && pr->stage == WINDOW_SHOW)
		found = window_from_show(j, &window, src, sizeof src);
	json_decref(j);
	if (found) {
		window_finish(pr, window, src);
		return;
	}
	window_next(pr);
}

static int window_request(struct provider_probe *pr, const char *method, const char *path_root,
                          const char *path, const char *body)
{
	struct httpc *http =
	    pr->p->host.http_client ? pr->p->host.http_client(pr->p->host.ctx) : NULL;
	const struct provider_config *cfg = pr->p->base.cfg;
	struct httpc_request hr = {0};
	const char *headers[4];
	struct buf url, auth;
	size_t n = 0;
	int rc = SB_ERR_HTTP;

	buf_init(&url, 8192);
	buf_init(&auth, 8192);
	if (!http)
		goto out;
	rc = buf_printf(&url, "%s%s", path_root, path);
	if (rc)
		goto out;
	headers[n++] = "Accept: application/json";
	if (body)
		headers[n++] = "Content-Type: application/json";
	if (cfg->api_key && *cfg->api_key) {
		rc = buf_printf(&auth, "Authorization: Bearer %s", cfg->api_key);
		if (rc)
			goto out;
		headers[n++] = auth.data;
	}
	headers[n] = NULL;
	hr.method = method;
	hr.url = url.data;
	hr.headers = headers;
	hr.body = body;
	hr.body_len = body ? strlen(body) : 0;
	hr.timeout_ms = WINDOW_TIMEOUT_MS;
	hr.max_response_bytes = WINDOW_BODY_MAX;
	rc = httpc_request(http, &hr, window_on_http, pr, &pr->http);
out:
	buf_free(&url);
	if (auth.data)
		memset(auth.data, 0, auth.len);
	buf_free(&auth);
	return rc;
}

int provider_http_window(struct provider *p, const char *model, provider_window_cb done, void *ud,
                         struct provider_probe **out)
{
	struct provider_http *ph = (struct provider_http *)p;
	struct provider_probe *pr;
	const char *base;
	size_t n;
	int rc;

	if (out)
		*out = NULL;
	if (!p || !model || !done)
		return SB_ERR_INVAL;
	pr = calloc(1, sizeof *pr);
	if (!pr)
		return SB_ERR_NOMEM;
	base = p->cfg->base_url ? p->cfg->base_url : WINDOW_DEFAULT_BASE_URL;
	pr->p = ph;
	pr->model = strdup(model);
	pr->base = strdup(base);
	pr->root = strdup(base);
	pr->done = done;
	pr->ud = ud;
	if (!pr->model || !pr->base || !pr->root) {
		free(pr->model);
		free(pr->base);
		free(pr->root);
		free(pr);
		return SB_ERR_NOMEM;
	}
	n = strlen(pr->root);
	if (n >= 3 && strcmp(pr->root + n - 3, "/v1") == 0)
		pr->root[n - 3] = '\0';
	pr->stage = WINDOW_MODELS;
	rc = window_request(pr, "GET", pr->base, "/models", NULL);
	if (rc != SB_OK) {
		window_free(pr);
		return rc;
	}
	if (out)
		*out = pr;
	return SB_OK;
}

void provider_http_window_cancel(struct provider_probe *pr)
{
	if (!pr || pr->cancelled)
		return;
	pr->cancelled = true;
	/* httpc runs window_on_http (aborted), which frees the probe. */
	if (pr->http)
		httpc_cancel(pr->http);
}
