/*
 * config.h - the gateway's configuration snapshot.
 *
 * One YAML file ($SWITCHBOARD_HOME/switchboard.yaml) becomes one immutable,
 * reference-counted struct config. Reload builds a whole new snapshot and
 * swaps it in only if it is valid; holders of the old snapshot keep it until
 * they unref it. config_ref/config_unref are thread-safe (atomic counter);
 * everything else is loop-thread or CLI code.
 */
#ifndef SB_GATEWAY_CONFIG_H
#define SB_GATEWAY_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "agents/agent_config.h"
#include "agents/provider_config.h"
#include "bindings/bindings.h"
#include "bindings/bindings_config.h"
#include "gateway/config/channels_config.h"
#include "gateway/core/cfg.h"
#include "gateway/config/cron_config.h"

/* The WebSocket control plane (gateway/control/control.c): gateway.control. */
struct config_control {
	bool enabled;
	char **paths; /* WebSocket paths on the gateway port; none: "/" and "/ws" */
	size_t n_paths;
	int64_t max_payload;          /* largest frame once connected */
	int64_t max_buffered;         /* send queue bytes per connection */
	int64_t tick_interval_ms;     /* tick events, and the policy clients see */
	int64_t handshake_timeout_ms; /* from upgrade to a successful connect */
	int64_t auth_failures;        /* failed connects per address within auth_window ... */
	int64_t auth_window_ms;
	int64_t lockout_ms; /* ... lock the address out this long */
	/* Browser origins ("https://gw.example.com") that may open the control
	 * plane and sign in to the web UI; none: the gateway's own address on
	 * loopback (gateway/http/origin.h). */
	char **allowed_origins;
	size_t n_allowed_origins;
};

/* The web UI on the gateway port (gateway/ui/, docs/ui.md). */
struct config_ui {
	bool enabled;
	int64_t session_ttl_ms; /* a browser sign-in lasts this long */
	int64_t code_ttl_ms;    /* a one-time code of `switchboard dashboard` */
};

struct config_gateway {
	char *bind;                  /* listen address, default 127.0.0.1 */
	int64_t port;                /* default 8790 */
	int64_t drain_timeout_ms;    /* SIGTERM: finish in-flight work for this long */
	int64_t max_body_bytes;      /* request body cap */
	int64_t max_connections;     /* concurrent HTTP/WS connections */
	int64_t max_connections_per_address; /* from one non-loopback address; 0: no cap */
	int64_t header_timeout_ms;   /* a request's headers must be in by then */
	int64_t body_timeout_ms;     /* and its body by then */
	int64_t max_concurrent_runs; /* agent runs at once, over all sessions */
	char *auth_token;            /* secret; required for a non-loopback bind */
	bool watch_config;           /* reload when the file changes */
	struct config_control control;
	struct config_ui ui;
};

enum config_log_level { CONFIG_LOG_DEBUG, CONFIG_LOG_INFO, CONFIG_LOG_WARN, CONFIG_LOG_ERROR };
enum config_log_format { CONFIG_LOG_LOGFMT, CONFIG_LOG_JSON };

struct config_log {
	int level;  /* enum config_log_level */
	int format; /* enum config_log_format */
	int64_t file_max;  /* bytes of <home>/logs/gateway.log before it rotates; 0 = no file */
	int64_t file_keep; /* rotated files kept (gateway.log.1 ...) */
};

enum config_store_backend { CONFIG_STORE_SQLITE };

struct config_store {
	int backend;             /* enum config_store_backend */
	char *path;              /* resolved against the home; default state.db */
	int64_t busy_timeout_ms; /* SQLite busy timeout */
	int64_t batch_max;       /* most operations in one group commit */
	int64_t queue_max;       /* most operations waiting for the writer */
};

struct config_http_client {
	int64_t timeout_ms; /* whole-request default */
	int64_t connect_timeout_ms;
	int64_t max_connections; /* connection cache and total cap */
	int64_t max_host_connections;
	int64_t max_response_bytes; /* default response body cap */
	char *ca_file;              /* optional CA bundle; default: system store */
};

/* The OpenAI-compatible endpoint (gateway/http/openai_api.c). */
struct config_openai_api {
	bool enabled;
	char *path_prefix;           /* "/v1" */
	int64_t sync_timeout_ms;     /* how long a request waits for the agent's reply */
	int64_t stream_keepalive_ms; /* SSE comment this often while a stream is idle */
};

struct config {
	int refs;   /* atomic; use config_ref/config_unref */
	char *path; /* the file it came from (absolute) */
	char *home; /* $SWITCHBOARD_HOME (absolute) */

	struct config_gateway gateway;
	struct config_log log;
	struct config_store store;
	struct config_http_client http_client;
	struct agent_config *agents;
	size_t n_agents;
	struct provider_config *providers;
	size_t n_providers;
	struct binding_config *bindings; /* in file order */
	size_t n_bindings;
	struct session_config session;
	struct channels_config channels;
	struct config_openai_api openai_api;
	struct cron_job_config *cron; /* jobs declared in the file */
	size_t n_cron;
	struct security_config security; /* agents/safety/permissions.h */

	char **secrets; /* values of every CFG_SECRET key, for log redaction */
	size_t n_secrets;
	/* Every path the gateway keeps to itself, absolute: the home, this
	 * file, the store and its -wal/-shm/-journal, the home's
	 * gateway.token, secrets/ and agents/, each ${file:...} secret. The
	 * sandbox hides them all (agents/safety/sandbox.h). */
	char **private_paths;
	size_t n_private_paths;
	unsigned char digest[32]; /* BLAKE2b of the file bytes, to skip no-op reloads */
};

/* The schema of the whole file (for docs and tests). */
extern const struct cfg_section config_root_section;

/* Loads and validates path (at most 1 MiB). home resolves relative paths
 * (store.path, agent workspaces, ${file:...}); NULL means the working
 * directory. Both are recorded absolute in the snapshot. Errors name the
 * file as path was given. On SB_OK *out holds one reference. Otherwise *out
 * is NULL and: SB_ERR_CONFIG, errs lists every problem; SB_ERR_IO, the file
 * cannot be read (also added to errs, without a position); SB_ERR_NOMEM.
 * Loop thread or CLI (it reads files and may block briefly). */
int config_load(const char *path, const char *home, struct config **out, struct cfg_errors *errs);

/* Same from NUL-terminated text (tests, `config check -`). file names the
 * source in errors (NULL: "switchboard.yaml"); the snapshot's path is file
 * resolved against home. The digest is of text. */
int config_load_text(const char *text, const char *file, const char *home, struct config **out,
                     struct cfg_errors *errs);

/* Takes another reference (returns c; NULL gives NULL) / drops one, freeing
 * the snapshot with the last. Any thread. */
struct config *config_ref(struct config *c);
void config_unref(struct config *c); /* NULL is a no-op */

/* Calls fn (may be NULL) with the key path ("gateway.port") of each key
 * that changed between old and new_ and needs a restart to take effect; the
 * path is borrowed for the call. Returns the count. Any thread holding both
 * references. */
int config_restart_changes(const struct config *old, const struct config *new_,
                           void (*fn)(void *ud, const char *path), void *ud);

/* Whether host (a gateway.bind value) is a loopback address: 127.0.0.0/8,
 * ::1 (also as [::1] and ::ffff:127.x.y.z) or localhost; NULL counts as
 * loopback (the default bind). Any thread. */
bool config_is_loopback(const char *host);

/* gateway.max_concurrent_runs as it applies: the value set, or for 0
 * (auto) 16 per online CPU, but no more than the open-file limit leaves
 * room for (8 descriptors a run beside 256 for the rest), and at least 4.
 * Any thread. */
size_t config_max_runs(const struct config *c);

/* The agent marked default, else the only agent, else NULL. Borrowed from c. */
const struct agent_config *config_default_agent(const struct config *c);

/* The provider with this id, or NULL. */
const struct provider_config *config_provider(const struct config *c, const char *id);

/* The agent with this id, or NULL. */
const struct agent_config *config_agent(const struct config *c, const char *id);

/* Compiles the snapshot's bindings, session and channel access settings
 * into a routing table (bindings/bindings.h); binding positions are shown
 * against the file's base name. The table is independent of c once built.
 * Returns the codes of bindings_table_new. Any thread holding c. */
int config_bindings_table(const struct config *c, struct bindings_table **out);

/* Writes the commented default configuration that `switchboard init`
 * creates (mode 0600; the parent directory must exist), listening on port
 * (0: the default, 8790). It loads cleanly
 * with config_load. Returns SB_OK; SB_ERR_EXISTS if path exists (never
 * overwrites); SB_ERR_IO otherwise (a partial file is removed). */
int config_write_default(const char *path, int port);

/* What a valid configuration can still get wrong on this machine, for
 * `config check` and the gateway's start and reload: errors (an agent's
 * workspace that does not exist or is not a directory: every run of it
 * would fail) and warnings (a binding that can never match: an account the
 * channel does not have, or no `account` on a channel without one called
 * "default"). Appended to the lists; file:line:col where known. Blocking
 * (stat). */
void config_lint(const struct config *cfg, struct cfg_errors *errors, struct cfg_errors *warnings);

/* What `switchboard eval` changes in its private snapshot of one agent. */
struct config_isolation {
	const char *agent_id;  /* the agent evaluated */
	const char *home;      /* absolute: the store, transcripts and tool results go here */
	const char *workspace; /* absolute: the agent's workspace (a copy); NULL keeps it */
	const char *script;    /* absolute: a script the agent's model becomes (a scripted
	                        * provider added under an id the file does not use); or NULL */
	const char *model;     /* PROVIDER/MODEL of the file instead of the agent's; or NULL */
};

/* Rewrites the snapshot c (which nobody else may hold yet: one reference,
 * not shared) for an isolated run of one agent: c->home and the store move
 * to iso->home (the operator's home, configuration and store stay in the
 * private paths the sandbox hides, the new home is added to them), the
 * agent's workspace to iso->workspace, and its model to the script or
 * model given, without fallbacks. why (may be "" on success) says what is
 * wrong otherwise. Returns SB_OK; SB_ERR_NOTFOUND (no such agent or
 * provider); SB_ERR_INVAL (model is not PROVIDER/MODEL); SB_ERR_NOMEM.
 * CLI only. */
int config_isolate_agent(struct config *c, const struct config_isolation *iso, char *why,
                         size_t why_size);

/* Writes the markdown reference of every key (the generated part of
 * docs/configuration.md; `switchboard config schema`). */
void config_print_reference(FILE *out);

#endif
