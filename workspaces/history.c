/*
 * history.c - a workspace repository's log, files and diffs. See history.h.
 */
#include "workspaces/history.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/core/err.h"
#define GIT_LAZY_NAMES
#include "workspaces/git_lazy.h"
#include "workspaces/workspace.h"

#define HISTORY_LOG_MAX 1000
#define HISTORY_WALK_MAX 20000 /* commits looked at for one file's log */
#define HISTORY_FILES_MAX 10000
#define HISTORY_PATH_MAX 1024

/* A commit id, HEAD or HEAD~N (N up to 9999). */
static bool history_rev_ok(const char *rev)
{
	size_t n;

	if (!rev)
		return false;
	n = strspn(rev, "0123456789abcdefABCDEF");
	if (n >= 4 && n <= 40 && rev[n] == '\0')
		return true;
	if (strncmp(rev, "HEAD", 4) != 0)
		return false;
	if (rev[4] == '\0')
		return true;
	n = strspn(rev + 5, "0123456789");
	return rev[4] == '~' && n >= 1 && n <= 4 && rev[5 + n] == '\0';
}

/* A relative path inside the repository, without . or .. parts. */
static bool history_path_ok(const char *p)
{
	const char *s = p;

	if (!p || !*p || *p == '/' || strlen(p) >= HISTORY_PATH_MAX)
		return false;
	while (*s) {
		size_t n = strcspn(s, "/");

		if (n == 0 || (n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
			return false;
		s += n;
		if (*s == '/')
			s++;
	}
	return p[strlen(p) - 1] != '/';
}

static int history_open(const char *dir, git_repository **repo)
{
	*repo = NULL;
	if (!workspace_git_ready(NULL))
		return SB_ERR_IO;
	if (!workspace_git_dir_ok(dir, NULL) ||
	    git_repository_open_ext(repo, dir, GIT_REPOSITORY_OPEN_NO_SEARCH, NULL) != 0)
		return SB_ERR_NOTFOUND;
	return SB_OK;
}

static int history_commit(git_repository *repo, const char *rev, git_commit **out)
{
	git_object *obj = NULL, *peeled = NULL;
	int rc;

	*out = NULL;
	if (!history_rev_ok(rev))
		return SB_ERR_INVAL;
	if (git_revparse_single(&obj, repo, rev) != 0)
		return SB_ERR_NOTFOUND;
	rc = git_object_peel(&peeled, obj, GIT_OBJECT_COMMIT) == 0 ? SB_OK : SB_ERR_NOTFOUND;
	git_object_free(obj);
	*out = (git_commit *)peeled;
	return rc;
}

/* Length of the valid UTF-8 sequence at s (n bytes left), 0 when invalid. */
static size_t history_utf8_seq(const unsigned char *s, size_t n)
{
	size_t len;
	uint32_t cp;

	if (s[0] < 0x80)
		return s[0] ? 1 : 0;
	if (s[0] >= 0xC2 && s[0] <= 0xDF)
		len = 2, cp = s[0] & 0x1F;
	else if (s[0] >= 0xE0 && s[0] <= 0xEF)
		len = 3, cp = s[0] & 0x0F;
	else if (s[0] >= 0xF0 && s[0] <= 0xF4)
		len = 4, cp = s[0] & 0x07;
	else
		return 0;
	if (len > n)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xC0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3F);
	}
	if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
	    (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
		return 0;
	return len;
}

/* s as a JSON string of valid UTF-8: invalid bytes and NULs become U+FFFD
 * (a text sent to a browser must be valid, or it drops the connection). */
static json_t *history_text(const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;
	char *out = malloc(n * 3 + 1);
	size_t o = 0;
	json_t *j;

	if (!out)
		return NULL;
	for (size_t i = 0; i < n;) {
		size_t k = history_utf8_seq(u + i, n - i);

		if (k) {
			memcpy(out + o, u + i, k);
			o += k;
			i += k;
		} else {
			memcpy(out + o, "\xEF\xBF\xBD", 3);
			o += 3;
			i++;
		}
	}
	j = json_stringn(out, o);
	free(out);
	return j;
}

/* history_text of a NUL-terminated string; "" for NULL. Everything read
 * from a repository (names, messages, paths) goes through it: git allows
 * any bytes there, and an entry that failed to become JSON would vanish
 * from what the operator reviews. */
static json_t *history_str(const char *s)
{
	return history_text(s ? s : "", s ? strlen(s) : 0);
}

static void history_oid(const git_oid *id, char out[GIT_OID_HEXSZ + 1])
{
	git_oid_tostr(out, GIT_OID_HEXSZ + 1, id);
}

/* ---- log ---- */

static json_t *history_commit_json(git_commit *c)
{
	char id[GIT_OID_HEXSZ + 1], pid[GIT_OID_HEXSZ + 1];
	const git_signature *a = git_commit_author(c);
	json_t *parents = json_array();

	history_oid(git_commit_id(c), id);
	for (unsigned i = 0; parents && i < git_commit_parentcount(c); i++) {
		history_oid(git_commit_parent_id(c, i), pid);
		json_array_append_new(parents, json_string(pid));
	}
	return json_pack(
	    "{ss so so so so so sI}", "id", id, "parents", parents ? parents : json_array(),
	    "summary", history_str(git_commit_summary(c)), "message",
	    history_str(git_commit_message(c)), "author", history_str(a ? a->name : NULL), "email",
	    history_str(a ? a->email : NULL), "time", (json_int_t)git_commit_time(c) * 1000);
}

/* Whether c changed path compared with its first parent. */
static bool history_touches(git_commit *c, const char *path)
{
	git_tree *t = NULL, *pt = NULL;
	git_commit *parent = NULL;
	git_tree_entry *e = NULL, *pe = NULL;
	bool changed;

	if (git_commit_tree(&t, c) != 0)
		return false;
	git_tree_entry_bypath(&e, t, path);
	if (git_commit_parentcount(c) > 0 && git_commit_parent(&parent, c, 0) == 0 &&
	    git_commit_tree(&pt, parent) == 0)
		git_tree_entry_bypath(&pe, pt, path);
	if (!e || !pe)
		changed = e != pe; /* added or deleted (or absent in both) */
	else
		changed = git_oid_cmp(git_tree_entry_id(e), git_tree_entry_id(pe)) != 0;
	git_tree_entry_free(e);
	git_tree_entry_free(pe);
	git_tree_free(t);
	git_tree_free(pt);
	git_commit_free(parent);
	return changed;
}

int workspace_git_log(const char *dir, const char *path, size_t limit, json_t **out)
{
	git_repository *repo = NULL;
	git_revwalk *walk = NULL;
	git_reference *head = NULL;
	json_t *commits = NULL;
	char head_id[GIT_OID_HEXSZ + 1] = "";
	git_oid oid;
	size_t seen = 0;
	int rc;

	*out = NULL;
	if (path && !history_path_ok(path))
		return SB_ERR_INVAL;
	if (limit < 1 || limit > HISTORY_LOG_MAX)
		limit = HISTORY_LOG_MAX;
	if ((rc = history_open(dir, &repo)))
		return rc;
	rc = SB_ERR_NOMEM;
	if (!(commits = json_array()))
		goto out;
	if (git_repository_head(&head, repo) == 0 && git_reference_target(head)) {
		history_oid(git_reference_target(head), head_id);
		rc = SB_ERR_IO;
		if (git_revwalk_new(&walk, repo) != 0 ||
		    git_revwalk_sorting(walk, GIT_SORT_TIME) != 0 ||
		    git_revwalk_push_head(walk) != 0)
			goto out;
		while (json_array_size(commits) < limit && seen++ < HISTORY_WALK_MAX &&
		       git_revwalk_next(&oid, walk) == 0) {
			git_commit *c = NULL;

			if (git_commit_lookup(&c, repo, &oid) != 0)
				continue;
			if (!path || history_touches(c, path))
				json_array_append_new(commits, history_commit_json(c));
			git_commit_free(c);
		}
	}
	rc = SB_ERR_NOMEM;
	*out = json_pack("{so so}", "head", *head_id ? json_string(head_id) : json_null(),
	                 "commits", commits);
	commits = NULL;
	if (*out)
		rc = SB_OK;
out:
	json_decref(commits);
	git_revwalk_free(walk);
	git_reference_free(head);
	git_repository_free(repo);
	return rc;
}

/* ---- files, show ---- */

struct history_walk {
	git_repository *repo;
	json_t *files;
};

static int history_walk_cb(const char *root, const git_tree_entry *e, void *payload)
{
	struct history_walk *w = payload;
	char path[HISTORY_PATH_MAX], blob[GIT_OID_HEXSZ + 1];
	git_odb *odb = NULL;
	size_t size = 0;
	git_object_t type;

	if (git_tree_entry_type(e) != GIT_OBJECT_BLOB)
		return 0;
	if (json_array_size(w->files) >= HISTORY_FILES_MAX)
		return -1;
	if (snprintf(path, sizeof path, "%s%s", root, git_tree_entry_name(e)) >= (int)sizeof path)
		return 0;
	if (git_repository_odb(&odb, w->repo) == 0) {
		if (git_odb_read_header(&size, &type, odb, git_tree_entry_id(e)) != 0)
			size = 0;
		git_odb_free(odb);
	}
	history_oid(git_tree_entry_id(e), blob);
	json_array_append_new(w->files, json_pack("{so sI ss}", "path", history_str(path), "size",
	                                          (json_int_t)size, "blob", blob));
	return 0;
}

int workspace_git_files(const char *dir, const char *rev, json_t **out)
{
	git_repository *repo = NULL;
	git_commit *c = NULL;
	git_tree *t = NULL;
	struct history_walk w = {0};
	char id[GIT_OID_HEXSZ + 1];
	int rc;

	*out = NULL;
	if ((rc = history_open(dir, &repo)))
		return rc;
	if ((rc = history_commit(repo, rev ? rev : "HEAD", &c)))
		goto out;
	rc = SB_ERR_IO;
	if (git_commit_tree(&t, c) != 0)
		goto out;
	rc = SB_ERR_NOMEM;
	w.repo = repo;
	if (!(w.files = json_array()))
		goto out;
	git_tree_walk(t, GIT_TREEWALK_PRE, history_walk_cb, &w);
	history_oid(git_commit_id(c), id);
	*out = json_pack("{ss so sb}", "rev", id, "files", w.files, "truncated",
	                 json_array_size(w.files) >= HISTORY_FILES_MAX);
	w.files = NULL;
	rc = *out ? SB_OK : SB_ERR_NOMEM;
out:
	json_decref(w.files);
	git_tree_free(t);
	git_commit_free(c);
	git_repository_free(repo);
	return rc;
}

int workspace_git_show(const char *dir, const char *rev, const char *path, size_t max, json_t **out)
{
	git_repository *repo = NULL;
	git_commit *c = NULL;
	git_tree *t = NULL;
	git_tree_entry *e = NULL;
	git_blob *b = NULL;
	git_odb *odb = NULL;
	git_object_t type;
	char id[GIT_OID_HEXSZ + 1], blob[GIT_OID_HEXSZ + 1];
	size_t size;
	bool binary;
	int rc;

	*out = NULL;
	if (!history_path_ok(path))
		return SB_ERR_INVAL;
	if ((rc = history_open(dir, &repo)))
		return rc;
	if ((rc = history_commit(repo, rev ? rev : "HEAD", &c)))
		goto out;
	rc = SB_ERR_NOTFOUND;
	if (git_commit_tree(&t, c) != 0 || git_tree_entry_bypath(&e, t, path) != 0 ||
	    git_tree_entry_type(e) != GIT_OBJECT_BLOB)
		goto out;
	history_oid(git_commit_id(c), id);
	history_oid(git_tree_entry_id(e), blob);
	/* A blob is read whole into memory: look at its size first. */
	rc = SB_ERR_IO;
	if (git_repository_odb(&odb, repo) != 0 ||
	    git_odb_read_header(&size, &type, odb, git_tree_entry_id(e)) != 0)
		goto out;
	if (size > WORKSPACE_SHOW_LOAD_MAX) {
		*out = json_pack("{ss so sI ss sb sb sb}", "rev", id, "path", history_str(path),
		                 "size", (json_int_t)size, "blob", blob, "binary", 0, "truncated",
		                 1, "tooLarge", 1);
		rc = *out ? SB_OK : SB_ERR_NOMEM;
		goto out;
	}
	rc = SB_ERR_NOTFOUND;
	if (git_blob_lookup(&b, repo, git_tree_entry_id(e)) != 0)
		goto out;
	size = (size_t)git_blob_rawsize(b);
	binary = git_blob_is_binary(b);
	*out = json_pack("{ss so sI ss sb sb}", "rev", id, "path", history_str(path), "size",
	                 (json_int_t)size, "blob", blob, "binary", binary, "truncated",
	                 !binary && size > max);
	if (*out && !binary)
		json_object_set_new(
		    *out, "text",
		    history_text((const char *)git_blob_rawcontent(b), size > max ? max : size));
	rc = *out ? SB_OK : SB_ERR_NOMEM;
out:
	git_blob_free(b);
	git_odb_free(odb);
	git_tree_entry_free(e);
	git_tree_free(t);
	git_commit_free(c);
	git_repository_free(repo);
	return rc;
}

/* ---- diff ---- */

static const char *history_status(git_delta_t s)
{
	switch (s) {
	case GIT_DELTA_ADDED:
		return "added";
	case GIT_DELTA_DELETED:
		return "deleted";
	case GIT_DELTA_RENAMED:
		return "renamed";
	case GIT_DELTA_COPIED:
		return "copied";
	case GIT_DELTA_TYPECHANGE:
		return "typechange";
	case GIT_DELTA_UNTRACKED:
		return "untracked";
	default:
		return "modified";
	}
}

int workspace_git_diff(const char *dir, const char *from, const char *to, const char *path,
                       size_t max, json_t **out)
{
	git_repository *repo = NULL;
	git_commit *a = NULL, *b = NULL;
	git_tree *ta = NULL, *tb = NULL;
	git_diff *diff = NULL;
	git_diff_options opts;
	char *paths[1];
	char ida[GIT_OID_HEXSZ + 1], idb[GIT_OID_HEXSZ + 1];
	json_t *files = NULL;
	size_t used = 0, n = 0;
	bool truncated = false, worktree;
	int rc;

	*out = NULL;
	to = to ? to : "HEAD";
	worktree = strcmp(to, WORKSPACE_WORKTREE) == 0;
	if (path && !history_path_ok(path))
		return SB_ERR_INVAL;
	if (!history_rev_ok(from) || (!worktree && !history_rev_ok(to)))
		return SB_ERR_INVAL;
	if ((rc = history_open(dir, &repo)))
		return rc;
	if ((rc = history_commit(repo, from, &a)) ||
	    (!worktree && (rc = history_commit(repo, to, &b))))
		goto out;
	rc = SB_ERR_IO;
	if (git_commit_tree(&ta, a) != 0 || (b && git_commit_tree(&tb, b) != 0))
		goto out;
	git_diff_options_init(&opts, GIT_DIFF_OPTIONS_VERSION);
	opts.context_lines = 3;
	/* A file bigger than the whole budget could not be shown anyway; above
	 * max_size libgit2 reads only its size (a blob's header, a file's
	 * stat), never its bytes. */
	opts.max_size = (git_off_t)max;
	if (path) {
		paths[0] = (char *)path;
		opts.pathspec.strings = paths;
		opts.pathspec.count = 1;
		opts.flags |= GIT_DIFF_DISABLE_PATHSPEC_MATCH;
	}
	if (worktree) {
		opts.flags |= GIT_DIFF_INCLUDE_UNTRACKED | GIT_DIFF_RECURSE_UNTRACKED_DIRS |
		              GIT_DIFF_SHOW_UNTRACKED_CONTENT;
		if (git_diff_tree_to_workdir(&diff, repo, ta, &opts) != 0)
			goto out;
	} else if (git_diff_tree_to_tree(&diff, repo, ta, tb, &opts) != 0) {
		goto out;
	}
	rc = SB_ERR_NOMEM;
	if (!(files = json_array()))
		goto out;
	n = git_diff_num_deltas(diff);
	for (size_t i = 0; i < n && i < WORKSPACE_DIFF_FILES_MAX; i++) {
		const git_diff_delta *d = git_diff_get_delta(diff, i);
		git_patch *p = NULL;
		git_buf text = {0};
		size_t adds = 0, dels = 0;
		bool binary = d->flags & GIT_DIFF_FLAG_BINARY, big = false, counted = false;
		json_t *f;

		/* Once the budget is spent no more content is read: the rest are
		 * listed by name and status only. */
		if (!truncated && git_patch_from_diff(&p, diff, i) == 0 && p) {
			const git_diff_delta *pd = git_patch_get_delta(p);

			big = (size_t)pd->new_file.size > max || (size_t)pd->old_file.size > max;
			binary = !big && (binary || (pd->flags & GIT_DIFF_FLAG_BINARY));
			counted = !big;
			if (counted)
				git_patch_line_stats(NULL, &adds, &dels, p);
			if (!binary && !big && git_patch_to_buf(&text, p) == 0 &&
			    used + text.size > max) {
				truncated = true;
				git_buf_dispose(&text);
			}
		}
		f = json_pack("{so so ss sb}", "path", history_str(d->new_file.path), "oldPath",
		              history_str(d->old_file.path), "status", history_status(d->status),
		              "binary", binary);
		if (f && counted) {
			json_object_set_new(f, "additions", json_integer((json_int_t)adds));
			json_object_set_new(f, "deletions", json_integer((json_int_t)dels));
		}
		if (f && big)
			json_object_set_new(f, "tooLarge", json_true());
		if (f && text.ptr) {
			json_object_set_new(f, "patch", history_text(text.ptr, text.size));
			used += text.size;
		}
		git_buf_dispose(&text);
		git_patch_free(p);
		json_array_append_new(files, f);
	}
	if (n > WORKSPACE_DIFF_FILES_MAX)
		truncated = true;
	history_oid(git_commit_id(a), ida);
	if (b)
		history_oid(git_commit_id(b), idb);
	*out = json_pack("{ss ss so sb sI}", "from", ida, "to", b ? idb : WORKSPACE_WORKTREE,
	                 "files", files, "truncated", truncated, "filesTotal", (json_int_t)n);
	files = NULL;
	rc = *out ? SB_OK : SB_ERR_NOMEM;
out:
	json_decref(files);
	git_diff_free(diff);
	git_tree_free(ta);
	git_tree_free(tb);
	git_commit_free(a);
	git_commit_free(b);
	git_repository_free(repo);
	return rc;
}

/* ---- the state of the working tree ---- */

int workspace_git_state(const char *dir, char commit[41], bool *dirty)
{
	git_repository *repo = NULL;
	git_status_list *st = NULL;
	git_status_options so;
	git_oid head;
	int rc;

	snprintf(commit, 41, "%s", "none");
	*dirty = false;
	rc = history_open(dir, &repo);
	if (rc)
		return rc;
	if (git_repository_is_bare(repo)) {
		rc = SB_ERR_NOTFOUND;
		goto out;
	}
	/* An unborn branch has no HEAD commit: every file is uncommitted. */
	if (git_reference_name_to_id(&head, repo, "HEAD") == 0)
		history_oid(&head, commit);
	rc = SB_ERR_IO;
	if (git_status_options_init(&so, GIT_STATUS_OPTIONS_VERSION) != 0)
		goto out;
	so.show = GIT_STATUS_SHOW_INDEX_AND_WORKDIR;
	so.flags = GIT_STATUS_OPT_INCLUDE_UNTRACKED | GIT_STATUS_OPT_EXCLUDE_SUBMODULES;
	if (git_status_list_new(&st, repo, &so) != 0)
		goto out;
	*dirty = git_status_list_entrycount(st) > 0;
	rc = SB_OK;
out:
	git_status_list_free(st);
	git_repository_free(repo);
	return rc;
}
