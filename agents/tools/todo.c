/*
 * todo.c - the todo tool: the model keeps a short plan for the session, a
 * list of items with a status (the seeds' TodoWrite and update_plan).
 *
 * Each call gives the whole list, which replaces the last one. The list
 * lives with the run (tool_ctx.plan), which records it in the transcript
 * (a "todo" event), hands it to the session's next run, shows it to the
 * operator (`switchboard sessions show`) and puts it back into the context
 * after a compaction removed the messages that held it. The tool touches
 * nothing else: no file, no process.
 */
#include <stdlib.h>
#include <string.h>

#include "agents/tool.h"
#include "agents/tools/common.h"
#include "gateway/core/buf.h"
#include "gateway/core/err.h"

#define TODO_ITEMS_MAX 50
#define TODO_TEXT_MAX 500

static const char *const todo_marks[][2] = {
    {"pending", "[ ]"}, {"in_progress", "[>]"}, {"done", "[x]"}, {"cancelled", "[-]"}};

static const char *todo_mark(const char *status)
{
	for (size_t i = 0; i < sizeof todo_marks / sizeof todo_marks[0]; i++)
		if (status && strcmp(status, todo_marks[i][0]) == 0)
			return todo_marks[i][1];
	return "[ ]";
}

char *tool_todo_render(const json_t *items, const char *heading)
{
	const json_t *it;
	size_t i, done = 0;
	struct buf b;

	if (!json_array_size(items))
		return NULL;
	json_array_foreach(items, i, it)
	{
		const char *st = json_string_value(json_object_get(it, "status"));

		done += st && (strcmp(st, "done") == 0 || strcmp(st, "cancelled") == 0);
	}
	buf_init(&b, (size_t)TODO_ITEMS_MAX * (TODO_TEXT_MAX + 64) + 512);
	buf_printf(&b, "%s (%zu of %zu done):", heading ? heading : "Todo list", done,
	           json_array_size(items));
	json_array_foreach(items, i, it)
	{
		buf_printf(&b, "\n%s %s",
		           todo_mark(json_string_value(json_object_get(it, "status"))),
		           json_string_value(json_object_get(it, "text")));
	}
	return buf_steal(&b);
}

struct todo_job {
	char *text;
};

static void todo_job_free(void *p)
{
	struct todo_job *j = p;

	free(j->text);
	free(j);
}

static void todo_work(void *p, struct tool_job_result *res)
{
	tool_result_text(res, ((struct todo_job *)p)->text);
}

static int todo_call(const struct tool_ctx *ctx, const json_t *input, tool_done_cb done, void *ud,
                     struct tool_run **run)
{
	const json_t *items = json_object_get(input, "items"), *it;
	struct todo_job *j;
	json_t *copy = NULL;
	size_t i, active = 0;
	char why[256];

	if (!ctx->plan)
		return tool_job_error(ctx->loop, "the todo list is not available in this run", done,
		                      ud, run);
	if (json_array_size(items) > TODO_ITEMS_MAX) {
		snprintf(why, sizeof why, "a todo list has at most %d items; keep it short",
		         TODO_ITEMS_MAX);
		return tool_job_error(ctx->loop, why, done, ud, run);
	}
	json_array_foreach(items, i, it)
	{
		const char *st = json_string_value(json_object_get(it, "status"));

		active += st && strcmp(st, "in_progress") == 0;
	}
	/* The list as given: texts were bounded by the schema. */
	copy = json_deep_copy(items);
	j = calloc(1, sizeof *j);
	if (!copy || !j) {
		json_decref(copy);
		free(j);
		return SB_ERR_NOMEM;
	}
	ctx->plan->set(ctx->plan->ud, copy);
	j->text = json_array_size(copy) ? tool_todo_render(copy, "Todo list saved")
	                                : strdup("Todo list cleared.");
	json_decref(copy);
	if (!j->text) {
		free(j);
		return SB_ERR_NOMEM;
	}
	if (active > 1) {
		char *more = NULL;
		struct buf b;

		buf_init(&b, strlen(j->text) + 256);
		buf_puts(&b, j->text);
		buf_puts(&b, "\n(Several items are in progress; keep one in progress at a time.)");
		more = buf_steal(&b);
		if (more) {
			free(j->text);
			j->text = more;
		}
	}
	return tool_job_start(ctx, todo_work, j, todo_job_free, done, ud, run);
}

const struct tool_def tool_todo = {
    .name = "todo",
    .description =
        "Keeps your plan for a task of several steps: the whole todo list, each item with "
        "a status (pending, in_progress, done, cancelled). Each call replaces the list. "
        "Write it when a task needs three steps or more, mark one item in_progress before "
        "you start it and done as soon as it is, and add items you discover. The list is "
        "kept with the conversation, also when older messages are compacted.",
    .input_schema = "{\"type\":\"object\",\"properties\":{"
                    "\"items\":{\"type\":\"array\",\"description\":\"the whole list, in "
                    "order (at most 50 items)\",\"items\":{\"type\":\"object\",\"properties\":{"
                    "\"text\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":500,"
                    "\"description\":\"what to do, in a few words\"},"
                    "\"status\":{\"type\":\"string\",\"enum\":[\"pending\",\"in_progress\","
                    "\"done\",\"cancelled\"]}},"
                    "\"required\":[\"text\",\"status\"],\"additionalProperties\":false}}},"
                    "\"required\":[\"items\"],\"additionalProperties\":false}",
    .read_only = tool_never,
    .concurrency_safe = tool_never,
    .max_result_chars = 0,
    .call = todo_call,
};
