/*
 * fuzz_skill.c - libFuzzer harness for a skill's SKILL.md (workspaces/
 * skills.c): the frontmatter split, the YAML (bounded in size, depth and
 * nodes, aliases included), the gates and the description's folding. The
 * text comes from the workspace, which the agent's own commands can write.
 *
 * Properties, besides memory safety: a skill is either usable (a
 * description of at most SKILL_DESC_MAX bytes with no control character, no
 * newline, no leading or trailing space, valid UTF-8) or broken (an error,
 * no description, not eligible); failed gates make it not eligible.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/core/err.h"
#include "workspaces/skills.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct skills_env e = {.workspace = "/nonexistent", .path = "/bin:/usr/bin", .os = "linux"};
	struct skill sk;
	char *text;

	if (size > SKILL_MD_MAX)
		return 0;
	text = malloc(size + 1);
	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	if (skill_parse_text(&sk, "fuzz", text, size, &e) != SB_OK) {
		free(text);
		return 0;
	}
	if (sk.error) {
		if (sk.description || sk.eligible)
			abort();
	} else {
		size_t n;
		json_t *j;

		if (!sk.description)
			abort();
		n = strlen(sk.description);
		if (n == 0 || n > SKILL_DESC_MAX || sk.description[0] == ' ' ||
		    sk.description[n - 1] == ' ')
			abort();
		for (size_t i = 0; i < n; i++)
			if ((unsigned char)sk.description[i] < 0x20 ||
			    (unsigned char)sk.description[i] == 0x7f)
				abort();
		j = json_string(sk.description); /* NULL: not UTF-8 */
		if (!j)
			abort();
		json_decref(j);
		if (sk.failed && sk.eligible)
			abort();
		if (sk.patches < 0)
			abort();
	}
	skill_release(&sk);
	free(text);
	return 0;
}
