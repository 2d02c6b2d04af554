/*
 * test_web.c - the pure parts behind the web UI: which origins and Host
 * headers are allowed (gateway/http/origin.c), the workspace history's
 * refusal of revisions and paths that could read anything else
 * (workspaces/history.c), the in-memory log tail (gateway/core/log.c), and
 * that every asset compiled into the binary is there with a type, an ETag
 * and a gzip copy (gateway/ui/ui_assets.h).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <git2.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gateway/config/config.h"
#include "gateway/core/err.h"
#include "gateway/core/log.h"
#include "gateway/http/origin.h"
#include "gateway/ui/ui_assets.h"
#include "tests/integration/harness.h"
#include "workspaces/history.h"
#include "workspaces/workspace.h"

#define AGENTS "agents:\n  - id: main\n"

static struct config *load(const char *yaml)
{
	struct config *cfg = NULL;
	struct cfg_errors errs;
	char home[512], text[1024];

	memset(&errs, 0, sizeof errs);
	assert_int_equal(harness_tmpdir(home, sizeof home), 0);
	snprintf(text, sizeof text, "%s%s", AGENTS, yaml);
	if (config_load_text(text, "t.yaml", home, &cfg, &errs) != SB_OK) {
		for (size_t i = 0; i < errs.n; i++)
			fprintf(stderr, "%s\n", errs.v[i].msg);
		fail();
	}
	cfg_errors_free(&errs);
	harness_rmrf(home);
	return cfg;
}

static void test_default_origins_are_the_gateways_own(void **state)
{
	struct config *cfg = load("gateway: {port: 8790}\n");

	(void)state;
	assert_true(origin_allowed(cfg, 8790, "http://127.0.0.1:8790"));
	assert_true(origin_allowed(cfg, 8790, "http://localhost:8790"));
	assert_true(origin_allowed(cfg, 8790, "http://LOCALHOST:8790/"));
	assert_true(origin_allowed(cfg, 8790, "http://[::1]:8790"));
	/* the port that listens, not only the configured one (--port) */
	assert_true(origin_allowed(cfg, 9000, "http://127.0.0.1:9000"));
	assert_false(origin_allowed(cfg, 9000, "http://127.0.0.1:8790"));
	/* everything else */
	assert_false(origin_allowed(cfg, 8790, "http://127.0.0.1:8791"));
	assert_false(origin_allowed(cfg, 8790, "https://127.0.0.1:8790"));
	assert_false(origin_allowed(cfg, 8790, "http://127.0.0.1"));
	assert_false(origin_allowed(cfg, 8790, "http://127.0.0.1:8790.evil.com"));
	assert_false(origin_allowed(cfg, 8790, "http://evil.com"));
	assert_false(origin_allowed(cfg, 8790, "null"));
	assert_false(origin_allowed(cfg, 8790, ""));
	assert_false(origin_allowed(cfg, 8790, NULL));
	/* Host headers */
	assert_true(origin_host_allowed(cfg, 8790, "127.0.0.1:8790"));
	assert_true(origin_host_allowed(cfg, 8790, "localhost:8790"));
	assert_false(origin_host_allowed(cfg, 8790, "attacker.example:8790"));
	assert_false(origin_host_allowed(cfg, 8790, "127.0.0.1:8790/x"));
	assert_false(origin_host_allowed(cfg, 8790, "user@127.0.0.1:8790"));
	assert_false(origin_host_allowed(cfg, 8790, ""));
	/* only browsers' values are checked */
	assert_true(origin_from_browser("http://x"));
	assert_true(origin_from_browser("null"));
	assert_false(origin_from_browser("127.0.0.1"));
	assert_false(origin_from_browser(""));
	config_unref(cfg);
}

static void test_configured_origins_replace_the_defaults(void **state)
{
	struct config *cfg = load("gateway:\n"
	                          "  control:\n"
	                          "    allowed_origins: [\"https://gw.example.com\", "
	                          "\"http://10.0.0.5:8790\"]\n");
	char out[300];

	(void)state;
	assert_true(origin_allowed(cfg, 8790, "https://gw.example.com"));
	assert_true(origin_allowed(cfg, 8790, "http://10.0.0.5:8790"));
	assert_false(origin_allowed(cfg, 8790, "http://127.0.0.1:8790"));
	assert_false(origin_allowed(cfg, 8790, "http://gw.example.com"));
	assert_true(origin_host_allowed(cfg, 8790, "gw.example.com"));
	assert_false(origin_host_allowed(cfg, 8790, "127.0.0.1:8790"));
	origin_default(cfg, 8790, out, sizeof out);
	assert_string_equal(out, "https://gw.example.com");
	config_unref(cfg);
}

static void test_bad_origins_are_refused_at_load(void **state)
{
	static const char *const bad[] = {"gw.example.com", "https://gw.example.com/ui",
	                                  "https://*.example.com", "ftp://x", "https://"};
	(void)state;
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		char yaml[256], home[512];
		struct config *cfg = NULL;
		struct cfg_errors errs;

		memset(&errs, 0, sizeof errs);
		assert_int_equal(harness_tmpdir(home, sizeof home), 0);
		snprintf(yaml, sizeof yaml, AGENTS "gateway: {control: {allowed_origins: [\"%s\"]}}\n",
		         bad[i]);
		assert_int_not_equal(config_load_text(yaml, "t.yaml", home, &cfg, &errs), SB_OK);
		assert_true(errs.n >= 1);
		assert_non_null(strstr(errs.v[0].path, "allowed_origins[0]"));
		cfg_errors_free(&errs);
		harness_rmrf(home);
	}
}

/* ---- workspace history ---- */

static void test_history_refuses_what_could_read_elsewhere(void **state)
{
	char dir[512], commit[41], why[256];
	size_t created = 0;
	json_t *out = NULL;
	static const char *const revs[] = {"HEAD@{1}",  "origin/main", "main",  "-rf",
	                                   "HEAD~",     "HEAD^",       "abc",   "HEAD~99999",
	                                   "../HEAD",   "HEAD:AGENTS.md", ""};
	static const char *const paths[] = {"../x", "/etc/passwd", "a/../../b", ".", "..",
	                                    "a//b", "a/",           ""};

	(void)state;
	assert_int_equal(harness_tmpdir(dir, sizeof dir), 0);
	assert_int_equal(workspace_init(dir, "main", &created, commit, why, sizeof why), SB_OK);
	assert_int_equal(strlen(commit), 40);
	for (size_t i = 0; i < sizeof revs / sizeof *revs; i++) {
		assert_int_equal(workspace_git_files(dir, revs[i], &out), SB_ERR_INVAL);
		assert_int_equal(workspace_git_diff(dir, revs[i], NULL, NULL, 1 << 20, &out),
		                 SB_ERR_INVAL);
		assert_int_equal(workspace_git_show(dir, revs[i], "AGENTS.md", 100, &out),
		                 SB_ERR_INVAL);
	}
	for (size_t i = 0; i < sizeof paths / sizeof *paths; i++) {
		assert_int_equal(workspace_git_show(dir, "HEAD", paths[i], 100, &out), SB_ERR_INVAL);
		assert_int_equal(workspace_git_log(dir, paths[i], 10, &out), SB_ERR_INVAL);
	}
	/* what is allowed works */
	assert_int_equal(workspace_git_log(dir, NULL, 10, &out), SB_OK);
	assert_string_equal(json_string_value(json_object_get(out, "head")), commit);
	assert_int_equal(json_array_size(json_object_get(out, "commits")), 1);
	json_decref(out);
	assert_int_equal(workspace_git_show(dir, commit, "AGENTS.md", 100, &out), SB_OK);
	assert_true(json_is_true(json_object_get(out, "truncated")));
	assert_int_equal(json_string_length(json_object_get(out, "text")), 100);
	json_decref(out);
	assert_int_equal(workspace_git_show(dir, "HEAD", "nope.md", 100, &out), SB_ERR_NOTFOUND);
	/* an edit and a new file on disk show against the worktree */
	{
		char p[700];

		snprintf(p, sizeof p, "%s/new.txt", dir);
		assert_int_equal(harness_write_file(p, "bad \xff byte\n"), 0);
	}
	assert_int_equal(workspace_git_diff(dir, "HEAD", WORKSPACE_WORKTREE, NULL, 1 << 20, &out),
	                 SB_OK);
	{
		const json_t *f = json_array_get(json_object_get(out, "files"), 0);

		assert_string_equal(json_string_value(json_object_get(f, "path")), "new.txt");
		assert_string_equal(json_string_value(json_object_get(f, "status")), "untracked");
		/* the invalid byte became U+FFFD: the text can go to a browser */
		assert_non_null(strstr(json_string_value(json_object_get(f, "patch")), "\xef\xbf\xbd"));
	}
	json_decref(out);
	/* not a repository */
	{
		char plain[512];

		assert_int_equal(harness_tmpdir(plain, sizeof plain), 0);
		assert_int_equal(workspace_git_log(plain, NULL, 10, &out), SB_ERR_NOTFOUND);
		harness_rmrf(plain);
	}
	harness_rmrf(dir);
}

/* Commits one file (name and bytes as given, not checked) on top of HEAD,
 * with message and author as given: what a repository cloned from
 * elsewhere, or written by other tools, may hold. */
static void commit_raw(const char *dir, const char *name, const char *data, size_t len,
                       const char *message, const char *author)
{
	git_repository *repo = NULL;
	git_index *index = NULL;
	git_index_entry e;
	git_oid blob, tree_id, commit_id, parent_id;
	git_tree *tree = NULL;
	git_commit *parent = NULL;
	git_signature *sig = NULL;

	assert_int_equal(git_repository_open(&repo, dir), 0);
	assert_int_equal(git_repository_index(&index, repo), 0);
	assert_int_equal(git_blob_create_from_buffer(&blob, repo, data, len), 0);
	memset(&e, 0, sizeof e);
	e.mode = GIT_FILEMODE_BLOB;
	e.id = blob;
	e.path = name;
	e.file_size = (uint32_t)len;
	assert_int_equal(git_index_add(index, &e), 0);
	assert_int_equal(git_index_write_tree(&tree_id, index), 0);
	assert_int_equal(git_index_write(index), 0);
	assert_int_equal(git_tree_lookup(&tree, repo, &tree_id), 0);
	assert_int_equal(git_reference_name_to_id(&parent_id, repo, "HEAD"), 0);
	assert_int_equal(git_commit_lookup(&parent, repo, &parent_id), 0);
	assert_int_equal(git_signature_now(&sig, author, "someone@example.com"), 0);
	assert_int_equal(
	    git_commit_create_v(&commit_id, repo, "HEAD", sig, sig, NULL, message, tree, 1, parent),
	    0);
	git_signature_free(sig);
	git_commit_free(parent);
	git_tree_free(tree);
	git_index_free(index);
	git_repository_free(repo);
}

/* The entry of files whose path contains part, or NULL. */
static const json_t *file_named(const json_t *out, const char *part)
{
	size_t i;
	const json_t *f;

	json_array_foreach(json_object_get(out, "files"), i, f)
	{
		const char *p = json_string_value(json_object_get(f, "path"));

		if (p && strstr(p, part))
			return f;
	}
	return NULL;
}

/* A file name, a commit message or an author that is not UTF-8 (git allows
 * any bytes) is shown with U+FFFD in place of the bad bytes: it never
 * disappears from the files, the log or a diff, so nothing in a workspace
 * can hide from the operator's review. */
static void test_history_shows_names_that_are_not_utf8(void **state)
{
	char dir[512], commit[41], why[256], p[700];
	size_t created = 0;
	json_t *out = NULL;
	const json_t *f, *c;

	(void)state;
	assert_int_equal(harness_tmpdir(dir, sizeof dir), 0);
	assert_int_equal(workspace_init(dir, "main", &created, commit, why, sizeof why), SB_OK);
	commit_raw(dir, "hid\377den.md", "x\n", 2, "bad \xff\xfe message\n\nbody \xc3\n",
	           "N\377ame");
	/* the files of HEAD */
	assert_int_equal(workspace_git_files(dir, "HEAD", &out), SB_OK);
	f = file_named(out, "hid");
	assert_non_null(f);
	assert_string_equal(json_string_value(json_object_get(f, "path")), "hid\357\277\275den.md");
	json_decref(out);
	/* the log: both commits, the new one first */
	assert_int_equal(workspace_git_log(dir, NULL, 10, &out), SB_OK);
	assert_int_equal(json_array_size(json_object_get(out, "commits")), 2);
	c = json_array_get(json_object_get(out, "commits"), 0);
	assert_string_equal(json_string_value(json_object_get(c, "id")),
	                    json_string_value(json_object_get(out, "head")));
	assert_non_null(
	    strstr(json_string_value(json_object_get(c, "summary")), "bad \xef\xbf\xbd"));
	assert_non_null(strstr(json_string_value(json_object_get(c, "author")), "N\xef\xbf\xbd"));
	json_decref(out);
	/* the log of that one file */
	assert_int_equal(workspace_git_log(dir, "hid\377den.md", 10, &out), SB_OK);
	assert_int_equal(json_array_size(json_object_get(out, "commits")), 1);
	json_decref(out);
	/* the diff of the commit that added it */
	assert_int_equal(workspace_git_diff(dir, "HEAD~1", "HEAD", NULL, 1 << 20, &out), SB_OK);
	assert_non_null(file_named(out, "hid"));
	json_decref(out);
	/* a file on disk that is not committed */
	snprintf(p, sizeof p, "%s/new\xfe.txt", dir);
	assert_int_equal(harness_write_file(p, "y\n"), 0);
	assert_int_equal(workspace_git_diff(dir, "HEAD", WORKSPACE_WORKTREE, NULL, 1 << 20, &out),
	                 SB_OK);
	f = file_named(out, "new");
	assert_non_null(f);
	assert_string_equal(json_string_value(json_object_get(f, "status")), "untracked");
	json_decref(out);
	harness_rmrf(dir);
}

/* What a workspace holds cannot make the gateway read without bound: a
 * file bigger than the diff's budget is reported (tooLarge) without being
 * read into memory, a diff lists at most WORKSPACE_DIFF_FILES_MAX files
 * (truncated, with the total), and a committed file too big to show is
 * described without its bytes being loaded. Special files (a FIFO) and
 * symlinks on disk are never opened: a link shows as its target. */
static void test_history_reads_within_bounds(void **state)
{
	char dir[512], commit[41], why[256], p[700];
	size_t created = 0;
	json_t *out = NULL;
	const json_t *f;
	FILE *fp;

	(void)state;
	assert_int_equal(harness_tmpdir(dir, sizeof dir), 0);
	assert_int_equal(workspace_init(dir, "main", &created, commit, why, sizeof why), SB_OK);
	/* a 3 MiB text file on disk */
	snprintf(p, sizeof p, "%s/big.txt", dir);
	fp = fopen(p, "w");
	assert_non_null(fp);
	for (int i = 0; i < 3 * 1024 * 16; i++)
		fputs("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n", fp);
	fclose(fp);
	/* a FIFO and a symlink to a secret outside */
	snprintf(p, sizeof p, "%s/pipe", dir);
	assert_int_equal(mkfifo(p, 0600), 0);
	snprintf(p, sizeof p, "%s/secret", dir);
	assert_int_equal(symlink("/etc/shadow", p), 0);
	assert_int_equal(workspace_git_diff(dir, "HEAD", WORKSPACE_WORKTREE, NULL, 512 << 10, &out),
	                 SB_OK);
	f = file_named(out, "big.txt");
	assert_non_null(f);
	assert_true(json_is_true(json_object_get(f, "tooLarge")));
	assert_null(json_object_get(f, "patch"));
	assert_null(file_named(out, "pipe"));
	f = file_named(out, "secret");
	assert_non_null(f);
	assert_non_null(strstr(json_string_value(json_object_get(f, "patch")), "+/etc/shadow"));
	json_decref(out);
	/* more files than a diff lists */
	snprintf(p, sizeof p, "%s/many", dir);
	assert_int_equal(mkdir(p, 0700), 0);
	for (int i = 0; i < WORKSPACE_DIFF_FILES_MAX + 50; i++) {
		snprintf(p, sizeof p, "%s/many/f%04d", dir, i);
		assert_int_equal(harness_write_file(p, "z\n"), 0);
	}
	assert_int_equal(workspace_git_diff(dir, "HEAD", WORKSPACE_WORKTREE, NULL, 512 << 10, &out),
	                 SB_OK);
	assert_int_equal(json_array_size(json_object_get(out, "files")), WORKSPACE_DIFF_FILES_MAX);
	assert_true(json_is_true(json_object_get(out, "truncated")));
	assert_true(json_integer_value(json_object_get(out, "filesTotal")) >=
	            WORKSPACE_DIFF_FILES_MAX + 50);
	json_decref(out);
	/* a committed file too big to load for showing */
	{
		size_t n = WORKSPACE_SHOW_LOAD_MAX + 1;
		char *big = malloc(n);

		assert_non_null(big);
		memset(big, 'b', n);
		commit_raw(dir, "huge.txt", big, n, "huge", "op");
		free(big);
	}
	assert_int_equal(workspace_git_show(dir, "HEAD", "huge.txt", 256 << 10, &out), SB_OK);
	assert_true(json_is_true(json_object_get(out, "tooLarge")));
	assert_true(json_is_true(json_object_get(out, "truncated")));
	assert_null(json_object_get(out, "text"));
	assert_int_equal(json_integer_value(json_object_get(out, "size")),
	                 (json_int_t)WORKSPACE_SHOW_LOAD_MAX + 1);
	json_decref(out);
	harness_rmrf(dir);
}

/* ---- the log tail ---- */

struct tail {
	uint64_t first, last;
	size_t n;
	bool saw_secret;
};

static void tail_cb(void *ud, uint64_t seq, const char *line)
{
	struct tail *t = ud;

	if (!t->n)
		t->first = seq;
	t->last = seq;
	t->n++;
	if (strstr(line, "s3cret-value"))
		t->saw_secret = true;
}

static void test_log_tail_keeps_the_last_lines(void **state)
{
	const char *secrets[] = {"s3cret-value"};
	FILE *sink = fopen("/dev/null", "w");
	struct tail t = {0};
	uint64_t last;

	(void)state;
	log_configure(LOG_INFO, LOG_FORMAT_LOGFMT, sink);
	log_set_secrets(secrets, 1);
	last = log_ring_read(0, 0, tail_cb, &(struct tail){0});
	for (int i = 0; i < LOG_RING_LINES + 10; i++)
		log_info("test", "line", LOG_I("i", i), LOG_S("token", "s3cret-value"));
	t = (struct tail){0};
	assert_int_equal(log_ring_read(0, 0, tail_cb, &t), last + LOG_RING_LINES + 10);
	assert_int_equal(t.n, LOG_RING_LINES);
	assert_int_equal(t.last, last + LOG_RING_LINES + 10);
	assert_false(t.saw_secret);
	/* after a line number, at most max, oldest first */
	t = (struct tail){0};
	log_ring_read(last + LOG_RING_LINES + 5, 0, tail_cb, &t);
	assert_int_equal(t.n, 5);
	assert_int_equal(t.first, last + LOG_RING_LINES + 6);
	t = (struct tail){0};
	log_ring_read(0, 3, tail_cb, &t);
	assert_int_equal(t.n, 3);
	assert_int_equal(t.last, last + LOG_RING_LINES + 10);
	/* a long line is cut, still a string */
	{
		char big[2000];

		memset(big, 'x', sizeof big - 1);
		big[sizeof big - 1] = '\0';
		log_info("test", big);
		t = (struct tail){0};
		log_ring_read(0, 1, tail_cb, &t);
		assert_int_equal(t.n, 1);
	}
	log_set_secrets(NULL, 0);
	log_configure(LOG_INFO, LOG_FORMAT_LOGFMT, NULL);
	fclose(sink);
}

/* ---- the assets ---- */

static void test_assets_are_compiled_in(void **state)
{
	(void)state;
	assert_non_null(ui_asset_find("/ui/index.html"));
	assert_non_null(ui_asset_find("/ui/app.js"));
	assert_non_null(ui_asset_find("/ui/app.css"));
	assert_null(ui_asset_find("/ui/../index.html"));
	assert_null(ui_asset_find("/index.html"));
	for (size_t i = 0; i < ui_n_assets; i++) {
		const struct ui_asset *a = &ui_assets[i];

		assert_int_equal(strncmp(a->path, "/ui/", 4), 0);
		assert_true(a->len > 0);
		assert_true(a->gz_len > 18);
		assert_int_equal(a->gz[0], 0x1f);
		assert_int_equal(a->gz[1], 0x8b);
		assert_int_equal(strlen(a->etag), 34);
		assert_non_null(a->type);
	}
	/* the budget of docs/ui.md */
	assert_true(ui_assets_gzip_bytes <= 150 * 1024);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_default_origins_are_the_gateways_own),
	    cmocka_unit_test(test_configured_origins_replace_the_defaults),
	    cmocka_unit_test(test_bad_origins_are_refused_at_load),
	    cmocka_unit_test(test_history_refuses_what_could_read_elsewhere),
	    cmocka_unit_test(test_history_shows_names_that_are_not_utf8),
	    cmocka_unit_test(test_history_reads_within_bounds),
	    cmocka_unit_test(test_log_tail_keeps_the_last_lines),
	    cmocka_unit_test(test_assets_are_compiled_in),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
