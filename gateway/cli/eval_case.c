/*
 * eval_case.c - loading evals/NAME.yaml and checking a run against a case
 * (eval_case.h, docs/eval.md).
 */
#include "gateway/cli/eval_case.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "gateway/core/beneath.h"
#include "gateway/core/buf.h"
#include "gateway/core/err.h"

/* How much of what a run did a failure quotes. */
#define EVAL_SEEN_MAX 400

/* ---- the schema ---- */

static const char *eval_check_name(const void *field)
{
	const char *s = *(char *const *)field;

	if (!s)
		return NULL;
	if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9')))
		return "must start with a letter or a digit";
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') || *s == '-' || *s == '_' || *s == '.'))
			return "may hold only letters, digits, \"-\", \"_\" and \".\"";
	return NULL;
}

static const char *eval_check_channel(const void *field)
{
	const char *s = *(char *const *)field;

	for (; s && *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '-' ||
		      *s == '_'))
			return "may hold only a-z, 0-9, \"-\" and \"_\"";
	return NULL;
}

/* A path an expectation reads: beneath the workspace, said plainly. */
static const char *eval_check_path(const void *field)
{
	const char *s = *(char *const *)field, *p;

	if (!s)
		return NULL;
	if (s[0] == '/')
		return "must be relative to the workspace";
	for (p = s; *p;) {
		size_t n = strcspn(p, "/");

		if (n == 2 && p[0] == '.' && p[1] == '.')
			return "may not contain \"..\"";
		p += n;
		if (*p == '/')
			p++;
	}
	return NULL;
}

static const struct cfg_key eval_tool_keys[] = {
    {
        .name = "name",
        .type = CFG_STRING,
        .offset = offsetof(struct eval_tool_expect, name),
        .min = 1,
        .max = 128,
        .flags = CFG_REQUIRED,
        .doc = "The tool's name (`read`, `write`, `bash`, ...).",
    },
    {
        .name = "count",
        .type = CFG_INT,
        .offset = offsetof(struct eval_tool_expect, count),
        .min = 0,
        .max = 10000,
        .doc = "Exactly this many calls (0: never called); unset: at least one.",
    },
    {
        .name = "input_contains",
        .type = CFG_STRING,
        .offset = offsetof(struct eval_tool_expect, input_contains),
        .min = 1,
        .max = 4096,
        .doc = "Count only calls whose input holds this text (in a string value, or in "
               "the input as compact JSON).",
    },
    {
        .name = "failed",
        .type = CFG_BOOL,
        .offset = offsetof(struct eval_tool_expect, failed),
        .doc = "Count only calls that failed or were refused (true), or only those that "
               "succeeded (false); unset: both.",
    },
};

static int eval_tool_check(void *obj, struct cfg_error_ctx *ctx)
{
	struct eval_tool_expect *t = obj;

	t->count_given = cfg_where(ctx, "count", NULL, NULL);
	t->failed_given = cfg_where(ctx, "failed", NULL, NULL);
	return 0;
}

static const struct cfg_section eval_tool_section = {
    .name = "tool expectation",
    .size = sizeof(struct eval_tool_expect),
    .keys = eval_tool_keys,
    .nkeys = sizeof eval_tool_keys / sizeof eval_tool_keys[0],
    .check = eval_tool_check,
    .doc = "A tool the run must (or must not) call.",
};

static const struct cfg_key eval_file_keys[] = {
    {
        .name = "path",
        .type = CFG_STRING,
        .offset = offsetof(struct eval_file_expect, path),
        .min = 1,
        .max = BENEATH_PATH_MAX - 1,
        .flags = CFG_REQUIRED,
        .validate = eval_check_path,
        .doc = "The file, relative to the workspace.",
        .hint = "write it as the agent's file tools would, e.g. notes/today.md",
    },
    {
        .name = "exists",
        .type = CFG_BOOL,
        .offset = offsetof(struct eval_file_expect, exists),
        .def = "true",
        .doc = "Whether the file must be there after the run (false: must not be).",
    },
    {
        .name = "contains",
        .type = CFG_STRING_LIST,
        .offset = offsetof(struct eval_file_expect, contains),
        .count_offset = offsetof(struct eval_file_expect, n_contains),
        .max = 100,
        .doc = "Texts the file must hold.",
    },
    {
        .name = "not_contains",
        .type = CFG_STRING_LIST,
        .offset = offsetof(struct eval_file_expect, not_contains),
        .count_offset = offsetof(struct eval_file_expect, n_not_contains),
        .max = 100,
        .doc = "Texts the file must not hold.",
    },
};

static int eval_file_check(void *obj, struct cfg_error_ctx *ctx)
{
	struct eval_file_expect *f = obj;

	if (!f->exists && (f->n_contains || f->n_not_contains)) {
		cfg_error_add(ctx, "exists", "drop contains/not_contains, or exists: false",
		              "a file that must not exist cannot hold text");
		return 1;
	}
	return 0;
}

static const struct cfg_section eval_file_expect_section = {
    .name = "file expectation",
    .size = sizeof(struct eval_file_expect),
    .keys = eval_file_keys,
    .nkeys = sizeof eval_file_keys / sizeof eval_file_keys[0],
    .check = eval_file_check,
    .doc = "A file of the run's workspace copy after the run.",
};

static const struct cfg_key eval_expect_keys[] = {
    {
        .name = "tools",
        .type = CFG_LIST,
        .offset = offsetof(struct eval_expect, tools),
        .count_offset = offsetof(struct eval_expect, n_tools),
        .max = 100,
        .section = &eval_tool_section,
        .doc = "Tools the run calls, over all its turns.",
        .hint = "each entry is a mapping: - {name: write, count: 1}",
    },
    {
        .name = "answer_contains",
        .type = CFG_STRING_LIST,
        .offset = offsetof(struct eval_expect, answer_contains),
        .count_offset = offsetof(struct eval_expect, n_answer_contains),
        .max = 100,
        .doc = "Texts the last reply must hold (case-sensitive).",
        .hint = "a list: answer_contains: [\"text\"]",
    },
    {
        .name = "answer_not_contains",
        .type = CFG_STRING_LIST,
        .offset = offsetof(struct eval_expect, answer_not_contains),
        .count_offset = offsetof(struct eval_expect, n_answer_not_contains),
        .max = 100,
        .doc = "Texts the last reply must not hold.",
        .hint = "a list: answer_not_contains: [\"text\"]",
    },
    {
        .name = "answer_matches",
        .type = CFG_STRING_LIST,
        .offset = offsetof(struct eval_expect, answer_matches),
        .count_offset = offsetof(struct eval_expect, n_answer_matches),
        .max = 100,
        .doc = "PCRE2 patterns the last reply must match (`(?i)` ignores case).",
        .hint = "a list: answer_matches: [\"(?i)hello\"]",
    },
    {
        .name = "files",
        .type = CFG_LIST,
        .offset = offsetof(struct eval_expect, files),
        .count_offset = offsetof(struct eval_expect, n_files),
        .max = 100,
        .section = &eval_file_expect_section,
        .doc = "Files of the workspace copy after the run.",
        .hint = "each entry is a mapping: - {path: notes.md, contains: [\"text\"]}",
    },
};

static void eval_expect_patterns_free(struct eval_expect *x)
{
	for (size_t i = 0; i < x->n_patterns; i++)
		pcre2_code_free(x->patterns[i]);
	free(x->patterns);
	x->patterns = NULL;
	x->n_patterns = 0;
}

/* Compiles answer_matches; a pattern that does not compile is an error at
 * its position. */
static int eval_expect_check(void *obj, struct cfg_error_ctx *ctx)
{
	struct eval_expect *x = obj;
	int n = 0;

	if (!x->n_answer_matches)
		return 0;
	x->patterns = calloc(x->n_answer_matches, sizeof *x->patterns);
	if (!x->patterns)
		return 0;
	for (size_t i = 0; i < x->n_answer_matches; i++) {
		int err;
		PCRE2_SIZE off;
		char key[64], msg[256];
		pcre2_code *re =
		    pcre2_compile((PCRE2_SPTR)x->answer_matches[i], PCRE2_ZERO_TERMINATED,
		                  PCRE2_UTF | PCRE2_MATCH_INVALID_UTF, &err, &off, NULL);

		if (!re) {
			if (pcre2_get_error_message(err, (PCRE2_UCHAR *)msg, sizeof msg) < 0)
				snprintf(msg, sizeof msg, "error %d", err);
			snprintf(key, sizeof key, "answer_matches[%zu]", i);
			cfg_error_add(ctx, key,
			              "a PCRE2 pattern; escape a literal ( [ { . * + ? \\",
			              "not a valid pattern at offset %zu: %s", (size_t)off, msg);
			n++;
			continue;
		}
		x->patterns[x->n_patterns++] = re;
	}
	return n;
}

static const struct cfg_section eval_expect_section = {
    .name = "expectations",
    .size = sizeof(struct eval_expect),
    .keys = eval_expect_keys,
    .nkeys = sizeof eval_expect_keys / sizeof eval_expect_keys[0],
    .check = eval_expect_check,
    .doc = "What the run must do; every expectation is checked and reported.",
};

/* A turn's: the same keys but files (the last entry), which are checked
 * once the whole case has run. */
static const struct cfg_section eval_turn_expect_section = {
    .name = "turn expectations",
    .size = sizeof(struct eval_expect),
    .keys = eval_expect_keys,
    .nkeys = sizeof eval_expect_keys / sizeof eval_expect_keys[0] - 1,
    .check = eval_expect_check,
    .doc = "What one turn must do: its tool calls and its reply.",
};

static const struct cfg_key eval_step_keys[] = {
    {
        .name = "message",
        .type = CFG_STRING,
        .offset = offsetof(struct eval_step, message),
        .min = 1,
        .max = 1 << 20,
        .flags = CFG_REQUIRED,
        .doc = "The user's message of this turn.",
    },
    {
        .name = "expect",
        .type = CFG_SECTION,
        .offset = offsetof(struct eval_step, expect),
        .section = &eval_turn_expect_section,
        .doc = "What this turn must do (tools, answer_*).",
        .hint = "files are checked after the last turn: put them in the case's expect",
    },
};

static const struct cfg_section eval_step_section = {
    .name = "step",
    .size = sizeof(struct eval_step),
    .keys = eval_step_keys,
    .nkeys = sizeof eval_step_keys / sizeof eval_step_keys[0],
    .doc = "One turn of a conversation and what it must do.",
};

/* The keys of a case; a file's top level has the same keys, cases: among
 * them (a file of several cases), and a check of its own. */
static const struct cfg_key eval_case_keys[] = {
    {
        .name = "name",
        .type = CFG_STRING,
        .offset = offsetof(struct eval_case, name),
        .min = 1,
        .max = 128,
        .validate = eval_check_name,
        .doc = "The case's name (default for a file of one case: the file name without "
               ".yaml).",
    },
    {
        .name = "message",
        .type = CFG_STRING,
        .offset = offsetof(struct eval_case, message),
        .min = 1,
        .max = 1 << 20,
        .doc = "The user's message (or turns: for a conversation).",
    },
    {
        .name = "turns",
        .type = CFG_STRING_LIST,
        .offset = offsetof(struct eval_case, turns),
        .count_offset = offsetof(struct eval_case, n_turns),
        .min = 1,
        .max = EVAL_TURNS_MAX,
        .doc = "User messages of a conversation, each its own turn in one session; the "
               "expectations see every tool call and the last reply.",
        .hint = "a list of strings: turns: [\"first\", \"second\"]",
    },
    {
        .name = "steps",
        .type = CFG_LIST,
        .offset = offsetof(struct eval_case, steps),
        .count_offset = offsetof(struct eval_case, n_steps),
        .min = 1,
        .max = EVAL_TURNS_MAX,
        .section = &eval_step_section,
        .doc = "A conversation whose turns each have expectations: [{message, expect}]; "
               "the case's own expect sees every turn and the last reply.",
        .hint = "each entry is a mapping: - {message: \"hi\", expect: {answer_contains: "
                "[hello]}}",
    },
    {
        .name = "timeout",
        .type = CFG_DURATION,
        .offset = offsetof(struct eval_case, timeout_ms),
        .min = 0,
        .max = 86400000,
        .def = "0",
        .doc = "The whole case's time limit (0: the command's --timeout).",
    },
    {
        .name = "channel",
        .type = CFG_STRING,
        .offset = offsetof(struct eval_case, channel),
        .min = 1,
        .max = 32,
        .def = "cli",
        .validate = eval_check_channel,
        .doc = "The channel the messages come from, for the permission rules (`cli`: the "
               "operator).",
    },
    {
        .name = "sender",
        .type = CFG_STRING,
        .offset = offsetof(struct eval_case, sender),
        .min = 1,
        .max = 256,
        .doc = "The sender's id on that channel, for the permission rules.",
    },
    {
        .name = "group",
        .type = CFG_BOOL,
        .offset = offsetof(struct eval_case, group),
        .def = "false",
        .doc = "The conversation is a group or channel, not a direct message.",
    },
    {
        .name = "expect",
        .type = CFG_SECTION,
        .offset = offsetof(struct eval_case, expect),
        .section = &eval_expect_section,
        .doc = "What the run must do.",
    },
    {
        .name = "cases",
        .type = CFG_LIST,
        .offset = offsetof(struct eval_case, cases),
        .count_offset = offsetof(struct eval_case, n_cases),
        .min = 1,
        .max = EVAL_CASES_MAX,
        .section = &eval_case_section,
        .doc = "Several cases in one file (then no case keys at the top).",
        .hint = "each entry is a case: - {name: greets, message: \"hi\"}",
    },
};

/* Frees what the loader added to a case beside the schema's fields. */
static void eval_case_extra_free(struct eval_case *c)
{
	eval_expect_patterns_free(&c->expect);
	for (size_t i = 0; i < c->n_steps; i++)
		eval_expect_patterns_free(&c->steps[i].expect);
	free(c->file);
	c->file = NULL;
}

/* The checks of a case: one of message, turns and steps. */
static int eval_case_check_in(struct eval_case *c, struct cfg_error_ctx *ctx, bool top)
{
	int given = !!c->message + !!c->turns + !!c->steps;

	cfg_where(ctx, NULL, &c->line, &c->col);
	if (given > 1) {
		cfg_error_add(ctx, c->steps ? "steps" : "turns",
		              "keep message: for one turn, turns: or steps: for several",
		              "a case has one of message, turns and steps");
		return 1;
	}
	if (!given) {
		cfg_error_add(
		    ctx, NULL,
		    top ? "add message: \"...\" (or turns:, steps:, or a cases: list)"
		        : "add message: \"...\" (or turns: [\"...\", \"...\"], or steps:)",
		    "a case needs a message, turns or steps");
		return 1;
	}
	return 0;
}

static int eval_case_section_check(void *obj, struct cfg_error_ctx *ctx)
{
	struct eval_case *c = obj;
	int n = 0;

	if (c->cases) {
		cfg_error_add(ctx, "cases", "list every case at the top of the file",
		              "cases cannot nest");
		return 1;
	}
	n = eval_case_check_in(c, ctx, false);
	if (!c->name) {
		cfg_error_add(ctx, "name", "add name: a-short-name",
		              "a case in cases: needs a name");
		n++;
	}
	return n;
}

const struct cfg_section eval_case_section = {
    .name = "case",
    .size = sizeof(struct eval_case),
    .keys = eval_case_keys,
    .nkeys = sizeof eval_case_keys / sizeof eval_case_keys[0],
    .check = eval_case_section_check,
    .doc = "One golden case: a message or a conversation, and what the run must do.",
};

static int eval_file_section_check(void *obj, struct cfg_error_ctx *ctx)
{
	static const char *const case_keys[] = {"name",    "message", "turns", "steps", "timeout",
	                                        "channel", "sender",  "group", "expect"};
	struct eval_case *f = obj;
	int n = 0;

	if (!f->cases)
		return eval_case_check_in(f, ctx, true);
	for (size_t i = 0; i < sizeof case_keys / sizeof case_keys[0]; i++)
		if (cfg_where(ctx, case_keys[i], NULL, NULL)) {
			cfg_error_add(ctx, case_keys[i], "move it into one of the cases",
			              "a file with cases: has no case keys at the top");
			n++;
		}
	return n;
}

const struct cfg_section eval_file_section = {
    .name = "case file",
    .size = sizeof(struct eval_case),
    .keys = eval_case_keys,
    .nkeys = sizeof eval_case_keys / sizeof eval_case_keys[0],
    .check = eval_file_section_check,
    .doc = "A file evals/NAME.yaml: one case, or a list of them under cases:.",
};

/* ---- loading ---- */

static void eval_case_release(struct eval_case *c)
{
	eval_case_extra_free(c);
	cfg_release(&eval_case_section, c);
}

void eval_suite_free(struct eval_suite *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->n_cases; i++)
		eval_case_release(&s->cases[i]);
	free(s->cases);
	free(s);
}

static int eval_names_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool eval_case_file_name(const char *n)
{
	size_t len = strlen(n);

	if (n[0] == '.')
		return false;
	return (len > 5 && strcmp(n + len - 5, ".yaml") == 0) ||
	       (len > 4 && strcmp(n + len - 4, ".yml") == 0);
}

/* Reads evals/name beneath root (no symlinks, a regular file, bounded). */
static int eval_read(int root, const char *name, struct buf *out)
{
	char rel[BENEATH_PATH_MAX], chunk[65536];
	int fd = -1, rc;
	ssize_t n;

	if ((size_t)snprintf(rel, sizeof rel, "evals/%s", name) >= sizeof rel)
		return SB_ERR_TOOBIG;
	rc = beneath_open(root, rel, O_RDONLY, 0, BENEATH_REGULAR, &fd);
	if (rc)
		return rc;
	while ((n = read(fd, chunk, sizeof chunk)) != 0) {
		if (n < 0) {
			if (errno == EINTR)
				continue;
			rc = SB_ERR_IO;
			break;
		}
		rc = buf_append(out, chunk, (size_t)n);
		if (rc)
			break;
	}
	close(fd);
	return rc;
}

static void eval_file_error(struct cfg_errors *errs, const char *file, const char *hint,
                            const char *msg)
{
	struct cfg_error *v;

	if (errs->n == errs->cap) {
		size_t cap = errs->cap ? errs->cap * 2 : 8;

		v = realloc(errs->v, cap * sizeof *v);
		if (!v)
			return;
		errs->v = v;
		errs->cap = cap;
	}
	v = &errs->v[errs->n];
	memset(v, 0, sizeof *v);
	v->file = strdup(file);
	v->msg = strdup(msg);
	v->hint = hint ? strdup(hint) : NULL;
	if (!v->file || !v->msg || (hint && !v->hint)) {
		free(v->file);
		free(v->msg);
		free(v->hint);
		return;
	}
	errs->n++;
}

/* Moves the case in (filled by the schema) into the suite. */
static int eval_suite_add(struct eval_suite *s, struct eval_case *in, const char *file,
                          const char *stem)
{
	struct eval_case *c = &s->cases[s->n_cases];

	if (!in->name && !(in->name = strdup(stem)))
		return SB_ERR_NOMEM;
	if (!(in->file = strdup(file)))
		return SB_ERR_NOMEM;
	*c = *in;
	memset(in, 0, sizeof *in);
	s->n_cases++;
	return SB_OK;
}

int eval_suite_new(struct eval_suite **out)
{
	struct eval_suite *s = calloc(1, sizeof *s);

	*out = NULL;
	if (!s || !(s->cases = calloc(EVAL_CASES_MAX, sizeof *s->cases))) {
		free(s);
		return SB_ERR_NOMEM;
	}
	*out = s;
	return SB_OK;
}

int eval_suite_add_text(struct eval_suite *s, const char *text, size_t len, const char *file,
                        const char *stem, struct cfg_errors *errs)
{
	struct eval_case in;
	struct cfg_doc *doc = NULL;
	const char *stem_field = stem; /* as the schema's validator takes a field */
	int rc, arc;

	memset(&in, 0, sizeof in);
	rc = cfg_doc_parse_literal(text, len, file, &doc, errs);
	if (rc == SB_ERR_NOMEM || !doc)
		goto out;
	arc = cfg_apply(doc, &eval_file_section, &in, errs);
	if (rc == SB_OK || arc == SB_ERR_NOMEM)
		rc = arc;
	if (rc)
		goto out;
	if (in.cases) {
		for (size_t i = 0; i < in.n_cases && rc == SB_OK; i++) {
			if (s->n_cases == EVAL_CASES_MAX) {
				rc = SB_ERR_CONFIG;
				eval_file_error(errs, file, "keep at most 1000 cases in evals/",
				                "too many cases");
				break;
			}
			rc = eval_suite_add(s, &in.cases[i], file, stem);
		}
	} else if (s->n_cases == EVAL_CASES_MAX) {
		rc = SB_ERR_CONFIG;
		eval_file_error(errs, file, "keep at most 1000 cases in evals/", "too many cases");
	} else if (!in.name && eval_check_name(&stem_field)) {
		rc = SB_ERR_CONFIG;
		eval_file_error(errs, file, "rename the file, or give the case a name:",
		                "the file name is not a valid case name");
	} else {
		rc = eval_suite_add(s, &in, file, stem);
	}
out:
	for (size_t i = 0; i < in.n_cases; i++)
		eval_case_extra_free(&in.cases[i]);
	eval_case_extra_free(&in);
	cfg_release(&eval_file_section, &in);
	cfg_doc_free(doc);
	return rc;
}

/* Loads one file's cases into s; errors go to errs. */
static int eval_load_file(struct eval_suite *s, int root, const char *name, const char *shown,
                          struct cfg_errors *errs)
{
	char file[BENEATH_PATH_MAX + 64], stem[256];
	struct buf text;
	size_t dot = strrchr(name, '.') - name;
	int rc;

	buf_init(&text, EVAL_FILE_MAX);
	if (strcmp(shown, ".") == 0)
		snprintf(file, sizeof file, "evals/%s", name);
	else
		snprintf(file, sizeof file, "%s%sevals/%s", shown,
		         shown[strlen(shown) - 1] == '/' ? "" : "/", name);
	snprintf(stem, sizeof stem, "%.*s", (int)(dot < sizeof stem ? dot : sizeof stem - 1), name);
	rc = eval_read(root, name, &text);
	if (rc) {
		eval_file_error(errs, file,
		                rc == SB_ERR_TOOBIG ? "split it into several files of at most 1 MiB"
		                : rc == SB_ERR_PERM ? "make it a regular file, not a symbolic link"
		                                    : NULL,
		                rc == SB_ERR_TOOBIG ? "larger than 1 MiB"
		                : rc == SB_ERR_PERM ? "not a regular file inside the workspace"
		                                    : "cannot be read");
		rc = rc == SB_ERR_NOMEM ? rc : SB_ERR_CONFIG;
	} else {
		rc = eval_suite_add_text(s, text.data ? text.data : "", text.len, file, stem, errs);
	}
	buf_free(&text);
	return rc;
}

int eval_suite_load(const char *dir, const char *shown, struct eval_suite **out,
                    struct cfg_errors *errs)
{
	struct eval_suite *s = NULL;
	char **names = NULL, msg[BENEATH_PATH_MAX + 64];
	size_t n_names = 0;
	struct dirent *de;
	DIR *d = NULL;
	int root = -1, rc, frc;
	bool failed = false;

	*out = NULL;
	snprintf(msg, sizeof msg, "%s%sevals", strcmp(shown, ".") == 0 ? "" : shown,
	         strcmp(shown, ".") == 0 ? "" : (shown[strlen(shown) - 1] == '/' ? "" : "/"));
	rc = beneath_root(dir, &root);
	if (rc == SB_OK)
		rc = beneath_opendir(root, "evals", &d);
	if (rc) {
		eval_file_error(
		    errs, msg,
		    rc == SB_ERR_NOTFOUND
		        ? "create evals/ in the workspace with a case file such as "
		          "evals/greets.yaml (docs/eval.md)"
		        : "make evals/ a directory of the workspace, not a symbolic link",
		    rc == SB_ERR_NOTFOUND ? "no such directory" : "not a directory");
		rc = rc == SB_ERR_NOTFOUND ? SB_ERR_NOTFOUND : SB_ERR_CONFIG;
		goto out;
	}
	rc = eval_suite_new(&s);
	if (rc)
		goto out;
	rc = SB_ERR_NOMEM;
	if (!(names = calloc(EVAL_FILES_MAX, sizeof *names)))
		goto out;
	while ((de = readdir(d))) {
		if (!eval_case_file_name(de->d_name))
			continue;
		if (n_names == EVAL_FILES_MAX) {
			eval_file_error(errs, msg, "keep at most 1000 case files",
			                "too many files");
			rc = SB_ERR_CONFIG;
			goto out;
		}
		if (!(names[n_names] = strdup(de->d_name)))
			goto out;
		n_names++;
	}
	qsort(names, n_names, sizeof *names, eval_names_cmp);
	for (size_t i = 0; i < n_names; i++) {
		frc = eval_load_file(s, root, names[i], shown, errs);
		if (frc == SB_ERR_NOMEM)
			goto out;
		if (frc)
			failed = true;
	}
	/* Names are how --case, the table and JUnit tell cases apart. */
	for (size_t i = 0; i < s->n_cases; i++)
		for (size_t j = 0; j < i; j++)
			if (strcmp(s->cases[i].name, s->cases[j].name) == 0) {
				struct buf m;

				buf_init(&m, 3 * BENEATH_PATH_MAX);
				buf_printf(&m, "case \"%s\" is defined twice (first at %s:%d)",
				           s->cases[i].name, s->cases[j].file, s->cases[j].line);
				eval_file_error(errs, s->cases[i].file,
				                "give each case its own name",
				                m.data ? m.data : "duplicate case name");
				buf_free(&m);
				if (errs->n) {
					errs->v[errs->n - 1].line = s->cases[i].line;
					errs->v[errs->n - 1].col = s->cases[i].col;
				}
				failed = true;
				break;
			}
	if (failed) {
		rc = SB_ERR_CONFIG;
		goto out;
	}
	*out = s;
	s = NULL;
	rc = SB_OK;
out:
	for (size_t i = 0; i < n_names; i++)
		free(names[i]);
	free(names);
	if (d)
		closedir(d);
	if (root >= 0)
		close(root);
	eval_suite_free(s);
	return rc;
}

/* ---- checking ---- */

/* The length of the well-formed UTF-8 sequence at p (at most left bytes),
 * or 0: overlong forms, surrogates and code points past U+10FFFF are not. */
static size_t eval_utf8_seq(const unsigned char *p, size_t left)
{
	size_t n;
	uint32_t cp;

	if (p[0] < 0x80)
		return 1;
	if (p[0] >= 0xC2 && p[0] <= 0xDF)
		n = 2, cp = p[0] & 0x1F;
	else if (p[0] >= 0xE0 && p[0] <= 0xEF)
		n = 3, cp = p[0] & 0x0F;
	else if (p[0] >= 0xF0 && p[0] <= 0xF4)
		n = 4, cp = p[0] & 0x07;
	else
		return 0;
	if (n > left)
		return 0;
	for (size_t i = 1; i < n; i++) {
		if ((p[i] & 0xC0) != 0x80)
			return 0;
		cp = (cp << 6) | (p[i] & 0x3F);
	}
	if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10FFFF ||
	    (cp >= 0xD800 && cp <= 0xDFFF))
		return 0;
	return n;
}

json_t *eval_utf8_string(const char *s, size_t len)
{
	const unsigned char *p = (const unsigned char *)s;
	struct buf b;
	json_t *j;

	buf_init(&b, len * 3 + 1);
	for (size_t i = 0; i < len;) {
		size_t n = eval_utf8_seq(p + i, len - i);

		if (n == 1 && p[i] == 0) {
			buf_puts(&b, "\xEF\xBF\xBD");
			i++;
		} else if (n) {
			buf_append(&b, p + i, n);
			i += n;
		} else {
			buf_puts(&b, "\xEF\xBF\xBD");
			i++;
		}
	}
	j = json_stringn(b.data ? b.data : "", b.len);
	buf_free(&b);
	return j;
}

/* s, at most EVAL_SEEN_MAX bytes of it (cut at a UTF-8 boundary), quoted
 * into b as JSON would. */
static void eval_quote(struct buf *b, const char *s)
{
	size_t n = strlen(s), cut = n;
	json_t *j;
	char *q;

	if (cut > EVAL_SEEN_MAX) {
		cut = EVAL_SEEN_MAX;
		while (cut && ((unsigned char)s[cut] & 0xC0) == 0x80)
			cut--;
	}
	j = eval_utf8_string(s, cut);
	q = j ? json_dumps(j, JSON_ENCODE_ANY) : NULL;
	buf_puts(b, q ? q : "\"\"");
	if (cut < n)
		buf_printf(b, " (%zu more bytes)", n - cut);
	free(q);
	json_decref(j);
}

static int eval_fail(json_t *failures, const char *expectation, const char *seen)
{
	json_t *f = json_pack("{ss ss}", "expectation", expectation, "seen", seen);

	if (!f || json_array_append_new(failures, f))
		return -1;
	return 1;
}

static bool eval_json_holds(const json_t *v, const char *needle)
{
	const char *k;
	json_t *x;
	size_t i;

	switch (json_typeof(v)) {
	case JSON_STRING:
		return strstr(json_string_value(v), needle) != NULL;
	case JSON_OBJECT:
		json_object_foreach((json_t *)v, k, x)
		{
			if (eval_json_holds(x, needle))
				return true;
		}
		return false;
	case JSON_ARRAY:
		json_array_foreach(v, i, x)
		{
			if (eval_json_holds(x, needle))
				return true;
		}
		return false;
	default:
		return false;
	}
}

static bool eval_input_holds(const json_t *input, const char *needle)
{
	char *dump;
	bool yes;

	if (!input)
		return false;
	if (eval_json_holds(input, needle))
		return true;
	dump = json_dumps(input, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
	yes = dump && strstr(dump, needle);
	free(dump);
	return yes;
}

/* The calls of the run, for a failure: "ls {}, write {...}" (bounded). */
/* Whether call k is in the scope of a check: every turn (turn < 0) or one. */
static bool eval_in_turn(const struct eval_observed *o, size_t k, long turn)
{
	return turn < 0 || o->calls[k].turn == (size_t)turn;
}

/* The calls in scope, for a failure: "ls {}, write {...}" (bounded). */
static void eval_calls_seen(struct buf *b, const struct eval_observed *o, long turn)
{
	size_t start = b->len, shown = 0, all = 0;

	for (size_t i = 0; i < o->n_calls; i++)
		all += eval_in_turn(o, i, turn);
	if (!all) {
		buf_puts(b, "no tool calls");
		return;
	}
	buf_puts(b, "calls: ");
	for (size_t i = 0; i < o->n_calls; i++) {
		char *in;

		if (!eval_in_turn(o, i, turn))
			continue;
		if (b->len - start > EVAL_SEEN_MAX) {
			buf_printf(b, ", ... (%zu in all)", all);
			break;
		}
		in = o->calls[i].input ? json_dumps(o->calls[i].input,
		                                    JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY)
		                       : NULL;
		buf_printf(b, "%s%s %.120s%s%s", shown++ ? ", " : "", o->calls[i].name,
		           in ? in : "{}", in && strlen(in) > 120 ? "..." : "",
		           o->calls[i].is_error ? " (failed)" : "");
		free(in);
	}
}

static int eval_check_tools(const struct eval_expect *x, const struct eval_observed *o, long turn,
                            json_t *failures)
{
	int failed = 0;

	for (size_t i = 0; i < x->n_tools; i++) {
		const struct eval_tool_expect *t = &x->tools[i];
		struct buf what, seen;
		int64_t n = 0;
		bool ok;

		for (size_t k = 0; k < o->n_calls; k++)
			if (eval_in_turn(o, k, turn) && strcmp(o->calls[k].name, t->name) == 0 &&
			    (!t->input_contains ||
			     eval_input_holds(o->calls[k].input, t->input_contains)) &&
			    (!t->failed_given || o->calls[k].is_error == t->failed))
				n++;
		ok = t->count_given ? n == t->count : n > 0;
		if (ok)
			continue;
		buf_init(&what, 8192);
		buf_init(&seen, 8192);
		if (t->count_given && t->count == 0)
			buf_printf(&what, "tool %s never called", t->name);
		else if (t->count_given)
			buf_printf(&what, "tool %s called %lld time%s", t->name,
			           (long long)t->count, t->count == 1 ? "" : "s");
		else
			buf_printf(&what, "tool %s called", t->name);
		if (t->input_contains) {
			buf_puts(&what, " with input containing ");
			eval_quote(&what, t->input_contains);
		}
		if (t->failed_given)
			buf_puts(&what, t->failed ? ", failing" : ", succeeding");
		buf_printf(&seen, "%lld matching call%s; ", (long long)n, n == 1 ? "" : "s");
		eval_calls_seen(&seen, o, turn);
		failed++;
		if (eval_fail(failures, what.data ? what.data : "", seen.data ? seen.data : "") < 0)
			failed = -1;
		buf_free(&what);
		buf_free(&seen);
		if (failed < 0)
			return -1;
	}
	return failed;
}

/* Adds one failure "<label> <quoted needle>", seen "<seen_label> <quoted text>". */
static int eval_fail_quoted(json_t *failures, const char *label, const char *needle,
                            const char *seen_label, const char *text)
{
	struct buf what, seen;
	int r;

	buf_init(&what, 8192);
	buf_init(&seen, 8192);
	buf_puts(&what, label);
	eval_quote(&what, needle);
	buf_puts(&seen, seen_label);
	eval_quote(&seen, text);
	r = eval_fail(failures, what.data ? what.data : "", seen.data ? seen.data : "");
	buf_free(&what);
	buf_free(&seen);
	return r;
}

static int eval_check_answer(const struct eval_expect *x, const char *answer, json_t *failures)
{
	pcre2_match_context *mctx = NULL;
	pcre2_match_data *md = NULL;
	int failed = 0, r;

	for (size_t i = 0; i < x->n_answer_contains; i++)
		if (!strstr(answer, x->answer_contains[i])) {
			r = eval_fail_quoted(failures, "answer contains ", x->answer_contains[i],
			                     "answer: ", answer);
			if (r < 0)
				return -1;
			failed++;
		}
	for (size_t i = 0; i < x->n_answer_not_contains; i++)
		if (strstr(answer, x->answer_not_contains[i])) {
			r = eval_fail_quoted(failures, "answer does not contain ",
			                     x->answer_not_contains[i], "answer: ", answer);
			if (r < 0)
				return -1;
			failed++;
		}
	if (!x->n_patterns)
		return failed;
	mctx = pcre2_match_context_create(NULL);
	md = pcre2_match_data_create(1, NULL);
	if (!mctx || !md) {
		failed = -1;
		goto out;
	}
	pcre2_set_match_limit(mctx, EVAL_MATCH_LIMIT);
	pcre2_set_depth_limit(mctx, EVAL_DEPTH_LIMIT);
	pcre2_set_heap_limit(mctx, 20000); /* KiB */
	for (size_t i = 0; i < x->n_patterns; i++) {
		int m =
		    pcre2_match(x->patterns[i], (PCRE2_SPTR)answer, strlen(answer), 0, 0, md, mctx);
		char why[256], label[300];

		if (m >= 0)
			continue;
		if (m == PCRE2_ERROR_NOMATCH) {
			r = eval_fail_quoted(failures, "answer matches ", x->answer_matches[i],
			                     "answer: ", answer);
		} else {
			if (pcre2_get_error_message(m, (PCRE2_UCHAR *)why, sizeof why) < 0)
				snprintf(why, sizeof why, "error %d", m);
			snprintf(label, sizeof label, "matching gave up (%s); answer: ", why);
			r = eval_fail_quoted(failures, "answer matches ", x->answer_matches[i],
			                     label, answer);
		}
		if (r < 0) {
			failed = -1;
			goto out;
		}
		failed++;
	}
out:
	pcre2_match_data_free(md);
	pcre2_match_context_free(mctx);
	return failed;
}

/* Reads path beneath the workspace into b: SB_OK, or the beneath codes,
 * SB_ERR_TOOBIG past EVAL_CHECK_FILE_MAX. */
static int eval_read_beneath(int root, const char *path, struct buf *b)
{
	char chunk[65536];
	int fd = -1, rc;
	ssize_t n;

	rc = beneath_open(root, path, O_RDONLY, 0, BENEATH_REGULAR, &fd);
	if (rc)
		return rc;
	while ((n = read(fd, chunk, sizeof chunk)) != 0) {
		if (n < 0) {
			if (errno == EINTR)
				continue;
			rc = SB_ERR_IO;
			break;
		}
		rc = buf_append(b, chunk, (size_t)n);
		if (rc)
			break;
	}
	close(fd);
	return rc;
}

static int eval_check_files(const struct eval_expect *x, const struct eval_observed *o,
                            json_t *failures)
{
	int failed = 0;

	for (size_t i = 0; i < x->n_files; i++) {
		const struct eval_file_expect *f = &x->files[i];
		char what[BENEATH_PATH_MAX + 64], label[BENEATH_PATH_MAX + 64];
		struct stat st;
		struct buf text;
		int rc, r = 0;

		if (!f->exists) {
			rc = beneath_stat(o->workspace_fd, f->path, &st);
			if (rc == SB_ERR_NOTFOUND)
				continue;
			snprintf(what, sizeof what, "file %s does not exist", f->path);
			r = eval_fail(failures, what,
			              rc == SB_OK
			                  ? (S_ISLNK(st.st_mode)   ? "a symbolic link is there"
			                     : S_ISDIR(st.st_mode) ? "a directory is there"
			                                           : "it exists")
			                  : "a path that cannot be resolved inside the workspace");
			if (r < 0)
				return -1;
			failed++;
			continue;
		}
		buf_init(&text, EVAL_CHECK_FILE_MAX);
		rc = eval_read_beneath(o->workspace_fd, f->path, &text);
		if (rc) {
			snprintf(what, sizeof what, "file %s exists", f->path);
			r = eval_fail(failures, what,
			              rc == SB_ERR_NOTFOUND ? "no such file"
			              : rc == SB_ERR_PERM
			                  ? "not a regular file inside the workspace (a symbolic "
			                    "link, a directory or a special file): not read"
			              : rc == SB_ERR_TOOBIG ? "larger than 16 MiB: not checked"
			                                    : "cannot be read");
			buf_free(&text);
			if (r < 0)
				return -1;
			failed++;
			continue;
		}
		snprintf(label, sizeof label, "%s holds: ", f->path);
		for (size_t k = 0; k < f->n_contains && r >= 0; k++)
			if (!text.data ||
			    !memmem(text.data, text.len, f->contains[k], strlen(f->contains[k]))) {
				snprintf(what, sizeof what, "file %s contains ", f->path);
				r = eval_fail_quoted(failures, what, f->contains[k], label,
				                     text.data ? text.data : "");
				failed++;
			}
		for (size_t k = 0; k < f->n_not_contains && r >= 0; k++)
			if (text.data && *f->not_contains[k] &&
			    memmem(text.data, text.len, f->not_contains[k],
			           strlen(f->not_contains[k]))) {
				snprintf(what, sizeof what, "file %s does not contain ", f->path);
				r = eval_fail_quoted(failures, what, f->not_contains[k], label,
				                     text.data);
				failed++;
			}
		buf_free(&text);
		if (r < 0)
			return -1;
	}
	return failed;
}

/* Puts "turn N: " before the expectations failures holds from index from. */
static int eval_prefix_turn(json_t *failures, size_t from, size_t turn)
{
	for (size_t i = from; i < json_array_size(failures); i++) {
		json_t *f = json_array_get(failures, i);
		char *what = NULL;
		const char *old = json_string_value(json_object_get(f, "expectation"));
		struct buf b;

		buf_init(&b, 16384);
		buf_printf(&b, "turn %zu: %s", turn + 1, old ? old : "");
		what = b.data ? buf_steal(&b) : NULL;
		buf_free(&b);
		if (!what || json_object_set_new(f, "expectation", json_string(what))) {
			free(what);
			return -1;
		}
		free(what);
	}
	return 0;
}

int eval_case_check(const struct eval_case *c, const struct eval_observed *o, json_t *failures)
{
	int n = 0, r;

	for (size_t i = 0; i < c->n_steps; i++) {
		size_t before = json_array_size(failures);
		const char *reply =
		    o->replies && i < o->n_replies && o->replies[i] ? o->replies[i] : "";

		r = eval_check_tools(&c->steps[i].expect, o, (long)i, failures);
		if (r < 0)
			return -1;
		n += r;
		r = eval_check_answer(&c->steps[i].expect, reply, failures);
		if (r < 0 || eval_prefix_turn(failures, before, i) < 0)
			return -1;
		n += r;
	}
	r = eval_check_tools(&c->expect, o, -1, failures);
	if (r < 0)
		return -1;
	n += r;
	r = eval_check_answer(&c->expect, o->answer ? o->answer : "", failures);
	if (r < 0)
		return -1;
	n += r;
	r = eval_check_files(&c->expect, o, failures);
	if (r < 0)
		return -1;
	return n + r;
}
