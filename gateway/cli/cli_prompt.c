/*
 * cli_prompt.c - `switchboard prompt [AGENT] [--session KEY]`: what the
 * next turn of a session would send to the model, asked of the running
 * gateway (the control plane's agent.prompt, built by the runner's own
 * steps: the same workspace snapshot, daily notes and tool list a turn
 * uses). Printed as a header (the session, the workspace version, each
 * bootstrap file with its version, size and truncation), the system prompt
 * byte for byte, the tool list with sizes and the token estimate; --raw
 * prints the system prompt alone, --json the gateway's answer.
 */
#include <getopt.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gateway/cli/cli_ctl.h"
#include "gateway/core/num.h"

static bool prompt_raw;

static void prompt_usage(FILE *f)
{
	fprintf(f, "usage: switchboard prompt [AGENT] [--session KEY] [--raw] [--json]\n\n"
	           "Prints what the next turn of AGENT's session would send to the model, as\n"
	           "the running gateway builds it for a message from this client: the\n"
	           "workspace files in the system prompt (git blob or modification time, size,\n"
	           "where the caps cut them), the system prompt byte for byte, the tools with\n"
	           "their schema sizes, and the token estimate. Nothing is sent to the model and\n"
	           "nothing is written.\n"
	           "  AGENT             the agent (default: the default agent)\n"
	           "  --session KEY     the session (default: the agent's main session; a\n"
	           "                    short key such as main, or agent:ID:REST)\n"
	           "  --raw             only the system prompt, byte for byte\n"
	           "  --json            the gateway's answer (agent.prompt) as JSON\n"
	           "  --url URL         ws://HOST:PORT[/PATH] (default: from the home)\n"
	           "  --token-file FILE the token from FILE (- for standard input)\n"
	           "  --token TOKEN     default: $SWITCHBOARD_TOKEN, then gateway.auth_token,\n"
	           "                    else the home's gateway.token\n"
	           "  --config FILE     the configuration to find the gateway in\n"
	           "  --timeout SECONDS how long to wait for the gateway\n");
}

static const char *prompt_s(const json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));

	return s ? s : "";
}

static json_int_t prompt_i(const json_t *o, const char *key)
{
	return json_integer_value(json_object_get(o, key));
}

/* "2026-12-03T13:01:02Z" for unix ms. */
static void prompt_time(json_int_t ms, char *out, size_t size)
{
	time_t t = (time_t)(ms / 1000);
	struct tm tm;

	if (!gmtime_r(&t, &tm) || !strftime(out, size, "%Y-%m-%dT%H:%M:%SZ", &tm))
		snprintf(out, size, "?");
}

static void prompt_print_file(const json_t *f, bool git)
{
	const json_t *cut = json_object_get(f, "truncated");
	char when[32], version[128];

	printf("  %-13s", prompt_s(f, "name"));
	if (json_is_true(json_object_get(f, "refused"))) {
		printf("refused: not a regular file (symbolic links are never followed)\n");
		return;
	}
	if (!json_is_true(json_object_get(f, "present"))) {
		printf("missing\n");
		return;
	}
	prompt_time(prompt_i(f, "mtimeMs"), when, sizeof when);
	if (git && json_is_true(json_object_get(f, "committed")))
		snprintf(version, sizeof version, "blob %.12s (committed)", prompt_s(f, "blob"));
	else if (git)
		snprintf(version, sizeof version, "blob %.12s (not committed; modified %s)",
		         prompt_s(f, "blob"), when);
	else
		snprintf(version, sizeof version, "modified %s", when);
	printf("%8lld bytes  %s  ", (long long)prompt_i(f, "bytes"), version);
	if (json_is_true(json_object_get(f, "blank")))
		printf("blank: skipped\n");
	else if (json_is_true(json_object_get(f, "leftOut")))
		printf("left out: the total cap (bootstrap_total_max_chars) was spent\n");
	else if (cut)
		printf("truncated to %lld bytes by the %s: bytes 0-%lld and %lld-%lld kept\n",
		       (long long)prompt_i(cut, "cap"),
		       strcmp(prompt_s(cut, "by"), "total") == 0
		           ? "rest of the total cap (bootstrap_total_max_chars)"
		           : "per-file cap (bootstrap_max_chars)",
		       (long long)prompt_i(cut, "headBytes") - 1,
		       (long long)prompt_i(cut, "tailFrom"), (long long)prompt_i(f, "bytes") - 1);
	else
		printf("included whole\n");
}

static void prompt_print(const json_t *p)
{
	const json_t *ws = json_object_get(p, "workspace"), *files = json_object_get(p, "files");
	const json_t *tools = json_object_get(p, "tools"), *tok = json_object_get(p, "tokens");
	const json_t *sys = json_object_get(p, "system"), *item;
	bool git = json_is_true(json_object_get(ws, "git"));
	json_int_t tool_bytes = 0;
	size_t i;

	if (prompt_raw) {
		fwrite(json_string_value(sys), 1, json_string_length(sys), stdout);
		return;
	}
	printf("agent %s, session %s", prompt_s(p, "agentId"), prompt_s(p, "sessionKey"));
	if (json_is_true(json_object_get(p, "newSession")))
		printf(" (new: the next message starts it)\n");
	else
		printf(" (%s, %lld messages)\n", prompt_s(p, "sessionId"),
		       (long long)prompt_i(p, "historyMessages"));
	printf("model %s\n", prompt_s(p, "model"));
	printf("workspace %s: ", prompt_s(ws, "dir"));
	if (git && strcmp(prompt_s(ws, "commit"), "none") != 0)
		printf("commit %.12s%s\n", prompt_s(ws, "commit"),
		       json_is_true(json_object_get(ws, "dirty")) ? ", with changes not committed"
		                                                  : "");
	else if (git)
		printf("a git repository without commits\n");
	else
		printf("not a git repository\n");
	printf("files:\n");
	json_array_foreach(files, i, item) prompt_print_file(item, git);
	json_array_foreach(json_object_get(p, "notes"), i, item)
	{
		printf("  %-13s%8lld bytes  daily note  ", prompt_s(item, "name"),
		       (long long)prompt_i(item, "bytes"));
		if (json_is_true(json_object_get(item, "truncated")))
			printf("cut to its first %lld bytes (bootstrap_max_chars)\n",
			       (long long)prompt_i(item, "keptBytes"));
		else
			printf("included whole\n");
	}
	printf("--- system prompt: %lld bytes ---\n", (long long)prompt_i(p, "systemBytes"));
	fwrite(json_string_value(sys), 1, json_string_length(sys), stdout);
	if (json_string_length(sys) && json_string_value(sys)[json_string_length(sys) - 1] != '\n')
		putchar('\n');
	printf("--- end of system prompt ---\n");
	json_array_foreach(tools, i, item) tool_bytes += prompt_i(item, "bytes");
	printf("tools (%zu, %lld bytes as JSON):\n", json_array_size(tools), (long long)tool_bytes);
	json_array_foreach(tools, i, item)
	{
		printf("  %-14s %6lld bytes (schema %lld)\n", prompt_s(item, "name"),
		       (long long)prompt_i(item, "bytes"),
		       (long long)prompt_i(item, "schemaBytes"));
	}
	printf("tokens (estimate): system %lld + tools %lld + history %lld = %lld",
	       (long long)prompt_i(tok, "system"), (long long)prompt_i(tok, "tools"),
	       (long long)prompt_i(tok, "history"), (long long)prompt_i(tok, "total"));
	if (json_number_value(json_object_get(tok, "calibration")) != 1.0)
		printf(" (calibrated x%.2f by the session's last answer)",
		       json_number_value(json_object_get(tok, "calibration")));
	printf(", before the new message\n");
}

int cli_prompt(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"session", required_argument, NULL, 's'}, {"raw", no_argument, NULL, 'r'},
	    {"json", no_argument, NULL, 'j'},          {"url", required_argument, NULL, 'u'},
	    {"token", required_argument, NULL, 't'},   {"token-file", required_argument, NULL, 'F'},
	    {"config", required_argument, NULL, 'c'},  {"timeout", required_argument, NULL, 'T'},
	    {"help", no_argument, NULL, 'h'},          {0},
	};
	struct cli_ctl_common o;
	const char *agent = NULL, *session = NULL;
	json_t *params;
	int ch;

	memset(&o, 0, sizeof o);
	prompt_raw = false;
	optind = 1;
	while ((ch = getopt_long(argc, argv, "s:h", opts, NULL)) != -1) {
		switch (ch) {
		case 's':
			session = optarg;
			break;
		case 'r':
			prompt_raw = true;
			break;
		case 'j':
			o.json = true;
			break;
		case 'u':
			o.url = optarg;
			break;
		case 't':
			o.token = optarg;
			break;
		case 'F':
			o.token_file = optarg;
			break;
		case 'c':
			o.config = optarg;
			break;
		case 'T':
			if (num_parse_i64(optarg, 1, 86400, &o.timeout_s)) {
				fprintf(stderr,
				        "switchboard prompt: --timeout wants seconds from 1 to "
				        "86400\n");
				return 2;
			}
			break;
		case 'h':
			prompt_usage(stdout);
			return 0;
		default:
			prompt_usage(stderr);
			return 2;
		}
	}
	if (optind < argc)
		agent = argv[optind++];
	if (optind != argc || (agent && !*agent) || (session && !*session)) {
		prompt_usage(stderr);
		return 2;
	}
	if (prompt_raw && o.json) {
		fprintf(stderr, "switchboard prompt: --raw and --json do not go together\n");
		return 2;
	}
	/* A full key names its agent: it must be AGENT when both are given. */
	if (agent && session && strncmp(session, "agent:", 6) == 0) {
		size_t n = strcspn(session + 6, ":");

		if (strlen(agent) != n || strncmp(session + 6, agent, n) != 0) {
			fprintf(stderr,
			        "switchboard prompt: --session %s belongs to agent \"%.*s\", not "
			        "\"%s\"; give a short key (such as main) or leave AGENT out\n",
			        session, (int)n, session + 6, agent);
			return 2;
		}
	}
	params = json_object();
	if (!params)
		return 1;
	if (agent)
		json_object_set_new(params, "agentId", json_string(agent));
	if (session)
		json_object_set_new(params, "sessionKey", json_string(session));
	return cli_ctl_call(&o, "prompt", "agent.prompt", params, prompt_print);
}
