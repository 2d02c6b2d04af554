/*
 * provider.c - the provider registry and the error vocabulary shared by
 * every provider (see provider.h).
 */
#include "agents/provider.h"

#include <stddef.h>
#include <string.h>

static const struct provider_ops *const provider_all[] = {
    &provider_openai_ops,
    &provider_anthropic_ops,
    &provider_scripted_ops,
};

const struct provider_ops *provider_ops_for(const char *api)
{
	size_t i;

	if (!api)
		return NULL;
	for (i = 0; i < sizeof(provider_all) / sizeof(provider_all[0]); i++)
		if (strcmp(provider_all[i]->api, api) == 0)
			return provider_all[i];
	return NULL;
}

bool model_error_retryable(enum model_error_kind kind)
{
	switch (kind) {
	case MODEL_ERR_RATE_LIMIT:
	case MODEL_ERR_OVERLOADED:
	case MODEL_ERR_TIMEOUT:
	case MODEL_ERR_NETWORK:
	/* A truncated stream or a mangled body is usually a passing fault
	 * of the network or a proxy. */
	case MODEL_ERR_BAD_RESPONSE:
		return true;
	default:
		return false;
	}
}

const char *model_error_kind_name(enum model_error_kind kind)
{
	switch (kind) {
	case MODEL_ERR_NONE:
		return "none";
	case MODEL_ERR_RATE_LIMIT:
		return "rate_limit";
	case MODEL_ERR_OVERLOADED:
		return "overloaded";
	case MODEL_ERR_TIMEOUT:
		return "timeout";
	case MODEL_ERR_NETWORK:
		return "network";
	case MODEL_ERR_PROMPT_TOO_LONG:
		return "prompt_too_long";
	case MODEL_ERR_AUTH:
		return "auth";
	case MODEL_ERR_BAD_REQUEST:
		return "bad_request";
	case MODEL_ERR_BAD_RESPONSE:
		return "bad_response";
	case MODEL_ERR_ABORTED:
		return "aborted";
	}
	return "unknown";
}
