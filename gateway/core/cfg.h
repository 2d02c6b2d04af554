/*
 * cfg.h - declarative configuration schemas and the one walker that applies
 * them.
 *
 * Each module declares the keys it reads as a static const table of struct
 * cfg_key (name, type, where the value lands in the module's struct, bounds,
 * default, validator, documentation). The walker (cfg_apply) checks a parsed
 * YAML document against those tables, fills the structs, and reports every
 * error it finds with file:line:col, the key path, what was expected and a
 * hint. The same tables generate docs/configuration.md, so the reference can
 * never drift from the code.
 *
 * Strings and arrays that the walker stores belong to the struct; cfg_release
 * frees them by walking the same table.
 */
#ifndef SB_CORE_CFG_H
#define SB_CORE_CFG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum cfg_type {
	CFG_STRING,      /* char *; min/max bound the length */
	CFG_INT,         /* int64_t; min/max bound the value */
	CFG_BOOL,        /* bool */
	CFG_DURATION,    /* int64_t milliseconds; "250ms", "30s", "5m", "2h", "1d" */
	CFG_SIZE,        /* int64_t bytes; "512", "64KiB", "10MiB" */
	CFG_ENUM,        /* int: index into choices */
	CFG_SECTION,     /* a nested mapping stored inline at offset */
	CFG_LIST,        /* a sequence of sections: T * at offset, size_t at count_offset */
	CFG_STRING_LIST, /* a sequence of strings: char ** at offset, size_t at count_offset */
};

enum cfg_flags {
	CFG_REQUIRED = 1u << 0, /* must be present (no default) */
	CFG_SECRET = 1u << 1,   /* value is redacted in logs and config.get */
	CFG_RESTART = 1u << 2,  /* a change takes effect only after a restart */
};

struct cfg_section;
struct cfg_error_ctx;

struct cfg_key {
	const char *name;
	enum cfg_type type;
	size_t offset;
	size_t count_offset;               /* CFG_LIST, CFG_STRING_LIST */
	int64_t min, max;                  /* 0,0 = unbounded; lists: element count */
	const char *def;                   /* default as YAML scalar text; NULL = none */
	const char *const *choices;        /* CFG_ENUM, NULL-terminated */
	const struct cfg_section *section; /* CFG_SECTION, CFG_LIST */
	unsigned flags;
	/* Optional: check the converted value (points at the field). Return
	 * NULL when it is fine, or a static message saying what is wrong. */
	const char *(*validate)(const void *field);
	const char *doc;
	const char *hint; /* shown after an error on this key */
};

struct cfg_section {
	const char *name;
	size_t size; /* sizeof the struct: CFG_LIST elements, cfg_check_schema */
	const struct cfg_key *keys;
	size_t nkeys;
	/* Optional cross-key check after all keys are applied; adds errors
	 * with cfg_error_add and returns the number added. */
	int (*check)(void *obj, struct cfg_error_ctx *ctx);
	const char *doc;
};

struct cfg_error {
	char *file;
	int line, col; /* 1-based; 0 when unknown */
	char *path;    /* key path, e.g. "gateway.port" or "agents[1].id" */
	char *msg;
	char *hint; /* may be NULL */
};

struct cfg_errors {
	struct cfg_error *v;
	size_t n, cap;
};

/* The error list. init/free: free(NULL-initialised) is a no-op; free
 * releases every string and leaves the list empty. Any thread, one owner. */
void cfg_errors_init(struct cfg_errors *e);
void cfg_errors_free(struct cfg_errors *e);

/* Prints one line per error:
 *	FILE:LINE:COL: PATH: MESSAGE (hint: HINT)
 * "LINE:COL: " is left out when the position is unknown (line 0), "PATH: "
 * when the error is not about one key (a YAML syntax error), and
 * " (hint: HINT)" when there is no hint. Example:
 *	switchboard.yaml:3:3: gateway.prot: unknown key (hint: did you mean "port"?) */
void cfg_errors_print(const struct cfg_errors *e, FILE *out);

/* Adds an error from a section check. key is a path relative to the section
 * ("bind", "agents[2].id", or NULL/"" for the section itself); the error
 * carries the full key path and the position of that value in the document
 * if it is there, else of the nearest enclosing node that is. hint may be
 * NULL. Both strings are copied. */
void cfg_error_add(struct cfg_error_ctx *ctx, const char *key, const char *hint, const char *fmt,
                   ...) __attribute__((format(printf, 4, 5)));

/* For a section check: where the value at key (a path relative to the
 * section, as for cfg_error_add; NULL or "" for the section itself) is in
 * the document. Returns true when the document holds that exact value, and
 * false when it is absent, null, or its section is absent. *line and *col (either may be
 * NULL) receive the 1-based position of the value, or, when it is absent,
 * of the nearest enclosing node in the document (0 when none is known).
 * A check uses it to tell "given" from "left at its default" and to record
 * where a list entry is, for messages shown after loading. */
bool cfg_where(const struct cfg_error_ctx *ctx, const char *key, int *line, int *col);

/* A parsed YAML document with positions (opaque). */
struct cfg_doc;

/* Parses YAML text into a tree that keeps the 1-based line and column of
 * every node. file names the source in errors (copied); base_dir resolves
 * relative ${file:...} paths (copied; NULL = the working directory).
 *
 * Interpolation, in every value scalar (not in keys), plain or quoted:
 *	${NAME}       the environment variable NAME; unset is an error
 *	${file:PATH}  the contents of PATH, trailing newlines stripped; the file
 *	              must exist, be a regular file of at most 64 KiB and not be
 *	              readable by group or others (hint: chmod 600 PATH)
 *	$${           a literal "${"
 * Error messages never show the interpolated text of a value, only the text
 * as written ("${NAME}").
 *
 * Anchors (&a) and aliases (*a) are rejected with an error (a config file
 * has no need for them, and aliases make "billion laughs" documents cheap);
 * so is a second document ("---") and nesting deeper than 64 levels. Tags
 * (!!str) are ignored: every scalar is text, converted by its key's type.
 * Plain "", "~" and "null" are null: cfg_apply treats a null value as
 * absent (the default applies; a required key reports it has no value).
 *
 * Returns SB_OK; SB_ERR_CONFIG with errs filled; or SB_ERR_NOMEM. On a YAML
 * syntax error *out is NULL. When the YAML is well formed but a value failed
 * (unset variable, bad secret file, anchor), *out still holds the document
 * so that cfg_apply can report the remaining problems; the failed values are
 * skipped there. Free *out with cfg_doc_free in every case. Any thread. */
int cfg_doc_parse(const char *text, size_t len, const char *file, const char *base_dir,
                  struct cfg_doc **out, struct cfg_errors *errs);
/* The same for a file that is data, not configuration (the golden cases of
 * `switchboard eval`, which may come from anyone who opens a pull request):
 * every value is taken as written, "${" included; nothing is read from the
 * environment or from files. */
int cfg_doc_parse_literal(const char *text, size_t len, const char *file, struct cfg_doc **out,
                          struct cfg_errors *errs);
void cfg_doc_free(struct cfg_doc *doc); /* NULL is a no-op */

/* The files the document's ${file:...} references opened (absolute when
 * base_dir is), borrowed from doc; returns how many. */
size_t cfg_doc_secret_files(const struct cfg_doc *doc, const char *const **out);

/* Applies the document's top-level mapping to obj using section, filling
 * defaults and collecting every error (unknown and duplicate keys, wrong
 * types, bounds, enum choices, missing required keys, validators, section
 * checks). Keys are strict: bool is true/false only; ints, durations and
 * sizes are read from the scalar text whether quoted or not. Errors are
 * appended to errs, which is then sorted by position (stable). Returns
 * SB_OK, SB_ERR_CONFIG (errs holds why) or SB_ERR_NOMEM. obj must be zeroed;
 * release it with cfg_release either way. */
int cfg_apply(const struct cfg_doc *doc, const struct cfg_section *section, void *obj,
              struct cfg_errors *errs);

/* Frees what cfg_apply stored in obj (not obj itself) and zeroes those
 * fields, so a second call is harmless. NULL obj is a no-op. */
void cfg_release(const struct cfg_section *section, void *obj);

/* Calls fn for each value of a CFG_SECRET key in obj (non-empty strings).
 * The value is borrowed for the duration of the call. */
void cfg_each_secret(const struct cfg_section *section, const void *obj,
                     void (*fn)(void *ud, const char *value), void *ud);

/* Compares two objects of one section and calls fn (may be NULL) with the
 * key path of each CFG_RESTART value that differs ("gateway.port"). List
 * entries are compared by position ("agents[0].x"); a CFG_RESTART section
 * or list is reported once as a whole. The path is borrowed for the call.
 * Returns how many differ. */
int cfg_restart_changes(const struct cfg_section *section, const void *a, const void *b,
                        void (*fn)(void *ud, const char *path), void *ud);

/* Writes a markdown reference of section (a table per section: every key's
 * path, type, default, allowed values, restart/secret flags and doc) to
 * out. The output depends only on the tables. */
void cfg_print_reference(const struct cfg_section *section, FILE *out);

/* Lints a schema: every default converts and passes its validator, enums
 * have choices, sections have sizes, bounds are ordered, keys are
 * documented and unique, required keys have no default. For unit tests: a
 * failure is a programming error in the table. Errors name the file
 * "<schema>" and the key path. Returns SB_OK, SB_ERR_CONFIG or
 * SB_ERR_NOMEM. */
int cfg_check_schema(const struct cfg_section *section, struct cfg_errors *errs);

/* The closest of n candidates to word (case-insensitive edit distance, at
 * most a third of its length, 1 to 3), or NULL if none is close enough: the
 * "did you mean" of config keys, enum values and CLI commands. */
const char *cfg_closest(const char *word, const char *const *cands, size_t n);

#endif
