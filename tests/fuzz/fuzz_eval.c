/*
 * fuzz_eval.c - libFuzzer harness for the golden case files of `switchboard
 * eval` (gateway/cli/eval_case.h): parse, walk the schema, compile the
 * patterns, move the cases into a suite, then check each case against a run
 * whose answer is the input itself (bounded pattern matching on hostile
 * text), and free it all. Built by `make fuzz`.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/cli/eval_case.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct cfg_errors errs;
	struct eval_suite *s = NULL;
	char *text = malloc(size + 1);

	if (!text || eval_suite_new(&s) != 0) {
		free(text);
		return 0;
	}
	memcpy(text, data, size);
	text[size] = '\0';
	cfg_errors_init(&errs);
	(void)eval_suite_add_text(s, text, size, "evals/fuzz.yaml", "fuzz", &errs);
	for (size_t i = 0; i < s->n_cases; i++) {
		/* No file expectation reaches the disk: the fd is not a directory. */
		struct eval_observed o = {.answer = text, .workspace_fd = -1};
		json_t *failures = json_array();

		if (failures)
			(void)eval_case_check(&s->cases[i], &o, failures);
		json_decref(failures);
	}
	eval_suite_free(s);
	cfg_errors_free(&errs);
	free(text);
	return 0;
}
