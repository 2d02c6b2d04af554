/*
 * fuzz_config.c - libFuzzer harness for the YAML config loader: parse,
 * interpolate, walk the schema tables, build the snapshot, free it.
 * Built by `make fuzz` (clang, -fsanitize=fuzzer,address,undefined).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/config/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct cfg_errors errs;
	struct config *cfg = NULL;
	char *text = malloc(size + 1);

	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	cfg_errors_init(&errs);
	if (config_load_text(text, "fuzz.yaml", "/nonexistent-home", &cfg, &errs) == 0)
		config_unref(cfg);
	cfg_errors_free(&errs);
	free(text);
	return 0;
}
