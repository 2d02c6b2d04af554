/*
 * ui_assets.h - the web UI's files, compiled into the binary by
 * cmake/embed_ui.cmake from gateway/ui/assets/ (each as it is and
 * gzip-compressed, with an ETag from its SHA-256).
 */
#ifndef SB_GATEWAY_UI_ASSETS_H
#define SB_GATEWAY_UI_ASSETS_H

#include <stddef.h>

struct ui_asset {
	const char *path; /* "/ui/app.js" */
	const char *type; /* Content-Type */
	const unsigned char *data;
	size_t len;
	const unsigned char *gz; /* gzip of data */
	size_t gz_len;
	const char *etag; /* a quoted strong ETag */
};

extern const struct ui_asset ui_assets[];
extern const size_t ui_n_assets;
extern const size_t ui_assets_bytes;      /* every asset, as it is */
extern const size_t ui_assets_gzip_bytes; /* every asset, compressed */

/* The asset served at path ("/ui/app.js"); NULL when there is none. */
const struct ui_asset *ui_asset_find(const char *path);

#endif
