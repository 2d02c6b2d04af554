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

#include "gateway/core/err.h"
#include "gateway/core/fsutil.h"

int workspace_scaffold(const char *dir, size_t *created)
{
	*created = 0;
	if (fs_mkdirs(dir, 0755))
		return SB_ERR_IO;
	for (size_t i = 0; i < workspace_n_templates; i++) {
		const struct workspace_template *t = &workspace_templates[i];
		char path[PATH_MAX];
		int rc;

		if (snprintf(path, sizeof path, "%s/%s", dir, t->name) >= (int)sizeof path)
			return SB_ERR_TOOBIG;
		rc = fs_write_new(path, t->content, strlen(t->content), 0644);
		if (rc == SB_ERR_EXISTS)
			continue;
		if (rc)
			return rc;
		(*created)++;
	}
	return SB_OK;
}
