/*
 * cli_eval.c - `switchboard eval [AGENT]`: runs the golden cases of an
 * agent's workspace (evals/NAME.yaml, eval_case.h) through the agent runtime,
 * without a gateway, and reports which held (docs/eval.md).
 *
 * Each case runs in a fresh temporary home with a copy of the workspace
 * (eval_tree.h), through the same runner as the gateway and `agent run`
 * (gateway/pipeline/runner.h): the same prompt, turn loop, tools,
 * permission gates and sandbox, against the agent's model or the one
 * --model names. Everything blocking (copies, checks, removal) happens
 * while no loop runs; each case has a loop of its own for its turns.
 */
#include <errno.h>
#include <fnmatch.h>
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agents/models.h"
#include "gateway/cli/cli.h"
#include "gateway/cli/eval_case.h"
#include "gateway/cli/eval_tree.h"
#include "gateway/config/config.h"
#include "gateway/core/beneath.h"
#include "gateway/core/buf.h"
#include "gateway/core/clock.h"
#include "gateway/core/err.h"
#include "gateway/core/host.h"
#include "gateway/core/httpc.h"
#include "gateway/core/log.h"
#include "gateway/core/num.h"
#include "gateway/daemon/host_common.h"
#include "gateway/pipeline/runner.h"
#include "gateway/store/store.h"
#include "workspaces/history.h"

/* Exit codes (documented in the usage text and docs/eval.md). */
enum cli_eval_exit {
	CLI_EVAL_PASSED = 0,
	CLI_EVAL_FAILED = 1, /* a case failed or could not run */
	CLI_EVAL_USAGE = 2,
	CLI_EVAL_CONFIG = 78, /* EX_CONFIG, as the gateway: the configuration or the cases */
};

#define CLI_EVAL_FILTERS_MAX 64
#define CLI_EVAL_TIMEOUT_DEFAULT_MS (5 * 60 * 1000)
#define CLI_EVAL_CALLS_MAX 10000

enum eval_outcome { EVAL_PASS, EVAL_FAIL, EVAL_ERROR, EVAL_SKIPPED };

struct eval_call {
	char id[128];
	size_t turn;
	char *name;
	json_t *input;
	bool is_error;
	bool done;
};

struct eval_result {
	const struct eval_case *c;
	enum eval_outcome outcome;
	int64_t ms;
	json_t *failures; /* [{expectation, seen}] */
	char *error;      /* the run could not complete: why */
	json_t *replies;  /* the reply of each turn */
	struct eval_call *calls;
	size_t n_calls, cap_calls;
	char kept[PATH_MAX]; /* --keep: where the copy stayed */
};

struct cli_eval {
	/* options */
	const char *agent_arg;
	const char *workspace_arg;
	const char *config_arg;
	const char *model_arg;
	const char *junit;
	const char *filters[CLI_EVAL_FILTERS_MAX];
	size_t n_filters;
	int64_t timeout_ms;
	bool json;
	bool keep;
	/* what the options resolve to */
	char home[PATH_MAX];
	char cfg_path[PATH_MAX];
	bool have_config; /* else a configuration of one agent is made up */
	char agent[128];
	char workspace[PATH_MAX]; /* absolute */
	char shown[PATH_MAX];     /* how messages name it */
	char script[PATH_MAX];    /* --model scripted:FILE, absolute */
	char model[512];          /* what runs, for the report */
	char commit[41];
	bool dirty;
	bool git;
	char started[32]; /* UTC, "2026-12-03T13:57:00" */
	volatile sig_atomic_t interrupted;
	struct eval_suite *suite;
	struct eval_result *results;
	size_t n_results;
};

/* One case's run: a loop, a store, a runner, its turns one after another. */
struct eval_run {
	struct cli_eval *e;
	struct eval_result *r;
	uv_loop_t loop;
	struct config *cfg;
	struct store *store;
	struct httpc *httpc;
	struct models *models;
	struct runner *runner;
	struct run_job *job;
	struct host host;
	uv_signal_t sigint, sigterm;
	uv_timer_t deadline, next, wind_down;
	bool loop_ready, timers_ready;
	size_t turn;
	bool timed_out;
	bool winding; /* the wind-down is under way */
	char session_key[256];
	struct turn_events ev;
};

static void cli_eval_usage(FILE *f)
{
	fprintf(f,
	        "usage: switchboard eval [AGENT] [--workspace DIR]\n"
	        "                        [--model scripted:FILE|PROVIDER/MODEL] [--case NAME]...\n"
	        "                        [--timeout DURATION] [--junit FILE] [--json] [--keep]\n"
	        "                        [--config FILE]\n\n"
	        "Runs the golden cases of the workspace (evals/NAME.yaml) through the agent\n"
	        "runtime, without a gateway, each in a fresh copy of the workspace with a fresh\n"
	        "session, and prints a table of the results (docs/eval.md).\n"
	        "  AGENT               the agent (default: the default agent)\n"
	        "  -w, --workspace DIR the workspace to evaluate (default: the agent's); without\n"
	        "                      a configuration file, an agent of default settings\n"
	        "  -m, --model M       scripted:FILE (a script of the scripted provider) or a\n"
	        "                      PROVIDER/MODEL of the configuration, not the agent's\n"
	        "  -k, --case NAME     only the cases whose name matches (a glob; repeatable)\n"
	        "  -t, --timeout D     each case's time limit unless it sets one (default 5m)\n"
	        "  -j, --junit FILE    also write the results as JUnit XML\n"
	        "      --json          print the results as JSON instead of the table\n"
	        "      --keep          keep each case's workspace copy and print where it is\n"
	        "  -c, --config FILE   configuration file\n"
	        "exit codes: 0 every case passed, 1 a case failed or could not run, 2 usage,\n"
	        "            78 a configuration or case file error (shown as file:line:col)\n");
}

/* ---- signals ----
 *
 * Ctrl-C and SIGTERM stay blocked while no loop runs (copying, checking,
 * removing a case's directory), so they never cut those short and leave a
 * copy behind; a case's loop takes them while it runs, and between cases a
 * pending one stops the rest. */

static void eval_signals(int how)
{
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	pthread_sigmask(how, &set, NULL);
}

static bool eval_signal_pending(void)
{
	sigset_t set;

	return sigpending(&set) == 0 && (sigismember(&set, SIGINT) || sigismember(&set, SIGTERM));
}

/* ---- results ---- */

static void eval_result_free(struct eval_result *r)
{
	for (size_t i = 0; i < r->n_calls; i++) {
		free(r->calls[i].name);
		json_decref(r->calls[i].input);
	}
	free(r->calls);
	json_decref(r->failures);
	json_decref(r->replies);
	free(r->error);
}

static void eval_set_error(struct eval_result *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void eval_set_error(struct eval_result *r, const char *fmt, ...)
{
	struct buf b;
	va_list ap;

	if (r->error)
		return;
	buf_init(&b, 8192);
	va_start(ap, fmt);
	buf_vprintf(&b, fmt, ap);
	va_end(ap);
	r->error = b.data ? buf_steal(&b) : strdup("out of memory");
	buf_free(&b);
}

/* ---- host ---- */

static struct httpc *eval_http(void *ctx)
{
	struct eval_run *x = ctx;

	if (!x->httpc && host_common_httpc_new(&x->httpc, &x->loop, x->cfg))
		x->httpc = NULL;
	return x->httpc;
}

static int eval_deliver(void *ctx, const struct host_outbound *msg, host_deliver_cb cb, void *ud)
{
	struct eval_run *x = ctx;

	/* The message tool's sends land in the run's own store, never a chat. */
	return host_common_deliver(x->store, msg, cb, ud, NULL, NULL);
}

static struct config *eval_config(void *ctx)
{
	return config_ref(((struct eval_run *)ctx)->cfg);
}

static struct models *eval_acquire(void *ud, struct config **cfg, void **token)
{
	struct eval_run *x = ud;

	*cfg = config_ref(x->cfg);
	*token = NULL;
	return x->models;
}

static void eval_release(void *ud, struct config *cfg, void *token)
{
	(void)ud;
	(void)token;
	config_unref(cfg);
}

/* ---- events ---- */

static void eval_tool_start(void *ud, const char *id, const char *name, const json_t *input)
{
	struct eval_run *x = ud;
	struct eval_result *r = x->r;
	struct eval_call *c;

	if (r->n_calls == CLI_EVAL_CALLS_MAX)
		return;
	if (r->n_calls == r->cap_calls) {
		size_t cap = r->cap_calls ? r->cap_calls * 2 : 8;
		struct eval_call *v = realloc(r->calls, cap * sizeof *v);

		if (!v)
			return;
		r->calls = v;
		r->cap_calls = cap;
	}
	c = &r->calls[r->n_calls];
	memset(c, 0, sizeof *c);
	c->turn = x->turn;
	snprintf(c->id, sizeof c->id, "%s", id ? id : "");
	c->name = strdup(name ? name : "");
	c->input = input ? json_deep_copy(input) : json_object();
	if (!c->name) {
		json_decref(c->input);
		return;
	}
	r->n_calls++;
}

static void eval_tool_end(void *ud, const char *id, const char *name, bool is_error,
                          const char *content, double seconds)
{
	struct eval_run *x = ud;
	struct eval_result *r = x->r;

	(void)content;
	(void)seconds;
	/* The latest unfinished call of that id (ids may repeat across turns). */
	for (size_t i = r->n_calls; i-- > 0;)
		if (!r->calls[i].done && strcmp(r->calls[i].id, id ? id : "") == 0 &&
		    strcmp(r->calls[i].name, name ? name : "") == 0) {
			r->calls[i].done = true;
			r->calls[i].is_error = is_error;
			return;
		}
}

/* ---- one case ---- */

static void eval_wind_down_cb(uv_timer_t *t)
{
	struct eval_run *x = t->data;

	uv_close((uv_handle_t *)t, NULL);
	uv_close((uv_handle_t *)&x->deadline, NULL);
	uv_close((uv_handle_t *)&x->next, NULL);
	eval_signals(SIG_BLOCK);
	uv_close((uv_handle_t *)&x->sigint, NULL);
	uv_close((uv_handle_t *)&x->sigterm, NULL);
	x->timers_ready = false;
	httpc_close(x->httpc);
	x->httpc = NULL;
	store_close(x->store);
	x->store = NULL;
}

static void eval_wind_down(struct eval_run *x)
{
	if (x->winding)
		return;
	x->winding = true;
	uv_timer_stop(&x->deadline);
	uv_timer_init(&x->loop, &x->wind_down);
	x->wind_down.data = x;
	uv_timer_start(&x->wind_down, eval_wind_down_cb, 0, 0);
}

static int eval_start_turn(struct eval_run *x);

static void eval_next_cb(uv_timer_t *t)
{
	struct eval_run *x = t->data;

	if (x->e->interrupted) {
		eval_set_error(x->r, "interrupted");
		eval_wind_down(x);
		return;
	}
	if (eval_start_turn(x) != SB_OK)
		eval_wind_down(x);
}

static size_t eval_turns(const struct eval_case *c)
{
	return c->turns ? c->n_turns : c->steps ? c->n_steps : 1;
}

static void eval_turn_done(void *ud, const struct run_outcome *o)
{
	struct eval_run *x = ud;
	struct eval_result *r = x->r;
	const struct eval_case *c = r->c;
	const char *text;

	x->job = NULL;
	if (o->rc != SB_OK) {
		if (x->timed_out)
			eval_set_error(
			    r, "turn %zu: the time limit (%lld ms) was reached", x->turn + 1,
			    (long long)(c->timeout_ms ? c->timeout_ms : x->e->timeout_ms));
		else
			eval_set_error(r, "turn %zu: %s", x->turn + 1,
			               o->detail  ? o->detail
			               : o->error ? o->error
			                          : sb_strerror(o->rc));
		eval_wind_down(x);
		return;
	}
	text = o->result->text ? o->result->text : "";
	json_array_append_new(r->replies, eval_utf8_string(text, strlen(text)));
	if (o->result->end != TURN_END_TURN) {
		if (x->timed_out)
			eval_set_error(
			    r, "turn %zu: the time limit (%lld ms) was reached", x->turn + 1,
			    (long long)(c->timeout_ms ? c->timeout_ms : x->e->timeout_ms));
		else
			eval_set_error(r, "turn %zu ended with %s%s%s", x->turn + 1,
			               turn_end_name(o->result->end),
			               o->result->detail && *o->result->detail ? ": " : "",
			               o->result->detail ? o->result->detail : "");
		eval_wind_down(x);
		return;
	}
	if (++x->turn < eval_turns(c) && !x->e->interrupted) {
		/* Not from inside the runner's callback: the job is still
		 * finishing its transcript. */
		uv_timer_start(&x->next, eval_next_cb, 0, 0);
		return;
	}
	if (x->e->interrupted)
		eval_set_error(r, "interrupted");
	eval_wind_down(x);
}

static int eval_start_turn(struct eval_run *x)
{
	const struct eval_case *c = x->r->c;
	struct run_request req;
	int rc;

	memset(&req, 0, sizeof req);
	req.agent_id = x->e->agent;
	req.session_key = x->session_key;
	req.text = c->turns ? c->turns[x->turn] : c->steps ? c->steps[x->turn].message : c->message;
	req.channel = c->channel ? c->channel : "cli";
	req.sender = c->sender;
	req.group = c->group;
	/* The operator's own conversation is the agent's private main session. */
	req.main_session = !c->group && !c->sender;
	req.ev = &x->ev;
	rc = runner_run(x->runner, &req, eval_turn_done, x, &x->job);
	if (rc)
		eval_set_error(x->r, "turn %zu: %s", x->turn + 1, sb_strerror(rc));
	return rc;
}

static void eval_deadline_cb(uv_timer_t *t)
{
	struct eval_run *x = t->data;

	x->timed_out = true;
	if (x->job)
		runner_abort(x->job, "the case's time limit was reached");
}

static void eval_on_signal(uv_signal_t *h, int signum)
{
	struct eval_run *x = h->data;

	(void)signum;
	x->e->interrupted = 1;
	if (x->job)
		runner_abort(x->job, "interrupted by the operator");
}

static void eval_run_close(struct eval_run *x)
{
	runner_free(x->runner);
	x->runner = NULL;
	models_free(x->models);
	x->models = NULL;
	httpc_close(x->httpc);
	x->httpc = NULL;
	if (x->store)
		store_close(x->store);
	x->store = NULL;
	if (x->timers_ready) {
		uv_close((uv_handle_t *)&x->deadline, NULL);
		uv_close((uv_handle_t *)&x->next, NULL);
		eval_signals(SIG_BLOCK);
		uv_close((uv_handle_t *)&x->sigint, NULL);
		uv_close((uv_handle_t *)&x->sigterm, NULL);
		x->timers_ready = false;
	}
	if (x->loop_ready) {
		uv_run(&x->loop, UV_RUN_DEFAULT);
		if (uv_loop_close(&x->loop) != 0)
			fprintf(stderr, "switchboard eval: handles left open\n");
		x->loop_ready = false;
	}
}

/* Loads the configuration for one case (home: where relative paths of a
 * made-up configuration resolve). */
static int eval_load_config(const struct cli_eval *e, const char *home, struct config **out)
{
	struct cfg_errors errs;
	char text[256];
	int rc;

	cfg_errors_init(&errs);
	if (e->have_config) {
		rc = config_load(e->cfg_path, e->home, out, &errs);
	} else {
		snprintf(text, sizeof text, "agents:\n  - id: %s\n", e->agent);
		rc = config_load_text(text, "<eval>", home, out, &errs);
	}
	if (rc)
		cfg_errors_print(&errs, stderr);
	cfg_errors_free(&errs);
	return rc;
}

/* Runs case r->c in a fresh home (tmp) with a copy of the workspace. */
static void eval_run_case(struct cli_eval *e, struct eval_result *r)
{
	struct eval_run x;
	struct config_isolation iso;
	struct store_options so;
	struct runner_options ro;
	char tmp[PATH_MAX - 32], ws[PATH_MAX], why[1024];
	const char *tmpdir = getenv("TMPDIR");
	int64_t start = clock_mono_ms(), limit;
	int rc, fd = -1;
	struct eval_observed ob;
	struct eval_tool_call *calls = NULL;
	const char **replies = NULL;
	size_t n_replies = 0;

	memset(&x, 0, sizeof x);
	x.e = e;
	x.r = r;
	r->failures = json_array();
	r->replies = json_array();
	if (!r->failures || !r->replies) {
		eval_set_error(r, "out of memory");
		goto out_time;
	}
	if (snprintf(tmp, sizeof tmp, "%s/switchboard-eval.XXXXXX",
	             tmpdir && *tmpdir ? tmpdir : "/tmp") >= (int)sizeof tmp ||
	    !mkdtemp(tmp)) {
		eval_set_error(r, "cannot create a temporary directory in %s",
		               tmpdir && *tmpdir ? tmpdir : "/tmp");
		goto out_time;
	}
	if ((size_t)snprintf(ws, sizeof ws, "%.*s/workspace", PATH_MAX - 16, tmp) >= sizeof ws) {
		eval_set_error(r, "the temporary directory's path is too long");
		goto out;
	}
	/* The cases are the examiner's: the agent under test does not get to
	 * read the expected answers. */
	rc = eval_tree_copy(e->workspace, ws, "evals", why, sizeof why);
	if (rc) {
		eval_set_error(r, "cannot copy the workspace: %s", why);
		goto out;
	}
	if (eval_load_config(e, tmp, &x.cfg) != SB_OK) {
		eval_set_error(r, "the configuration cannot be loaded any more");
		goto out;
	}
	iso = (struct config_isolation){.agent_id = e->agent,
	                                .home = tmp,
	                                .workspace = ws,
	                                .script = e->script[0] ? e->script : NULL,
	                                .model = e->script[0] ? NULL : e->model_arg};
	rc = config_isolate_agent(x.cfg, &iso, why, sizeof why);
	if (rc) {
		eval_set_error(r, "%s", why);
		goto out;
	}
	log_set_secrets((const char *const *)x.cfg->secrets, x.cfg->n_secrets);
	if (uv_loop_init(&x.loop)) {
		eval_set_error(r, "cannot start an event loop");
		goto out;
	}
	x.loop_ready = true;
	x.host = (struct host){.ctx = &x,
	                       .loop = &x.loop,
	                       .deliver = eval_deliver,
	                       .http_client = eval_http,
	                       .config = eval_config};
	memset(&so, 0, sizeof so);
	so.path = x.cfg->store.path;
	so.busy_timeout_ms = x.cfg->store.busy_timeout_ms;
	rc = store_open(&x.store, &x.loop, &so);
	if (rc) {
		eval_set_error(r, "cannot open the store %s: %s", so.path, sb_strerror(rc));
		goto out;
	}
	rc = models_new(&x.models, x.cfg->providers, x.cfg->n_providers, &x.host, NULL);
	if (rc) {
		eval_set_error(r, "cannot set up the model providers: %s", sb_strerror(rc));
		goto out;
	}
	memset(&ro, 0, sizeof ro);
	ro.loop = &x.loop;
	ro.host = &x.host;
	ro.store = x.store;
	ro.ud = &x;
	ro.acquire = eval_acquire;
	ro.release = eval_release;
	rc = runner_new(&x.runner, &ro);
	if (rc) {
		eval_set_error(r, "cannot start the agent runtime: %s", sb_strerror(rc));
		goto out;
	}
	snprintf(x.session_key, sizeof x.session_key, "agent:%s:main", e->agent);
	x.ev = (struct turn_events){
	    .ud = &x, .tool_start = eval_tool_start, .tool_end = eval_tool_end};
	uv_timer_init(&x.loop, &x.deadline);
	uv_timer_init(&x.loop, &x.next);
	uv_signal_init(&x.loop, &x.sigint);
	uv_signal_init(&x.loop, &x.sigterm);
	x.timers_ready = true;
	x.deadline.data = x.next.data = &x;
	x.sigint.data = x.sigterm.data = &x;
	uv_signal_start(&x.sigint, eval_on_signal, SIGINT);
	uv_signal_start(&x.sigterm, eval_on_signal, SIGTERM);
	/* One that came while the copy was made arrives now, to the loop. */
	eval_signals(SIG_UNBLOCK);
	limit = r->c->timeout_ms ? r->c->timeout_ms : e->timeout_ms;
	uv_timer_start(&x.deadline, eval_deadline_cb, (uint64_t)limit, 0);
	if (eval_start_turn(&x) != SB_OK)
		eval_wind_down(&x);
	uv_run(&x.loop, UV_RUN_DEFAULT);
	eval_run_close(&x);
	if (r->error)
		goto out;
	/* The checks read the copy, with the loop stopped. */
	rc = beneath_root(ws, &fd);
	if (rc) {
		eval_set_error(r, "cannot open the workspace copy %s", ws);
		goto out;
	}
	calls = calloc(r->n_calls ? r->n_calls : 1, sizeof *calls);
	if (!calls) {
		eval_set_error(r, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < r->n_calls; i++)
		calls[i] = (struct eval_tool_call){.name = r->calls[i].name,
		                                   .input = r->calls[i].input,
		                                   .is_error = r->calls[i].is_error,
		                                   .turn = r->calls[i].turn};
	n_replies = json_array_size(r->replies);
	replies = calloc(n_replies ? n_replies : 1, sizeof *replies);
	if (!replies) {
		eval_set_error(r, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < n_replies; i++)
		replies[i] = json_string_value(json_array_get(r->replies, i));
	ob = (struct eval_observed){
	    .answer =
	        json_array_size(r->replies)
	            ? json_string_value(json_array_get(r->replies, json_array_size(r->replies) - 1))
	            : "",
	    .replies = replies,
	    .n_replies = n_replies,
	    .calls = calls,
	    .n_calls = r->n_calls,
	    .workspace_fd = fd};
	if (eval_case_check(r->c, &ob, r->failures) < 0)
		eval_set_error(r, "out of memory");
out:
	free(replies);
	free(calls);
	if (fd >= 0)
		close(fd);
	eval_run_close(&x);
	log_set_secrets(NULL, 0);
	config_unref(x.cfg);
	if (e->keep)
		snprintf(r->kept, sizeof r->kept, "%s", tmp);
	else if (eval_tree_remove(tmp) != SB_OK)
		fprintf(stderr, "switchboard eval: could not remove all of %s\n", tmp);
out_time:
	r->ms = clock_mono_ms() - start;
	r->outcome = r->error ? EVAL_ERROR : json_array_size(r->failures) ? EVAL_FAIL : EVAL_PASS;
}

/* ---- output ---- */

static const char *eval_outcome_name(enum eval_outcome o)
{
	switch (o) {
	case EVAL_PASS:
		return "pass";
	case EVAL_FAIL:
		return "FAIL";
	case EVAL_ERROR:
		return "ERROR";
	case EVAL_SKIPPED:
		return "skipped";
	}
	return "?";
}

static void eval_version(const struct cli_eval *e, char *out, size_t size)
{
	if (!e->git)
		snprintf(out, size, "not a git repository");
	else
		snprintf(out, size, "%s%s",
		         strcmp(e->commit, "none") == 0 ? "no commit yet" : e->commit,
		         e->dirty ? " (dirty)" : "");
}

/* Prints s on one line: control characters become spaces. */
static void eval_print_line(FILE *f, const char *s)
{
	for (; *s; s++)
		fputc((unsigned char)*s < 0x20 || *s == 0x7f ? ' ' : *s, f);
}

static void eval_print_table(const struct cli_eval *e, int64_t total_ms)
{
	char ver[128];
	int w = 4;
	size_t passed = 0, failed = 0, errors = 0, skipped = 0;

	eval_version(e, ver, sizeof ver);
	printf("agent %s, workspace %s at %s, model %s\n\n", e->agent, e->shown, ver, e->model);
	for (size_t i = 0; i < e->n_results; i++) {
		int n = (int)strlen(e->results[i].c->name);

		if (n > w)
			w = n > 48 ? 48 : n;
	}
	printf("%-*s  %-7s  %8s  %s\n", w, "CASE", "RESULT", "TIME", "DETAIL");
	for (size_t i = 0; i < e->n_results; i++) {
		const struct eval_result *r = &e->results[i];
		size_t nf = json_array_size(r->failures);

		switch (r->outcome) {
		case EVAL_PASS:
			passed++;
			break;
		case EVAL_FAIL:
			failed++;
			break;
		case EVAL_ERROR:
			errors++;
			break;
		case EVAL_SKIPPED:
			skipped++;
			break;
		}
		printf("%-*.*s  %-7s  %7.2fs  ", w, w, r->c->name, eval_outcome_name(r->outcome),
		       (double)r->ms / 1000.0);
		if (r->outcome == EVAL_ERROR) {
			eval_print_line(stdout, r->error);
			fputc('\n', stdout);
		} else if (r->outcome == EVAL_SKIPPED) {
			printf("not run (interrupted)\n");
		} else if (!nf) {
			printf("%s:%d\n", r->c->file, r->c->line);
		}
		for (size_t k = 0; k < nf && r->outcome == EVAL_FAIL; k++) {
			const json_t *f = json_array_get(r->failures, k);

			if (k)
				printf("%-*s  %-7s  %8s  ", w, "", "", "");
			printf("expected ");
			eval_print_line(stdout,
			                json_string_value(json_object_get(f, "expectation")));
			printf("; seen ");
			eval_print_line(stdout, json_string_value(json_object_get(f, "seen")));
			fputc('\n', stdout);
		}
		if (r->outcome == EVAL_FAIL)
			printf("%-*s  %-7s  %8s  (%s:%d)\n", w, "", "", "", r->c->file, r->c->line);
		if (r->kept[0])
			printf("%-*s  %-7s  %8s  kept: %s\n", w, "", "", "", r->kept);
	}
	printf("\n%zu case%s: %zu passed, %zu failed, %zu could not run", e->n_results,
	       e->n_results == 1 ? "" : "s", passed, failed, errors);
	if (skipped)
		printf(", %zu not run", skipped);
	printf(" (%.2f s)\n", (double)total_ms / 1000.0);
}

static json_t *eval_result_json(const struct cli_eval *e, const struct eval_result *r)
{
	json_t *calls = json_array(), *o;

	for (size_t i = 0; calls && i < r->n_calls; i++)
		json_array_append_new(calls, json_pack("{ss sO sb sI}", "name", r->calls[i].name,
		                                       "input", r->calls[i].input, "error",
		                                       (int)r->calls[i].is_error, "turn",
		                                       (json_int_t)r->calls[i].turn + 1));
	o = json_pack("{ss ss si ss sI so so so s{ss sb}}", "name", r->c->name, "file", r->c->file,
	              "line", r->c->line, "result",
	              r->outcome == EVAL_PASS    ? "pass"
	              : r->outcome == EVAL_FAIL  ? "fail"
	              : r->outcome == EVAL_ERROR ? "error"
	                                         : "skipped",
	              "duration_ms", (json_int_t)r->ms, "failures",
	              r->failures ? json_incref(r->failures) : json_array(), "replies",
	              r->replies ? json_incref(r->replies) : json_array(), "tools",
	              calls ? calls : json_array(), "workspace", "commit",
	              e->git ? e->commit : "none", "dirty", (int)e->dirty);
	if (o && r->error)
		json_object_set_new(o, "error", json_string(r->error));
	if (o && r->kept[0])
		json_object_set_new(o, "kept", json_string(r->kept));
	return o;
}

static void eval_print_json(const struct cli_eval *e, int64_t total_ms)
{
	json_t *cases = json_array(), *o;
	size_t counts[4] = {0};
	char *s;

	for (size_t i = 0; i < e->n_results; i++) {
		counts[e->results[i].outcome]++;
		json_array_append_new(cases, eval_result_json(e, &e->results[i]));
	}
	o = json_pack("{ss s{ss so sb sb} ss so sI sI sI sI sI}", "agent", e->agent, "workspace",
	              "path", e->workspace, "commit", e->git ? json_string(e->commit) : json_null(),
	              "git", (int)e->git, "dirty", (int)e->dirty, "model", e->model, "cases",
	              cases ? cases : json_array(), "passed", (json_int_t)counts[EVAL_PASS],
	              "failed", (json_int_t)counts[EVAL_FAIL], "errors",
	              (json_int_t)counts[EVAL_ERROR], "skipped", (json_int_t)counts[EVAL_SKIPPED],
	              "duration_ms", (json_int_t)total_ms);
	if (o) {
		char started[40];

		snprintf(started, sizeof started, "%sZ", e->started);
		json_object_set_new(o, "started", json_string(started));
	}
	s = o ? json_dumps(o, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
	if (s)
		printf("%s\n", s);
	free(s);
	json_decref(o);
}

/* Appends s to b as XML character data or attribute text: markup escaped,
 * bytes that are not UTF-8 and characters XML 1.0 forbids become U+FFFD. */
static void eval_xml(struct buf *b, const char *s)
{
	const unsigned char *p = (const unsigned char *)s;

	while (*p) {
		unsigned c = *p;
		size_t n = 0;
		uint32_t cp;

		if (c < 0x80) {
			switch (c) {
			case '&':
				buf_puts(b, "&amp;");
				break;
			case '<':
				buf_puts(b, "&lt;");
				break;
			case '>':
				buf_puts(b, "&gt;");
				break;
			case '"':
				buf_puts(b, "&quot;");
				break;
			case '\'':
				buf_puts(b, "&apos;");
				break;
			case '\t':
			case '\n':
				buf_append(b, p, 1);
				break;
			case '\r':
				buf_puts(b, "&#13;");
				break;
			default:
				if (c < 0x20 || c == 0x7f)
					buf_puts(b, "\xEF\xBF\xBD");
				else
					buf_append(b, p, 1);
			}
			p++;
			continue;
		}
		if (c >= 0xC2 && c <= 0xDF)
			n = 2, cp = c & 0x1F;
		else if (c >= 0xE0 && c <= 0xEF)
			n = 3, cp = c & 0x0F;
		else if (c >= 0xF0 && c <= 0xF4)
			n = 4, cp = c & 0x07;
		else
			n = 0, cp = 0;
		for (size_t i = 1; n && i < n; i++) {
			if ((p[i] & 0xC0) != 0x80) {
				n = 0;
				break;
			}
			cp = (cp << 6) | (p[i] & 0x3F);
		}
		/* Overlong forms, surrogates, past U+10FFFF, U+FFFE/U+FFFF. */
		if (n && ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10FFFF ||
		          (cp >= 0xD800 && cp <= 0xDFFF) || cp == 0xFFFE || cp == 0xFFFF))
			n = 0;
		if (!n) {
			buf_puts(b, "\xEF\xBF\xBD");
			p++;
			continue;
		}
		buf_append(b, p, n);
		p += n;
	}
}

static int eval_write_junit(const struct cli_eval *e, int64_t total_ms)
{
	struct buf b;
	char tmp[PATH_MAX + 16], ver[128], host[256];
	size_t counts[4] = {0};
	int fd = -1, rc = SB_ERR_IO;

	for (size_t i = 0; i < e->n_results; i++)
		counts[e->results[i].outcome]++;
	eval_version(e, ver, sizeof ver);
	buf_init(&b, (size_t)256 << 20);
	buf_puts(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
	buf_printf(&b,
	           "<testsuites name=\"switchboard eval\" tests=\"%zu\" failures=\"%zu\" "
	           "errors=\"%zu\" skipped=\"%zu\" time=\"%.3f\">\n",
	           e->n_results, counts[EVAL_FAIL], counts[EVAL_ERROR], counts[EVAL_SKIPPED],
	           (double)total_ms / 1000.0);
	if (gethostname(host, sizeof host) != 0)
		snprintf(host, sizeof host, "localhost");
	host[sizeof host - 1] = '\0';
	buf_puts(&b, "  <testsuite name=\"");
	eval_xml(&b, e->agent);
	buf_printf(&b,
	           "\" tests=\"%zu\" failures=\"%zu\" errors=\"%zu\" skipped=\"%zu\" "
	           "time=\"%.3f\" timestamp=\"%s\" hostname=\"",
	           e->n_results, counts[EVAL_FAIL], counts[EVAL_ERROR], counts[EVAL_SKIPPED],
	           (double)total_ms / 1000.0, e->started);
	eval_xml(&b, host);
	buf_puts(&b, "\">\n    <properties>\n");
	buf_puts(&b, "      <property name=\"agent\" value=\"");
	eval_xml(&b, e->agent);
	buf_puts(&b, "\"/>\n      <property name=\"workspace\" value=\"");
	eval_xml(&b, e->workspace);
	buf_printf(&b, "\"/>\n      <property name=\"workspace.commit\" value=\"%s\"/>\n",
	           e->git ? e->commit : "none");
	buf_printf(&b, "      <property name=\"workspace.dirty\" value=\"%s\"/>\n",
	           e->dirty ? "true" : "false");
	buf_puts(&b, "      <property name=\"model\" value=\"");
	eval_xml(&b, e->model);
	buf_puts(&b, "\"/>\n    </properties>\n");
	for (size_t i = 0; i < e->n_results; i++) {
		const struct eval_result *r = &e->results[i];
		size_t nf = json_array_size(r->failures);

		buf_puts(&b, "    <testcase name=\"");
		eval_xml(&b, r->c->name);
		buf_puts(&b, "\" classname=\"");
		eval_xml(&b, e->agent);
		buf_puts(&b, "\" file=\"");
		eval_xml(&b, r->c->file);
		buf_printf(&b, "\" line=\"%d\" time=\"%.3f\">\n", r->c->line,
		           (double)r->ms / 1000.0);
		if (r->outcome == EVAL_SKIPPED) {
			buf_puts(&b, "      <skipped message=\"interrupted\"/>\n");
		} else if (r->outcome == EVAL_ERROR) {
			buf_puts(&b, "      <error message=\"");
			eval_xml(&b, r->error);
			buf_puts(&b, "\"/>\n");
		} else if (r->outcome == EVAL_FAIL) {
			const json_t *f0 = json_array_get(r->failures, 0);

			buf_puts(&b, "      <failure message=\"expected ");
			eval_xml(&b, json_string_value(json_object_get(f0, "expectation")));
			buf_printf(&b, "\" type=\"expectation\">");
			for (size_t k = 0; k < nf; k++) {
				const json_t *f = json_array_get(r->failures, k);

				buf_puts(&b, "expected ");
				eval_xml(&b, json_string_value(json_object_get(f, "expectation")));
				buf_puts(&b, "\nseen ");
				eval_xml(&b, json_string_value(json_object_get(f, "seen")));
				buf_puts(&b, "\n");
			}
			buf_puts(&b, "</failure>\n");
		}
		buf_printf(&b, "      <system-out>workspace %s\n", ver);
		for (size_t k = 0; k < json_array_size(r->replies); k++) {
			buf_printf(&b, "reply %zu: ", k + 1);
			eval_xml(&b, json_string_value(json_array_get(r->replies, k)));
			buf_puts(&b, "\n");
		}
		for (size_t k = 0; k < r->n_calls; k++) {
			buf_puts(&b, "tool ");
			eval_xml(&b, r->calls[k].name);
			buf_puts(&b, r->calls[k].is_error ? " (failed)\n" : "\n");
		}
		buf_puts(&b, "</system-out>\n    </testcase>\n");
	}
	buf_puts(&b, "  </testsuite>\n</testsuites>\n");
	if (!b.data || b.len == 0) {
		fprintf(stderr, "switchboard eval: the JUnit report is too large\n");
		goto out;
	}
	/* Written aside, then renamed: a reader never sees half a report. */
	snprintf(tmp, sizeof tmp, "%s.XXXXXX", e->junit);
	fd = mkstemp(tmp);
	if (fd < 0) {
		fprintf(stderr, "switchboard eval: cannot write %s: %s\n", e->junit,
		        strerror(errno));
		goto out;
	}
	for (size_t off = 0; off < b.len;) {
		ssize_t w = write(fd, b.data + off, b.len - off);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			fprintf(stderr, "switchboard eval: cannot write %s: %s\n", e->junit,
			        strerror(errno));
			goto out;
		}
		off += (size_t)w;
	}
	if (fchmod(fd, 0644) != 0 || close(fd) != 0) {
		fd = -1;
		fprintf(stderr, "switchboard eval: cannot write %s\n", e->junit);
		goto out;
	}
	fd = -1;
	if (rename(tmp, e->junit) != 0) {
		fprintf(stderr, "switchboard eval: cannot write %s: %s\n", e->junit,
		        strerror(errno));
		goto out;
	}
	tmp[0] = '\0';
	rc = SB_OK;
out:
	if (fd >= 0)
		close(fd);
	if (tmp[0] && rc != SB_OK)
		unlink(tmp);
	buf_free(&b);
	return rc;
}

/* ---- the command ---- */

static bool eval_selected(const struct cli_eval *e, const char *name)
{
	if (!e->n_filters)
		return true;
	for (size_t i = 0; i < e->n_filters; i++)
		if (fnmatch(e->filters[i], name, 0) == 0)
			return true;
	return false;
}

static bool eval_agent_id_ok(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > 64 || !((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9')))
		return false;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_' ||
		      *s == '-'))
			return false;
	return true;
}

/* Resolves the options against the configuration: the agent, its
 * workspace, the model. Returns an exit code (CLI_EVAL_PASSED: go on). */
static int eval_prepare(struct cli_eval *e)
{
	struct config *cfg = NULL;
	const struct agent_config *ac;
	struct stat st;
	char cwd[PATH_MAX];
	int rc = CLI_EVAL_CONFIG;

	if (cli_home(e->home, sizeof e->home) ||
	    cli_config_path(e->home, e->config_arg, e->cfg_path, sizeof e->cfg_path))
		return CLI_EVAL_CONFIG;
	e->have_config = e->config_arg || stat(e->cfg_path, &st) == 0;
	if (!e->have_config && !e->workspace_arg) {
		fprintf(
		    stderr,
		    "switchboard eval: no configuration at %s\n"
		    "  (hint: pass --workspace DIR, and --model, to evaluate a workspace without "
		    "one, or --config FILE)\n",
		    e->cfg_path);
		return CLI_EVAL_CONFIG;
	}
	if (!e->have_config) {
		const char *id = e->agent_arg ? e->agent_arg : "main";

		if (!eval_agent_id_ok(id)) {
			fprintf(
			    stderr,
			    "switchboard eval: \"%s\" is not an agent id (hint: a-z, 0-9, _ and -, "
			    "starting with a letter or digit)\n",
			    id);
			return CLI_EVAL_CONFIG;
		}
		snprintf(e->agent, sizeof e->agent, "%s", id);
	}
	if (!getcwd(cwd, sizeof cwd))
		return CLI_EVAL_CONFIG;
	if (eval_load_config(e, cwd, &cfg) != SB_OK) {
		fprintf(stderr, "switchboard eval: the configuration %s has errors (above)\n",
		        e->have_config ? e->cfg_path : "<eval>");
		return CLI_EVAL_CONFIG;
	}
	ac = e->have_config
	         ? (e->agent_arg ? config_agent(cfg, e->agent_arg) : config_default_agent(cfg))
	         : config_agent(cfg, e->agent);
	if (!ac) {
		fprintf(stderr, "switchboard eval: no agent \"%s\" in %s",
		        e->agent_arg ? e->agent_arg : "(default)", e->cfg_path);
		if (cfg->n_agents) {
			fprintf(stderr, " (agents:");
			for (size_t i = 0; i < cfg->n_agents; i++)
				fprintf(stderr, " %s", cfg->agents[i].id);
			fprintf(stderr, ")");
		}
		fputc('\n', stderr);
		goto out;
	}
	snprintf(e->agent, sizeof e->agent, "%s", ac->id);
	if (e->workspace_arg) {
		if (!realpath(e->workspace_arg, e->workspace)) {
			fprintf(stderr, "switchboard eval: workspace %s: %s\n", e->workspace_arg,
			        strerror(errno));
			goto out;
		}
		snprintf(e->shown, sizeof e->shown, "%s", e->workspace_arg);
	} else {
		if (!realpath(ac->workspace, e->workspace)) {
			fprintf(stderr,
			        "switchboard eval: the workspace of agent %s, %s: %s (hint: "
			        "`switchboard workspace init %s`)\n",
			        ac->id, ac->workspace, strerror(errno), ac->workspace);
			goto out;
		}
		snprintf(e->shown, sizeof e->shown, "%s", e->workspace);
	}
	if (stat(e->workspace, &st) != 0 || !S_ISDIR(st.st_mode)) {
		fprintf(stderr, "switchboard eval: workspace %s is not a directory\n", e->shown);
		goto out;
	}
	{
		/* A copy made inside what it copies would copy itself. */
		const char *tmpdir = getenv("TMPDIR");
		char real[PATH_MAX];
		size_t n = strlen(e->workspace);

		if (realpath(tmpdir && *tmpdir ? tmpdir : "/tmp", real) &&
		    strncmp(real, e->workspace, n) == 0 && (real[n] == '/' || real[n] == '\0')) {
			fprintf(
			    stderr,
			    "switchboard eval: the temporary directory %s is inside the workspace "
			    "%s (hint: set TMPDIR to a directory outside it)\n",
			    real, e->shown);
			goto out;
		}
	}
	if (e->model_arg && strncmp(e->model_arg, "scripted:", 9) == 0) {
		if (!e->model_arg[9] || !realpath(e->model_arg + 9, e->script) ||
		    stat(e->script, &st) != 0 || !S_ISREG(st.st_mode)) {
			fprintf(stderr, "switchboard eval: --model %s: no such script file\n",
			        e->model_arg);
			e->script[0] = '\0';
			goto out;
		}
		snprintf(e->model, sizeof e->model, "scripted:%s", e->model_arg + 9);
	} else if (e->model_arg) {
		const char *slash = strchr(e->model_arg, '/');
		char id[128];

		if (!slash || slash == e->model_arg || !slash[1]) {
			fprintf(stderr,
			        "switchboard eval: --model %s: expected scripted:FILE or "
			        "PROVIDER/MODEL\n",
			        e->model_arg);
			goto out;
		}
		snprintf(id, sizeof id, "%.*s", (int)(slash - e->model_arg), e->model_arg);
		if (!config_provider(cfg, id)) {
			fprintf(stderr, "switchboard eval: --model %s: no provider \"%s\" in %s\n",
			        e->model_arg, id,
			        e->have_config ? e->cfg_path : "the configuration");
			goto out;
		}
		snprintf(e->model, sizeof e->model, "%s", e->model_arg);
	} else if (!ac->model) {
		fprintf(stderr,
		        "switchboard eval: agent %s has no model (hint: set its model: in %s, or "
		        "pass --model scripted:FILE or --model PROVIDER/MODEL)\n",
		        ac->id, e->have_config ? e->cfg_path : "a configuration file");
		goto out;
	} else {
		snprintf(e->model, sizeof e->model, "%s", ac->model);
	}
	rc = CLI_EVAL_PASSED;
out:
	config_unref(cfg);
	return rc;
}

static int eval_main(struct cli_eval *e)
{
	struct cfg_errors errs;
	int64_t start;
	size_t selected = 0;
	int rc;
	bool any_bad = false;

	rc = eval_prepare(e);
	if (rc != CLI_EVAL_PASSED)
		return rc;
	e->git = workspace_git_state(e->workspace, e->commit, &e->dirty) == SB_OK;
	cfg_errors_init(&errs);
	rc = eval_suite_load(e->workspace, e->shown, &e->suite, &errs);
	if (rc) {
		cfg_errors_print(&errs, stderr);
		cfg_errors_free(&errs);
		return rc == SB_ERR_NOMEM ? CLI_EVAL_FAILED : CLI_EVAL_CONFIG;
	}
	cfg_errors_free(&errs);
	for (size_t i = 0; i < e->suite->n_cases; i++)
		if (eval_selected(e, e->suite->cases[i].name))
			selected++;
	if (!selected) {
		if (!e->suite->n_cases)
			fprintf(stderr,
			        "switchboard eval: %s/evals holds no case file (hint: add "
			        "evals/NAME.yaml; docs/eval.md)\n",
			        strcmp(e->shown, ".") == 0 ? "." : e->shown);
		else {
			fprintf(stderr, "switchboard eval: no case matches --case (cases:");
			for (size_t i = 0; i < e->suite->n_cases; i++)
				fprintf(stderr, " %s", e->suite->cases[i].name);
			fprintf(stderr, ")\n");
		}
		return CLI_EVAL_CONFIG;
	}
	e->results = calloc(selected, sizeof *e->results);
	if (!e->results)
		return CLI_EVAL_FAILED;
	start = clock_mono_ms();
	{
		time_t now = time(NULL);
		struct tm tm;

		if (!gmtime_r(&now, &tm) ||
		    !strftime(e->started, sizeof e->started, "%Y-%m-%dT%H:%M:%S", &tm))
			snprintf(e->started, sizeof e->started, "1970-01-01T00:00:00");
	}
	eval_signals(SIG_BLOCK);
	for (size_t i = 0; i < e->suite->n_cases; i++) {
		struct eval_result *r;

		if (!eval_selected(e, e->suite->cases[i].name))
			continue;
		r = &e->results[e->n_results++];
		r->c = &e->suite->cases[i];
		if (eval_signal_pending())
			e->interrupted = 1;
		if (e->interrupted) {
			r->outcome = EVAL_SKIPPED;
			continue;
		}
		if (!e->json) {
			fprintf(stderr, "running %s ...\n", r->c->name);
		}
		eval_run_case(e, r);
		if (r->outcome != EVAL_PASS)
			any_bad = true;
	}
	if (e->interrupted)
		any_bad = true;
	if (e->json)
		eval_print_json(e, clock_mono_ms() - start);
	else
		eval_print_table(e, clock_mono_ms() - start);
	fflush(stdout);
	if (e->junit && eval_write_junit(e, clock_mono_ms() - start) != SB_OK)
		any_bad = true;
	return any_bad ? CLI_EVAL_FAILED : CLI_EVAL_PASSED;
}

int cli_eval(int argc, char **argv)
{
	enum { OPT_JSON = 256, OPT_KEEP };
	static const struct option opts[] = {{"workspace", required_argument, NULL, 'w'},
	                                     {"model", required_argument, NULL, 'm'},
	                                     {"case", required_argument, NULL, 'k'},
	                                     {"timeout", required_argument, NULL, 't'},
	                                     {"junit", required_argument, NULL, 'j'},
	                                     {"json", no_argument, NULL, OPT_JSON},
	                                     {"keep", no_argument, NULL, OPT_KEEP},
	                                     {"config", required_argument, NULL, 'c'},
	                                     {"help", no_argument, NULL, 'h'},
	                                     {0}};
	struct cli_eval e;
	int c, rc;

	memset(&e, 0, sizeof e);
	e.timeout_ms = CLI_EVAL_TIMEOUT_DEFAULT_MS;
	optind = 1;
	while ((c = getopt_long(argc, argv, "w:m:k:t:j:c:h", opts, NULL)) != -1) {
		switch (c) {
		case 'w':
			e.workspace_arg = optarg;
			break;
		case 'm':
			e.model_arg = optarg;
			break;
		case 'k':
			if (e.n_filters == CLI_EVAL_FILTERS_MAX) {
				fprintf(stderr, "switchboard eval: at most %d --case options\n",
				        CLI_EVAL_FILTERS_MAX);
				return CLI_EVAL_USAGE;
			}
			e.filters[e.n_filters++] = optarg;
			break;
		case 't':
			if (num_parse_duration_ms(optarg, &e.timeout_ms) != SB_OK ||
			    e.timeout_ms <= 0 || e.timeout_ms > 86400000) {
				fprintf(stderr,
				        "switchboard eval: --timeout %s: expected a duration such "
				        "as 30s "
				        "or 5m (at most 1d)\n",
				        optarg);
				return CLI_EVAL_USAGE;
			}
			break;
		case 'j':
			e.junit = optarg;
			break;
		case OPT_JSON:
			e.json = true;
			break;
		case OPT_KEEP:
			e.keep = true;
			break;
		case 'c':
			e.config_arg = optarg;
			break;
		case 'h':
			cli_eval_usage(stdout);
			return 0;
		default:
			cli_eval_usage(stderr);
			return CLI_EVAL_USAGE;
		}
	}
	if (argc - optind > 1) {
		cli_eval_usage(stderr);
		return CLI_EVAL_USAGE;
	}
	if (optind < argc)
		e.agent_arg = argv[optind];
	if (sodium_init() < 0)
		return CLI_EVAL_FAILED;
	signal(SIGPIPE, SIG_IGN);
	log_configure(LOG_WARN, LOG_FORMAT_LOGFMT, NULL);
	rc = eval_main(&e);
	for (size_t i = 0; i < e.n_results; i++)
		eval_result_free(&e.results[i]);
	free(e.results);
	eval_suite_free(e.suite);
	return rc;
}
