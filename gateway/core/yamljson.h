/*
 * yamljson.h - a YAML document as jansson values, bounded: the loader the
 * scripted provider's scripts and skills' frontmatter share (the gateway's
 * own configuration goes through cfg.h's schema walker instead).
 *
 * Aliases make a graph of shared nodes; every visit counts against
 * nodes_max, so an alias bomb ("billion laughs") stops there, and nesting
 * stops at depth_max. Mapping keys must be scalars without NUL bytes, and
 * every string must be UTF-8. Pure; any thread.
 */
#ifndef SB_CORE_YAMLJSON_H
#define SB_CORE_YAMLJSON_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

struct yamljson_opt {
	const char *what;       /* named in errors: "the script", "the frontmatter" */
	const char *line_label; /* before a line number: "line", "frontmatter line" */
	int depth_max;
	size_t nodes_max;
	/* Plain scalars: YAML 1.2's core schema (null, ~, true/True/TRUE,
	 * false..., integers, reals) when set; else only true, false and
	 * integers, the rest strings. Quoted and block scalars are strings. */
	bool core_schema;
};

/* Parses the first document of text into *out (a new reference; json null
 * for an empty document). SB_OK, SB_ERR_INVAL with why (the line, 1-based,
 * after line_label) or SB_ERR_NOMEM. */
int yamljson_load(const char *text, size_t len, const struct yamljson_opt *o, json_t **out,
                  char *why, size_t why_size);

#endif
