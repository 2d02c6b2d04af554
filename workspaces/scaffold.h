/*
 * scaffold.h - new agent workspaces from the built-in templates.
 *
 * The templates are the files of workspaces/templates/, embedded into the
 * binary at build time (cmake/embed.cmake). "{{agent}}" in a template is
 * replaced by the agent's id.
 */
#ifndef SB_WORKSPACES_SCAFFOLD_H
#define SB_WORKSPACES_SCAFFOLD_H

#include <stddef.h>

struct workspace_template {
	const char *name;    /* file name, e.g. "AGENTS.md" */
	const char *content; /* NUL-terminated markdown */
};

extern const struct workspace_template workspace_templates[];
extern const size_t workspace_n_templates;

/* Creates dir (and its parents, mode 0755) and writes every template that is
 * not there yet; existing files are never touched. *created receives how many
 * files were written. Returns SB_OK or SB_ERR_IO. CLI/start-up code only
 * (blocking file I/O). The agent is "main". */
int workspace_scaffold(const char *dir, size_t *created);

/* The same for the agent agent_id (NULL: "main"). SB_OK, SB_ERR_IO,
 * SB_ERR_TOOBIG, SB_ERR_NOMEM. */
int workspace_scaffold_for(const char *dir, const char *agent_id, size_t *created);

#endif
