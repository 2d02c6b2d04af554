/*
 * scaffold.c - see scaffold.h.
 */
#include "workspaces/scaffold.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gateway/core/buf.h"
#include "gateway/core/err.h"
#include "gateway/core/fsutil.h"

#define SCAFFOLD_PLACEHOLDER "{{agent}}"

/* The template's text with the placeholder replaced, into b. */
static int scaffold_expand(struct buf *b, const char *text, const char *agent_id)
{
	const char *p;
	int rc = SB_OK;

	buf_reset(b);
	while (!rc && (p = strstr(text, SCAFFOLD_PLACEHOLDER))) {
		rc = buf_append(b, text, (size_t)(p - text));
		if (!rc)
			rc = buf_puts(b, agent_id);
		text = p + strlen(SCAFFOLD_PLACEHOLDER);
	}
	if (!rc)
		rc = buf_puts(b, text);
	return rc;
}

int workspace_scaffold_for(const char *dir, const char *agent_id, size_t *created)
{
	struct buf b;
	int rc = SB_ERR_IO;

	*created = 0;
	buf_init(&b, 1u << 20);
	if (fs_mkdirs(dir, 0755))
		goto out;
	for (size_t i = 0; i < workspace_n_templates; i++) {
		const struct workspace_template *t = &workspace_templates[i];
		char path[PATH_MAX];

		rc = SB_ERR_TOOBIG;
		if (snprintf(path, sizeof path, "%s/%s", dir, t->name) >= (int)sizeof path)
			goto out;
		rc = scaffold_expand(&b, t->content, agent_id ? agent_id : "main");
		if (rc)
			goto out;
		rc = fs_write_new(path, b.data ? b.data : "", b.len, 0644);
		if (rc == SB_ERR_EXISTS)
			continue;
		if (rc)
			goto out;
		(*created)++;
	}
	rc = SB_OK;
out:
	buf_free(&b);
	return rc;
}

int workspace_scaffold(const char *dir, size_t *created)
{
	return workspace_scaffold_for(dir, NULL, created);
}
