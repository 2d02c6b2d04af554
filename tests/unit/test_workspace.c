/*
 * test_workspace.c - workspace snapshots: version stamps (git commit, dirty
 * for the bootstrap files only, combined hash) in and out of git, the stat
 * check that reuses unchanged files and notices changed ones (also a
 * same-size edit with the old mtime put back, and a file edited within the
 * racy window), byte stability of the cached prompt across turns, BOOT.md's
 * deliver line, and `workspace init` (templates, first commit, author).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <git2.h>
#include <sodium.h>

#include "gateway/daemon/boot.h"
#include "gateway/core/err.h"
#include "tests/integration/harness.h"
#include "workspaces/scaffold.h"
#include "workspaces/memory.h"
#include "workspaces/workspace.h"

static void put(const char *dir, const char *name, const char *text)
{
	char path[1024];

	snprintf(path, sizeof path, "%s/%s", dir, name);
	assert_int_equal(harness_write_file(path, text), 0);
}

/* Sets a file's mtime (and atime) to ago seconds in the past. */
static void age(const char *dir, const char *name, int ago)
{
	char path[1024];
	struct timespec ts[2];

	snprintf(path, sizeof path, "%s/%s", dir, name);
	clock_gettime(CLOCK_REALTIME, &ts[0]);
	ts[0].tv_sec -= ago;
	ts[1] = ts[0];
	assert_int_equal(utimensat(AT_FDCWD, path, ts, 0), 0);
}

static void blake(const char *text, unsigned char *out)
{
	crypto_generichash(out, 32, (const unsigned char *)text, strlen(text), NULL, 0);
}

/* Commits every file of dir; the new commit id into out (41 bytes). */
static void commit_all(const char *dir, char *out)
{
	git_repository *repo = NULL;
	git_index *idx = NULL;
	git_tree *tree = NULL;
	git_commit *parent = NULL;
	git_signature *sig = NULL;
	git_oid tree_id, parent_id, id;
	int has_parent;

	assert_int_equal(git_repository_open(&repo, dir), 0);
	assert_int_equal(git_repository_index(&idx, repo), 0);
	assert_int_equal(git_index_add_all(idx, NULL, 0, NULL, NULL), 0);
	assert_int_equal(git_index_write(idx), 0);
	assert_int_equal(git_index_write_tree(&tree_id, idx), 0);
	assert_int_equal(git_tree_lookup(&tree, repo, &tree_id), 0);
	has_parent = git_reference_name_to_id(&parent_id, repo, "HEAD") == 0;
	if (has_parent)
		assert_int_equal(git_commit_lookup(&parent, repo, &parent_id), 0);
	assert_int_equal(git_signature_now(&sig, "Test", "test@localhost"), 0);
	assert_int_equal(git_commit_create_v(&id, repo, "HEAD", sig, sig, NULL, "edit", tree,
	                                     has_parent ? 1 : 0, parent),
	                 0);
	git_oid_tostr(out, 41, &id);
	git_signature_free(sig);
	git_commit_free(parent);
	git_tree_free(tree);
	git_index_free(idx);
	git_repository_free(repo);
}

static int snap(struct workspace_cache *c, const char *dir, bool main_session, struct buf *out,
                struct workspace_version *v)
{
	struct prompt_options po = {
	    .agent_id = "main", .main_session = main_session, .new_workspace = true};

	buf_reset(out);
	return workspace_snapshot(c, dir, &po, out, v);
}

static void test_version_outside_git(void **state)
{
	char dir[512], hex[65];
	struct buf out;
	struct workspace_version v;
	unsigned char h_agents[32], h_soul[32], combined[32];
	crypto_generichash_state hs;
	json_t *j;

	(void)state;
	assert_int_equal(harness_tmpdir(dir, sizeof dir), 0);
	put(dir, "AGENTS.md", "rules\n");
	put(dir, "SOUL.md", "calm\n");
	buf_init(&out, 1 << 20);
	assert_int_equal(snap(NULL, dir, false, &out, &v), SB_OK);
	assert_string_equal(v.commit, "none");
	assert_false(v.git);
	assert_false(v.dirty);
	/* the combined hash: name, NUL, the file's hash, for each present file */
	blake("rules\n", h_agents);
	blake("calm\n", h_soul);
	crypto_generichash_init(&hs, NULL, 0, 32);
	crypto_generichash_update(&hs, (const unsigned char *)"AGENTS.md", 10);
	crypto_generichash_update(&hs, h_agents, 32);
	crypto_generichash_update(&hs, (const unsigned char *)"SOUL.md", 8);
	crypto_generichash_update(&hs, h_soul, 32);
	crypto_generichash_final(&hs, combined, 32);
	assert_memory_equal(v.hash, combined, 32);
	assert_memory_equal(v.info.files[1].hash, h_soul, 32);
	j = workspace_version_json(&v, true);
	assert_non_null(j);
	workspace_hash_hex(h_soul, hex);
	assert_string_equal(
	    json_string_value(json_object_get(json_object_get(j, "files"), "SOUL.md")), hex);
	assert_null(json_object_get(json_object_get(j, "files"), "TOOLS.md")); /* missing */
	assert_string_equal(json_string_value(json_object_get(j, "commit")), "none");
	assert_true(json_is_false(json_object_get(j, "dirty")));
	json_decref(j);
	assert_int_equal(snap(NULL, "/nonexistent/ws", false, &out, &v), SB_ERR_NOTFOUND);
	buf_free(&out);
	harness_rmrf(dir);
}

static void test_version_git(void **state)
{
	char dir[512], c1[41], c2[41], why[1024];
	struct buf out;
	struct workspace_version v;
	struct workspace_cache *c;
	size_t created;
	unsigned char h[32];

	(void)state;
	assert_int_equal(harness_tmpdir(dir, sizeof dir), 0);
	assert_int_equal(workspace_cache_new(&c), SB_OK);
	buf_init(&out, 1 << 20);

	/* a repository without a commit: commit "none", dirty */
	{
		git_repository *r;

		assert_int_equal(git_repository_init(&r, dir, 0), 0);
		git_repository_free(r);
	}
	put(dir, "AGENTS.md", "rules\n");
	assert_int_equal(snap(c, dir, false, &out, &v), SB_OK);
	assert_true(v.git);
	assert_string_equal(v.commit, "none");
	assert_true(v.dirty);

	/* committed: clean, with HEAD's id */
	put(dir, "SOUL.md", "calm\n");
	put(dir, "notes.txt", "not a bootstrap file\n");
	commit_all(dir, c1);
	assert_int_equal(snap(c, dir, false, &out, &v), SB_OK);
	assert_string_equal(v.commit, c1);
	assert_false(v.dirty);

	/* another file of the repository changing does not make it dirty */
	put(dir, "notes.txt", "changed\n");
	assert_int_equal(snap(c, dir, false, &out, &v), SB_OK);
	assert_false(v.dirty);

	/* a bootstrap file edited: dirty, same commit, new hash */
	put(dir, "SOUL.md", "calm and brief\n");
	assert_int_equal(snap(c, dir, false, &out, &v), SB_OK);
	assert_string_equal(v.commit, c1);
	assert_true(v.dirty);
	blake("calm and brief\n", h);
	assert_memory_equal(v.info.files[1].hash, h, 32);
	assert_non_null(strstr(out.data, "calm and brief"));

	/* committed: clean again, the new id */
	commit_all(dir, c2);
	assert_string_not_equal(c1, c2);
	assert_int_equal(snap(c, dir, false, &out, &v), SB_OK);
	assert_string_equal(v.commit, c2);
	assert_false(v.dirty);

	/* an uncommitted MEMORY.md counts only where it is considered */
	put(dir, "MEMORY.md", "private\n");
	assert_int_equal(snap(c, dir, false, &out, &v), SB_OK);
	assert_false(v.dirty);
	assert_null(strstr(out.data, "private"));
	assert_int_equal(snap(c, dir, true, &out, &v), SB_OK);
	assert_true(v.dirty);
	assert_non_null(strstr(out.data, "\n## MEMORY.md\n\nprivate\n"));

	/* a committed file deleted: dirty */
	commit_all(dir, c1);
	assert_int_equal(snap(c, dir, true, &out, &v), SB_OK);
	assert_false(v.dirty);
	snprintf(why, sizeof why, "%s/SOUL.md", dir);
	assert_int_equal(unlink(why), 0);
	assert_int_equal(snap(c, dir, true, &out, &v), SB_OK);
	assert_true(v.dirty);
	assert_false(v.info.files[1].present);

	/* the repository removed: back to "none" */
	snprintf(why, sizeof why, "%s/.git", dir);
	harness_rmrf(why);
	assert_int_equal(snap(c, dir, true, &out, &v), SB_OK);
	assert_false(v.git);
	assert_string_equal(v.commit, "none");
	assert_false(v.dirty);

	workspace_cache_free(c);
	buf_free(&out);
	harness_rmrf(dir);
	(void)created;
}

static void test_stat_reuse(void **state)
{
	char dir[512];
	struct buf a, b;
	struct workspace_version v;
	struct workspace_cache *c;
	struct workspace_cache_stats s0, s1;

	(void)state;
	assert_int_equal(harness_tmpdir(dir, sizeof dir), 0);
	put(dir, "AGENTS.md", "rules v1\n");
	put(dir, "SOUL.md", "calm\n");
	age(dir, "AGENTS.md", 100);
	age(dir, "SOUL.md", 100);
	assert_int_equal(workspace_cache_new(&c), SB_OK);
	buf_init(&a, 1 << 20);
	buf_init(&b, 1 << 20);

	assert_int_equal(snap(c, dir, false, &a, &v), SB_OK);
	workspace_cache_stats(c, &s0);
	assert_int_equal(s0.file_reads, 2);
	/* unchanged: nothing read again, the same bytes */
	for (int turn = 0; turn < 3; turn++) {
		assert_int_equal(snap(c, dir, false, &b, &v), SB_OK);
		assert_int_equal(a.len, b.len);
		assert_memory_equal(a.data, b.data, a.len);
	}
	workspace_cache_stats(c, &s1);
	assert_int_equal(s1.file_reads, 2);
	assert_int_equal(s1.file_reuses, 6);

	/* same size, and the old mtime put back: ctime still tells */
	put(dir, "AGENTS.md", "rules v2\n");
	age(dir, "AGENTS.md", 100);
	assert_int_equal(snap(c, dir, false, &b, &v), SB_OK);
	assert_non_null(strstr(b.data, "rules v2"));
	workspace_cache_stats(c, &s1);
	assert_int_equal(s1.file_reads, 3);

	/* a file written just now is read again at the next turn (it could
	 * change again within the same timestamp tick) */
	put(dir, "SOUL.md", "warm\n");
	assert_int_equal(snap(c, dir, false, &b, &v), SB_OK);
	assert_int_equal(snap(c, dir, false, &b, &v), SB_OK);
	workspace_cache_stats(c, &s1);
	assert_int_equal(s1.file_reads, 5);
	assert_non_null(strstr(b.data, "warm"));
	/* once old, reused again */
	age(dir, "SOUL.md", 100);
	assert_int_equal(snap(c, dir, false, &b, &v), SB_OK);
	workspace_cache_stats(c, &s0);
	assert_int_equal(snap(c, dir, false, &b, &v), SB_OK);
	workspace_cache_stats(c, &s1);
	assert_int_equal(s1.file_reads, s0.file_reads);

	/* a file deleted and created again */
	{
		char p[1024];

		snprintf(p, sizeof p, "%s/SOUL.md", dir);
		unlink(p);
	}
	assert_int_equal(snap(c, dir, false, &b, &v), SB_OK);
	assert_non_null(strstr(b.data, "## SOUL.md\n\n[MISSING]"));
	put(dir, "SOUL.md", "back\n");
	assert_int_equal(snap(c, dir, false, &b, &v), SB_OK);
	assert_non_null(strstr(b.data, "## SOUL.md\n\nback\n"));

	workspace_cache_free(c);
	buf_free(&a);
	buf_free(&b);
	harness_rmrf(dir);
}

/* The first line of dir/name, without its newline. */
static void first_line(const char *dir, const char *name, char *out, size_t size)
{
	char path[1100];
	FILE *f;

	snprintf(path, sizeof path, "%s/%s", dir, name);
	f = fopen(path, "r");
	assert_non_null(f);
	assert_non_null(fgets(out, (int)size, f));
	fclose(f);
	out[strcspn(out, "\n")] = '\0';
}

/* HEAD is taken from the cache while .git/HEAD, the ref it names and
 * packed-refs are the same old files; every way git moves it is seen: a
 * commit (the ref replaced), the ref rewritten in place with its old mtime
 * put back (ctime tells), the refs packed, a detached HEAD, a branch
 * switched. */
static void test_head_reuse(void **state)
{
	char dir[512], c1[41], c2[41], c3[41], cmd[1400], ref[64] = "";
	struct buf out;
	struct workspace_version v;
	struct workspace_cache *c;
	struct workspace_cache_stats s0, s1;
	git_repository *r;

	(void)state;
	assert_int_equal(harness_tmpdir(dir, sizeof dir), 0);
	assert_int_equal(workspace_cache_new(&c), SB_OK);
	buf_init(&out, 1 << 20);
	assert_int_equal(git_repository_init(&r, dir, 0), 0);
	git_repository_free(r);
	put(dir, "AGENTS.md", "rules\n");
	commit_all(dir, c1);
	{
		char head[128];

		first_line(dir, ".git/HEAD", head, sizeof head);
		assert_int_equal(strncmp(head, "ref: ", 5), 0);
		snprintf(ref, sizeof ref, ".git/%s", head + 5);
	}
	age(dir, ".git/HEAD", 100);
	age(dir, ref, 100);
	age(dir, "AGENTS.md", 100);
	assert_int_equal(snap(c, dir, false, &out, &v), SB_OK);
	assert_string_equal(v.commit, c1);
	workspace_cache_stats(c, &s0);
	assert_int_equal(snap(c, dir, false, &out, &v), SB_OK);
	assert_int_equal(snap(c, dir, false, &out, &v), SB_OK);
	workspace_cache_stats(c, &s1);
	assert_int_equal(s1.head_reuses, s0.head_reuses + 2);
	assert_string_equal(v.commit, c1);

	/* a commit, the ref aged at once: a new inode */
	put(dir, "AGENTS.md", "rules 2\n");
	commit_all(dir, c2);
	age(dir, ref, 100);
	age(dir, "AGENTS.md", 100);
	assert_int_equal(snap(c, dir, false, &out, &v), SB_OK);
	assert_string_equal(v.commit, c2);
	assert_false(v.dirty);

	/* the ref rewritten in place with c1, its old mtime put back */
	{
		FILE *f;
		char path[1100];

		struct stat before;
		struct timespec ts[2];

		snprintf(path, sizeof path, "%s/%s", dir, ref);
		assert_int_equal(stat(path, &before), 0);
		f = fopen(path, "r+");
		assert_non_null(f);
		fprintf(f, "%s\n", c1);
		fclose(f);
		ts[0] = before.st_atim;
		ts[1] = before.st_mtim;
		assert_int_equal(utimensat(AT_FDCWD, path, ts, 0), 0);
	}
	assert_int_equal(snap(c, dir, false, &out, &v), SB_OK);
	assert_string_equal(v.commit, c1);
	assert_true(v.dirty); /* AGENTS.md is c2's */

	/* the refs packed (the loose ref gone), then a detached HEAD at c2 */
	snprintf(cmd, sizeof cmd,
	         "cd '%s' && git pack-refs --all >/dev/null 2>&1 && touch -d '-100 seconds' "
	         ".git/packed-refs",
	         dir);
	assert_int_equal(system(cmd), 0);
	assert_int_equal(snap(c, dir, false, &out, &v), SB_OK);
	assert_string_equal(v.commit, c1);
	put(dir, ".git/HEAD", c2);
	age(dir, ".git/HEAD", 100);
	assert_int_equal(snap(c, dir, false, &out, &v), SB_OK);
	assert_string_equal(v.commit, c2);

	/* back on a branch: another one, at a third commit */
	snprintf(cmd, sizeof cmd,
	         "cd '%s' && git -c user.name=t -c user.email=t@localhost checkout -q -b other "
	         ">/dev/null 2>&1 && echo x > notes.txt && git add notes.txt && git -c "
	         "user.name=t -c user.email=t@localhost commit -q -m x && git rev-parse HEAD > "
	         ".c3 && touch -d '-100 seconds' .git/HEAD .git/refs/heads/other",
	         dir);
	assert_int_equal(system(cmd), 0);
	first_line(dir, ".c3", c3, sizeof c3);
	assert_int_equal(snap(c, dir, false, &out, &v), SB_OK);
	assert_string_equal(v.commit, c3);
	workspace_cache_free(c);
	buf_free(&out);
	harness_rmrf(dir);
}

/* HEAD names a ref that is itself symbolic (git symbolic-ref refs/heads/alias
 * refs/heads/main): a commit on main moves HEAD while .git/HEAD, the alias
 * and packed-refs stay the same files. */
static void test_head_symbolic_chain(void **state)
{
	char dir[512], c1[41], c2[41], cmd[1400];
	struct buf out;
	struct workspace_version v;
	struct workspace_cache *c;
	git_repository *r;

	(void)state;
	assert_int_equal(harness_tmpdir(dir, sizeof dir), 0);
	assert_int_equal(workspace_cache_new(&c), SB_OK);
	buf_init(&out, 1 << 20);
	assert_int_equal(git_repository_init(&r, dir, 0), 0);
	git_repository_free(r);
	put(dir, "AGENTS.md", "rules\n");
	commit_all(dir, c1);
	snprintf(cmd, sizeof cmd,
	         "cd '%s' && b=$(git symbolic-ref HEAD) && git symbolic-ref refs/heads/alias $b && "
	         "git symbolic-ref HEAD refs/heads/alias && touch -d '-100 seconds' .git/HEAD "
	         ".git/refs/heads/alias $(git rev-parse --git-path $b) AGENTS.md",
	         dir);
	assert_int_equal(system(cmd), 0);
	assert_int_equal(snap(c, dir, false, &out, &v), SB_OK);
	assert_string_equal(v.commit, c1);
	assert_int_equal(snap(c, dir, false, &out, &v), SB_OK);
	assert_string_equal(v.commit, c1);

	/* a commit through the alias: only the branch it names is rewritten */
	put(dir, "AGENTS.md", "rules 2\n");
	snprintf(cmd, sizeof cmd,
	         "cd '%s' && git add AGENTS.md && git -c user.name=t -c user.email=t@localhost "
	         "commit -q -m two && test \"$(git symbolic-ref --no-recurse HEAD)\" = "
	         "refs/heads/alias && "
	         "git symbolic-ref refs/heads/alias >/dev/null && git rev-parse HEAD > .c2 && "
	         "touch -d '-100 seconds' AGENTS.md $(git rev-parse --git-path $(git "
	         "symbolic-ref refs/heads/alias))",
	         dir);
	assert_int_equal(system(cmd), 0);
	{
		char path[1100];
		FILE *f;

		snprintf(path, sizeof path, "%s/.c2", dir);
		f = fopen(path, "r");
		assert_non_null(f);
		assert_non_null(fgets(c2, sizeof c2, f));
		fclose(f);
		unlink(path);
	}
	assert_int_equal(snap(c, dir, false, &out, &v), SB_OK);
	assert_string_equal(v.commit, c2);
	assert_false(v.dirty);
	workspace_cache_free(c);
	buf_free(&out);
	harness_rmrf(dir);
}

/* A .git the gateway did not make is not opened: a "gitdir:" file or a
 * link to another repository, a .git naming another as its common
 * directory, one owned by another uid (what a command in the sandbox makes
 * in a workspace that had none). The snapshot says commit "none" and a
 * memory commit is refused, leaving the other repository as it was. */
static void test_git_dir_not_ours(void **state)
{
	char ws[512], other[512], c_other[41], path[1200], commit[64], why[256];
	const char *files[] = {"AGENTS.md"};
	struct workspace_cache *c;
	struct workspace_version v;
	struct buf out;
	git_repository *r;

	(void)state;
	assert_int_equal(harness_tmpdir(ws, sizeof ws), 0);
	assert_int_equal(harness_tmpdir(other, sizeof other), 0);
	assert_int_equal(git_repository_init(&r, other, 0), 0);
	git_repository_free(r);
	put(other, "AGENTS.md", "theirs\n");
	commit_all(other, c_other);
	put(ws, "AGENTS.md", "mine\n");
	buf_init(&out, 1 << 20);

	/* a gitdir file */
	snprintf(path, sizeof path, "gitdir: %s/.git\n", other);
	put(ws, ".git", path);
	assert_int_equal(workspace_cache_new(&c), SB_OK);
	assert_int_equal(snap(c, ws, false, &out, &v), SB_OK);
	assert_string_equal(v.commit, "none");
	assert_false(v.git);
	assert_int_not_equal(memory_commit_files(ws, files, 1, "m", commit, why, sizeof why),
	                     SB_OK);
	workspace_cache_free(c);

	/* a link to the other's .git */
	snprintf(path, sizeof path, "%s/.git", ws);
	assert_int_equal(unlink(path), 0);
	{
		char target[600];

		snprintf(target, sizeof target, "%s/.git", other);
		assert_int_equal(symlink(target, path), 0);
	}
	assert_int_equal(workspace_cache_new(&c), SB_OK);
	assert_int_equal(snap(c, ws, false, &out, &v), SB_OK);
	assert_string_equal(v.commit, "none");
	assert_int_not_equal(memory_commit_files(ws, files, 1, "m", commit, why, sizeof why),
	                     SB_OK);
	workspace_cache_free(c);
	assert_int_equal(unlink(path), 0);

	/* a .git of its own naming the other as its common directory */
	assert_int_equal(git_repository_init(&r, ws, 0), 0);
	git_repository_free(r);
	snprintf(path, sizeof path, "%s/.git\n", other);
	put(ws, ".git/commondir", path);
	assert_int_equal(workspace_cache_new(&c), SB_OK);
	assert_int_equal(snap(c, ws, false, &out, &v), SB_OK);
	assert_string_equal(v.commit, "none");
	assert_int_not_equal(memory_commit_files(ws, files, 1, "m", commit, why, sizeof why),
	                     SB_OK);
	workspace_cache_free(c);
	snprintf(path, sizeof path, "%s/.git/commondir", ws);
	assert_int_equal(unlink(path), 0);

	/* owned by another uid (root only can make one) */
	if (geteuid() == 0) {
		snprintf(path, sizeof path, "%s/.git", ws);
		assert_int_equal(chown(path, 65533, 65533), 0);
		assert_int_equal(workspace_cache_new(&c), SB_OK);
		assert_int_equal(snap(c, ws, false, &out, &v), SB_OK);
		assert_false(v.git);
		workspace_cache_free(c);
		assert_int_equal(chown(path, 0, 0), 0);
	}
	/* its own, the gateway's: opened (no commit yet) */
	assert_int_equal(workspace_cache_new(&c), SB_OK);
	assert_int_equal(snap(c, ws, false, &out, &v), SB_OK);
	assert_true(v.git);
	workspace_cache_free(c);

	/* the other repository is as it was */
	assert_int_equal(git_repository_open(&r, other), 0);
	{
		git_oid head;
		char hex[41];

		assert_int_equal(git_reference_name_to_id(&head, r, "HEAD"), 0);
		git_oid_tostr(hex, sizeof hex, &head);
		assert_string_equal(hex, c_other);
	}
	git_repository_free(r);
	buf_free(&out);
	harness_rmrf(ws);
	harness_rmrf(other);
}

/* The cached prompt is the uncached one, byte for byte. */
static void test_cached_equals_uncached(void **state)
{
	char dir[512];
	struct buf a, b;
	struct workspace_version v;
	struct workspace_cache *c;
	struct prompt_options po = {.agent_id = "x", .file_max_chars = 100, .main_session = true};
	char big[301];

	(void)state;
	assert_int_equal(harness_tmpdir(dir, sizeof dir), 0);
	memset(big, 'z', 300);
	big[300] = '\0';
	put(dir, "AGENTS.md", big);
	put(dir, "TOOLS.md", " \n");
	put(dir, "MEMORY.md", "m\n");
	assert_int_equal(workspace_cache_new(&c), SB_OK);
	buf_init(&a, 1 << 20);
	buf_init(&b, 1 << 20);
	assert_int_equal(workspace_prompt_build(dir, &po, &a, NULL), SB_OK);
	assert_int_equal(workspace_snapshot(c, dir, &po, &b, &v), SB_OK);
	assert_int_equal(a.len, b.len);
	assert_memory_equal(a.data, b.data, a.len);
	assert_true(v.info.files[0].truncated);
	assert_true(v.info.files[2].blank);
	workspace_cache_free(c);
	buf_free(&a);
	buf_free(&b);
	harness_rmrf(dir);
}

static void test_boot_parse(void **state)
{
	char ch[64], acc[64], tgt[64];
	const char *body;

	(void)state;
	assert_int_equal(boot_parse("deliver: telegram:default:-100123:thread\nCheck mail.\n", ch,
	                            acc, tgt, sizeof ch, &body),
	                 1);
	assert_string_equal(ch, "telegram");
	assert_string_equal(acc, "default");
	assert_string_equal(tgt, "-100123:thread");
	assert_string_equal(body, "Check mail.\n");
	assert_int_equal(
	    boot_parse("deliver:slack:work:C123  \r\n", ch, acc, tgt, sizeof ch, &body), 1);
	assert_string_equal(tgt, "C123");
	assert_string_equal(body, "");
	assert_int_equal(
	    boot_parse("Check mail.\ndeliver: a:b:c\n", ch, acc, tgt, sizeof ch, &body), 0);
	assert_string_equal(ch, "");
	assert_string_equal(body, "Check mail.\ndeliver: a:b:c\n");
	assert_int_equal(boot_parse("deliver: slack\nx\n", ch, acc, tgt, sizeof ch, &body), -1);
	assert_int_equal(boot_parse("deliver: a::c\n", ch, acc, tgt, sizeof ch, &body), -1);
	assert_int_equal(boot_parse("deliver: a:b:\n", ch, acc, tgt, sizeof ch, &body), -1);
}

static void test_init(void **state)
{
	char dir[512], sub[600], commit[41], why[1024], again[41];
	size_t created;
	struct buf id;
	git_repository *repo;
	git_commit *head;
	git_oid oid;
	struct workspace_version v;
	struct buf out;

	(void)state;
	assert_int_equal(harness_tmpdir(dir, sizeof dir), 0);
	snprintf(sub, sizeof sub, "%s/ops/ws", dir);
	assert_int_equal(workspace_init(sub, "ops", &created, commit, why, sizeof why), SB_OK);
	assert_int_equal(created, workspace_n_templates);
	assert_int_equal(strlen(commit), 40);
	buf_init(&id, 1 << 20);
	snprintf(why, sizeof why, "%s/IDENTITY.md", sub);
	assert_int_equal(harness_read_file(why, &id), 0);
	assert_non_null(strstr(id.data, "Name: ops"));
	assert_null(strstr(id.data, "{{agent}}"));
	assert_int_equal(git_repository_open(&repo, sub), 0);
	assert_int_equal(git_reference_name_to_id(&oid, repo, "HEAD"), 0);
	assert_int_equal(git_commit_lookup(&head, repo, &oid), 0);
	assert_string_equal(git_commit_message(head), "Start the workspace\n");
	assert_non_null(git_commit_author(head)->email);
	git_commit_free(head);
	git_repository_free(repo);
	/* clean at once */
	buf_init(&out, 1 << 20);
	assert_int_equal(snap(NULL, sub, true, &out, &v), SB_OK);
	assert_string_equal(v.commit, commit);
	assert_false(v.dirty);
	assert_non_null(strstr(out.data, "## BOOTSTRAP.md"));
	/* again: nothing written, no new commit */
	assert_int_equal(workspace_init(sub, "ops", &created, again, why, sizeof why), SB_OK);
	assert_int_equal(created, 0);
	assert_string_equal(again, "");
	/* without any git configuration, the author is Switchboard's */
	snprintf(sub, sizeof sub, "%s/empty", dir);
	assert_int_equal(mkdir(sub, 0700), 0);
	assert_int_equal(git_libgit2_opts(GIT_OPT_SET_SEARCH_PATH, GIT_CONFIG_LEVEL_GLOBAL, sub),
	                 0);
	assert_int_equal(git_libgit2_opts(GIT_OPT_SET_SEARCH_PATH, GIT_CONFIG_LEVEL_XDG, sub), 0);
	assert_int_equal(git_libgit2_opts(GIT_OPT_SET_SEARCH_PATH, GIT_CONFIG_LEVEL_SYSTEM, sub),
	                 0);
	snprintf(sub, sizeof sub, "%s/plain", dir);
	assert_int_equal(workspace_init(sub, NULL, &created, commit, why, sizeof why), SB_OK);
	assert_int_equal(git_repository_open(&repo, sub), 0);
	assert_int_equal(git_reference_name_to_id(&oid, repo, "HEAD"), 0);
	assert_int_equal(git_commit_lookup(&head, repo, &oid), 0);
	assert_string_equal(git_commit_author(head)->name, "Switchboard");
	assert_string_equal(git_commit_author(head)->email, "switchboard@localhost");
	git_commit_free(head);
	git_repository_free(repo);
	buf_free(&out);
	buf_free(&id);
	harness_rmrf(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_version_outside_git),
	    cmocka_unit_test(test_version_git),
	    cmocka_unit_test(test_stat_reuse),
	    cmocka_unit_test(test_head_reuse),
	    cmocka_unit_test(test_git_dir_not_ours),
	    cmocka_unit_test(test_head_symbolic_chain),
	    cmocka_unit_test(test_cached_equals_uncached),
	    cmocka_unit_test(test_boot_parse),
	    cmocka_unit_test(test_init),
	};
	int rc;

	assert_true(sodium_init() >= 0);
	git_libgit2_init();
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	git_libgit2_shutdown();
	return rc;
}
