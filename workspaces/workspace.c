/*
 * workspace.c - see workspace.h.
 */
#include "workspaces/workspace.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gateway/core/beneath.h"
#include "gateway/core/err.h"
#include "gateway/core/log.h"
#define GIT_LAZY_NAMES
#include "workspaces/git_lazy.h"
#include "workspaces/scaffold.h"

#define WORKSPACE_FILE_MAX (64u << 20)
/* A file modified this recently (ns) when read may change again unseen. */
#define WORKSPACE_RACY_NS 2000000000LL

/* ---- libgit2, loaded and initialised once per process ---- */

static pthread_once_t workspace_git_once = PTHREAD_ONCE_INIT;
static int workspace_git_ok;
static const char *workspace_git_why = "libgit2 failed to initialise";

static void workspace_git_shutdown(void)
{
	git_libgit2_shutdown();
}

static void workspace_git_init(void)
{
	const char *why = NULL;

	/* Loaded here, on first use, not at start-up (git_lazy.h). */
	if (git_lazy_load(&why) != SB_OK) {
		workspace_git_why = why;
		log_error("workspace", "no git", LOG_S("error", why));
		return;
	}
	workspace_git_ok = git_libgit2_init() > 0;
	if (workspace_git_ok)
		atexit(workspace_git_shutdown);
	/* A root gateway's work trees belong to the sandbox's uid, whose
	 * commands write them (agents/safety/sandbox.h, sandbox_own), and
	 * libgit2, like git, refuses a work tree another uid owns. Their
	 * .git stays root's and read-only to commands, so the repository's
	 * configuration is not another user's to set: the check guards
	 * nothing here. Every repository is opened without searching up. */
	if (workspace_git_ok && geteuid() == 0 &&
	    git_libgit2_opts(GIT_OPT_SET_OWNER_VALIDATION, 0) != 0)
		workspace_git_ok = 0;
}

static bool workspace_git(void)
{
	pthread_once(&workspace_git_once, workspace_git_init);
	return workspace_git_ok;
}

bool workspace_git_ready(const char **why)
{
	if (workspace_git())
		return true;
	if (why)
		*why = workspace_git_why;
	return false;
}

/* ---- the cache ---- */

struct ws_file {
	bool known; /* looked at before */
	bool present;
	bool refused; /* a symlink or another non-regular file: never read */
	bool racy;    /* read again next time whatever stat says */
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime, ctime;
	char *text;
	size_t len;
	unsigned char hash[PROMPT_HASH_BYTES];
	git_oid blob; /* the bytes as a git blob */
};

struct ws_entry {
	struct ws_entry *next;
	char *dir;
	pthread_mutex_t mu;
	struct ws_file files[PROMPT_FILES_MAX];
	/* git */
	git_repository *repo;
	dev_t git_dev;
	ino_t git_ino;
	bool head_known;
	git_oid head;
	/* What HEAD was read from (.git/HEAD, the ref it names, packed-refs):
	 * while all three are the same files, unchanged and not just written,
	 * HEAD is what it was. */
	bool stamp_known;
	struct ws_stamp {
		bool present;
		dev_t dev;
		ino_t ino;
		off_t size;
		struct timespec mtime, ctime;
	} stamp[3];
	bool in_tree[PROMPT_FILES_MAX];
	git_oid tree_blob[PROMPT_FILES_MAX];
};

struct workspace_cache {
	pthread_mutex_t mu;
	struct ws_entry *entries;
	struct workspace_cache_stats stats;
};

int workspace_cache_new(struct workspace_cache **out)
{
	struct workspace_cache *c = calloc(1, sizeof *c);

	*out = NULL;
	if (!c)
		return SB_ERR_NOMEM;
	pthread_mutex_init(&c->mu, NULL);
	*out = c;
	return SB_OK;
}

static void ws_entry_free(struct ws_entry *e)
{
	for (size_t i = 0; i < PROMPT_FILES_MAX; i++)
		free(e->files[i].text);
	if (e->repo)
		git_repository_free(e->repo);
	pthread_mutex_destroy(&e->mu);
	free(e->dir);
	free(e);
}

void workspace_cache_free(struct workspace_cache *c)
{
	if (!c)
		return;
	while (c->entries) {
		struct ws_entry *e = c->entries;

		c->entries = e->next;
		ws_entry_free(e);
	}
	pthread_mutex_destroy(&c->mu);
	free(c);
}

void workspace_cache_stats(struct workspace_cache *c, struct workspace_cache_stats *out)
{
	pthread_mutex_lock(&c->mu);
	*out = c->stats;
	pthread_mutex_unlock(&c->mu);
}

static struct ws_entry *ws_entry_get(struct workspace_cache *c, const char *dir)
{
	struct ws_entry *e;

	pthread_mutex_lock(&c->mu);
	for (e = c->entries; e; e = e->next)
		if (strcmp(e->dir, dir) == 0)
			goto out;
	e = calloc(1, sizeof *e);
	if (!e)
		goto out;
	e->dir = strdup(dir);
	if (!e->dir) {
		free(e);
		e = NULL;
		goto out;
	}
	pthread_mutex_init(&e->mu, NULL);
	e->next = c->entries;
	c->entries = e;
out:
	pthread_mutex_unlock(&c->mu);
	return e;
}

static void ws_count(struct workspace_cache *c, uint64_t *field)
{
	pthread_mutex_lock(&c->mu);
	(*field)++;
	pthread_mutex_unlock(&c->mu);
}

static bool ws_same_time(const struct timespec *a, const struct timespec *b)
{
	return a->tv_sec == b->tv_sec && a->tv_nsec == b->tv_nsec;
}

static bool ws_same_identity(const struct ws_file *f, const struct stat *st)
{
	return f->dev == st->st_dev && f->ino == st->st_ino && f->size == st->st_size &&
	       ws_same_time(&f->mtime, &st->st_mtim) && ws_same_time(&f->ctime, &st->st_ctim);
}

/* Reads all of fd (size bytes expected, but whatever is there counts). */
static int ws_read_fd(int fd, size_t hint, char **out, size_t *len)
{
	size_t cap = hint + 1, n = 0;
	char *b = malloc(cap);

	if (!b)
		return SB_ERR_NOMEM;
	for (;;) {
		ssize_t r;

		if (n + 1 >= cap) {
			char *nb;

			if (cap >= WORKSPACE_FILE_MAX) {
				free(b);
				return SB_ERR_TOOBIG;
			}
			nb = realloc(b, cap * 2);
			if (!nb) {
				free(b);
				return SB_ERR_NOMEM;
			}
			b = nb;
			cap *= 2;
		}
		r = read(fd, b + n, cap - 1 - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			free(b);
			return SB_ERR_IO;
		}
		if (r == 0)
			break;
		n += (size_t)r;
	}
	b[n] = '\0';
	*out = b;
	*len = n;
	return SB_OK;
}

/* Brings f up to date with the file name beneath the workspace's fd root:
 * never through a symlink, a regular file only (beneath.h). */
static int ws_file_refresh(struct workspace_cache *c, struct ws_file *f, int root, const char *name)
{
	struct stat st;
	struct timespec now;
	char *text = NULL;
	size_t len = 0;
	int fd, rc;

	rc = beneath_stat(root, name, &st);
	if (rc == SB_ERR_NOTFOUND)
		goto absent;
	if (rc == SB_ERR_PERM)
		goto refused;
	if (rc)
		return rc == SB_ERR_NOMEM ? rc : SB_ERR_IO;
	if (S_ISDIR(st.st_mode))
		goto absent; /* a directory of that name is no bootstrap file */
	if (!S_ISREG(st.st_mode))
		goto refused;
	if (f->known && f->present && !f->racy && ws_same_identity(f, &st)) {
		ws_count(c, &c->stats.file_reuses);
		return SB_OK;
	}
	rc = beneath_open(root, name, O_RDONLY, 0, BENEATH_REGULAR, &fd);
	if (rc == SB_ERR_NOTFOUND)
		goto absent;
	if (rc == SB_ERR_PERM)
		goto refused; /* swapped for a symlink since the stat */
	if (rc)
		return rc == SB_ERR_NOMEM ? rc : SB_ERR_IO;
	/* The identity of what is actually read (it may have changed since). */
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return SB_ERR_IO;
	}
	clock_gettime(CLOCK_REALTIME, &now);
	rc = ws_read_fd(fd, (size_t)st.st_size, &text, &len);
	close(fd);
	if (rc)
		return rc;
	ws_count(c, &c->stats.file_reads);
	free(f->text);
	f->text = text;
	f->len = len;
	f->known = f->present = true;
	f->dev = st.st_dev;
	f->ino = st.st_ino;
	f->size = st.st_size;
	f->mtime = st.st_mtim;
	f->ctime = st.st_ctim;
	f->racy = ((long long)now.tv_sec - st.st_mtim.tv_sec) * 1000000000LL +
	              (now.tv_nsec - st.st_mtim.tv_nsec) <
	          WORKSPACE_RACY_NS;
	crypto_generichash(f->hash, sizeof f->hash, (const unsigned char *)text, len, NULL, 0);
	if (!workspace_git() || git_odb_hash(&f->blob, text, len, GIT_OBJECT_BLOB) != 0)
		memset(&f->blob, 0, sizeof f->blob);
	return SB_OK;
absent:
	free(f->text);
	memset(f, 0, sizeof *f);
	f->known = true;
	return SB_OK;
refused:
	free(f->text);
	memset(f, 0, sizeof *f);
	f->known = f->refused = true;
	return SB_OK;
}

/* The prompt source over the entry's files (refreshed before the build). */
static int ws_source_get(void *ud, size_t index, const char *name, const char *path,
                         const char **text, size_t *len, const unsigned char **hash)
{
	struct ws_entry *e = ud;
	struct ws_file *f = &e->files[index];

	(void)name;
	(void)path;
	if (f->refused)
		return SB_ERR_PERM;
	if (!f->present)
		return SB_ERR_NOTFOUND;
	*text = f->text;
	*len = f->len;
	*hash = f->hash;
	return SB_OK;
}

/* ---- git ---- */

static void ws_git_close(struct ws_entry *e)
{
	if (e->repo)
		git_repository_free(e->repo);
	e->repo = NULL;
	e->head_known = false;
	e->stamp_known = false;
}

/* workspace_git_dir_ok's checks on an open .git; the descriptor (the
 * caller closes it) or -1. */
static int ws_git_dir_open(const char *dir, struct stat *out)
{
	char path[PATH_MAX];
	struct stat st, cd;
	int fd;

	if (snprintf(path, sizeof path, "%s/.git", dir) >= (int)sizeof path)
		return -1;
	fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -1;
	if (fstat(fd, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() ||
	    fstatat(fd, "commondir", &cd, AT_SYMLINK_NOFOLLOW) == 0 || errno != ENOENT) {
		close(fd);
		return -1;
	}
	if (out)
		*out = st;
	return fd;
}

bool workspace_git_dir_ok(const char *dir, struct stat *out)
{
	int fd = ws_git_dir_open(dir, out);

	if (fd < 0)
		return false;
	close(fd);
	return true;
}

/* Opens (or keeps) the repository whose top is e->dir. -1: none; else the
 * descriptor of its .git, checked as workspace_git_dir_ok checks it, which
 * the HEAD stamp of this turn reads (the caller closes it). */
static int ws_git_open(struct ws_entry *e)
{
	struct stat st;
	int gd = ws_git_dir_open(e->dir, &st);

	if (gd < 0) {
		ws_git_close(e);
		return -1;
	}
	if (e->repo && e->git_dev == st.st_dev && e->git_ino == st.st_ino)
		return gd;
	ws_git_close(e);
	if (!workspace_git() ||
	    git_repository_open_ext(&e->repo, e->dir, GIT_REPOSITORY_OPEN_NO_SEARCH, NULL) != 0) {
		e->repo = NULL;
		close(gd);
		return -1;
	}
	e->git_dev = st.st_dev;
	e->git_ino = st.st_ino;
	return gd;
}

/* The files HEAD is read from, as they are now: .git/HEAD, the loose ref it
 * names ("ref: refs/heads/x"), .git/packed-refs. false when that cannot be
 * told (.git is not a directory, HEAD unreadable or odd, a file changed in
 * the last WORKSPACE_RACY_NS, which a stamp cannot vouch for). git replaces
 * each of them by a rename: a new inode every time. */
static bool ws_head_stamp(int gd, struct ws_stamp st[3])
{
	char head[256];
	const char *rel[3] = {"HEAD", NULL, "packed-refs"};
	struct timespec now;
	ssize_t n;
	int fd;
	bool ok = true;

	fd = openat(gd, "HEAD", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	n = fd >= 0 ? read(fd, head, sizeof head - 1) : -1;
	if (fd >= 0)
		close(fd);
	if (n <= 5 || (size_t)n >= sizeof head - 1)
		return false;
	head[n] = '\0';
	if (strncmp(head, "ref: refs/", 10) == 0) {
		char *nl = strchr(head, '\n');

		if (nl)
			*nl = '\0';
		if (strstr(head + 5, "..") || strchr(head + 5, '\n'))
			ok = false;
		rel[1] = head + 5;
	}
	clock_gettime(CLOCK_REALTIME, &now);
	for (int i = 0; ok && i < 3; i++) {
		struct stat sb;

		memset(&st[i], 0, sizeof st[i]);
		if (!rel[i])
			continue;
		if (fstatat(gd, rel[i], &sb, AT_SYMLINK_NOFOLLOW) != 0) {
			if (errno != ENOENT || i == 0)
				ok = false;
			continue;
		}
		if (!S_ISREG(sb.st_mode) ||
		    ((long long)now.tv_sec - sb.st_mtim.tv_sec) * 1000000000LL +
		            (now.tv_nsec - sb.st_mtim.tv_nsec) <
		        WORKSPACE_RACY_NS) {
			ok = false;
			continue;
		}
		st[i].present = true;
		st[i].dev = sb.st_dev;
		st[i].ino = sb.st_ino;
		st[i].size = sb.st_size;
		st[i].mtime = sb.st_mtim;
		st[i].ctime = sb.st_ctim;
	}
	return ok;
}

static bool ws_same_stamp(const struct ws_stamp a[3], const struct ws_stamp b[3])
{
	for (int i = 0; i < 3; i++)
		if (a[i].present != b[i].present ||
		    (a[i].present &&
		     (a[i].dev != b[i].dev || a[i].ino != b[i].ino || a[i].size != b[i].size ||
		      !ws_same_time(&a[i].mtime, &b[i].mtime) ||
		      !ws_same_time(&a[i].ctime, &b[i].ctime))))
			return false;
	return true;
}

/* Does HEAD name a ref that is itself symbolic? (true when that cannot be
 * told: the stamp is then not kept.) */
static bool ws_head_chain_long(git_repository *repo)
{
	git_reference *head = NULL, *ref = NULL;
	bool long_chain = true;

	if (git_reference_lookup(&head, repo, "HEAD") != 0)
		return true;
	if (git_reference_type(head) != GIT_REFERENCE_SYMBOLIC)
		long_chain = false;
	else if (git_reference_lookup(&ref, repo, git_reference_symbolic_target(head)) == 0)
		long_chain = git_reference_type(ref) == GIT_REFERENCE_SYMBOLIC;
	git_reference_free(ref);
	git_reference_free(head);
	return long_chain;
}

/* Looks up HEAD and, when it moved, the blobs of the bootstrap files in
 * its tree. false: no commit (unborn branch) or unreadable. */
static bool ws_git_head(struct workspace_cache *c, struct ws_entry *e, int gd)
{
	git_oid oid;
	git_commit *commit = NULL;
	git_tree *tree = NULL;
	struct ws_stamp stamp[3];
	bool ok = false, stamped = ws_head_stamp(gd, stamp);

	if (stamped && e->stamp_known && e->head_known && ws_same_stamp(stamp, e->stamp)) {
		ws_count(c, &c->stats.head_reuses);
		return true;
	}
	e->stamp_known = false;
	if (git_reference_name_to_id(&oid, e->repo, "HEAD") != 0) {
		e->head_known = false;
		return false;
	}
	/* The stamp was taken before the read: a change after it makes the
	 * next stamp differ. It covers HEAD and the one ref HEAD names: when
	 * that ref is itself symbolic (git symbolic-ref refs/heads/alias
	 * refs/heads/main), a commit rewrites a ref the stamp does not see. */
	if (stamped && ws_head_chain_long(e->repo))
		stamped = false;
	if (stamped) {
		memcpy(e->stamp, stamp, sizeof e->stamp);
		e->stamp_known = true;
	}
	if (e->head_known && git_oid_equal(&oid, &e->head))
		return true;
	e->head_known = false;
	if (git_commit_lookup(&commit, e->repo, &oid) != 0 || git_commit_tree(&tree, commit) != 0)
		goto out;
	for (size_t i = 0; i < PROMPT_FILES_MAX; i++) {
		const git_tree_entry *te = git_tree_entry_byname(tree, prompt_file_names[i]);

		e->in_tree[i] = te && git_tree_entry_type(te) == GIT_OBJECT_BLOB;
		if (e->in_tree[i])
			git_oid_cpy(&e->tree_blob[i], git_tree_entry_id(te));
	}
	git_oid_cpy(&e->head, &oid);
	e->head_known = ok = true;
	ws_count(c, &c->stats.tree_reads);
out:
	git_tree_free(tree);
	git_commit_free(commit);
	return ok;
}

static size_t ws_index_of(const char *name)
{
	for (size_t i = 0; i < PROMPT_FILES_MAX; i++)
		if (strcmp(prompt_file_names[i], name) == 0)
			return i;
	return PROMPT_FILES_MAX;
}

static void ws_version(struct workspace_cache *c, struct ws_entry *e, struct workspace_version *v)
{
	crypto_generichash_state hs;
	bool head;
	int gd;

	crypto_generichash_init(&hs, NULL, 0, sizeof v->hash);
	for (size_t k = 0; k < v->info.n_files; k++) {
		const struct prompt_file *pf = &v->info.files[k];

		if (!pf->present)
			continue;
		crypto_generichash_update(&hs, (const unsigned char *)pf->name,
		                          strlen(pf->name) + 1);
		crypto_generichash_update(&hs, pf->hash, sizeof pf->hash);
	}
	crypto_generichash_final(&hs, v->hash, sizeof v->hash);
	for (size_t k = 0; k < v->info.n_files; k++) {
		size_t i = ws_index_of(v->info.files[k].name);

		if (i == PROMPT_FILES_MAX || !v->info.files[k].present)
			continue;
		if (workspace_git())
			git_oid_tostr(v->files[k].blob, sizeof v->files[k].blob, &e->files[i].blob);
		else /* no libgit2: the zero id git_odb_hash's failure gives too */
			snprintf(v->files[k].blob, sizeof v->files[k].blob, "%040d", 0);
		v->files[k].mtime_ns =
		    (int64_t)e->files[i].mtime.tv_sec * 1000000000LL + e->files[i].mtime.tv_nsec;
	}

	snprintf(v->commit, sizeof v->commit, "%s", WORKSPACE_COMMIT_NONE);
	v->dirty = false;
	gd = ws_git_open(e);
	v->git = gd >= 0;
	if (!v->git)
		return;
	head = ws_git_head(c, e, gd);
	close(gd);
	if (head)
		git_oid_tostr(v->commit, sizeof v->commit, &e->head);
	for (size_t k = 0; k < v->info.n_files; k++) {
		const struct prompt_file *pf = &v->info.files[k];
		size_t i = ws_index_of(pf->name);

		if (i == PROMPT_FILES_MAX)
			continue;
		if (!head) {
			v->dirty = v->dirty || pf->present;
			continue;
		}
		if (pf->present != e->in_tree[i] ||
		    (pf->present && !git_oid_equal(&e->files[i].blob, &e->tree_blob[i])))
			v->dirty = true;
		else if (pf->present)
			v->files[k].committed = true;
	}
}

int workspace_snapshot(struct workspace_cache *c, const char *dir, const struct prompt_options *opt,
                       struct buf *out, struct workspace_version *ver)
{
	struct workspace_cache *own = NULL;
	struct ws_entry *e;
	struct prompt_source src;
	int root = -1;
	int rc;

	memset(ver, 0, sizeof *ver);
	if ((rc = beneath_root(dir, &root)))
		return rc == SB_ERR_NOMEM ? rc : SB_ERR_NOTFOUND;
	workspace_git(); /* git_odb_hash needs the library initialised */
	if (!c) {
		if ((rc = workspace_cache_new(&own))) {
			close(root);
			return rc;
		}
		c = own;
	}
	e = ws_entry_get(c, dir);
	if (!e) {
		workspace_cache_free(own);
		close(root);
		return SB_ERR_NOMEM;
	}
	pthread_mutex_lock(&e->mu);
	for (size_t i = 0; i < PROMPT_FILES_MAX; i++)
		if ((rc = ws_file_refresh(c, &e->files[i], root, prompt_file_names[i])))
			goto out;
	src.get = ws_source_get;
	src.ud = e;
	rc = workspace_prompt_build_from(dir, opt, &src, out, &ver->info);
	if (rc == SB_OK)
		ws_version(c, e, ver);
out:
	pthread_mutex_unlock(&e->mu);
	workspace_cache_free(own);
	close(root);
	return rc;
}

void workspace_hash_hex(const unsigned char *hash, char *out)
{
	sodium_bin2hex(out, 2 * PROMPT_HASH_BYTES + 1, hash, PROMPT_HASH_BYTES);
}

json_t *workspace_version_json(const struct workspace_version *v, bool files)
{
	char hex[2 * PROMPT_HASH_BYTES + 1];
	json_t *o, *f;

	workspace_hash_hex(v->hash, hex);
	o = json_pack("{s:s,s:b,s:s}", "commit", v->commit, "dirty", v->dirty, "hash", hex);
	if (!o || !files)
		return o;
	f = json_object();
	if (!f || json_object_set_new(o, "files", f) != 0) {
		json_decref(o);
		return NULL;
	}
	for (size_t k = 0; k < v->info.n_files; k++) {
		const struct prompt_file *pf = &v->info.files[k];

		if (!pf->present)
			continue;
		workspace_hash_hex(pf->hash, hex);
		if (json_object_set_new(f, pf->name, json_string(hex)) != 0) {
			json_decref(o);
			return NULL;
		}
	}
	return o;
}

/* ---- init ---- */

static void ws_why(char *why, size_t size, const char *what)
{
	const git_error *ge = git_error_last();

	if (why && size)
		snprintf(why, size, "%s%s%s", what, ge && ge->message ? ": " : "",
		         ge && ge->message ? ge->message : "");
}

int workspace_init(const char *dir, const char *agent_id, size_t *created, char *commit, char *why,
                   size_t why_size)
{
	git_repository *repo = NULL;
	git_index *index = NULL;
	git_signature *sig = NULL;
	git_tree *tree = NULL;
	git_oid tree_id, commit_id;
	char path[PATH_MAX];
	struct stat st;
	size_t added = 0;
	int rc;

	if (commit)
		commit[0] = '\0';
	rc = workspace_scaffold_for(dir, agent_id, created);
	if (rc) {
		if (why && why_size)
			snprintf(why, why_size, "cannot write the templates into %s: %s", dir,
			         sb_strerror(rc));
		return rc == SB_ERR_NOMEM ? rc : SB_ERR_IO;
	}
	if (snprintf(path, sizeof path, "%s/.git", dir) >= (int)sizeof path)
		return SB_ERR_IO;
	if (stat(path, &st) == 0)
		return SB_OK; /* a repository already: the operator's to commit */
	if (!workspace_git()) {
		/* Not goto out: without the library there is nothing to free,
		 * and nothing to free it with. */
		if (!git_lazy_fns) {
			if (why && why_size)
				snprintf(why, why_size, "%s", workspace_git_why);
		} else {
			ws_why(why, why_size, "libgit2 failed to initialise");
		}
		return SB_ERR_IO;
	}
	rc = SB_ERR_IO;
	if (git_repository_init(&repo, dir, 0) != 0) {
		ws_why(why, why_size, "git init failed");
		goto out;
	}
	if (git_repository_index(&index, repo) != 0) {
		ws_why(why, why_size, "cannot open the git index");
		goto out;
	}
	for (size_t i = 0; i < workspace_n_templates; i++) {
		const char *name = workspace_templates[i].name;

		if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path ||
		    stat(path, &st) != 0)
			continue;
		if (git_index_add_bypath(index, name) != 0) {
			ws_why(why, why_size, "git add failed");
			goto out;
		}
		added++;
	}
	if (!added) {
		rc = SB_OK;
		goto out;
	}
	if (git_index_write(index) != 0 || git_index_write_tree(&tree_id, index) != 0 ||
	    git_tree_lookup(&tree, repo, &tree_id) != 0) {
		ws_why(why, why_size, "cannot write the git tree");
		goto out;
	}
	if (git_signature_default(&sig, repo) != 0 &&
	    git_signature_now(&sig, "Switchboard", "switchboard@localhost") != 0) {
		ws_why(why, why_size, "cannot make a commit signature");
		goto out;
	}
	if (git_commit_create_v(&commit_id, repo, "HEAD", sig, sig, NULL, "Start the workspace\n",
	                        tree, 0) != 0) {
		ws_why(why, why_size, "git commit failed");
		goto out;
	}
	if (commit)
		git_oid_tostr(commit, 41, &commit_id);
	rc = SB_OK;
out:
	git_signature_free(sig);
	git_tree_free(tree);
	git_index_free(index);
	git_repository_free(repo);
	return rc;
}
