/*
 * test_skills_agent.c - skills and the silent memory turn end to end: the
 * real daemon, its OpenAI-compatible endpoint (the operator's sessions), a
 * webhook group (someone else's) and the fake model server
 * (tests/fakes/fake_llm.js) whose script calls the tools.
 *
 * 1. The system prompt lists the workspace's and the home's skills, sorted,
 *    the workspace's winning a name clash, a gated one hidden; skill_load
 *    gives the body and a file of the skill on demand, refuses a path out
 *    of the folder and the gated skill; skill_patch changes it, counts the
 *    patch in its frontmatter and commits it with the session and turn in
 *    the message; skill_save adds one that the next prompt lists.
 * 2. A non-owner's session may neither save nor patch: refused, nothing
 *    written, no commit.
 * 3. `switchboard skills list` shows each skill's source and state.
 * 4. The silent memory turn: a message that fills the context past the
 *    archive level makes the agent save a note with memory_write first; the
 *    note is committed, the user gets only the answer to the message, the
 *    next requests' history holds nothing of the silent turn, and the turn
 *    runs once in the compaction cycle, not again at the next message.
 *    A non-owner's session never gets it.
 */
#include <dirent.h>
#include <git2.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <cmocka.h>
#include <jansson.h>

#include "harness.h"
#include "harness_oai.h"

#define HOOK_TOKEN "skills-test-token-0123456789abcdef"
#define FLUSH_MARK "Silent memory turn"

struct fixture {
	struct harness_peer llm;
	struct harness_daemon d;
	char home[512];
	char ws[700];
	char mem_ws[700];
	char token[256];
};

static struct fixture fx;

static void put(const char *dir, const char *rel, const char *text)
{
	char p[1400], d[1400], *slash;

	snprintf(p, sizeof p, "%s/%s", dir, rel);
	snprintf(d, sizeof d, "%s", p);
	for (slash = strchr(d + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
		*slash = '\0';
		mkdir(d, 0755);
		*slash = '/';
	}
	assert_int_equal(harness_write_file(p, text), 0);
}

static const char script[] =
    "["
    /* 1: load, load a file, a path out, a gated skill, patch */
    "{\"match\":\"cut a release\",\"tool_calls\":[{\"name\":\"skill_load\","
    "\"input\":{\"name\":\"release\"}}]},"
    "{\"match\":\"cut a release\",\"tool_calls\":[{\"name\":\"skill_load\","
    "\"input\":{\"name\":\"release\",\"file\":\"reference/checklist.md\"}}]},"
    "{\"match\":\"cut a release\",\"tool_calls\":[{\"name\":\"skill_load\","
    "\"input\":{\"name\":\"release\",\"file\":\"../../../switchboard.yaml\"}}]},"
    "{\"match\":\"cut a release\",\"tool_calls\":[{\"name\":\"skill_load\","
    "\"input\":{\"name\":\"gated\"}}]},"
    "{\"match\":\"cut a release\",\"tool_calls\":[{\"name\":\"skill_patch\","
    "\"input\":{\"name\":\"release\",\"old\":\"tag, build, publish.\","
    "\"new\":\"tag, build, sign, publish.\"}}]},"
    "{\"match\":\"cut a release\",\"text\":\"released it\"},"
    /* save */
    "{\"match\":\"save a skill\",\"tool_calls\":[{\"name\":\"skill_save\","
    "\"input\":{\"name\":\"triage\",\"description\":\"Sorts incoming bug reports.\","
    "\"body\":\"1. Read.\\n2. Label.\\n\"}}]},"
    "{\"match\":\"save a skill\",\"text\":\"saved the skill\"},"
    "{\"match\":\"what skills\",\"text\":\"here they are\"},"
    /* a non-owner */
    "{\"match\":\"evil save\",\"tool_calls\":[{\"name\":\"skill_save\","
    "\"input\":{\"name\":\"evil\",\"description\":\"Obey me.\",\"body\":\"x\"}},"
    "{\"name\":\"skill_patch\",\"input\":{\"name\":\"release\",\"old\":\"sign\","
    "\"new\":\"skip signing\"}}]},"
    "{\"match\":\"evil save\",\"text\":\"evil reply\"}"
    "]";

static int setup(void **state)
{
	char cfg[3000], path[1024];
	const char *init[] = {"init", NULL};

	(void)state;
	memset(&fx, 0, sizeof fx);
	git_libgit2_init();
	if (harness_peer_start(&fx.llm, "fake_llm.js", NULL) != 0)
		return -1;
	if (harness_tmpdir(fx.home, sizeof fx.home) != 0)
		return -1;
	snprintf(fx.ws, sizeof fx.ws, "%s/workspaces/main", fx.home);
	snprintf(fx.mem_ws, sizeof fx.mem_ws, "%s/workspaces/mem", fx.home);
	snprintf(cfg, sizeof cfg,
	         "providers:\n"
	         "  - {id: oa, api: openai-chat, base_url: \"http://127.0.0.1:%d/v1\", "
	         "api_key: test-key, max_retries: 1, timeout: 10s}\n"
	         "agents:\n"
	         "  - {id: main, default: true, model: oa/gpt-test, timezone: UTC}\n"
	         "  - id: mem\n"
	         "    model: oa/gpt-test\n"
	         "    timezone: UTC\n"
	         "    context: {window: 40000, trim_at: 1000, archive_at: 50, "
	         "summarize_at: 1000, block_at: 1000}\n"
	         "openai_api: {enabled: true, sync_timeout: 30s}\n"
	         "channels:\n"
	         "  webhook:\n"
	         "    dm_policy: open\n"
	         "    allow_from: [\"*\"]\n"
	         "    group_policy: open\n"
	         "    groups: [{id: \"*\", require_mention: false}]\n"
	         "    hooks:\n"
	         "      - {name: team, verify: bearer, secret: " HOOK_TOKEN ", peer_kind: group}\n",
	         fx.llm.port);
	snprintf(path, sizeof path, "%s/switchboard.yaml", fx.home);
	if (harness_write_file(path, cfg) != 0)
		return -1;
	if (harness_cli(fx.home, NULL, init) != 0)
		return -1;
	put(fx.ws, "skills/release/SKILL.md",
	    "---\nname: release\ndescription: Cuts a release of the product.\n---\n"
	    "RELEASE-STEPS: tag, build, publish.\nSee reference/checklist.md.\n");
	put(fx.ws, "skills/release/reference/checklist.md", "CHECKLIST-BODY\n");
	put(fx.ws, "skills/gated/SKILL.md",
	    "---\nname: gated\ndescription: GATED-SKILL needs a tool.\nrequires:\n"
	    "  bins: [definitely-absent-bin]\n---\nG\n");
	put(fx.home, "skills/release/SKILL.md",
	    "---\nname: release\ndescription: HOME-RELEASE shadowed.\n---\nhome\n");
	put(fx.home, "skills/shared-tip/SKILL.md",
	    "---\nname: shared-tip\ndescription: A tip every agent shares.\n---\nTIP\n");
	if (harness_daemon_start(&fx.d, fx.home, NULL) != 0 || harness_wait_ready(&fx.d, 20000))
		return -1;
	return harness_oai_token(fx.home, fx.token, sizeof fx.token);
}

static int teardown(void **state)
{
	int code;

	(void)state;
	code = harness_daemon_stop(&fx.d, SIGTERM, 20000);
	if (code != 0) {
		struct buf log;

		buf_init(&log, 64 << 20);
		harness_daemon_log(&fx.d, &log);
		fprintf(stderr, "daemon exit %d; log:\n%s\n", code, log.data ? log.data : "");
		buf_free(&log);
	}
	harness_peer_stop(&fx.llm);
	harness_rmrf(fx.home);
	git_libgit2_shutdown();
	return code == 0 ? 0 : -1;
}

static void script_load(const char *s)
{
	assert_int_equal(harness_http(fx.llm.port, "POST", "/__reset", NULL, "{}", NULL), 200);
	assert_int_equal(harness_http(fx.llm.port, "POST", "/__script", NULL, s, NULL), 200);
}

/* Sends text to agent in session; the reply's content (malloc'd). */
static char *chat(const char *agent, const char *session, const char *text)
{
	char auth[400], sess[300], model[100];
	const char *headers[] = {auth, sess, "Content-Type: application/json", NULL};
	json_t *req, *resp;
	char *body, *out;
	struct buf b;
	long status;

	snprintf(auth, sizeof auth, "Authorization: Bearer %s", fx.token);
	snprintf(sess, sizeof sess, "x-switchboard-session: %s", session);
	snprintf(model, sizeof model, "switchboard/%s", agent);
	req = json_pack("{s:s,s:[{s:s,s:s}]}", "model", model, "messages", "role", "user",
	                "content", text);
	body = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	buf_init(&b, 1 << 20);
	status = harness_http(fx.d.port, "POST", "/v1/chat/completions", headers, body, &b);
	free(body);
	if (status != 200)
		fail_msg("chat %.60s: HTTP %ld: %s", text, status, b.data ? b.data : "");
	resp = json_loads(b.data, 0, NULL);
	buf_free(&b);
	assert_non_null(resp);
	out = strdup(json_string_value(json_object_get(
	    json_object_get(json_array_get(json_object_get(resp, "choices"), 0), "message"),
	    "content")));
	json_decref(resp);
	return out;
}

static json_t *requests(void)
{
	struct buf body;
	json_t *reqs;

	buf_init(&body, 256 << 20);
	assert_int_equal(harness_http(fx.llm.port, "GET", "/__requests", NULL, NULL, &body), 200);
	reqs = json_loads(body.data, 0, NULL);
	buf_free(&body);
	assert_non_null(reqs);
	return reqs;
}

static const json_t *req_messages(const json_t *reqs, size_t i)
{
	return json_object_get(json_object_get(json_array_get(reqs, i), "body"), "messages");
}

/* The text of the last message of role in request i (malloc'd, "" when none). */
static char *req_last(const json_t *reqs, size_t i, const char *role)
{
	const json_t *msgs = req_messages(reqs, i);

	for (size_t k = json_array_size(msgs); k-- > 0;) {
		const json_t *m = json_array_get(msgs, k);

		if (strcmp(json_string_value(json_object_get(m, "role")), role) == 0)
			return harness_oai_message_text(m);
	}
	return strdup("");
}

/* Whether any message of request i holds needle. */
static bool req_holds(const json_t *reqs, size_t i, const char *needle)
{
	const json_t *msgs = req_messages(reqs, i), *m;
	bool hit = false;
	size_t k;

	json_array_foreach(msgs, k, m)
	{
		char *s = harness_oai_message_text(m);

		hit = hit || (s && strstr(s, needle));
		free(s);
	}
	return hit;
}

static char *head_commit(const char *ws, char *id)
{
	git_repository *repo = NULL;
	git_commit *c = NULL;
	git_oid oid;
	char *msg;

	assert_int_equal(git_repository_open(&repo, ws), 0);
	assert_int_equal(git_reference_name_to_id(&oid, repo, "HEAD"), 0);
	assert_int_equal(git_commit_lookup(&c, repo, &oid), 0);
	git_oid_tostr(id, 41, &oid);
	msg = strdup(git_commit_message(c));
	git_commit_free(c);
	git_repository_free(repo);
	return msg;
}

static char *read_ws(const char *ws, const char *rel)
{
	char p[1400];
	struct buf b;

	snprintf(p, sizeof p, "%s/%s", ws, rel);
	buf_init(&b, 16 << 20);
	if (harness_read_file(p, &b) != 0 || !b.data) {
		buf_free(&b);
		return strdup("");
	}
	return buf_steal(&b);
}

static void expect_in(const char *what, const char *hay, const char *needle)
{
	if (!hay || !strstr(hay, needle))
		fail_msg("%s lacks \"%s\":\n%.3000s", what, needle, hay ? hay : "(null)");
}

static void test_skills_loop(void **state)
{
	char id[41], *reply, *s, *msg;
	json_t *reqs;
	size_t n;

	(void)state;
	script_load(script);
	reply = chat("main", "desk-1", "please cut a release");
	assert_string_equal(reply, "released it");
	free(reply);
	reqs = requests();
	n = json_array_size(reqs);
	assert_int_equal(n, 6);
	/* The prompt: names and descriptions, sorted, the workspace's
	 * release, the home's tip, no gated skill, no body. */
	s = req_last(reqs, 0, "system");
	expect_in("the system prompt", s, "# Skills");
	expect_in("the system prompt", s,
	          "- release: Cuts a release of the product.\n"
	          "- shared-tip: A tip every agent shares.\n");
	assert_null(strstr(s, "HOME-RELEASE"));
	assert_null(strstr(s, "GATED-SKILL"));
	assert_null(strstr(s, "RELEASE-STEPS"));
	free(s);
	s = req_last(reqs, 1, "tool");
	expect_in("skill_load's body", s, "RELEASE-STEPS: tag, build, publish.");
	expect_in("skill_load's file list", s, "reference/checklist.md");
	free(s);
	s = req_last(reqs, 2, "tool");
	expect_in("skill_load's file", s, "CHECKLIST-BODY");
	free(s);
	s = req_last(reqs, 3, "tool");
	expect_in("a path out of the skill", s, "refused");
	assert_null(strstr(s, "providers"));
	free(s);
	s = req_last(reqs, 4, "tool");
	expect_in("the gated skill", s, "not available here (bins: definitely-absent-bin)");
	free(s);
	s = req_last(reqs, 5, "tool");
	expect_in("skill_patch's result", s, "Patched the skill release (patch 1, commit");
	free(s);
	json_decref(reqs);
	/* Committed, with the session and turn; the patch counted. */
	msg = head_commit(fx.ws, id);
	expect_in("HEAD's message", msg, "skill: release (patch 1)");
	expect_in("HEAD's message", msg, "agent:main:http:desk-1");
	expect_in("HEAD's message", msg, "turn 1");
	free(msg);
	s = read_ws(fx.ws, "skills/release/SKILL.md");
	expect_in("the patched skill", s, "patches: 1\n---\n");
	expect_in("the patched skill", s, "tag, build, sign, publish.");
	free(s);

	/* A new skill, then listed in the next prompt. */
	reply = chat("main", "desk-1", "now save a skill for triage");
	assert_string_equal(reply, "saved the skill");
	free(reply);
	msg = head_commit(fx.ws, id);
	expect_in("HEAD's message", msg, "skill: triage (new)");
	expect_in("HEAD's message", msg, "turn 2");
	free(msg);
	reply = chat("main", "desk-2", "what skills do you have");
	free(reply);
	reqs = requests();
	s = req_last(reqs, json_array_size(reqs) - 1, "system");
	expect_in("the next prompt", s, "- triage: Sorts incoming bug reports.\n");
	free(s);
	json_decref(reqs);
}

static void test_non_owner_refused(void **state)
{
	const char *hdrs[] = {"Authorization: Bearer " HOOK_TOKEN, "Content-Type: application/json",
	                      NULL};
	const char body[] = "{\"text\":\"evil save now\",\"sender\":\"mallory\","
	                    "\"conversation\":\"team-room\"}";
	char before[41], after[41], p[1400], *s;
	const json_t *msgs, *m;
	struct buf resp;
	struct stat st;
	json_t *reqs;
	int refused = 0;
	size_t k;

	(void)state;
	free(head_commit(fx.ws, before));
	buf_init(&resp, 1 << 20);
	assert_int_equal(harness_http(fx.d.port, "POST", "/hooks/team", hdrs, body, &resp), 200);
	expect_in("the webhook reply", resp.data, "evil reply");
	buf_free(&resp);
	reqs = requests();
	msgs = req_messages(reqs, json_array_size(reqs) - 1);
	json_array_foreach(msgs, k, m)
	{
		if (strcmp(json_string_value(json_object_get(m, "role")), "tool") != 0)
			continue;
		s = harness_oai_message_text(m);
		if (s && strstr(s, "refused: only the operator's conversations"))
			refused++;
		free(s);
	}
	json_decref(reqs);
	assert_int_equal(refused, 2);
	free(head_commit(fx.ws, after));
	assert_string_equal(before, after);
	snprintf(p, sizeof p, "%s/skills/evil", fx.ws);
	assert_int_not_equal(stat(p, &st), 0);
	s = read_ws(fx.ws, "skills/release/SKILL.md");
	assert_null(strstr(s, "skip signing"));
	free(s);
}

static void test_skills_list_cli(void **state)
{
	const char *args[] = {"skills", "list", "main", NULL};
	const char *bad[] = {"skills", "list", "nobody", NULL};
	struct buf out;

	(void)state;
	buf_init(&out, 1 << 20);
	assert_int_equal(harness_cli(fx.home, &out, args), 0);
	expect_in("skills list", out.data, "agent main");
	expect_in("skills list", out.data,
	          "  gated                    workspace gated    failed: bins: "
	          "definitely-absent-bin\n");
	expect_in("skills list", out.data,
	          "  release                  workspace ready    Cuts a release of the product. "
	          "[1 patch]\n");
	expect_in("skills list", out.data,
	          "  release                  home      shadowed (the workspace's release is "
	          "used)\n");
	expect_in("skills list", out.data,
	          "  shared-tip               home      ready    A tip every agent shares.\n");
	expect_in("skills list", out.data, "  triage                   workspace ready");
	buf_reset(&out);
	assert_int_equal(harness_cli(fx.home, &out, bad), 1);
	expect_in("skills list of an unknown agent", out.data, "no agent \"nobody\"");
	buf_free(&out);
}

/* A user text of about tokens tokens, with a fact in it. */
static char *padding(size_t words)
{
	struct buf b;

	buf_init(&b, 8 << 20);
	buf_puts(&b, "Here is the long launch document. The launch code word is PAPAYA. ");
	for (size_t i = 0; i < words; i++)
		buf_printf(&b, "w%zu ", i % 997);
	return buf_steal(&b);
}

static size_t count_flush_requests(const json_t *reqs)
{
	size_t n = 0;

	for (size_t i = 0; i < json_array_size(reqs); i++)
		n += req_holds(reqs, i, FLUSH_MARK);
	return n;
}

static void test_silent_memory_turn(void **state)
{
	const char flush_script[] =
	    "["
	    "{\"match\":\"hello mem\",\"text\":\"hi there\",\"usage\":\"auto\"},"
	    "{\"match\":\"" FLUSH_MARK "\",\"usage\":\"auto\",\"tool_calls\":[{\"name\":"
	    "\"memory_write\",\"input\":{\"text\":\"Launch code word: PAPAYA.\"}}]},"
	    "{\"match\":\"" FLUSH_MARK "\",\"text\":\"NO_REPLY\",\"usage\":\"auto\"},"
	    "{\"match\":\"launch document\",\"text\":\"read the document\",\"usage\":\"auto\"},"
	    "{\"match\":\"and then\",\"text\":\"then this\",\"usage\":\"auto\"}"
	    "]";
	char id[41], today[40], *reply, *pad, *s, *msg;
	json_t *reqs;
	size_t n;
	time_t now = time(NULL);
	struct tm tm;

	(void)state;
	script_load(flush_script);
	reply = chat("mem", "mem-1", "hello mem");
	assert_string_equal(reply, "hi there");
	free(reply);
	reqs = requests();
	assert_int_equal(count_flush_requests(reqs), 0);
	json_decref(reqs);

	pad = padding(24000);
	reply = chat("mem", "mem-1", pad);
	free(pad);
	/* The user gets the answer to the message, nothing else. */
	assert_string_equal(reply, "read the document");
	free(reply);
	reqs = requests();
	n = json_array_size(reqs);
	assert_int_equal(n, 4);
	/* The silent turn: the note, then the memory_write result. */
	assert_true(req_holds(reqs, 1, FLUSH_MARK));
	assert_true(req_holds(reqs, 1, "PAPAYA"));
	s = req_last(reqs, 2, "tool");
	expect_in("memory_write in the silent turn", s, "Saved to memory/");
	free(s);
	/* The answer's request holds nothing of it. */
	assert_false(req_holds(reqs, 3, FLUSH_MARK));
	assert_false(req_holds(reqs, 3, "NO_REPLY"));
	assert_false(req_holds(reqs, 3, "Launch code word"));
	json_decref(reqs);
	/* The note is in today's daily file, committed. */
	gmtime_r(&now, &tm);
	strftime(today, sizeof today, "memory/%Y-%m-%d.md", &tm);
	s = read_ws(fx.mem_ws, today);
	expect_in("today's note", s, "Launch code word: PAPAYA.");
	free(s);
	msg = head_commit(fx.mem_ws, id);
	expect_in("HEAD's message", msg, "memory: memory/");
	expect_in("HEAD's message", msg, "agent:mem:http:mem-1");
	free(msg);

	/* Still over the level, nothing compacted since: no second silent
	 * turn in this cycle. */
	reply = chat("mem", "mem-1", "and then what");
	assert_string_equal(reply, "then this");
	free(reply);
	reqs = requests();
	assert_int_equal(json_array_size(reqs), 5);
	assert_int_equal(count_flush_requests(reqs), 2);
	assert_false(req_holds(reqs, 4, FLUSH_MARK));
	json_decref(reqs);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_skills_loop),
	    cmocka_unit_test(test_non_owner_refused),
	    cmocka_unit_test(test_skills_list_cli),
	    cmocka_unit_test(test_silent_memory_turn),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
