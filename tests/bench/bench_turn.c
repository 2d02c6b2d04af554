/*
 * bench_turn.c - the agent runtime's own cost: time per turn without model
 * time, and memory per session history.
 *
 *   bench_turn [TURNS [SESSIONS]]      (defaults 2000 and 10000)
 *
 * Time: a turn of the real state machine (agents/turn.c) with the scripted
 * provider (no delay) answering a new message with three tool calls (ls,
 * read, glob on a small workspace, run by the real executor and tools on
 * the libuv thread pool), then with a final text: two model calls, three
 * tool calls. TURNS turns run one after another (after 100 warm-up turns),
 * each from turn_start to its done callback; the figures are turns per
 * second, mean, p50 and p99 microseconds per turn, and per model call. A bare
 * scripted model call (models_call, no turn) is timed too: it is the share
 * of a turn that stands in for the model. Then 200 turns append to one
 * transcript: their time, and the transcript bytes each turn adds on disk.
 *
 * Memory: the runner keeps no history between runs (it loads the session's
 * transcript when a run starts and drops it when the run ends), so an idle
 * session costs the runtime no memory; what a session's history costs while
 * loaded is measured here: a transcript of 5 of the turns above (20
 * messages) is loaded SESSIONS times with transcript_load, and the message
 * arrays kept, as the runner keeps them during a run. The heap growth
 * (mallinfo2: in use plus mmapped) and the RSS growth (/proc/self/statm),
 * divided by SESSIONS, are the bytes per loaded session.
 *
 * Build it optimised: cmake -S . -B build/bench -DCMAKE_BUILD_TYPE=Release
 * -DSB_TESTS=OFF && cmake --build build/bench --target bench_turn. Prints
 * `name: value` lines.
 */
#include <ftw.h>
#include <limits.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "agents/message.h"
#include "agents/models.h"
#include "agents/transcript.h"
#include "agents/turn.h"
#include "gateway/config/config.h"
#include "gateway/core/err.h"
#include "gateway/core/log.h"
#include "gateway/core/num.h"

#define BENCH_WARMUP 100
#define BENCH_TRANSCRIPT_TURNS 200
#define BENCH_HISTORY_TURNS 5 /* x 4 messages = 20 */
#define BENCH_MODEL_CALLS 2000

static const char bench_script[] =
    "{\"match\": \"bench\", \"tool_calls\": [{\"name\": \"ls\", \"input\": {}}, "
    "{\"name\": \"read\", \"input\": {\"path\": \"notes.txt\"}}, "
    "{\"name\": \"glob\", \"input\": {\"pattern\": \"**/*.md\"}}]}\n"
    "{\"text\": \"The notes have 24 lines; the workspace holds two markdown files under "
    "docs/ and one C file under src/. Nothing else stands out.\"}\n";

struct bench {
	uv_loop_t loop;
	struct host host;
	struct config *cfg;
	struct models *m;
	char home[64];
	char ws[PATH_MAX];
	bool done;
	int failures;
	double t_done;
	int model_calls, tool_calls;
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st;
	(void)flag;
	(void)f;
	return remove(p);
}

static int write_file(const char *dir, const char *name, const char *text)
{
	char path[PATH_MAX + 64];
	FILE *f;
	int rc;

	snprintf(path, sizeof path, "%s/%s", dir, name);
	f = fopen(path, "w");
	if (!f)
		return -1;
	rc = fputs(text, f) < 0 ? -1 : 0;
	return fclose(f) != 0 ? -1 : rc;
}

/* The workspace: a text file of 24 lines, docs/ with two markdown files,
 * src/ with one C file. */
static int make_workspace(struct bench *b)
{
	char dir[PATH_MAX + 64], notes[2048] = "";
	size_t n = 0;

	snprintf(dir, sizeof dir, "%s/ws", b->home);
	if (mkdir(dir, 0700) != 0 || !realpath(dir, b->ws))
		return -1;
	for (int i = 1; i <= 24; i++)
		n += (size_t)snprintf(notes + n, sizeof notes - n,
		                      "line %d of the notes, a sentence of ordinary length.\n", i);
	if (write_file(b->ws, "notes.txt", notes) != 0)
		return -1;
	snprintf(dir, sizeof dir, "%s/docs", b->ws);
	if (mkdir(dir, 0700) != 0 || write_file(dir, "a.md", "# A\n") != 0 ||
	    write_file(dir, "b.md", "# B\n") != 0)
		return -1;
	snprintf(dir, sizeof dir, "%s/src", b->ws);
	if (mkdir(dir, 0700) != 0 || write_file(dir, "main.c", "int main(void) { return 0; }\n"))
		return -1;
	return 0;
}

static int load_models(struct bench *b)
{
	static const char yaml[] = "providers:\n"
	                           "  - id: s\n"
	                           "    api: scripted\n"
	                           "    script: script.jsonl\n"
	                           "agents:\n"
	                           "  - id: main\n"
	                           "    model: s/m\n";
	struct cfg_errors errs;
	int rc;

	if (write_file(b->home, "script.jsonl", bench_script) != 0)
		return -1;
	cfg_errors_init(&errs);
	rc = config_load_text(yaml, "bench.yaml", b->home, &b->cfg, &errs);
	if (rc != SB_OK)
		cfg_errors_print(&errs, stderr);
	cfg_errors_free(&errs);
	if (rc != SB_OK)
		return -1;
	return models_new(&b->m, b->cfg->providers, b->cfg->n_providers, &b->host, NULL) == SB_OK
	           ? 0
	           : -1;
}

static void on_turn_done(void *ud, const struct turn_result *r)
{
	struct bench *b = ud;

	b->t_done = now_s();
	b->done = true;
	if (r->end != TURN_END_TURN || r->model_calls != 2 || r->tool_calls != 3) {
		if (!b->failures++)
			fprintf(stderr,
			        "bench_turn: a turn ended %s (%s), %d model calls, %d tools\n",
			        turn_end_name(r->end), r->detail, r->model_calls, r->tool_calls);
	}
	b->model_calls += r->model_calls;
	b->tool_calls += r->tool_calls;
}

/* One turn from turn_start to done; its duration in seconds (< 0 on error). */
static double one_turn(struct bench *b, struct transcript *tr, int k)
{
	static const char *const chain[] = {"s/m"};
	struct turn_options o;
	char text[64];
	double t0;

	snprintf(text, sizeof text, "bench turn %d: what is in the workspace?", k);
	memset(&o, 0, sizeof o);
	o.models = b->m;
	o.chain = chain;
	o.n_chain = 1;
	o.system = "You are a benchmark agent.";
	o.user_text = text;
	o.tool_ctx.loop = &b->loop;
	o.tool_ctx.host = &b->host;
	o.tool_ctx.agent_id = "main";
	o.tool_ctx.session_key = "agent:main:bench";
	o.tool_ctx.workspace = b->ws;
	o.tool_ctx.timeout_ms = 10000;
	o.max_turns = 10;
	o.transcript = tr;
	b->done = false;
	t0 = now_s();
	if (turn_start(NULL, &o, on_turn_done, b) != SB_OK)
		return -1;
	while (!b->done)
		uv_run(&b->loop, UV_RUN_ONCE);
	/* Let the turn's handles close (not timed). */
	uv_run(&b->loop, UV_RUN_NOWAIT);
	return b->t_done - t0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static int bench_turns(struct bench *b, int turns)
{
	double *us = calloc((size_t)turns, sizeof *us), sum = 0, t0, t1;
	int rc = -1;

	if (!us)
		return -1;
	for (int i = 0; i < BENCH_WARMUP; i++)
		if (one_turn(b, NULL, i) < 0)
			goto out;
	b->model_calls = b->tool_calls = 0;
	t0 = now_s();
	for (int i = 0; i < turns; i++) {
		double d = one_turn(b, NULL, i);

		if (d < 0)
			goto out;
		us[i] = d * 1e6;
		sum += us[i];
	}
	t1 = now_s();
	if (b->failures)
		goto out;
	qsort(us, (size_t)turns, sizeof *us, cmp_double);
	printf("turn_3tools_turns: %d\n", turns);
	printf("turn_3tools_turns_per_sec: %.0f\n", turns / (t1 - t0));
	printf("turn_3tools_us_mean: %.1f\n", sum / turns);
	printf("turn_3tools_us_p50: %.1f\n", us[turns / 2]);
	printf("turn_3tools_us_p99: %.1f\n", us[(size_t)((double)turns * 0.99)]);
	printf("turn_3tools_us_per_model_call: %.1f\n", sum / b->model_calls);
	printf("turn_3tools_model_calls_per_turn: %.1f\n", (double)b->model_calls / turns);
	printf("turn_3tools_tool_calls_per_turn: %.1f\n", (double)b->tool_calls / turns);
	rc = 0;
out:
	free(us);
	return rc;
}

/* ---- a bare model call ---- */

static void on_model_done(void *ud, int rc, const struct model_response *resp,
                          const struct model_error *err)
{
	struct bench *b = ud;

	(void)resp;
	(void)err;
	if (rc != SB_OK)
		b->failures++;
	b->done = true;
}

static int bench_model_call(struct bench *b)
{
	static const char *const chain[] = {"s/m"};
	struct model_request req;
	json_t *history = json_array();
	double t0;
	int rc = -1;

	if (!history || json_array_append_new(history, msg_user_text_new("hello")) != 0)
		goto out;
	memset(&req, 0, sizeof req);
	req.system = "You are a benchmark agent.";
	req.messages = history;
	req.max_tokens = 1024;
	req.stream = true;
	t0 = now_s();
	for (int i = 0; i < BENCH_MODEL_CALLS; i++) {
		b->done = false;
		if (models_call(b->m, chain, 1, &req, NULL, NULL, on_model_done, b, NULL) != SB_OK)
			goto out;
		while (!b->done)
			uv_run(&b->loop, UV_RUN_ONCE);
		uv_run(&b->loop, UV_RUN_NOWAIT);
	}
	if (b->failures)
		goto out;
	printf("scripted_model_call_us_mean: %.1f\n", (now_s() - t0) * 1e6 / BENCH_MODEL_CALLS);
	rc = 0;
out:
	json_decref(history);
	return rc;
}

/* ---- transcripts ---- */

struct flush_wait {
	bool done;
	int rc;
};

static void on_flushed(void *ud, int rc)
{
	struct flush_wait *f = ud;

	f->done = true;
	f->rc = rc;
}

/* Runs turns turns appending to the transcript at path; its size after. */
static long turns_to_transcript(struct bench *b, const char *path, int turns, double *seconds)
{
	struct transcript_info ti = {
	    .session_id = "bench", .session_key = "agent:main:bench", .agent_id = "main"};
	struct transcript *tr = NULL;
	struct flush_wait fw = {0};
	struct stat st;
	double t = 0, d;

	if (transcript_open(&tr, &b->loop, path, &ti) != SB_OK)
		return -1;
	for (int i = 0; i < turns; i++) {
		d = one_turn(b, tr, i);
		if (d < 0)
			break;
		t += d;
	}
	if (transcript_flush(tr, on_flushed, &fw) == SB_OK)
		while (!fw.done)
			uv_run(&b->loop, UV_RUN_ONCE);
	transcript_close(tr);
	uv_run(&b->loop, UV_RUN_DEFAULT);
	if (seconds)
		*seconds = t;
	if (fw.rc != SB_OK || b->failures || stat(path, &st) != 0)
		return -1;
	return (long)st.st_size;
}

static int bench_transcript(struct bench *b)
{
	char path[PATH_MAX + 64];
	long size, header;
	double secs;

	/* The header alone, to take it out of the per-turn figure. */
	snprintf(path, sizeof path, "%s/sessions/empty.jsonl", b->home);
	header = turns_to_transcript(b, path, 0, NULL);
	snprintf(path, sizeof path, "%s/sessions/many.jsonl", b->home);
	size = turns_to_transcript(b, path, BENCH_TRANSCRIPT_TURNS, &secs);
	if (header < 0 || size < 0)
		return -1;
	printf("turn_3tools_with_transcript_us_mean: %.1f\n", secs * 1e6 / BENCH_TRANSCRIPT_TURNS);
	printf("transcript_bytes_per_turn: %.0f\n",
	       (double)(size - header) / BENCH_TRANSCRIPT_TURNS);
	return 0;
}

/* ---- memory per loaded session history ---- */

static long rss_bytes(void)
{
	char buf[128];
	long pages = -1, rss = -1;
	FILE *f = fopen("/proc/self/statm", "r");

	if (!f)
		return -1;
	if (fgets(buf, sizeof buf, f)) {
		char *end;

		pages = strtol(buf, &end, 10);
		rss = strtol(end, NULL, 10);
	}
	fclose(f);
	(void)pages;
	return rss < 0 ? -1 : rss * sysconf(_SC_PAGESIZE);
}

static size_t heap_bytes(void)
{
	struct mallinfo2 mi = mallinfo2();

	return mi.uordblks + mi.hblkhd;
}

static int bench_sessions(struct bench *b, int sessions)
{
	char path[PATH_MAX + 64];
	struct transcript_loaded l;
	json_t **kept = calloc((size_t)sessions, sizeof *kept);
	size_t heap0, heap1, n_msgs = 0, json_len = 0;
	long rss0, rss1, file;
	int rc = -1, i;

	if (!kept)
		return -1;
	snprintf(path, sizeof path, "%s/sessions/history.jsonl", b->home);
	file = turns_to_transcript(b, path, BENCH_HISTORY_TURNS, NULL);
	if (file < 0)
		goto out;
	malloc_trim(0);
	heap0 = heap_bytes();
	rss0 = rss_bytes();
	for (i = 0; i < sessions; i++) {
		if (transcript_load(path, &l) != SB_OK)
			goto out;
		kept[i] = json_incref(l.messages);
		transcript_loaded_free(&l);
	}
	heap1 = heap_bytes();
	rss1 = rss_bytes();
	n_msgs = json_array_size(kept[0]);
	json_len = json_dumpb(kept[0], NULL, 0, JSON_COMPACT);
	printf("session_history_messages: %zu\n", n_msgs);
	printf("session_history_json_bytes: %zu\n", json_len);
	printf("session_transcript_file_bytes: %ld\n", file);
	printf("sessions_loaded: %d\n", sessions);
	printf("session_history_heap_bytes: %.0f\n", (double)(heap1 - heap0) / sessions);
	printf("session_history_rss_bytes: %.0f\n", (double)(rss1 - rss0) / sessions);
	printf("idle_session_runtime_bytes: 0\n");
	rc = 0;
out:
	for (i = 0; i < sessions; i++)
		json_decref(kept[i]);
	free(kept);
	return rc;
}

static int parse_count(const char *s, int def, int max)
{
	int64_t v;

	if (!s)
		return def;
	if (num_parse_i64(s, 1, max, &v) != SB_OK)
		return -1;
	return (int)v;
}

int main(int argc, char **argv)
{
	struct bench b;
	int turns = parse_count(argc > 1 ? argv[1] : NULL, 2000, 10000000);
	int sessions = parse_count(argc > 2 ? argv[2] : NULL, 10000, 10000000);
	int rc = 1;

	if (turns < 0 || sessions < 0 || argc > 3) {
		fprintf(stderr, "usage: bench_turn [TURNS [SESSIONS]]\n");
		return 2;
	}
	memset(&b, 0, sizeof b);
	log_configure(LOG_ERROR, LOG_FORMAT_LOGFMT, NULL);
	snprintf(b.home, sizeof b.home, "/tmp/sb-bench-turn-XXXXXX");
	if (!mkdtemp(b.home)) {
		perror("bench_turn: mkdtemp");
		return 1;
	}
	if (uv_loop_init(&b.loop) != 0)
		goto out;
	b.host.ctx = &b;
	b.host.loop = &b.loop;
	if (make_workspace(&b) != 0 || load_models(&b) != 0) {
		fprintf(stderr, "bench_turn: setup failed\n");
		goto out;
	}
	if (bench_turns(&b, turns) != 0 || bench_model_call(&b) != 0 || bench_transcript(&b) != 0 ||
	    bench_sessions(&b, sessions) != 0) {
		fprintf(stderr, "bench_turn: failed\n");
		goto out;
	}
	rc = 0;
out:
	models_free(b.m);
	config_unref(b.cfg);
	uv_run(&b.loop, UV_RUN_DEFAULT);
	uv_loop_close(&b.loop);
	nftw(b.home, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	return rc;
}
