/*
 * registry.c - the built-in tools and the tool list the model sees.
 */
#include <stdlib.h>
#include <string.h>

#include "agents/tool.h"
#include "gateway/core/err.h"

/* Sorted by name: tool_all's order and the order of the model's list. */
static const struct tool_def *const tool_builtin[] = {
    &tool_bash,    &tool_edit,      &tool_glob,         &tool_grep,
    &tool_ls,      &tool_memory_get, &tool_memory_search, &tool_memory_write,
    &tool_message, &tool_read,      &tool_skill_load,   &tool_skill_patch,
    &tool_skill_save, &tool_todo,   &tool_web_fetch,    &tool_web_search,
    &tool_write,
};

#define TOOL_BUILTIN_COUNT (sizeof tool_builtin / sizeof tool_builtin[0])

const struct tool_def *tool_find(const char *name)
{
	size_t i;

	if (!name)
		return NULL;
	for (i = 0; i < TOOL_BUILTIN_COUNT; i++)
		if (strcmp(tool_builtin[i]->name, name) == 0)
			return tool_builtin[i];
	return NULL;
}

const struct tool_def *const *tool_all(size_t *n)
{
	if (n)
		*n = TOOL_BUILTIN_COUNT;
	return tool_builtin;
}

static bool tool_named(const char *const *names, size_t n, const char *name)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (names[i] && strcmp(names[i], name) == 0)
			return true;
	return false;
}

static int tool_list_append(json_t *list, const struct tool_def *def)
{
	json_t *schema = json_loads(def->input_schema ? def->input_schema : "{}",
	                            JSON_REJECT_DUPLICATES, NULL),
	       *item = json_object();

	/* set_new takes the value even when it fails. */
	if (!schema || !item || json_object_set_new(item, "input_schema", schema) ||
	    json_object_set_new(item, "name", json_string(def->name)) ||
	    json_object_set_new(item, "description",
	                        json_string(def->description ? def->description : ""))) {
		if (!item)
			json_decref(schema);
		json_decref(item);
		return SB_ERR_NOMEM;
	}
	return json_array_append_new(list, item) ? SB_ERR_NOMEM : SB_OK;
}

json_t *tool_list_json_merge(const char *const *names, size_t n,
                             const struct tool_def *const *extra, size_t n_extra)
{
	json_t *list = json_array();
	size_t i = 0, k = 0;

	if (!list)
		return NULL;
	/* Walking the sorted table (not names) keeps the order, and so the
	 * bytes, the same whatever order names come in; duplicates and
	 * unknown names fall out. The extra tools are sorted too: a merge. */
	while (i < TOOL_BUILTIN_COUNT || k < n_extra) {
		const struct tool_def *def;

		if (i < TOOL_BUILTIN_COUNT &&
		    (k == n_extra || strcmp(tool_builtin[i]->name, extra[k]->name) < 0)) {
			def = tool_builtin[i++];
			if (names && n && !tool_named(names, n, def->name))
				continue;
		} else {
			def = extra[k++];
		}
		if (tool_list_append(list, def) != SB_OK) {
			json_decref(list);
			return NULL;
		}
	}
	return list;
}

json_t *tool_list_json_new(const char *const *names, size_t n)
{
	return tool_list_json_merge(names, n, NULL, 0);
}
