/*
 * spawn.c - the one place tools start processes (see spawn.h).
 *
 * Three handles per child: the process, the read end of one pipe that the
 * child has as both stdout and stderr, and a timer (the time limit while the
 * child runs, the drain limit after it exited). The callback runs from the
 * last close callback, once all three are closed, and the state is freed
 * right after it.
 */
#include "agents/safety/spawn.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agents/tools/common.h"
#include "gateway/core/buf.h"
#include "gateway/core/err.h"

#define SPAWN_READ_CHUNK 65536
#define SPAWN_MAX_ENV 64

struct tool_spawn {
	uv_process_t proc;
	uv_pipe_t pipe;
	uv_timer_t timer;
	tool_spawn_cb cb; /* NULL when the spawn failed: close quietly */
	void *ud;
	int open_handles;
	bool proc_init, exited, eof, closing;
	bool timed_out, cancelled, sandboxed;
	int64_t exit_status;
	int term_signal;
	int pid;
	uint64_t t0;
	struct buf head;
	char *ring; /* the tail, a ring of keep_tail bytes */
	size_t ring_cap, ring_pos, ring_fill;
	size_t total;
	uv_loop_t *loop;
	char cgroup[512]; /* the command's pids cgroup (sandbox.h), removed last */
	uv_timer_t rm_timer;
	int rm_tries;
	char rd[SPAWN_READ_CHUNK];
};

#define SPAWN_CGROUP_RETRY_MS 100
#define SPAWN_CGROUP_TRIES 100

static void spawn_kill_group(struct tool_spawn *sp)
{
	/* The child called setsid (UV_PROCESS_DETACHED): its pid is the
	 * group's id, and the group outlives the child while any member
	 * lives. */
	if (sp->pid > 0)
		(void)kill(-sp->pid, SIGKILL);
}

static void spawn_deliver(struct tool_spawn *sp)
{
	struct tool_spawn_result res;
	char *tail = NULL;
	size_t first;
	int rc;

	memset(&res, 0, sizeof res);
	if (sp->ring_fill) {
		tail = malloc(sp->ring_fill);
		if (tail) {
			/* Oldest byte first: after ring_pos when the ring is
			 * full, from 0 when it never wrapped. */
			if (sp->ring_fill == sp->ring_cap) {
				first = sp->ring_cap - sp->ring_pos;
				memcpy(tail, sp->ring + sp->ring_pos, first);
				memcpy(tail + first, sp->ring, sp->ring_pos);
			} else {
				memcpy(tail, sp->ring, sp->ring_fill);
			}
			res.tail = tail;
			res.tail_len = sp->ring_fill;
		}
	}
	res.exit_code = sp->term_signal ? -1 : (int)sp->exit_status;
	res.term_signal = sp->term_signal;
	res.timed_out = sp->timed_out;
	res.cancelled = sp->cancelled;
	res.output = sp->head.data ? sp->head.data : "";
	res.output_len = sp->head.len;
	res.output_dropped = sp->total - sp->head.len - res.tail_len;
	res.seconds = (double)(uv_hrtime() - sp->t0) / 1e9;
	res.sandboxed = sp->sandboxed;
	rc = sp->cancelled ? SB_ERR_ABORTED : sp->timed_out ? SB_ERR_TIMEOUT : SB_OK;
	sp->cb(sp->ud, rc, &res);
	free(tail);
}

/* Marks every descriptor above stderr close-on-exec, in this process,
 * just before a fork: whatever opened it (libcurl's sockets to the model
 * provider, a library's pipe, a descriptor this process inherited), no fd
 * but the child's stdio pipe crosses into a command. The process keeps
 * them open. CLOSE_RANGE_CLOEXEC (Linux 5.11), else /proc/self/fd one by
 * one. What another thread opens without O_CLOEXEC between this and the
 * fork could still cross; every fd the gateway opens itself is O_CLOEXEC
 * (and libcurl's sockets SOCK_CLOEXEC, gateway/core/httpc.c). */
void tool_spawn_cloexec_all(void)
{
	DIR *d;
	struct dirent *de;

	if (close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) == 0)
		return;
	d = opendir("/proc/self/fd");
	if (!d)
		return;
	while ((de = readdir(d))) {
		char *end;
		long fd = strtol(de->d_name, &end, 10);

		if (*end || end == de->d_name || fd < 3 || fd == dirfd(d))
			continue;
		(void)fcntl((int)fd, F_SETFD, fcntl((int)fd, F_GETFD) | FD_CLOEXEC);
	}
	closedir(d);
}

static void spawn_free(struct tool_spawn *sp)
{
	buf_free(&sp->head);
	free(sp->ring);
	free(sp);
}

static void spawn_rm_closed(uv_handle_t *h)
{
	spawn_free(h->data);
}

/* The cgroup empties once the kernel has reaped the sandbox's last
 * process, a moment after bwrap itself exited: retried for a while. */
static void spawn_rm_retry(uv_timer_t *t)
{
	struct tool_spawn *sp = t->data;

	if (sandbox_cgroup_remove(sp->cgroup) == SB_ERR_AGAIN && ++sp->rm_tries < SPAWN_CGROUP_TRIES)
		return;
	uv_close((uv_handle_t *)t, spawn_rm_closed);
}

static void spawn_closed(uv_handle_t *h)
{
	struct tool_spawn *sp = h->data;

	if (--sp->open_handles > 0)
		return;
	if (sp->cb)
		spawn_deliver(sp);
	if (sandbox_cgroup_remove(sp->cgroup) == SB_ERR_AGAIN) {
		uv_timer_init(sp->loop, &sp->rm_timer);
		sp->rm_timer.data = sp;
		uv_timer_start(&sp->rm_timer, spawn_rm_retry, SPAWN_CGROUP_RETRY_MS,
		               SPAWN_CGROUP_RETRY_MS);
		return;
	}
	spawn_free(sp);
}

static void spawn_close_all(struct tool_spawn *sp)
{
	sp->closing = true;
	uv_close((uv_handle_t *)&sp->timer, spawn_closed);
	uv_close((uv_handle_t *)&sp->pipe, spawn_closed);
	if (sp->proc_init)
		uv_close((uv_handle_t *)&sp->proc, spawn_closed);
}

static void spawn_maybe_finish(struct tool_spawn *sp)
{
	if (sp->exited && sp->eof && !sp->closing)
		spawn_close_all(sp);
}

static void spawn_capture(struct tool_spawn *sp, const char *p, size_t n)
{
	size_t room = sp->head.max - sp->head.len, take = n < room ? n : room, part;

	sp->total += n;
	if (take && buf_append(&sp->head, p, take) != SB_OK)
		take = 0; /* out of memory: the bytes count as dropped */
	p += take;
	n -= take;
	if (!sp->ring_cap || !n)
		return;
	/* Only the last ring_cap bytes of this read can survive. */
	if (n > sp->ring_cap) {
		p += n - sp->ring_cap;
		n = sp->ring_cap;
	}
	while (n) {
		part = sp->ring_cap - sp->ring_pos;
		if (part > n)
			part = n;
		memcpy(sp->ring + sp->ring_pos, p, part);
		sp->ring_pos = (sp->ring_pos + part) % sp->ring_cap;
		sp->ring_fill =
		    sp->ring_fill + part > sp->ring_cap ? sp->ring_cap : sp->ring_fill + part;
		p += part;
		n -= part;
	}
}

static void spawn_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
	struct tool_spawn *sp = h->data;

	b->base = sp->rd;
	b->len = sizeof sp->rd;
}

static void spawn_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b)
{
	struct tool_spawn *sp = s->data;

	if (nread > 0) {
		spawn_capture(sp, b->base, (size_t)nread);
		return;
	}
	if (nread == 0)
		return;
	/* UV_EOF, or an error: either way nothing more will come. */
	uv_read_stop(s);
	sp->eof = true;
	spawn_maybe_finish(sp);
}

static void spawn_drained(uv_timer_t *t)
{
	struct tool_spawn *sp = t->data;

	/* The child is gone but something it started still holds the pipe. */
	spawn_kill_group(sp);
	uv_read_stop((uv_stream_t *)&sp->pipe);
	sp->eof = true;
	spawn_maybe_finish(sp);
}

static void spawn_timed_out(uv_timer_t *t)
{
	struct tool_spawn *sp = t->data;

	sp->timed_out = true;
	spawn_kill_group(sp);
}

static void spawn_exited(uv_process_t *p, int64_t status, int term_signal)
{
	struct tool_spawn *sp = p->data;

	sp->exited = true;
	sp->exit_status = status;
	sp->term_signal = term_signal;
	if (!sp->eof)
		uv_timer_start(&sp->timer, spawn_drained, TOOL_SPAWN_DRAIN_MS, 0);
	spawn_maybe_finish(sp);
}

int tool_spawn(uv_loop_t *loop, const struct tool_spawn_options *opt, tool_spawn_cb cb, void *ud,
               struct tool_spawn **out)
{
	int rc = SB_ERR_NOMEM, err;
	struct tool_spawn *sp = NULL;
	const char *env[SPAWN_MAX_ENV + 4];
	char *home = NULL, **boxed = NULL, why[512];
	size_t n = 0, i, len;
	uv_file fds[2] = {-1, -1};
	uv_stdio_container_t stdio[3 + SANDBOX_FDS_MAX];
	uv_process_options_t po;
	struct sandbox_fds boxfds;

	sandbox_fds_init(&boxfds);
	if (out)
		*out = NULL;
	if (!loop || !opt || !opt->argv || !opt->argv[0] || !opt->cwd || opt->timeout_ms <= 0 ||
	    !cb)
		return SB_ERR_INVAL;
	sp = calloc(1, sizeof *sp);
	if (!sp)
		goto out;
	buf_init(&sp->head, opt->max_output);
	if (opt->keep_tail) {
		sp->ring = malloc(opt->keep_tail);
		if (!sp->ring)
			goto out;
		sp->ring_cap = opt->keep_tail;
	}
	len = strlen(opt->cwd) + sizeof "HOME=";
	home = malloc(len);
	if (!home)
		goto out;
	snprintf(home, len, "HOME=%s", opt->cwd);
	env[n++] = "PATH=" SPAWN_PATH;
	env[n++] = home;
	env[n++] = "LANG=C.UTF-8";
	for (i = 0; opt->env && opt->env[i]; i++) {
		if (i == SPAWN_MAX_ENV) {
			rc = SB_ERR_INVAL;
			goto out;
		}
		env[n++] = opt->env[i];
	}
	env[n] = NULL;
	if (opt->sandbox && opt->sandbox->mode != SANDBOX_FULL) {
		why[0] = '\0';
		rc = sandbox_argv(opt->sandbox, opt->cwd, opt->argv, env, &boxed, &boxfds, why,
		                  sizeof why);
		if (rc != SB_OK) {
			if (opt->why && opt->why_size)
				snprintf(opt->why, opt->why_size, "%s", why);
			goto out;
		}
		sp->sandboxed = true;
		memcpy(sp->cgroup, boxfds.cgroup, sizeof sp->cgroup);
		boxfds.cgroup[0] = '\0'; /* sp owns it now */
	}
	sp->loop = loop;

	rc = SB_ERR_IO;
	if (uv_pipe(fds, UV_NONBLOCK_PIPE, 0) != 0)
		goto out;
	sp->cb = NULL; /* until started: failures close quietly */
	sp->ud = ud;
	sp->t0 = uv_hrtime();
	uv_timer_init(loop, &sp->timer);
	uv_pipe_init(loop, &sp->pipe, 0);
	sp->timer.data = sp;
	sp->pipe.data = sp;
	sp->proc.data = sp;
	sp->open_handles = 2;
	if (uv_pipe_open(&sp->pipe, fds[0]) != 0) {
		close(fds[0]);
		spawn_close_all(sp);
		sp = NULL; /* freed by the close callbacks */
		goto out;
	}
	fds[0] = -1; /* the pipe handle owns it */

	memset(stdio, 0, sizeof stdio);
	stdio[0].flags = UV_IGNORE; /* libuv gives the child /dev/null */
	stdio[1].flags = UV_INHERIT_FD;
	stdio[1].data.fd = fds[1];
	stdio[2].flags = UV_INHERIT_FD;
	stdio[2].data.fd = fds[1];
	/* what bwrap reads at start (sandbox.h): the child's 3, 4, ... */
	for (i = 0; i < boxfds.n; i++) {
		stdio[3 + i].flags = UV_INHERIT_FD;
		stdio[3 + i].data.fd = boxfds.fd[i];
	}
	memset(&po, 0, sizeof po);
	po.exit_cb = spawn_exited;
	po.file = boxed ? boxed[0] : opt->argv[0];
	po.args = boxed ? boxed : (char **)opt->argv;
	po.env = (char **)env;
	po.cwd = opt->cwd;
	po.flags = UV_PROCESS_DETACHED;
	po.stdio_count = 3 + (int)boxfds.n;
	po.stdio = stdio;
	tool_spawn_cloexec_all();
	err = uv_spawn(loop, &sp->proc, &po);
	sp->proc_init = true; /* even a failed uv_spawn leaves it to close */
	sp->open_handles = 3;
	close(fds[1]);
	fds[1] = -1;
	if (err) {
		rc = err == UV_ENOENT || err == UV_EACCES ? SB_ERR_NOTFOUND : SB_ERR_IO;
		if (opt->why && opt->why_size)
			snprintf(opt->why, opt->why_size, "cannot run %s: %s", opt->argv[0],
			         uv_strerror(err));
		spawn_close_all(sp);
		sp = NULL; /* freed by the close callbacks */
		goto out;
	}
	sp->pid = sp->proc.pid;
	sp->cb = cb;
	uv_read_start((uv_stream_t *)&sp->pipe, spawn_alloc, spawn_read);
	uv_timer_start(&sp->timer, spawn_timed_out, (uint64_t)opt->timeout_ms, 0);
	if (out)
		*out = sp;
	sp = NULL;
	rc = SB_OK;
out:
	if (fds[1] >= 0)
		close(fds[1]);
	if (sp) {
		(void)sandbox_cgroup_remove(sp->cgroup);
		spawn_free(sp);
	}
	(void)sandbox_cgroup_remove(boxfds.cgroup);
	free(home);
	sandbox_argv_free(boxed);
	sandbox_fds_close(&boxfds);
	return rc;
}

void tool_spawn_cancel(struct tool_spawn *sp)
{
	if (!sp || sp->cancelled)
		return;
	sp->cancelled = true;
	spawn_kill_group(sp);
	if (sp->exited && !sp->eof) {
		uv_read_stop((uv_stream_t *)&sp->pipe);
		sp->eof = true;
		spawn_maybe_finish(sp);
	}
}

/* ---- the ownership pass of a root gateway ---- */

bool tool_spawn_needs_own(const struct sandbox_policy *policy)
{
	return policy && policy->mode != SANDBOX_FULL && geteuid() == 0;
}

/* The ownership job's own copy of what sandbox_own reads. */
struct spawn_own {
	struct sandbox_policy policy;
	char *workspace;
	char **more; /* the copied hide_more */
	size_t n_more;
};

static void spawn_own_free(void *arg)
{
	struct spawn_own *o = arg;

	if (!o)
		return;
	for (size_t i = 0; i < SANDBOX_HIDE_MAX; i++)
		free((char *)o->policy.hide[i]);
	for (size_t i = 0; i < o->n_more; i++)
		free(o->more[i]);
	free(o->more);
	free(o->workspace);
	free(o);
}

static struct spawn_own *spawn_own_new(const char *workspace, const struct sandbox_policy *p)
{
	struct spawn_own *o = calloc(1, sizeof *o);

	if (!o)
		return NULL;
	o->policy.mode = p->mode;
	o->policy.uid = p->uid;
	o->policy.gid = p->gid;
	if (!(o->workspace = strdup(workspace)))
		goto fail;
	for (size_t i = 0; i < p->n_hide && i < SANDBOX_HIDE_MAX; i++)
		if (p->hide[i] && !(o->policy.hide[i] = strdup(p->hide[i])))
			goto fail;
	o->policy.n_hide = p->n_hide < SANDBOX_HIDE_MAX ? p->n_hide : SANDBOX_HIDE_MAX;
	if (p->hide_more && p->n_hide_more) {
		if (!(o->more = calloc(p->n_hide_more, sizeof *o->more)))
			goto fail;
		for (; o->n_more < p->n_hide_more; o->n_more++)
			if (p->hide_more[o->n_more] &&
			    !(o->more[o->n_more] = strdup(p->hide_more[o->n_more])))
				goto fail;
		o->policy.hide_more = (const char *const *)o->more;
		o->policy.n_hide_more = o->n_more;
	}
	return o;
fail:
	spawn_own_free(o);
	return NULL;
}

/* Pool thread. */
static void spawn_own_job(void *arg, struct tool_job_result *res)
{
	struct spawn_own *o = arg;
	int rc = sandbox_own(&o->policy, o->workspace, sandbox_uid_of(&o->policy),
	                     sandbox_gid_of(&o->policy), NULL, NULL);

	if (rc == SB_OK)
		tool_result_text(res, "");
	else if (rc == SB_ERR_NOMEM)
		res->rc = SB_ERR_NOMEM;
	else
		tool_result_errorf(res, "the workspace %s cannot be given to the sandbox",
		                   o->workspace);
}

int tool_spawn_own(uv_loop_t *loop, const char *workspace, const struct sandbox_policy *policy,
                   int64_t timeout_ms, tool_done_cb done, void *ud, struct tool_run **run)
{
	struct spawn_own *o = spawn_own_new(workspace, policy);
	struct tool_ctx ctx;

	if (!o)
		return SB_ERR_NOMEM;
	/* tool_job_start reads only the loop and the time limit */
	memset(&ctx, 0, sizeof ctx);
	ctx.loop = loop;
	ctx.timeout_ms = timeout_ms;
	return tool_job_start(&ctx, spawn_own_job, o, spawn_own_free, done, ud, run);
}
