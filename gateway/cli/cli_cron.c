/*
 * cli_cron.c - `switchboard cron list|add|rm|run|runs`: the cron.* methods
 * of the running gateway's control plane (docs/scheduling.md).
 */
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "gateway/cli/cli_ctl.h"
#include "gateway/core/fmt.h"
#include "gateway/core/num.h"
#include "gateway/cron/cron.h"

static void cron_usage(FILE *f)
{
	fprintf(f,
	        "usage: switchboard cron list [--json]\n"
	        "       switchboard cron add ID (--cron EXPR [--tz ZONE] | --every DURATION\n"
	        "                            [--anchor TIME] | --at TIME) --payload TEXT\n"
	        "                            [--agent ID] [--session isolated|main]\n"
	        "                            [--announce CHANNEL|last --to TARGET [--account A]\n"
	        "                             | --webhook HOOK] [--disabled] [--delete-after-run]\n"
	        "       switchboard cron rm ID\n"
	        "       switchboard cron run ID\n"
	        "       switchboard cron runs [ID] [--limit N]\n\n"
	        "Jobs run agent turns on a schedule: a 5-field cron expression in a time zone,\n"
	        "an interval, or once at a time. Jobs in the config file (top-level `cron`)\n"
	        "are listed too, but changed by editing the file.\n"
	        "  --json            machine-readable output (the gateway's JSON)\n"
	        "  --url URL         ws://HOST:PORT[/PATH] (default: from the home's config)\n"
	        "  --token TOKEN     default: $SWITCHBOARD_TOKEN, then gateway.auth_token,\n"
	        "                    else the home's gateway.token\n"
	        "  --config FILE     the configuration to find the gateway in\n"
	        "  --timeout SECONDS how long to wait for the gateway\n");
}

static void cron_fmt_time(int64_t ms, char *out, size_t size)
{
	if (ms <= 0)
		snprintf(out, size, "-");
	else
		cron_format_time(ms, out, size);
}

static void cron_print_list(const json_t *p)
{
	const json_t *j;
	size_t i;

	if (json_array_size(json_object_get(p, "jobs")) == 0) {
		printf("no cron jobs\n");
		return;
	}
	json_array_foreach(json_object_get(p, "jobs"), i, j)
	{
		const json_t *st = json_object_get(j, "state");
		char next[40], last[40], sched[300];
		const char *status = json_string_value(json_object_get(st, "lastStatus"));

		if (json_object_get(j, "cron"))
			snprintf(sched, sizeof sched, "cron \"%s\"%s%s",
			         json_string_value(json_object_get(j, "cron")),
			         json_object_get(j, "tz") ? " " : "",
			         json_object_get(j, "tz")
			             ? json_string_value(json_object_get(j, "tz"))
			             : "");
		else if (json_object_get(j, "every"))
		{
			char span[32];

			snprintf(sched, sizeof sched, "every %s",
			         fmt_span(span, sizeof span,
			                  (int64_t)json_integer_value(json_object_get(j, "every"))));
		}
		else
			snprintf(sched, sizeof sched, "at %s",
			         json_string_value(json_object_get(j, "at")));
		cron_fmt_time(json_integer_value(json_object_get(st, "nextRunMs")), next,
		              sizeof next);
		cron_fmt_time(json_integer_value(json_object_get(st, "lastRunMs")), last,
		              sizeof last);
		printf("%s  %s, %s session, delivery %s%s%s\n",
		       json_string_value(json_object_get(j, "id")), sched,
		       json_string_value(json_object_get(j, "session")),
		       json_string_value(json_object_get(json_object_get(j, "delivery"), "mode")),
		       json_is_true(json_object_get(j, "enabled")) ? "" : ", disabled",
		       json_is_true(json_object_get(st, "autoDisabled"))
		           ? ", DISABLED after failures"
		           : "");
		printf("    next %s, last %s%s%s%s, source %s\n", next, last,
		       status && *status ? " (" : "", status && *status ? status : "",
		       status && *status ? ")" : "",
		       json_string_value(json_object_get(j, "source")));
		{
			const char *payload = json_string_value(json_object_get(j, "payload"));

			if (payload && *payload)
				printf("    payload: %s\n", payload);
		}
	}
}

static void cron_print_runs(const json_t *p)
{
	const json_t *r;
	size_t i;

	if (json_array_size(json_object_get(p, "runs")) == 0) {
		printf("no runs yet\n");
		return;
	}
	json_array_foreach(json_object_get(p, "runs"), i, r)
	{
		char at[40];
		const char *detail = json_string_value(json_object_get(r, "detail"));

		cron_fmt_time(json_integer_value(json_object_get(r, "finishedAt")), at, sizeof at);
		printf("%s  %s  %s%s%s\n", at, json_string_value(json_object_get(r, "jobId")),
		       json_string_value(json_object_get(r, "status")), detail ? "  " : "",
		       detail ? detail : "");
	}
}

static void cron_print_added(const json_t *p)
{
	char next[40];

	cron_fmt_time(json_integer_value(json_object_get(json_object_get(p, "state"), "nextRunMs")),
	              next, sizeof next);
	printf("added %s; next run %s\n", json_string_value(json_object_get(p, "id")), next);
}

static void cron_print_removed(const json_t *p)
{
	printf("removed %s\n", json_string_value(json_object_get(p, "id")));
}

static void cron_print_run(const json_t *p)
{
	(void)p;
	printf("started; see `switchboard cron runs` for the outcome\n");
}

int cli_cron(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"json", no_argument, NULL, 'j'},
	    {"url", required_argument, NULL, 'u'},
	    {"token", required_argument, NULL, 't'},
	    {"config", required_argument, NULL, 'c'},
	    {"timeout", required_argument, NULL, 'T'},
	    {"limit", required_argument, NULL, 'n'},
	    {"cron", required_argument, NULL, 'C'},
	    {"tz", required_argument, NULL, 'z'},
	    {"every", required_argument, NULL, 'e'},
	    {"anchor", required_argument, NULL, 'A'},
	    {"at", required_argument, NULL, '@'},
	    {"payload", required_argument, NULL, 'p'},
	    {"agent", required_argument, NULL, 'a'},
	    {"session", required_argument, NULL, 's'},
	    {"announce", required_argument, NULL, 'N'},
	    {"to", required_argument, NULL, 'o'},
	    {"account", required_argument, NULL, 'O'},
	    {"webhook", required_argument, NULL, 'W'},
	    {"disabled", no_argument, NULL, 'd'},
	    {"delete-after-run", no_argument, NULL, 'D'},
	    {"help", no_argument, NULL, 'h'},
	    {0},
	};
	struct cli_ctl_common o = {0};
	json_t *job = json_object(), *del = NULL, *params = NULL;
	const char *announce = NULL, *to = NULL, *account = NULL, *webhook = NULL, *sub;
	int64_t limit = 20;
	int ch, rc = 2;

	if (!job)
		return 1;
	optind = 1;
	while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (ch) {
		case 'j':
			o.json = true;
			break;
		case 'u':
			o.url = optarg;
			break;
		case 't':
			o.token = optarg;
			break;
		case 'c':
			o.config = optarg;
			break;
		case 'T':
			if (num_parse_i64(optarg, 1, 86400, &o.timeout_s)) {
				fprintf(stderr, "switchboard cron: --timeout wants seconds\n");
				goto out;
			}
			break;
		case 'n':
			if (num_parse_i64(optarg, 1, 1000, &limit)) {
				fprintf(stderr, "switchboard cron: --limit wants 1 to 1000\n");
				goto out;
			}
			break;
		case 'C':
			json_object_set_new(job, "cron", json_string(optarg));
			break;
		case 'z':
			json_object_set_new(job, "tz", json_string(optarg));
			break;
		case 'e':
			json_object_set_new(job, "every", json_string(optarg));
			break;
		case 'A':
			json_object_set_new(job, "anchor", json_string(optarg));
			break;
		case '@':
			json_object_set_new(job, "at", json_string(optarg));
			break;
		case 'p':
			json_object_set_new(job, "payload", json_string(optarg));
			break;
		case 'a':
			json_object_set_new(job, "agent", json_string(optarg));
			break;
		case 's':
			json_object_set_new(job, "session", json_string(optarg));
			break;
		case 'N':
			announce = optarg;
			break;
		case 'o':
			to = optarg;
			break;
		case 'O':
			account = optarg;
			break;
		case 'W':
			webhook = optarg;
			break;
		case 'd':
			json_object_set_new(job, "enabled", json_false());
			break;
		case 'D':
			json_object_set_new(job, "delete_after_run", json_true());
			break;
		case 'h':
			cron_usage(stdout);
			rc = 0;
			goto out;
		default:
			cron_usage(stderr);
			goto out;
		}
	}
	sub = optind < argc ? argv[optind] : "list";
	if (strcmp(sub, "list") == 0 && optind + 1 >= argc) {
		rc = cli_ctl_call(&o, "cron", "cron.list", NULL, cron_print_list);
	} else if (strcmp(sub, "add") == 0 && optind + 2 == argc) {
		json_object_set_new(job, "id", json_string(argv[optind + 1]));
		if (announce)
			del = json_pack("{ss ss ss? ss?}", "mode", "announce", "channel", announce,
			                "to", to, "account", account);
		else if (webhook)
			del = json_pack("{ss ss}", "mode", "webhook", "to", webhook);
		if (del)
			json_object_set_new(job, "delivery", del);
		params = json_pack("{sO}", "job", job);
		rc = cli_ctl_call(&o, "cron", "cron.add", params, cron_print_added);
	} else if ((strcmp(sub, "rm") == 0 || strcmp(sub, "remove") == 0) && optind + 2 == argc) {
		rc = cli_ctl_call(&o, "cron", "cron.remove",
		                  json_pack("{ss}", "id", argv[optind + 1]), cron_print_removed);
	} else if (strcmp(sub, "run") == 0 && optind + 2 == argc) {
		rc = cli_ctl_call(&o, "cron", "cron.run", json_pack("{ss}", "id", argv[optind + 1]),
		                  cron_print_run);
	} else if (strcmp(sub, "runs") == 0 && optind + 2 >= argc) {
		params = json_pack("{sI}", "limit", (json_int_t)limit);
		if (params && optind + 1 < argc)
			json_object_set_new(params, "id", json_string(argv[optind + 1]));
		rc = cli_ctl_call(&o, "cron", "cron.runs", params, cron_print_runs);
	} else {
		cron_usage(stderr);
	}
out:
	json_decref(job);
	return rc;
}
