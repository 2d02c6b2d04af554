/*
 * provider_config.c - the schema of one `providers` entry.
 */
#include "agents/provider_config.h"

#include <stddef.h>
#include <string.h>

static const char *const provider_api_names[] = {"openai-chat", "anthropic-messages", "scripted",
                                                 NULL};

const char *provider_api_name(int api)
{
	return api >= 0 && api < 3 ? provider_api_names[api] : "unknown";
}

static const char *provider_check_id(const void *field)
{
	const char *s = *(char *const *)field;

	if (!s)
		return NULL;
	for (const char *p = s; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' ||
		      *p == '_' || *p == '.'))
			return "a provider id may hold only lower-case letters, digits, \".\", "
			       "\"_\" and \"-\"";
	return NULL;
}

static const char *provider_check_url(const void *field)
{
	const char *s = *(char *const *)field;

	if (!s)
		return NULL;
	if (strncmp(s, "http://", 7) != 0 && strncmp(s, "https://", 8) != 0)
		return "expected an http:// or https:// URL";
	if (s[strlen(s) - 1] == '/')
		return "remove the trailing \"/\"";
	return NULL;
}

static const struct cfg_key provider_config_keys[] = {
    {
        .name = "id",
        .type = CFG_STRING,
        .offset = offsetof(struct provider_config, id),
        .min = 1,
        .max = 64,
        .flags = CFG_REQUIRED,
        .validate = provider_check_id,
        .doc = "The provider's name: an agent's `model: <id>/<model>` refers to it.",
    },
    {
        .name = "api",
        .type = CFG_ENUM,
        .offset = offsetof(struct provider_config, api),
        .choices = provider_api_names,
        .flags = CFG_REQUIRED,
        .doc = "The wire protocol: `openai-chat` (Chat Completions: OpenAI, Ollama, "
               "llama.cpp server, vLLM, OpenRouter, ...), `anthropic-messages` "
               "(Anthropic Messages API), or `scripted` (replays a script file).",
    },
    {
        .name = "base_url",
        .type = CFG_STRING,
        .offset = offsetof(struct provider_config, base_url),
        .min = 8,
        .max = 2048,
        .validate = provider_check_url,
        .doc = "The API's base URL without a trailing slash. Default: "
               "`https://api.openai.com/v1` for openai-chat, "
               "`https://api.anthropic.com` for anthropic-messages.",
    },
    {
        .name = "api_key",
        .type = CFG_STRING,
        .offset = offsetof(struct provider_config, api_key),
        .min = 1,
        .max = 4096,
        .flags = CFG_SECRET,
        .doc = "The API key. Keep it out of the file: `${OPENAI_API_KEY}` or "
               "`${file:secrets/openai}`.",
    },
    {
        .name = "timeout",
        .type = CFG_DURATION,
        .offset = offsetof(struct provider_config, timeout_ms),
        .min = 1000,
        .max = 3600000,
        .def = "120s",
        .doc = "The longest one model call may take, streaming included.",
    },
    {
        .name = "max_retries",
        .type = CFG_INT,
        .offset = offsetof(struct provider_config, max_retries),
        .min = 0,
        .max = 10,
        .def = "2",
        .doc = "Retries of one call after 429, 5xx or a timeout (with backoff, "
               "honouring Retry-After) before the next model of the fallback list.",
    },
    {
        .name = "max_tokens",
        .type = CFG_INT,
        .offset = offsetof(struct provider_config, max_tokens),
        .min = 1,
        .max = 1000000,
        .def = "4096",
        .doc = "Maximum output tokens per call.",
    },
    {
        .name = "stream",
        .type = CFG_BOOL,
        .offset = offsetof(struct provider_config, stream),
        .def = "true",
        .doc = "Stream responses (server-sent events), so replies appear as they are "
               "written.",
    },
    {
        .name = "script",
        .type = CFG_STRING,
        .offset = offsetof(struct provider_config, script),
        .min = 1,
        .max = 4096,
        .doc = "For `scripted`: the script file (YAML or JSONL), relative to the home "
               "directory, or `builtin:offline` (the demo that explains how to add a "
               "real model).",
    },
    {
        .name = "anthropic_version",
        .type = CFG_STRING,
        .offset = offsetof(struct provider_config, anthropic_version),
        .min = 1,
        .max = 64,
        .def = "2023-06-01",
        .doc = "For `anthropic-messages`: the `anthropic-version` header.",
    },
};

const struct cfg_section provider_config_section = {
    .name = "provider",
    .size = sizeof(struct provider_config),
    .keys = provider_config_keys,
    .nkeys = sizeof provider_config_keys / sizeof provider_config_keys[0],
    .doc = "One entry of the `providers` list: a model API the agents can call.",
};
