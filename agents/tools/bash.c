/*
 * bash.c - the bash tool: runs a shell command in the workspace.
 *
 * The command runs as /bin/sh -c through tool_spawn, under the run's
 * sandbox (ctx->sandbox: bubblewrap; a missing bwrap is an error result,
 * never a run without the sandbox): its own process group, a clean
 * environment, a time limit that kills the whole group. The model sees the
 * output and how the command ended; a non-zero exit status is not an error
 * of the tool (the model decides what it means), a timeout is. The output is
 * kept whole up to BASH_OUTPUT_MAX (past it, its first BASH_OUTPUT_MAX and
 * last BASH_TAIL bytes), so that the output budget (budget.h) saves all of it
 * to the result store like any oversized result and the context gets a
 * preview of its head and tail. A root gateway first gives the workspace to
 * the sandbox's uid (sandbox_own) on the pool (tool_spawn_own), and starts
 * the command when that is done.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agents/safety/sandbox.h"
#include "agents/safety/spawn.h"
#include "agents/tool.h"
#include "agents/tools/common.h"
#include "gateway/core/buf.h"
#include "gateway/core/err.h"

/* The hard cap of what is kept (well under the budget's 16 MiB even when
 * every byte becomes U+FFFD's three). */
#define BASH_OUTPUT_MAX ((size_t)4 << 20)
#define BASH_TAIL ((size_t)256 << 10)
#define BASH_TIMEOUT_DEFAULT 120000

struct bash_run {
	struct tool_run run; /* first */
	tool_done_cb done;
	void *ud;
	struct tool_spawn *sp;
	int64_t timeout_ms;
	bool finished; /* done has run (a cancel does it at once) */
	/* A root gateway first gives the workspace to the sandbox's uid on a
	 * pool thread (the walk may be long); meanwhile prep is that job and
	 * what the spawn needs is kept here (borrowed from the run). */
	struct tool_run *prep;
	uv_loop_t *loop;
	const char *workspace;
	const struct sandbox_policy *sandbox;
	char *command;
};

static void bash_free(struct bash_run *b)
{
	free(b->command);
	free(b);
}

/* Appends output bytes; a NUL would end the text wherever it goes next, so
 * it becomes U+FFFD. */
static void bash_append(struct buf *out, const char *p, size_t n)
{
	const char *nul;

	while (n && (nul = memchr(p, '\0', n)) != NULL) {
		(void)buf_append(out, p, (size_t)(nul - p));
		(void)buf_puts(out, "\xEF\xBF\xBD");
		n -= (size_t)(nul - p) + 1;
		p = nul + 1;
	}
	(void)buf_append(out, p, n);
}

/* The text the model sees: output (head, what was cut, tail), then how the
 * command ended. */
static char *bash_format(const struct bash_run *b, const struct tool_spawn_result *r)
{
	struct buf out;
	size_t head = r->output_len, skip = 0;
	const char *tail = r->tail;
	size_t tail_len = r->tail_len;

	/* Room for every byte becoming U+FFFD. */
	buf_init(&out, (BASH_OUTPUT_MAX + BASH_TAIL) * 3 + 1024);
	if (r->output_dropped || tail_len) {
		/* Cut on character boundaries at both ends of the gap. */
		head = tool_utf8_floor(r->output, r->output_len);
		while (skip < 3 && skip < tail_len && ((unsigned char)tail[skip] & 0xC0) == 0x80)
			skip++;
		tail += skip;
		tail_len -= skip;
	}
	bash_append(&out, r->output, head);
	if (r->output_dropped)
		(void)buf_printf(&out, "%s[... %zu bytes cut ...]\n",
		                 out.len && out.data[out.len - 1] != '\n' ? "\n" : "",
		                 r->output_dropped + (r->output_len - head) + skip);
	bash_append(&out, tail, tail_len);
	if (out.len == 0)
		(void)buf_puts(&out, "(no output)\n");
	else if (out.data[out.len - 1] != '\n')
		(void)buf_puts(&out, "\n");
	if (r->timed_out)
		(void)buf_printf(&out, "killed: timed out after %lld ms", (long long)b->timeout_ms);
	else if (r->term_signal)
		(void)buf_printf(&out, "killed by signal %d (%s)", r->term_signal,
		                 strsignal(r->term_signal));
	else
		(void)buf_printf(&out, "exit code %d", r->exit_code);
	if (r->sandboxed && sandbox_failure(r->exit_code, r->output, r->output_len))
		(void)buf_printf(&out, "\n%s",
		                 sandbox_failure(r->exit_code, r->output, r->output_len));
	return buf_steal(&out);
}

static void bash_spawned(void *ud, int rc, const struct tool_spawn_result *r)
{
	struct bash_run *b = ud;
	char *text;

	if (!b->finished) {
		b->finished = true;
		text = bash_format(b, r);
		if (!text)
			b->done(b->ud, SB_ERR_NOMEM, NULL, true);
		else
			b->done(b->ud, SB_OK, text, r->timed_out);
	}
	bash_free(b);
}

static void bash_cancel(struct tool_run *run)
{
	struct bash_run *b = (struct bash_run *)run;

	if (b->finished)
		return;
	if (b->prep) {
		/* bash_owned answers (at once) and frees b */
		b->prep->cancel(b->prep);
		return;
	}
	b->finished = true;
	/* The spawn calls bash_spawned once the group is reaped; b lives
	 * until then. */
	tool_spawn_cancel(b->sp);
	b->done(b->ud, SB_ERR_ABORTED, strdup("cancelled: the command was killed"), true);
}

/* Starts the command (b->command) under b->sandbox; the policy says
 * whether the workspace was given to the sandbox's uid already. SB_OK, or
 * an error with why filled when it is a sentence for the model. */
static int bash_start(struct bash_run *b, const struct sandbox_policy *sandbox, char *why,
                      size_t why_size)
{
	struct tool_spawn_options o;
	const char *argv[4];

	argv[0] = "/bin/sh";
	argv[1] = "-c";
	argv[2] = b->command;
	argv[3] = NULL;
	memset(&o, 0, sizeof o);
	o.argv = argv;
	o.cwd = b->workspace;
	o.timeout_ms = b->timeout_ms;
	o.max_output = BASH_OUTPUT_MAX;
	o.keep_tail = BASH_TAIL;
	o.sandbox = sandbox;
	why[0] = '\0';
	o.why = why;
	o.why_size = why_size;
	return tool_spawn(b->loop, &o, bash_spawned, b, &b->sp);
}

/* The ownership job ended (loop thread): start the command, or answer
 * with why not (a cancel comes here too, at once). */
static void bash_owned(void *ud, int rc, char *content, bool is_error)
{
	struct bash_run *b = ud;
	struct sandbox_policy box;
	char why[512];

	b->prep = NULL;
	if (rc != SB_OK || is_error) {
		b->finished = true;
		b->done(b->ud, rc, content, true);
		bash_free(b);
		return;
	}
	free(content);
	box = *b->sandbox;
	box.owned = true;
	rc = bash_start(b, &box, why, sizeof why);
	if (rc != SB_OK) {
		char *msg = strdup(why[0] && rc != SB_ERR_NOMEM ? why : "out of memory");

		b->finished = true;
		b->done(b->ud, msg && why[0] && rc != SB_ERR_NOMEM ? SB_OK : SB_ERR_NOMEM, msg,
		        true);
		bash_free(b);
	}
}

static int bash_call(const struct tool_ctx *ctx, const json_t *input, tool_done_cb done, void *ud,
                     struct tool_run **run)
{
	struct bash_run *b;
	int64_t limit = ctx->timeout_ms > 0 ? ctx->timeout_ms : BASH_TIMEOUT_DEFAULT;
	int64_t want = tool_in_int(input, "timeout_ms", limit);
	char why[512];
	int rc;

	if (!ctx->workspace || !ctx->loop)
		return SB_ERR_INVAL;
	b = calloc(1, sizeof *b);
	if (!b)
		return SB_ERR_NOMEM;
	b->run.cancel = bash_cancel;
	b->done = done;
	b->ud = ud;
	b->timeout_ms = want > 0 && want < limit ? want : limit;
	b->loop = ctx->loop;
	b->workspace = ctx->workspace;
	b->sandbox = ctx->sandbox;
	if (!(b->command = strdup(tool_in_str(input, "command", "")))) {
		free(b);
		return SB_ERR_NOMEM;
	}
	if (tool_spawn_needs_own(ctx->sandbox)) {
		/* A root gateway's walk of the workspace (sandbox_own) runs on
		 * the pool, not on the loop thread; the command starts after. */
		rc = tool_spawn_own(ctx->loop, ctx->workspace, ctx->sandbox, ctx->timeout_ms,
		                    bash_owned, b, &b->prep);
		if (rc != SB_OK) {
			bash_free(b);
			return rc;
		}
		if (run)
			*run = &b->run;
		return SB_OK;
	}
	rc = bash_start(b, ctx->sandbox, why, sizeof why);
	if (rc != SB_OK) {
		bash_free(b);
		if (why[0] && rc != SB_ERR_NOMEM)
			return tool_job_error(ctx->loop, why, done, ud, run);
		return rc;
	}
	if (run)
		*run = &b->run;
	return SB_OK;
}

const struct tool_def tool_bash = {
    .name = "bash",
    .description =
        "Runs a shell command (/bin/sh -c) in the workspace directory and returns its output "
        "(stdout and stderr together) and exit code. stdin is empty; the environment is "
        "minimal. The command and everything it starts are killed at the time limit "
        "(timeout_ms, at most the agent's limit, 120 s by default). Long output is saved "
        "whole (up to 4 MiB, then its last 256 KiB) and you get its start and end with the "
        "name of the file that holds it; read that with the read tool.",
    .input_schema = "{\"type\":\"object\",\"properties\":{"
                    "\"command\":{\"type\":\"string\",\"minLength\":1,"
                    "\"description\":\"the shell command\"},"
                    "\"timeout_ms\":{\"type\":\"integer\",\"minimum\":1,"
                    "\"description\":\"time limit in milliseconds (capped at the agent's)\"},"
                    "\"description\":{\"type\":\"string\","
                    "\"description\":\"what the command does, in a few words\"}},"
                    "\"required\":[\"command\"],\"additionalProperties\":false}",
    .read_only = tool_never,
    .concurrency_safe = tool_never,
    .max_result_chars = 0,
    .untrusted_output = true,
    .runs_code = true,
    .call = bash_call,
};
