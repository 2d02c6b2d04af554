/*
 * stdio.c - the MCP stdio transport: a server program spoken to over its
 * stdin and stdout, one JSON-RPC message a line; what it writes to stderr
 * goes to the gateway's log, a line at a time and capped.
 *
 * The program runs like a tool's command (spawn.h, sandbox.h): inside the
 * agent's sandbox when it has one, with a clean environment (PATH, HOME set
 * to the workspace, LANG, and the entry's env), in a process group of its
 * own, inheriting no descriptor but its three pipes. Stopping it sends the
 * group SIGTERM and, after MCP_STDIO_KILL_MS, SIGKILL; the transport reports
 * its end once the process is reaped and every pipe closed, so nothing it
 * started outlives it (the sandbox dies with bwrap; --die-with-parent).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agents/mcp/mcp_internal.h"
#include "agents/safety/spawn.h"
#include "gateway/core/buf.h"
#include "gateway/core/err.h"
#include "gateway/core/log.h"

#define MCP_STDIO_KILL_MS 2000
#define MCP_STDIO_WRITE_MAX (16u << 20) /* bytes queued to its stdin */
#define MCP_STDIO_STDERR_LINE 1000      /* characters of a log line kept */
#define MCP_STDIO_STDERR_LINES 200      /* lines logged per start */
#define MCP_STDIO_ENV_MAX 64
#define MCP_STDIO_CGROUP_TRIES 100

struct mcp_stdio {
	struct mcp_server *s;
	uv_process_t proc;
	uv_pipe_t in, out, err;
	uv_timer_t timer; /* SIGKILL after the SIGTERM; the cgroup's removal */
	int handles;
	int pid;
	bool exited, out_eof, err_eof, closing, killed_big;
	int64_t exit_status;
	int term_signal;
	size_t queued; /* bytes written and not yet flushed */
	struct buf line;
	struct buf errline;
	size_t err_lines;
	char cgroup[512];
	int rm_tries;
	char why[300];
	char rd[65536];
	char erd[4096];
};

struct mcp_stdio_write {
	uv_write_t req;
	struct mcp_stdio *t;
	size_t len;
	char data[];
};

static void stdio_kill(struct mcp_stdio *t, int sig)
{
	if (t->pid > 0)
		(void)kill(-t->pid, sig);
}

static void stdio_free(struct mcp_stdio *t)
{
	buf_free(&t->line);
	buf_free(&t->errline);
	free(t);
}

static void stdio_rm_closed(uv_handle_t *h)
{
	stdio_free(h->data);
}

static void stdio_rm_retry(uv_timer_t *timer)
{
	struct mcp_stdio *t = timer->data;

	if (sandbox_cgroup_remove(t->cgroup) == SB_ERR_AGAIN &&
	    ++t->rm_tries < MCP_STDIO_CGROUP_TRIES)
		return;
	uv_close((uv_handle_t *)timer, stdio_rm_closed);
}

static void stdio_report(struct mcp_stdio *t)
{
	char why[400];
	struct mcp_server *s = t->s;

	if (t->why[0])
		snprintf(why, sizeof why, "%s", t->why);
	else if (t->term_signal)
		snprintf(why, sizeof why, "was killed by signal %d", t->term_signal);
	else
		snprintf(why, sizeof why, "exited with status %lld", (long long)t->exit_status);
	t->s = NULL;
	mcp_server_closed(s, why);
}

static void stdio_closed(uv_handle_t *h)
{
	struct mcp_stdio *t = h->data;

	if (--t->handles > 0)
		return;
	stdio_report(t);
	if (sandbox_cgroup_remove(t->cgroup) == SB_ERR_AGAIN) {
		/* kept by the timer, which is closed by then: start it again */
		uv_timer_init(h->loop, &t->timer);
		t->timer.data = t;
		uv_timer_start(&t->timer, stdio_rm_retry, 100, 100);
		return;
	}
	stdio_free(t);
}

static void stdio_close_all(struct mcp_stdio *t)
{
	if (t->closing)
		return;
	t->closing = true;
	uv_close((uv_handle_t *)&t->in, stdio_closed);
	uv_close((uv_handle_t *)&t->out, stdio_closed);
	uv_close((uv_handle_t *)&t->err, stdio_closed);
	uv_close((uv_handle_t *)&t->timer, stdio_closed);
	uv_close((uv_handle_t *)&t->proc, stdio_closed);
}

static void stdio_maybe_done(struct mcp_stdio *t)
{
	if (t->exited && t->out_eof && t->err_eof)
		stdio_close_all(t);
}

static void stdio_kill_timer(uv_timer_t *timer)
{
	struct mcp_stdio *t = timer->data;

	stdio_kill(t, SIGKILL);
	if (t->exited) {
		/* something it started holds the pipes: the group is gone now */
		uv_read_stop((uv_stream_t *)&t->out);
		uv_read_stop((uv_stream_t *)&t->err);
		t->out_eof = t->err_eof = true;
		stdio_maybe_done(t);
	}
}

/* Ends the server: SIGTERM now, SIGKILL if it is still there later. */
static void stdio_terminate(struct mcp_stdio *t, int sig)
{
	if (t->closing)
		return;
	stdio_kill(t, sig);
	if (!uv_is_active((uv_handle_t *)&t->timer))
		uv_timer_start(&t->timer, stdio_kill_timer,
		               sig == SIGKILL ? 200 : MCP_STDIO_KILL_MS, 0);
}

static void stdio_exited(uv_process_t *p, int64_t status, int term_signal)
{
	struct mcp_stdio *t = p->data;

	t->exited = true;
	t->exit_status = status;
	t->term_signal = term_signal;
	/* its group may live on with the pipes: give it a moment, then kill */
	if (!t->out_eof || !t->err_eof) {
		stdio_kill(t, SIGTERM);
		uv_timer_start(&t->timer, stdio_kill_timer, MCP_STDIO_KILL_MS, 0);
	}
	stdio_maybe_done(t);
}

static void stdio_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
	struct mcp_stdio *t = h->data;

	(void)suggested;
	if ((uv_pipe_t *)h == &t->err) {
		b->base = t->erd;
		b->len = sizeof t->erd;
	} else {
		b->base = t->rd;
		b->len = sizeof t->rd;
	}
}

static void stdio_fail(struct mcp_stdio *t, const char *why)
{
	if (!t->why[0])
		snprintf(t->why, sizeof t->why, "%s", why);
	uv_read_stop((uv_stream_t *)&t->out);
	t->out_eof = true;
	stdio_terminate(t, SIGKILL);
	stdio_maybe_done(t);
}

static void stdio_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *b)
{
	struct mcp_stdio *t = st->data;
	const char *p = b->base, *end = b->base + (nread > 0 ? nread : 0), *nl;

	if (nread < 0) {
		uv_read_stop(st);
		t->out_eof = true;
		stdio_maybe_done(t);
		return;
	}
	while (p < end && t->s && !t->out_eof) {
		nl = memchr(p, '\n', (size_t)(end - p));
		if (buf_append(&t->line, p, (size_t)((nl ? nl : end) - p)) != SB_OK) {
			char why[200];

			snprintf(why, sizeof why,
			         "sent a message over the limit of %zu bytes (max_message)",
			         t->line.max);
			log_warn("mcp", "the MCP server sent a message over the limit; stopping it",
			         LOG_S("server", mcp_server_label(t->s)),
			         LOG_I("limit", t->line.max));
			stdio_fail(t, why);
			return;
		}
		if (!nl)
			break;
		p = nl + 1;
		{
			size_t n = t->line.len;

			while (n && (t->line.data[n - 1] == '\r' || t->line.data[n - 1] == ' '))
				n--;
			if (n)
				mcp_server_message(t->s, t->line.data, n);
		}
		buf_reset(&t->line);
	}
}

static void stdio_err_line(struct mcp_stdio *t)
{
	if (t->errline.len && t->s && t->err_lines < MCP_STDIO_STDERR_LINES) {
		log_info("mcp", "server stderr", LOG_S("server", mcp_server_label(t->s)),
		         LOG_S("line", t->errline.data));
		if (++t->err_lines == MCP_STDIO_STDERR_LINES)
			log_info("mcp", "the server's further stderr lines are not logged",
			         LOG_S("server", mcp_server_label(t->s)));
	}
	buf_reset(&t->errline);
}

static void stdio_err_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *b)
{
	struct mcp_stdio *t = st->data;

	if (nread < 0) {
		stdio_err_line(t);
		uv_read_stop(st);
		t->err_eof = true;
		stdio_maybe_done(t);
		return;
	}
	for (ssize_t i = 0; i < nread; i++) {
		char c = b->base[i];

		if (c == '\n') {
			stdio_err_line(t);
			continue;
		}
		if ((unsigned char)c < 0x20 && c != '\t')
			c = ' ';
		(void)buf_append(&t->errline, &c, 1); /* past the line's cap: dropped */
	}
}

static void stdio_written(uv_write_t *req, int status)
{
	struct mcp_stdio_write *w = (struct mcp_stdio_write *)req;
	struct mcp_stdio *t = w->t;

	t->queued -= w->len;
	free(w);
	if (status < 0 && status != UV_ECANCELED && !t->closing && !t->exited)
		stdio_fail(t, "its stdin closed");
}

static int stdio_send(void *tr, const char *msg, size_t len, int64_t id)
{
	struct mcp_stdio *t = tr;
	struct mcp_stdio_write *w;
	uv_buf_t b;

	(void)id;
	if (t->closing || t->exited || t->out_eof)
		return SB_ERR_CLOSED;
	if (t->queued + len + 1 > MCP_STDIO_WRITE_MAX)
		return SB_ERR_AGAIN;
	w = malloc(sizeof *w + len + 1);
	if (!w)
		return SB_ERR_NOMEM;
	memcpy(w->data, msg, len);
	w->data[len] = '\n';
	w->len = len + 1;
	w->t = t;
	b = uv_buf_init(w->data, (unsigned)w->len);
	if (uv_write(&w->req, (uv_stream_t *)&t->in, &b, 1, stdio_written) != 0) {
		free(w);
		return SB_ERR_IO;
	}
	t->queued += w->len;
	return SB_OK;
}

static void stdio_close(void *tr)
{
	struct mcp_stdio *t = tr;

	/* EOF on its stdin is the polite request; the signals follow */
	stdio_terminate(t, SIGTERM);
}

static void stdio_spawn_closed(uv_handle_t *h)
{
	stdio_free(h->data);
}

static int stdio_open(struct mcp_server *s, const struct mcp_env *env, void **out, char *why,
                      size_t why_size)
{
	const struct mcp_server_config *c = mcp_server_cfg(s);
	uv_loop_t *loop = mcp_server_loop(s);
	struct mcp_stdio *t = NULL;
	const char *envv[MCP_STDIO_ENV_MAX + 4];
	const char **argv = NULL;
	char *home = NULL, **boxed = NULL;
	size_t n = 0, i;
	int rc = SB_ERR_NOMEM, err, pin[2] = {-1, -1}, pout[2] = {-1, -1}, perr[2] = {-1, -1};
	uv_stdio_container_t stdio[3 + SANDBOX_FDS_MAX];
	uv_process_options_t po;
	struct sandbox_fds boxfds;
	const char *cwd = env->workspace;

	sandbox_fds_init(&boxfds);
	if (!c->command || !cwd) {
		snprintf(why, why_size, "%s",
		         c->command ? "the agent has no workspace" : "no command");
		return SB_ERR_INVAL;
	}
	t = calloc(1, sizeof *t);
	argv = calloc(c->n_args + 2, sizeof *argv);
	if (!t || !argv)
		goto out;
	buf_init(&t->line, (size_t)(c->max_message > 0 ? c->max_message : (8 << 20)));
	buf_init(&t->errline, MCP_STDIO_STDERR_LINE);
	argv[0] = c->command;
	for (i = 0; i < c->n_args; i++)
		argv[i + 1] = c->args[i];
	if (asprintf(&home, "HOME=%s", cwd) < 0) {
		home = NULL;
		goto out;
	}
	envv[n++] = "PATH=/usr/local/bin:/usr/bin:/bin";
	envv[n++] = home;
	envv[n++] = "LANG=C.UTF-8";
	for (i = 0; i < c->n_env && i < MCP_STDIO_ENV_MAX; i++)
		envv[n++] = c->env[i];
	envv[n] = NULL;
	if (env->sandbox && env->sandbox->mode != SANDBOX_FULL) {
		rc = sandbox_argv(env->sandbox, cwd, argv, envv, &boxed, &boxfds, why, why_size);
		if (rc != SB_OK)
			goto out;
		memcpy(t->cgroup, boxfds.cgroup, sizeof t->cgroup);
		boxfds.cgroup[0] = '\0';
	}
	rc = SB_ERR_IO;
	if (uv_pipe(pin, 0, UV_NONBLOCK_PIPE) != 0 || uv_pipe(pout, UV_NONBLOCK_PIPE, 0) != 0 ||
	    uv_pipe(perr, UV_NONBLOCK_PIPE, 0) != 0) {
		snprintf(why, why_size, "cannot make pipes: %s", strerror(errno));
		goto out;
	}
	memset(stdio, 0, sizeof stdio);
	stdio[0].flags = UV_INHERIT_FD;
	stdio[0].data.fd = pin[0];
	stdio[1].flags = UV_INHERIT_FD;
	stdio[1].data.fd = pout[1];
	stdio[2].flags = UV_INHERIT_FD;
	stdio[2].data.fd = perr[1];
	for (i = 0; i < boxfds.n; i++) {
		stdio[3 + i].flags = UV_INHERIT_FD;
		stdio[3 + i].data.fd = boxfds.fd[i];
	}
	memset(&po, 0, sizeof po);
	po.exit_cb = stdio_exited;
	po.file = boxed ? boxed[0] : argv[0];
	po.args = boxed ? boxed : (char **)argv;
	po.env = (char **)envv;
	po.cwd = cwd;
	po.flags = UV_PROCESS_DETACHED;
	po.stdio_count = 3 + (int)boxfds.n;
	po.stdio = stdio;
	t->proc.data = t;
	tool_spawn_cloexec_all();
	err = uv_spawn(loop, &t->proc, &po);
	if (err) {
		rc = err == UV_ENOENT || err == UV_EACCES ? SB_ERR_NOTFOUND : SB_ERR_IO;
		snprintf(why, why_size, "cannot run %s: %s", c->command, uv_strerror(err));
		/* a failed uv_spawn leaves the handle to close: t goes with it */
		(void)sandbox_cgroup_remove(t->cgroup);
		uv_close((uv_handle_t *)&t->proc, stdio_spawn_closed);
		t = NULL;
		goto out;
	}
	t->pid = t->proc.pid;
	t->s = s;
	uv_pipe_init(loop, &t->in, 0);
	uv_pipe_init(loop, &t->out, 0);
	uv_pipe_init(loop, &t->err, 0);
	uv_timer_init(loop, &t->timer);
	t->in.data = t->out.data = t->err.data = t->timer.data = t;
	t->handles = 5;
	(void)uv_pipe_open(&t->in, pin[1]);
	(void)uv_pipe_open(&t->out, pout[0]);
	(void)uv_pipe_open(&t->err, perr[0]);
	pin[1] = pout[0] = perr[0] = -1;
	uv_read_start((uv_stream_t *)&t->out, stdio_alloc, stdio_read);
	uv_read_start((uv_stream_t *)&t->err, stdio_alloc, stdio_err_read);
	*out = t;
	t = NULL;
	rc = SB_OK;
out:
	for (i = 0; i < 2; i++) {
		if (pin[i] >= 0)
			close(pin[i]);
		if (pout[i] >= 0)
			close(pout[i]);
		if (perr[i] >= 0)
			close(perr[i]);
	}
	if (t) {
		(void)sandbox_cgroup_remove(t->cgroup);
		stdio_free(t);
	}
	(void)sandbox_cgroup_remove(boxfds.cgroup);
	sandbox_argv_free(boxed);
	sandbox_fds_close(&boxfds);
	free(home);
	free(argv);
	return rc;
}

const struct mcp_transport_ops mcp_stdio_ops = {
    .name = "stdio",
    .open = stdio_open,
    .send = stdio_send,
    .close = stdio_close,
};
