/*
 * harness.c - see harness.h.
 */
#include "harness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define HARNESS_ARGS_MAX 32

static long harness_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

int harness_in_ci(void)
{
	const char *ci = getenv("CI");

	return ci && strcmp(ci, "true") == 0;
}

int harness_tmpdir(char *out, size_t size)
{
	const char *base = getenv("TMPDIR");

	if (snprintf(out, size, "%s/sbtest.XXXXXX", base && *base ? base : "/tmp") >= (int)size)
		return -1;
	return mkdtemp(out) ? 0 : -1;
}

static int harness_rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

void harness_rmrf(const char *path)
{
	nftw(path, harness_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* A port for a gateway to listen on, below the kernel's ephemeral range
 * (32768-60999 by default): a port the kernel handed out for bind(0) is
 * free again once closed, and on a busy machine an outgoing connection's
 * local port (thousands a minute here, held in TIME_WAIT) can take it before
 * the gateway binds it; no connect() ever takes one below the range. Random
 * in 20000-32767, and free when tried. */
int harness_free_port(void)
{
	static unsigned seq;
	unsigned seed = (unsigned)getpid() * 2654435761u ^ (unsigned)harness_now_ms() ^ ++seq;

	for (int tries = 0; tries < 500; tries++) {
		struct sockaddr_in sa;
		int fd = socket(AF_INET, SOCK_STREAM, 0), port;
		bool ok;

		if (fd < 0)
			return -1;
		seed = seed * 1103515245u + 12345u;
		port = 20000 + (int)((seed >> 8) % 12768u);
		memset(&sa, 0, sizeof sa);
		sa.sin_family = AF_INET;
		sa.sin_port = htons((uint16_t)port);
		sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		ok = bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
		close(fd);
		if (ok)
			return port;
	}
	return -1;
}

const char *harness_binary(void)
{
	const char *bin = getenv("SWITCHBOARD_TEST_BINARY");

	return bin && *bin ? bin : SB_BINARY;
}

static pid_t harness_spawn(const char *home, const char *const *args, int out_fd)
{
	const char *argv[HARNESS_ARGS_MAX + 2];
	size_t n = 0;
	pid_t pid;

	argv[n++] = harness_binary();
	for (; args && *args && n < HARNESS_ARGS_MAX; args++)
		argv[n++] = *args;
	argv[n] = NULL;
	pid = fork();
	if (pid != 0)
		return pid;
	setenv("SWITCHBOARD_HOME", home, 1);
	if (out_fd >= 0) {
		dup2(out_fd, STDOUT_FILENO);
		dup2(out_fd, STDERR_FILENO);
		close(out_fd);
	}
	execv(argv[0], (char *const *)argv);
	_exit(127);
}

static int harness_status(int st)
{
	if (WIFEXITED(st))
		return WEXITSTATUS(st);
	if (WIFSIGNALED(st))
		return 128 + WTERMSIG(st);
	return -1;
}

int harness_cli(const char *home, struct buf *out, const char *const *args)
{
	int fds[2], st = 0;
	pid_t pid;
	char chunk[4096];
	ssize_t n;

	if (pipe(fds) != 0)
		return -1;
	pid = harness_spawn(home, args, fds[1]);
	close(fds[1]);
	if (pid < 0) {
		close(fds[0]);
		return -1;
	}
	while ((n = read(fds[0], chunk, sizeof chunk)) > 0 || (n < 0 && errno == EINTR))
		if (n > 0 && out)
			buf_append(out, chunk, (size_t)n);
	close(fds[0]);
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	return harness_status(st);
}

int harness_write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	if (!f)
		return -1;
	fputs(text, f);
	return fclose(f) == 0 ? 0 : -1;
}

int harness_daemon_start(struct harness_daemon *d, const char *home, const char *const *extra)
{
	const char *args[HARNESS_ARGS_MAX + 1];
	char cfg[600], port[16];
	size_t n = 0;
	int fd;

	memset(d, 0, sizeof *d);
	snprintf(d->home, sizeof d->home, "%s", home);
	snprintf(cfg, sizeof cfg, "%s/switchboard.yaml", home);
	if (access(cfg, F_OK) != 0) {
		const char *init[] = {"init", NULL};

		if (harness_cli(home, NULL, init) != 0)
			return -1;
	}
	d->port = harness_free_port();
	if (d->port <= 0)
		return -1;
	snprintf(port, sizeof port, "%d", d->port);
	args[n++] = "gateway";
	args[n++] = "--port";
	args[n++] = port;
	for (; extra && *extra && n < HARNESS_ARGS_MAX; extra++)
		args[n++] = *extra;
	args[n] = NULL;
	snprintf(d->log_path, sizeof d->log_path, "%s/gateway.log", home);
	fd = open(d->log_path, O_WRONLY | O_CREAT | O_APPEND, 0600);
	if (fd < 0)
		return -1;
	d->pid = harness_spawn(home, args, fd);
	close(fd);
	return d->pid > 0 ? 0 : -1;
}

int harness_connect(int port)
{
	struct sockaddr_in sa;
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0)
		return -1;
	memset(&sa, 0, sizeof sa);
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

long harness_read_response(int fd, struct buf *out, int timeout_ms)
{
	long deadline = harness_now_ms() + timeout_ms;
	char chunk[4096];

	for (;;) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		long left = deadline - harness_now_ms();
		ssize_t n;

		if (left <= 0 || poll(&p, 1, (int)left) <= 0)
			break;
		n = read(fd, chunk, sizeof chunk);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		buf_append(out, chunk, (size_t)n);
	}
	if (out->len > 12 && strncmp(out->data, "HTTP/1.", 7) == 0)
		return strtol(out->data + 9, NULL, 10);
	return 0;
}

long harness_http(int port, const char *method, const char *path, const char *const *headers,
                  const char *body, struct buf *resp)
{
	struct sockaddr_in sa;
	struct buf req, in;
	long status = 0;
	char chunk[4096];
	ssize_t n;
	int fd;

	fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		return 0;
	memset(&sa, 0, sizeof sa);
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
		close(fd);
		return 0;
	}
	buf_init(&req, 16 << 20);
	buf_init(&in, 64 << 20);
	buf_printf(&req, "%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n", method,
	           path, port);
	for (; headers && *headers; headers++)
		buf_printf(&req, "%s\r\n", *headers);
	if (body)
		buf_printf(&req, "Content-Length: %zu\r\n", strlen(body));
	buf_puts(&req, "\r\n");
	if (body)
		buf_puts(&req, body);
	if (write(fd, req.data, req.len) != (ssize_t)req.len)
		goto out;
	while ((n = read(fd, chunk, sizeof chunk)) > 0 || (n < 0 && errno == EINTR))
		if (n > 0)
			buf_append(&in, chunk, (size_t)n);
	if (in.len > 12 && strncmp(in.data, "HTTP/1.", 7) == 0) {
		char *hdr_end = strstr(in.data, "\r\n\r\n");

		status = strtol(in.data + 9, NULL, 10);
		if (resp && hdr_end) {
			char *b = hdr_end + 4;
			size_t blen = in.len - (size_t)(b - in.data);

			/* Undo chunked transfer encoding when present. */
			if (memmem(in.data, (size_t)(hdr_end - in.data), "chunked", 7)) {
				while (blen) {
					char *end;
					unsigned long sz = strtoul(b, &end, 16);

					if (end == b || !sz)
						break;
					end = strstr(end, "\r\n");
					if (!end)
						break;
					end += 2;
					buf_append(resp, end, sz);
					b = end + sz + 2;
					blen = in.len - (size_t)(b - in.data);
				}
			} else {
				buf_append(resp, b, blen);
			}
		}
	}
out:
	close(fd);
	buf_free(&req);
	buf_free(&in);
	return status;
}

int harness_wait_ready(const struct harness_daemon *d, int timeout_ms)
{
	long deadline = harness_now_ms() + timeout_ms;

	while (harness_now_ms() < deadline) {
		int st;

		if (harness_http(d->port, "GET", "/readyz", NULL, NULL, NULL) == 200)
			return 0;
		if (waitpid(d->pid, &st, WNOHANG) == d->pid)
			return -1;
		usleep(10000);
	}
	return -1;
}

/* A failed stop shows the end of the daemon's log in the test output, so a
 * failure on a CI machine can be read without the machine. */
static void harness_dump_log_tail(const struct harness_daemon *d, int code)
{
	struct buf log;
	size_t from = 0;

	buf_init(&log, 1 << 16);
	if (harness_read_file(d->log_path, &log) == 0 && log.len > 0) {
		if (log.len > 12000)
			from = log.len - 12000;
		fprintf(stderr, "--- gateway stopped with status %d; last of %s ---\n%.*s\n---\n",
		        code, d->log_path, (int)(log.len - from), log.data + from);
	}
	buf_free(&log);
}

int harness_daemon_stop(struct harness_daemon *d, int sig, int timeout_ms)
{
	return harness_daemon_stop_expect(d, sig, timeout_ms, sig == SIGKILL ? 128 + SIGKILL : 0);
}

int harness_daemon_stop_expect(struct harness_daemon *d, int sig, int timeout_ms, int expected)
{
	long deadline = harness_now_ms() + timeout_ms;
	int st = 0;

	if (d->pid <= 0)
		return -1;
	kill(d->pid, sig);
	while (harness_now_ms() < deadline) {
		pid_t r = waitpid(d->pid, &st, WNOHANG);

		if (r == d->pid) {
			int code = harness_status(st);

			d->pid = 0;
			if (code != 0 && code != expected)
				harness_dump_log_tail(d, code);
			return code;
		}
		usleep(10000);
	}
	harness_dump_log_tail(d, -1);
	kill(d->pid, SIGKILL);
	waitpid(d->pid, &st, 0);
	d->pid = 0;
	return -1;
}

int harness_read_file(const char *path, struct buf *out)
{
	char chunk[4096];
	size_t n;
	FILE *f = fopen(path, "r");

	if (!f)
		return -1;
	while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
		buf_append(out, chunk, n);
	fclose(f);
	return 0;
}

int harness_daemon_log(const struct harness_daemon *d, struct buf *out)
{
	return harness_read_file(d->log_path, out);
}

pid_t harness_cli_start(const char *home, const char *out_path, const char *const *args)
{
	int fd = open(out_path, O_WRONLY | O_CREAT | O_APPEND, 0600);
	pid_t pid;

	if (fd < 0)
		return -1;
	pid = harness_spawn(home, args, fd);
	close(fd);
	return pid;
}

int harness_wait(pid_t pid, int timeout_ms)
{
	long deadline = harness_now_ms() + timeout_ms;
	int st = 0;

	while (harness_now_ms() < deadline) {
		pid_t r = waitpid(pid, &st, WNOHANG);

		if (r == pid)
			return harness_status(st);
		usleep(5000);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	return -1;
}

int harness_peer_start(struct harness_peer *p, const char *name, const char *const *args)
{
	const char *argv[HARNESS_ARGS_MAX + 4];
	char script[1024], line[128];
	int in[2], out[2];
	size_t n = 0, got = 0;

	memset(p, 0, sizeof *p);
	p->stdin_fd = -1;
	p->stdout_fd = -1;
	snprintf(script, sizeof script, "%s/tests/fakes/%s", SB_SOURCE_DIR, name);
	argv[n++] = "node";
	argv[n++] = script;
	argv[n++] = "0";
	for (; args && *args && n < HARNESS_ARGS_MAX; args++)
		argv[n++] = *args;
	argv[n] = NULL;
	if (pipe(in) != 0)
		return -1;
	if (pipe(out) != 0) {
		close(in[0]);
		close(in[1]);
		return -1;
	}
	p->pid = fork();
	if (p->pid == 0) {
		dup2(in[0], STDIN_FILENO);
		dup2(out[1], STDOUT_FILENO);
		close(in[0]);
		close(in[1]);
		close(out[0]);
		close(out[1]);
		execvp("node", (char *const *)argv);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	p->stdin_fd = in[1];
	/* The first line is "PORT n". */
	while (got < sizeof line - 1) {
		struct pollfd pf = {.fd = out[0], .events = POLLIN};
		ssize_t r;

		if (poll(&pf, 1, 15000) <= 0)
			break;
		r = read(out[0], line + got, 1);
		if (r <= 0)
			break;
		if (line[got] == '\n')
			break;
		got += (size_t)r;
	}
	line[got] = '\0';
	p->stdout_fd = out[0];
	if (strncmp(line, "PORT ", 5) != 0) {
		harness_peer_stop(p);
		return -1;
	}
	p->port = (int)strtol(line + 5, NULL, 10);
	return p->port > 0 ? 0 : -1;
}

void harness_peer_stop(struct harness_peer *p)
{
	if (p->stdin_fd >= 0)
		close(p->stdin_fd);
	if (p->stdout_fd >= 0)
		close(p->stdout_fd);
	p->stdin_fd = p->stdout_fd = -1;
	if (p->pid > 0) {
		kill(p->pid, SIGTERM);
		waitpid(p->pid, NULL, 0);
	}
	p->pid = 0;
}

/* How many user messages in a transcript's text end with needle (the
 * user's words after the untrusted-content note, JSON-escaped). */
int harness_count_user_texts(const char *data, const char *needle)
{
	static const char start[] = "\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"";
	size_t nl = strlen(needle);
	int n = 0;

	for (const char *p = data; p && (p = strstr(p, start)); p += sizeof start - 1) {
		const char *end = strstr(p + sizeof start - 1, "\"}");

		if (end && (size_t)(end + 2 - p) >= nl && strncmp(end + 2 - nl, needle, nl) == 0)
			n++;
	}
	return n;
}
