/*
 * ui.h - the web UI: a gateway module that serves the control pages and the
 * web chat at / on the gateway port (docs/ui.md).
 *
 * What this room owns: the static files (gateway/ui/assets/, compiled in by
 * cmake/embed_ui.cmake) and how they are served: / is the page, /ui/<file>
 * its scripts and styles, each with a Content-Security-Policy that lets the
 * page load only its own files and talk only to its own origin, gzip when
 * the browser takes it, and ETags. The page is served only to requests whose
 * Host is an allowed origin (gateway/http/origin.h). Everything the page
 * shows it reads over the WebSocket control plane; signing in (the one-time
 * code, the session cookie) belongs to the control plane
 * (gateway/control/control_web.c).
 *
 * May use: gateway/core, gateway/config, gateway/http. Nothing uses it but
 * the module list (gateway/daemon/modules.c).
 *
 * Loop thread only.
 */
#ifndef SB_GATEWAY_UI_H
#define SB_GATEWAY_UI_H

#include "gateway/module.h"

extern const struct gateway_module_ops ui_module;

#endif
