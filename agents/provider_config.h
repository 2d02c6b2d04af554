/*
 * provider_config.h - the keys of one entry of the top-level `providers` list.
 */
#ifndef SB_AGENTS_PROVIDER_CONFIG_H
#define SB_AGENTS_PROVIDER_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gateway/core/cfg.h"

enum provider_api {
	PROVIDER_API_OPENAI_CHAT = 0, /* "openai-chat" */
	PROVIDER_API_ANTHROPIC,       /* "anthropic-messages" */
	PROVIDER_API_SCRIPTED,        /* "scripted" */
};

struct provider_config {
	char *id;                /* the name before "/" in an agent's model */
	int api;                 /* enum provider_api */
	char *base_url;          /* default per api; no trailing slash */
	char *api_key;           /* secret; usually ${ENV} */
	int64_t timeout_ms;      /* one model call, streaming included */
	int64_t max_retries;     /* retries of one call on 429/5xx/timeouts */
	int64_t max_tokens;      /* default max output tokens per call */
	bool stream;             /* use streaming responses */
	char *script;            /* scripted: file (YAML or JSONL), relative to the home,
	                            or "builtin:offline" */
	char *anthropic_version; /* anthropic-version header */
};

/* The api's name as in the config ("openai-chat", ...). */
const char *provider_api_name(int api);

extern const struct cfg_section provider_config_section;

#endif
