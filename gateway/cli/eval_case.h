/*
 * eval_case.h - the golden cases of `switchboard eval` (docs/eval.md): the
 * files evals/NAME.yaml of a workspace, and the check of one run against a
 * case's expectations.
 *
 * A file holds one case (its keys at the top; the name defaults to the file
 * name without .yaml) or a list of them under `cases:`. The keys are checked
 * by the same schema walker as the configuration (gateway/core/cfg.h), so
 * every problem comes back as file:line:col: key: what is wrong (hint: the
 * fix). Patterns (answer_matches) are PCRE2, compiled at load time, matched
 * with bounded match and depth limits.
 *
 * Blocking (reads files): the CLI only, never a loop that serves.
 */
#ifndef SB_CLI_EVAL_CASE_H
#define SB_CLI_EVAL_CASE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gateway/core/cfg.h"

#define EVAL_FILES_MAX 1000                    /* case files in evals/ */
#define EVAL_FILE_MAX ((size_t)1 << 20)        /* bytes of one case file */
#define EVAL_CASES_MAX 1000                    /* cases over all files */
#define EVAL_TURNS_MAX 50                      /* user turns of one case */
#define EVAL_CHECK_FILE_MAX ((size_t)16 << 20) /* a file an expectation reads */
#define EVAL_MATCH_LIMIT 1000000               /* PCRE2 match limit of one pattern */
#define EVAL_DEPTH_LIMIT 10000                 /* PCRE2 backtracking depth limit */

struct eval_tool_expect {
	char *name;           /* the tool's name */
	int64_t count;        /* calls that fit (see count_given) */
	bool count_given;     /* exactly count calls; else at least one */
	char *input_contains; /* only calls whose input holds this text count; may be NULL */
	bool failed;          /* only calls that failed (true) or succeeded (false) count ... */
	bool failed_given;    /* ... when given */
};

struct eval_file_expect {
	char *path; /* relative to the workspace, never above it */
	bool exists;
	char **contains;
	size_t n_contains;
	char **not_contains;
	size_t n_not_contains;
};

struct eval_expect {
	struct eval_tool_expect *tools;
	size_t n_tools;
	char **answer_contains;
	size_t n_answer_contains;
	char **answer_not_contains;
	size_t n_answer_not_contains;
	char **answer_matches;
	size_t n_answer_matches;
	struct eval_file_expect *files; /* a case's only, checked after its last turn */
	size_t n_files;
	/* Filled by the loader: pcre2_code * per answer_matches. */
	void **patterns;
	size_t n_patterns;
};

/* One turn of a conversation with what that turn must do. */
struct eval_step {
	char *message;
	struct eval_expect expect; /* tools and answer_*: that turn's calls and reply */
};

struct eval_case {
	char *name;
	char *message; /* one user message, or ... */
	char **turns;  /* ... several, one turn each, in one session, or ... */
	size_t n_turns;
	struct eval_step *steps; /* ... several, each with expectations of its own */
	size_t n_steps;
	int64_t timeout_ms; /* the whole case; 0: the command's --timeout */
	char *channel;      /* for the permission rules; "cli" (the operator) by default */
	char *sender;       /* may be NULL */
	bool group;
	struct eval_expect expect;
	/* Only while a file's top level loads: its cases: list. */
	struct eval_case *cases;
	size_t n_cases;
	/* Filled by the loader. */
	int line, col; /* where the case starts in its file */
	char *file;    /* as messages show it: "<workspace>/evals/x.yaml" */
};

struct eval_suite {
	struct eval_case *cases; /* files in name order, cases in file order */
	size_t n_cases;
};

/* Loads every evals/NAME.yaml (and .yml) of the workspace at dir; shown is how
 * messages name dir ("." or the path as the operator gave it). Files are
 * opened beneath dir without following symbolic links; hidden files are
 * skipped. On SB_OK *out is the suite (free with eval_suite_free; it may
 * have no cases when evals/ holds no case file). SB_ERR_CONFIG: errs lists
 * every problem of every file; SB_ERR_NOTFOUND: dir has no evals/ (in
 * errs); SB_ERR_NOMEM. */
int eval_suite_load(const char *dir, const char *shown, struct eval_suite **out,
                    struct cfg_errors *errs);
void eval_suite_free(struct eval_suite *s); /* NULL is a no-op */

/* An empty suite (SB_OK or SB_ERR_NOMEM), and the cases of one case file's
 * text added to it as eval_suite_load adds each file's: file names it in
 * messages, stem is the name of a case that has none. SB_OK;
 * SB_ERR_CONFIG (errs says why; cases before the problem may have been
 * added); SB_ERR_NOMEM. Names are not checked for duplicates here. */
int eval_suite_new(struct eval_suite **out);
int eval_suite_add_text(struct eval_suite *s, const char *text, size_t len, const char *file,
                        const char *stem, struct cfg_errors *errs);

/* One tool call of a run, as the check sees it. */
struct eval_tool_call {
	const char *name;
	const json_t *input; /* borrowed */
	bool is_error;
	size_t turn; /* 0-based */
};

/* What a run of a case produced. */
struct eval_observed {
	const char *answer;         /* the reply of the last turn ("" when none) */
	const char *const *replies; /* each turn's reply (steps:); may be NULL */
	size_t n_replies;
	const struct eval_tool_call *calls;
	size_t n_calls;
	int workspace_fd; /* the run's workspace (a directory fd) */
};

/* Checks o against the case's expectations and appends one object to
 * failures (a JSON array, borrowed) per expectation that does not hold:
 * {"expectation": what was expected, "seen": what the run did instead}.
 * Returns how many failed, or -1 when out of memory. Blocking (reads the
 * files named by expectations, beneath workspace_fd, no symbolic links). */
int eval_case_check(const struct eval_case *c, const struct eval_observed *o, json_t *failures);

/* len bytes of s as a JSON string (new reference; NULL on no memory), each
 * byte that is not part of well-formed UTF-8, and each NUL, replaced by
 * U+FFFD: what a run produced may be anything. Any thread. */
json_t *eval_utf8_string(const char *s, size_t len);

/* The schema of one case and of a case file (a case, or cases: of them). */
extern const struct cfg_section eval_case_section;
extern const struct cfg_section eval_file_section;

#endif
