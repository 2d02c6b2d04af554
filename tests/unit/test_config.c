/*
 * test_config.c - the configuration module: the YAML document, the schema
 * walker (gateway/core/cfg.c), the gateway snapshot (gateway/config/config.c), the
 * agent keys, and the generated reference in docs/configuration.md.
 *
 * Error tests compare the exact printed lines, positions included.
 * SB_UPDATE_DOCS=1 makes test_docs_reference_current rewrite the generated
 * part of docs/configuration.md instead of failing.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <sys/resource.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agents/agent_config.h"
#include "gateway/config/config.h"
#include "gateway/core/cfg.h"
#include "gateway/core/err.h"

#define AGENTS "agents:\n  - id: main\n"

static char home[PATH_MAX];

/* ---- helpers ---- */

static char *errors_text(const struct cfg_errors *e)
{
	char *s = NULL;
	size_t n = 0;
	FILE *f = open_memstream(&s, &n);

	assert_non_null(f);
	cfg_errors_print(e, f);
	assert_int_equal(fclose(f), 0);
	return s;
}

/* Loads yaml as "t.yaml" with the test home; returns the rc, the snapshot
 * and the printed errors (free both). */
static int load(const char *yaml, struct config **out, char **errtext)
{
	struct cfg_errors e;
	int rc;

	cfg_errors_init(&e);
	rc = config_load_text(yaml, "t.yaml", home, out, &e);
	*errtext = errors_text(&e);
	cfg_errors_free(&e);
	return rc;
}

static struct config *load_ok(const char *yaml)
{
	struct config *c = NULL;
	char *txt = NULL;
	int rc = load(yaml, &c, &txt);

	if (rc != SB_OK)
		fail_msg("rc %d (%s), errors:\n%s", rc, sb_strerror(rc), txt);
	assert_string_equal(txt, "");
	free(txt);
	assert_non_null(c);
	return c;
}

static void expect_errors(const char *yaml, const char *expected)
{
	struct config *c = NULL;
	char *txt = NULL;
	int rc = load(yaml, &c, &txt);

	assert_string_equal(txt, expected);
	assert_int_equal(rc, SB_ERR_CONFIG);
	assert_null(c);
	free(txt);
}

static char *home_path(const char *rel)
{
	size_t n = strlen(home) + strlen(rel) + 2;
	char *p = malloc(n);

	assert_non_null(p);
	assert_true(snprintf(p, n, "%s/%s", home, rel) < (int)n);
	return p;
}

static void write_file(const char *path, const char *text, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	size_t len = strlen(text);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, len), (ssize_t)len);
	assert_int_equal(fchmod(fd, mode), 0);
	assert_int_equal(close(fd), 0);
}

static char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static char *fmt(const char *f, ...)
{
	char *s = NULL;
	size_t n = 0;
	FILE *m = open_memstream(&s, &n);
	va_list ap;

	assert_non_null(m);
	va_start(ap, f);
	vfprintf(m, f, ap);
	va_end(ap);
	assert_int_equal(fclose(m), 0);
	return s;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static int group_setup(void **state)
{
	char tmpl[] = "/tmp/sb-test-config-XXXXXX";

	(void)state;
	if (!mkdtemp(tmpl) || !realpath(tmpl, home))
		return -1;
	return sodium_init() < 0 ? -1 : 0;
}

static int group_teardown(void **state)
{
	(void)state;
	return nftw(home, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---- valid documents ---- */

static void test_valid_full(void **state)
{
	static const char yaml[] =
	    "gateway:\n"
	    "  bind: 0.0.0.0\n"
	    "  port: 9000\n"
	    "  drain_timeout: 2m\n"
	    "  max_body: 64KiB\n"
	    "  max_connections: 10\n"
	    "  auth_token: 0123456789abcdef0123\n"
	    "  watch_config: false\n"
	    "log:\n"
	    "  level: debug\n"
	    "  format: json\n"
	    "store:\n"
	    "  backend: sqlite\n"
	    "  path: /var/lib/sb/state.db\n"
	    "  busy_timeout: 250ms\n"
	    "  batch_max: 10\n"
	    "  queue_max: 100\n"
	    "http_client:\n"
	    "  timeout: 1h\n"
	    "  connect_timeout: 1500\n"
	    "  max_connections: 4\n"
	    "  max_host_connections: 2\n"
	    "  max_response: 10MiB\n"
	    "  ca_file: \"/etc/ca.pem\"\n"
	    "providers:\n"
	    "  - {id: openai, api: openai-chat, api_key: sk-test-0123456789}\n"
	    "  - {id: local, api: openai-chat, base_url: "
	    "\"http://127.0.0.1:11434/v1\", stream: false}\n"
	    "  - {id: demo, api: scripted, script: scripts/demo.yaml}\n"
	    "agents:\n"
	    "  - id: main\n"
	    "    workspace: /srv/ws/main\n"
	    "    model: openai/gpt-4o\n"
	    "    fallbacks: [local/llama3, demo/x]\n"
	    "    max_turns: 7\n"
	    "  - {id: helper-2, default: true}\n";
	struct config *c = load_ok(yaml);
	char *ws = home_path("workspaces/helper-2");

	(void)state;
	assert_string_equal(c->gateway.bind, "0.0.0.0");
	assert_int_equal(c->gateway.port, 9000);
	assert_int_equal(c->gateway.drain_timeout_ms, 120000);
	assert_int_equal(c->gateway.max_body_bytes, 65536);
	assert_int_equal(c->gateway.max_connections, 10);
	assert_string_equal(c->gateway.auth_token, "0123456789abcdef0123");
	assert_false(c->gateway.watch_config);
	assert_int_equal(c->log.level, CONFIG_LOG_DEBUG);
	assert_int_equal(c->log.format, CONFIG_LOG_JSON);
	assert_int_equal(c->store.backend, CONFIG_STORE_SQLITE);
	assert_string_equal(c->store.path, "/var/lib/sb/state.db");
	assert_int_equal(c->store.busy_timeout_ms, 250);
	assert_int_equal(c->store.batch_max, 10);
	assert_int_equal(c->store.queue_max, 100);
	assert_int_equal(c->http_client.timeout_ms, 3600000);
	assert_int_equal(c->http_client.connect_timeout_ms, 1500);
	assert_int_equal(c->http_client.max_connections, 4);
	assert_int_equal(c->http_client.max_host_connections, 2);
	assert_int_equal(c->http_client.max_response_bytes, 10 * 1024 * 1024);
	assert_string_equal(c->http_client.ca_file, "/etc/ca.pem");
	assert_int_equal(c->n_agents, 2);
	assert_string_equal(c->agents[0].id, "main");
	assert_string_equal(c->agents[0].workspace, "/srv/ws/main");
	assert_string_equal(c->agents[0].model, "openai/gpt-4o");
	assert_false(c->agents[0].is_default);
	assert_string_equal(c->agents[1].id, "helper-2");
	assert_string_equal(c->agents[1].workspace, ws);
	assert_null(c->agents[1].model);
	assert_true(c->agents[1].is_default);
	assert_ptr_equal(config_default_agent(c), &c->agents[1]);
	assert_string_equal(c->home, home);
	assert_int_equal(c->agents[0].n_fallbacks, 2);
	assert_string_equal(c->agents[0].fallbacks[1], "demo/x");
	assert_int_equal(c->agents[0].max_turns, 7);
	assert_int_equal(c->agents[1].max_turns, 25);
	assert_int_equal(c->agents[1].tool_timeout_ms, 120000);
	assert_int_equal(c->n_providers, 3);
	assert_int_equal(c->providers[0].api, PROVIDER_API_OPENAI_CHAT);
	assert_string_equal(c->providers[0].base_url, "https://api.openai.com/v1");
	assert_int_equal(c->providers[0].timeout_ms, 120000);
	assert_int_equal(c->providers[0].max_retries, 2);
	assert_true(c->providers[0].stream);
	assert_string_equal(c->providers[1].base_url, "http://127.0.0.1:11434/v1");
	assert_false(c->providers[1].stream);
	assert_ptr_equal(config_provider(c, "local"), &c->providers[1]);
	assert_null(config_provider(c, "nope"));
	assert_ptr_equal(config_agent(c, "helper-2"), &c->agents[1]);
	{
		char *script = home_path("scripts/demo.yaml");

		assert_string_equal(c->providers[2].script, script);
		free(script);
	}
	/* the API key is a secret: collected for log redaction */
	{
		bool found = false;

		for (size_t i = 0; i < c->n_secrets; i++)
			found |= strcmp(c->secrets[i], "sk-test-0123456789") == 0;
		assert_true(found);
	}
	free(ws);
	ws = home_path("t.yaml");
	assert_string_equal(c->path, ws);
	free(ws);
	config_unref(c);
}

static void test_defaults_filled(void **state)
{
	struct config *c = load_ok("# only what is required\n" AGENTS);
	char *db = home_path("state.db"), *ws = home_path("workspaces/main");

	(void)state;
	assert_string_equal(c->gateway.bind, "127.0.0.1");
	assert_int_equal(c->gateway.port, 8790);
	assert_int_equal(c->gateway.drain_timeout_ms, 10000);
	assert_int_equal(c->gateway.max_body_bytes, 1024 * 1024);
	assert_int_equal(c->gateway.max_connections, 1024);
	assert_null(c->gateway.auth_token);
	assert_true(c->gateway.watch_config);
	assert_int_equal(c->log.level, CONFIG_LOG_INFO);
	assert_int_equal(c->log.format, CONFIG_LOG_LOGFMT);
	assert_int_equal(c->store.backend, CONFIG_STORE_SQLITE);
	assert_string_equal(c->store.path, db);
	assert_int_equal(c->store.busy_timeout_ms, 5000);
	assert_int_equal(c->store.batch_max, 256);
	assert_int_equal(c->store.queue_max, 10000);
	assert_int_equal(c->http_client.timeout_ms, 30000);
	assert_int_equal(c->http_client.connect_timeout_ms, 10000);
	assert_int_equal(c->http_client.max_connections, 32);
	assert_int_equal(c->http_client.max_host_connections, 8);
	assert_int_equal(c->http_client.max_response_bytes, 8 * 1024 * 1024);
	assert_null(c->http_client.ca_file);
	assert_int_equal(c->n_agents, 1);
	assert_string_equal(c->agents[0].workspace, ws);
	assert_null(c->agents[0].model);
	assert_false(c->agents[0].is_default);
	/* The only agent is the default one even without "default: true". */
	assert_ptr_equal(config_default_agent(c), &c->agents[0]);
	assert_int_equal(c->n_secrets, 0);
	free(db);
	free(ws);
	config_unref(c);

	/* A null section ("gateway:" with nothing under it) is all defaults. */
	c = load_ok("gateway:\nlog: ~\n" AGENTS);
	assert_int_equal(c->gateway.port, 8790);
	assert_int_equal(c->log.level, CONFIG_LOG_INFO);
	config_unref(c);
}

static void test_no_default_agent_among_several(void **state)
{
	struct config *c = load_ok("agents:\n  - id: a\n  - id: b\n");

	(void)state;
	assert_null(config_default_agent(c));
	config_unref(c);
}

/* ---- one error of each kind ---- */

/* web.allow: an entry that is not an address or network names its line. */
static void test_web_allow_errors(void **state)
{
	(void)state;
	expect_errors(AGENTS "    web:\n      fetch: true\n      allow: [127.0.0.1, localhost]\n",
	              "t.yaml:5:26: agents[0].web.allow[1]: \"localhost\" is not an IP address or "
	              "network (hint: write an address (\"127.0.0.1\", \"::1\") or a network with "
	              "its prefix length (\"10.1.2.0/24\"), with no bits set past the prefix)\n");
	expect_errors(AGENTS "    web: {allow: [\"10.0.0.1/8\"]}\n",
	              "t.yaml:3:19: agents[0].web.allow[0]: \"10.0.0.1/8\" is not an IP address or "
	              "network (hint: write an address (\"127.0.0.1\", \"::1\") or a network with "
	              "its prefix length (\"10.1.2.0/24\"), with no bits set past the prefix)\n");
}

/* security.sandbox_uid and sandbox_gid: root and the gateway's own ids are
 * refused, with the line and the fix; the default is 65533; another id is
 * kept for the sandbox. */
static void test_sandbox_uid_errors(void **state)
{
	struct config *c;
	int st = 0;
	pid_t pid;

	(void)state;
	c = load_ok(AGENTS);
	assert_int_equal(c->security.sandbox_uid, 65533);
	assert_int_equal(c->security.sandbox_gid, 65533);
	config_unref(c);
	c = load_ok("security:\n  sandbox_uid: 61000\n  sandbox_gid: 61001\n" AGENTS);
	assert_int_equal(c->security.sandbox_uid, 61000);
	assert_int_equal(c->security.sandbox_gid, 61001);
	config_unref(c);
	expect_errors(
	    "security:\n  sandbox_uid: 0\n" AGENTS,
	    "t.yaml:2:16: security.sandbox_uid: 0 is root: the sandbox's uid must be "
	    "unprivileged, found \"0\" (hint: choose an unused, unprivileged uid of the sandbox's "
	    "own, such as 65533 (the default; Debian reserves it, and systemd does not "
	    "hand it out))\n");
	expect_errors("security:\n  sandbox_gid: 0\n" AGENTS,
	              "t.yaml:2:16: security.sandbox_gid: 0 is root's group: the sandbox's group "
	              "must be one of its own, found \"0\" (hint: choose an unused group of the "
	              "sandbox's own, "
	              "such as 65533 (the default))\n");
	/* the gateway's own uid, seen by a gateway that is not root */
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct config *cc = NULL;
		char *txt = NULL;
		const char *want =
		    "t.yaml:2:16: security.sandbox_uid: this is the gateway's own "
		    "uid: the sandbox's must be another, found \"4242\" (hint: choose an unused, "
		    "unprivileged uid of the sandbox's own, such as 65533 (the "
		    "default; Debian reserves it, and systemd does not hand it "
		    "out))\n";
		int rc;

		if (geteuid() == 0 && setresuid(4242, 4242, 4242) != 0)
			_exit(2);
		rc = load(getuid() == 4242 ? "security:\n  sandbox_uid: 4242\n" AGENTS
		                           : "security:\n  sandbox_uid: 0\n" AGENTS,
		          &cc, &txt);
		if (getuid() == 4242 && (rc != SB_ERR_CONFIG || strcmp(txt, want) != 0)) {
			fprintf(stderr, "got rc %d: %s", rc, txt);
			_exit(1);
		}
		free(txt);
		config_unref(cc);
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
}

/* max_concurrent_runs: a number set is the number; 0 is 16 per core, as
 * far as the open-file limit has room for. */
static void test_max_runs(void **state)
{
	struct config *c = load_ok(AGENTS "gateway: {max_concurrent_runs: 3}\n");
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	struct rlimit was, low;

	(void)state;
	assert_int_equal(config_max_runs(c), 3);
	config_unref(c);
	c = load_ok(AGENTS);
	assert_int_equal(c->gateway.max_concurrent_runs, 0);
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &was), 0);
	low = was;
	low.rlim_cur = 65536 < was.rlim_max ? 65536 : was.rlim_max;
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
	if (low.rlim_cur >= 256 + 8 * 16 * (rlim_t)cpus)
		assert_int_equal(config_max_runs(c), 16 * (size_t)cpus);
	low.rlim_cur = 300; /* room for (300 - 256) / 8 = 5 */
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
	assert_int_equal(config_max_runs(c), 5);
	low.rlim_cur = 200;
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
	assert_int_equal(config_max_runs(c), 4);
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &was), 0);
	config_unref(c);
}

/* web.search: the URL must be an http(s) base URL, the rest in range. */
static void test_web_search_errors(void **state)
{
	(void)state;
	expect_errors(AGENTS "    web:\n      search: {url: \"ftp://searx.lan\"}\n",
	              "t.yaml:4:21: agents[0].web.search.url: \"ftp://searx.lan\" is not a search "
	              "instance's URL: only http:// and https:// URLs can be fetched (hint: write "
	              "the instance's base URL, e.g. \"http://127.0.0.1:8888\")\n");
	expect_errors(AGENTS "    web:\n      search: {url: \"http://searx.lan/search?q=x\"}\n",
	              "t.yaml:4:21: agents[0].web.search.url: \"http://searx.lan/search?q=x\" has "
	              "a query; the gateway adds its own to the instance's /search (hint: write the "
	              "instance's base URL, e.g. \"http://127.0.0.1:8888\")\n");
	expect_errors(AGENTS "    web:\n      search:\n        url: http://searx.lan\n"
	                     "        max_results: 50\n        safesearch: high\n",
	              "t.yaml:6:22: agents[0].web.search.max_results: expected an integer from 1 "
	              "to 20, found \"50\"\n"
	              "t.yaml:7:21: agents[0].web.search.safesearch: expected one of off, moderate, "
	              "strict, found \"high\"\n");
}

/* An agent's mcp.servers: each mistake at its line, with the fix. */
static void test_mcp_errors(void **state)
{
	struct config *c;

	(void)state;
	c = load_ok(
	    AGENTS
	    "    mcp:\n      servers:\n"
	    "        - {name: files, command: node, args: [s.js], env: [\"A=1\"]}\n"
	    "        - {name: web, url: \"http://127.0.0.1:3001/mcp\", headers: [\"X-K: v\"]}\n"
	    "        - {name: old, url: \"http://127.0.0.1:3001/sse\"}\n");
	assert_int_equal(c->agents[0].mcp.n_servers, 3);
	assert_int_equal(mcp_server_transport(&c->agents[0].mcp.servers[0]), MCP_TRANSPORT_STDIO);
	assert_int_equal(mcp_server_transport(&c->agents[0].mcp.servers[1]), MCP_TRANSPORT_HTTP);
	assert_int_equal(mcp_server_transport(&c->agents[0].mcp.servers[2]), MCP_TRANSPORT_SSE);
	assert_int_equal(c->agents[0].mcp.servers[0].idle_timeout_ms, 600000);
	assert_int_equal(c->agents[0].mcp.servers[0].max_message, 8 << 20);
	config_unref(c);
	expect_errors(AGENTS "    mcp:\n      servers:\n        - {name: a__b, command: x}\n",
	              "t.yaml:5:18: agents[0].mcp.servers[0].name: must not hold \"__\" (it "
	              "separates the server from the tool in tool names), found \"a__b\"\n");
	expect_errors(AGENTS "    mcp:\n      servers:\n        - {name: Files, command: x}\n",
	              "t.yaml:5:18: agents[0].mcp.servers[0].name: must start with a lower-case "
	              "letter or a digit, found \"Files\"\n");
	expect_errors(
	    AGENTS "    mcp:\n      servers:\n        - {name: a}\n",
	    "t.yaml:5:11: agents[0].mcp.servers[0]: the server has neither a command nor "
	    "a url (hint: give `command` (and `args`) for a stdio server, or `url` for an "
	    "HTTP one)\n");
	expect_errors(AGENTS "    mcp:\n      servers:\n"
	                     "        - {name: a, command: x, url: \"http://h/mcp\"}\n",
	              "t.yaml:5:38: agents[0].mcp.servers[0].url: a server has either a command or "
	              "a url, not both (hint: keep `command` for a server the gateway starts, or "
	              "`url` for one it reaches)\n");
	expect_errors(AGENTS "    mcp:\n      servers:\n"
	                     "        - {name: a, command: x}\n        - {name: a, command: y}\n",
	              "t.yaml:6:18: agents[0].mcp.servers[1].name: \"a\" names servers[0] already "
	              "(hint: give each server of an agent its own name)\n");
	expect_errors(AGENTS "    mcp:\n      servers:\n"
	                     "        - {name: a, command: x, env: [\"1X=y\"]}\n",
	              "t.yaml:5:39: agents[0].mcp.servers[0].env[0]: not an environment entry "
	              "(hint: write NAME=value, NAME of letters, digits and '_')\n");
	expect_errors(AGENTS "    mcp:\n      servers:\n"
	                     "        - {name: a, command: x, read_only_paths: [opt/x]}\n",
	              "t.yaml:5:51: agents[0].mcp.servers[0].read_only_paths[0]: \"opt/x\" is not "
	              "an absolute path below / (hint: write an absolute path other than / (such "
	              "as /opt/mcp))\n");
	expect_errors(AGENTS "    mcp:\n      servers:\n"
	                     "        - {name: a, url: \"ftp://h/x\"}\n",
	              "t.yaml:5:26: agents[0].mcp.servers[0].url: only http:// and https:// URLs "
	              "can be fetched (hint: write an http:// or https:// URL, such as "
	              "http://127.0.0.1:3001/mcp)\n");
	expect_errors(AGENTS "    mcp:\n      servers:\n"
	                     "        - {name: a, url: \"http://h/mcp\", transport: stdio}\n",
	              "t.yaml:5:53: agents[0].mcp.servers[0].transport: transport stdio needs a "
	              "command (hint: give `command`, or choose `http` or `sse` for a url)\n");
	expect_errors(AGENTS
	              "    mcp:\n      servers:\n"
	              "        - {name: a, url: \"http://h/mcp\", headers: [\"no colon\"]}\n",
	              "t.yaml:5:52: agents[0].mcp.servers[0].headers[0]: not an HTTP header (hint: "
	              "write \"Name: value\" on one line)\n");
}

static void test_unknown_key_suggestion(void **state)
{
	(void)state;
	expect_errors("gateway:\n  prot: 8080\n" AGENTS,
	              "t.yaml:2:3: gateway.prot: unknown key (hint: did you mean \"port\"?)\n");
	expect_errors("gateway:\n  Max_Conections: 8\n" AGENTS,
	              "t.yaml:2:3: gateway.Max_Conections: unknown key "
	              "(hint: did you mean \"max_connections\"?)\n");
	expect_errors(AGENTS "    modle: x\n",
	              "t.yaml:3:5: agents[0].modle: unknown key (hint: did you mean \"model\"?)\n");
	expect_errors("gateway:\n  colour: red\n" AGENTS,
	              "t.yaml:2:3: gateway.colour: unknown key (hint: valid keys: bind, port, "
	              "drain_timeout, max_body, max_connections, max_connections_per_address, "
	              "header_timeout, body_timeout, max_concurrent_runs, auth_token, "
	              "watch_config, control, ui)\n");
	expect_errors("routes: []\n" AGENTS,
	              "t.yaml:1:1: routes: unknown key (hint: valid keys: gateway, log, store, "
	              "http_client, agents, providers, bindings, session, channels, openai_api, "
	              "cron, security)\n");
}

/* log.file_max: 10MiB by default, 0 for no file, else at least 4KiB. */
static void test_log_file_keys(void **state)
{
	struct config *c;

	(void)state;
	c = load_ok(AGENTS);
	assert_int_equal(c->log.file_max, 10LL << 20);
	assert_int_equal(c->log.file_keep, 5);
	config_unref(c);
	c = load_ok("log: {file_max: 0, file_keep: 0}\n" AGENTS);
	assert_int_equal(c->log.file_max, 0);
	assert_int_equal(c->log.file_keep, 0);
	config_unref(c);
	c = load_ok("log: {file_max: 4KiB}\n" AGENTS);
	assert_int_equal(c->log.file_max, 4096);
	config_unref(c);
	expect_errors("log: {file_max: 100}\n" AGENTS,
	              "t.yaml:1:17: log.file_max: 100 bytes is too small for a log file (hint: "
	              "use 0 for no log file, or at least 4KiB)\n");
}

static void test_wrong_types(void **state)
{
	(void)state;
	expect_errors("gateway: 5\n" AGENTS,
	              "t.yaml:1:10: gateway: expected a mapping, found \"5\"\n");
	expect_errors("gateway:\n  bind: [a, b]\n" AGENTS,
	              "t.yaml:2:9: gateway.bind: expected a string, found a sequence\n");
	expect_errors("gateway:\n  port: 80.5\n" AGENTS,
	              "t.yaml:2:9: gateway.port: expected an integer, found \"80.5\"\n");
	expect_errors("gateway:\n  port: {a: 1}\n" AGENTS,
	              "t.yaml:2:9: gateway.port: expected an integer, found a mapping\n");
	expect_errors("agents:\n  id: main\n",
	              "t.yaml:2:3: agents: expected a list of mappings, found a mapping "
	              "(hint: start each entry with \"- \")\n");
	expect_errors("agents:\n  - main\n",
	              "t.yaml:2:5: agents[0]: expected a mapping, found \"main\" (hint: run "
	              "\"switchboard init\", or add \"agents: [{id: main}]\")\n");
}

static void test_out_of_range(void **state)
{
	(void)state;
	expect_errors("gateway:\n  port: 70000\n" AGENTS,
	              "t.yaml:2:9: gateway.port: expected an integer from 1 to 65535, "
	              "found \"70000\"\n");
	expect_errors("gateway:\n  port: 99999999999999999999\n" AGENTS,
	              "t.yaml:2:9: gateway.port: expected an integer from 1 to 65535, "
	              "found \"99999999999999999999\"\n");
	expect_errors("gateway:\n  auth_token: short\n" AGENTS,
	              "t.yaml:2:15: gateway.auth_token: expected a string of at least 16 "
	              "characters, found 5 characters (hint: generate one with: openssl rand "
	              "-hex 32)\n");
	expect_errors("gateway:\n  bind: \"\"\n" AGENTS,
	              "t.yaml:2:9: gateway.bind: expected a non-empty string, found \"\"\n");
	/* A section check does not repeat an error in other words. */
	expect_errors("http_client:\n  max_connections: many\n" AGENTS,
	              "t.yaml:2:20: http_client.max_connections: expected an integer, found "
	              "\"many\"\n");
	expect_errors("gateway:\n  bind: 0.0.0.0\n  auth_token: short\n" AGENTS,
	              "t.yaml:3:15: gateway.auth_token: expected a string of at least 16 "
	              "characters, found 5 characters (hint: generate one with: openssl rand "
	              "-hex 32)\n");
	expect_errors(
	    "http_client:\n  max_connections: 4\n  max_host_connections: 5\n" AGENTS,
	    "t.yaml:3:25: http_client.max_host_connections: 5 is more than "
	    "http_client.max_connections (4) (hint: raise http_client.max_connections)\n");
}

static void test_missing_required(void **state)
{
	(void)state;
	expect_errors("log:\n  level: info\n",
	              "t.yaml:1:1: agents: missing required key (hint: run \"switchboard "
	              "init\", or add \"agents: [{id: main}]\")\n");
	expect_errors("agents: []\n", "t.yaml:1:9: agents: expected at least 1 entry, found 0 "
	                              "(hint: run \"switchboard init\", or add \"agents: [{id: "
	                              "main}]\")\n");
	expect_errors("agents:\n", "t.yaml:1:8: agents: required key has no value (hint: run "
	                           "\"switchboard init\", or add \"agents: [{id: main}]\")\n");
	expect_errors("agents:\n  - default: true\n",
	              "t.yaml:2:5: agents[0].id: missing required key (hint: use lower-case "
	              "letters, digits, \"_\" and \"-\", starting with a letter or digit)\n");
}

static void test_provider_checks(void **state)
{
	(void)state;
	expect_errors("agents:\n  - id: main\n    model: gpt-4o\n",
	              "t.yaml:3:12: agents[0].model: \"gpt-4o\" is not of the form provider/model "
	              "(hint: write it as provider/model, e.g. openai/gpt-4o-mini)\n");
	expect_errors("agents:\n  - id: main\n    model: openai/gpt-4o\n"
	              "    fallbacks: [openai/x]\n",
	              "t.yaml:3:12: agents[0].model: no provider \"openai\" is configured (hint: "
	              "add it under \"providers:\" or fix the name)\n"
	              "t.yaml:4:17: agents[0].fallbacks[0]: no provider \"openai\" is configured "
	              "(hint: add it under \"providers:\" or fix the name)\n");
	expect_errors("providers:\n  - {id: a, api: scripted}\n  - {id: a, api: openai-chat}\n"
	              "agents:\n  - id: main\n",
	              "t.yaml:2:5: providers[0]: a scripted provider needs \"script\" (hint: add "
	              "\"script: builtin:offline\" or a script file)\n"
	              "t.yaml:3:10: providers[1].id: duplicate provider id \"a\" (also "
	              "providers[0].id) (hint: give each provider its own id)\n");
	expect_errors("providers:\n  - {id: a, api: grpc}\nagents:\n  - id: main\n",
	              "t.yaml:2:18: providers[0].api: expected one of openai-chat, "
	              "anthropic-messages, scripted, found \"grpc\"\n");
	expect_errors("providers:\n  - {id: a, api: openai-chat, base_url: \"http://x/v1/\"}\n"
	              "agents:\n  - id: main\n",
	              "t.yaml:2:41: providers[0].base_url: remove the trailing \"/\", found "
	              "\"http://x/v1/\"\n");
}

static void test_bool_yaml11_rejected(void **state)
{
	struct config *c;

	(void)state;
	expect_errors("gateway:\n  watch_config: yes\n" AGENTS,
	              "t.yaml:2:17: gateway.watch_config: expected true or false, found \"yes\" "
	              "(hint: YAML 1.1 booleans (yes/no/on/off) are not accepted; write true or "
	              "false)\n");
	expect_errors("gateway:\n  watch_config: Off\n" AGENTS,
	              "t.yaml:2:17: gateway.watch_config: expected true or false, found \"Off\" "
	              "(hint: YAML 1.1 booleans (yes/no/on/off) are not accepted; write true or "
	              "false)\n");
	expect_errors("gateway:\n  watch_config: TRUE\n" AGENTS,
	              "t.yaml:2:17: gateway.watch_config: expected true or false, found \"TRUE\" "
	              "(hint: write true or false in lower case)\n");
	expect_errors("gateway:\n  watch_config: 1\n" AGENTS,
	              "t.yaml:2:17: gateway.watch_config: expected true or false, found \"1\"\n");
	c = load_ok("gateway:\n  watch_config: false\n" AGENTS);
	assert_false(c->gateway.watch_config);
	config_unref(c);
}

static void test_durations(void **state)
{
	static const struct {
		const char *text;
		int64_t ms;
	} ok[] = {{"250ms", 250}, {"30s", 30000}, {"5m", 300000},    {"1h", 3600000},
	          {"1500", 1500}, {"0", 0},       {"\"45s\"", 45000}};
	char yaml[256];

	(void)state;
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
		struct config *c;

		snprintf(yaml, sizeof yaml, "gateway:\n  drain_timeout: %s\n" AGENTS, ok[i].text);
		c = load_ok(yaml);
		assert_int_equal(c->gateway.drain_timeout_ms, ok[i].ms);
		config_unref(c);
	}
	expect_errors("gateway:\n  drain_timeout: 10 sec\n" AGENTS,
	              "t.yaml:2:18: gateway.drain_timeout: expected a duration such as 250ms, "
	              "30s, 5m, 2h or 1d, found \"10 sec\" (hint: units are ms, s, m, h and d, "
	              "with no space; a bare number is milliseconds)\n");
	expect_errors("gateway:\n  drain_timeout: 2h\n" AGENTS,
	              "t.yaml:2:18: gateway.drain_timeout: expected a duration from 0 to 1h, "
	              "found \"2h\"\n");
	expect_errors("http_client:\n  timeout: 50ms\n" AGENTS,
	              "t.yaml:2:12: http_client.timeout: expected a duration from 100ms to 1h, "
	              "found \"50ms\"\n");
	expect_errors("gateway:\n  drain_timeout: -5s\n" AGENTS,
	              "t.yaml:2:18: gateway.drain_timeout: expected a duration such as 250ms, "
	              "30s, 5m, 2h or 1d, found \"-5s\" (hint: units are ms, s, m, h and d, "
	              "with no space; a bare number is milliseconds)\n");
}

static void test_sizes(void **state)
{
	static const struct {
		const char *text;
		int64_t bytes;
	} ok[] = {{"1024", 1024},
	          {"64KiB", 65536},
	          {"10MiB", 10 * 1024 * 1024},
	          {"1GiB", 1024LL * 1024 * 1024},
	          {"2KB", 2000}};
	char yaml[256];

	(void)state;
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
		struct config *c;

		snprintf(yaml, sizeof yaml, "gateway:\n  max_body: %s\n" AGENTS, ok[i].text);
		c = load_ok(yaml);
		assert_int_equal(c->gateway.max_body_bytes, ok[i].bytes);
		config_unref(c);
	}
	expect_errors("gateway:\n  max_body: 10 MB\n" AGENTS,
	              "t.yaml:2:13: gateway.max_body: expected a size such as 512, 64KiB, 10MiB "
	              "or 1GiB, found \"10 MB\" (hint: units are B, KiB, MiB, GiB (powers of "
	              "1024) and KB, MB, with no space; a bare number is bytes)\n");
	expect_errors("gateway:\n  max_body: 512\n" AGENTS,
	              "t.yaml:2:13: gateway.max_body: expected a size from 1KiB to 1GiB, found "
	              "\"512\"\n");
	expect_errors("gateway:\n  max_body: 2GiB\n" AGENTS,
	              "t.yaml:2:13: gateway.max_body: expected a size from 1KiB to 1GiB, found "
	              "\"2GiB\"\n");
}

static void test_enum(void **state)
{
	struct config *c;

	(void)state;
	expect_errors("log:\n  level: verbose\n" AGENTS,
	              "t.yaml:2:10: log.level: expected one of debug, info, warn, error, found "
	              "\"verbose\"\n");
	expect_errors("log:\n  level: INFO\n" AGENTS,
	              "t.yaml:2:10: log.level: expected one of debug, info, warn, error, found "
	              "\"INFO\" (hint: did you mean \"info\"?)\n");
	expect_errors("store:\n  backend: postgres\n" AGENTS,
	              "t.yaml:2:12: store.backend: expected one of sqlite, found \"postgres\"\n");
	c = load_ok("log:\n  level: warn\n  format: logfmt\n" AGENTS);
	assert_int_equal(c->log.level, CONFIG_LOG_WARN);
	config_unref(c);
}

static void test_duplicate_key(void **state)
{
	(void)state;
	expect_errors("gateway:\n  port: 1\n  port: 2\n" AGENTS,
	              "t.yaml:3:3: gateway.port: duplicate key (hint: the first is at line 2; "
	              "keep one)\n");
}

static void test_several_errors_together(void **state)
{
	static const char yaml[] = "gateway:\n"
	                           "  prot: 8080\n"
	                           "  port: 0\n"
	                           "  watch_config: yes\n"
	                           "log:\n"
	                           "  level: verbose\n"
	                           "agents:\n"
	                           "  - id: Main\n"
	                           "  - id: main2\n"
	                           "    default: maybe\n"
	                           "  - workspace: x\n";

	(void)state;
	expect_errors(yaml,
	              "t.yaml:2:3: gateway.prot: unknown key (hint: did you mean \"port\"?)\n"
	              "t.yaml:3:9: gateway.port: expected an integer from 1 to 65535, found "
	              "\"0\"\n"
	              "t.yaml:4:17: gateway.watch_config: expected true or false, found \"yes\" "
	              "(hint: YAML 1.1 booleans (yes/no/on/off) are not accepted; write true or "
	              "false)\n"
	              "t.yaml:6:10: log.level: expected one of debug, info, warn, error, found "
	              "\"verbose\"\n"
	              "t.yaml:8:9: agents[0].id: must match [a-z0-9][a-z0-9_-]{0,63}, found "
	              "\"Main\" (hint: use lower-case letters, digits, \"_\" and \"-\", starting "
	              "with a letter or digit)\n"
	              "t.yaml:10:14: agents[1].default: expected true or false, found \"maybe\"\n"
	              "t.yaml:11:5: agents[2].id: missing required key (hint: use lower-case "
	              "letters, digits, \"_\" and \"-\", starting with a letter or digit)\n");
}

static void test_agent_ids(void **state)
{
	static const char dup[] = "agents:\n"
	                          "  - id: main\n"
	                          "    default: true\n"
	                          "  - id: other\n"
	                          "  - id: main\n"
	                          "    default: true\n";
	struct config *c;
	char yaml[256];

	(void)state;
	expect_errors(dup, "t.yaml:5:9: agents[2].id: duplicate agent id \"main\" (also "
	                   "agents[0].id) (hint: give each agent its own id)\n"
	                   "t.yaml:6:14: agents[2].default: more than one default agent "
	                   "(agents[0] is the default already) (hint: keep \"default: true\" on "
	                   "one agent only)\n");
	expect_errors("agents:\n  - id: -x\n",
	              "t.yaml:2:9: agents[0].id: must match [a-z0-9][a-z0-9_-]{0,63}, found "
	              "\"-x\" (hint: use lower-case letters, digits, \"_\" and \"-\", starting "
	              "with a letter or digit)\n");
	expect_errors("agents:\n  - id: a.b\n",
	              "t.yaml:2:9: agents[0].id: must match [a-z0-9][a-z0-9_-]{0,63}, found "
	              "\"a.b\" (hint: use lower-case letters, digits, \"_\" and \"-\", starting "
	              "with a letter or digit)\n");
	/* 64 characters is the longest id; 65 is one too many. */
	snprintf(yaml, sizeof yaml, "agents:\n  - id: 0%s\n",
	         "123456789_123456789_123456789_123456789_123456789_123456789-123");
	c = load_ok(yaml);
	assert_int_equal(strlen(c->agents[0].id), 64);
	config_unref(c);
	snprintf(yaml, sizeof yaml, "agents:\n  - id: 0%s\n",
	         "123456789_123456789_123456789_123456789_123456789_123456789-1234");
	expect_errors(yaml, "t.yaml:2:9: agents[0].id: expected a string of at most 64 "
	                    "characters, found 65 characters (hint: use lower-case letters, "
	                    "digits, \"_\" and \"-\", starting with a letter or digit)\n");
}

static void test_bind_requires_token(void **state)
{
	static const char *const loopback[] = {"127.0.0.1", "127.1.2.3", "::1",
	                                       "\"[::1]\"", "localhost", "::ffff:127.0.0.1"};
	char yaml[256];
	struct config *c;

	(void)state;
	expect_errors("gateway:\n  bind: 0.0.0.0\n" AGENTS,
	              "t.yaml:2:9: gateway.bind: binding the non-loopback address \"0.0.0.0\" "
	              "requires gateway.auth_token (hint: set gateway.auth_token (e.g. "
	              "auth_token: ${file:secrets/gateway-token}), or bind 127.0.0.1)\n");
	expect_errors("gateway:\n  bind: \"::\"\n" AGENTS,
	              "t.yaml:2:9: gateway.bind: binding the non-loopback address \"::\" "
	              "requires gateway.auth_token (hint: set gateway.auth_token (e.g. "
	              "auth_token: ${file:secrets/gateway-token}), or bind 127.0.0.1)\n");
	for (size_t i = 0; i < sizeof loopback / sizeof loopback[0]; i++) {
		snprintf(yaml, sizeof yaml, "gateway:\n  bind: %s\n" AGENTS, loopback[i]);
		c = load_ok(yaml);
		config_unref(c);
	}
	c = load_ok(
	    "gateway:\n  bind: 10.0.0.5\n  auth_token: abcdefghijklmnopqrstuvwxyz\n" AGENTS);
	assert_string_equal(c->gateway.bind, "10.0.0.5");
	config_unref(c);
}

/* ---- interpolation ---- */

static void test_env_interpolation(void **state)
{
	struct config *c;

	(void)state;
	assert_int_equal(setenv("SB_TEST_PORT", "9100", 1), 0);
	assert_int_equal(setenv("SB_TEST_HOST", "example", 1), 0);
	assert_int_equal(setenv("SB_TEST_EMPTY", "", 1), 0);
	assert_int_equal(unsetenv("SB_TEST_UNSET"), 0);

	c = load_ok("gateway:\n"
	            "  port: ${SB_TEST_PORT}\n"
	            "providers: [{id: example, api: scripted, script: builtin:offline}]\n"
	            "agents:\n"
	            "  - id: main\n"
	            "    model: \"${SB_TEST_HOST}/m-${SB_TEST_PORT}${SB_TEST_EMPTY}\"\n"
	            "    workspace: /w/$${literal}/$x/$\n");
	assert_int_equal(c->gateway.port, 9100);
	assert_string_equal(c->agents[0].model, "example/m-9100");
	assert_string_equal(c->agents[0].workspace, "/w/${literal}/$x/$");
	config_unref(c);

	expect_errors(AGENTS "    model: a-${SB_TEST_UNSET}\n",
	              "t.yaml:3:12: agents[0].model: environment variable SB_TEST_UNSET is not "
	              "set (hint: export SB_TEST_UNSET in the gateway's environment, or write "
	              "\"$${SB_TEST_UNSET}\" for the literal text)\n");
	/* Every reference is checked, and the rest of the file still is. */
	expect_errors("gateway:\n"
	              "  bind: ${SB_TEST_UNSET}${SB_TEST_UNSET2}\n"
	              "  port: nope\n" AGENTS,
	              "t.yaml:2:9: gateway.bind: environment variable SB_TEST_UNSET is not set "
	              "(hint: export SB_TEST_UNSET in the gateway's environment, or write "
	              "\"$${SB_TEST_UNSET}\" for the literal text)\n"
	              "t.yaml:2:9: gateway.bind: environment variable SB_TEST_UNSET2 is not set "
	              "(hint: export SB_TEST_UNSET2 in the gateway's environment, or write "
	              "\"$${SB_TEST_UNSET2}\" for the literal text)\n"
	              "t.yaml:3:9: gateway.port: expected an integer, found \"nope\"\n");
	expect_errors(AGENTS "    model: ${SB_TEST_HOST\n",
	              "t.yaml:3:12: agents[0].model: unterminated \"${\" in value (hint: close "
	              "it with \"}\", or write \"$${\" for a literal \"${\")\n");
	expect_errors(AGENTS "    model: ${A-B}\n",
	              "t.yaml:3:12: agents[0].model: invalid variable name \"A-B\" (hint: "
	              "variable names are letters, digits and \"_\"; write \"$${\" for a literal "
	              "\"${\")\n");
	/* The value as written is shown, not what the variable holds. */
	expect_errors("gateway:\n  port: ${SB_TEST_HOST}\n" AGENTS,
	              "t.yaml:2:9: gateway.port: expected an integer, found "
	              "\"${SB_TEST_HOST}\"\n");
	/* Keys are not interpolated. */
	expect_errors(
	    "gateway:\n  ${SB_TEST_HOST}: 1\n" AGENTS,
	    "t.yaml:2:3: gateway.${SB_TEST_HOST}: unknown key (hint: valid keys: bind, "
	    "port, drain_timeout, max_body, max_connections, max_connections_per_address, "
	    "header_timeout, body_timeout, max_concurrent_runs, auth_token, "
	    "watch_config, control, ui)\n");
	unsetenv("SB_TEST_PORT");
	unsetenv("SB_TEST_HOST");
	unsetenv("SB_TEST_EMPTY");
}

static void test_file_secret(void **state)
{
	char *dir = home_path("secrets"), *tok = home_path("secrets/token");
	char *expected;
	struct config *c;

	(void)state;
	assert_true(mkdir(dir, 0700) == 0 || errno == EEXIST);
	write_file(tok, "0123456789abcdef-secret\n", 0600);

	c = load_ok("gateway:\n"
	            "  bind: 0.0.0.0\n"
	            "  auth_token: ${file:secrets/token}\n" AGENTS);
	assert_string_equal(c->gateway.auth_token, "0123456789abcdef-secret");
	assert_int_equal(c->n_secrets, 1);
	assert_string_equal(c->secrets[0], "0123456789abcdef-secret");
	config_unref(c);

	/* An absolute path works too. */
	expected = fmt("gateway:\n  auth_token: ${file:%s}\n" AGENTS, tok);
	c = load_ok(expected);
	assert_string_equal(c->gateway.auth_token, "0123456789abcdef-secret");
	config_unref(c);
	free(expected);

	assert_int_equal(chmod(tok, 0644), 0);
	expected = fmt("t.yaml:2:15: gateway.auth_token: secret file %s may be read by group or "
	               "others (mode 0644) (hint: chmod 600 %s)\n",
	               tok, tok);
	expect_errors("gateway:\n  auth_token: ${file:secrets/token}\n" AGENTS, expected);
	free(expected);

	expected = fmt("t.yaml:2:15: gateway.auth_token: secret file %s/secrets/missing does "
	               "not exist (hint: relative paths start at %s)\n",
	               home, home);
	expect_errors("gateway:\n  auth_token: ${file:secrets/missing}\n" AGENTS, expected);
	free(expected);

	assert_int_equal(unlink(tok), 0);
	free(tok);
	free(dir);
}

/* ---- the document itself ---- */

static void test_yaml_syntax_error(void **state)
{
	(void)state;
	expect_errors("gateway:\n  port: 1\n bind: x\n" AGENTS,
	              "t.yaml:3:2: invalid YAML: did not find expected key while parsing a "
	              "block mapping (line 1, column 1)\n");
	expect_errors("gateway: [1, 2\n",
	              "t.yaml:2:1: invalid YAML: did not find expected ',' or ']' while parsing "
	              "a flow sequence (line 1, column 10)\n");
	expect_errors("gateway:\n  port: \"8790\n",
	              "t.yaml:3:1: invalid YAML: found unexpected end of stream while scanning a "
	              "quoted scalar (line 2, column 9)\n");
}

static void test_top_level_not_mapping(void **state)
{
	(void)state;
	expect_errors("- id: main\n",
	              "t.yaml:1:1: expected a mapping at the top level, found a sequence (hint: "
	              "the file holds keys such as \"gateway:\" and \"agents:\")\n");
	expect_errors("hello\n",
	              "t.yaml:1:1: expected a mapping at the top level, found \"hello\" (hint: "
	              "the file holds keys such as \"gateway:\" and \"agents:\")\n");
	expect_errors("# nothing but a comment\n",
	              "t.yaml:1:1: expected a mapping at the top level, found an empty document "
	              "(hint: the file holds keys such as \"gateway:\" and \"agents:\")\n");
	expect_errors("",
	              "t.yaml:1:1: expected a mapping at the top level, found an empty document "
	              "(hint: the file holds keys such as \"gateway:\" and \"agents:\")\n");
}

static void test_anchors_rejected(void **state)
{
	(void)state;
	expect_errors("gateway: &gw\n  port: 1\nagents:\n  - id: *gw\n",
	              "t.yaml:1:10: gateway: YAML anchors (&gw) are not supported (hint: repeat "
	              "the value instead; use ${ENV} to share a secret)\n"
	              "t.yaml:4:9: agents[0].id: YAML aliases (*gw) are not supported (hint: "
	              "repeat the value instead; use ${ENV} to share a secret)\n");
	expect_errors("gateway:\n  bind: &b 127.0.0.1\n" AGENTS,
	              "t.yaml:2:9: gateway.bind: YAML anchors (&b) are not supported (hint: "
	              "repeat the value instead; use ${ENV} to share a secret)\n");
}

static void test_one_document_only(void **state)
{
	(void)state;
	expect_errors(AGENTS "---\nlog: {}\n",
	              "t.yaml:3:1: only one YAML document is allowed (hint: remove the \"---\" "
	              "line; the file holds one document)\n");
}

static void test_deep_nesting_bounded(void **state)
{
	char yaml[512], *want;
	size_t n = 0;
	FILE *m;

	(void)state;
	n += (size_t)snprintf(yaml, sizeof yaml, "gateway: ");
	for (int i = 0; i < 100; i++)
		yaml[n++] = '[';
	yaml[n] = '\0';
	/* The top-level mapping is level 1; the 64th "[" (column 73) is level 65. */
	m = open_memstream(&want, &n);
	assert_non_null(m);
	fputs("t.yaml:1:73: gateway", m);
	for (int i = 0; i < 63; i++)
		fputs("[0]", m);
	fputs(": nesting is deeper than 64 levels\n", m);
	assert_int_equal(fclose(m), 0);
	expect_errors(yaml, want);
	free(want);
}

static void test_key_must_be_string(void **state)
{
	(void)state;
	expect_errors("? [a, b]\n: 1\n" AGENTS,
	              "t.yaml:1:3: a key must be a string, found a sequence (hint: write keys as "
	              "plain words)\n");
}

static void test_load_missing_file(void **state)
{
	struct cfg_errors e;
	struct config *c = (struct config *)&c;
	char *txt;

	(void)state;
	cfg_errors_init(&e);
	assert_int_equal(config_load("/nonexistent/sb.yaml", home, &c, &e), SB_ERR_IO);
	assert_null(c);
	txt = errors_text(&e);
	assert_string_equal(txt, "/nonexistent/sb.yaml: cannot open the configuration: No such "
	                         "file or directory (hint: run \"switchboard init\" to create "
	                         "it, or pass --config FILE)\n");
	free(txt);
	cfg_errors_free(&e);
	cfg_errors_free(&e); /* a second free is harmless */
}

/* ---- the snapshot ---- */

struct paths {
	char v[8][64];
	int n;
};

static void collect_path(void *ud, const char *path)
{
	struct paths *p = ud;

	assert_true(p->n < 8);
	snprintf(p->v[p->n++], sizeof p->v[0], "%s", path);
}

static void test_restart_changes(void **state)
{
	struct config *a = load_ok("gateway:\n  port: 8790\nlog:\n  level: info\n" AGENTS);
	struct config *b = load_ok("gateway:\n  port: 9000\n  max_connections: 5\nlog:\n  level: "
	                           "debug\nstore:\n  path: other.db\nagents:\n  - id: main\n"
	                           "    model: x/y\nproviders: [{id: x, api: scripted, script: "
	                           "builtin:offline}]\n");
	struct config *same = load_ok("gateway:\n  port: 8790\n" AGENTS);
	struct paths p = {0};

	(void)state;
	assert_int_equal(config_restart_changes(a, b, collect_path, &p), 2);
	assert_int_equal(p.n, 2);
	assert_string_equal(p.v[0], "gateway.port");
	assert_string_equal(p.v[1], "store.path");
	assert_int_equal(config_restart_changes(a, same, NULL, NULL), 0);
	assert_int_equal(config_restart_changes(b, b, NULL, NULL), 0);
	config_unref(a);
	config_unref(b);
	config_unref(same);
}

/* A schema with restart keys inside a list, a restart list and a string list. */
struct t_item {
	char *name;
	int64_t n;
};
struct t_root {
	struct t_item *items;
	size_t n_items;
	char **tags;
	size_t n_tags;
	char **keys;
	size_t n_keys;
};
static const struct cfg_key t_item_keys[] = {
    {.name = "name",
     .type = CFG_STRING,
     .offset = offsetof(struct t_item, name),
     .flags = CFG_REQUIRED,
     .doc = "name"},
    {.name = "n",
     .type = CFG_INT,
     .offset = offsetof(struct t_item, n),
     .def = "1",
     .flags = CFG_RESTART,
     .doc = "n"},
};
static const struct cfg_section t_item_section = {
    .name = "item", .size = sizeof(struct t_item), .keys = t_item_keys, .nkeys = 2};
static const struct cfg_key t_root_keys[] = {
    {.name = "items",
     .type = CFG_LIST,
     .offset = offsetof(struct t_root, items),
     .count_offset = offsetof(struct t_root, n_items),
     .section = &t_item_section,
     .doc = "items"},
    {.name = "tags",
     .type = CFG_STRING_LIST,
     .offset = offsetof(struct t_root, tags),
     .count_offset = offsetof(struct t_root, n_tags),
     .flags = CFG_RESTART,
     .doc = "tags"},
    {.name = "keys",
     .type = CFG_STRING_LIST,
     .offset = offsetof(struct t_root, keys),
     .count_offset = offsetof(struct t_root, n_keys),
     .flags = CFG_SECRET,
     .doc = "keys"},
};
static const struct cfg_section t_root_section = {
    .name = "t", .size = sizeof(struct t_root), .keys = t_root_keys, .nkeys = 3};

static int t_apply(const char *yaml, struct t_root *obj, char **errtext)
{
	struct cfg_errors e;
	struct cfg_doc *doc = NULL;
	int rc;

	cfg_errors_init(&e);
	memset(obj, 0, sizeof *obj);
	rc = cfg_doc_parse(yaml, strlen(yaml), "t.yaml", home, &doc, &e);
	if (doc) {
		int arc = cfg_apply(doc, &t_root_section, obj, &e);

		if (rc == SB_OK)
			rc = arc;
	}
	cfg_doc_free(doc);
	*errtext = errors_text(&e);
	cfg_errors_free(&e);
	return rc;
}

static void count_secret(void *ud, const char *value)
{
	(void)value;
	(*(int *)ud)++;
}

static void test_generic_lists(void **state)
{
	struct t_root a, b;
	struct paths p = {0};
	char *txt;
	int n = 0;

	(void)state;
	assert_int_equal(t_apply("items: [{name: x}, {name: y, n: 2}]\ntags: [a, b]\n"
	                         "keys: [k1, k2]\n",
	                         &a, &txt),
	                 SB_OK);
	assert_string_equal(txt, "");
	free(txt);
	assert_int_equal(a.n_items, 2);
	assert_int_equal(a.items[0].n, 1);
	assert_int_equal(a.items[1].n, 2);
	assert_int_equal(a.n_tags, 2);
	assert_string_equal(a.tags[1], "b");
	cfg_each_secret(&t_root_section, &a, count_secret, &n);
	assert_int_equal(n, 2);

	assert_int_equal(t_apply("items: [{name: x, n: 5}, {name: y, n: 2}, {name: z}]\n"
	                         "tags: [a]\n",
	                         &b, &txt),
	                 SB_OK);
	free(txt);
	assert_int_equal(cfg_restart_changes(&t_root_section, &a, &b, collect_path, &p), 2);
	assert_string_equal(p.v[0], "items[0].n");
	assert_string_equal(p.v[1], "tags");
	cfg_release(&t_root_section, &b);
	cfg_release(&t_root_section, &b); /* a second release is harmless */

	assert_int_equal(t_apply("tags: [a, [b], ~]\nkeys: [{x: 1}]\nitems: [{}]\n", &b, &txt),
	                 SB_ERR_CONFIG);
	assert_string_equal(txt, "t.yaml:1:11: tags[1]: expected a string, found a sequence\n"
	                         "t.yaml:1:16: tags[2]: expected a string, found null\n"
	                         "t.yaml:2:8: keys[0]: expected a string, found a mapping\n"
	                         "t.yaml:3:9: items[0].name: missing required key\n");
	free(txt);
	cfg_release(&t_root_section, &b);
	cfg_release(&t_root_section, &a);
}

static void test_secrets_collected(void **state)
{
	struct config *c = load_ok("gateway:\n  auth_token: \"s3cret-token-of-20ch\"\n" AGENTS);

	(void)state;
	assert_int_equal(c->n_secrets, 1);
	assert_string_equal(c->secrets[0], "s3cret-token-of-20ch");
	config_unref(c);
}

static void *ref_worker(void *arg)
{
	struct config *c = arg;

	for (int i = 0; i < 10000; i++)
		config_unref(config_ref(c));
	return NULL;
}

static void test_refcount(void **state)
{
	struct config *c = load_ok(AGENTS);
	pthread_t t[4];

	(void)state;
	assert_int_equal(c->refs, 1);
	assert_ptr_equal(config_ref(c), c);
	assert_int_equal(c->refs, 2);
	for (int i = 0; i < 4; i++)
		assert_int_equal(pthread_create(&t[i], NULL, ref_worker, c), 0);
	for (int i = 0; i < 4; i++)
		assert_int_equal(pthread_join(t[i], NULL), 0);
	assert_int_equal(c->refs, 2);
	config_unref(c);
	assert_int_equal(c->refs, 1);
	config_unref(c); /* freed; LeakSanitizer checks nothing is left */
	config_unref(NULL);
	assert_null(config_ref(NULL));
}

static void test_digest(void **state)
{
	static const char text[] = "# digest\n" AGENTS;
	unsigned char want[32];
	struct config *a = load_ok(text), *b = load_ok(text), *c = load_ok(AGENTS);

	(void)state;
	crypto_generichash(want, sizeof want, (const unsigned char *)text, strlen(text), NULL, 0);
	assert_memory_equal(a->digest, want, 32);
	assert_memory_equal(a->digest, b->digest, 32);
	assert_memory_not_equal(a->digest, c->digest, 32);
	config_unref(a);
	config_unref(b);
	config_unref(c);
}

static void test_write_default_and_reload(void **state)
{
	char *path = home_path("switchboard.yaml"), *ws = home_path("workspaces/main");
	struct cfg_errors e;
	struct config *c = NULL;
	struct stat st;
	unsigned char want[32];
	char buf[8192];
	ssize_t n;
	int fd;

	(void)state;
	assert_int_equal(config_write_default(path, 0), SB_OK);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	assert_int_equal(config_write_default(path, 0), SB_ERR_EXISTS);

	cfg_errors_init(&e);
	assert_int_equal(config_load(path, home, &c, &e), SB_OK);
	assert_int_equal(e.n, 0);
	assert_string_equal(c->path, path);
	assert_int_equal(c->gateway.port, 8790);
	assert_string_equal(c->gateway.bind, "127.0.0.1");
	assert_int_equal(c->n_agents, 1);
	assert_string_equal(c->agents[0].id, "main");
	assert_true(c->agents[0].is_default);
	assert_string_equal(c->agents[0].workspace, ws);
	assert_ptr_equal(config_default_agent(c), &c->agents[0]);

	/* The digest is of the file's bytes; the file documents secrets. */
	fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	n = read(fd, buf, sizeof buf - 1);
	assert_true(n > 0);
	buf[n] = '\0';
	close(fd);
	crypto_generichash(want, sizeof want, (const unsigned char *)buf, (size_t)n, NULL, 0);
	assert_memory_equal(c->digest, want, 32);
	assert_non_null(strstr(buf, "${file:secrets/"));
	assert_non_null(strstr(buf, "${SWITCHBOARD_TOKEN}"));
	config_unref(c);
	cfg_errors_free(&e);

	assert_int_equal(config_write_default("/nonexistent-dir/sb.yaml", 0), SB_ERR_IO);
	assert_int_equal(unlink(path), 0);
	/* Another port for a home whose default one is taken. */
	assert_int_equal(config_write_default(path, 8791), SB_OK);
	cfg_errors_init(&e);
	assert_int_equal(config_load(path, home, &c, &e), SB_OK);
	assert_int_equal(c->gateway.port, 8791);
	config_unref(c);
	cfg_errors_free(&e);
	assert_int_equal(unlink(path), 0);
	free(path);
	free(ws);
}

/* ---- the tables ---- */

static void assert_schema_ok(const struct cfg_section *s)
{
	struct cfg_errors e;
	char *txt;
	int rc;

	cfg_errors_init(&e);
	rc = cfg_check_schema(s, &e);
	txt = errors_text(&e);
	if (rc != SB_OK)
		fail_msg("schema %s:\n%s", s->name, txt);
	assert_string_equal(txt, "");
	free(txt);
	cfg_errors_free(&e);
}

struct t_bad {
	int64_t n;
	int e;
	char *s;
	int64_t d;
};
static const char *const t_bad_choices[] = {"a", "b", NULL};
static const struct cfg_key t_bad_keys[] = {
    {.name = "n",
     .type = CFG_INT,
     .offset = offsetof(struct t_bad, n),
     .min = 1,
     .max = 10,
     .def = "20",
     .doc = "n"},
    {.name = "e",
     .type = CFG_ENUM,
     .offset = offsetof(struct t_bad, e),
     .choices = t_bad_choices,
     .def = "c",
     .doc = "e"},
    {.name = "s",
     .type = CFG_STRING,
     .offset = offsetof(struct t_bad, s),
     .def = "x",
     .flags = CFG_REQUIRED,
     .doc = "s"},
    {.name = "d", .type = CFG_DURATION, .offset = offsetof(struct t_bad, d), .def = "5 s"},
};
static const struct cfg_section t_bad_section = {
    .name = "bad", .size = sizeof(struct t_bad), .keys = t_bad_keys, .nkeys = 4};

static void test_schema_tables_sane(void **state)
{
	struct cfg_errors e;
	char *txt;

	(void)state;
	assert_schema_ok(&config_root_section);
	assert_schema_ok(&agent_config_section);
	assert_schema_ok(&t_root_section);

	/* ... and the lint does find a broken table. */
	cfg_errors_init(&e);
	assert_int_equal(cfg_check_schema(&t_bad_section, &e), SB_ERR_CONFIG);
	txt = errors_text(&e);
	assert_string_equal(txt,
	                    "<schema>: n: default: expected an integer from 1 to 10, found 20\n"
	                    "<schema>: e: default: expected one of a, b, found c\n"
	                    "<schema>: s: a required key has a default\n"
	                    "<schema>: d: no documentation\n"
	                    "<schema>: d: default: expected a duration such as 250ms, 30s, "
	                    "5m, 2h or 1d, found 5 s\n");
	free(txt);
	cfg_errors_free(&e);
}

/* ---- docs/configuration.md ---- */

#define DOCS_BEGIN "<!-- BEGIN GENERATED -->\n"
#define DOCS_END "<!-- END GENERATED -->\n"

static char *read_all(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *s = NULL;
	size_t cap = 0, n = 0;

	if (!f)
		return NULL;
	for (;;) {
		if (n + 4096 + 1 > cap) {
			cap = cap ? cap * 2 : 65536;
			s = realloc(s, cap);
			assert_non_null(s);
		}
		size_t got = fread(s + n, 1, cap - n - 1, f);

		n += got;
		if (got == 0)
			break;
	}
	fclose(f);
	s[n] = '\0';
	*len = n;
	return s;
}

static void test_docs_reference_current(void **state)
{
	const char *path = SB_SOURCE_DIR "/docs/configuration.md";
	const char *update = getenv("SB_UPDATE_DOCS");
	char *doc, *gen = NULL, *begin, *end;
	size_t len = 0, glen = 0;
	FILE *m;

	(void)state;
	m = open_memstream(&gen, &glen);
	assert_non_null(m);
	config_print_reference(m);
	assert_int_equal(fclose(m), 0);
	assert_true(glen > 1000);

	doc = read_all(path, &len);
	if (!doc)
		fail_msg("cannot read %s", path);
	begin = strstr(doc, DOCS_BEGIN);
	end = begin ? strstr(begin, DOCS_END) : NULL;
	if (!begin || !end)
		fail_msg("%s lacks the marker lines %s and %s", path, DOCS_BEGIN, DOCS_END);
	begin += strlen(DOCS_BEGIN);
	if ((size_t)(end - begin) == glen && memcmp(begin, gen, glen) == 0) {
		free(doc);
		free(gen);
		return;
	}
	if (update && strcmp(update, "1") == 0) {
		FILE *f = fopen(path, "wb");

		assert_non_null(f);
		assert_int_equal(fwrite(doc, 1, (size_t)(begin - doc), f), (size_t)(begin - doc));
		assert_int_equal(fwrite(gen, 1, glen, f), glen);
		assert_int_equal(fputs(end, f) >= 0, 1);
		assert_int_equal(fclose(f), 0);
		print_message("rewrote the generated part of %s\n", path);
		free(doc);
		free(gen);
		return;
	}
	free(doc);
	free(gen);
	fail_msg("%s is out of date with the schema tables. Regenerate the part between the "
	         "markers with `switchboard config schema > /tmp/ref.md` and paste it in, or run "
	         "`SB_UPDATE_DOCS=1 ./test_config` from the build directory.",
	         path);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_sandbox_uid_errors),
	    cmocka_unit_test(test_valid_full),
	    cmocka_unit_test(test_defaults_filled),
	    cmocka_unit_test(test_no_default_agent_among_several),
	    cmocka_unit_test(test_unknown_key_suggestion),
	    cmocka_unit_test(test_log_file_keys),
	    cmocka_unit_test(test_web_allow_errors),
	    cmocka_unit_test(test_web_search_errors),
	    cmocka_unit_test(test_max_runs),
	    cmocka_unit_test(test_mcp_errors),
	    cmocka_unit_test(test_wrong_types),
	    cmocka_unit_test(test_out_of_range),
	    cmocka_unit_test(test_missing_required),
	    cmocka_unit_test(test_bool_yaml11_rejected),
	    cmocka_unit_test(test_provider_checks),
	    cmocka_unit_test(test_durations),
	    cmocka_unit_test(test_sizes),
	    cmocka_unit_test(test_enum),
	    cmocka_unit_test(test_duplicate_key),
	    cmocka_unit_test(test_several_errors_together),
	    cmocka_unit_test(test_agent_ids),
	    cmocka_unit_test(test_bind_requires_token),
	    cmocka_unit_test(test_env_interpolation),
	    cmocka_unit_test(test_file_secret),
	    cmocka_unit_test(test_yaml_syntax_error),
	    cmocka_unit_test(test_top_level_not_mapping),
	    cmocka_unit_test(test_anchors_rejected),
	    cmocka_unit_test(test_one_document_only),
	    cmocka_unit_test(test_deep_nesting_bounded),
	    cmocka_unit_test(test_key_must_be_string),
	    cmocka_unit_test(test_load_missing_file),
	    cmocka_unit_test(test_restart_changes),
	    cmocka_unit_test(test_generic_lists),
	    cmocka_unit_test(test_secrets_collected),
	    cmocka_unit_test(test_refcount),
	    cmocka_unit_test(test_digest),
	    cmocka_unit_test(test_write_default_and_reload),
	    cmocka_unit_test(test_schema_tables_sane),
	    cmocka_unit_test(test_docs_reference_current),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
