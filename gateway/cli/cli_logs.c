/*
 * cli_logs.c - `switchboard logs`: the last lines of the home's log file
 * (logs/gateway.log, written by the gateway and rotated by size), and with
 * -f the lines written after them, across rotations. It reads the file, so
 * it needs no running gateway and no token. With --json each line is
 * printed as one JSON object (log_line_json): a line is printed only once
 * its newline was written, so a line being written is never split.
 */
#include "gateway/cli/cli.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gateway/core/buf.h"
#include "gateway/core/err.h"
#include "gateway/core/fmt.h"
#include "gateway/core/log.h"
#include "gateway/core/num.h"

#define CLI_LOGS_DEFAULT 50
#define CLI_LOGS_MAX 1000000
#define CLI_LOGS_BLOCK 65536
#define CLI_LOGS_POLL_MS 200
/* --json: the longest line kept whole; a longer one is cut there. */
#define CLI_LOGS_LINE_MAX ((size_t)1 << 20)

static volatile sig_atomic_t cli_logs_stop;

/* --json: the output is one object a line, and the line being assembled. */
struct cli_logs_json {
	bool on;
	bool cut; /* the line was cut at CLI_LOGS_LINE_MAX: the rest is dropped */
	struct buf line;
};

static struct cli_logs_json cli_logs_json;

static void cli_logs_on_signal(int sig)
{
	(void)sig;
	cli_logs_stop = 1;
}

static void cli_logs_usage(FILE *f)
{
	fprintf(f,
	        "usage: switchboard logs [-f] [-n N] [--json]\n\n"
	        "Prints the last lines of the gateway's log, $SWITCHBOARD_HOME/logs/gateway.log\n"
	        "(the gateway need not be running).\n"
	        "  -n, --lines N   how many lines (default 50; 0 prints none)\n"
	        "  -f, --follow    then print each line as it is written, across rotations\n"
	        "                  (log.file_max), until Ctrl-C\n"
	        "  --json          one JSON object a line: the fields of each log line\n"
	        "                  (ts, level, module, msg, ...); a line that is not the\n"
	        "                  gateway's is {\"raw\": ...}\n");
}

/* Writes all of data[0..n) to stdout. */
static int cli_logs_write(const char *data, size_t n)
{
	while (n) {
		ssize_t w = write(STDOUT_FILENO, data, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return SB_ERR_IO;
		data += w;
		n -= (size_t)w;
	}
	return SB_OK;
}

/* Prints the line assembled (--json) as one JSON object. */
static int cli_logs_json_line(void)
{
	struct cli_logs_json *j = &cli_logs_json;
	json_t *o = log_line_json(j->line.data ? j->line.data : "", j->line.len);
	char *text;
	int rc;

	if (o && j->cut)
		json_object_set_new(o, "truncated", json_true());
	text = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
	json_decref(o);
	buf_reset(&j->line);
	j->cut = false;
	if (!text)
		return SB_ERR_NOMEM;
	rc = cli_logs_write(text, strlen(text));
	if (rc == SB_OK)
		rc = cli_logs_write("\n", 1);
	free(text);
	return rc;
}

/* Prints data[0..n): as it is, or with --json each complete line as an
 * object (the end of an unfinished line waits for its newline). */
static int cli_logs_out(const char *data, size_t n)
{
	struct cli_logs_json *j = &cli_logs_json;

	if (!j->on)
		return cli_logs_write(data, n);
	while (n) {
		const char *nl = memchr(data, '\n', n);
		size_t take = nl ? (size_t)(nl - data) : n, room;

		room = CLI_LOGS_LINE_MAX - j->line.len;
		if (take > room) {
			j->cut = true;
			if (buf_append(&j->line, data, room) != SB_OK)
				return SB_ERR_NOMEM;
		} else if (buf_append(&j->line, data, take) != SB_OK) {
			return SB_ERR_NOMEM;
		}
		if (!nl)
			return SB_OK;
		if (cli_logs_json_line() != SB_OK)
			return SB_ERR_IO;
		data = nl + 1;
		n -= take + 1;
	}
	return SB_OK;
}

/* --json at the end: a last line without its newline is printed too. */
static int cli_logs_out_end(void)
{
	if (!cli_logs_json.on || (!cli_logs_json.line.len && !cli_logs_json.cut))
		return SB_OK;
	return cli_logs_json_line();
}

/* The offset where the last want lines of fd (size bytes) begin; *found
 * is how many lines there are from it (fewer than want at a short file). */
static int cli_logs_tail_start(int fd, off_t size, long want, off_t *start, long *found)
{
	char block[CLI_LOGS_BLOCK];
	off_t end = size, pos;
	long newlines = 0;
	bool skip_last = true; /* the newline that ends the last line */

	*start = size;
	*found = 0;
	if (want <= 0 || size == 0)
		return SB_OK;
	while (end > 0) {
		size_t n = end > CLI_LOGS_BLOCK ? CLI_LOGS_BLOCK : (size_t)end;
		ssize_t r;

		pos = end - (off_t)n;
		r = pread(fd, block, n, pos);
		if (r != (ssize_t)n)
			return SB_ERR_IO;
		for (size_t i = n; i-- > 0;) {
			if (skip_last) {
				skip_last = false;
				if (block[i] == '\n')
					continue;
			}
			if (block[i] == '\n' && ++newlines == want) {
				*start = pos + (off_t)i + 1;
				*found = want;
				return SB_OK;
			}
		}
		end = pos;
	}
	*start = 0;
	*found = newlines + 1;
	return SB_OK;
}

/* Copies fd from offset *at to its end, advancing *at. */
static int cli_logs_copy(int fd, off_t *at)
{
	char block[CLI_LOGS_BLOCK];

	for (;;) {
		ssize_t r = pread(fd, block, sizeof block, *at);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return SB_ERR_IO;
		if (r == 0)
			return SB_OK;
		if (cli_logs_out(block, (size_t)r))
			return SB_ERR_IO;
		*at += r;
	}
}

/* Prints the last want lines of path (none when it does not exist), and
 * returns how many it printed in *printed. */
static int cli_logs_print_tail(const char *path, long want, long *printed)
{
	struct stat st;
	off_t start;
	int fd = open(path, O_RDONLY | O_CLOEXEC), rc;

	*printed = 0;
	if (fd < 0)
		return errno == ENOENT ? SB_OK : SB_ERR_IO;
	rc = fstat(fd, &st) == 0 ? SB_OK : SB_ERR_IO;
	if (rc == SB_OK)
		rc = cli_logs_tail_start(fd, st.st_size, want, &start, printed);
	if (rc == SB_OK)
		rc = cli_logs_copy(fd, &start);
	close(fd);
	return rc;
}

static void cli_logs_sleep(void)
{
	struct timespec ts = {.tv_sec = 0, .tv_nsec = CLI_LOGS_POLL_MS * 1000000L};

	nanosleep(&ts, NULL); /* a signal cuts it short */
}

/* The files rotated after the one that was open (old) and before the one
 * now at path, printed oldest first: more than one rotation between two
 * polls leaves the files between them at path.1 ... path.(k-1), where old
 * is path.k (or all of them when old is gone too). file_keep is at most
 * 100. */
static int cli_logs_between(const char *path, const struct stat *old)
{
	char name[PATH_MAX];
	struct stat st;
	int k, last, rc = SB_OK;

	for (k = 1; k <= 100; k++) {
		if (FMT(name, "%s.%d", path, k) != SB_OK || stat(name, &st) != 0)
			break;
		if (st.st_ino == old->st_ino && st.st_dev == old->st_dev)
			break;
	}
	last = k - 1;
	for (int i = last; i >= 1 && rc == SB_OK; i--) {
		off_t at = 0;
		int fd;

		if (FMT(name, "%s.%d", path, i) != SB_OK)
			break;
		fd = open(name, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue; /* rotated out meanwhile */
		rc = cli_logs_copy(fd, &at);
		close(fd);
	}
	return rc;
}

/* Prints what is written to path from offset at of the file open as fd
 * (-1: none yet), until a signal. A new file at path (renamed by a
 * rotation, or replaced) is read from its start once the old one is read
 * to its end; a file cut shorter is read again from its start. */
static int cli_logs_follow(const char *path, int fd, off_t at)
{
	struct stat now, cur;
	int rc = SB_OK;

	while (!cli_logs_stop) {
		if (fd >= 0 && (rc = cli_logs_copy(fd, &at)) != SB_OK)
			break;
		if (stat(path, &now) != 0) {
			cli_logs_sleep(); /* between the rename and the new file */
			continue;
		}
		if (fd >= 0 && fstat(fd, &cur) == 0 && cur.st_ino == now.st_ino &&
		    cur.st_dev == now.st_dev) {
			if (now.st_size < at)
				at = 0; /* truncated */
			else if (now.st_size == at)
				cli_logs_sleep();
			continue;
		}
		/* Another file: what the old one got before the rename first,
		 * then any rotated after it before this poll. */
		if (fd >= 0) {
			rc = cli_logs_copy(fd, &at);
			if (rc == SB_OK && fstat(fd, &cur) == 0)
				rc = cli_logs_between(path, &cur);
			close(fd);
			fd = -1;
			if (rc)
				break;
		}
		fd = open(path, O_RDONLY | O_CLOEXEC);
		at = 0;
	}
	if (fd >= 0)
		close(fd);
	return rc;
}

/* logs after the options: the tail of path (from older too when path
 * has fewer lines), then with follow what is written after it. */
static int cli_logs_run(const char *path, const char *older, int64_t want, bool follow)
{
	struct sigaction sa;
	struct stat st;
	long printed = 0, before = 0;
	off_t at = 0;
	int fd, rc = SB_OK;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 && !follow) {
		fprintf(stderr,
		        "switchboard logs: no log at %s (%s)\n  the gateway writes it while it "
		        "runs, unless log.file_max is 0\n",
		        path, strerror(errno));
		return 1;
	}
	/* Lines short of want come from the end of the newest rotated file. */
	if (fd >= 0 && fstat(fd, &st) == 0) {
		off_t start;

		rc = cli_logs_tail_start(fd, st.st_size, (long)want, &start, &printed);
		if (rc == SB_OK && printed < want && start == 0)
			rc = cli_logs_print_tail(older, (long)want - printed, &before);
		/* The rotated file's last line, if it had no newline, is its own. */
		if (rc == SB_OK && before)
			rc = cli_logs_out_end();
		at = start;
		if (rc == SB_OK)
			rc = cli_logs_copy(fd, &at);
		if (rc) {
			fprintf(stderr, "switchboard logs: cannot read %s\n", path);
			close(fd);
			return 1;
		}
	}
	if (!follow) {
		close(fd);
		return cli_logs_out_end() == SB_OK ? 0 : 1;
	}
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = cli_logs_on_signal; /* no SA_RESTART: the sleep ends */
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	rc = cli_logs_follow(path, fd, at);
	if (rc == SB_OK)
		rc = cli_logs_out_end();
	if (rc)
		fprintf(stderr, "switchboard logs: cannot read %s\n", path);
	return rc ? 1 : 0;
}

int cli_logs(int argc, char **argv)
{
	static const struct option opts[] = {{"follow", no_argument, NULL, 'f'},
	                                     {"lines", required_argument, NULL, 'n'},
	                                     {"json", no_argument, NULL, 'j'},
	                                     {"help", no_argument, NULL, 'h'},
	                                     {0}};
	char home[PATH_MAX], path[PATH_MAX + 32], older[PATH_MAX + 40];
	int64_t want = CLI_LOGS_DEFAULT;
	bool follow = false;
	int c, rc;

	optind = 1;
	cli_logs_json.on = false;
	while ((c = getopt_long(argc, argv, "fn:jh", opts, NULL)) != -1) {
		switch (c) {
		case 'f':
			follow = true;
			break;
		case 'j':
			cli_logs_json.on = true;
			break;
		case 'n':
			if (num_parse_i64(optarg, 0, CLI_LOGS_MAX, &want)) {
				fprintf(stderr,
				        "switchboard logs: --lines wants a number from 0 to %d, "
				        "got \"%s\"\n",
				        CLI_LOGS_MAX, optarg);
				return 2;
			}
			break;
		case 'h':
			cli_logs_usage(stdout);
			return 0;
		default:
			cli_logs_usage(stderr);
			return 2;
		}
	}
	if (optind != argc) {
		cli_logs_usage(stderr);
		return 2;
	}
	if (cli_home(home, sizeof home))
		return 1;
	if (FMT(path, "%s/logs/gateway.log", home) != SB_OK || FMT(older, "%s.1", path) != SB_OK) {
		fprintf(stderr, "switchboard logs: the home's path is too long\n");
		return 1;
	}
	buf_init(&cli_logs_json.line, CLI_LOGS_LINE_MAX + 1);
	cli_logs_json.cut = false;
	rc = cli_logs_run(path, older, want, follow);
	buf_free(&cli_logs_json.line);
	return rc;
}
