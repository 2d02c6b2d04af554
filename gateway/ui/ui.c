/*
 * ui.c - serves the web UI's files. See ui.h.
 *
 * Every answer carries the same security headers: a Content-Security-Policy
 * that allows the page's own scripts, styles and images and a connection
 * back to its own origin (ws:// and wss:// of the Host it was loaded from,
 * which must be an allowed origin) and nothing else, no framing, no
 * referrer, no MIME sniffing. Files are revalidated (no-cache + ETag), so a
 * new gateway build is picked up at the next load.
 */
#include "gateway/ui/ui.h"
#include "gateway/ui/ui_assets.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/config/config.h"
#include "gateway/core/err.h"
#include "gateway/core/log.h"
#include "gateway/http/origin.h"
#include "gateway/http/server.h"

#define UI_HOST_MAX 256
#define UI_HDR_MAX 768

struct ui {
	struct gateway_ctx ctx;
};

const struct ui_asset *ui_asset_find(const char *path)
{
	for (size_t i = 0; i < ui_n_assets; i++)
		if (strcmp(ui_assets[i].path, path) == 0)
			return &ui_assets[i];
	return NULL;
}

/* Whether an Accept-Encoding value takes gzip (named, and not with q=0). */
static bool ui_takes_gzip(const char *ae)
{
	const char *p = strstr(ae, "gzip"), *q;

	if (!p)
		return false;
	q = p + 4;
	while (*q == ' ')
		q++;
	if (strncmp(q, ";q=", 3) != 0)
		return true;
	return strtod(q + 3, NULL) > 0;
}

static void ui_text(struct server_request *r, int status, const char *msg)
{
	static const char *const hdrs[] = {"X-Content-Type-Options: nosniff",
	                                   "Cache-Control: no-store", NULL};

	server_respond(r, status, "text/plain; charset=utf-8", msg, strlen(msg), hdrs);
}

static void ui_serve(void *ud, struct server_request *r)
{
	struct ui *u = ud;
	struct config *cfg = u->ctx.host->config(u->ctx.host->ctx);
	const char *path = server_req_path(r);
	const struct ui_asset *a;
	char host[UI_HOST_MAX], ae[256], inm[256];
	char csp[UI_HDR_MAX], etag[96];
	const char *hdrs[16];
	size_t n = 0;
	bool gz;

	if (strcmp(path, "/") == 0 || strcmp(path, "/index.html") == 0)
		a = ui_asset_find("/ui/index.html");
	else if (strcmp(path, "/favicon.ico") == 0)
		a = ui_asset_find("/ui/icon.svg");
	else
		a = ui_asset_find(path);
	if (server_req_header(r, "host", host, sizeof host) <= 0 ||
	    !origin_host_allowed(cfg, server_port(u->ctx.server), host)) {
		log_info("ui", "page refused: the Host is not an allowed origin",
		         LOG_S("host", host), LOG_S("peer", server_req_peer(r)),
		         LOG_S("hint", "add the origin to gateway.control.allowed_origins"));
		ui_text(r, 403,
		        "This address is not one of the gateway's allowed origins "
		        "(gateway.control.allowed_origins).\n");
		goto out;
	}
	if (!a) {
		ui_text(r, 404, "not found\n");
		goto out;
	}
	gz = server_req_header(r, "accept-encoding", ae, sizeof ae) > 0 && ui_takes_gzip(ae);
	snprintf(csp, sizeof csp,
	         "Content-Security-Policy: default-src 'none'; script-src 'self'; "
	         "style-src 'self'; img-src 'self' data:; connect-src 'self' ws://%s wss://%s; "
	         "base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
	         host, host);
	snprintf(etag, sizeof etag, "ETag: %s", a->etag);
	hdrs[n++] = csp;
	hdrs[n++] = etag;
	hdrs[n++] = "Cache-Control: no-cache";
	hdrs[n++] = "Vary: Accept-Encoding";
	hdrs[n++] = "X-Content-Type-Options: nosniff";
	hdrs[n++] = "X-Frame-Options: DENY";
	hdrs[n++] = "Referrer-Policy: no-referrer";
	hdrs[n++] = "Cross-Origin-Opener-Policy: same-origin";
	hdrs[n++] = "Cross-Origin-Resource-Policy: same-origin";
	hdrs[n++] = "Permissions-Policy: camera=(), microphone=(), geolocation=()";
	if (server_req_header(r, "if-none-match", inm, sizeof inm) > 0 && strstr(inm, a->etag)) {
		hdrs[n] = NULL;
		server_respond(r, 304, a->type, NULL, 0, hdrs);
		goto out;
	}
	if (gz)
		hdrs[n++] = "Content-Encoding: gzip";
	hdrs[n] = NULL;
	server_respond(r, 200, a->type, gz ? a->gz : a->data, gz ? a->gz_len : a->len, hdrs);
out:
	config_unref(cfg);
}

static int ui_start(const struct gateway_ctx *ctx, void **state)
{
	struct config *cfg = ctx->host->config(ctx->host->ctx);
	struct ui *u = NULL;
	int rc = SB_OK;

	*state = NULL;
	if (!cfg->gateway.ui.enabled || !cfg->gateway.control.enabled) {
		log_info("ui", "the web UI is off",
		         LOG_S("why", cfg->gateway.ui.enabled ? "gateway.control.enabled is false"
		                                              : "gateway.ui.enabled is false"));
		goto out;
	}
	rc = SB_ERR_NOMEM;
	u = calloc(1, sizeof *u);
	if (!u)
		goto out;
	u->ctx = *ctx;
	if ((rc = server_route(ctx->server, "ui", "/", 0, SERVER_GET | SERVER_HEAD, ui_serve, u)) ||
	    (rc = server_route(ctx->server, "ui", "/index.html", 0, SERVER_GET | SERVER_HEAD,
	                       ui_serve, u)) ||
	    (rc = server_route(ctx->server, "ui", "/favicon.ico", 0, SERVER_GET | SERVER_HEAD,
	                       ui_serve, u)) ||
	    (rc = server_route(ctx->server, "ui", "/ui/", SERVER_PREFIX, SERVER_GET | SERVER_HEAD,
	                       ui_serve, u)))
		goto out;
	log_info("ui", "serving the web UI", LOG_S("path", "/"), LOG_I("files", (int64_t)ui_n_assets),
	         LOG_I("bytes_gzip", (int64_t)ui_assets_gzip_bytes));
	*state = u;
	u = NULL;
	rc = SB_OK;
out:
	free(u);
	config_unref(cfg);
	return rc;
}

static void ui_stop(void *state)
{
	free(state);
}

const struct gateway_module_ops ui_module = {
    .name = "ui",
    .start = ui_start,
    .stop = ui_stop,
};
