/*
 * readyprobe.c - measures the gateway's start-up and idle memory.
 *
 *   readyprobe BINARY HOME RUNS IDLE_SECONDS
 *
 * For each run: fork+exec `BINARY gateway --port P` (SWITCHBOARD_HOME=HOME)
 * and poll GET /readyz over loopback every 100 us until it answers 200; the
 * time from just before fork to that answer is the start-up time. After the
 * last run the gateway is left idle for IDLE_SECONDS and its memory is read
 * from /proc/PID/smaps_rollup. Prints `name: value` lines.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int free_port(void)
{
	struct sockaddr_in sa;
	socklen_t len = sizeof sa;
	int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;

	memset(&sa, 0, sizeof sa);
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
	    getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
		port = ntohs(sa.sin_port);
	close(fd);
	return port;
}

/* One GET /readyz; returns the status or 0. */
static int readyz(int port)
{
	static const char req[] = "GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
	struct sockaddr_in sa;
	char resp[256];
	ssize_t n;
	int fd = socket(AF_INET, SOCK_STREAM, 0), status = 0;

	memset(&sa, 0, sizeof sa);
	sa.sin_family = AF_INET;
	sa.sin_port = htons((unsigned short)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
	    write(fd, req, sizeof req - 1) == (ssize_t)(sizeof req - 1)) {
		n = read(fd, resp, sizeof resp - 1);
		if (n > 12) {
			resp[n] = '\0';
			status = (int)strtol(resp + 9, NULL, 10);
		}
	}
	close(fd);
	return status;
}

static long smaps_field(int pid, const char *field)
{
	char path[64], line[256];
	long kb = -1;
	size_t flen = strlen(field);
	FILE *f;

	snprintf(path, sizeof path, "/proc/%d/smaps_rollup", pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof line, f))
		if (strncmp(line, field, flen) == 0 && line[flen] == ':') {
			kb = strtol(line + flen + 1, NULL, 10);
			break;
		}
	fclose(f);
	return kb;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	double times[1000];
	int runs, idle;
	pid_t pid = 0;

	if (argc != 5) {
		fprintf(stderr, "usage: readyprobe BINARY HOME RUNS IDLE_SECONDS\n");
		return 2;
	}
	runs = (int)strtol(argv[3], NULL, 10);
	idle = (int)strtol(argv[4], NULL, 10);
	if (runs < 1 || runs > 1000 || idle < 0 || idle > 600)
		return 2;
	setenv("SWITCHBOARD_HOME", argv[2], 1);
	for (int r = 0; r < runs; r++) {
		char port_s[16];
		int port = free_port(), st;
		double t0, deadline;

		snprintf(port_s, sizeof port_s, "%d", port);
		t0 = now_ms();
		pid = fork();
		if (pid == 0) {
			int null = open("/dev/null", O_WRONLY);

			dup2(null, 1);
			dup2(null, 2);
			execl(argv[1], argv[1], "gateway", "--port", port_s, (char *)NULL);
			_exit(127);
		}
		deadline = t0 + 30000;
		while (readyz(port) != 200) {
			if (now_ms() > deadline || waitpid(pid, &st, WNOHANG) == pid) {
				fprintf(stderr, "readyprobe: the gateway did not become ready\n");
				kill(pid, SIGKILL);
				return 1;
			}
			usleep(100);
		}
		times[r] = now_ms() - t0;
		if (r == runs - 1)
			break;
		kill(pid, SIGTERM);
		waitpid(pid, &st, 0);
	}
	qsort(times, (size_t)runs, sizeof *times, cmp_double);
	printf("startup_to_ready_ms_median: %.2f\n", times[runs / 2]);
	printf("startup_to_ready_ms_min: %.2f\n", times[0]);
	printf("startup_to_ready_ms_max: %.2f\n", times[runs - 1]);
	printf("startup_runs: %d\n", runs);
	sleep((unsigned)idle);
	printf("idle_seconds: %d\n", idle);
	printf("idle_rss_kib: %ld\n", smaps_field(pid, "Rss"));
	printf("idle_pss_kib: %ld\n", smaps_field(pid, "Pss"));
	printf("idle_private_kib: %ld\n",
	       smaps_field(pid, "Private_Clean") + smaps_field(pid, "Private_Dirty"));
	printf("idle_private_dirty_kib: %ld\n", smaps_field(pid, "Private_Dirty"));
	kill(pid, SIGTERM);
	waitpid(pid, NULL, 0);
	return 0;
}
