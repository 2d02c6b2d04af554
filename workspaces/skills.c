/*
 * skills.c - see skills.h.
 */
#include "workspaces/skills.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "gateway/core/beneath.h"
#include "gateway/core/err.h"
#include "gateway/core/yamljson.h"
#include "workspaces/memory.h"

static pthread_mutex_t skills_write_mu = PTHREAD_MUTEX_INITIALIZER;

const char *skill_source_name(enum skill_source s)
{
	return s == SKILL_SOURCE_HOME ? "home" : "workspace";
}

bool skill_name_ok(const char *name)
{
	size_t n = name ? strlen(name) : 0;

	if (n == 0 || n > SKILL_NAME_MAX)
		return false;
	if (!((name[0] >= 'a' && name[0] <= 'z') || (name[0] >= '0' && name[0] <= '9')))
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = name[i];

		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_'))
			return false;
	}
	return true;
}

/* ---- frontmatter ---- */

/* Splits text (a SKILL.md) into its frontmatter (yaml, ylen) and body.
 * SB_ERR_INVAL when it has none or it is not closed. */
static int skill_split(const char *text, size_t len, const char **yaml, size_t *ylen,
                       const char **body, char *why, size_t why_size)
{
	const char *p, *end = text + len;
	size_t skip;

	if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) {
		text += 3;
		len -= 3;
	}
	if (len >= 4 && memcmp(text, "---\n", 4) == 0)
		skip = 4;
	else if (len >= 5 && memcmp(text, "---\r\n", 5) == 0)
		skip = 5;
	else {
		snprintf(why, why_size,
		         "SKILL.md must start with a \"---\" line and YAML frontmatter");
		return SB_ERR_INVAL;
	}
	*yaml = text + skip;
	for (p = *yaml; p < end;) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t l = nl ? (size_t)(nl - p) : (size_t)(end - p);

		if (l && p[l - 1] == '\r')
			l--;
		if (l == 3 && memcmp(p, "---", 3) == 0) {
			*ylen = (size_t)(p - *yaml);
			*body = nl ? nl + 1 : end;
			if (*ylen > SKILL_FRONTMATTER_MAX) {
				snprintf(why, why_size, "the frontmatter is longer than %zu bytes",
				         SKILL_FRONTMATTER_MAX);
				return SB_ERR_TOOBIG;
			}
			return SB_OK;
		}
		if ((size_t)(p - *yaml) > SKILL_FRONTMATTER_MAX) {
			snprintf(why, why_size, "the frontmatter is longer than %zu bytes",
			         SKILL_FRONTMATTER_MAX);
			return SB_ERR_TOOBIG;
		}
		if (!nl)
			break;
		p = nl + 1;
	}
	if ((size_t)(end - *yaml) > SKILL_FRONTMATTER_MAX) {
		snprintf(why, why_size, "the frontmatter is longer than %zu bytes",
		         SKILL_FRONTMATTER_MAX);
		return SB_ERR_TOOBIG;
	}
	snprintf(why, why_size, "the frontmatter has no closing \"---\" line");
	return SB_ERR_INVAL;
}

/* The frontmatter as JSON: a mapping, whose plain scalars stay strings
 * except true, false and integers (the gates need nothing more). */
static int skill_yaml_load(const char *text, size_t len, json_t **out, char *why, size_t why_size)
{
	static const struct yamljson_opt yo = {.what = "the frontmatter",
	                                       .line_label = "frontmatter line",
	                                       .depth_max = SKILL_YAML_DEPTH_MAX,
	                                       .nodes_max = SKILL_YAML_NODES_MAX};
	int rc = yamljson_load(text, len, &yo, out, why, why_size);

	if (rc == SB_OK && !json_is_object(*out)) {
		json_decref(*out);
		*out = NULL;
		snprintf(why, why_size,
		         "the frontmatter must be a mapping (name: ..., description: ...)");
		rc = SB_ERR_INVAL;
	}
	return rc;
}

/* A copy of s with every run of white space and control characters folded
 * to one space, trimmed, cut at max bytes on a character boundary. */
static char *skill_fold(const char *s, size_t max)
{
	size_t n = strlen(s), o = 0;
	char *out = malloc(n + 1);
	bool space = false;

	if (!out)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c < 0x20 || c == 0x7f || c == ' ') {
			space = o > 0;
			continue;
		}
		if (space)
			out[o++] = ' ';
		space = false;
		out[o++] = (char)c;
	}
	if (o > max) {
		o = max;
		while (o > 0 && ((unsigned char)out[o] & 0xC0) == 0x80)
			o--;
		while (o > 0 && out[o - 1] == ' ') /* a cut right after a space */
			o--;
	}
	out[o] = '\0';
	return out;
}

/* Appends s to the failure list f ("; " between). */
static void skill_fail(struct buf *f, const char *what, const char *item)
{
	if (f->len)
		(void)buf_puts(f, "; ");
	(void)buf_printf(f, "%s: %.200s", what, item);
}

static bool skill_exec_on_path(const char *bin, const char *path)
{
	char cand[4096];

	if (!bin[0] || strchr(bin, '/'))
		return false;
	while (path && *path) {
		const char *e = strchr(path, ':');
		size_t n = e ? (size_t)(e - path) : strlen(path);
		struct stat st;

		if (n && path[0] == '/' &&
		    snprintf(cand, sizeof cand, "%.*s/%s", (int)n, path, bin) < (int)sizeof cand &&
		    stat(cand, &st) == 0 && S_ISREG(st.st_mode) && access(cand, X_OK) == 0)
			return true;
		path = e ? e + 1 : NULL;
	}
	return false;
}

static const char *skill_this_os(void)
{
	struct utsname u;

	if (uname(&u) == 0 && strcmp(u.sysname, "Darwin") == 0)
		return "darwin";
	return "linux";
}

/* The gates of one object (the frontmatter, or a metadata entry). */
static void skill_gates(const json_t *gates, const struct skills_env *e, struct buf *failed,
                        bool *always)
{
	const json_t *req = json_object_get(gates, "requires"), *v, *g,
	             *os = json_object_get(gates, "os");
	const char *path = e->path ? e->path : SKILLS_PATH_DEFAULT;
	const char *this_os = e->os ? e->os : skill_this_os();
	size_t i;

	if (json_is_true(json_object_get(gates, "always")))
		*always = true;
	if (json_is_object(req)) {
		v = json_object_get(req, "bins");
		if (json_is_string(v) && !skill_exec_on_path(json_string_value(v), path))
			skill_fail(failed, "bins", json_string_value(v));
		json_array_foreach(json_is_array(v) ? v : NULL, i, g)
		{
			const char *b = json_string_value(g);

			if (!b || !skill_exec_on_path(b, path))
				skill_fail(failed, "bins", b ? b : "(not a name)");
		}
		v = json_object_get(req, "any_bins");
		if (!v)
			v = json_object_get(req, "anyBins");
		if (json_is_array(v) && json_array_size(v)) {
			bool any = false;

			json_array_foreach(v, i, g) any =
			    any ||
			    (json_is_string(g) && skill_exec_on_path(json_string_value(g), path));
			if (!any)
				skill_fail(failed, "any_bins", "none found");
		}
		v = json_object_get(req, "env");
		if (json_is_string(v)) {
			const char *val = getenv(json_string_value(v));

			if (!val || !val[0])
				skill_fail(failed, "env", json_string_value(v));
		}
		json_array_foreach(json_is_array(v) ? v : NULL, i, g)
		{
			const char *name = json_string_value(g), *val = name ? getenv(name) : NULL;

			if (!val || !val[0])
				skill_fail(failed, "env", name ? name : "(not a name)");
		}
	}
	if (json_is_string(os) && strcmp(json_string_value(os), this_os) != 0)
		skill_fail(failed, "os", json_string_value(os));
	if (json_is_array(os) && json_array_size(os)) {
		bool hit = false;

		json_array_foreach(os, i, v) hit =
		    hit || (json_is_string(v) && strcmp(json_string_value(v), this_os) == 0);
		if (!hit)
			skill_fail(failed, "os", "not for this system");
	}
}

/* Parses a SKILL.md for the skill in folder dirname into sk. On a bad one,
 * sk->error says why and SB_OK is returned (the skill is listed, never
 * used); SB_ERR_NOMEM only. *body (may be NULL) points into text. */
static int skill_parse(struct skill *sk, const char *dirname, const char *text, size_t len,
                       const struct skills_env *e, const char **body)
{
	char why[300] = "";
	const char *yaml = NULL, *name, *desc, *b = NULL;
	size_t ylen = 0;
	json_t *fm = NULL, *md, *v;
	struct buf failed;
	bool always = false;
	const char *k;
	int rc;

	buf_init(&failed, 4096);
	if (memchr(text, '\0', len)) {
		snprintf(why, sizeof why, "SKILL.md is not text (it holds a NUL byte)");
		goto bad;
	}
	if ((rc = skill_split(text, len, &yaml, &ylen, &b, why, sizeof why)))
		goto bad;
	if ((rc = skill_yaml_load(yaml, ylen, &fm, why, sizeof why))) {
		if (rc == SB_ERR_NOMEM)
			return rc;
		goto bad;
	}
	name = json_string_value(json_object_get(fm, "name"));
	desc = json_string_value(json_object_get(fm, "description"));
	if (!name) {
		snprintf(why, sizeof why, "the frontmatter has no name (add name: %s)", dirname);
		goto bad;
	}
	if (strcmp(name, dirname) != 0) {
		snprintf(why, sizeof why, "its name \"%.80s\" is not its folder's (%s)", name,
		         dirname);
		goto bad;
	}
	if (!desc || !(sk->description = skill_fold(desc, SKILL_DESC_MAX)) || !sk->description[0]) {
		if (desc && !sk->description) {
			json_decref(fm);
			return SB_ERR_NOMEM;
		}
		free(sk->description);
		sk->description = NULL;
		snprintf(why, sizeof why,
		         "the frontmatter has no description (one line: what the skill does and "
		         "when to use it)");
		goto bad;
	}
	v = json_object_get(fm, "patches");
	sk->patches = json_is_integer(v) && json_integer_value(v) > 0 ? json_integer_value(v) : 0;
	skill_gates(fm, e, &failed, &always);
	md = json_object_get(fm, "metadata");
	if (json_is_string(md)) {
		/* A one-line JSON object in a quoted scalar. */
		json_t *j = json_loads(json_string_value(md), JSON_REJECT_DUPLICATES, NULL);

		json_decref(fm);
		fm = NULL;
		if (j) {
			json_t *mv;

			json_object_foreach(j, k, mv)
			{
				if (json_is_object(mv))
					skill_gates(mv, e, &failed, &always);
			}
			skill_gates(j, e, &failed, &always);
			json_decref(j);
		}
	} else if (json_is_object(md)) {
		json_object_foreach(md, k, v)
		{
			if (json_is_object(v))
				skill_gates(v, e, &failed, &always);
		}
		skill_gates(md, e, &failed, &always);
	}
	json_decref(fm);
	if (failed.len && !always) {
		sk->failed = buf_steal(&failed);
		if (!sk->failed)
			return SB_ERR_NOMEM;
	}
	buf_free(&failed);
	sk->eligible = !sk->failed;
	if (body)
		*body = b;
	return SB_OK;
bad:
	json_decref(fm);
	buf_free(&failed);
	free(sk->description);
	sk->description = NULL;
	sk->eligible = false;
	sk->error = strdup(why[0] ? why : "SKILL.md cannot be read");
	return sk->error ? SB_OK : SB_ERR_NOMEM;
}

/* The start of the SKILL.md at path beneath root, as much as can hold
 * its frontmatter: a scan reads no more of every skill at every turn
 * (skills_load reads the whole file). The file's size is still checked
 * against SKILL_MD_MAX. */
static int skill_read_head(int root, const char *path, char **out, size_t *len)
{
	size_t want = SKILL_FRONTMATTER_MAX + 16, got = 0;
	struct stat st;
	char *buf;
	int fd, rc;

	*out = NULL;
	*len = 0;
	if ((rc = beneath_open(root, path, O_RDONLY, 0, BENEATH_REGULAR, &fd)))
		return rc;
	if (fstat(fd, &st) != 0) {
		close(fd);
		return SB_ERR_IO;
	}
	if ((size_t)st.st_size > SKILL_MD_MAX) {
		close(fd);
		return SB_ERR_TOOBIG;
	}
	if ((size_t)st.st_size < want)
		want = (size_t)st.st_size;
	if (!(buf = malloc(want + 1))) {
		close(fd);
		return SB_ERR_NOMEM;
	}
	while (got < want) {
		ssize_t n = read(fd, buf + got, want - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			free(buf);
			close(fd);
			return SB_ERR_IO;
		}
		if (n == 0)
			break;
		got += (size_t)n;
	}
	close(fd);
	buf[got] = '\0';
	*out = buf;
	*len = got;
	return SB_OK;
}

int skill_parse_text(struct skill *sk, const char *dirname, const char *text, size_t len,
                     const struct skills_env *e)
{
	memset(sk, 0, sizeof *sk);
	snprintf(sk->name, sizeof sk->name, "%s", dirname);
	return skill_parse(sk, dirname, text, len, e, NULL);
}

void skill_release(struct skill *sk)
{
	if (!sk)
		return;
	free(sk->description);
	free(sk->failed);
	free(sk->error);
	sk->description = sk->failed = sk->error = NULL;
}

static int skill_cmp(const void *a, const void *b)
{
	const struct skill *x = a, *y = b;
	int c = strcmp(x->name, y->name);

	return c ? c : (int)x->source - (int)y->source;
}

static int skill_name_cmp(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Adds the skills of one source. root: the directory that holds skills/
 * (the workspace), or the skills directory itself (home). */
static int skills_scan_one(const struct skills_env *e, const char *dir, bool is_home,
                           struct skill_list *l)
{
	char *names[SKILLS_SCAN_MAX];
	size_t nn = 0;
	struct dirent *de;
	DIR *d = NULL;
	int root = -1, rc;
	const char *sub = is_home ? "" : SKILLS_DIR;

	if (beneath_root(dir, &root) != SB_OK)
		return SB_OK; /* no such directory: no skills */
	if (beneath_opendir(root, sub[0] ? sub : ".", &d) != SB_OK) {
		close(root);
		return SB_OK; /* missing, or a symlink (refused) */
	}
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		if (nn == SKILLS_SCAN_MAX) {
			l->left_out++;
			continue;
		}
		if (!(names[nn] = strdup(de->d_name))) {
			rc = SB_ERR_NOMEM;
			goto out;
		}
		nn++;
	}
	/* The same folders whatever order readdir gives them in. */
	qsort(names, nn, sizeof *names, skill_name_cmp);
	rc = SB_OK;
	for (size_t i = 0; i < nn && rc == SB_OK; i++) {
		char path[BENEATH_PATH_MAX];
		struct skill *sk, *nv;
		char *text = NULL;
		size_t len = 0;
		struct stat st;
		int frc;

		if (!skill_name_ok(names[i]) || strlen(names[i]) > SKILL_NAME_MAX) {
			/* Not a skill's name: listed with why if it is a folder. */
			snprintf(path, sizeof path, "%s%s%s", sub, sub[0] ? "/" : "", names[i]);
			if (beneath_stat(root, path, &st) != SB_OK || !S_ISDIR(st.st_mode))
				continue;
		}
		nv = realloc(l->v, (l->n + 1) * sizeof *l->v);
		if (!nv) {
			rc = SB_ERR_NOMEM;
			break;
		}
		l->v = nv;
		sk = &l->v[l->n];
		memset(sk, 0, sizeof *sk);
		snprintf(sk->name, sizeof sk->name, "%s", names[i]);
		sk->source = is_home ? SKILL_SOURCE_HOME : SKILL_SOURCE_WORKSPACE;
		l->n++;
		if (!skill_name_ok(names[i])) {
			sk->error =
			    strdup("the folder's name is not a skill name (a-z, 0-9, - and _, "
			           "at most 64, starting with a letter or digit)");
			rc = sk->error ? SB_OK : SB_ERR_NOMEM;
			continue;
		}
		snprintf(path, sizeof path, "%s%s%s/" SKILL_FILE, sub, sub[0] ? "/" : "", names[i]);
		frc = skill_read_head(root, path, &text, &len);
		if (frc == SB_OK) {
			rc = skill_parse(sk, names[i], text, len, e, NULL);
		} else {
			const char *why =
			    frc == SB_ERR_NOTFOUND ? "it has no SKILL.md"
			    : frc == SB_ERR_TOOBIG ? "its SKILL.md is larger than 256 KiB"
			    : frc == SB_ERR_PERM
			        ? "its SKILL.md is not a regular file inside the folder "
			          "(a symlink is never followed)"
			        : "its SKILL.md cannot be read";

			if (frc == SB_ERR_NOMEM)
				rc = frc;
			else if (!(sk->error = strdup(why)))
				rc = SB_ERR_NOMEM;
		}
		free(text);
	}
out:
	for (size_t i = 0; i < nn; i++)
		free(names[i]);
	if (d)
		closedir(d);
	close(root);
	return rc;
}

int skills_scan(const struct skills_env *e, struct skill_list *out)
{
	int rc;

	memset(out, 0, sizeof *out);
	rc = skills_scan_one(e, e->workspace, false, out);
	if (rc == SB_OK && e->home)
		rc = skills_scan_one(e, e->home, true, out);
	if (rc) {
		skill_list_free(out);
		return rc;
	}
	if (out->n)
		qsort(out->v, out->n, sizeof *out->v, skill_cmp);
	for (size_t i = 1; i < out->n; i++)
		if (strcmp(out->v[i].name, out->v[i - 1].name) == 0)
			out->v[i].shadowed = true;
	return SB_OK;
}

void skill_list_free(struct skill_list *l)
{
	if (!l)
		return;
	for (size_t i = 0; i < l->n; i++) {
		free(l->v[i].description);
		free(l->v[i].failed);
		free(l->v[i].error);
	}
	free(l->v);
	memset(l, 0, sizeof *l);
}

int skills_prompt(const struct skill_list *l, struct buf *out)
{
	size_t listed = 0, more = 0;
	int rc = SB_OK;

	for (size_t i = 0; i < l->n; i++) {
		const struct skill *sk = &l->v[i];

		if (!sk->eligible || sk->shadowed || sk->error)
			continue;
		if (listed == SKILLS_PROMPT_MAX) {
			more++;
			continue;
		}
		if (listed++ == 0)
			rc = buf_puts(out,
			              "\n# Skills\n\nSkills are instructions for particular tasks. "
			              "When one fits what you are asked, load it with "
			              "skill_load(name) before you start, and follow it; it may "
			              "name files of its own, which skill_load(name, file) "
			              "reads.\n\n");
		if (rc == SB_OK)
			rc = buf_printf(out, "- %s: %s\n", sk->name, sk->description);
		if (rc)
			return rc;
	}
	if (more)
		rc = buf_printf(out, "(%zu more skills are not listed.)\n", more);
	return rc;
}

/* ---- load ---- */

/* Lists the files of the skill folder open at dfd (recursively, bounded,
 * no symlinks followed) into b. */
static void skill_list_files(int dfd, const char *prefix, int depth, struct buf *b, size_t *n)
{
	char *names[SKILL_FILES_LISTED];
	size_t nn = 0;
	struct dirent *de;
	DIR *d;
	int fd;

	if (depth > 3 || (fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		return;
	if (!(d = fdopendir(fd))) {
		close(fd);
		return;
	}
	while ((de = readdir(d)) && nn < SKILL_FILES_LISTED)
		if (de->d_name[0] != '.' && (names[nn] = strdup(de->d_name)))
			nn++;
	closedir(d);
	qsort(names, nn, sizeof *names, skill_name_cmp);
	for (size_t i = 0; i < nn; i++) {
		struct stat st;

		if (*n < SKILL_FILES_LISTED &&
		    fstatat(dfd, names[i], &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		    !(depth == 0 && strcmp(names[i], SKILL_FILE) == 0)) {
			if (S_ISREG(st.st_mode)) {
				(void)buf_printf(b, "- %s%s (%lld bytes)\n", prefix, names[i],
				                 (long long)st.st_size);
				(*n)++;
			} else if (S_ISDIR(st.st_mode)) {
				int sub = openat(dfd, names[i],
				                 O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
				char p[600];

				snprintf(p, sizeof p, "%s%s/", prefix, names[i]);
				if (sub >= 0) {
					skill_list_files(sub, p, depth + 1, b, n);
					close(sub);
				}
			}
		}
		free(names[i]);
	}
}

/* Opens the folder of the skill name, the workspace's or else the home's,
 * into *dfd; *src says which. */
static int skill_open_dir(const struct skills_env *e, const char *name, int *dfd,
                          enum skill_source *src)
{
	char path[BENEATH_PATH_MAX];
	int root = -1, rc;

	snprintf(path, sizeof path, SKILLS_DIR "/%s", name);
	if (beneath_root(e->workspace, &root) == SB_OK) {
		rc = beneath_open(root, path, O_RDONLY | O_DIRECTORY, 0, BENEATH_DIRECTORY, dfd);
		close(root);
		if (rc != SB_ERR_NOTFOUND) {
			*src = SKILL_SOURCE_WORKSPACE;
			return rc;
		}
	}
	if (!e->home || beneath_root(e->home, &root) != SB_OK)
		return SB_ERR_NOTFOUND;
	rc = beneath_open(root, name, O_RDONLY | O_DIRECTORY, 0, BENEATH_DIRECTORY, dfd);
	close(root);
	*src = SKILL_SOURCE_HOME;
	return rc;
}

int skills_load(const struct skills_env *e, const char *name, const char *file, char **out,
                char *why, size_t why_size)
{
	struct skill sk;
	enum skill_source src = SKILL_SOURCE_WORKSPACE;
	char rel[BENEATH_PATH_MAX];
	const char *body = NULL;
	char *text = NULL;
	size_t len = 0, nfiles = 0;
	struct buf b;
	int dfd = -1, rc;

	*out = NULL;
	why[0] = '\0';
	memset(&sk, 0, sizeof sk);
	buf_init(&b, SKILL_MD_MAX + 8192);
	if (!skill_name_ok(name)) {
		snprintf(why, why_size, "\"%.80s\" is not a skill name", name);
		return SB_ERR_INVAL;
	}
	snprintf(sk.name, sizeof sk.name, "%s", name);
	rc = skill_open_dir(e, name, &dfd, &src);
	if (rc == SB_ERR_NOTFOUND) {
		snprintf(why, why_size, "there is no skill \"%s\"", name);
		goto out;
	}
	if (rc) {
		snprintf(why, why_size,
		         rc == SB_ERR_PERM
		             ? "refused: the skill \"%s\" is not a folder (a symlink is "
		               "never followed)"
		             : "the skill \"%s\" cannot be opened",
		         name);
		goto out;
	}
	sk.source = src;
	rc = beneath_read_all(dfd, SKILL_FILE, SKILL_MD_MAX, &text, &len);
	if (rc) {
		snprintf(why, why_size, "%s",
		         rc == SB_ERR_TOOBIG     ? "refused: its SKILL.md is larger than 256 KiB"
		         : rc == SB_ERR_PERM     ? "refused: its SKILL.md is not a regular file (a "
		                                   "symlink is never followed)"
		         : rc == SB_ERR_NOTFOUND ? "the skill has no SKILL.md"
		                                 : "its SKILL.md cannot be read");
		goto out;
	}
	if ((rc = skill_parse(&sk, name, text, len, e, &body)))
		goto out;
	if (sk.error) {
		snprintf(why, why_size, "the skill \"%s\" is broken: %s", name, sk.error);
		rc = SB_ERR_INVAL;
		goto out;
	}
	if (!sk.eligible) {
		snprintf(why, why_size, "the skill \"%s\" is not available here (%s)", name,
		         sk.failed);
		rc = SB_ERR_PERM;
		goto out;
	}
	if (!file || !file[0]) {
		rc = buf_printf(&b, "Skill %s (from the %s's skills)\n\n", name,
		                src == SKILL_SOURCE_HOME ? "gateway" : "workspace");
		if (rc == SB_OK)
			rc = buf_append(&b, body, len - (size_t)(body - text));
		if (rc == SB_OK) {
			struct buf files;

			buf_init(&files, 64 << 10);
			skill_list_files(dfd, "", 0, &files, &nfiles);
			if (nfiles)
				rc = buf_printf(
				    &b,
				    "\n\n[Files of this skill, read with skill_load(\"%s\", "
				    "file):]\n%s",
				    name, files.data);
			buf_free(&files);
		}
		if (rc) {
			snprintf(why, why_size, "out of memory");
			goto out;
		}
		*out = buf_steal(&b);
		rc = *out ? SB_OK : SB_ERR_NOMEM;
		goto out;
	}
	free(text);
	text = NULL;
	if (file[0] == '/' || beneath_normalize(file, rel, sizeof rel) != SB_OK || !rel[0]) {
		snprintf(why, why_size,
		         "refused: \"%.200s\" is not a path inside the skill's folder (give it "
		         "relative to the folder, without climbing out)",
		         file);
		rc = SB_ERR_PERM;
		goto out;
	}
	rc = beneath_read_all(dfd, rel, SKILL_FILE_MAX, &text, &len);
	if (rc == SB_OK && memchr(text, '\0', len)) {
		rc = SB_ERR_PERM;
		snprintf(why, why_size, "refused: %s is not a text file", rel);
		goto out;
	}
	if (rc) {
		if (rc == SB_ERR_NOTFOUND)
			snprintf(why, why_size, "the skill \"%s\" has no file %s", name, rel);
		else if (rc == SB_ERR_TOOBIG)
			snprintf(why, why_size, "refused: %s is larger than %zu KiB", rel,
			         SKILL_FILE_MAX >> 10);
		else if (rc == SB_ERR_PERM)
			snprintf(why, why_size,
			         "refused: %s is not a regular file inside the skill's folder (a "
			         "symlink is never followed)",
			         rel);
		else
			snprintf(why, why_size, "%s cannot be read", rel);
		goto out;
	}
	*out = text;
	text = NULL;
out:
	if (dfd >= 0)
		close(dfd);
	free(text);
	free(sk.description);
	free(sk.failed);
	free(sk.error);
	buf_free(&b);
	return rc;
}

/* ---- save and patch ---- */

static int skill_check_text(const char *what, const char *s, size_t max, char *why, size_t why_size)
{
	size_t n = strlen(s);

	if (n > max) {
		snprintf(why, why_size, "the %s is longer than %zu bytes", what, max);
		return SB_ERR_TOOBIG;
	}
	json_t *j = json_stringn(s, n);

	if (!j) {
		/* Not UTF-8 (or out of memory, which fails the next step too). */
		snprintf(why, why_size, "the %s is not UTF-8 text", what);
		return SB_ERR_INVAL;
	}
	json_decref(j);
	return SB_OK;
}

/* Writes bytes to skills/<name>/SKILL.md in the workspace and commits it. */
static int skill_write_commit(const char *workspace, const char *name, const char *bytes,
                              size_t len, const char *subject, const char *label, char *commit,
                              char *why, size_t why_size)
{
	char dir[BENEATH_PATH_MAX], path[BENEATH_PATH_MAX], msg[1024];
	const char *paths[1] = {path};
	int root = -1, rc;

	commit[0] = '\0';
	snprintf(dir, sizeof dir, SKILLS_DIR "/%s", name);
	snprintf(path, sizeof path, SKILLS_DIR "/%s/" SKILL_FILE, name);
	if ((rc = beneath_root(workspace, &root))) {
		snprintf(why, why_size, "the workspace cannot be opened");
		return rc == SB_ERR_NOMEM ? rc : SB_ERR_IO;
	}
	rc = beneath_mkdirs(root, dir, 0755);
	if (rc == SB_OK)
		rc = beneath_write_atomic(root, path, bytes, len, 0644);
	close(root);
	if (rc) {
		snprintf(why, why_size,
		         rc == SB_ERR_PERM ? "refused: %s is not a plain folder and file of the "
		                             "workspace (a symlink is never followed)"
		                           : "cannot write %s",
		         path);
		return rc;
	}
	snprintf(msg, sizeof msg, "skill: %s (%s)\n\nWritten by the agent in %s.\n", name, subject,
	         label ? label : "a session");
	rc = memory_commit_files(workspace, paths, 1, msg, commit, why, why_size);
	if (rc == SB_ERR_NOMEM)
		return rc;
	/* Saved either way; why says what kept it from git. */
	if (rc == SB_OK)
		why[0] = '\0';
	return SB_OK;
}

static bool skill_home_has(const char *home, const char *name)
{
	struct stat st;
	int root;
	bool has;

	if (!home || beneath_root(home, &root) != SB_OK)
		return false;
	has = beneath_stat(root, name, &st) == SB_OK && S_ISDIR(st.st_mode);
	close(root);
	return has;
}

int skills_save(const char *workspace, const char *home, const char *name, const char *description,
                const char *body, const char *label, char *commit, bool *shadows, char *why,
                size_t why_size)
{
	char path[BENEATH_PATH_MAX], *desc = NULL;
	struct buf b;
	struct stat st;
	int root = -1, rc;

	commit[0] = '\0';
	why[0] = '\0';
	*shadows = false;
	if (!skill_name_ok(name)) {
		snprintf(
		    why, why_size,
		    "\"%.80s\" is not a skill name: use 1 to 64 of a-z, 0-9, - and _, starting "
		    "with a letter or digit",
		    name);
		return SB_ERR_INVAL;
	}
	if ((rc = skill_check_text("description", description, SKILL_DESC_MAX, why, why_size)) ||
	    (rc = skill_check_text("body", body, SKILL_BODY_MAX, why, why_size)))
		return rc;
	if (!(desc = skill_fold(description, SKILL_DESC_MAX)))
		return SB_ERR_NOMEM;
	if (!desc[0]) {
		free(desc);
		snprintf(why, why_size, "the description is empty");
		return SB_ERR_INVAL;
	}
	buf_init(&b, SKILL_MD_MAX);
	rc = buf_printf(&b, "---\nname: %s\ndescription: \"", name);
	for (const char *p = desc; rc == SB_OK && *p; p++)
		rc = *p == '"' || *p == '\\' ? buf_printf(&b, "\\%c", *p) : buf_append(&b, p, 1);
	if (rc == SB_OK)
		rc = buf_printf(&b, "\"\npatches: 0\n---\n\n%s%s", body,
		                body[0] && body[strlen(body) - 1] != '\n' ? "\n" : "");
	free(desc);
	if (rc) {
		buf_free(&b);
		snprintf(why, why_size, "the skill is too large");
		return rc == SB_ERR_NOMEM ? rc : SB_ERR_TOOBIG;
	}
	pthread_mutex_lock(&skills_write_mu);
	snprintf(path, sizeof path, SKILLS_DIR "/%s", name);
	if (beneath_root(workspace, &root) != SB_OK) {
		rc = SB_ERR_IO;
		snprintf(why, why_size, "the workspace cannot be opened");
		goto out;
	}
	rc = beneath_stat(root, path, &st);
	close(root);
	if (rc == SB_OK) {
		rc = SB_ERR_EXISTS;
		snprintf(why, why_size,
		         "the workspace has a skill \"%s\" already: change it with skill_patch",
		         name);
		goto out;
	}
	rc =
	    skill_write_commit(workspace, name, b.data, b.len, "new", label, commit, why, why_size);
	if (rc == SB_OK)
		*shadows = skill_home_has(home, name);
out:
	pthread_mutex_unlock(&skills_write_mu);
	buf_free(&b);
	return rc;
}

/* Finds, in the frontmatter yaml[0, ylen), a top-level "patches:" line:
 * its start and end offsets. */
static bool skill_patches_line(const char *yaml, size_t ylen, size_t *from, size_t *to)
{
	for (size_t i = 0; i < ylen;) {
		const char *nl = memchr(yaml + i, '\n', ylen - i);
		size_t end = nl ? (size_t)(nl - yaml) + 1 : ylen;

		if (end - i >= 8 && memcmp(yaml + i, "patches:", 8) == 0) {
			*from = i;
			*to = end;
			return true;
		}
		i = end;
	}
	return false;
}

int skills_patch(const char *workspace, const char *home, const char *name, const char *old,
                 const char *new_text, const char *label, char *commit, int64_t *patches, char *why,
                 size_t why_size)
{
	char path[BENEATH_PATH_MAX], subject[64];
	const char *yaml = NULL, *body = NULL, *hit, *end;
	struct skills_env env = {.workspace = workspace, .home = NULL};
	struct skill sk;
	size_t ylen = 0, len = 0, from, to, olen = strlen(old);
	char *text = NULL;
	struct buf b;
	int root = -1, rc;

	commit[0] = '\0';
	why[0] = '\0';
	*patches = 0;
	memset(&sk, 0, sizeof sk);
	buf_init(&b, SKILL_MD_MAX);
	if (!skill_name_ok(name)) {
		snprintf(why, why_size, "\"%.80s\" is not a skill name", name);
		return SB_ERR_INVAL;
	}
	if (!olen) {
		snprintf(why, why_size, "old is empty: give the text to replace");
		return SB_ERR_INVAL;
	}
	if ((rc = skill_check_text("new text", new_text, SKILL_BODY_MAX, why, why_size)))
		return rc;
	pthread_mutex_lock(&skills_write_mu);
	snprintf(path, sizeof path, SKILLS_DIR "/%s/" SKILL_FILE, name);
	if (beneath_root(workspace, &root) != SB_OK) {
		rc = SB_ERR_IO;
		snprintf(why, why_size, "the workspace cannot be opened");
		goto out;
	}
	rc = beneath_read_all(root, path, SKILL_MD_MAX, &text, &len);
	close(root);
	if (rc == SB_ERR_NOTFOUND) {
		if (skill_home_has(home, name))
			snprintf(
			    why, why_size,
			    "the skill \"%s\" is the gateway's shared one, not the workspace's: "
			    "save your own version with skill_save",
			    name);
		else
			snprintf(why, why_size, "the workspace has no skill \"%s\"", name);
		goto out;
	}
	if (rc) {
		snprintf(why, why_size,
		         rc == SB_ERR_PERM     ? "refused: %s is not a regular file (a symlink is "
		                                 "never followed)"
		         : rc == SB_ERR_TOOBIG ? "refused: %s is larger than 256 KiB"
		                               : "cannot read %s",
		         path);
		goto out;
	}
	if ((rc = skill_parse(&sk, name, text, len, &env, &body)))
		goto out;
	if (sk.error) {
		rc = SB_ERR_INVAL;
		snprintf(why, why_size, "the skill \"%s\" is broken: %s", name, sk.error);
		goto out;
	}
	(void)skill_split(text, len, &yaml, &ylen, &body, why, why_size);
	end = text + len;
	hit = memmem(body, (size_t)(end - body), old, olen);
	if (!hit) {
		rc = SB_ERR_INVAL;
		snprintf(why, why_size,
		         "old was not found in the body of the skill \"%s\" (load it and copy the "
		         "text exactly)",
		         name);
		goto out;
	}
	if (memmem(hit + 1, (size_t)(end - hit - 1), old, olen)) {
		rc = SB_ERR_INVAL;
		snprintf(why, why_size,
		         "old occurs more than once in the skill \"%s\": give more of the text "
		         "around it",
		         name);
		goto out;
	}
	*patches = sk.patches + 1;
	/* The frontmatter as it was, with its patches line replaced or added. */
	rc = buf_append(&b, text, (size_t)(yaml - text));
	if (skill_patches_line(yaml, ylen, &from, &to)) {
		if (rc == SB_OK)
			rc = buf_append(&b, yaml, from);
		if (rc == SB_OK)
			rc = buf_printf(&b, "patches: %lld\n", (long long)*patches);
		if (rc == SB_OK)
			rc = buf_append(&b, yaml + to, ylen - to);
	} else {
		if (rc == SB_OK)
			rc = buf_append(&b, yaml, ylen);
		if (rc == SB_OK && ylen && yaml[ylen - 1] != '\n')
			rc = buf_puts(&b, "\n");
		if (rc == SB_OK)
			rc = buf_printf(&b, "patches: %lld\n", (long long)*patches);
	}
	if (rc == SB_OK)
		rc = buf_append(&b, yaml + ylen, (size_t)(hit - (yaml + ylen)));
	if (rc == SB_OK)
		rc = buf_puts(&b, new_text);
	if (rc == SB_OK)
		rc = buf_append(&b, hit + olen, (size_t)(end - hit - olen));
	if (rc) {
		snprintf(why, why_size, "the patched skill would be larger than 256 KiB");
		rc = rc == SB_ERR_NOMEM ? rc : SB_ERR_TOOBIG;
		goto out;
	}
	snprintf(subject, sizeof subject, "patch %lld", (long long)*patches);
	rc = skill_write_commit(workspace, name, b.data, b.len, subject, label, commit, why,
	                        why_size);
out:
	pthread_mutex_unlock(&skills_write_mu);
	free(text);
	free(sk.description);
	free(sk.failed);
	free(sk.error);
	buf_free(&b);
	return rc;
}
