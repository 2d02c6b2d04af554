/*
 * test_permissions.c - the permission gates (agents/safety/permissions.c), the
 * approvals engine (agents/safety/approvals.c) and the executor that runs them
 * before every tool call.
 *
 * Covered: the shell parser (pipelines, lists, subshells, substitutions,
 * sh -c, wrappers, redirections; what it refuses to guess); gate 1 (rm -rf
 * /, sudo, mkfs, dd to a device, writes to .git, the gateway's home, the
 * operator's additions) winning over every rule; gate 2 (profiles, owner
 * vs others, DM vs group, channel and sender matches, deny wins, command
 * classes and rules, path rules on resolved paths with symlink and ".."
 * escapes, the rewritten input); gate 3 through the executor (no approver,
 * approve once, approve for the session and the cached scope, deny,
 * timeout, abort while waiting); the untrusted label on tool output; and a
 * whole turn with the scripted provider where a denied command goes back
 * to the model and its next step runs.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <ftw.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include "agents/safety/approvals.h"
#include "agents/executor.h"
#include "agents/models.h"
#include "agents/safety/permissions.h"
#include "agents/tool.h"
#include "agents/turn.h"
#include "gateway/config/config.h"
#include "gateway/core/err.h"
#include "gateway/core/log.h"

struct fixture {
	char home[64];
	char ws[PATH_MAX]; /* real path of home/workspaces/main */
	char real_home[PATH_MAX];
	struct config *cfg;
	uv_loop_t loop;
};

static struct fixture fx;

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st;
	(void)flag;
	(void)f;
	return remove(p);
}

static void write_file(const char *rel, const char *text)
{
	char path[PATH_MAX + 64];
	FILE *f;

	snprintf(path, sizeof path, "%s/%s", fx.ws, rel);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
}

static void load(const char *yaml)
{
	struct cfg_errors errs;
	int rc;

	config_unref(fx.cfg);
	fx.cfg = NULL;
	cfg_errors_init(&errs);
	rc = config_load_text(yaml, "t.yaml", fx.home, &fx.cfg, &errs);
	if (rc != SB_OK) {
		cfg_errors_print(&errs, stderr);
		fail_msg("config: %s", sb_strerror(rc));
	}
	cfg_errors_free(&errs);
}

static int setup(void **state)
{
	char p[PATH_MAX + 64];

	(void)state;
	memset(&fx, 0, sizeof fx);
	snprintf(fx.home, sizeof fx.home, "/tmp/sb-perm-XXXXXX");
	assert_non_null(mkdtemp(fx.home));
	assert_non_null(realpath(fx.home, fx.real_home));
	snprintf(p, sizeof p, "%s/workspaces", fx.home);
	assert_int_equal(mkdir(p, 0700), 0);
	snprintf(p, sizeof p, "%s/workspaces/main", fx.home);
	assert_int_equal(mkdir(p, 0700), 0);
	assert_non_null(realpath(p, fx.ws));
	snprintf(p, sizeof p, "%s/.git", fx.ws);
	assert_int_equal(mkdir(p, 0700), 0);
	snprintf(p, sizeof p, "%s/src", fx.ws);
	assert_int_equal(mkdir(p, 0700), 0);
	snprintf(p, sizeof p, "%s/switchboard.yaml", fx.home);
	{
		FILE *f = fopen(p, "w");

		assert_non_null(f);
		fputs("secret: yes\n", f);
		fclose(f);
	}
	write_file("a.txt", "line one\nline two\n");
	write_file("src/main.c", "int main(void) { return 0; }\n");
	write_file(".git/config", "[core]\n");
	/* escapes: a symlink out of the workspace, and one to the home */
	snprintf(p, sizeof p, "%s/etc-link", fx.ws);
	assert_int_equal(symlink("/etc", p), 0);
	snprintf(p, sizeof p, "%s/home-link", fx.ws);
	assert_int_equal(symlink(fx.real_home, p), 0);
	assert_int_equal(uv_loop_init(&fx.loop), 0);
	log_configure(LOG_ERROR, LOG_FORMAT_LOGFMT, NULL);
	load("agents:\n  - id: main\n");
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	config_unref(fx.cfg);
	uv_run(&fx.loop, UV_RUN_DEFAULT);
	assert_int_equal(uv_loop_close(&fx.loop), 0);
	nftw(fx.home, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	return 0;
}

/* The gates for agent `main` of the loaded config. */
static void perms_for(struct permissions *p, bool owner, bool group, const char *channel,
                      const char *sender)
{
	const struct agent_config *a = config_agent(fx.cfg, "main");

	assert_non_null(a);
	memset(p, 0, sizeof *p);
	p->security = &fx.cfg->security;
	p->agent.profile = a->profile;
	p->agent.rules = a->permissions;
	p->agent.n_rules = a->n_permissions;
	p->owner = owner;
	p->group = group;
	p->channel = channel;
	p->sender = sender;
	p->home = fx.cfg->home;
	p->workspace = fx.ws;
	p->approval_timeout_ms = 60000;
}

/* Decides tool(input_json) for p; returns the action, message in msg. */
static enum perm_action decide(const struct permissions *p, const char *tool, const char *input,
                               char *msg, size_t size, char *scope, size_t ssize)
{
	json_t *in = json_loads(input, 0, NULL);
	struct perm_decision d;

	assert_non_null(in);
	assert_int_equal(permissions_check(p, tool, in, &d), SB_OK);
	if (msg)
		snprintf(msg, size, "%s", d.message);
	if (scope)
		snprintf(scope, ssize, "%s", d.scope);
	perm_decision_release(&d);
	json_decref(in);
	return d.action;
}

static enum perm_action bash(const struct permissions *p, const char *command, char *msg,
                             size_t size)
{
	json_t *in = json_pack("{ss}", "command", command);
	struct perm_decision d;

	assert_int_equal(permissions_check(p, "bash", in, &d), SB_OK);
	if (msg)
		snprintf(msg, size, "%s", d.message);
	perm_decision_release(&d);
	json_decref(in);
	return d.action;
}

/* ---- the shell parser ---- */

static void expect_names(const char *command, const char *names)
{
	struct perm_shell sh;
	char got[1024] = "";

	assert_int_equal(perm_shell_parse(command, &sh), SB_OK);
	if (!sh.ok)
		fail_msg("%s: not parsed: %s", command, sh.why);
	for (size_t i = 0; i < sh.n_cmds; i++) {
		strncat(got, i ? "," : "", sizeof got - strlen(got) - 1);
		strncat(got, sh.names[i], sizeof got - strlen(got) - 1);
	}
	if (strcmp(got, names) != 0)
		fail_msg("%s: got [%s], expected [%s]", command, got, names);
	perm_shell_release(&sh);
}

static void expect_unparsed(const char *command)
{
	struct perm_shell sh;

	assert_int_equal(perm_shell_parse(command, &sh), SB_OK);
	if (sh.ok)
		fail_msg("%s: parsed, expected a refusal", command);
	assert_true(strlen(sh.why) > 0);
	perm_shell_release(&sh);
}

static void test_shell_parser(void **state)
{
	struct perm_shell sh;

	(void)state;
	expect_names("ls -la", "ls");
	expect_names("cat a.txt | grep x | wc -l", "cat,grep,wc");
	expect_names("make && ./run || echo failed; true", "make,run,echo,true");
	expect_names("(cd src && rm -f x.o) & wait", "cd,rm,wait");
	expect_names("echo $(whoami) `id -u`", "whoami,id,echo");
	expect_names("echo \"today: $(date +%F)\"", "date,echo");
	expect_names("cat notes.txt; echo checked-$((6*7))", "cat,echo");
	expect_names("FOO=1 BAR=\"a b\" env -i X=2 python3 t.py", "env,python3");
	expect_names("timeout 5 nice -n 10 curl http://x", "timeout,nice,curl");
	expect_names("sh -c 'rm -rf build; mkdir build'", "sh,rm,mkdir");
	expect_names("find . -name '*.c' | xargs -I {} grep -l main {}", "find,xargs,grep");
	expect_names("if test -f a; then cat a; else echo none; fi", "test,cat,echo");
	expect_names("echo 'a | b; c' \"$(printf '%s' x)\"", "printf,echo");
	expect_names("# only a comment", "");

	/* redirections: what they write, and descriptors that are not files */
	assert_int_equal(perm_shell_parse("ls > out.txt 2>&1; cat < in >>log 2>/dev/null", &sh),
	                 SB_OK);
	assert_true(sh.ok);
	assert_int_equal(sh.n_cmds, 2);
	assert_int_equal(sh.n_writes, 2);
	assert_string_equal(sh.writes[0], "out.txt");
	assert_string_equal(sh.writes[1], "log");
	assert_string_equal(sh.cmds[0], "ls");
	perm_shell_release(&sh);
	assert_int_equal(perm_shell_parse("echo hi &> both.log", &sh), SB_OK);
	assert_true(sh.ok);
	assert_int_equal(sh.n_writes, 1);
	assert_string_equal(sh.writes[0], "both.log");
	perm_shell_release(&sh);

	/* what cannot be known without running it */
	expect_unparsed("$CMD -rf /");
	expect_unparsed("eval \"$x\"");
	expect_unparsed("cat <<EOF\nhi\nEOF");
	expect_unparsed("for f in *; do rm $f; done");
	expect_unparsed("echo 'unterminated");
	expect_unparsed(":(){ :|:& };:");
	expect_unparsed("diff <(ls a) <(ls b)");
	expect_unparsed("echo hi > $OUT");
	expect_unparsed("bash -c \"$SCRIPT\"");
}

/* ---- gate 1 ---- */

static void test_hard_deny(void **state)
{
	struct permissions p;
	char msg[PERM_MSG_MAX], cmd[PATH_MAX + 64];

	(void)state;
	/* the operator, the full profile, and a rule that allows everything */
	load("agents:\n"
	     "  - id: main\n"
	     "    profile: full\n"
	     "    permissions:\n"
	     "      - {allow_commands: [\"*\", \"class:exec\", \"class:write\"]}\n"
	     "security:\n"
	     "  deny_commands: [docker, \"git push*\"]\n");
	perms_for(&p, true, false, "cli", NULL);
	assert_int_equal(bash(&p, "rm -rf /", msg, sizeof msg), PERM_DENY);
	assert_non_null(strstr(msg, "never allowed"));
	assert_int_equal(bash(&p, "rm -fr /*", NULL, 0), PERM_DENY);
	assert_int_equal(bash(&p, "ls && rm -r -f /usr", NULL, 0), PERM_DENY);
	assert_int_equal(bash(&p, "echo x | sudo tee /etc/passwd", msg, sizeof msg), PERM_DENY);
	assert_non_null(strstr(msg, "sudo"));
	assert_int_equal(bash(&p, "mkfs.ext4 /dev/sdb1", NULL, 0), PERM_DENY);
	assert_int_equal(bash(&p, "dd if=/dev/zero of=/dev/sda bs=1M", NULL, 0), PERM_DENY);
	assert_int_equal(bash(&p, "sh -c 'sudo id'", NULL, 0), PERM_DENY);
	assert_int_equal(bash(&p, "echo $(su -c id)", NULL, 0), PERM_DENY);
	/* the workspace's .git */
	assert_int_equal(bash(&p, "echo evil > .git/hooks/pre-commit", msg, sizeof msg), PERM_DENY);
	assert_non_null(strstr(msg, ".git"));
	assert_int_equal(bash(&p, "rm -f .git/index", NULL, 0), PERM_DENY);
	assert_int_equal(bash(&p, "cp x src/../.git/config", NULL, 0), PERM_DENY);
	/* the gateway's home, directly, through "..", or by ~ */
	snprintf(cmd, sizeof cmd, "cat %s/switchboard.yaml", fx.real_home);
	assert_int_equal(bash(&p, cmd, msg, sizeof msg), PERM_DENY);
	assert_non_null(strstr(msg, "home"));
	assert_int_equal(bash(&p, "cat ../../switchboard.yaml", NULL, 0), PERM_DENY);
	assert_int_equal(bash(&p, "cat src/../../../state.db", NULL, 0), PERM_DENY);
	assert_int_equal(bash(&p, "ls ~/.ssh", NULL, 0), PERM_DENY);
	/* the operator's additions */
	assert_int_equal(bash(&p, "docker run --privileged x", msg, sizeof msg), PERM_DENY);
	assert_non_null(strstr(msg, "deny list"));
	assert_int_equal(bash(&p, "git push origin main", NULL, 0), PERM_DENY);
	/* and what stays allowed for the operator */
	assert_int_equal(bash(&p, "rm -rf build", NULL, 0), PERM_ALLOW);
	assert_int_equal(bash(&p, "git status && cat .git/config", NULL, 0), PERM_ALLOW);
	assert_int_equal(bash(&p, "ls /usr/bin | head", NULL, 0), PERM_ALLOW);
	assert_int_equal(bash(&p, "git commit -m x", NULL, 0), PERM_ALLOW);
}

/* ---- gate 2 ---- */

static void test_profiles_and_tools(void **state)
{
	struct permissions p;
	char msg[PERM_MSG_MAX];

	(void)state;
	load("agents:\n"
	     "  - id: main\n"
	     "    profile: minimal\n"
	     "    permissions:\n"
	     "      - {who: owner, profile: coding}\n"
	     "      - {chat: group, deny_tools: [write]}\n"
	     "      - {channel: telegram, sender: \"42\", allow_tools: [message]}\n");
	/* others: the minimal profile */
	perms_for(&p, false, false, "slack", "U1");
	assert_int_equal(decide(&p, "bash", "{\"command\":\"ls\"}", msg, sizeof msg, NULL, 0),
	                 PERM_DENY);
	assert_non_null(strstr(msg, "minimal"));
	assert_int_equal(decide(&p, "read", "{\"path\":\"a.txt\"}", NULL, 0, NULL, 0), PERM_ALLOW);
	assert_int_equal(decide(&p, "message", "{\"text\":\"x\"}", NULL, 0, NULL, 0), PERM_DENY);
	/* a sender's own rule adds a tool */
	perms_for(&p, false, false, "telegram", "42");
	assert_int_equal(decide(&p, "message", "{\"text\":\"x\"}", NULL, 0, NULL, 0), PERM_ALLOW);
	perms_for(&p, false, false, "telegram", "43");
	assert_int_equal(decide(&p, "message", "{\"text\":\"x\"}", NULL, 0, NULL, 0), PERM_DENY);
	/* the owner: coding, but a group's deny still wins */
	perms_for(&p, true, false, "telegram", "7");
	assert_int_equal(
	    decide(&p, "write", "{\"path\":\"n.txt\",\"content\":\"x\"}", NULL, 0, NULL, 0),
	    PERM_ALLOW);
	perms_for(&p, true, true, "telegram", "7");
	assert_int_equal(
	    decide(&p, "write", "{\"path\":\"n.txt\",\"content\":\"x\"}", msg, sizeof msg, NULL, 0),
	    PERM_DENY);
	assert_non_null(strstr(msg, "denied"));
	assert_true(permissions_profile_has(PERM_PROFILE_MESSAGING, "message"));
	assert_false(permissions_profile_has(PERM_PROFILE_MESSAGING, "bash"));
	/* owners: trusted channels and security.owners */
	load("agents:\n  - id: main\nsecurity:\n  owners: [\"telegram:42\", \"slack:*\"]\n");
	assert_true(permissions_is_owner(&fx.cfg->security, "cli", NULL));
	assert_true(permissions_is_owner(&fx.cfg->security, "webchat", "x"));
	assert_true(permissions_is_owner(&fx.cfg->security, "telegram", "42"));
	assert_false(permissions_is_owner(&fx.cfg->security, "telegram", "43"));
	assert_true(permissions_is_owner(&fx.cfg->security, "slack", "U9"));
	assert_false(permissions_is_owner(&fx.cfg->security, "webhook", "42"));
}

/* web_fetch: the owner fetches; others fetch with an approval cached per
 * host; a URL the parser refuses is denied; minimal profiles lack it. */
static void test_web_fetch_gate(void **state)
{
	struct permissions p;
	char msg[PERM_MSG_MAX], scope[PERM_SCOPE_MAX];
	const char *page = "{\"url\":\"https://Example.com/a?b\"}";

	(void)state;
	load("agents:\n  - id: main\n    web: {fetch: true}\n");
	perms_for(&p, true, false, "telegram", "7");
	assert_int_equal(decide(&p, "web_fetch", page, NULL, 0, NULL, 0), PERM_ALLOW);
	perms_for(&p, false, false, "telegram", "8");
	assert_int_equal(decide(&p, "web_fetch", page, msg, sizeof msg, scope, sizeof scope),
	                 PERM_ASK);
	assert_string_equal(scope, "web_fetch:host:example.com");
	assert_non_null(strstr(msg, "https://example.com/a?b"));
	assert_int_equal(decide(&p, "web_fetch", "{\"url\":\"http://u@example.com/\"}", msg,
	                        sizeof msg, NULL, 0),
	                 PERM_DENY);
	assert_non_null(strstr(msg, "user info"));
	load("agents:\n  - id: main\n    profile: minimal\n");
	perms_for(&p, true, false, "telegram", "7");
	assert_int_equal(decide(&p, "web_fetch", page, NULL, 0, NULL, 0), PERM_DENY);
	load("agents:\n  - id: main\n    profile: full\n");
	perms_for(&p, false, false, "telegram", "8");
	assert_int_equal(decide(&p, "web_fetch", page, NULL, 0, NULL, 0), PERM_ALLOW);
}

/* An MCP server's tools: the operator calls them; others need an approval
 * per tool unless a rule allows them (by name or glob) or the profile is
 * full; minimal and messaging lack them; a deny glob wins; the server's
 * annotations play no part (the gate never sees them). */
static void test_mcp_tools(void **state)
{
	struct permissions p;
	char msg[PERM_MSG_MAX], scope[PERM_SCOPE_MAX];

	(void)state;
	load("agents:\n"
	     "  - id: main\n"
	     "    permissions:\n"
	     "      - {channel: telegram, sender: \"42\", allow_tools: [\"mcp__tickets__*\"]}\n"
	     "      - {channel: slack, deny_tools: [\"mcp__*\"]}\n"
	     "      - {who: owner, ask_tools: [mcp__files__delete]}\n");
	perms_for(&p, true, false, "telegram", "7");
	assert_int_equal(decide(&p, "mcp__files__read_file", "{}", NULL, 0, NULL, 0), PERM_ALLOW);
	/* an owner's ask rule by name */
	assert_int_equal(
	    decide(&p, "mcp__files__delete", "{}", msg, sizeof msg, scope, sizeof scope), PERM_ASK);
	assert_string_equal(scope, "mcp__files__delete:tool");
	/* others: an approval per tool */
	perms_for(&p, false, false, "telegram", "8");
	assert_int_equal(
	    decide(&p, "mcp__files__read_file", "{}", msg, sizeof msg, scope, sizeof scope),
	    PERM_ASK);
	assert_string_equal(scope, "mcp__files__read_file:tool");
	assert_non_null(strstr(msg, "a tool of an MCP server"));
	/* a rule's glob allows one server's tools, not another's */
	perms_for(&p, false, false, "telegram", "42");
	assert_int_equal(decide(&p, "mcp__tickets__create", "{}", NULL, 0, NULL, 0), PERM_ALLOW);
	assert_int_equal(decide(&p, "mcp__files__read_file", "{}", NULL, 0, NULL, 0), PERM_ASK);
	/* a deny glob wins, the owner's included */
	perms_for(&p, true, false, "slack", "U1");
	assert_int_equal(decide(&p, "mcp__tickets__create", "{}", msg, sizeof msg, NULL, 0),
	                 PERM_DENY);
	assert_non_null(strstr(msg, "denied by this agent's permission rules"));
	/* profiles */
	load("agents:\n  - id: main\n    profile: messaging\n");
	perms_for(&p, true, false, "telegram", "7");
	assert_int_equal(decide(&p, "mcp__files__read_file", "{}", msg, sizeof msg, NULL, 0),
	                 PERM_DENY);
	assert_non_null(strstr(msg, "messaging"));
	load("agents:\n  - id: main\n    profile: full\n");
	perms_for(&p, false, false, "telegram", "8");
	assert_int_equal(decide(&p, "mcp__files__read_file", "{}", NULL, 0, NULL, 0), PERM_ALLOW);
}

/* The programs that execute or write through their options, each as a
 * non-owner runs it: never allowed without approval. */
static const char *const hostile_commands[] = {
    "awk 'BEGIN{system(\"id\")}'",
    "awk '{print > \"AGENTS.md\"}' a.txt",
    "gawk 'BEGIN{while ((\"id\" | getline l) > 0) print l}'",
    "sed e a.txt",
    "sed '1e id' a.txt",
    "sed 's/a/id/e' a.txt",
    "sed 'w AGENTS.md' a.txt",
    "sed -n 's/a/b/w AGENTS.md' a.txt",
    "sed -e 1p -e 'w out' a.txt",
    "sed -f script.sed a.txt",
    "sed --expression=e a.txt",
    "sed -i s/a/b/ a.txt",
    "sed -ni 1p a.txt",
    "sort -o AGENTS.md a.txt",
    "sort -uo AGENTS.md a.txt",
    "sort --output=AGENTS.md a.txt",
    "sort --compress-program=sh a.txt",
    "find . -fprintf AGENTS.md %p",
    "find . -fprint out",
    "find . -fls out",
    "find . -exec id ;",
    "find . -execdir id ;",
    "find . -okdir id ;",
    "find . -delete",
    "xxd -r dump AGENTS.md",
    "xxd -r -p dump",
    "xxd a.txt AGENTS.md",
    "rg --pre ./run x",
    "rg --pre=./run x",
    "git grep -Oid x",
    "git grep --open-files-in-pager=id x",
    "git log --output=AGENTS.md",
    "git diff --ext-diff",
    "less a.txt",
    "more a.txt",
    "uniq a.txt AGENTS.md",
    "tree -o AGENTS.md",
    "file -C -m x",
    NULL};

/* Benign decorations a command may come with: the classification must not
 * be talked out of its verdict by what surrounds it. */
static const char *const decorations[][2] = {
    {"", ""},           {"cat a.txt | ", ""}, {"ls && ", ""},
    {"", " | wc -l"},   {"", " 2>/dev/null"}, {"true; ", " || true"},
    {"(", ")"},         {"echo $(", ")"},     {"env LC_ALL=C ", ""},
    {"nice -n 5 ", ""}, {"timeout 5 ", ""},   {"sh -c '", "'"},
};

/* A small deterministic generator (xorshift): the same cases every run. */
static uint32_t fuzz_next(uint32_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 17;
	*x ^= *x << 5;
	return *x;
}

/* Property: anything that can write or exec is never classed read. Every
 * hostile command, with every decoration, and then 20,000 random argument
 * lists for the "read" programs drawn from a pool that mixes harmless
 * words with the options that write or execute: whenever a drawn list
 * holds one of those (the oracle below), a non-owner must not be allowed. */
static void test_classifier_property(void **state)
{
	static const struct {
		const char *prog;
		const char *danger[8]; /* words that make it write or exec */
	} progs[] = {
	    {"sed", {"e", "1e", "s/a/b/e", "w", "s/a/b/w", "-i", "-f", NULL}},
	    {"sort", {"-o", "-uo", "--output=x", "--compress-program=sh", NULL}},
	    {"find", {"-exec", "-execdir", "-ok", "-fprintf", "-fprint0", "-fls", "-delete", NULL}},
	    {"xxd", {"-r", "-revert", NULL}},
	    {"rg", {"--pre", "--pre=x", NULL}},
	    {"tree", {"-o", NULL}},
	    {"awk", {"{print}", "BEGIN{}", NULL}},
	    {"less", {"a.txt", NULL}},
	};
	static const char *const harmless[] = {"-n",    "a.txt", "1p",    "-E", "x",  "-s", "-u",
	                                       "-name", "*.c",   "-type", "f",  "-l", "-p", NULL};
	struct permissions p;
	uint32_t seed = 0x9e3779b9u;
	size_t tried = 0, hostile = 0;

	(void)state;
	load("agents:\n  - id: main\n");
	perms_for(&p, false, false, "telegram", "9");
	for (size_t i = 0; hostile_commands[i]; i++)
		for (size_t d = 0; d < sizeof decorations / sizeof decorations[0]; d++) {
			char cmd[512];

			/* inside sh -c '...' the command's own quotes would end it */
			if (decorations[d][0][0] == 's' && strchr(hostile_commands[i], '\''))
				continue;
			snprintf(cmd, sizeof cmd, "%s%s%s", decorations[d][0], hostile_commands[i],
			         decorations[d][1]);
			if (bash(&p, cmd, NULL, 0) == PERM_ALLOW)
				fail_msg("allowed without approval: %s", cmd);
			tried++;
		}
	for (int n = 0; n < 20000; n++) {
		size_t k = fuzz_next(&seed) % (sizeof progs / sizeof progs[0]);
		size_t words = 1 + fuzz_next(&seed) % 4;
		bool danger =
		    strcmp(progs[k].prog, "awk") == 0 || strcmp(progs[k].prog, "less") == 0;
		char cmd[512];
		size_t len = (size_t)snprintf(cmd, sizeof cmd, "%s", progs[k].prog);

		bool operand_seen = false;

		for (size_t w = 0; w < words; w++) {
			const char *word;
			size_t nd = 0;

			while (progs[k].danger[nd])
				nd++;
			if (fuzz_next(&seed) % 3 == 0) {
				word = progs[k].danger[fuzz_next(&seed) % nd];
				/* sed's script is its first operand; a later one
				 * named "e" is a file. An option counts anywhere. */
				if (word[0] == '-' || strcmp(progs[k].prog, "sed") != 0 ||
				    !operand_seen)
					danger = true;
			} else {
				size_t nh = sizeof harmless / sizeof harmless[0] - 1;

				word = harmless[fuzz_next(&seed) % nh];
			}
			if (word[0] != '-')
				operand_seen = true;
			len += (size_t)snprintf(cmd + len, sizeof cmd - len, " %s", word);
		}
		if (danger) {
			hostile++;
			if (bash(&p, cmd, NULL, 0) == PERM_ALLOW)
				fail_msg("allowed without approval: %s", cmd);
		}
	}
	/* the generator did draw hostile lists, and the plain forms stay read */
	assert_true(hostile > 5000);
	assert_true(tried > 300);
	assert_int_equal(bash(&p, "sed -n 1p a.txt", NULL, 0), PERM_ALLOW);
	assert_int_equal(bash(&p, "sed s/a/b/g a.txt", NULL, 0), PERM_ALLOW);
	assert_int_equal(bash(&p, "sort -u a.txt", NULL, 0), PERM_ALLOW);
	assert_int_equal(bash(&p, "find . -name '*.c'", NULL, 0), PERM_ALLOW);
	assert_int_equal(bash(&p, "git grep -n x", NULL, 0), PERM_ALLOW);
	assert_int_equal(bash(&p, "xxd a.txt", NULL, 0), PERM_ALLOW);
	print_message("classifier property: %zu decorated hostile commands, %zu hostile random "
	              "argument lists, none allowed\n",
	              tried, hostile);
}

static void test_command_rules(void **state)
{
	struct permissions p;
	char msg[PERM_MSG_MAX], scope[PERM_SCOPE_MAX];
	json_t *in;
	struct perm_decision d;

	(void)state;
	load("agents:\n"
	     "  - id: main\n"
	     "    permissions:\n"
	     "      - {who: others, allow_commands: [make, \"git commit\"]}\n"
	     "      - {who: owner, ask_commands: [\"class:network\"]}\n"
	     "      - {chat: group, deny_commands: [python3]}\n"
	     "      - {who: others, chat: direct, ask_commands: [make]}\n");
	/* others: reading is allowed, the rest asks (by command class) */
	perms_for(&p, false, false, "telegram", "9");
	assert_int_equal(bash(&p, "ls -la | grep x | wc -l", NULL, 0), PERM_ALLOW);
	assert_int_equal(bash(&p, "sed -n 1p a.txt", NULL, 0), PERM_ALLOW);
	assert_int_equal(bash(&p, "sed -i s/a/b/ a.txt", NULL, 0), PERM_ASK);
	assert_int_equal(bash(&p, "find . -delete", NULL, 0), PERM_ASK);
	in = json_pack("{ss}", "command", "cat a.txt && touch b && git push origin");
	assert_int_equal(permissions_check(&p, "bash", in, &d), SB_OK);
	assert_int_equal(d.action, PERM_ASK);
	assert_string_equal(d.scope, "bash:cmd:touch+git push");
	assert_non_null(strstr(d.message, "approval"));
	perm_decision_release(&d);
	json_decref(in);
	/* an allow rule lifts the default ask; an explicit ask beats it */
	assert_int_equal(bash(&p, "git commit -m wip", NULL, 0), PERM_ALLOW);
	assert_int_equal(bash(&p, "make test", NULL, 0), PERM_ASK); /* DM: ask_commands make */
	perms_for(&p, false, true, "telegram", "9");
	assert_int_equal(bash(&p, "make test", NULL, 0), PERM_ALLOW);
	/* a deny in any layer wins */
	assert_int_equal(bash(&p, "python3 -c 1", msg, sizeof msg), PERM_DENY);
	assert_non_null(strstr(msg, "python3"));
	/* the owner: everything that parses, except the asked class */
	perms_for(&p, true, false, "cli", NULL);
	assert_int_equal(bash(&p, "make && ./a.out > log.txt", NULL, 0), PERM_ALLOW);
	assert_int_equal(bash(&p, "curl -s http://example.com", NULL, 0), PERM_ASK);
	/* unparseable: asked for, never allowed */
	assert_int_equal(decide(&p, "bash", "{\"command\":\"eval $(cat x)\"}", msg, sizeof msg,
	                        scope, sizeof scope),
	                 PERM_ASK);
	assert_non_null(strstr(msg, "could not be checked"));
	assert_true(strncmp(scope, "bash:text:", 10) == 0);
}

static void test_paths(void **state)
{
	struct permissions p;
	char msg[PERM_MSG_MAX], scope[PERM_SCOPE_MAX];
	json_t *in;
	struct perm_decision d;

	(void)state;
	load("agents:\n"
	     "  - id: main\n"
	     "    permissions:\n"
	     "      - {deny_paths: [\"secrets/\", \"*.pem\"], ask_paths: [\"src/main.c\"]}\n"
	     "security:\n"
	     "  deny_paths: [\"*/private.txt\"]\n");
	write_file("private.txt", "x");
	write_file("key.pem", "x");
	perms_for(&p, true, false, "cli", NULL);
	/* escapes: "..", absolute, symlinks out of the workspace and into the home */
	assert_int_equal(
	    decide(&p, "read", "{\"path\":\"../../switchboard.yaml\"}", msg, sizeof msg, NULL, 0),
	    PERM_DENY);
	assert_non_null(strstr(msg, "escapes"));
	assert_int_equal(decide(&p, "read", "{\"path\":\"src/../../x\"}", NULL, 0, NULL, 0),
	                 PERM_DENY);
	assert_int_equal(decide(&p, "read", "{\"path\":\"/etc/passwd\"}", msg, sizeof msg, NULL, 0),
	                 PERM_DENY);
	assert_non_null(strstr(msg, "absolute"));
	assert_int_equal(
	    decide(&p, "read", "{\"path\":\"etc-link/passwd\"}", msg, sizeof msg, NULL, 0),
	    PERM_DENY);
	assert_non_null(strstr(msg, "symlink"));
	assert_int_equal(
	    decide(&p, "read", "{\"path\":\"home-link/switchboard.yaml\"}", NULL, 0, NULL, 0),
	    PERM_DENY);
	assert_int_equal(decide(&p, "ls", "{\"path\":\"etc-link\"}", NULL, 0, NULL, 0), PERM_DENY);
	assert_int_equal(
	    decide(&p, "grep", "{\"pattern\":\"x\",\"path\":\"home-link\"}", NULL, 0, NULL, 0),
	    PERM_DENY);
	/* writing into .git, directly or through a folded path */
	assert_int_equal(decide(&p, "write", "{\"path\":\"src/../.git/config\",\"content\":\"x\"}",
	                        msg, sizeof msg, NULL, 0),
	                 PERM_DENY);
	assert_non_null(strstr(msg, ".git"));
	/* rules on resolved paths */
	assert_int_equal(
	    decide(&p, "write", "{\"path\":\"secrets/a\",\"content\":\"x\"}", NULL, 0, NULL, 0),
	    PERM_DENY);
	assert_int_equal(decide(&p, "read", "{\"path\":\"src/../key.pem\"}", NULL, 0, NULL, 0),
	                 PERM_DENY);
	assert_int_equal(decide(&p, "read", "{\"path\":\"private.txt\"}", msg, sizeof msg, NULL, 0),
	                 PERM_DENY);
	assert_non_null(strstr(msg, "deny list"));
	assert_int_equal(
	    decide(&p, "edit",
	           "{\"path\":\"./src/main.c\",\"old_string\":\"a\",\"new_string\":\"b\"}", NULL, 0,
	           scope, sizeof scope),
	    PERM_ASK);
	assert_string_equal(scope, "edit:path:src/");
	/* the rewritten input: the resolved path, relative to the workspace */
	in = json_pack("{ss}", "path", "src/./x/../../a.txt");
	assert_int_equal(permissions_check(&p, "read", in, &d), SB_OK);
	assert_int_equal(d.action, PERM_ALLOW);
	assert_non_null(d.input);
	assert_string_equal(json_string_value(json_object_get(d.input, "path")), "a.txt");
	/* the caller's input is untouched */
	assert_string_equal(json_string_value(json_object_get(in, "path")), "src/./x/../../a.txt");
	perm_decision_release(&d);
	json_decref(in);
	/* others change files only with approval, scoped by directory */
	perms_for(&p, false, false, "telegram", "9");
	assert_int_equal(decide(&p, "write", "{\"path\":\"docs/new.md\",\"content\":\"x\"}", NULL,
	                        0, scope, sizeof scope),
	                 PERM_ASK);
	assert_string_equal(scope, "write:path:docs/");
	assert_int_equal(decide(&p, "read", "{\"path\":\"a.txt\"}", NULL, 0, NULL, 0), PERM_ALLOW);
}

/* Links inside the workspace that lead back into it: the verdict is on the
 * file the link reaches (its .git, a denied directory), and a path that
 * folds to the workspace itself is the workspace. */
static void test_paths_links_inside(void **state)
{
	struct permissions p;
	char lnk[PATH_MAX + 64], msg[PERM_MSG_MAX];
	json_t *in;
	struct perm_decision d;

	(void)state;
	load("agents:\n"
	     "  - id: main\n"
	     "    permissions:\n"
	     "      - {deny_paths: [\"secrets/\"]}\n");
	snprintf(lnk, sizeof lnk, "%s/secrets", fx.ws);
	assert_int_equal(mkdir(lnk, 0700), 0);
	write_file("secrets/key", "x");
	snprintf(lnk, sizeof lnk, "%s/gl", fx.ws);
	assert_int_equal(symlink(".git", lnk), 0);
	snprintf(lnk, sizeof lnk, "%s/self", fx.ws);
	assert_int_equal(symlink(".", lnk), 0);
	snprintf(lnk, sizeof lnk, "%s/sl", fx.ws);
	assert_int_equal(symlink("secrets", lnk), 0);
	snprintf(lnk, sizeof lnk, "%s/loop", fx.ws);
	assert_int_equal(symlink("loop", lnk), 0);
	perms_for(&p, true, false, "cli", NULL);
	/* .git through a link: an existing file, a new one, through the
	 * workspace's own link to itself */
	assert_int_equal(decide(&p, "write", "{\"path\":\"gl/config\",\"content\":\"x\"}", msg,
	                        sizeof msg, NULL, 0),
	                 PERM_DENY);
	assert_non_null(strstr(msg, ".git"));
	assert_int_equal(decide(&p, "write", "{\"path\":\"gl/hooks/pre-commit\",\"content\":\"x\"}",
	                        msg, sizeof msg, NULL, 0),
	                 PERM_DENY);
	assert_non_null(strstr(msg, ".git"));
	assert_int_equal(decide(&p, "edit",
	                        "{\"path\":\"self/self/.git/config\",\"old_string\":\"a\","
	                        "\"new_string\":\"b\"}",
	                        msg, sizeof msg, NULL, 0),
	                 PERM_DENY);
	assert_non_null(strstr(msg, ".git"));
	/* a denied directory through a link */
	assert_int_equal(decide(&p, "read", "{\"path\":\"sl/key\"}", msg, sizeof msg, NULL, 0),
	                 PERM_DENY);
	assert_non_null(strstr(msg, "denied"));
	assert_int_equal(decide(&p, "read", "{\"path\":\"self/secrets/key\"}", NULL, 0, NULL, 0),
	                 PERM_DENY);
	/* a loop is refused, not followed */
	assert_int_equal(decide(&p, "read", "{\"path\":\"loop/x\"}", NULL, 0, NULL, 0), PERM_DENY);
	/* out through a link and back by "..": folded first, so the workspace */
	in = json_pack("{ss}", "path", "etc-link/..");
	assert_int_equal(permissions_check(&p, "ls", in, &d), SB_OK);
	assert_int_equal(d.action, PERM_ALLOW);
	assert_true(!d.input ||
	            strcmp(json_string_value(json_object_get(d.input, "path")), ".") == 0);
	perm_decision_release(&d);
	json_decref(in);
	/* the rewritten path of a read through the self link is the file itself */
	in = json_pack("{ss}", "path", "self/a.txt");
	assert_int_equal(permissions_check(&p, "read", in, &d), SB_OK);
	assert_int_equal(d.action, PERM_ALLOW);
	assert_non_null(d.input);
	assert_string_equal(json_string_value(json_object_get(d.input, "path")), "a.txt");
	perm_decision_release(&d);
	json_decref(in);
	for (size_t i = 0; i < 4; i++) {
		static const char *const names[] = {"gl", "self", "sl", "loop"};

		snprintf(lnk, sizeof lnk, "%s/%s", fx.ws, names[i]);
		assert_int_equal(unlink(lnk), 0);
	}
}

/* ---- gate 3 and the executor ---- */

struct exec_run {
	int done;
	json_t *results;
	int requested;
	char last_id[32];
	char last_scope[PERM_SCOPE_MAX];
	char last_decision[32];
};

static void on_exec_done(void *ud, int rc, json_t *results)
{
	struct exec_run *r = ud;

	(void)rc;
	r->done++;
	r->results = results;
}

static void on_requested(void *ud, const struct approval_info *a)
{
	struct exec_run *r = ud;

	r->requested++;
	snprintf(r->last_id, sizeof r->last_id, "%s", a->id);
	snprintf(r->last_scope, sizeof r->last_scope, "%s", a->req->scope ? a->req->scope : "");
}

static void on_resolved(void *ud, const struct approval_info *a)
{
	struct exec_run *r = ud;

	snprintf(r->last_decision, sizeof r->last_decision, "%s", a->decision);
}

/* An assistant message with the given tool_use blocks (JSON array text of
 * [name, input] pairs). */
static json_t *assistant(const char *calls)
{
	json_t *pairs = json_loads(calls, 0, NULL), *content = json_array(), *pair;
	size_t i;
	char id[32];

	assert_non_null(pairs);
	json_array_foreach(pairs, i, pair)
	{
		snprintf(id, sizeof id, "t%zu", i + 1);
		json_array_append_new(content, json_pack("{ss ss sO sO}", "type", "tool_use", "id",
		                                         id, "name", json_array_get(pair, 0),
		                                         "input", json_array_get(pair, 1)));
	}
	json_decref(pairs);
	return json_pack("{ss so}", "role", "assistant", "content", content);
}

static const json_t *result_at(const struct exec_run *r, size_t i)
{
	return json_array_get(json_object_get(r->results, "content"), i);
}

static const char *result_text(const struct exec_run *r, size_t i)
{
	return json_string_value(json_object_get(result_at(r, i), "content"));
}

static bool result_error(const struct exec_run *r, size_t i)
{
	return json_is_true(json_object_get(result_at(r, i), "is_error"));
}

static void run_until(struct exec_run *r, bool (*until)(struct exec_run *r))
{
	/* NOWAIT: a pending approval's timer would make ONCE block for it */
	for (int i = 0; i < 20000 && !until(r); i++) {
		uv_run(&fx.loop, UV_RUN_NOWAIT);
		if (!until(r))
			usleep(1000);
	}
	assert_true(until(r));
}

static bool is_done(struct exec_run *r)
{
	return r->done > 0;
}

static bool is_requested(struct exec_run *r)
{
	return r->requested > 0 || r->done > 0;
}

static void start_exec(struct exec_run *r, const struct tool_ctx *ctx, const char *calls,
                       struct executor **ex, json_t **msg)
{
	struct executor_options o;

	memset(&o, 0, sizeof o);
	o.ctx = ctx;
	*msg = assistant(calls);
	assert_int_equal(executor_run(*msg, &o, on_exec_done, r, ex), SB_OK);
}

static void ctx_init(struct tool_ctx *ctx, const struct permissions *p, const char *session)
{
	memset(ctx, 0, sizeof *ctx);
	ctx->loop = &fx.loop;
	ctx->agent_id = "main";
	ctx->session_key = session;
	ctx->workspace = fx.ws;
	ctx->timeout_ms = 10000;
	ctx->perms = p;
}

static void test_executor_gates(void **state)
{
	struct permissions p;
	struct tool_ctx ctx;
	struct exec_run r;
	struct executor *ex;
	json_t *msg;

	(void)state;
	load("agents:\n  - id: main\n    permissions:\n      - {ask_tools: [ls]}\n");
	perms_for(&p, true, false, "cli", NULL);
	ctx_init(&ctx, &p, "agent:main:a");

	/* a denied call is a normal tool result; the calls beside it run */
	memset(&r, 0, sizeof r);
	start_exec(&r, &ctx,
	           "[[\"bash\",{\"command\":\"sudo rm -rf /\"}],"
	           " [\"read\",{\"path\":\"a.txt\"}],"
	           " [\"read\",{\"path\":\"etc-link/hostname\"}],"
	           " [\"ls\",{}]]",
	           &ex, &msg);
	run_until(&r, is_done);
	assert_int_equal(json_array_size(json_object_get(r.results, "content")), 4);
	assert_true(result_error(&r, 0));
	assert_non_null(strstr(result_text(&r, 0), "permission denied"));
	assert_non_null(strstr(result_text(&r, 0), "sudo"));
	assert_false(result_error(&r, 1));
	/* tool output is labelled as untrusted data */
	assert_true(strncmp(result_text(&r, 1), "[Untrusted tool output (read)", 29) == 0);
	assert_non_null(strstr(result_text(&r, 1), "line one"));
	assert_true(result_error(&r, 2));
	assert_non_null(strstr(result_text(&r, 2), "symlink"));
	/* ls needs approval, and nobody can be asked here */
	assert_true(result_error(&r, 3));
	assert_non_null(strstr(result_text(&r, 3), "no operator can be asked"));
	json_decref(r.results);
	json_decref(msg);
}

static void test_executor_approvals(void **state)
{
	struct permissions p;
	struct tool_ctx ctx;
	struct exec_run r;
	struct executor *ex;
	struct approvals *ap;
	struct approvals_hooks h;
	json_t *msg, *list;

	(void)state;
	load("agents:\n  - id: main\n    permissions:\n"
	     "      - {ask_commands: [touch], ask_paths: [\"src/\"]}\n");
	perms_for(&p, true, false, "telegram", "42");
	memset(&r, 0, sizeof r);
	h.ud = &r;
	h.requested = on_requested;
	h.resolved = on_resolved;
	assert_int_equal(approvals_new(&ap, &fx.loop, &h), SB_OK);
	p.approvals = ap;
	ctx_init(&ctx, &p, "agent:main:a");

	/* approve once: the call runs, nothing is remembered */
	start_exec(&r, &ctx, "[[\"bash\",{\"command\":\"touch made-once\"}]]", &ex, &msg);
	run_until(&r, is_requested);
	if (r.done)
		fail_msg("not waiting: %s", result_text(&r, 0));
	assert_int_equal(r.requested, 1);
	assert_string_equal(r.last_scope, "bash:cmd:touch");
	list = approvals_list_json(ap);
	assert_int_equal(json_array_size(list), 1);
	assert_string_equal(json_string_value(json_object_get(json_array_get(list, 0), "tool")),
	                    "bash");
	assert_string_equal(json_string_value(json_object_get(json_array_get(list, 0), "sender")),
	                    "42");
	json_decref(list);
	assert_int_equal(approvals_resolve(ap, "nope00", APPROVAL_ONCE, "t"), SB_ERR_NOTFOUND);
	/* a prefix of the id will do */
	{
		char prefix[9];

		snprintf(prefix, sizeof prefix, "%.8s", r.last_id);
		assert_int_equal(approvals_resolve(ap, prefix, APPROVAL_ONCE, "test"), SB_OK);
	}
	assert_string_equal(r.last_decision, "approved-once");
	run_until(&r, is_done);
	assert_false(result_error(&r, 0));
	assert_non_null(strstr(result_text(&r, 0), "exit code 0"));
	{
		char made[PATH_MAX + 32];

		snprintf(made, sizeof made, "%s/made-once", fx.ws);
		assert_int_equal(access(made, F_OK), 0);
	}
	json_decref(r.results);
	json_decref(msg);

	/* deny: the model reads why */
	memset(&r, 0, sizeof r);
	start_exec(&r, &ctx, "[[\"bash\",{\"command\":\"touch x2\"}]]", &ex, &msg);
	run_until(&r, is_requested);
	assert_int_equal(r.requested, 1);
	assert_int_equal(approvals_resolve(ap, r.last_id, APPROVAL_DENY, "test"), SB_OK);
	run_until(&r, is_done);
	assert_true(result_error(&r, 0));
	assert_non_null(strstr(result_text(&r, 0), "denied by the operator"));
	json_decref(r.results);
	json_decref(msg);

	/* approve for the session: the same scope is not asked again in this
	 * session, a deeper path under an approved directory neither; another
	 * session is asked */
	memset(&r, 0, sizeof r);
	start_exec(&r, &ctx, "[[\"write\",{\"path\":\"src/gen/a.c\",\"content\":\"x\"}]]", &ex,
	           &msg);
	run_until(&r, is_requested);
	assert_string_equal(r.last_scope, "write:path:src/gen/");
	assert_int_equal(approvals_resolve(ap, r.last_id, APPROVAL_SESSION, "test"), SB_OK);
	run_until(&r, is_done);
	assert_false(result_error(&r, 0));
	json_decref(r.results);
	json_decref(msg);

	memset(&r, 0, sizeof r);
	start_exec(&r, &ctx,
	           "[[\"write\",{\"path\":\"src/gen/b.c\",\"content\":\"y\"}],"
	           " [\"write\",{\"path\":\"src/gen/deep/c.c\",\"content\":\"z\"}]]",
	           &ex, &msg);
	run_until(&r, is_done);
	assert_int_equal(r.requested, 0);
	assert_false(result_error(&r, 0));
	assert_false(result_error(&r, 1));
	json_decref(r.results);
	json_decref(msg);

	ctx.session_key = "agent:main:other";
	memset(&r, 0, sizeof r);
	start_exec(&r, &ctx, "[[\"write\",{\"path\":\"src/gen/d.c\",\"content\":\"x\"}]]", &ex,
	           &msg);
	run_until(&r, is_requested);
	assert_int_equal(r.requested, 1);

	/* an abort while waiting withdraws the request */
	executor_abort(ex, "stopped by the test");
	assert_int_equal(r.done, 1);
	assert_true(result_error(&r, 0));
	assert_non_null(strstr(result_text(&r, 0), "aborted"));
	assert_int_equal(approvals_pending(ap), 0);
	assert_string_equal(r.last_decision, "cancelled");
	json_decref(r.results);
	json_decref(msg);

	/* approved for the agent by one sender's request: that sender is not
	 * asked again in any session, another sender is */
	ctx.session_key = "agent:main:a";
	memset(&r, 0, sizeof r);
	start_exec(&r, &ctx, "[[\"bash\",{\"command\":\"touch agent-wide\"}]]", &ex, &msg);
	run_until(&r, is_requested);
	assert_int_equal(approvals_resolve(ap, r.last_id, APPROVAL_AGENT, "test"), SB_OK);
	run_until(&r, is_done);
	assert_false(result_error(&r, 0));
	json_decref(r.results);
	json_decref(msg);
	ctx.session_key = "agent:main:elsewhere";
	memset(&r, 0, sizeof r);
	start_exec(&r, &ctx, "[[\"bash\",{\"command\":\"touch agent-wide-2\"}]]", &ex, &msg);
	run_until(&r, is_done);
	assert_int_equal(r.requested, 0);
	assert_false(result_error(&r, 0));
	json_decref(r.results);
	json_decref(msg);
	/* the same sender id through another account of the channel (a second
	 * Telegram bot, another Slack workspace) is another person: asked
	 * again; through the "default" account named as such, the same one */
	ctx.account = "second-bot";
	memset(&r, 0, sizeof r);
	start_exec(&r, &ctx, "[[\"bash\",{\"command\":\"touch by-42-elsewhere\"}]]", &ex, &msg);
	run_until(&r, is_requested);
	if (r.done)
		fail_msg("42 on another account ran it without being asked: %s",
		         result_text(&r, 0));
	assert_int_equal(r.requested, 1);
	assert_int_equal(approvals_resolve(ap, r.last_id, APPROVAL_DENY, "test"), SB_OK);
	run_until(&r, is_done);
	assert_true(result_error(&r, 0));
	json_decref(r.results);
	json_decref(msg);
	ctx.account = "default";
	memset(&r, 0, sizeof r);
	start_exec(&r, &ctx, "[[\"bash\",{\"command\":\"touch agent-wide-3\"}]]", &ex, &msg);
	run_until(&r, is_done);
	assert_int_equal(r.requested, 0);
	assert_false(result_error(&r, 0));
	json_decref(r.results);
	json_decref(msg);
	ctx.account = NULL;
	p.sender = "43";
	memset(&r, 0, sizeof r);
	start_exec(&r, &ctx, "[[\"bash\",{\"command\":\"touch by-another\"}]]", &ex, &msg);
	run_until(&r, is_requested);
	if (r.done)
		fail_msg("another sender ran it without being asked: %s", result_text(&r, 0));
	assert_int_equal(r.requested, 1);
	assert_int_equal(approvals_resolve(ap, r.last_id, APPROVAL_DENY, "test"), SB_OK);
	run_until(&r, is_done);
	json_decref(r.results);
	json_decref(msg);
	/* a timeout denies (a sender the agent-wide approval does not cover) */
	p.sender = "44";
	p.approval_timeout_ms = 1000;
	memset(&r, 0, sizeof r);
	start_exec(&r, &ctx, "[[\"bash\",{\"command\":\"touch late\"}]]", &ex, &msg);
	run_until(&r, is_done);
	assert_int_equal(r.requested, 1);
	assert_string_equal(r.last_decision, "timeout");
	assert_true(result_error(&r, 0));
	assert_non_null(strstr(result_text(&r, 0), "did not answer"));
	json_decref(r.results);
	json_decref(msg);

	approvals_free(ap);
	uv_run(&fx.loop, UV_RUN_DEFAULT);
}

/* ---- a whole turn ---- */

struct turn_run {
	int done;
	enum turn_end end;
	json_t *messages;
};

static void on_turn_done(void *ud, const struct turn_result *res)
{
	struct turn_run *t = ud;

	t->done++;
	t->end = res->end;
	t->messages = json_deep_copy(res->messages);
}

static void test_denied_command_goes_back_to_the_model(void **state)
{
	static const struct models_options mopt = {
	    .backoff_base_ms = 5, .backoff_max_ms = 200, .cooldown_ms = {10000, 20000, 40000}};
	static const char *const chain[] = {"s/m"};
	struct permissions p;
	struct turn_options o;
	struct turn_run t;
	struct turn *turn;
	struct models *m = NULL;
	struct host host;
	const json_t *msg, *block;
	char path[PATH_MAX + 64];
	FILE *f;

	(void)state;
	snprintf(path, sizeof path, "%s/s.jsonl", fx.home);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs("{\"tool_calls\": [{\"name\": \"bash\", \"input\": {\"command\": \"sudo cat "
	      "/etc/shadow\"}}]}\n"
	      "{\"tool_calls\": [{\"name\": \"bash\", \"input\": {\"command\": \"cat a.txt\"}}]}\n"
	      "{\"text\": \"I read a.txt instead.\"}\n",
	      f);
	fclose(f);
	load("providers:\n  - {id: s, api: scripted, script: s.jsonl}\n"
	     "agents:\n  - {id: main, model: s/m}\n");
	memset(&host, 0, sizeof host);
	host.loop = &fx.loop;
	assert_int_equal(models_new(&m, fx.cfg->providers, fx.cfg->n_providers, &host, &mopt),
	                 SB_OK);
	perms_for(&p, true, false, "cli", NULL);
	memset(&o, 0, sizeof o);
	o.models = m;
	o.chain = chain;
	o.n_chain = 1;
	o.system = "test";
	o.user_text = "show me the password file";
	o.tool_ctx.loop = &fx.loop;
	o.tool_ctx.host = &host;
	o.tool_ctx.agent_id = "main";
	o.tool_ctx.session_key = "agent:main:t";
	o.tool_ctx.workspace = fx.ws;
	o.tool_ctx.timeout_ms = 10000;
	o.tool_ctx.perms = &p;
	o.max_turns = 10;
	memset(&t, 0, sizeof t);
	assert_int_equal(turn_start(&turn, &o, on_turn_done, &t), SB_OK);
	for (int i = 0; i < 20000 && !t.done; i++) {
		uv_run(&fx.loop, UV_RUN_NOWAIT);
		if (!t.done)
			usleep(1000);
	}
	assert_int_equal(t.done, 1);
	/* the loop did not abort: the model changed course and finished */
	assert_int_equal(t.end, TURN_END_TURN);
	/* user, tool_use, denied result, tool_use, result, final text */
	assert_int_equal(json_array_size(t.messages), 6);
	msg = json_array_get(t.messages, 2);
	block = json_array_get(json_object_get(msg, "content"), 0);
	assert_true(json_is_true(json_object_get(block, "is_error")));
	assert_non_null(strstr(json_string_value(json_object_get(block, "content")),
	                       "permission denied: refused: sudo is never allowed"));
	msg = json_array_get(t.messages, 3);
	block = json_array_get(json_object_get(msg, "content"), 0);
	assert_string_equal(
	    json_string_value(json_object_get(json_object_get(block, "input"), "command")),
	    "cat a.txt");
	msg = json_array_get(t.messages, 4);
	block = json_array_get(json_object_get(msg, "content"), 0);
	assert_false(json_is_true(json_object_get(block, "is_error")));
	assert_non_null(strstr(json_string_value(json_object_get(block, "content")), "line one"));
	json_decref(t.messages);
	models_free(m);
	uv_run(&fx.loop, UV_RUN_DEFAULT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_shell_parser),
	    cmocka_unit_test(test_hard_deny),
	    cmocka_unit_test(test_profiles_and_tools),
	    cmocka_unit_test(test_web_fetch_gate),
	    cmocka_unit_test(test_mcp_tools),
	    cmocka_unit_test(test_command_rules),
	    cmocka_unit_test(test_classifier_property),
	    cmocka_unit_test(test_paths),
	    cmocka_unit_test(test_paths_links_inside),
	    cmocka_unit_test(test_executor_gates),
	    cmocka_unit_test(test_executor_approvals),
	    cmocka_unit_test(test_denied_command_goes_back_to_the_model),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
