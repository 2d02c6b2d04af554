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
 *
 * A root gateway first gives the workspace to the sandbox's uid, on a pool
 * thread (tool_spawn_own, as for the bash tool): open builds the command
 * line and returns, the program starts when the walk is done, and what is
 * sent meanwhile waits for its stdin. A close in between cancels the walk;
 * the end is reported once the timer is closed, with why it never ran.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agents/mcp/mcp_internal.h"
#include "agents/safety/spawn.h"
#include "agents/tool.h"
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
	/* What the spawn needs, kept from open to the spawn: a root gateway
	 * first gives the workspace to the sandbox's uid on the pool (prep,
	 * tool_spawn_own), and messages sent meanwhile wait in early. */
	struct tool_run *prep;
	const char **argv; /* the entry's command and args (borrowed from the config) */
	char **boxed;      /* the bwrap command line, or NULL */
	struct sandbox_fds boxfds;
	char *home, *cwd;
	const char *envv[MCP_STDIO_ENV_MAX + 4];
	struct buf early;
	bool spawned;
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
	sandbox_argv_free(t->boxed);
	sandbox_fds_close(&t->boxfds);
	free(t->argv);
	free(t->home);
	free(t->cwd);
	buf_free(&t->early);
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
	if (t->s) /* NULL: an open that failed, reporting nothing */
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

/* Queues len bytes of data (and a newline, if nl) to its stdin. */
static int stdio_write(struct mcp_stdio *t, const char *data, size_t len, bool nl)
{
	struct mcp_stdio_write *w;
	uv_buf_t b;

	if (t->queued + len + nl > MCP_STDIO_WRITE_MAX)
		return SB_ERR_AGAIN;
	w = malloc(sizeof *w + len + nl);
	if (!w)
		return SB_ERR_NOMEM;
	memcpy(w->data, data, len);
	if (nl)
		w->data[len] = '\n';
	w->len = len + nl;
	w->t = t;
	b = uv_buf_init(w->data, (unsigned)w->len);
	if (uv_write(&w->req, (uv_stream_t *)&t->in, &b, 1, stdio_written) != 0) {
		free(w);
		return SB_ERR_IO;
	}
	t->queued += w->len;
	return SB_OK;
}

static int stdio_send(void *tr, const char *msg, size_t len, int64_t id)
{
	struct mcp_stdio *t = tr;
	int rc;

	(void)id;
	if (t->closing || t->exited || t->out_eof)
		return SB_ERR_CLOSED;
	if (t->spawned)
		return stdio_write(t, msg, len, true);
	/* Not started yet (the workspace is being given to the sandbox): the
	 * message waits, whole, for the program's stdin. */
	if (t->early.len + len + 1 > MCP_STDIO_WRITE_MAX)
		return SB_ERR_AGAIN;
	if ((rc = buf_reserve(&t->early, len + 1)) != SB_OK)
		return rc == SB_ERR_NOMEM ? rc : SB_ERR_AGAIN;
	(void)buf_append(&t->early, msg, len);
	(void)buf_append(&t->early, "\n", 1);
	return SB_OK;
}

static void stdio_close(void *tr)
{
	struct mcp_stdio *t = tr;

	if (t->prep) {
		/* the ownership pass is still on the pool: stdio_owned runs at
		 * once, and reports the end once the timer is closed */
		t->prep->cancel(t->prep);
		return;
	}
	/* EOF on its stdin is the polite request; the signals follow */
	stdio_terminate(t, SIGTERM);
}

/* Starts the program t holds (loop thread). SB_OK: its pipes are open and
 * t->handles counts them. Otherwise why says why; a failed uv_spawn's
 * handle is being closed (counted in t->handles too). */
static int stdio_spawn(struct mcp_stdio *t, uv_loop_t *loop, char *why, size_t why_size)
{
	const struct mcp_server_config *c = mcp_server_cfg(t->s);
	int rc = SB_ERR_IO, err, pin[2] = {-1, -1}, pout[2] = {-1, -1}, perr[2] = {-1, -1};
	uv_stdio_container_t stdio[3 + SANDBOX_FDS_MAX];
	uv_process_options_t po;
	size_t i;

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
	for (i = 0; i < t->boxfds.n; i++) {
		stdio[3 + i].flags = UV_INHERIT_FD;
		stdio[3 + i].data.fd = t->boxfds.fd[i];
	}
	memset(&po, 0, sizeof po);
	po.exit_cb = stdio_exited;
	po.file = t->boxed ? t->boxed[0] : t->argv[0];
	po.args = t->boxed ? t->boxed : (char **)t->argv;
	po.env = (char **)t->envv;
	po.cwd = t->cwd;
	po.flags = UV_PROCESS_DETACHED;
	po.stdio_count = 3 + (int)t->boxfds.n;
	po.stdio = stdio;
	t->proc.data = t;
	tool_spawn_cloexec_all();
	err = uv_spawn(loop, &t->proc, &po);
	if (err) {
		rc = err == UV_ENOENT || err == UV_EACCES ? SB_ERR_NOTFOUND : SB_ERR_IO;
		snprintf(why, why_size, "cannot run %s: %s", c->command, uv_strerror(err));
		/* a failed uv_spawn leaves the handle to close */
		t->handles++;
		uv_close((uv_handle_t *)&t->proc, stdio_closed);
		goto out;
	}
	t->spawned = true;
	t->pid = t->proc.pid;
	uv_pipe_init(loop, &t->in, 0);
	uv_pipe_init(loop, &t->out, 0);
	uv_pipe_init(loop, &t->err, 0);
	t->in.data = t->out.data = t->err.data = t;
	t->handles += 4;
	(void)uv_pipe_open(&t->in, pin[1]);
	(void)uv_pipe_open(&t->out, pout[0]);
	(void)uv_pipe_open(&t->err, perr[0]);
	pin[1] = pout[0] = perr[0] = -1;
	uv_read_start((uv_stream_t *)&t->out, stdio_alloc, stdio_read);
	uv_read_start((uv_stream_t *)&t->err, stdio_alloc, stdio_err_read);
	if (t->early.len && stdio_write(t, t->early.data, t->early.len, false) != SB_OK)
		stdio_fail(t, "its stdin closed");
	buf_free(&t->early);
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
	/* the child holds its copies (bwrap reads and closes them) */
	sandbox_fds_close(&t->boxfds);
	sandbox_argv_free(t->boxed);
	t->boxed = NULL;
	return rc;
}

/* The ownership pass ended (loop thread; from inside stdio_close when it
 * cancelled it): start the program, or end the transport saying why not. */
static void stdio_owned(void *ud, int rc, char *content, bool is_error)
{
	struct mcp_stdio *t = ud;
	char why[sizeof t->why];

	t->prep = NULL;
	why[0] = '\0';
	if (rc == SB_ERR_ABORTED) {
		snprintf(why, sizeof why, "was stopped before it started");
		log_info("mcp", "the MCP server was stopped before its program ran",
		         LOG_S("server", mcp_server_label(t->s)));
	} else if (rc != SB_OK || is_error) { /* after "the MCP server NAME " */
		snprintf(why, sizeof why, "did not run: %s",
		         content && *content ? content
		                             : "its workspace cannot be given to the sandbox");
	}
	free(content);
	if (!why[0] && stdio_spawn(t, t->timer.loop, why, sizeof why) == SB_OK)
		return;
	/* nothing runs: the timer's close (and a failed spawn's) reports it */
	snprintf(t->why, sizeof t->why, "%s", why);
	t->closing = true;
	uv_close((uv_handle_t *)&t->timer, stdio_closed);
}

static int stdio_open(struct mcp_server *s, const struct mcp_env *env, void **out, char *why,
                      size_t why_size)
{
	const struct mcp_server_config *c = mcp_server_cfg(s);
	uv_loop_t *loop = mcp_server_loop(s);
	struct mcp_stdio *t = NULL;
	size_t n = 0, i;
	int rc = SB_ERR_NOMEM;
	bool own = false;

	if (!c->command || !env->workspace) {
		snprintf(why, why_size, "%s",
		         c->command ? "the agent has no workspace" : "no command");
		return SB_ERR_INVAL;
	}
	t = calloc(1, sizeof *t);
	if (!t)
		return SB_ERR_NOMEM;
	sandbox_fds_init(&t->boxfds);
	buf_init(&t->line, (size_t)(c->max_message > 0 ? c->max_message : (8 << 20)));
	buf_init(&t->errline, MCP_STDIO_STDERR_LINE);
	buf_init(&t->early, MCP_STDIO_WRITE_MAX);
	/* the timer first: every way out of an open that returned SB_OK
	 * closes it, and the last close reports the end */
	uv_timer_init(loop, &t->timer);
	t->timer.data = t;
	t->handles = 1;
	t->argv = calloc(c->n_args + 2, sizeof *t->argv);
	if (!t->argv)
		goto out;
	/* The real path: the ownership pass refuses a symlink in the
	 * workspace's place (one put there while the pass waits). */
	t->cwd = realpath(env->workspace, NULL);
	if (!t->cwd && !(t->cwd = strdup(env->workspace)))
		goto out;
	t->argv[0] = c->command;
	for (i = 0; i < c->n_args; i++)
		t->argv[i + 1] = c->args[i];
	if (asprintf(&t->home, "HOME=%s", t->cwd) < 0) {
		t->home = NULL;
		goto out;
	}
	t->envv[n++] = "PATH=/usr/local/bin:/usr/bin:/bin";
	t->envv[n++] = t->home;
	t->envv[n++] = "LANG=C.UTF-8";
	for (i = 0; i < c->n_env && i < MCP_STDIO_ENV_MAX; i++)
		t->envv[n++] = c->env[i];
	t->envv[n] = NULL;
	if (env->sandbox && env->sandbox->mode != SANDBOX_FULL) {
		struct sandbox_policy box = *env->sandbox;

		/* A root gateway's walk of the workspace runs on the pool
		 * (tool_spawn_own), as for the bash tool; the command line
		 * is built now, the program started when the walk is done. */
		own = tool_spawn_needs_own(env->sandbox);
		box.owned = box.owned || own;
		rc = sandbox_argv(&box, t->cwd, t->argv, t->envv, &t->boxed, &t->boxfds, why,
		                  why_size);
		if (rc != SB_OK)
			goto out;
		memcpy(t->cgroup, t->boxfds.cgroup, sizeof t->cgroup);
		t->boxfds.cgroup[0] = '\0';
	}
	t->s = s;
	if (own) {
		rc = tool_spawn_own(loop, t->cwd, env->sandbox, c->startup_timeout_ms, stdio_owned,
		                    t, &t->prep);
		if (rc != SB_OK) {
			t->s = NULL;
			goto out;
		}
	} else if ((rc = stdio_spawn(t, loop, why, why_size)) != SB_OK) {
		t->s = NULL;
		goto out;
	}
	*out = t;
	t = NULL;
	rc = SB_OK;
out:
	if (t) {
		/* nothing started: the handles' last close frees t and removes
		 * the cgroup, reporting nothing (t->s is NULL) */
		t->closing = true;
		uv_close((uv_handle_t *)&t->timer, stdio_closed);
	}
	return rc;
}

const struct mcp_transport_ops mcp_stdio_ops = {
    .name = "stdio",
    .open = stdio_open,
    .send = stdio_send,
    .close = stdio_close,
};
