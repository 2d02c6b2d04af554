/*
 * memory_search.c - the memory_search tool: BM25 full-text search over the
 * agent's memory files (and, where configured, its past transcripts)
 * through the index of workspaces/memory.h.
 */
#include <stdlib.h>
#include <string.h>

#include "agents/tool.h"
#include "agents/tools/common.h"
#include "gateway/core/buf.h"
#include "gateway/core/err.h"
#include "workspaces/memory.h"

#define MEMORY_SEARCH_LIMIT_DEFAULT 8

struct msearch_job {
	char *workspace, *index, *sessions, *query;
	int64_t limit;
};

static void msearch_job_free(void *p)
{
	struct msearch_job *j = p;

	free(j->workspace);
	free(j->index);
	free(j->sessions);
	free(j->query);
	free(j);
}

static void msearch_work(void *p, struct tool_job_result *res)
{
	struct msearch_job *j = p;
	struct memory_scope s = {.workspace = j->workspace,
	                         .index = j->index,
	                         .sessions = j->sessions,
	                         .stopped = tool_job_stopped_cb,
	                         .stop_ud = res};
	char why[512];
	json_t *hits = NULL, *h;
	struct buf out;
	size_t i;
	int rc;

	rc = memory_search(&s, j->query, (size_t)j->limit, &hits, NULL, why, sizeof why);
	if (rc == SB_ERR_NOMEM)
		return;
	if (rc == SB_ERR_ABORTED) {
		tool_result_errorf(res,
		                   "memory_search stopped at the time limit of %lld ms (or "
		                   "cancelled) before it found anything; the index is as it was",
		                   (long long)res->timeout_ms);
		return;
	}
	if (rc) {
		tool_result_errorf(res, "memory_search failed: %s",
		                   why[0] ? why : sb_strerror(rc));
		return;
	}
	if (json_array_size(hits) == 0) {
		json_decref(hits);
		tool_result_text(res, "No memory matches that query.");
		return;
	}
	buf_init(&out, TOOL_OUTPUT_BUDGET);
	json_array_foreach(hits, i, h)
	{
		const char *path = json_string_value(json_object_get(h, "path"));
		json_int_t from = json_integer_value(json_object_get(h, "from"));
		json_int_t to = json_integer_value(json_object_get(h, "to"));

		/* The budget may cut the list; what fits is shown. */
		if (buf_printf(&out, "%s%s:%lld-%lld (score %.2f)\n%s\n", i ? "\n" : "", path,
		               (long long)from, (long long)to,
		               json_real_value(json_object_get(h, "score")),
		               json_string_value(json_object_get(h, "snippet"))) != SB_OK)
			break;
	}
	json_decref(hits);
	res->content = buf_steal(&out);
	res->rc = res->content ? SB_OK : SB_ERR_NOMEM;
	res->is_error = false;
}

static int msearch_call(const struct tool_ctx *ctx, const json_t *input, tool_done_cb done,
                        void *ud, struct tool_run **run)
{
	struct msearch_job *j;

	if (!ctx->memory || !ctx->memory->index || !ctx->workspace)
		return tool_job_error(ctx->loop, "memory_search is not available to this agent",
		                      done, ud, run);
	if (!(j = calloc(1, sizeof *j)))
		return SB_ERR_NOMEM;
	j->workspace = strdup(ctx->workspace);
	j->index = strdup(ctx->memory->index);
	j->sessions = ctx->memory->sessions ? strdup(ctx->memory->sessions) : NULL;
	j->query = strdup(tool_in_str(input, "query", ""));
	j->limit = tool_in_int(input, "limit", MEMORY_SEARCH_LIMIT_DEFAULT);
	if (!j->workspace || !j->index || !j->query ||
	    (ctx->memory->sessions && !j->sessions)) {
		msearch_job_free(j);
		return SB_ERR_NOMEM;
	}
	return tool_job_start(ctx, msearch_work, j, msearch_job_free, done, ud, run);
}

const struct tool_def tool_memory_search = {
    .name = "memory_search",
    .description =
        "Searches your memory: MEMORY.md, the notes under memory/ and, where the operator "
        "turned it on, your past conversations. Ranked by relevance (BM25); each hit gives "
        "the file, its line range and a snippet. Read more of a hit with memory_get. Search "
        "before answering questions about things you were told earlier.",
    .input_schema = "{\"type\":\"object\",\"properties\":{"
                    "\"query\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":1000,"
                    "\"description\":\"words to look for\"},"
                    "\"limit\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":50,"
                    "\"description\":\"most hits to return; default 8\"}},"
                    "\"required\":[\"query\"],\"additionalProperties\":false}",
    .read_only = tool_always,
    .concurrency_safe = tool_always,
    .max_result_chars = 0,
    .untrusted_output = true,
    .call = msearch_call,
};
