/*
 * test_workspaces.c - versioned workspaces end to end, with the real daemon
 * and the fake model server (tests/fakes/fake_llm.js), which records every
 * system prompt it gets:
 *
 *   - BOOT.md runs once at start as its own session (agent:main:boot) and
 *     its reply is put in the outbox for the target its first line names;
 *   - SOUL.md edited and committed while the daemon runs: the next reply's
 *     transcript entry carries the new commit id and SOUL.md hash, the one
 *     before it the old ones; the model saw the new text at once (hot
 *     reload, no restart); an uncommitted edit is stamped dirty;
 *   - MEMORY.md goes to the main session only;
 *   - `switchboard workspace status|log|init`, text and --json, and misuse;
 *   - a clean exit (no leaks under the sanitizer build).
 */
#include <dirent.h>
#include <setjmp.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <git2.h>
#include <jansson.h>
#include <sodium.h>

#include "agents/transcript.h"
#include "harness.h"
#include "harness_oai.h"

#define OLD_SOUL "# SOUL\nYou are the old soul: terse.\n"
#define NEW_SOUL "# SOUL\nYou are the new soul: cheerful.\n"
#define HOOK_TOKEN "workspace-test-token-0123456789"
#define MEMORY "# MEMORY\nThe operator's cat is called Pixel.\n"

struct fixture {
	struct harness_peer llm;
	struct harness_daemon d;
	char home[512];
	char ws[700];
	char token[256];
};

static struct fixture fx;

static void ws_put(const char *name, const char *text)
{
	char path[1024];

	snprintf(path, sizeof path, "%s/%s", fx.ws, name);
	assert_int_equal(harness_write_file(path, text), 0);
}

/* Commits every file of the workspace; the new id into out (41 bytes). */
static void commit_all(char *out)
{
	git_repository *repo = NULL;
	git_index *idx = NULL;
	git_tree *tree = NULL;
	git_commit *parent = NULL;
	git_signature *sig = NULL;
	git_oid tree_id, parent_id, id;

	assert_int_equal(git_repository_open(&repo, fx.ws), 0);
	assert_int_equal(git_repository_index(&idx, repo), 0);
	assert_int_equal(git_index_add_all(idx, NULL, 0, NULL, NULL), 0);
	assert_int_equal(git_index_write(idx), 0);
	assert_int_equal(git_index_write_tree(&tree_id, idx), 0);
	assert_int_equal(git_tree_lookup(&tree, repo, &tree_id), 0);
	assert_int_equal(git_reference_name_to_id(&parent_id, repo, "HEAD"), 0);
	assert_int_equal(git_commit_lookup(&parent, repo, &parent_id), 0);
	assert_int_equal(git_signature_now(&sig, "Operator", "operator@localhost"), 0);
	assert_int_equal(
	    git_commit_create_v(&id, repo, "HEAD", sig, sig, NULL, "edit", tree, 1, parent), 0);
	git_oid_tostr(out, 41, &id);
	git_signature_free(sig);
	git_commit_free(parent);
	git_tree_free(tree);
	git_index_free(idx);
	git_repository_free(repo);
}

static void blake_hex(const char *text, char *out)
{
	unsigned char h[32];

	crypto_generichash(h, sizeof h, (const unsigned char *)text, strlen(text), NULL, 0);
	sodium_bin2hex(out, 65, h, sizeof h);
}

static int setup(void **state)
{
	char cfg[2048], c[41];
	const char *init[] = {"init", NULL};
	const char script[] =
	    "[{\"match\":\"start-up instructions\",\"text\":\"Boot check done: all quiet.\"},"
	    " {\"text\":\"first reply\"}, {\"text\":\"second reply\"},"
	    " {\"text\":\"side reply\"}, {\"text\":\"dirty reply\"},"
	    " {\"match\":\"hello group\",\"text\":\"group reply\"}]";

	(void)state;
	memset(&fx, 0, sizeof fx);
	git_libgit2_init();
	if (harness_peer_start(&fx.llm, "fake_llm.js", NULL) != 0)
		return -1;
	if (harness_http(fx.llm.port, "POST", "/__script", NULL, script, NULL) != 200)
		return -1;
	if (harness_tmpdir(fx.home, sizeof fx.home) != 0)
		return -1;
	snprintf(fx.ws, sizeof fx.ws, "%s/workspaces/main", fx.home);
	snprintf(cfg, sizeof cfg,
	         "providers:\n"
	         "  - {id: oa, api: openai-chat, base_url: \"http://127.0.0.1:%d/v1\", "
	         "api_key: test-key, max_retries: 1, timeout: 10s}\n"
	         "agents:\n"
	         "  - {id: main, default: true, model: oa/gpt-test}\n"
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
	{
		char path[1024];

		snprintf(path, sizeof path, "%s/switchboard.yaml", fx.home);
		if (harness_write_file(path, cfg) != 0)
			return -1;
	}
	/* init scaffolds the workspace and makes its first commit */
	if (harness_cli(fx.home, NULL, init) != 0)
		return -1;
	ws_put("SOUL.md", OLD_SOUL);
	ws_put("MEMORY.md", MEMORY);
	ws_put("BOOT.md", "deliver: webhook:default:boot-room\n"
	                  "Check that the workspace is in order and say so in one line.\n");
	commit_all(c);
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

/* Every entry of the transcripts of session_key (in file order; new ref). */
static json_t *entries_of(const char *session_key)
{
	char dir[1024], path[2048];
	json_t *all = json_array();
	struct dirent *de;
	DIR *d;

	snprintf(dir, sizeof dir, "%s/agents/main/sessions", fx.home);
	d = opendir(dir);
	assert_non_null(d);
	while ((de = readdir(d))) {
		struct transcript_loaded tl;

		if (!strstr(de->d_name, ".jsonl"))
			continue;
		snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
		if (transcript_load(path, &tl) != 0)
			continue;
		if (strcmp(json_string_value(json_object_get(tl.header, "key")), session_key) == 0)
			json_array_extend(all, tl.entries);
		transcript_loaded_free(&tl);
	}
	closedir(d);
	return all;
}

/* The assistant message entry whose text is text (borrowed from entries). */
static json_t *reply_entry(json_t *entries, const char *text)
{
	size_t i;
	json_t *e;

	json_array_foreach(entries, i, e)
	{
		json_t *m = json_object_get(e, "message");
		char *t;
		bool hit;

		if (!m || strcmp(json_string_value(json_object_get(m, "role")), "assistant") != 0)
			continue;
		t = harness_oai_message_text(m);
		hit = t && strcmp(t, text) == 0;
		free(t);
		if (hit)
			return e;
	}
	return NULL;
}

/* The workspace events of entries, in order (new reference). */
static json_t *workspace_events(json_t *entries)
{
	json_t *out = json_array(), *e;
	size_t i;

	json_array_foreach(entries, i, e)
	{
		const char *ev = json_string_value(json_object_get(e, "event"));

		if (ev && strcmp(ev, "workspace") == 0)
			json_array_append(out, json_object_get(e, "workspace"));
	}
	return out;
}

static const char *sget(const json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));

	return s ? s : "";
}

/* One chat completion in session; asserts the reply. */
static void chat(const char *session, const char *text, const char *want)
{
	char auth[400], sess[300], body[512];
	const char *headers[] = {auth, sess, "Content-Type: application/json", NULL};
	struct buf resp;
	long status;

	snprintf(auth, sizeof auth, "Authorization: Bearer %s", fx.token);
	snprintf(sess, sizeof sess, "x-switchboard-session: %s", session);
	snprintf(body, sizeof body,
	         "{\"model\":\"switchboard/main\",\"messages\":[{\"role\":\"user\","
	         "\"content\":\"%s\"}]}",
	         text);
	buf_init(&resp, 1 << 20);
	status = harness_http(fx.d.port, "POST", "/v1/chat/completions", headers, body, &resp);
	if (status != 200 || !strstr(resp.data ? resp.data : "", want))
		fail_msg("chat %s: HTTP %ld: %s", text, status, resp.data ? resp.data : "");
	buf_free(&resp);
}

/* The system prompt of the last request the fake model got (malloc'd). */
static char *last_system_prompt(void)
{
	struct buf body;
	json_t *reqs, *last, *msgs;
	char *out = NULL;

	buf_init(&body, 64 << 20);
	assert_int_equal(harness_http(fx.llm.port, "GET", "/__requests", NULL, NULL, &body), 200);
	reqs = json_loads(body.data, 0, NULL);
	buf_free(&body);
	assert_true(json_array_size(reqs) > 0);
	last = json_array_get(reqs, json_array_size(reqs) - 1);
	msgs = json_object_get(json_object_get(last, "body"), "messages");
	for (size_t i = 0; i < json_array_size(msgs); i++) {
		json_t *m = json_array_get(msgs, i);

		if (strcmp(sget(m, "role"), "system") == 0) {
			out = harness_oai_message_text(m);
			break;
		}
	}
	json_decref(reqs);
	assert_non_null(out);
	return out;
}

static void test_boot(void **state)
{
	char db_path[1024];
	json_t *entries = NULL, *reply = NULL;
	sqlite3 *db;
	bool queued = false;

	(void)state;
	/* the boot turn runs by itself after start, in its own session */
	for (int i = 0; i < 300 && !reply; i++) {
		json_decref(entries);
		entries = entries_of("agent:main:boot");
		reply = reply_entry(entries, "Boot check done: all quiet.");
		if (!reply)
			usleep(50000);
	}
	assert_non_null(reply);
	{
		json_t *events = workspace_events(entries);

		assert_int_equal(json_array_size(events), 1);
		assert_string_equal(sget(json_array_get(events, 0), "commit"),
		                    sget(json_object_get(reply, "workspace"), "commit"));
		json_decref(events);
	}
	/* the boot instructions reached the model, without the deliver line */
	{
		json_t *user = NULL, *e;
		size_t i;
		char *t;

		json_array_foreach(entries, i, e)
		{
			json_t *m = json_object_get(e, "message");

			if (m && strcmp(sget(m, "role"), "user") == 0)
				user = m;
		}
		assert_non_null(user);
		t = harness_oai_message_text(user);
		assert_non_null(strstr(t, "Check that the workspace is in order"));
		assert_null(strstr(t, "deliver:"));
		free(t);
	}
	json_decref(entries);
	/* and its reply went to the outbox, for the target BOOT.md names */
	snprintf(db_path, sizeof db_path, "%s/state.db", fx.home);
	assert_int_equal(sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	sqlite3_busy_timeout(db, 5000);
	for (int i = 0; i < 300 && !queued; i++) {
		sqlite3_stmt *st;

		assert_int_equal(
		    sqlite3_prepare_v2(db,
		                       "SELECT channel, account, target, payload FROM "
		                       "outbox WHERE idempotency_key LIKE 'boot:main:%'",
		                       -1, &st, NULL),
		    SQLITE_OK);
		if (sqlite3_step(st) == SQLITE_ROW) {
			assert_string_equal((const char *)sqlite3_column_text(st, 0), "webhook");
			assert_string_equal((const char *)sqlite3_column_text(st, 1), "default");
			assert_string_equal((const char *)sqlite3_column_text(st, 2), "boot-room");
			assert_non_null(strstr((const char *)sqlite3_column_text(st, 3),
			                       "Boot check done: all quiet."));
			queued = true;
		}
		sqlite3_finalize(st);
		if (!queued)
			usleep(50000);
	}
	sqlite3_close(db);
	assert_true(queued);
}

static void test_versions_follow_commits(void **state)
{
	char c1[41], c2[41], old_hex[65], new_hex[65], *sys;
	json_t *entries, *r1, *r2, *events, *w;

	(void)state;
	blake_hex(OLD_SOUL, old_hex);
	blake_hex(NEW_SOUL, new_hex);
	/* HEAD now: the commit made in setup */
	{
		git_repository *repo;
		git_oid oid;

		assert_int_equal(git_repository_open(&repo, fx.ws), 0);
		assert_int_equal(git_reference_name_to_id(&oid, repo, "HEAD"), 0);
		git_oid_tostr(c1, sizeof c1, &oid);
		git_repository_free(repo);
	}

	chat("agent:main:main", "hello one", "first reply");
	sys = last_system_prompt();
	assert_non_null(strstr(sys, "You are the old soul: terse."));
	assert_non_null(strstr(sys, "Pixel")); /* MEMORY.md: the main session */
	free(sys);

	/* edit and commit SOUL.md while the daemon runs */
	ws_put("SOUL.md", NEW_SOUL);
	commit_all(c2);
	assert_string_not_equal(c1, c2);

	chat("agent:main:main", "hello two", "second reply");
	sys = last_system_prompt();
	assert_non_null(strstr(sys, "You are the new soul: cheerful."));
	assert_null(strstr(sys, "old soul"));
	free(sys);

	entries = entries_of("agent:main:main");
	r1 = reply_entry(entries, "first reply");
	r2 = reply_entry(entries, "second reply");
	assert_non_null(r1);
	assert_non_null(r2);
	assert_string_equal(sget(json_object_get(r1, "workspace"), "commit"), c1);
	assert_string_equal(sget(json_object_get(r2, "workspace"), "commit"), c2);
	assert_true(json_is_false(json_object_get(json_object_get(r1, "workspace"), "dirty")));
	assert_true(json_is_false(json_object_get(json_object_get(r2, "workspace"), "dirty")));
	assert_string_not_equal(sget(json_object_get(r1, "workspace"), "hash"),
	                        sget(json_object_get(r2, "workspace"), "hash"));
	/* the per-turn events carry every file's hash */
	events = workspace_events(entries);
	assert_int_equal(json_array_size(events), 2);
	w = json_array_get(events, 0);
	assert_string_equal(sget(w, "commit"), c1);
	assert_string_equal(sget(json_object_get(w, "files"), "SOUL.md"), old_hex);
	assert_true(json_is_string(json_object_get(json_object_get(w, "files"), "MEMORY.md")));
	assert_string_equal(sget(w, "hash"), sget(json_object_get(r1, "workspace"), "hash"));
	w = json_array_get(events, 1);
	assert_string_equal(sget(w, "commit"), c2);
	assert_string_equal(sget(json_object_get(w, "files"), "SOUL.md"), new_hex);
	json_decref(events);
	json_decref(entries);

	/* another session of the agent: no MEMORY.md */
	chat("side", "hello side", "side reply");
	sys = last_system_prompt();
	assert_null(strstr(sys, "Pixel"));
	assert_non_null(strstr(sys, "new soul"));
	free(sys);
	entries = entries_of("agent:main:http:side");
	events = workspace_events(entries);
	assert_int_equal(json_array_size(events), 1);
	assert_null(
	    json_object_get(json_object_get(json_array_get(events, 0), "files"), "MEMORY.md"));
	json_decref(events);
	json_decref(entries);

	/* an edit not committed: same commit, dirty */
	ws_put("USER.md", "# USER\nThe operator prefers short answers.\n");
	chat("agent:main:main", "hello three", "dirty reply");
	entries = entries_of("agent:main:main");
	r1 = reply_entry(entries, "dirty reply");
	assert_non_null(r1);
	assert_string_equal(sget(json_object_get(r1, "workspace"), "commit"), c2);
	assert_true(json_is_true(json_object_get(json_object_get(r1, "workspace"), "dirty")));
	json_decref(entries);
}

static void test_cli(void **state)
{
	const char *status[] = {"workspace", "status", "main", NULL};
	const char *status_json[] = {"workspace", "status", "--json", "main", NULL};
	const char *log_text[] = {"workspace", "log", "main", NULL};
	const char *log_json[] = {"workspace", "log", "--json", "main", NULL};
	const char *no_agent[] = {"workspace", "status", NULL};
	const char *unknown[] = {"workspace", "status", "nobody", NULL};
	const char *bad_verb[] = {"workspace", "frobnicate", NULL};
	const char *help[] = {"workspace", "--help", NULL};
	char c2[41], soul_hex[65], dir[1024];
	struct buf out;
	json_t *j, *files, *v;
	size_t i;
	int clean = 0, dirty = 0;

	(void)state;
	{
		git_repository *repo;
		git_oid oid;

		assert_int_equal(git_repository_open(&repo, fx.ws), 0);
		assert_int_equal(git_reference_name_to_id(&oid, repo, "HEAD"), 0);
		git_oid_tostr(c2, sizeof c2, &oid);
		git_repository_free(repo);
	}
	blake_hex(NEW_SOUL, soul_hex);
	buf_init(&out, 1 << 20);

	assert_int_equal(harness_cli(fx.home, &out, status), 0);
	assert_non_null(strstr(out.data, c2));
	assert_non_null(strstr(out.data, "(dirty)")); /* USER.md is not committed */
	assert_non_null(strstr(out.data, "BOOT.md runs at gateway start"));
	assert_non_null(strstr(out.data, "  SOUL.md "));
	assert_non_null(strstr(out.data, "MEMORY.md"));

	buf_reset(&out);
	assert_int_equal(harness_cli(fx.home, &out, status_json), 0);
	j = json_loads(out.data, 0, NULL);
	assert_non_null(j);
	assert_string_equal(sget(j, "commit"), c2);
	assert_true(json_is_true(json_object_get(j, "dirty")));
	assert_true(json_is_true(json_object_get(j, "git")));
	files = json_object_get(j, "files");
	assert_int_equal(json_array_size(files), 8);
	assert_string_equal(sget(json_array_get(files, 0), "name"), "AGENTS.md");
	assert_string_equal(sget(json_array_get(files, 1), "name"), "SOUL.md");
	assert_string_equal(sget(json_array_get(files, 1), "hash"), soul_hex);
	assert_string_equal(sget(json_array_get(files, 1), "state"), "included");
	assert_int_equal(json_integer_value(json_object_get(json_array_get(files, 1), "bytes")),
	                 strlen(NEW_SOUL));
	json_decref(j);

	/* log: the versions answered with, from the transcripts */
	buf_reset(&out);
	assert_int_equal(harness_cli(fx.home, &out, log_json), 0);
	j = json_loads(out.data, 0, NULL);
	assert_true(json_is_array(j));
	json_array_foreach(j, i, v)
	{
		if (strcmp(sget(v, "commit"), c2) != 0)
			continue;
		if (json_is_true(json_object_get(v, "dirty"))) {
			dirty++;
			assert_int_equal(json_integer_value(json_object_get(v, "turns")), 1);
			assert_string_equal(sget(v, "last_session_key"), "agent:main:main");
		} else {
			clean++;
			/* "hello two" (main) and "hello side": different hashes
			 * (MEMORY.md), so this version is one of the two */
			assert_true(json_integer_value(json_object_get(v, "turns")) >= 1);
		}
	}
	assert_int_equal(dirty, 1);
	assert_int_equal(clean, 2);
	/* newest first: the dirty one answered last */
	assert_true(json_is_true(json_object_get(json_array_get(j, 0), "dirty")));
	/* the boot turn and the first reply used the first commit */
	assert_true(json_array_size(j) >= 4);
	json_decref(j);

	buf_reset(&out);
	assert_int_equal(harness_cli(fx.home, &out, log_text), 0);
	assert_non_null(strstr(out.data, "COMMIT"));
	{
		char short_id[13];

		snprintf(short_id, sizeof short_id, "%.12s", c2);
		assert_non_null(strstr(out.data, short_id));
	}
	assert_non_null(strstr(out.data, "agent:main:main"));
	assert_non_null(strstr(out.data, "agent:main:boot"));

	/* misuse and errors */
	buf_reset(&out);
	assert_int_equal(harness_cli(fx.home, &out, no_agent), 2);
	assert_non_null(strstr(out.data, "usage: switchboard workspace"));
	buf_reset(&out);
	assert_int_equal(harness_cli(fx.home, &out, unknown), 1);
	assert_non_null(strstr(out.data, "no agent \"nobody\""));
	assert_int_equal(harness_cli(fx.home, NULL, bad_verb), 2);
	buf_reset(&out);
	assert_int_equal(harness_cli(fx.home, &out, help), 0);
	assert_non_null(strstr(out.data, "workspace init"));

	/* init: a new workspace for another agent, committed */
	snprintf(dir, sizeof dir, "%s/extra/ops", fx.home);
	{
		const char *init[] = {"workspace", "init", "--agent", "ops", dir, NULL};
		const char *init_bad[] = {"workspace", "init", "--agent", "Bad Id", dir, NULL};
		const char *init_none[] = {"workspace", "init", NULL};
		char path[1100];
		struct buf id;

		buf_reset(&out);
		assert_int_equal(harness_cli(fx.home, &out, init), 0);
		assert_non_null(strstr(out.data, "first commit "));
		snprintf(path, sizeof path, "%s/IDENTITY.md", dir);
		buf_init(&id, 1 << 20);
		assert_int_equal(harness_read_file(path, &id), 0);
		assert_non_null(strstr(id.data, "Name: ops"));
		buf_free(&id);
		snprintf(path, sizeof path, "%s/.git/HEAD", dir);
		assert_int_equal(access(path, R_OK), 0);
		buf_reset(&out);
		assert_int_equal(harness_cli(fx.home, &out, init), 0);
		assert_non_null(strstr(out.data, "0 files written"));
		assert_non_null(strstr(out.data, "left as it was"));
		assert_int_equal(harness_cli(fx.home, NULL, init_bad), 2);
		assert_int_equal(harness_cli(fx.home, NULL, init_none), 2);
	}
	buf_free(&out);
}

/* A group conversation never gets MEMORY.md (run last: it adds a version). */
static void test_no_memory_in_groups(void **state)
{
	const char *hdrs[] = {"Authorization: Bearer " HOOK_TOKEN, "Content-Type: application/json",
	                      NULL};
	const char body[] = "{\"text\":\"hello group\",\"sender\":\"bob\","
	                    "\"conversation\":\"team-room\"}";
	struct buf resp;
	json_t *entries, *events;
	char *sys;

	(void)state;
	buf_init(&resp, 1 << 20);
	assert_int_equal(harness_http(fx.d.port, "POST", "/hooks/team", hdrs, body, &resp), 200);
	assert_non_null(strstr(resp.data, "group reply"));
	buf_free(&resp);
	sys = last_system_prompt();
	assert_non_null(strstr(sys, "new soul"));
	assert_null(strstr(sys, "Pixel"));
	free(sys);
	entries = entries_of("agent:main:webhook:group:team-room");
	events = workspace_events(entries);
	assert_int_equal(json_array_size(events), 1);
	assert_null(
	    json_object_get(json_object_get(json_array_get(events, 0), "files"), "MEMORY.md"));
	assert_non_null(reply_entry(entries, "group reply"));
	json_decref(events);
	json_decref(entries);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_boot),
	    cmocka_unit_test(test_versions_follow_commits),
	    cmocka_unit_test(test_cli),
	    cmocka_unit_test(test_no_memory_in_groups),
	};

	if (sodium_init() < 0)
		return 1;
	return cmocka_run_group_tests(tests, setup, teardown);
}
