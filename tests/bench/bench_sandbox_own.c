/*
 * bench_sandbox_own.c - the cost of the ownership pass a root gateway runs
 * before each sandboxed command (sandbox_own, agents/safety/sandbox.h):
 * workspaces of 1,000, 10,000 and 100,000 files (100 to a directory), the
 * first pass (everything chowned) and then the pass that finds nothing to
 * change, as before every later command; and what is left on the loop
 * thread once the pass is done (sandbox_argv with owned set).
 *
 *   bench_sandbox_own [ROUNDS]      (default 5; as root only)
 *
 * Prints `name: value` lines (milliseconds per pass). The file system and
 * its cache are the host's: the figures are for a warm dentry cache.
 */
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agents/safety/sandbox.h"
#include "gateway/core/err.h"

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st;
	(void)flag;
	(void)f;
	return remove(p);
}

static int make_tree(const char *root, size_t files)
{
	char path[4200];

	for (size_t i = 0; i < files; i++) {
		int fd;

		if (i % 100 == 0) {
			snprintf(path, sizeof path, "%s/d%zu", root, i / 100);
			if (mkdir(path, 0755) != 0)
				return -1;
		}
		snprintf(path, sizeof path, "%s/d%zu/f%zu.txt", root, i / 100, i);
		fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd < 0 || write(fd, "x\n", 2) != 2) {
			if (fd >= 0)
				close(fd);
			return -1;
		}
		close(fd);
	}
	return 0;
}

int main(int argc, char **argv)
{
	static const size_t sizes[] = {1000, 10000, 100000};
	int rounds = argc > 1 ? (int)strtol(argv[1], NULL, 10) : 5;
	struct sandbox_policy p;

	if (geteuid() != 0) {
		printf("skipped: not root (a gateway that is not root runs no pass)\n");
		return 0;
	}
	if (rounds < 1)
		rounds = 1;
	memset(&p, 0, sizeof p);
	for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
		char root[] = "/tmp/sb-bench-own-XXXXXX";
		size_t seen = 0, changed = 0;
		double t0, first, again = 0;

		if (!mkdtemp(root) || make_tree(root, sizes[s]) != 0) {
			fprintf(stderr, "cannot make the workspace\n");
			return 1;
		}
		t0 = now_ms();
		if (sandbox_own(&p, root, SANDBOX_UID, SANDBOX_UID, &seen, &changed) != SB_OK)
			return 1;
		first = now_ms() - t0;
		printf("own_first_%zu_files_ms: %.2f (changed %zu of %zu)\n", sizes[s], first,
		       changed, seen);
		for (int r = 0; r < rounds; r++) {
			t0 = now_ms();
			if (sandbox_own(&p, root, SANDBOX_UID, SANDBOX_UID, &seen, &changed) !=
			    SB_OK)
				return 1;
			again += now_ms() - t0;
		}
		printf("own_again_%zu_files_ms: %.2f (changed %zu)\n", sizes[s], again / rounds,
		       changed);
		/* what is left on the loop thread: the command line, its memory
		 * files and cgroup, with the pass already done (owned) */
		if (s == 0) {
			const char *cmd[] = {"/bin/true", NULL};
			double argv_ms = 0;

			p.mode = SANDBOX_WORKSPACE_WRITE;
			p.owned = true;
			for (int r = 0; r < rounds; r++) {
				struct sandbox_fds fds;
				char **out = NULL, why[512];

				t0 = now_ms();
				if (sandbox_argv(&p, root, cmd, NULL, &out, &fds, why,
				                 sizeof why) != SB_OK) {
					fprintf(stderr, "sandbox_argv: %s\n", why);
					return 1;
				}
				argv_ms += now_ms() - t0;
				sandbox_argv_free(out);
				(void)sandbox_cgroup_remove(fds.cgroup);
				sandbox_fds_close(&fds);
			}
			printf("argv_owned_ms: %.3f\n", argv_ms / rounds);
			p.mode = SANDBOX_READ_ONLY;
			p.owned = false;
		}
		nftw(root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	}
	return 0;
}
