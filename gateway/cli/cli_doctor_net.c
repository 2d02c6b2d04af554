/*
 * cli_doctor_net.c - `switchboard doctor`'s provider checks: for every
 * configured provider one cheap authenticated request, all at once on a
 * loop of their own, each bounded by a short timeout:
 *
 *   openai-chat         GET {base_url}/models   Authorization: Bearer KEY
 *   anthropic-messages  GET {base_url}/v1/models  x-api-key, anthropic-version
 *   scripted            nothing to reach
 *
 * A 2xx answer is "ok", 401/403 "key rejected", no answer (connection
 * refused, DNS, TLS, the timeout) "unreachable", any other status
 * "unexpected status". The key is sent, never printed; neither is the
 * answer's body (a provider may echo the key in it), nor user:password in
 * a base_url.
 */
#include "gateway/cli/cli_doctor.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "agents/provider_config.h"
#include "gateway/config/config.h"
#include "gateway/core/buf.h"
#include "gateway/core/err.h"
#include "gateway/core/httpc.h"
#include "gateway/daemon/host_common.h"

#define DOCTOR_NET_BODY_MAX ((size_t)4 << 20)
#define DOCTOR_NET_URL_MAX 2048
#define DOCTOR_OPENAI_BASE "https://api.openai.com/v1"
#define DOCTOR_ANTHROPIC_BASE "https://api.anthropic.com"
#define DOCTOR_ANTHROPIC_VERSION "2023-06-01"

struct doctor_probe {
	const struct provider_config *p;
	char url[DOCTOR_NET_URL_MAX];   /* what is requested */
	char shown[DOCTOR_NET_URL_MAX]; /* the same without user:password@ */
	bool started;
	bool done;
	int rc;
	long status;
	long models; /* entries in the answer's "data" list, -1 when unknown */
	double seconds;
	char error[512];
};

/* url without the userinfo of its authority. */
static void doctor_url_shown(const char *url, char *out, size_t size)
{
	const char *auth = strstr(url, "://"), *end, *at;

	if (!auth) {
		snprintf(out, size, "%s", url);
		return;
	}
	auth += 3;
	end = auth + strcspn(auth, "/?#");
	at = memchr(auth, '@', (size_t)(end - auth));
	if (!at) {
		snprintf(out, size, "%s", url);
		return;
	}
	snprintf(out, size, "%.*s%s", (int)(auth - url), url, at + 1);
}

static void doctor_probe_done(void *ud, int rc, const struct httpc_response *r)
{
	struct doctor_probe *pr = ud;

	pr->done = true;
	pr->rc = rc;
	pr->status = r ? r->status : 0;
	pr->seconds = r ? r->total_s : 0;
	pr->models = -1;
	if (rc != SB_OK)
		snprintf(pr->error, sizeof pr->error, "%s",
		         r && r->error ? r->error : sb_strerror(rc));
	if (rc == SB_OK && r->status >= 200 && r->status < 300 && r->body.len) {
		json_t *j = json_loadb(r->body.data, r->body.len, 0, NULL);
		const json_t *data = json_object_get(j, "data");

		if (json_is_array(data))
			pr->models = (long)json_array_size(data);
		json_decref(j);
	}
}

/* Starts the check of pr on h. SB_OK, or an error with pr->error set. */
static int doctor_probe_start(struct httpc *h, struct doctor_probe *pr, long timeout_ms)
{
	const struct provider_config *p = pr->p;
	const char *base;
	const char *headers[4] = {NULL};
	struct buf auth, version;
	struct httpc_request req;
	size_t n = 0, len;
	int rc;

	buf_init(&auth, 16384);
	buf_init(&version, 512);
	if (p->api == PROVIDER_API_ANTHROPIC)
		base = p->base_url && *p->base_url ? p->base_url : DOCTOR_ANTHROPIC_BASE;
	else
		base = p->base_url && *p->base_url ? p->base_url : DOCTOR_OPENAI_BASE;
	len = strlen(base);
	while (len && base[len - 1] == '/')
		len--;
	if (snprintf(pr->url, sizeof pr->url, "%.*s%s", (int)len, base,
	             p->api == PROVIDER_API_ANTHROPIC ? "/v1/models" : "/models") >=
	    (int)sizeof pr->url) {
		snprintf(pr->error, sizeof pr->error, "base_url is too long");
		rc = SB_ERR_TOOBIG;
		goto out;
	}
	doctor_url_shown(pr->url, pr->shown, sizeof pr->shown);
	rc = SB_OK;
	if (p->api_key && *p->api_key) {
		if (p->api == PROVIDER_API_ANTHROPIC)
			rc = buf_printf(&auth, "x-api-key: %s", p->api_key);
		else
			rc = buf_printf(&auth, "Authorization: Bearer %s", p->api_key);
		headers[n++] = auth.data;
	}
	if (rc == SB_OK && p->api == PROVIDER_API_ANTHROPIC) {
		rc = buf_printf(&version, "anthropic-version: %s",
		                p->anthropic_version && *p->anthropic_version
		                    ? p->anthropic_version
		                    : DOCTOR_ANTHROPIC_VERSION);
		headers[n++] = version.data;
	}
	if (rc != SB_OK) {
		snprintf(pr->error, sizeof pr->error, "the key is too long");
		goto out;
	}
	memset(&req, 0, sizeof req);
	req.method = "GET";
	req.url = pr->url;
	req.headers = headers;
	req.timeout_ms = timeout_ms;
	req.max_response_bytes = DOCTOR_NET_BODY_MAX;
	rc = httpc_request(h, &req, doctor_probe_done, pr, NULL);
	if (rc != SB_OK)
		snprintf(pr->error, sizeof pr->error, "cannot start the request: %s",
		         sb_strerror(rc));
	else
		pr->started = true;
out:
	if (auth.data)
		memset(auth.data, 0, auth.len); /* the key */
	buf_free(&auth);
	buf_free(&version);
	return rc;
}

/* The finding for one finished probe. Returns 1 when it is a failure. */
static int doctor_probe_report(const struct doctor_probe *pr, long timeout_ms)
{
	const struct provider_config *p = pr->p;
	char area[300], text[DOCTOR_NET_URL_MAX + 1200];
	const char *level, *verdict;
	json_t *extra;
	int failed = 0;

	snprintf(area, sizeof area, "provider %s", p->id);
	if (!pr->started) {
		level = "fail", verdict = "error", failed = 1;
		snprintf(text, sizeof text, "%s (%s): %s", pr->shown[0] ? pr->shown : "-",
		         provider_api_name(p->api), pr->error);
	} else if (pr->rc == SB_ERR_TIMEOUT) {
		level = "fail", verdict = "unreachable", failed = 1;
		snprintf(text, sizeof text, "unreachable: %s gave no answer within %ld ms",
		         pr->shown, timeout_ms);
	} else if (pr->rc != SB_OK) {
		level = "fail", verdict = "unreachable", failed = 1;
		snprintf(text, sizeof text,
		         "unreachable: %s: %s (check base_url, DNS, the network "
		         "and TLS)",
		         pr->shown, pr->error);
	} else if (pr->status == 401 || pr->status == 403) {
		level = "fail", verdict = "key_rejected", failed = 1;
		snprintf(text, sizeof text, "key rejected: %s answered HTTP %ld%s (check api_key)",
		         pr->shown, pr->status,
		         p->api_key && *p->api_key ? "" : "; the provider has no api_key set");
	} else if (pr->status >= 200 && pr->status < 300) {
		char models[64] = "";

		level = "ok", verdict = "ok";
		if (pr->models >= 0)
			snprintf(models, sizeof models, ", %ld model%s", pr->models,
			         pr->models == 1 ? "" : "s");
		snprintf(text, sizeof text, "%s answered HTTP %ld in %.0f ms%s%s", pr->shown,
		         pr->status, pr->seconds * 1000, models,
		         p->api_key && *p->api_key ? ", key accepted" : " (no api_key set)");
	} else {
		level = "warn", verdict = "unexpected_status";
		snprintf(text, sizeof text,
		         "unexpected status: %s answered HTTP %ld; the key could not be checked",
		         pr->shown, pr->status);
	}
	extra = json_pack("{ss ss ss}", "provider", p->id, "url", pr->shown, "result", verdict);
	if (extra && pr->started && pr->rc == SB_OK)
		json_object_set_new(extra, "http_status", json_integer(pr->status));
	doctor_finding(level, area, text, extra);
	json_decref(extra);
	return failed;
}

int doctor_providers(const struct config *cfg, long timeout_ms)
{
	struct doctor_probe *probes = NULL;
	struct httpc *h = NULL;
	uv_loop_t loop;
	size_t n = cfg->n_providers;
	int failed = 0, rc;
	bool loop_ok = false, any = false;

	if (n == 0) {
		doctor_finding("ok", "providers", "no providers are configured", NULL);
		return 0;
	}
	probes = calloc(n, sizeof *probes);
	if (!probes || uv_loop_init(&loop) != 0) {
		free(probes);
		doctor_finding("fail", "providers", "cannot check the providers: out of memory",
		               NULL);
		return 1;
	}
	loop_ok = true;
	rc = host_common_httpc_new(&h, &loop, cfg);
	if (rc != SB_OK) {
		h = NULL;
		doctor_finding("fail", "providers", "cannot start the HTTP client", NULL);
		failed = 1;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		probes[i].p = &cfg->providers[i];
		if (probes[i].p->api == PROVIDER_API_SCRIPTED)
			continue;
		if (doctor_probe_start(h, &probes[i], timeout_ms) == SB_OK)
			any = true;
	}
	if (any)
		uv_run(&loop, UV_RUN_DEFAULT); /* every request has its timeout */
	for (size_t i = 0; i < n; i++) {
		const struct provider_config *p = probes[i].p;

		if (p->api == PROVIDER_API_SCRIPTED) {
			char area[300];
			json_t *extra = json_pack("{ss ss}", "provider", p->id, "result", "ok");

			snprintf(area, sizeof area, "provider %s", p->id);
			doctor_finding("ok", area,
			               "scripted: replies from a script, nothing to reach", extra);
			json_decref(extra);
			continue;
		}
		failed |= doctor_probe_report(&probes[i], timeout_ms);
	}
out:
	httpc_close(h);
	if (loop_ok) {
		uv_run(&loop, UV_RUN_DEFAULT);
		if (uv_loop_close(&loop) != 0)
			fprintf(stderr, "switchboard doctor: handles left open\n");
	}
	free(probes);
	return failed;
}
