/*
 * cfg.c - the YAML document with positions, and the one schema walker.
 *
 * Three stages, each in its own part of this file:
 *   1. cfg_doc_parse: libyaml events -> a small tree of nodes (scalar, mapping,
 *      sequence), each with its 1-based line and column. Scalar values are
 *      interpolated here (${ENV}, ${file:PATH}, $${), while the key path is
 *      known, so that an unset variable names the key it belongs to.
 *   2. cfg_apply: the tree checked against the cfg_key tables, filling the
 *      module structs and collecting every error.
 *   3. Table walkers that need no document: release, secrets, restart
 *      changes, the markdown reference and the defaults lint.
 */
#include "cfg.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#include "buf.h"
#include "err.h"
#include "num.h"

#define CFG_MAX_DEPTH 64                /* nesting of mappings and sequences */
#define CFG_MAX_TEXT (4u << 20)         /* one interpolated value, one message */
#define CFG_SECRET_FILE_MAX (64u << 10) /* ${file:...} contents */
#define CFG_FOUND_MAX 40                /* characters of a value quoted in an error */
#define CFG_REDACTED "[REDACTED]"

/* ------------------------------------------------------------------------ */
/* Errors                                                                   */
/* ------------------------------------------------------------------------ */

void cfg_errors_init(struct cfg_errors *e)
{
	e->v = NULL;
	e->n = 0;
	e->cap = 0;
}

void cfg_errors_free(struct cfg_errors *e)
{
	if (!e)
		return;
	for (size_t i = 0; i < e->n; i++) {
		free(e->v[i].file);
		free(e->v[i].path);
		free(e->v[i].msg);
		free(e->v[i].hint);
	}
	free(e->v);
	cfg_errors_init(e);
}

void cfg_errors_print(const struct cfg_errors *e, FILE *out)
{
	for (size_t i = 0; i < e->n; i++) {
		const struct cfg_error *x = &e->v[i];
		const char *file = x->file ? x->file : "config";

		if (x->line > 0)
			fprintf(out, "%s:%d:%d: ", file, x->line, x->col);
		else
			fprintf(out, "%s: ", file);
		if (x->path && *x->path)
			fprintf(out, "%s: ", x->path);
		fputs(x->msg ? x->msg : "error", out);
		if (x->hint)
			fprintf(out, " (hint: %s)", x->hint);
		fputc('\n', out);
	}
}

static char *cfg_vstrf(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));
static char *cfg_vstrf(const char *fmt, va_list ap)
{
	struct buf b;

	buf_init(&b, CFG_MAX_TEXT);
	if (buf_vprintf(&b, fmt, ap)) {
		buf_free(&b);
		return NULL;
	}
	return buf_steal(&b);
}

static char *cfg_strf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *cfg_strf(const char *fmt, ...)
{
	va_list ap;
	char *s;

	va_start(ap, fmt);
	s = cfg_vstrf(fmt, ap);
	va_end(ap);
	return s;
}

/* Where errors go while parsing or applying: the list, the file name they
 * carry, how many were reported (even when the list itself ran out of
 * memory) and whether an allocation failed. */
struct cfg_rep {
	struct cfg_errors *errs;
	const char *file;
	int count;
	bool nomem;
};

/* Adds one error; msg is formatted, hint is copied as is (may be NULL). */
static void cfg_rep_add(struct cfg_rep *r, int line, int col, const char *path, const char *hint,
                        const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static void cfg_rep_add(struct cfg_rep *r, int line, int col, const char *path, const char *hint,
                        const char *fmt, ...)
{
	struct cfg_errors *e = r->errs;
	struct cfg_error x = {.line = line, .col = col};
	va_list ap;

	r->count++;
	va_start(ap, fmt);
	x.msg = cfg_vstrf(fmt, ap);
	va_end(ap);
	x.file = strdup(r->file ? r->file : "config");
	x.path = strdup(path ? path : "");
	x.hint = hint ? strdup(hint) : NULL;
	if (!x.msg || !x.file || !x.path || (hint && !x.hint))
		goto fail;
	if (e->n == e->cap) {
		size_t cap = e->cap ? e->cap * 2 : 8;
		struct cfg_error *v = realloc(e->v, cap * sizeof *v);

		if (!v)
			goto fail;
		e->v = v;
		e->cap = cap;
	}
	e->v[e->n++] = x;
	return;
fail:
	r->nomem = true;
	free(x.msg);
	free(x.file);
	free(x.path);
	free(x.hint);
}

/* Stable sort by position so that errors read in file order. */
static void cfg_errors_sort(struct cfg_errors *e)
{
	for (size_t i = 1; i < e->n; i++) {
		struct cfg_error x = e->v[i];
		size_t j = i;

		while (j > 0 && (e->v[j - 1].line > x.line ||
		                 (e->v[j - 1].line == x.line && e->v[j - 1].col > x.col))) {
			e->v[j] = e->v[j - 1];
			j--;
		}
		e->v[j] = x;
	}
}

/* "prefix.name", or "name" at the top level; "prefix[3]" joins without a dot. */
static char *cfg_path_join(const char *prefix, const char *name)
{
	if (!prefix || !*prefix)
		return strdup(name);
	if (name[0] == '[')
		return cfg_strf("%s%s", prefix, name);
	return cfg_strf("%s.%s", prefix, name);
}

/* ------------------------------------------------------------------------ */
/* The document                                                             */
/* ------------------------------------------------------------------------ */

enum cfg_node_kind { CFG_NODE_SCALAR, CFG_NODE_MAP, CFG_NODE_SEQ };

struct cfg_node {
	enum cfg_node_kind kind;
	int line, col;
	char *text;   /* scalar: the value after interpolation */
	char *raw;    /* scalar: the value as written, when it was interpolated */
	bool is_null; /* plain "", "~" or "null" */
	bool bad;     /* already reported (failed interpolation, alias, bad key) */
	/* MAP: key, value, key, value, ...; SEQ: the items */
	struct cfg_node **kids;
	size_t n, cap;
};

struct cfg_doc {
	struct cfg_node *root; /* NULL for an empty stream */
	char *file;
	char *base_dir;
	char **secret_files; /* every ${file:...} read, as opened */
	size_t n_secret_files;
};

static void cfg_node_free(struct cfg_node *n)
{
	if (!n)
		return;
	for (size_t i = 0; i < n->n; i++)
		cfg_node_free(n->kids[i]);
	free(n->kids);
	free(n->text);
	free(n->raw);
	free(n);
}

size_t cfg_doc_secret_files(const struct cfg_doc *doc, const char *const **out)
{
	*out = doc ? (const char *const *)doc->secret_files : NULL;
	return doc ? doc->n_secret_files : 0;
}

void cfg_doc_free(struct cfg_doc *doc)
{
	if (!doc)
		return;
	cfg_node_free(doc->root);
	for (size_t i = 0; i < doc->n_secret_files; i++)
		free(doc->secret_files[i]);
	free(doc->secret_files);
	free(doc->file);
	free(doc->base_dir);
	free(doc);
}

static int cfg_node_push(struct cfg_node *parent, struct cfg_node *kid)
{
	if (parent->n == parent->cap) {
		size_t cap = parent->cap ? parent->cap * 2 : 8;
		struct cfg_node **v = realloc(parent->kids, cap * sizeof *v);

		if (!v)
			return SB_ERR_NOMEM;
		parent->kids = v;
		parent->cap = cap;
	}
	parent->kids[parent->n++] = kid;
	return SB_OK;
}

struct cfg_parser {
	yaml_parser_t yp;
	struct cfg_rep rep;
	const char *base_dir;
	struct cfg_doc *doc;
	bool syntax_error;
	bool literal; /* values as written: no interpolation */
};

static bool cfg_is_null_text(const char *s)
{
	return !*s || strcmp(s, "~") == 0 || strcmp(s, "null") == 0 || strcmp(s, "Null") == 0 ||
	       strcmp(s, "NULL") == 0;
}

static bool cfg_env_name_ok(const char *s, size_t n)
{
	if (n == 0 || !(isalpha((unsigned char)s[0]) || s[0] == '_'))
		return false;
	for (size_t i = 1; i < n; i++)
		if (!(isalnum((unsigned char)s[i]) || s[i] == '_'))
			return false;
	return true;
}

/* Reads the secret file named by a ${file:...} reference into out. Returns
 * SB_OK, SB_ERR_CONFIG (reported) or SB_ERR_NOMEM. */
static int cfg_read_secret(struct cfg_parser *p, const struct cfg_node *n, const char *path,
                           const char *rel, struct buf *out)
{
	char *full = NULL, *hint = NULL;
	char chunk[4096];
	struct stat st;
	size_t start = out->len;
	int fd = -1, rc = SB_ERR_NOMEM;

	if (!*rel) {
		cfg_rep_add(&p->rep, n->line, n->col, path, "write ${file:secrets/NAME}",
		            "empty file name in \"${file:}\"");
		rc = SB_ERR_CONFIG;
		goto out;
	}
	if (rel[0] == '/' || !p->base_dir)
		full = strdup(rel);
	else
		full = cfg_strf("%s/%s", p->base_dir, rel);
	if (!full)
		goto out;
	rc = SB_ERR_CONFIG;
	fd = open(full, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		if (errno == ENOENT) {
			hint = p->base_dir && rel[0] != '/'
			           ? cfg_strf("relative paths start at %s", p->base_dir)
			           : NULL;
			cfg_rep_add(&p->rep, n->line, n->col, path, hint,
			            "secret file %s does not exist", full);
		} else {
			cfg_rep_add(&p->rep, n->line, n->col, path, NULL,
			            "cannot open secret file %s: %s", full, strerror(errno));
		}
		goto out;
	}
	if (p->doc) {
		/* remembered, so that the sandbox can hide it (sandbox.h) */
		char **v = realloc(p->doc->secret_files, (p->doc->n_secret_files + 1) * sizeof *v);

		if (!v) {
			rc = SB_ERR_NOMEM;
			goto out;
		}
		p->doc->secret_files = v;
		if (!(v[p->doc->n_secret_files] = strdup(full))) {
			rc = SB_ERR_NOMEM;
			goto out;
		}
		p->doc->n_secret_files++;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		cfg_rep_add(&p->rep, n->line, n->col, path, NULL,
		            "secret file %s is not a regular file", full);
		goto out;
	}
	if (st.st_mode & 077) {
		hint = cfg_strf("chmod 600 %s", full);
		if (!hint) {
			rc = SB_ERR_NOMEM;
			goto out;
		}
		cfg_rep_add(&p->rep, n->line, n->col, path, hint,
		            "secret file %s may be read by group or others (mode %04o)", full,
		            (unsigned)(st.st_mode & 07777));
		goto out;
	}
	for (;;) {
		ssize_t got = read(fd, chunk, sizeof chunk);
		int brc;

		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			cfg_rep_add(&p->rep, n->line, n->col, path, NULL,
			            "cannot read secret file %s: %s", full, strerror(errno));
			goto out;
		}
		if (got == 0)
			break;
		if (out->len - start + (size_t)got > CFG_SECRET_FILE_MAX) {
			cfg_rep_add(&p->rep, n->line, n->col, path, NULL,
			            "secret file %s is larger than %u bytes", full,
			            CFG_SECRET_FILE_MAX);
			goto out;
		}
		brc = buf_append(out, chunk, (size_t)got);
		if (brc) {
			rc = brc == SB_ERR_NOMEM ? SB_ERR_NOMEM : SB_ERR_CONFIG;
			if (rc == SB_ERR_CONFIG)
				cfg_rep_add(&p->rep, n->line, n->col, path, NULL,
				            "value is too long after reading %s", full);
			goto out;
		}
	}
	if (memchr(out->data + start, '\0', out->len - start)) {
		cfg_rep_add(&p->rep, n->line, n->col, path, NULL,
		            "secret file %s contains a NUL byte", full);
		goto out;
	}
	/* Editors add a final newline; a secret never ends with one. */
	while (out->len > start &&
	       (out->data[out->len - 1] == '\n' || out->data[out->len - 1] == '\r'))
		out->data[--out->len] = '\0';
	rc = SB_OK;
out:
	if (fd >= 0)
		close(fd);
	free(hint);
	free(full);
	return rc;
}

/* Replaces ${NAME}, ${file:PATH} and $${ in a value scalar. Problems are
 * reported at the scalar and mark it bad. Returns SB_OK or SB_ERR_NOMEM. */
static int cfg_interpolate(struct cfg_parser *p, struct cfg_node *n, const char *path)
{
	const char *s = n->text;
	struct buf b;
	int rc = SB_ERR_NOMEM, brc = SB_OK;

	if (!strchr(s, '$'))
		return SB_OK;
	buf_init(&b, CFG_MAX_TEXT);
	while (*s) {
		const char *end;
		size_t nlen;
		int r;

		if (s[0] == '$' && s[1] == '$' && s[2] == '{') {
			if ((brc = buf_append(&b, "${", 2)))
				goto out;
			s += 3;
			continue;
		}
		if (s[0] != '$' || s[1] != '{') {
			if ((brc = buf_append(&b, s, 1)))
				goto out;
			s++;
			continue;
		}
		end = strchr(s + 2, '}');
		if (!end) {
			cfg_rep_add(&p->rep, n->line, n->col, path,
			            "close it with \"}\", or write \"$${\" for a literal \"${\"",
			            "unterminated \"${\" in value");
			n->bad = true;
			break;
		}
		nlen = (size_t)(end - (s + 2));
		if (nlen >= 5 && strncmp(s + 2, "file:", 5) == 0) {
			char *rel = strndup(s + 7, nlen - 5);

			if (!rel)
				goto out;
			r = cfg_read_secret(p, n, path, rel, &b);
			free(rel);
			if (r == SB_ERR_NOMEM)
				goto out;
			if (r)
				n->bad = true;
		} else if (!cfg_env_name_ok(s + 2, nlen)) {
			cfg_rep_add(&p->rep, n->line, n->col, path,
			            "variable names are letters, digits and \"_\"; "
			            "write \"$${\" for a literal \"${\"",
			            "invalid variable name \"%.*s\"", (int)nlen, s + 2);
			n->bad = true;
		} else {
			char *name = strndup(s + 2, nlen);
			const char *v;

			if (!name)
				goto out;
			v = getenv(name);
			if (!v) {
				char *hint = cfg_strf("export %s in the gateway's environment, or "
				                      "write \"$${%s}\" for the literal text",
				                      name, name);

				cfg_rep_add(&p->rep, n->line, n->col, path, hint,
				            "environment variable %s is not set", name);
				free(hint);
				n->bad = true;
			} else if ((brc = buf_puts(&b, v))) {
				free(name);
				goto out;
			}
			free(name);
		}
		s = end + 1;
	}
	if (!n->bad) {
		char *text = buf_steal(&b);

		if (!text)
			goto out;
		n->raw = n->text;
		n->text = text;
	}
	rc = SB_OK;
out:
	if (brc == SB_ERR_TOOBIG) {
		cfg_rep_add(&p->rep, n->line, n->col, path, NULL,
		            "value is longer than %u bytes after interpolation", CFG_MAX_TEXT);
		n->bad = true;
		rc = SB_OK;
	}
	buf_free(&b);
	return rc;
}

static bool cfg_next_event(struct cfg_parser *p, yaml_event_t *ev)
{
	if (yaml_parser_parse(&p->yp, ev))
		return true;
	if (p->yp.error == YAML_MEMORY_ERROR) {
		p->rep.nomem = true;
	} else {
		const char *problem = p->yp.problem ? p->yp.problem : "malformed document";
		int line = (int)p->yp.problem_mark.line + 1;
		int col = (int)p->yp.problem_mark.column + 1;

		if (p->yp.context)
			cfg_rep_add(&p->rep, line, col, "", NULL,
			            "invalid YAML: %s %s (line %d, column %d)", problem,
			            p->yp.context, (int)p->yp.context_mark.line + 1,
			            (int)p->yp.context_mark.column + 1);
		else
			cfg_rep_add(&p->rep, line, col, "", NULL, "invalid YAML: %s", problem);
	}
	p->syntax_error = true;
	return false;
}

static const char cfg_anchor_hint[] = "repeat the value instead; use ${ENV} to share a secret";

/* Builds the node that starts with *ev (consumed). path is the node's key
 * path; as_key says it is a mapping key (not interpolated). Returns SB_OK, or
 * SB_ERR_CONFIG after a syntax error, or SB_ERR_NOMEM. */
static int cfg_parse_node(struct cfg_parser *p, yaml_event_t *ev, const char *path, bool as_key,
                          int depth, struct cfg_node **out)
{
	struct cfg_node *n = NULL;
	yaml_event_t kev, vev;
	char *kpath = NULL;
	const yaml_char_t *anchor = NULL;
	int rc = SB_ERR_NOMEM;

	*out = NULL;
	n = calloc(1, sizeof *n);
	if (!n)
		goto out;
	n->line = (int)ev->start_mark.line + 1;
	n->col = (int)ev->start_mark.column + 1;

	switch (ev->type) {
	case YAML_SCALAR_EVENT:
		n->kind = CFG_NODE_SCALAR;
		anchor = ev->data.scalar.anchor;
		n->text = strndup((const char *)ev->data.scalar.value, ev->data.scalar.length);
		if (!n->text)
			goto out;
		n->is_null =
		    ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE && cfg_is_null_text(n->text);
		if (strlen(n->text) != ev->data.scalar.length) {
			cfg_rep_add(&p->rep, n->line, n->col, path, NULL,
			            "value contains a NUL byte");
			n->bad = true;
		} else if (!as_key && !p->literal && cfg_interpolate(p, n, path)) {
			goto out;
		}
		break;
	case YAML_ALIAS_EVENT:
		n->kind = CFG_NODE_SCALAR;
		n->bad = true;
		n->text = strdup("");
		if (!n->text)
			goto out;
		cfg_rep_add(&p->rep, n->line, n->col, path, cfg_anchor_hint,
		            "YAML aliases (*%s) are not supported",
		            (const char *)ev->data.alias.anchor);
		break;
	case YAML_MAPPING_START_EVENT:
	case YAML_SEQUENCE_START_EVENT: {
		bool map = ev->type == YAML_MAPPING_START_EVENT;
		yaml_event_type_t end = map ? YAML_MAPPING_END_EVENT : YAML_SEQUENCE_END_EVENT;

		n->kind = map ? CFG_NODE_MAP : CFG_NODE_SEQ;
		anchor = map ? ev->data.mapping_start.anchor : ev->data.sequence_start.anchor;
		if (anchor) {
			cfg_rep_add(&p->rep, n->line, n->col, path, cfg_anchor_hint,
			            "YAML anchors (&%s) are not supported", (const char *)anchor);
			anchor = NULL;
		}
		if (depth >= CFG_MAX_DEPTH) {
			cfg_rep_add(&p->rep, n->line, n->col, path, NULL,
			            "nesting is deeper than %d levels", CFG_MAX_DEPTH);
			p->syntax_error = true;
			rc = SB_ERR_CONFIG;
			goto out;
		}
		for (;;) {
			struct cfg_node *kid = NULL;

			if (!cfg_next_event(p, &kev)) {
				rc = p->rep.nomem ? SB_ERR_NOMEM : SB_ERR_CONFIG;
				goto out;
			}
			if (kev.type == end) {
				yaml_event_delete(&kev);
				break;
			}
			if (map) {
				rc = cfg_parse_node(p, &kev, path, true, depth + 1, &kid);
				if (rc)
					goto out;
				rc = SB_ERR_NOMEM;
				if (cfg_node_push(n, kid)) {
					cfg_node_free(kid);
					rc = SB_ERR_NOMEM;
					goto out;
				}
				if (kid->kind != CFG_NODE_SCALAR) {
					if (!kid->bad)
						cfg_rep_add(&p->rep, kid->line, kid->col, path,
						            "write keys as plain words",
						            "a key must be a string, found a %s",
						            kid->kind == CFG_NODE_MAP ? "mapping"
						                                      : "sequence");
					kid->bad = true;
					kpath = strdup(path);
				} else {
					kpath = cfg_path_join(path, kid->text);
				}
				if (!kpath)
					goto out;
				if (!cfg_next_event(p, &vev)) {
					rc = p->rep.nomem ? SB_ERR_NOMEM : SB_ERR_CONFIG;
					goto out;
				}
				rc = cfg_parse_node(p, &vev, kpath, false, depth + 1, &kid);
				free(kpath);
				kpath = NULL;
			} else {
				char idx[32];

				snprintf(idx, sizeof idx, "[%zu]", n->n);
				kpath = cfg_path_join(path, idx);
				if (!kpath) {
					yaml_event_delete(&kev);
					goto out;
				}
				rc = cfg_parse_node(p, &kev, kpath, false, depth + 1, &kid);
				free(kpath);
				kpath = NULL;
			}
			if (rc)
				goto out;
			rc = SB_ERR_NOMEM;
			if (cfg_node_push(n, kid)) {
				cfg_node_free(kid);
				goto out;
			}
		}
		break;
	}
	default:
		cfg_rep_add(&p->rep, n->line, n->col, path, NULL, "unexpected YAML event");
		p->syntax_error = true;
		rc = SB_ERR_CONFIG;
		goto out;
	}
	if (anchor)
		cfg_rep_add(&p->rep, n->line, n->col, path, cfg_anchor_hint,
		            "YAML anchors (&%s) are not supported", (const char *)anchor);
	*out = n;
	n = NULL;
	rc = SB_OK;
out:
	yaml_event_delete(ev);
	free(kpath);
	cfg_node_free(n);
	return rc;
}

static int cfg_doc_parse_with(const char *text, size_t len, const char *file, const char *base_dir,
                              bool literal, struct cfg_doc **out, struct cfg_errors *errs);

int cfg_doc_parse(const char *text, size_t len, const char *file, const char *base_dir,
                  struct cfg_doc **out, struct cfg_errors *errs)
{
	return cfg_doc_parse_with(text, len, file, base_dir, false, out, errs);
}

int cfg_doc_parse_literal(const char *text, size_t len, const char *file, struct cfg_doc **out,
                          struct cfg_errors *errs)
{
	return cfg_doc_parse_with(text, len, file, NULL, true, out, errs);
}

static int cfg_doc_parse_with(const char *text, size_t len, const char *file, const char *base_dir,
                              bool literal, struct cfg_doc **out, struct cfg_errors *errs)
{
	struct cfg_parser p = {
	    .rep = {.errs = errs, .file = file}, .base_dir = base_dir, .literal = literal};
	struct cfg_doc *doc = NULL;
	yaml_event_t ev;
	bool parser_ok = false, in_doc = false;
	int rc = SB_ERR_NOMEM;

	*out = NULL;
	doc = calloc(1, sizeof *doc);
	if (!doc)
		goto out;
	doc->file = strdup(file ? file : "config");
	doc->base_dir = base_dir ? strdup(base_dir) : NULL;
	if (!doc->file || (base_dir && !doc->base_dir))
		goto out;
	p.doc = doc;
	if (!yaml_parser_initialize(&p.yp))
		goto out;
	parser_ok = true;
	yaml_parser_set_input_string(&p.yp, (const unsigned char *)text, len);

	for (;;) {
		yaml_event_type_t type;
		int prc;

		if (!cfg_next_event(&p, &ev))
			break;
		type = ev.type;
		if (type == YAML_STREAM_END_EVENT) {
			yaml_event_delete(&ev);
			break;
		}
		if (type == YAML_DOCUMENT_START_EVENT) {
			if (doc->root || in_doc) {
				cfg_rep_add(&p.rep, (int)ev.start_mark.line + 1,
				            (int)ev.start_mark.column + 1, "",
				            "remove the \"---\" line; the file holds one document",
				            "only one YAML document is allowed");
				yaml_event_delete(&ev);
				p.syntax_error = true;
				break;
			}
			in_doc = true;
			yaml_event_delete(&ev);
			continue;
		}
		if (type == YAML_DOCUMENT_END_EVENT || type == YAML_STREAM_START_EVENT) {
			yaml_event_delete(&ev);
			continue;
		}
		/* The document's root node. */
		prc = cfg_parse_node(&p, &ev, "", false, 0, &doc->root);
		if (prc == SB_ERR_NOMEM)
			p.rep.nomem = true;
		if (prc)
			break;
	}
	if (p.rep.nomem) {
		rc = SB_ERR_NOMEM;
		goto out;
	}
	if (p.syntax_error) {
		rc = SB_ERR_CONFIG;
		goto out;
	}
	*out = doc;
	doc = NULL;
	rc = p.rep.count ? SB_ERR_CONFIG : SB_OK;
out:
	if (parser_ok)
		yaml_parser_delete(&p.yp);
	cfg_doc_free(doc);
	return rc;
}

/* ------------------------------------------------------------------------ */
/* Describing values and keys in messages                                   */
/* ------------------------------------------------------------------------ */

/* A short, quoted, escaped rendering of a scalar for "found ..." (secrets
 * and values that came from ${...} are not shown as their contents). */
static char *cfg_found(const struct cfg_node *n, bool secret)
{
	struct buf b;
	const char *s;
	size_t i;

	if (n->kind == CFG_NODE_MAP)
		return strdup("a mapping");
	if (n->kind == CFG_NODE_SEQ)
		return strdup("a sequence");
	if (n->is_null)
		return strdup("null");
	s = n->raw ? n->raw : n->text;
	if (secret && !n->raw)
		return strdup(CFG_REDACTED);
	buf_init(&b, 4 * CFG_FOUND_MAX + 16);
	if (buf_puts(&b, "\""))
		goto fail;
	for (i = 0; s[i] && i < CFG_FOUND_MAX; i++) {
		unsigned char c = (unsigned char)s[i];
		int r;

		if (c == '"' || c == '\\')
			r = buf_printf(&b, "\\%c", c);
		else if (c == '\n')
			r = buf_puts(&b, "\\n");
		else if (c < 0x20 || c == 0x7f)
			r = buf_printf(&b, "\\x%02x", c);
		else
			r = buf_append(&b, &s[i], 1);
		if (r)
			goto fail;
	}
	if (buf_puts(&b, s[i] ? "...\"" : "\""))
		goto fail;
	return buf_steal(&b);
fail:
	buf_free(&b);
	return NULL;
}

/* "1h", "30s", "250ms": the largest unit that divides ms exactly. */
static void cfg_fmt_duration(char *out, size_t size, int64_t ms)
{
	static const struct {
		const char *unit;
		int64_t mult;
	} units[] = {{"d", 86400000}, {"h", 3600000}, {"m", 60000}, {"s", 1000}};

	for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
		if (ms != 0 && ms % units[i].mult == 0) {
			snprintf(out, size, "%lld%s", (long long)(ms / units[i].mult),
			         units[i].unit);
			return;
		}
	if (ms == 0)
		snprintf(out, size, "0");
	else
		snprintf(out, size, "%lldms", (long long)ms);
}

static void cfg_fmt_size(char *out, size_t size, int64_t bytes)
{
	static const struct {
		const char *unit;
		int64_t mult;
	} units[] = {{"GiB", 1LL << 30}, {"MiB", 1LL << 20}, {"KiB", 1LL << 10}};

	for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
		if (bytes != 0 && bytes % units[i].mult == 0) {
			snprintf(out, size, "%lld%s", (long long)(bytes / units[i].mult),
			         units[i].unit);
			return;
		}
	snprintf(out, size, "%lld", (long long)bytes);
}

static bool cfg_bounded(const struct cfg_key *k)
{
	return k->min != 0 || k->max != 0;
}

/* "debug, info, warn, error" */
static char *cfg_choices_list(const struct cfg_key *k, const char *quote)
{
	struct buf b;

	buf_init(&b, CFG_MAX_TEXT);
	for (const char *const *c = k->choices; c && *c; c++)
		if (buf_printf(&b, "%s%s%s%s", c == k->choices ? "" : ", ", quote, *c, quote)) {
			buf_free(&b);
			return NULL;
		}
	return buf_steal(&b);
}

/* What a key's value should look like, for type errors. */
static char *cfg_expected(const struct cfg_key *k)
{
	char *list, *s;

	switch (k->type) {
	case CFG_STRING:
		return strdup("a string");
	case CFG_INT:
		return strdup("an integer");
	case CFG_BOOL:
		return strdup("true or false");
	case CFG_DURATION:
		return strdup("a duration");
	case CFG_SIZE:
		return strdup("a size");
	case CFG_ENUM:
		list = cfg_choices_list(k, "");
		s = list ? cfg_strf("one of %s", list) : NULL;
		free(list);
		return s;
	case CFG_SECTION:
		return strdup("a mapping");
	case CFG_LIST:
		return strdup("a list of mappings");
	case CFG_STRING_LIST:
		return strdup("a list of strings");
	}
	return strdup("a value");
}

/* Optimal string alignment distance, case-insensitive; short strings only. */
static size_t cfg_distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	unsigned short d[65][65];

	if (la > 64 || lb > 64)
		return SIZE_MAX;
	for (size_t i = 0; i <= la; i++)
		d[i][0] = (unsigned short)i;
	for (size_t j = 0; j <= lb; j++)
		d[0][j] = (unsigned short)j;
	for (size_t i = 1; i <= la; i++)
		for (size_t j = 1; j <= lb; j++) {
			int ca = tolower((unsigned char)a[i - 1]);
			int cb = tolower((unsigned char)b[j - 1]);
			unsigned short best = (unsigned short)(d[i - 1][j - 1] + (ca != cb));

			if (d[i - 1][j] + 1 < best)
				best = (unsigned short)(d[i - 1][j] + 1);
			if (d[i][j - 1] + 1 < best)
				best = (unsigned short)(d[i][j - 1] + 1);
			if (i > 1 && j > 1 && ca == tolower((unsigned char)b[j - 2]) &&
			    tolower((unsigned char)a[i - 2]) == cb && d[i - 2][j - 2] + 1 < best)
				best = (unsigned short)(d[i - 2][j - 2] + 1);
			d[i][j] = best;
		}
	return d[la][lb];
}

const char *cfg_closest(const char *word, const char *const *cands, size_t n)
{
	size_t len = strlen(word), limit = len / 3, best = SIZE_MAX;
	const char *pick = NULL;

	if (limit < 1)
		limit = 1;
	if (limit > 3)
		limit = 3;
	for (size_t i = 0; i < n; i++) {
		size_t d = cfg_distance(word, cands[i]);

		if (d <= limit && d < best) {
			best = d;
			pick = cands[i];
		}
	}
	return pick;
}

static const struct cfg_key *cfg_find_key(const struct cfg_section *sec, const char *name)
{
	for (size_t i = 0; i < sec->nkeys; i++)
		if (strcmp(sec->keys[i].name, name) == 0)
			return &sec->keys[i];
	return NULL;
}

/* ------------------------------------------------------------------------ */
/* Converting one scalar                                                    */
/* ------------------------------------------------------------------------ */

enum cfg_conv { CFG_CONV_OK, CFG_CONV_BAD, CFG_CONV_NOMEM };

/* Converts text for key k into field. On CFG_CONV_BAD *msg (allocated) says
 * what was expected and ends with ", found <found>"; *hint is static or
 * NULL. */
static enum cfg_conv cfg_convert(const struct cfg_key *k, const char *text, const char *found,
                                 void *field, char **msg, const char **hint)
{
	char lo[32], hi[32], *list;
	int64_t v;
	int rc;

	*msg = NULL;
	*hint = NULL;
	switch (k->type) {
	case CFG_STRING: {
		size_t len = strlen(text);
		char *copy;

		if (cfg_bounded(k) && ((int64_t)len < k->min || (int64_t)len > k->max)) {
			if (len == 0)
				*msg = cfg_strf("expected a non-empty string, found \"\"");
			else if ((int64_t)len < k->min)
				*msg = cfg_strf("expected a string of at least %lld characters, "
				                "found %zu characters",
				                (long long)k->min, len);
			else
				*msg = cfg_strf("expected a string of at most %lld characters, "
				                "found %zu characters",
				                (long long)k->max, len);
			return *msg ? CFG_CONV_BAD : CFG_CONV_NOMEM;
		}
		copy = strdup(text);
		if (!copy)
			return CFG_CONV_NOMEM;
		free(*(char **)field);
		*(char **)field = copy;
		return CFG_CONV_OK;
	}
	case CFG_INT:
		rc = num_parse_i64(text, INT64_MIN, INT64_MAX, &v);
		if (rc == SB_OK && (!cfg_bounded(k) || (v >= k->min && v <= k->max))) {
			*(int64_t *)field = v;
			return CFG_CONV_OK;
		}
		if (rc == SB_ERR_INVAL)
			*msg = cfg_strf("expected an integer, found %s", found);
		else if (cfg_bounded(k))
			*msg = cfg_strf("expected an integer from %lld to %lld, found %s",
			                (long long)k->min, (long long)k->max, found);
		else
			*msg = cfg_strf("expected a 64-bit integer, found %s", found);
		return *msg ? CFG_CONV_BAD : CFG_CONV_NOMEM;
	case CFG_BOOL: {
		static const char *const yaml11[] = {"yes", "no", "on", "off", "y", "n"};

		if (strcmp(text, "true") == 0 || strcmp(text, "false") == 0) {
			*(bool *)field = text[0] == 't';
			return CFG_CONV_OK;
		}
		for (size_t i = 0; i < sizeof yaml11 / sizeof yaml11[0]; i++)
			if (strcasecmp(text, yaml11[i]) == 0)
				*hint = "YAML 1.1 booleans (yes/no/on/off) are not accepted; "
				        "write true or false";
		if (strcasecmp(text, "true") == 0 || strcasecmp(text, "false") == 0)
			*hint = "write true or false in lower case";
		*msg = cfg_strf("expected true or false, found %s", found);
		return *msg ? CFG_CONV_BAD : CFG_CONV_NOMEM;
	}
	case CFG_DURATION:
		rc = num_parse_duration_ms(text, &v);
		if (rc == SB_OK && (!cfg_bounded(k) || (v >= k->min && v <= k->max))) {
			*(int64_t *)field = v;
			return CFG_CONV_OK;
		}
		if (rc == SB_OK || (rc == SB_ERR_TOOBIG && cfg_bounded(k))) {
			cfg_fmt_duration(lo, sizeof lo, k->min);
			cfg_fmt_duration(hi, sizeof hi, k->max);
			*msg =
			    cfg_strf("expected a duration from %s to %s, found %s", lo, hi, found);
		} else {
			*msg = cfg_strf("expected a duration such as 250ms, 30s, 5m, 2h or 1d, "
			                "found %s",
			                found);
			*hint = "units are ms, s, m, h and d, with no space; a bare number is "
			        "milliseconds";
		}
		return *msg ? CFG_CONV_BAD : CFG_CONV_NOMEM;
	case CFG_SIZE:
		rc = num_parse_size(text, &v);
		if (rc == SB_OK && (!cfg_bounded(k) || (v >= k->min && v <= k->max))) {
			*(int64_t *)field = v;
			return CFG_CONV_OK;
		}
		if (rc == SB_OK || (rc == SB_ERR_TOOBIG && cfg_bounded(k))) {
			cfg_fmt_size(lo, sizeof lo, k->min);
			cfg_fmt_size(hi, sizeof hi, k->max);
			*msg = cfg_strf("expected a size from %s to %s, found %s", lo, hi, found);
		} else {
			*msg = cfg_strf("expected a size such as 512, 64KiB, 10MiB or 1GiB, "
			                "found %s",
			                found);
			*hint = "units are B, KiB, MiB, GiB (powers of 1024) and KB, MB, with no "
			        "space; a bare number is bytes";
		}
		return *msg ? CFG_CONV_BAD : CFG_CONV_NOMEM;
	case CFG_ENUM: {
		size_t n = 0;

		for (const char *const *c = k->choices; c && *c; c++, n++)
			if (strcmp(*c, text) == 0) {
				*(int *)field = (int)n;
				return CFG_CONV_OK;
			}
		list = cfg_choices_list(k, "");
		if (!list)
			return CFG_CONV_NOMEM;
		*msg = cfg_strf("expected one of %s, found %s", list, found);
		free(list);
		return *msg ? CFG_CONV_BAD : CFG_CONV_NOMEM;
	}
	case CFG_SECTION:
	case CFG_LIST:
	case CFG_STRING_LIST:
		break;
	}
	/* Sections and lists never reach here; cfg_apply_key handles them. */
	*msg = cfg_strf("expected a mapping or a list, found %s", found);
	return *msg ? CFG_CONV_BAD : CFG_CONV_NOMEM;
}

/* ------------------------------------------------------------------------ */
/* Applying a document                                                      */
/* ------------------------------------------------------------------------ */

struct cfg_error_ctx {
	struct cfg_rep *rep;
	const struct cfg_node *node; /* the section's mapping, or NULL */
	const char *path;            /* the section's key path ("" at the top) */
	int line, col;               /* where the section is (or would be) */
	int added;
};

/* The value node for key in a mapping (the first, if repeated). */
static const struct cfg_node *cfg_map_get(const struct cfg_node *map, const char *key)
{
	if (!map || map->kind != CFG_NODE_MAP)
		return NULL;
	for (size_t i = 0; i + 1 < map->n; i += 2)
		if (map->kids[i]->kind == CFG_NODE_SCALAR && !map->kids[i]->bad &&
		    strcmp(map->kids[i]->text, key) == 0)
			return map->kids[i + 1];
	return NULL;
}

/* Follows a relative path ("bind", "agents[2].id") from node as far as the
 * document goes; returns the deepest node reached (or NULL). *whole (may be
 * NULL) tells whether the path was followed to its end. */
static const struct cfg_node *cfg_resolve_at(const struct cfg_node *node, const char *rel,
                                             bool *whole)
{
	const struct cfg_node *at = node;
	const char *s = rel;

	if (whole)
		*whole = false;
	while (at) {
		const struct cfg_node *next = NULL;

		if (!*s) {
			if (whole)
				*whole = true;
			break;
		}
		if (*s == '.') {
			s++;
		} else if (*s == '[') {
			const char *end = strchr(s, ']');
			char digits[24];
			uint64_t i;
			size_t n = end ? (size_t)(end - s - 1) : 0;

			if (!end || n == 0 || n >= sizeof digits)
				break;
			memcpy(digits, s + 1, n);
			digits[n] = '\0';
			if (num_parse_u64(digits, SIZE_MAX, &i) != SB_OK)
				break;
			if (at->kind == CFG_NODE_SEQ && i < at->n)
				next = at->kids[i];
			s = end + 1;
			if (!next)
				break;
			at = next;
		} else {
			size_t n = strcspn(s, ".[");
			char name[256];

			if (n >= sizeof name)
				break;
			memcpy(name, s, n);
			name[n] = '\0';
			next = cfg_map_get(at, name);
			s += n;
			if (!next)
				break;
			at = next;
		}
	}
	return at;
}

static const struct cfg_node *cfg_resolve(const struct cfg_node *node, const char *rel)
{
	return cfg_resolve_at(node, rel, NULL);
}

bool cfg_where(const struct cfg_error_ctx *ctx, const char *key, int *line, int *col)
{
	bool whole = false;
	const struct cfg_node *at =
	    key && *key ? cfg_resolve_at(ctx->node, key, &whole) : ctx->node;

	if (!key || !*key)
		whole = at != NULL;
	/* cfg_apply reads a null value as absent; so does this. */
	if (whole && at->kind == CFG_NODE_SCALAR && at->is_null)
		whole = false;
	if (line)
		*line = at ? at->line : ctx->line;
	if (col)
		*col = at ? at->col : ctx->col;
	return whole;
}

void cfg_error_add(struct cfg_error_ctx *ctx, const char *key, const char *hint, const char *fmt,
                   ...)
{
	const struct cfg_node *at = key && *key ? cfg_resolve(ctx->node, key) : ctx->node;
	char *path = key && *key ? cfg_path_join(ctx->path, key) : strdup(ctx->path);
	char *msg;
	va_list ap;

	va_start(ap, fmt);
	msg = cfg_vstrf(fmt, ap);
	va_end(ap);
	ctx->added++;
	if (!path || !msg) {
		ctx->rep->count++;
		ctx->rep->nomem = true;
	} else {
		cfg_rep_add(ctx->rep, at ? at->line : ctx->line, at ? at->col : ctx->col, path,
		            hint, "%s", msg);
	}
	free(msg);
	free(path);
}

static void cfg_apply_section(struct cfg_rep *rep, const struct cfg_section *sec, void *obj,
                              const struct cfg_node *map, const char *path, int line, int col);

static void cfg_validate(struct cfg_rep *rep, const struct cfg_key *k, const void *field,
                         const struct cfg_node *val, const char *path, int line, int col)
{
	const char *why;
	char *found;

	if (!k->validate)
		return;
	why = k->validate(field);
	if (!why)
		return;
	if (!val) {
		cfg_rep_add(rep, line, col, path, k->hint, "%s (default value)", why);
		return;
	}
	found = cfg_found(val, k->flags & CFG_SECRET);
	if (!found) {
		rep->nomem = true;
		return;
	}
	cfg_rep_add(rep, val->line, val->col, path, k->hint, "%s, found %s", why, found);
	free(found);
}

static void cfg_type_error(struct cfg_rep *rep, const struct cfg_key *k, const struct cfg_node *val,
                           const char *path, const char *hint)
{
	char *want = cfg_expected(k), *found = cfg_found(val, k->flags & CFG_SECRET);

	if (want && found)
		cfg_rep_add(rep, val->line, val->col, path, hint ? hint : k->hint,
		            "expected %s, found %s", want, found);
	else
		rep->nomem = true;
	free(want);
	free(found);
}

static void cfg_apply_list(struct cfg_rep *rep, const struct cfg_key *k, void *field,
                           const struct cfg_node *val, const char *path)
{
	size_t *count = (size_t *)((char *)field - k->offset + k->count_offset);
	bool strings = k->type == CFG_STRING_LIST;
	size_t esize = strings ? sizeof(char *) : k->section->size;
	char *arr = NULL;

	if (val->kind != CFG_NODE_SEQ) {
		cfg_type_error(rep, k, val, path,
		               val->kind == CFG_NODE_MAP ? "start each entry with \"- \"" : NULL);
		return;
	}
	if (cfg_bounded(k) && (int64_t)val->n < k->min) {
		cfg_rep_add(rep, val->line, val->col, path, k->hint,
		            "expected at least %lld %s, found %zu", (long long)k->min,
		            k->min == 1 ? "entry" : "entries", val->n);
		return;
	}
	if (cfg_bounded(k) && (int64_t)val->n > k->max) {
		cfg_rep_add(rep, val->line, val->col, path, k->hint,
		            "expected at most %lld entries, found %zu", (long long)k->max, val->n);
		return;
	}
	if (val->n == 0)
		return;
	arr = calloc(val->n, esize);
	if (!arr) {
		rep->nomem = true;
		return;
	}
	*(void **)field = arr;
	*count = 0;
	for (size_t i = 0; i < val->n; i++) {
		const struct cfg_node *el = val->kids[i];
		char idx[32], *epath;

		snprintf(idx, sizeof idx, "[%zu]", i);
		epath = cfg_path_join(path, idx);
		if (!epath) {
			rep->nomem = true;
			return;
		}
		if (el->bad) {
			/* already reported */
		} else if (strings) {
			if (el->kind != CFG_NODE_SCALAR || el->is_null) {
				char *found = cfg_found(el, k->flags & CFG_SECRET);

				if (found)
					cfg_rep_add(rep, el->line, el->col, epath, k->hint,
					            "expected a string, found %s", found);
				else
					rep->nomem = true;
				free(found);
			} else {
				char *s = strdup(el->text);

				if (!s)
					rep->nomem = true;
				else
					((char **)arr)[(*count)++] = s;
			}
		} else if (el->kind != CFG_NODE_MAP) {
			char *found = cfg_found(el, false);

			if (found)
				cfg_rep_add(rep, el->line, el->col, epath, k->hint,
				            "expected a mapping, found %s", found);
			else
				rep->nomem = true;
			free(found);
		} else {
			/* Count first so that cfg_release frees a half-filled entry. */
			void *eobj = arr + (*count)++ * esize;

			cfg_apply_section(rep, k->section, eobj, el, epath, el->line, el->col);
		}
		free(epath);
	}
}

static void cfg_apply_key(struct cfg_rep *rep, const struct cfg_key *k, void *obj,
                          const struct cfg_node *val, const char *path, int line, int col)
{
	void *field = (char *)obj + k->offset;
	char *found = NULL, *msg = NULL;
	const char *hint = NULL;
	enum cfg_conv cv;

	if (val && val->bad)
		return;
	if (!val || (val->kind == CFG_NODE_SCALAR && val->is_null)) {
		if (k->flags & CFG_REQUIRED) {
			if (val)
				cfg_rep_add(rep, val->line, val->col, path, k->hint,
				            "required key has no value");
			else
				cfg_rep_add(rep, line, col, path, k->hint, "missing required key");
			return;
		}
		if (k->type == CFG_SECTION) {
			cfg_apply_section(rep, k->section, field, NULL, path,
			                  val ? val->line : line, val ? val->col : col);
			return;
		}
		if (!k->def || k->type == CFG_LIST || k->type == CFG_STRING_LIST)
			return;
		cv = cfg_convert(k, k->def, k->def, field, &msg, &hint);
		if (cv == CFG_CONV_BAD)
			cfg_rep_add(rep, line, col, path, NULL, "invalid default in the schema: %s",
			            msg);
		else if (cv == CFG_CONV_NOMEM)
			rep->nomem = true;
		else
			cfg_validate(rep, k, field, NULL, path, line, col);
		free(msg);
		return;
	}
	switch (k->type) {
	case CFG_SECTION:
		if (val->kind != CFG_NODE_MAP)
			cfg_type_error(rep, k, val, path, NULL);
		else
			cfg_apply_section(rep, k->section, field, val, path, val->line, val->col);
		return;
	case CFG_LIST:
	case CFG_STRING_LIST:
		cfg_apply_list(rep, k, field, val, path);
		if (k->type == CFG_STRING_LIST)
			cfg_validate(rep, k, field, val, path, line, col);
		return;
	default:
		break;
	}
	if (val->kind != CFG_NODE_SCALAR) {
		cfg_type_error(rep, k, val, path, NULL);
		return;
	}
	found = cfg_found(val, k->flags & CFG_SECRET);
	if (!found) {
		rep->nomem = true;
		return;
	}
	cv = cfg_convert(k, val->text, found, field, &msg, &hint);
	if (cv == CFG_CONV_BAD && k->type == CFG_ENUM) {
		size_t n = 0;
		const char *pick;
		char *dym = NULL;

		while (k->choices && k->choices[n])
			n++;
		pick = cfg_closest(val->text, k->choices, n);
		if (pick)
			dym = cfg_strf("did you mean \"%s\"?", pick);
		cfg_rep_add(rep, val->line, val->col, path, dym ? dym : k->hint, "%s", msg);
		free(dym);
	} else if (cv == CFG_CONV_BAD)
		cfg_rep_add(rep, val->line, val->col, path, hint ? hint : k->hint, "%s", msg);
	else if (cv == CFG_CONV_NOMEM)
		rep->nomem = true;
	else
		cfg_validate(rep, k, field, val, path, line, col);
	free(msg);
	free(found);
}

static void cfg_unknown_key(struct cfg_rep *rep, const struct cfg_section *sec,
                            const struct cfg_node *kn, const char *path)
{
	const char **names = calloc(sec->nkeys ? sec->nkeys : 1, sizeof *names);
	const char *pick = NULL;
	char *hint = NULL;
	struct buf b;

	if (names) {
		for (size_t i = 0; i < sec->nkeys; i++)
			names[i] = sec->keys[i].name;
		pick = cfg_closest(kn->text, names, sec->nkeys);
	}
	if (pick) {
		hint = cfg_strf("did you mean \"%s\"?", pick);
	} else {
		buf_init(&b, CFG_MAX_TEXT);
		if (buf_puts(&b, "valid keys: ") == SB_OK) {
			for (size_t i = 0; i < sec->nkeys; i++)
				if (buf_printf(&b, "%s%s", i ? ", " : "", sec->keys[i].name))
					break;
			hint = buf_steal(&b);
		}
		buf_free(&b);
	}
	if (!hint || !names)
		rep->nomem = true;
	cfg_rep_add(rep, kn->line, kn->col, path, hint, "unknown key");
	free(hint);
	free(names);
}

static void cfg_apply_section(struct cfg_rep *rep, const struct cfg_section *sec, void *obj,
                              const struct cfg_node *map, const char *path, int line, int col)
{
	bool own_errors = false;

	/* Keys in the document that the table does not know, and repeats. */
	for (size_t i = 0; map && i + 1 < map->n; i += 2) {
		const struct cfg_node *kn = map->kids[i];
		char *kpath;

		if (kn->kind != CFG_NODE_SCALAR || kn->bad)
			continue;
		kpath = cfg_path_join(path, kn->text);
		if (!kpath) {
			rep->nomem = true;
			return;
		}
		if (!cfg_find_key(sec, kn->text)) {
			cfg_unknown_key(rep, sec, kn, kpath);
		} else {
			for (size_t j = 0; j < i; j += 2) {
				const struct cfg_node *prev = map->kids[j];

				if (prev->kind == CFG_NODE_SCALAR && !prev->bad &&
				    strcmp(prev->text, kn->text) == 0) {
					char *hint = cfg_strf("the first is at line %d; keep one",
					                      prev->line);

					cfg_rep_add(rep, kn->line, kn->col, kpath, hint,
					            "duplicate key");
					free(hint);
					break;
				}
			}
		}
		free(kpath);
	}
	for (size_t i = 0; i < sec->nkeys; i++) {
		const struct cfg_key *k = &sec->keys[i];
		char *kpath = cfg_path_join(path, k->name);
		int before = rep->count;

		if (!kpath) {
			rep->nomem = true;
			return;
		}
		cfg_apply_key(rep, k, obj, cfg_map_get(map, k->name), kpath, line, col);
		free(kpath);
		if (rep->count > before && k->type != CFG_SECTION && k->type != CFG_LIST)
			own_errors = true;
	}
	/* A check reads this section's values; when one of them failed it
	 * would only repeat that error in other words. */
	if (sec->check && !own_errors) {
		struct cfg_error_ctx ctx = {
		    .rep = rep, .node = map, .path = path, .line = line, .col = col};

		sec->check(obj, &ctx);
	}
}

int cfg_apply(const struct cfg_doc *doc, const struct cfg_section *section, void *obj,
              struct cfg_errors *errs)
{
	struct cfg_rep rep = {.errs = errs, .file = doc->file};
	const struct cfg_node *root = doc->root;

	if (!root || root->kind != CFG_NODE_MAP) {
		char *found = root ? cfg_found(root, false) : strdup("an empty document");

		if (!found)
			return SB_ERR_NOMEM;
		cfg_rep_add(&rep, root ? root->line : 1, root ? root->col : 1, "",
		            "the file holds keys such as \"gateway:\" and \"agents:\"",
		            "expected a mapping at the top level, found %s", found);
		free(found);
	} else {
		cfg_apply_section(&rep, section, obj, root, "", root->line, root->col);
	}
	cfg_errors_sort(errs);
	if (rep.nomem)
		return SB_ERR_NOMEM;
	return rep.count ? SB_ERR_CONFIG : SB_OK;
}

/* ------------------------------------------------------------------------ */
/* Table walkers                                                            */
/* ------------------------------------------------------------------------ */

static size_t *cfg_count_field(const struct cfg_key *k, const void *obj)
{
	return (size_t *)((const char *)obj + k->count_offset);
}

void cfg_release(const struct cfg_section *section, void *obj)
{
	if (!obj)
		return;
	for (size_t i = 0; i < section->nkeys; i++) {
		const struct cfg_key *k = &section->keys[i];
		void *field = (char *)obj + k->offset;

		switch (k->type) {
		case CFG_STRING:
			free(*(char **)field);
			*(char **)field = NULL;
			break;
		case CFG_SECTION:
			cfg_release(k->section, field);
			break;
		case CFG_LIST:
		case CFG_STRING_LIST: {
			size_t *count = cfg_count_field(k, obj);
			char *arr = *(char **)field;

			for (size_t j = 0; arr && j < *count; j++) {
				if (k->type == CFG_LIST)
					cfg_release(k->section, arr + j * k->section->size);
				else
					free(((char **)arr)[j]);
			}
			free(arr);
			*(char **)field = NULL;
			*count = 0;
			break;
		}
		default:
			break;
		}
	}
}

void cfg_each_secret(const struct cfg_section *section, const void *obj,
                     void (*fn)(void *ud, const char *value), void *ud)
{
	for (size_t i = 0; i < section->nkeys; i++) {
		const struct cfg_key *k = &section->keys[i];
		const void *field = (const char *)obj + k->offset;

		switch (k->type) {
		case CFG_STRING: {
			const char *s = *(char *const *)field;

			if ((k->flags & CFG_SECRET) && s && *s)
				fn(ud, s);
			break;
		}
		case CFG_SECTION:
			cfg_each_secret(k->section, field, fn, ud);
			break;
		case CFG_LIST:
		case CFG_STRING_LIST: {
			size_t count = *cfg_count_field(k, obj);
			const char *arr = *(char *const *)field;

			for (size_t j = 0; arr && j < count; j++) {
				if (k->type == CFG_LIST) {
					cfg_each_secret(k->section, arr + j * k->section->size, fn,
					                ud);
				} else {
					const char *s = ((char *const *)arr)[j];

					if ((k->flags & CFG_SECRET) && s && *s)
						fn(ud, s);
				}
			}
			break;
		}
		default:
			break;
		}
	}
}

static bool cfg_section_equal(const struct cfg_section *sec, const void *a, const void *b);

static bool cfg_value_equal(const struct cfg_key *k, const void *a, const void *b)
{
	const void *fa = (const char *)a + k->offset, *fb = (const char *)b + k->offset;

	switch (k->type) {
	case CFG_STRING: {
		const char *sa = *(char *const *)fa, *sb = *(char *const *)fb;

		if (!sa || !sb)
			return sa == sb;
		return strcmp(sa, sb) == 0;
	}
	case CFG_INT:
	case CFG_DURATION:
	case CFG_SIZE:
		return *(const int64_t *)fa == *(const int64_t *)fb;
	case CFG_BOOL:
		return *(const bool *)fa == *(const bool *)fb;
	case CFG_ENUM:
		return *(const int *)fa == *(const int *)fb;
	case CFG_SECTION:
		return cfg_section_equal(k->section, fa, fb);
	case CFG_LIST:
	case CFG_STRING_LIST: {
		size_t na = *cfg_count_field(k, a), nb = *cfg_count_field(k, b);
		const char *aa = *(char *const *)fa, *ab = *(char *const *)fb;

		if (na != nb)
			return false;
		for (size_t j = 0; j < na; j++) {
			if (k->type == CFG_LIST) {
				size_t sz = k->section->size;

				if (!cfg_section_equal(k->section, aa + j * sz, ab + j * sz))
					return false;
			} else if (strcmp(((char *const *)aa)[j], ((char *const *)ab)[j]) != 0) {
				return false;
			}
		}
		return true;
	}
	}
	return true;
}

static bool cfg_section_equal(const struct cfg_section *sec, const void *a, const void *b)
{
	for (size_t i = 0; i < sec->nkeys; i++)
		if (!cfg_value_equal(&sec->keys[i], a, b))
			return false;
	return true;
}

static int cfg_restart_walk(const struct cfg_section *sec, const void *a, const void *b,
                            const char *prefix, void (*fn)(void *ud, const char *path), void *ud)
{
	int n = 0;

	for (size_t i = 0; i < sec->nkeys; i++) {
		const struct cfg_key *k = &sec->keys[i];
		char *path = cfg_path_join(prefix, k->name);

		if (!path)
			return n;
		if (k->flags & CFG_RESTART) {
			if (!cfg_value_equal(k, a, b)) {
				if (fn)
					fn(ud, path);
				n++;
			}
		} else if (k->type == CFG_SECTION) {
			n += cfg_restart_walk(k->section, (const char *)a + k->offset,
			                      (const char *)b + k->offset, path, fn, ud);
		} else if (k->type == CFG_LIST) {
			size_t na = *cfg_count_field(k, a), nb = *cfg_count_field(k, b);
			const char *aa = *(char *const *)((const char *)a + k->offset);
			const char *ab = *(char *const *)((const char *)b + k->offset);
			size_t sz = k->section->size;

			/* Entries are matched by position. */
			for (size_t j = 0; j < na && j < nb; j++) {
				char idx[32], *epath;

				snprintf(idx, sizeof idx, "[%zu]", j);
				epath = cfg_path_join(path, idx);
				if (!epath)
					break;
				n += cfg_restart_walk(k->section, aa + j * sz, ab + j * sz, epath,
				                      fn, ud);
				free(epath);
			}
		}
		free(path);
	}
	return n;
}

int cfg_restart_changes(const struct cfg_section *section, const void *a, const void *b,
                        void (*fn)(void *ud, const char *path), void *ud)
{
	return cfg_restart_walk(section, a, b, "", fn, ud);
}

/* ---- the markdown reference ---- */

static const char *cfg_type_name(const struct cfg_key *k)
{
	switch (k->type) {
	case CFG_STRING:
		return "string";
	case CFG_INT:
		return "integer";
	case CFG_BOOL:
		return "bool";
	case CFG_DURATION:
		return "duration";
	case CFG_SIZE:
		return "size";
	case CFG_ENUM:
		return "enum";
	case CFG_SECTION:
		return "section";
	case CFG_LIST:
		return "list";
	case CFG_STRING_LIST:
		return "list of strings";
	}
	return "?";
}

/* Writes text with "|" escaped and newlines folded, for a table cell. */
static void cfg_md_cell(FILE *out, const char *s)
{
	for (; s && *s; s++) {
		if (*s == '|')
			fputs("\\|", out);
		else if (*s == '\n')
			fputc(' ', out);
		else
			fputc(*s, out);
	}
}

static void cfg_md_allowed(FILE *out, const struct cfg_key *k)
{
	char lo[32], hi[32];

	switch (k->type) {
	case CFG_STRING:
		if (!cfg_bounded(k))
			fputs("any", out);
		else if (k->min > 0)
			fprintf(out, "%lld to %lld characters", (long long)k->min,
			        (long long)k->max);
		else
			fprintf(out, "at most %lld characters", (long long)k->max);
		return;
	case CFG_INT:
		if (cfg_bounded(k))
			fprintf(out, "%lld to %lld", (long long)k->min, (long long)k->max);
		else
			fputs("any", out);
		return;
	case CFG_BOOL:
		fputs("`true`, `false`", out);
		return;
	case CFG_DURATION:
		if (!cfg_bounded(k)) {
			fputs("any", out);
			return;
		}
		cfg_fmt_duration(lo, sizeof lo, k->min);
		cfg_fmt_duration(hi, sizeof hi, k->max);
		fprintf(out, "%s to %s", lo, hi);
		return;
	case CFG_SIZE:
		if (!cfg_bounded(k)) {
			fputs("any", out);
			return;
		}
		cfg_fmt_size(lo, sizeof lo, k->min);
		cfg_fmt_size(hi, sizeof hi, k->max);
		fprintf(out, "%s to %s", lo, hi);
		return;
	case CFG_ENUM:
		for (const char *const *c = k->choices; c && *c; c++)
			fprintf(out, "%s`%s`", c == k->choices ? "" : ", ", *c);
		return;
	case CFG_SECTION:
		fputs("a mapping, see below", out);
		return;
	case CFG_LIST:
	case CFG_STRING_LIST:
		if (cfg_bounded(k))
			fprintf(out, "%lld to %lld entries", (long long)k->min, (long long)k->max);
		else
			fputs("any number of entries", out);
		if (k->type == CFG_LIST)
			fputs(", see below", out);
		return;
	}
}

static void cfg_md_section(const struct cfg_section *sec, const char *prefix, FILE *out)
{
	if (*prefix)
		fprintf(out, "### `%s`\n\n", prefix);
	else
		fputs("### Top level\n\n", out);
	if (sec->doc)
		fprintf(out, "%s\n\n", sec->doc);
	fputs("| Key | Type | Default | Allowed | Flags | Description |\n", out);
	fputs("|---|---|---|---|---|---|\n", out);
	for (size_t i = 0; i < sec->nkeys; i++) {
		const struct cfg_key *k = &sec->keys[i];
		const char *sep = "";

		fprintf(out, "| `%s%s%s` | %s | ", prefix, *prefix ? "." : "", k->name,
		        cfg_type_name(k));
		if (k->flags & CFG_REQUIRED)
			fputs("required", out);
		else if (k->type == CFG_SECTION || k->type == CFG_LIST ||
		         k->type == CFG_STRING_LIST)
			fputs("—", out);
		else if (k->def)
			fprintf(out, "`%s`", k->def);
		else
			fputs("unset", out);
		fputs(" | ", out);
		cfg_md_allowed(out, k);
		fputs(" | ", out);
		if (k->flags & CFG_RESTART) {
			fputs("restart", out);
			sep = ", ";
		}
		if (k->flags & CFG_SECRET)
			fprintf(out, "%ssecret", sep);
		fputs(" | ", out);
		cfg_md_cell(out, k->doc);
		fputs(" |\n", out);
	}
	fputc('\n', out);
	for (size_t i = 0; i < sec->nkeys; i++) {
		const struct cfg_key *k = &sec->keys[i];
		char *sub;

		if (k->type != CFG_SECTION && k->type != CFG_LIST)
			continue;
		sub = cfg_strf("%s%s%s%s", prefix, *prefix ? "." : "", k->name,
		               k->type == CFG_LIST ? "[]" : "");
		if (!sub)
			return;
		cfg_md_section(k->section, sub, out);
		free(sub);
	}
}

void cfg_print_reference(const struct cfg_section *section, FILE *out)
{
	cfg_md_section(section, "", out);
}

/* ---- the defaults lint ---- */

static void cfg_lint_section(struct cfg_rep *rep, const struct cfg_section *sec, void *obj,
                             const char *prefix)
{
	for (size_t i = 0; i < sec->nkeys; i++) {
		const struct cfg_key *k = &sec->keys[i];
		void *field = (char *)obj + k->offset;
		char *path = cfg_path_join(prefix, k->name), *msg = NULL;
		const char *hint;
		bool structured =
		    k->type == CFG_SECTION || k->type == CFG_LIST || k->type == CFG_STRING_LIST;

		if (!path) {
			rep->nomem = true;
			return;
		}
		if (k->offset >= sec->size && sec->size)
			cfg_rep_add(rep, 0, 0, path, NULL, "offset is outside the struct");
		if ((k->flags & CFG_REQUIRED) && k->def)
			cfg_rep_add(rep, 0, 0, path, NULL, "a required key has a default");
		if (structured && k->def)
			cfg_rep_add(rep, 0, 0, path, NULL, "a %s cannot have a default",
			            cfg_type_name(k));
		if ((k->type == CFG_SECTION || k->type == CFG_LIST) && !k->section)
			cfg_rep_add(rep, 0, 0, path, NULL, "no section table");
		if (k->type == CFG_ENUM && (!k->choices || !k->choices[0]))
			cfg_rep_add(rep, 0, 0, path, NULL, "an enum without choices");
		if ((k->flags & CFG_SECRET) && k->type != CFG_STRING && k->type != CFG_STRING_LIST)
			cfg_rep_add(rep, 0, 0, path, NULL, "only strings can be secret");
		if (cfg_bounded(k) && k->min > k->max)
			cfg_rep_add(rep, 0, 0, path, NULL, "min %lld is above max %lld",
			            (long long)k->min, (long long)k->max);
		if (!k->doc || !*k->doc)
			cfg_rep_add(rep, 0, 0, path, NULL, "no documentation");
		for (size_t j = 0; j < i; j++)
			if (strcmp(sec->keys[j].name, k->name) == 0)
				cfg_rep_add(rep, 0, 0, path, NULL, "declared twice");

		if (k->type == CFG_SECTION && k->section) {
			cfg_lint_section(rep, k->section, field, path);
		} else if (k->type == CFG_LIST && k->section) {
			void *el = calloc(1, k->section->size ? k->section->size : 1);
			char *epath = cfg_strf("%s[]", path);

			if (!el || !epath || !k->section->size) {
				if (!k->section->size)
					cfg_rep_add(rep, 0, 0, path, NULL,
					            "list section has no size");
				else
					rep->nomem = true;
			} else {
				cfg_lint_section(rep, k->section, el, epath);
				cfg_release(k->section, el);
			}
			free(epath);
			free(el);
		} else if (!structured && k->def) {
			enum cfg_conv cv = cfg_convert(k, k->def, k->def, field, &msg, &hint);

			if (cv == CFG_CONV_BAD)
				cfg_rep_add(rep, 0, 0, path, NULL, "default: %s", msg);
			else if (cv == CFG_CONV_NOMEM)
				rep->nomem = true;
			else if (k->validate && k->validate(field))
				cfg_rep_add(rep, 0, 0, path, NULL, "default: %s",
				            k->validate(field));
			free(msg);
		}
		free(path);
	}
}

int cfg_check_schema(const struct cfg_section *section, struct cfg_errors *errs)
{
	struct cfg_rep rep = {.errs = errs, .file = "<schema>"};
	void *obj = calloc(1, section->size ? section->size : 1);

	if (!obj)
		return SB_ERR_NOMEM;
	if (!section->size)
		cfg_rep_add(&rep, 0, 0, section->name ? section->name : "", NULL,
		            "section has no size");
	else
		cfg_lint_section(&rep, section, obj, "");
	cfg_release(section, obj);
	free(obj);
	if (rep.nomem)
		return SB_ERR_NOMEM;
	return rep.count ? SB_ERR_CONFIG : SB_OK;
}
