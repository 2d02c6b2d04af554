/*
 * runtime.c - the running gateway's address file (runtime.h).
 */
#include "gateway/config/runtime.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include "gateway/core/err.h"
#include "gateway/core/fmt.h"

#define RUNTIME_MAX 8192

/* Where a client reaches a listener bound to bind. */
static const char *runtime_client_host(const char *bind)
{
	if (!bind || !*bind || strcmp(bind, "0.0.0.0") == 0 || strcmp(bind, "localhost") == 0)
		return "127.0.0.1";
	if (strcmp(bind, "::") == 0)
		return "::1";
	return bind;
}

int runtime_write(const char *home, const char *bind, int port, const char *control_path,
                  const char *version)
{
	char path[4200], tmp[4300], http[600], control[1200], when[40];
	const char *host = runtime_client_host(bind);
	bool v6 = strchr(host, ':') != NULL;
	time_t now = time(NULL);
	struct tm tm;
	json_t *o;
	char *text = NULL;
	int fd, rc = SB_ERR_IO;
	size_t len;

	if (FMT(path, "%s/" RUNTIME_FILE, home) != SB_OK ||
	    FMT(tmp, "%s/." RUNTIME_FILE ".%ld", home, (long)getpid()) != SB_OK ||
	    FMT(http, v6 ? "http://[%s]:%d" : "http://%s:%d", host, port) != SB_OK ||
	    FMT(control, v6 ? "ws://[%s]:%d%s" : "ws://%s:%d%s", host, port,
	        control_path && *control_path ? control_path : "/") != SB_OK)
		return SB_ERR_TOOBIG;
	gmtime_r(&now, &tm);
	strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
	o = json_pack("{sIssssssssss}", "pid", (json_int_t)getpid(), "home", home, "version",
	              version ? version : "", "http", http, "control", control, "started_at",
	              when);
	if (o)
		text = json_dumps(o, JSON_INDENT(1));
	json_decref(o);
	if (!text)
		return SB_ERR_NOMEM;
	len = strlen(text);
	(void)unlink(tmp);
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd >= 0) {
		if (write(fd, text, len) == (ssize_t)len && write(fd, "\n", 1) == 1 &&
		    close(fd) == 0 && rename(tmp, path) == 0)
			rc = SB_OK;
		else
			(void)unlink(tmp);
	}
	free(text);
	return rc;
}

void runtime_remove(const char *home)
{
	struct runtime_info ri;
	char path[4200];

	if (FMT(path, "%s/" RUNTIME_FILE, home) != SB_OK)
		return;
	/* Only this process's (runtime_read would say NOTFOUND while the lock
	 * is ours: read the file plainly). */
	memset(&ri, 0, sizeof ri);
	{
		FILE *f = fopen(path, "re");
		json_t *o = f ? json_loadf(f, 0, NULL) : NULL;

		if (f)
			fclose(f);
		if (o && json_integer_value(json_object_get(o, "pid")) == (json_int_t)getpid())
			(void)unlink(path);
		json_decref(o);
	}
}

/* Whether some process holds the home's lock (a gateway runs there). */
static bool runtime_lock_held(const char *home)
{
	char path[4200];
	bool held = false;
	int fd;

	if (FMT(path, "%s/gateway.lock", home) != SB_OK)
		return false;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return false;
	if (flock(fd, LOCK_SH | LOCK_NB) != 0)
		held = errno == EWOULDBLOCK;
	else
		(void)flock(fd, LOCK_UN);
	close(fd);
	return held;
}

static int runtime_copy(const json_t *o, const char *key, char *out, size_t size)
{
	const char *s = json_string_value(json_object_get(o, key));

	if (!s || strlen(s) >= size)
		return SB_ERR_INVAL;
	memcpy(out, s, strlen(s) + 1);
	return SB_OK;
}

int runtime_read(const char *home, struct runtime_info *out)
{
	char path[4200], buf[RUNTIME_MAX];
	json_t *o;
	ssize_t n;
	int fd, rc;

	memset(out, 0, sizeof *out);
	if (FMT(path, "%s/" RUNTIME_FILE, home) != SB_OK)
		return SB_ERR_NOTFOUND;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return SB_ERR_NOTFOUND;
	n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return SB_ERR_INVAL;
	buf[n] = '\0';
	if (!runtime_lock_held(home))
		return SB_ERR_NOTFOUND;
	o = json_loads(buf, 0, NULL);
	if (!json_is_object(o) || !json_is_integer(json_object_get(o, "pid"))) {
		json_decref(o);
		return SB_ERR_INVAL;
	}
	out->pid = (long)json_integer_value(json_object_get(o, "pid"));
	rc = runtime_copy(o, "home", out->home, sizeof out->home);
	if (!rc)
		rc = runtime_copy(o, "http", out->http, sizeof out->http);
	if (!rc)
		rc = runtime_copy(o, "control", out->control, sizeof out->control);
	if (!rc)
		(void)runtime_copy(o, "version", out->version, sizeof out->version);
	if (!rc)
		(void)runtime_copy(o, "started_at", out->started_at, sizeof out->started_at);
	json_decref(o);
	return rc;
}
