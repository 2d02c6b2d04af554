/*
 * test_memory.c - workspaces/memory.c: the FTS5 index kept current at each
 * search, hits with path and lines, memory_get's ranges and its empty read
 * of a missing file, appends, paths outside memory refused, symlinks never
 * followed, and commits of memory files that leave everything else alone.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <git2.h>
#include <jansson.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gateway/core/err.h"
#include "workspaces/memory.h"
#include "workspaces/workspace.h"

static char ws[300], idx[300], home[256];

static void put(const char *rel, const char *text)
{
	char p[1200];
	FILE *f;

	snprintf(p, sizeof p, "%s/%s", ws, rel);
	f = fopen(p, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static int setup(void **state)
{
	const char *tmp = getenv("TMPDIR");
	char p[1200];

	(void)state;
	snprintf(home, sizeof home, "%s/memXXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(home))
		return -1;
	snprintf(ws, sizeof ws, "%s/ws", home);
	snprintf(idx, sizeof idx, "%s/memory.sqlite", home);
	mkdir(ws, 0755);
	snprintf(p, sizeof p, "%s/memory", ws);
	mkdir(p, 0755);
	return 0;
}

static int teardown(void **state)
{
	char cmd[600];

	(void)state;
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", home);
	return system(cmd) == 0 ? 0 : -1;
}

static json_t *search(const char *q, struct memory_sync_stats *st)
{
	struct memory_scope s = {.workspace = ws, .index = idx};
	char why[256];
	json_t *hits = NULL;

	assert_int_equal(memory_search(&s, q, 10, &hits, st, why, sizeof why), SB_OK);
	return hits;
}

static void test_search_and_reindex(void **state)
{
	struct memory_sync_stats st;
	json_t *hits, *h;
	struct stat sb;
	char p[1200];
	struct timespec old[2] = {{.tv_sec = 1000000000}, {.tv_sec = 1000000000}};

	(void)state;
	put("MEMORY.md", "# People\n\nAlice prefers tea.\nBob likes chess.\n");
	put("memory/2026-12-01.md", "# Monday\n\nThe deploy key is kept in the vault.\n"
	                            "Meeting with Carol about the zeppelin budget.\n");
	hits = search("zeppelin", &st);
	assert_int_equal(st.indexed, 2);
	assert_int_equal(json_array_size(hits), 1);
	h = json_array_get(hits, 0);
	assert_string_equal(json_string_value(json_object_get(h, "path")), "memory/2026-12-01.md");
	assert_true(json_integer_value(json_object_get(h, "from")) <= 4);
	assert_true(json_integer_value(json_object_get(h, "to")) >= 4);
	assert_non_null(strstr(json_string_value(json_object_get(h, "snippet")), "zeppelin"));
	json_decref(hits);

	/* FTS5 syntax in the query is only words. */
	hits = search("tea\" OR NEAR(x) * -", &st);
	assert_int_equal(json_array_size(hits), 1);
	json_decref(hits);

	/* Files old enough and unchanged are not read again. */
	snprintf(p, sizeof p, "%s/MEMORY.md", ws);
	utimensat(AT_FDCWD, p, old, 0);
	snprintf(p, sizeof p, "%s/memory/2026-12-01.md", ws);
	utimensat(AT_FDCWD, p, old, 0);
	hits = search("tea", &st);
	json_decref(hits);
	hits = search("tea", &st);
	assert_int_equal(st.hashed, 0);
	assert_int_equal(st.indexed, 0);
	json_decref(hits);

	/* Changed bytes are seen at the next search, even with the old mtime
	 * and size (same length, other words). */
	put("MEMORY.md", "# People\n\nAlice prefers tee.\nBob likes chess.\n");
	snprintf(p, sizeof p, "%s/MEMORY.md", ws);
	hits = search("tea", &st);
	assert_int_equal(json_array_size(hits), 0);
	assert_int_equal(st.indexed, 1);
	json_decref(hits);

	/* A removed file leaves the index. */
	snprintf(p, sizeof p, "%s/memory/2026-12-01.md", ws);
	assert_int_equal(unlink(p), 0);
	hits = search("zeppelin", &st);
	assert_int_equal(json_array_size(hits), 0);
	assert_int_equal(st.removed, 1);
	json_decref(hits);

	/* A symlinked memory file is never read. */
	snprintf(p, sizeof p, "%s/memory/link.md", ws);
	assert_int_equal(symlink("/etc/passwd", p), 0);
	hits = search("root", &st);
	assert_int_equal(json_array_size(hits), 0);
	json_decref(hits);
	unlink(p);

	/* The index is the operator's alone. */
	assert_int_equal(stat(idx, &sb), 0);
	assert_int_equal(sb.st_mode & 0777, 0600);
}

static void test_get_and_append(void **state)
{
	char why[256], *text = NULL, p[1200];
	int64_t total;

	(void)state;
	put("memory/notes.md", "one\ntwo\nthree\nfour\n");
	assert_int_equal(memory_get(ws, "memory/notes.md", 2, 2, &text, &total, why, sizeof why),
	                 SB_OK);
	assert_string_equal(text, "two\nthree\n");
	assert_int_equal(total, 4);
	free(text);
	assert_int_equal(memory_get(ws, "memory/2030-01-01.md", 1, 10, &text, &total, why,
	                            sizeof why),
	                 SB_OK);
	assert_string_equal(text, "");
	free(text);
	assert_int_equal(memory_get(ws, "AGENTS.md", 1, 10, &text, &total, why, sizeof why),
	                 SB_ERR_PERM);
	assert_int_equal(memory_get(ws, "memory/../../x.md", 1, 10, &text, &total, why, sizeof why),
	                 SB_ERR_PERM);
	assert_int_equal(memory_get(ws, "/etc/passwd", 1, 10, &text, &total, why, sizeof why),
	                 SB_ERR_PERM);
	snprintf(p, sizeof p, "%s/memory/evil.md", ws);
	assert_int_equal(symlink("/etc/passwd", p), 0);
	assert_int_equal(memory_get(ws, "memory/evil.md", 1, 10, &text, &total, why, sizeof why),
	                 SB_ERR_PERM);
	assert_int_equal(memory_append(ws, "memory/evil.md", "x", why, sizeof why), SB_ERR_PERM);
	unlink(p);

	assert_int_equal(memory_append(ws, "memory/sub/day.md", "first", why, sizeof why), SB_OK);
	assert_int_equal(memory_append(ws, "memory/sub/day.md", "second\n", why, sizeof why),
	                 SB_OK);
	assert_int_equal(memory_get(ws, "memory/sub/day.md", 1, 10, &text, &total, why, sizeof why),
	                 SB_OK);
	assert_string_equal(text, "first\nsecond\n");
	free(text);
	assert_int_equal(memory_append(ws, "SOUL.md", "x", why, sizeof why), SB_ERR_PERM);
}

static void test_transcripts(void **state)
{
	struct memory_scope s = {.workspace = ws, .index = idx};
	char dir[700], p[1200], why[256];
	json_t *hits = NULL, *h;
	FILE *f;

	(void)state;
	snprintf(dir, sizeof dir, "%s/sessions", home);
	mkdir(dir, 0700);
	snprintf(p, sizeof p, "%s/01abc.jsonl", dir);
	f = fopen(p, "w");
	assert_non_null(f);
	fputs("{\"type\":\"session\",\"id\":\"01abc\"}\n"
	      "{\"type\":\"message\",\"message\":{\"role\":\"user\",\"content\":"
	      "[{\"type\":\"text\",\"text\":\"my locker number is quokka-58\"}]}}\n"
	      "{\"type\":\"message\",\"message\":{\"role\":\"user\",\"content\":"
	      "[{\"type\":\"tool_result\",\"content\":\"quokka in a tool\"}]}}\n",
	      f);
	fclose(f);
	snprintf(p, sizeof p, "%s/01abc.archive-01x.jsonl", dir);
	f = fopen(p, "w");
	assert_non_null(f);
	fputs("{\"type\":\"message\",\"message\":{\"role\":\"user\",\"content\":"
	      "\"quokka archived\"}}\n",
	      f);
	fclose(f);
	/* Not configured: transcripts stay out. */
	assert_int_equal(memory_search(&s, "quokka", 10, &hits, NULL, why, sizeof why), SB_OK);
	assert_int_equal(json_array_size(hits), 0);
	json_decref(hits);
	s.sessions = dir;
	assert_int_equal(memory_search(&s, "quokka", 10, &hits, NULL, why, sizeof why), SB_OK);
	assert_int_equal(json_array_size(hits), 1); /* not the tool result, not the archive */
	h = json_array_get(hits, 0);
	assert_string_equal(json_string_value(json_object_get(h, "path")), "sessions/01abc.jsonl");
	assert_int_equal(json_integer_value(json_object_get(h, "from")), 2);
	json_decref(hits);
	/* Turned off again: their rows leave the index. */
	s.sessions = NULL;
	assert_int_equal(memory_search(&s, "quokka", 10, &hits, NULL, why, sizeof why), SB_OK);
	assert_int_equal(json_array_size(hits), 0);
	json_decref(hits);
	assert_int_equal(memory_search(&s, "  ... !!", 10, &hits, NULL, why, sizeof why),
	                 SB_ERR_INVAL);
}

static void test_daily_path(void **state)
{
	char p[32];

	(void)state;
	memory_daily_path(1764633600, 0, p, sizeof p); /* 2025-12-02T00:00Z */
	assert_string_equal(p, "memory/2025-12-02.md");
	memory_daily_path(1764633600, -3600, p, sizeof p);
	assert_string_equal(p, "memory/2025-12-01.md");
	assert_true(memory_path_ok("MEMORY.md"));
	assert_true(memory_path_ok("memory/a.md"));
	assert_false(memory_path_ok("memory/.md"));
	assert_false(memory_path_ok("memory/a.txt"));
	assert_false(memory_path_ok("SOUL.md"));
}

static void test_commit(void **state)
{
	const char *paths[] = {"MEMORY.md"};
	char why[256], commit[41], dir[600], cmd[1400];
	size_t created = 0;
	git_repository *repo;
	git_status_list *sl;
	git_commit *c;
	git_oid oid;

	(void)state;
	snprintf(dir, sizeof dir, "%s/git", home);
	mkdir(dir, 0755);
	assert_int_equal(workspace_init(dir, "t", &created, commit, why, sizeof why), SB_OK);
	assert_true(commit[0]);
	/* The operator's own change in progress stays out of the commit. */
	snprintf(cmd, sizeof cmd, "echo operator >> '%s/SOUL.md'", dir);
	assert_int_equal(system(cmd), 0);
	assert_int_equal(memory_append(dir, "MEMORY.md", "The user's cat is Pixel.", why,
	                               sizeof why),
	                 SB_OK);
	assert_int_equal(memory_commit(dir, paths, 1, "memory: MEMORY.md\n\nsession s, turn 3\n",
	                               commit, why, sizeof why),
	                 SB_OK);
	assert_int_equal(strlen(commit), 40);
	assert_int_equal(git_repository_open(&repo, dir), 0);
	assert_int_equal(git_reference_name_to_id(&oid, repo, "HEAD"), 0);
	assert_int_equal(git_commit_lookup(&c, repo, &oid), 0);
	assert_non_null(strstr(git_commit_message(c), "turn 3"));
	assert_int_equal(git_commit_parentcount(c), 1);
	git_commit_free(c);
	/* Only SOUL.md shows as changed: MEMORY.md is committed, index too. */
	assert_int_equal(git_status_list_new(&sl, repo, NULL), 0);
	assert_int_equal(git_status_list_entrycount(sl), 1);
	assert_string_equal(git_status_byindex(sl, 0)->index_to_workdir->new_file.path, "SOUL.md");
	git_status_list_free(sl);
	git_repository_free(repo);
	/* Nothing new: no commit. */
	assert_int_equal(memory_commit(dir, paths, 1, "again\n", commit, why, sizeof why), SB_OK);
	assert_string_equal(commit, "");
	/* Not a repository: nothing committed, said so. */
	assert_int_equal(memory_commit(ws, paths, 1, "x\n", commit, why, sizeof why),
	                 SB_ERR_NOTFOUND);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_search_and_reindex),
	    cmocka_unit_test(test_get_and_append),
	    cmocka_unit_test(test_transcripts),
	    cmocka_unit_test(test_daily_path),
	    cmocka_unit_test(test_commit),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
