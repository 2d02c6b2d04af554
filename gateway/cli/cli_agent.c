/*
 * cli_agent.c - `switchboard agent run`: one agent turn from the command
 * line, without any channel. The reply streams to stdout; with -v the tool
 * activity goes to stderr. The exit code tells how the run ended.
 */
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agents/models.h"
#include "gateway/cli/cli.h"
#include "gateway/config/config.h"
#include "gateway/core/err.h"
#include "gateway/core/host.h"
#include "gateway/core/httpc.h"
#include "gateway/core/log.h"
#include "gateway/daemon/host_common.h"
#include "gateway/pipeline/runner.h"
#include "gateway/store/store.h"

/* Exit codes by terminal reason (documented in the usage text). */
enum cli_agent_exit {
	CLI_AGENT_OK = 0,
	CLI_AGENT_ERROR = 1,
	CLI_AGENT_USAGE = 2,
	CLI_AGENT_MAX_TURNS = 3,
	CLI_AGENT_BUDGET = 4,
	CLI_AGENT_ABORTED = 5,
};

struct cli_agent {
	uv_loop_t loop;
	struct config *cfg;
	struct store *store;
	struct httpc *httpc;
	struct models *models;
	struct runner *runner;
	struct run_job *job;
	struct host host;
	uv_signal_t sigint, sigterm;
	uv_timer_t wind_down;
	bool loop_ready;
	bool verbose;
	bool printed_text;
	bool at_line_start;
	int exit_code;
};

static void cli_agent_usage(FILE *f)
{
	fprintf(f, "usage: switchboard agent run [--agent ID] [--session KEY] [-v] MESSAGE\n\n"
	           "Runs one turn of an agent without any channel and prints the reply as it\n"
	           "streams. The turn is recorded in the session's transcript.\n"
	           "  -a, --agent ID      the agent (default: the default agent)\n"
	           "  -s, --session KEY   the session key (default: agent:<ID>:main)\n"
	           "  -c, --config FILE   configuration file\n"
	           "  -v, --verbose       show tool calls and state changes on stderr\n"
	           "exit codes: 0 end_turn, 1 error, 2 usage, 3 max_turns, 4 budget_exhausted,\n"
	           "            5 aborted (Ctrl-C)\n");
}

/* ---- host ---- */

static struct httpc *cli_agent_http(void *ctx)
{
	struct cli_agent *a = ctx;

	if (!a->httpc && host_common_httpc_new(&a->httpc, &a->loop, a->cfg))
		a->httpc = NULL;
	return a->httpc;
}

static int cli_agent_deliver(void *ctx, const struct host_outbound *msg, host_deliver_cb cb,
                             void *ud)
{
	struct cli_agent *a = ctx;

	return host_common_deliver(a->store, msg, cb, ud, NULL, NULL);
}

static struct config *cli_agent_config(void *ctx)
{
	return config_ref(((struct cli_agent *)ctx)->cfg);
}

/* ---- events ---- */

/* Notes on stderr start on a line of their own, even mid-reply. */
static void cli_agent_newline(struct cli_agent *a)
{
	if (!a->at_line_start) {
		fputc('\n', stdout);
		fflush(stdout);
		a->at_line_start = true;
	}
}

static void cli_agent_delta(void *ud, const char *text, size_t len)
{
	struct cli_agent *a = ud;

	fwrite(text, 1, len, stdout);
	fflush(stdout);
	a->printed_text = true;
	a->at_line_start = len && text[len - 1] == '\n';
}

static void cli_agent_tool_start(void *ud, const char *id, const char *name, const json_t *input)
{
	struct cli_agent *a = ud;
	char *in;

	if (!a->verbose)
		return;
	cli_agent_newline(a);
	in = json_dumps(input, JSON_COMPACT | JSON_SORT_KEYS);
	fprintf(stderr, "[tool %s %s] %s\n", name, id, in ? in : "");
	free(in);
}

static void cli_agent_tool_end(void *ud, const char *id, const char *name, bool is_error,
                               const char *content, double seconds)
{
	struct cli_agent *a = ud;
	size_t n = content ? strlen(content) : 0;

	if (!a->verbose)
		return;
	cli_agent_newline(a);
	fprintf(stderr, "[tool %s %s] %s in %.3f s, %zu characters%s%.*s\n", name, id,
	        is_error ? "failed" : "done", seconds, n, n ? ": " : "", n > 200 ? 200 : (int)n,
	        content ? content : "");
}

static void cli_agent_state(void *ud, enum turn_state from, enum turn_state to, const char *reason)
{
	struct cli_agent *a = ud;

	if (!a->verbose)
		return;
	cli_agent_newline(a);
	fprintf(stderr, "[state %s -> %s: %s]\n", turn_state_name(from), turn_state_name(to),
	        reason);
}

/* ---- the run ---- */

/* The run is over: close everything that keeps the loop alive (signals,
 * the HTTP client's cached connections, the store's wake-up handle), so that
 * uv_run returns once the transcript's last writes are done. */
static void cli_agent_wind_down_cb(uv_timer_t *t)
{
	struct cli_agent *a = t->data;

	uv_close((uv_handle_t *)t, NULL);
	uv_close((uv_handle_t *)&a->sigint, NULL);
	uv_close((uv_handle_t *)&a->sigterm, NULL);
	httpc_close(a->httpc);
	a->httpc = NULL;
	/* Not from inside a store callback: this runs from a timer. */
	store_close(a->store);
	a->store = NULL;
}

static void cli_agent_wind_down(struct cli_agent *a)
{
	uv_timer_init(&a->loop, &a->wind_down);
	a->wind_down.data = a;
	uv_timer_start(&a->wind_down, cli_agent_wind_down_cb, 0, 0);
}

static void cli_agent_done(void *ud, const struct run_outcome *o)
{
	struct cli_agent *a = ud;

	a->job = NULL;
	if (a->printed_text && !a->at_line_start)
		fputc('\n', stdout);
	fflush(stdout);
	if (o->rc != SB_OK) {
		fprintf(stderr, "switchboard agent run: %s\n",
		        o->error ? o->error : sb_strerror(o->rc));
		a->exit_code = o->rc == SB_ERR_ABORTED ? CLI_AGENT_ABORTED : CLI_AGENT_ERROR;
	} else {
		const struct turn_result *r = o->result;

		/* A provider that did not stream still has an answer to show. */
		if (!a->printed_text && r->text && *r->text)
			printf("%s\n", r->text);
		switch (r->end) {
		case TURN_END_TURN:
			a->exit_code = CLI_AGENT_OK;
			break;
		case TURN_END_MAX_TURNS:
			a->exit_code = CLI_AGENT_MAX_TURNS;
			break;
		case TURN_END_BUDGET_EXHAUSTED:
			a->exit_code = CLI_AGENT_BUDGET;
			break;
		case TURN_END_ABORTED:
			a->exit_code = CLI_AGENT_ABORTED;
			break;
		case TURN_END_ERROR:
			a->exit_code = CLI_AGENT_ERROR;
			break;
		}
		if (r->end != TURN_END_TURN || a->verbose)
			fprintf(stderr,
			        "[%s%s%s] %d model call%s, %d tool call%s, %lld in / %lld out "
			        "tokens, session %s\n",
			        turn_end_name(r->end), r->detail && *r->detail ? ": " : "",
			        r->detail ? r->detail : "", r->model_calls,
			        r->model_calls == 1 ? "" : "s", r->tool_calls,
			        r->tool_calls == 1 ? "" : "s", (long long)r->usage.input_tokens,
			        (long long)r->usage.output_tokens, o->session_id);
	}
	cli_agent_wind_down(a);
}

static void cli_agent_on_signal(uv_signal_t *h, int signum)
{
	struct cli_agent *a = h->data;

	(void)signum;
	if (a->job)
		runner_abort(a->job, "interrupted by the operator");
}

/* One run, one configuration: nothing reloads under the CLI. */
static struct models *cli_agent_acquire(void *ud, struct config **cfg, void **token)
{
	struct cli_agent *a = ud;

	*cfg = config_ref(a->cfg);
	*token = NULL;
	return a->models;
}

static void cli_agent_release(void *ud, struct config *cfg, void *token)
{
	(void)ud;
	(void)token;
	config_unref(cfg);
}

static int cli_agent_open(struct cli_agent *a, const char *home, const char *cfg_path)
{
	struct cfg_errors errs;
	struct store_options so;
	struct runner_options ro;
	int rc;

	cfg_errors_init(&errs);
	rc = config_load(cfg_path, home, &a->cfg, &errs);
	if (rc) {
		cfg_errors_print(&errs, stderr);
		cfg_errors_free(&errs);
		return rc;
	}
	cfg_errors_free(&errs);
	log_configure(LOG_WARN, LOG_FORMAT_LOGFMT, NULL);
	log_set_secrets((const char *const *)a->cfg->secrets, a->cfg->n_secrets);
	if (uv_loop_init(&a->loop))
		return SB_ERR_IO;
	a->loop_ready = true;
	a->host = (struct host){.ctx = a,
	                        .loop = &a->loop,
	                        .deliver = cli_agent_deliver,
	                        .http_client = cli_agent_http,
	                        .config = cli_agent_config};
	memset(&so, 0, sizeof so);
	so.path = a->cfg->store.path;
	so.busy_timeout_ms = a->cfg->store.busy_timeout_ms;
	rc = store_open(&a->store, &a->loop, &so);
	if (rc) {
		fprintf(stderr, "switchboard: cannot open the store %s: %s\n", so.path,
		        sb_strerror(rc));
		return rc;
	}
	rc = models_new(&a->models, a->cfg->providers, a->cfg->n_providers, &a->host, NULL);
	if (rc) {
		fprintf(stderr, "switchboard: cannot set up the model providers: %s\n",
		        sb_strerror(rc));
		return rc;
	}
	memset(&ro, 0, sizeof ro);
	ro.loop = &a->loop;
	ro.host = &a->host;
	ro.store = a->store;
	ro.ud = a;
	ro.acquire = cli_agent_acquire;
	ro.release = cli_agent_release;
	return runner_new(&a->runner, &ro);
}

static void cli_agent_close(struct cli_agent *a)
{
	runner_free(a->runner);
	models_free(a->models);
	httpc_close(a->httpc);
	if (a->store)
		store_close(a->store);
	if (a->loop_ready) {
		uv_run(&a->loop, UV_RUN_DEFAULT);
		if (uv_loop_close(&a->loop) != 0)
			fprintf(stderr, "switchboard: handles left open\n");
	}
	config_unref(a->cfg);
	log_set_secrets(NULL, 0);
}

static int cli_agent_run(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"agent", required_argument, NULL, 'a'},  {"session", required_argument, NULL, 's'},
	    {"config", required_argument, NULL, 'c'}, {"verbose", no_argument, NULL, 'v'},
	    {"help", no_argument, NULL, 'h'},         {0}};
	const char *agent = NULL, *session = NULL, *explicit_cfg = NULL;
	char home[PATH_MAX], cfg_path[PATH_MAX], key[512];
	struct cli_agent a;
	struct turn_events ev;
	struct run_request req;
	int c, rc;

	memset(&a, 0, sizeof a);
	optind = 1;
	while ((c = getopt_long(argc, argv, "a:s:c:vh", opts, NULL)) != -1) {
		switch (c) {
		case 'a':
			agent = optarg;
			break;
		case 's':
			session = optarg;
			break;
		case 'c':
			explicit_cfg = optarg;
			break;
		case 'v':
			a.verbose = true;
			break;
		case 'h':
			cli_agent_usage(stdout);
			return 0;
		default:
			cli_agent_usage(stderr);
			return CLI_AGENT_USAGE;
		}
	}
	if (optind != argc - 1 || !*argv[optind]) {
		cli_agent_usage(stderr);
		return CLI_AGENT_USAGE;
	}
	if (sodium_init() < 0 || cli_home(home, sizeof home) ||
	    cli_config_path(home, explicit_cfg, cfg_path, sizeof cfg_path))
		return CLI_AGENT_ERROR;
	signal(SIGPIPE, SIG_IGN);
	rc = cli_agent_open(&a, home, cfg_path);
	if (rc == SB_OK) {
		const struct agent_config *ac =
		    agent ? config_agent(a.cfg, agent) : config_default_agent(a.cfg);

		if (!ac) {
			fprintf(stderr, "switchboard agent run: no agent \"%s\" in %s\n",
			        agent ? agent : "(default)", cfg_path);
			rc = SB_ERR_NOTFOUND;
		} else {
			agent = ac->id;
		}
	}
	if (rc == SB_OK) {
		snprintf(key, sizeof key, "agent:%s:main", agent);
		ev = (struct turn_events){.ud = &a,
		                          .text_delta = cli_agent_delta,
		                          .tool_start = cli_agent_tool_start,
		                          .tool_end = cli_agent_tool_end,
		                          .state = cli_agent_state};
		memset(&req, 0, sizeof req);
		req.agent_id = agent;
		req.session_key = session ? session : key;
		req.text = argv[optind];
		req.channel = "cli";
		req.main_session = !session;
		req.ev = &ev;
		a.at_line_start = true;
		a.exit_code = CLI_AGENT_ERROR;
		uv_signal_init(&a.loop, &a.sigint);
		uv_signal_init(&a.loop, &a.sigterm);
		a.sigint.data = a.sigterm.data = &a;
		uv_signal_start(&a.sigint, cli_agent_on_signal, SIGINT);
		uv_signal_start(&a.sigterm, cli_agent_on_signal, SIGTERM);
		rc = runner_run(a.runner, &req, cli_agent_done, &a, &a.job);
		if (rc) {
			fprintf(stderr, "switchboard agent run: %s\n", sb_strerror(rc));
			cli_agent_wind_down(&a);
		} else {
			uv_run(&a.loop, UV_RUN_DEFAULT);
			rc = SB_OK;
		}
	}
	cli_agent_close(&a);
	return rc ? CLI_AGENT_ERROR : a.exit_code;
}

int cli_agent(int argc, char **argv)
{
	if (argc >= 2 && strcmp(argv[1], "run") == 0)
		return cli_agent_run(argc - 1, argv + 1);
	if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
		cli_agent_usage(stdout);
		return 0;
	}
	cli_agent_usage(stderr);
	return CLI_AGENT_USAGE;
}
