/*
 * cli_workspace.c - `switchboard workspace status|log|init`.
 *
 * status  the workspace's current version: commit, dirty, the combined hash
 *         and each bootstrap file (size, hash, how it goes into the prompt);
 * log     the versions the agent has answered with, from the "workspace"
 *         events of its transcripts (no store table): per version (commit,
 *         dirty, combined hash) the number of turns, the last session and
 *         the last time;
 * init    a new workspace from the templates, with git init and a first
 *         commit.
 *
 * Blocking (CLI only).
 */
#include <dirent.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gateway/cli/cli.h"
#include "gateway/config/config.h"
#include "gateway/core/buf.h"
#include "gateway/core/err.h"
#include "gateway/core/fsutil.h"
#include "workspaces/prompt.h"
#include "workspaces/workspace.h"

#define CLI_WS_TRANSCRIPT_MAX ((size_t)512 << 20)

static void cli_workspace_usage(FILE *f)
{
	fprintf(
	    f,
	    "usage: switchboard workspace status [--json] [--config FILE] AGENT\n"
	    "       switchboard workspace log [--json] [--config FILE] AGENT\n"
	    "       switchboard workspace init [--agent ID] DIR\n\n"
	    "  status  the workspace's current version: git commit (\"none\" outside git),\n"
	    "          whether the bootstrap files differ from it (dirty), the combined hash,\n"
	    "          and each bootstrap file: size, BLAKE2b hash, and whether it is\n"
	    "          included, truncated, blank or missing (as in the agent's main session)\n"
	    "  log     the versions the agent has answered with (from its transcripts):\n"
	    "          commit, dirty, combined hash, turns, last session and time\n"
	    "  init    writes the starter files into DIR (existing files are kept) and,\n"
	    "          unless DIR is a git repository already, runs git init and commits them\n"
	    "  --json         machine-readable output\n"
	    "  -c, --config FILE  configuration file (default $SWITCHBOARD_HOME/switchboard.yaml)\n"
	    "  -a, --agent ID     (init) the agent the workspace is for (default main)\n");
}

/* Options common to status and log; *agent is the one operand. */
static int cli_workspace_args(int argc, char **argv, bool *json, const char **cfg_path,
                              const char **agent)
{
	static const struct option opts[] = {{"json", no_argument, NULL, 'j'},
	                                     {"config", required_argument, NULL, 'c'},
	                                     {"help", no_argument, NULL, 'h'},
	                                     {0}};
	int c;

	optind = 1;
	while ((c = getopt_long(argc, argv, "jc:h", opts, NULL)) != -1) {
		switch (c) {
		case 'j':
			*json = true;
			break;
		case 'c':
			*cfg_path = optarg;
			break;
		case 'h':
			cli_workspace_usage(stdout);
			return 0;
		default:
			cli_workspace_usage(stderr);
			return 2;
		}
	}
	if (optind != argc - 1) {
		fprintf(stderr, "switchboard workspace %s: give one agent id\n", argv[0]);
		cli_workspace_usage(stderr);
		return 2;
	}
	*agent = argv[optind];
	return -1; /* go on */
}

/* Loads the configuration; *a is the agent. 0, or the exit code. */
static int cli_workspace_load(const char *explicit_cfg, const char *agent, char *home,
                              size_t home_size, struct config **cfg, const struct agent_config **a)
{
	char cfg_path[PATH_MAX];
	struct cfg_errors errs;

	*cfg = NULL;
	if (sodium_init() < 0 || cli_home(home, home_size) ||
	    cli_config_path(home, explicit_cfg, cfg_path, sizeof cfg_path))
		return 1;
	cfg_errors_init(&errs);
	if (config_load(cfg_path, home, cfg, &errs)) {
		cfg_errors_print(&errs, stderr);
		fprintf(stderr, "switchboard: cannot load %s (run `switchboard init` first?)\n",
		        cfg_path);
		cfg_errors_free(&errs);
		return 1;
	}
	cfg_errors_free(&errs);
	*a = config_agent(*cfg, agent);
	if (!*a) {
		fprintf(stderr, "switchboard workspace: no agent \"%s\" in %s\n", agent, cfg_path);
		config_unref(*cfg);
		*cfg = NULL;
		return 1;
	}
	return 0;
}

/* ---- status ---- */

static const char *cli_ws_state(const struct prompt_file *pf)
{
	bool optional = strcmp(pf->name, "BOOTSTRAP.md") == 0 || strcmp(pf->name, "MEMORY.md") == 0;

	if (!pf->present)
		return optional ? "missing (optional)" : "missing";
	if (pf->blank)
		return "blank";
	if (pf->truncated)
		return "truncated";
	if (pf->included)
		return "included";
	return "not included (budget spent)";
}

static int cli_workspace_status(int argc, char **argv)
{
	bool json = false;
	const char *cfg_path = NULL, *agent = NULL;
	char home[PATH_MAX], hex[2 * PROMPT_HASH_BYTES + 1], boot[PATH_MAX];
	struct config *cfg = NULL;
	const struct agent_config *a;
	struct prompt_options po;
	struct workspace_version v;
	struct buf prompt;
	int rc = cli_workspace_args(argc, argv, &json, &cfg_path, &agent);

	if (rc >= 0)
		return rc;
	if ((rc = cli_workspace_load(cfg_path, agent, home, sizeof home, &cfg, &a)))
		return rc;
	buf_init(&prompt, (size_t)8 << 20);
	memset(&po, 0, sizeof po);
	po.agent_id = a->id;
	po.main_session = true;
	po.new_workspace = true;
	po.file_max_chars = (size_t)a->bootstrap_max_chars;
	po.total_max_chars = (size_t)a->bootstrap_total_max_chars;
	rc = workspace_snapshot(NULL, a->workspace, &po, &prompt, &v);
	if (rc) {
		fprintf(stderr, "switchboard workspace status: %s: %s%s\n", a->workspace,
		        sb_strerror(rc),
		        rc == SB_ERR_NOTFOUND ? " (create it with `switchboard workspace init`)"
		                              : "");
		rc = 1;
		goto out;
	}
	snprintf(boot, sizeof boot, "%s/BOOT.md", a->workspace);
	workspace_hash_hex(v.hash, hex);
	if (json) {
		json_t *o = workspace_version_json(&v, false), *files = json_array();
		char *dump;

		for (size_t i = 0; o && files && i < v.info.n_files; i++) {
			const struct prompt_file *pf = &v.info.files[i];
			json_t *f =
			    json_pack("{s:s,s:b,s:I,s:s}", "name", pf->name, "present", pf->present,
			              "bytes", (json_int_t)pf->bytes, "state", cli_ws_state(pf));

			if (f && pf->present) {
				workspace_hash_hex(pf->hash, hex);
				json_object_set_new(f, "hash", json_string(hex));
			}
			json_array_append_new(files, f);
		}
		if (o) {
			json_object_set_new(o, "agent", json_string(a->id));
			json_object_set_new(o, "workspace", json_string(a->workspace));
			json_object_set_new(o, "git", json_boolean(v.git));
			json_object_set_new(o, "boot", json_boolean(access(boot, F_OK) == 0));
			json_object_set_new(o, "files", files);
			files = NULL;
		}
		json_decref(files);
		dump = o ? json_dumps(o, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
		json_decref(o);
		if (!dump) {
			rc = 1;
			goto out;
		}
		printf("%s\n", dump);
		free(dump);
		rc = 0;
		goto out;
	}
	printf("agent:      %s\n", a->id);
	printf("workspace:  %s\n", a->workspace);
	if (!v.git)
		printf("commit:     none (not a git repository)\n");
	else if (strcmp(v.commit, WORKSPACE_COMMIT_NONE) == 0)
		printf("commit:     none (no commit yet)%s\n", v.dirty ? ", dirty" : "");
	else
		printf("commit:     %s%s\n", v.commit, v.dirty ? " (dirty)" : "");
	printf("hash:       %s\n", hex);
	printf("boot:       %s\n",
	       access(boot, F_OK) == 0 ? "BOOT.md runs at gateway start" : "no BOOT.md");
	printf("files:\n");
	for (size_t i = 0; i < v.info.n_files; i++) {
		const struct prompt_file *pf = &v.info.files[i];
		char size[32];

		if (pf->present) {
			workspace_hash_hex(pf->hash, hex);
			snprintf(size, sizeof size, "%zu B", pf->bytes);
		} else {
			snprintf(hex, sizeof hex, "-");
			snprintf(size, sizeof size, "-");
		}
		printf("  %-13s %10s  %-16.16s  %s\n", pf->name, size, hex, cli_ws_state(pf));
	}
	rc = 0;
out:
	buf_free(&prompt);
	config_unref(cfg);
	return rc;
}

/* ---- log ---- */

/* One version: commit + dirty + hash. */
struct cli_ws_version {
	char *commit, *hash;
	bool dirty;
	long turns;
	char *last_ts, *last_session, *last_key;
};

struct cli_ws_log {
	struct cli_ws_version *v;
	size_t n, cap;
};

static void cli_ws_log_free(struct cli_ws_log *l)
{
	for (size_t i = 0; i < l->n; i++) {
		free(l->v[i].commit);
		free(l->v[i].hash);
		free(l->v[i].last_ts);
		free(l->v[i].last_session);
		free(l->v[i].last_key);
	}
	free(l->v);
}

static int cli_ws_set(char **dst, const char *s)
{
	char *d = strdup(s ? s : "");

	if (!d)
		return SB_ERR_NOMEM;
	free(*dst);
	*dst = d;
	return SB_OK;
}

static int cli_ws_log_add(struct cli_ws_log *l, const json_t *ws, const char *ts,
                          const char *session, const char *key)
{
	const char *commit = json_string_value(json_object_get(ws, "commit"));
	const char *hash = json_string_value(json_object_get(ws, "hash"));
	bool dirty = json_is_true(json_object_get(ws, "dirty"));
	struct cli_ws_version *v = NULL;

	if (!commit || !hash)
		return SB_OK;
	for (size_t i = 0; i < l->n; i++)
		if (l->v[i].dirty == dirty && strcmp(l->v[i].commit, commit) == 0 &&
		    strcmp(l->v[i].hash, hash) == 0)
			v = &l->v[i];
	if (!v) {
		if (l->n == l->cap) {
			size_t cap = l->cap ? l->cap * 2 : 8;
			struct cli_ws_version *nv = realloc(l->v, cap * sizeof *nv);

			if (!nv)
				return SB_ERR_NOMEM;
			l->v = nv;
			l->cap = cap;
		}
		v = &l->v[l->n++];
		memset(v, 0, sizeof *v);
		v->dirty = dirty;
		if (cli_ws_set(&v->commit, commit) || cli_ws_set(&v->hash, hash))
			return SB_ERR_NOMEM;
	}
	v->turns++;
	if (!v->last_ts || strcmp(ts, v->last_ts) >= 0) {
		if (cli_ws_set(&v->last_ts, ts) || cli_ws_set(&v->last_session, session) ||
		    cli_ws_set(&v->last_key, key))
			return SB_ERR_NOMEM;
	}
	return SB_OK;
}

/* The "workspace" events of one transcript. Lines that do not parse (a torn
 * last line) are skipped. */
static int cli_ws_scan(struct cli_ws_log *l, const char *path)
{
	char *text = NULL, *p, *nl;
	char *session = NULL, *key = NULL;
	size_t len = 0;
	int rc = fs_read_all(path, CLI_WS_TRANSCRIPT_MAX, &text, &len);

	if (rc)
		return rc == SB_ERR_NOTFOUND ? SB_OK : rc;
	for (p = text; rc == SB_OK && p < text + len; p = nl + 1) {
		json_t *e;
		const char *type;

		nl = memchr(p, '\n', (size_t)(text + len - p));
		if (!nl)
			nl = text + len;
		/* Cheap filter: only the header and workspace events are parsed. */
		if (p != text && !memmem(p, (size_t)(nl - p), "\"workspace\"", 11))
			continue;
		e = json_loadb(p, (size_t)(nl - p), 0, NULL);
		type = json_string_value(json_object_get(e, "type"));
		if (type && strcmp(type, "session") == 0) {
			rc = cli_ws_set(&session, json_string_value(json_object_get(e, "id")));
			if (!rc)
				rc = cli_ws_set(&key, json_string_value(json_object_get(e, "key")));
		} else if (type && strcmp(type, "event") == 0 &&
		           json_is_string(json_object_get(e, "event")) &&
		           strcmp(json_string_value(json_object_get(e, "event")), "workspace") ==
		               0) {
			const char *ts = json_string_value(json_object_get(e, "ts"));

			rc = cli_ws_log_add(l, json_object_get(e, "workspace"), ts ? ts : "",
			                    session ? session : "", key ? key : "");
		}
		json_decref(e);
	}
	free(session);
	free(key);
	free(text);
	return rc;
}

static int cli_ws_by_last(const void *a, const void *b)
{
	const struct cli_ws_version *x = a, *y = b;

	return strcmp(y->last_ts, x->last_ts); /* newest first */
}

static int cli_workspace_log(int argc, char **argv)
{
	bool json = false;
	const char *cfg_path = NULL, *agent = NULL;
	char home[PATH_MAX], dir[PATH_MAX + 64], path[PATH_MAX * 2];
	struct config *cfg = NULL;
	const struct agent_config *a;
	struct cli_ws_log l = {0};
	struct dirent *de;
	DIR *d;
	int rc = cli_workspace_args(argc, argv, &json, &cfg_path, &agent);

	if (rc >= 0)
		return rc;
	if ((rc = cli_workspace_load(cfg_path, agent, home, sizeof home, &cfg, &a)))
		return rc;
	snprintf(dir, sizeof dir, "%s/agents/%s/sessions", home, a->id);
	d = opendir(dir);
	rc = SB_OK;
	while (d && rc == SB_OK && (de = readdir(d))) {
		size_t n = strlen(de->d_name);

		if (n < 7 || strcmp(de->d_name + n - 6, ".jsonl") != 0)
			continue;
		snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
		rc = cli_ws_scan(&l, path);
		if (rc)
			fprintf(stderr, "switchboard workspace log: cannot read %s: %s\n", path,
			        sb_strerror(rc));
	}
	if (d)
		closedir(d);
	if (rc) {
		rc = 1;
		goto out;
	}
	if (l.n)
		qsort(l.v, l.n, sizeof *l.v, cli_ws_by_last);
	if (json) {
		json_t *arr = json_array();
		char *dump;

		for (size_t i = 0; arr && i < l.n; i++)
			json_array_append_new(
			    arr, json_pack("{s:s,s:b,s:s,s:I,s:s,s:s,s:s}", "commit", l.v[i].commit,
			                   "dirty", l.v[i].dirty, "hash", l.v[i].hash, "turns",
			                   (json_int_t)l.v[i].turns, "last_session",
			                   l.v[i].last_session, "last_session_key", l.v[i].last_key,
			                   "last_used", l.v[i].last_ts));
		dump = arr ? json_dumps(arr, JSON_INDENT(2)) : NULL;
		json_decref(arr);
		if (!dump) {
			rc = 1;
			goto out;
		}
		printf("%s\n", dump);
		free(dump);
		rc = 0;
		goto out;
	}
	if (!l.n) {
		printf("agent %s has not answered yet (no workspace versions in %s)\n", a->id, dir);
		rc = 0;
		goto out;
	}
	printf("%-12s %-5s %-16s %6s  %-24s  %s\n", "COMMIT", "DIRTY", "HASH", "TURNS", "LAST USED",
	       "LAST SESSION");
	for (size_t i = 0; i < l.n; i++)
		printf("%-12.12s %-5s %-16.16s %6ld  %-24s  %s (%s)\n", l.v[i].commit,
		       l.v[i].dirty ? "yes" : "no", l.v[i].hash, l.v[i].turns, l.v[i].last_ts,
		       l.v[i].last_key, l.v[i].last_session);
	rc = 0;
out:
	cli_ws_log_free(&l);
	config_unref(cfg);
	return rc;
}

/* ---- init ---- */

static int cli_workspace_init(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"agent", required_argument, NULL, 'a'}, {"help", no_argument, NULL, 'h'}, {0}};
	const char *agent = NULL;
	char why[512] = "", commit[41];
	size_t created = 0;
	int c, rc;

	optind = 1;
	while ((c = getopt_long(argc, argv, "a:h", opts, NULL)) != -1) {
		switch (c) {
		case 'a':
			agent = optarg;
			break;
		case 'h':
			cli_workspace_usage(stdout);
			return 0;
		default:
			cli_workspace_usage(stderr);
			return 2;
		}
	}
	if (optind != argc - 1) {
		fprintf(stderr, "switchboard workspace init: give one directory\n");
		cli_workspace_usage(stderr);
		return 2;
	}
	if (agent && (!*agent || strlen(agent) > 64 ||
	              strspn(agent, "abcdefghijklmnopqrstuvwxyz"
	                            "0123456789_-") != strlen(agent))) {
		fprintf(stderr,
		        "switchboard workspace init: bad agent id \"%s\" (lower-case letters, "
		        "digits, _ and -)\n",
		        agent);
		return 2;
	}
	if (sodium_init() < 0)
		return 1;
	rc = workspace_init(argv[optind], agent, &created, commit, why, sizeof why);
	if (rc) {
		fprintf(stderr, "switchboard workspace init: %s\n", why[0] ? why : sb_strerror(rc));
		return 1;
	}
	printf("workspace: %s\n", argv[optind]);
	printf("  %zu file%s written\n", created, created == 1 ? "" : "s");
	if (commit[0])
		printf("  git: new repository, first commit %s\n", commit);
	else
		printf("  git: left as it was\n");
	return 0;
}

int cli_workspace(int argc, char **argv)
{
	if (argc < 2) {
		cli_workspace_usage(stderr);
		return 2;
	}
	if (strcmp(argv[1], "status") == 0)
		return cli_workspace_status(argc - 1, argv + 1);
	if (strcmp(argv[1], "log") == 0)
		return cli_workspace_log(argc - 1, argv + 1);
	if (strcmp(argv[1], "init") == 0)
		return cli_workspace_init(argc - 1, argv + 1);
	if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
		cli_workspace_usage(stdout);
		return 0;
	}
	fprintf(stderr, "switchboard workspace: unknown subcommand \"%s\"\n", argv[1]);
	cli_workspace_usage(stderr);
	return 2;
}
