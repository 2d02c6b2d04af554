/*
 * notify.c - see notify.h.
 */
#include "gateway/daemon/notify.h"

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "gateway/core/err.h"
#include "gateway/core/fmt.h"
#include "gateway/core/log.h"

/* Fills n->addr from a NOTIFY_SOCKET value. */
static int notify_address(struct notify *n, const char *value)
{
	size_t len = strlen(value);

	memset(&n->addr, 0, sizeof n->addr);
	n->addr.sun_family = AF_UNIX;
	if (len < 2 || (value[0] != '/' && value[0] != '@') || len > sizeof n->addr.sun_path)
		return SB_ERR_INVAL;
	if (value[0] == '/' && len == sizeof n->addr.sun_path)
		return SB_ERR_INVAL; /* a path needs its terminating NUL */
	memcpy(n->addr.sun_path, value, len);
	/* An abstract name starts with a NUL byte and is exactly as long as
	 * the address says: no terminating NUL counts. */
	if (value[0] == '@')
		n->addr.sun_path[0] = '\0';
	n->addr_len =
	    (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + (value[0] == '/' ? 1 : 0));
	return SB_OK;
}

int notify_init(struct notify *n)
{
	const char *env = getenv("NOTIFY_SOCKET");
	char value[sizeof n->addr.sun_path + 1];
	struct timeval tv = {.tv_sec = NOTIFY_SEND_TIMEOUT_MS / 1000,
	                     .tv_usec = (NOTIFY_SEND_TIMEOUT_MS % 1000) * 1000};
	int rc = SB_ERR_INVAL;

	n->fd = -1;
	n->addr_len = 0;
	if (!env)
		return SB_OK;
	/* Copy before unsetenv: the string belongs to the environment. */
	snprintf(value, sizeof value, "%s", env);
	rc = strlen(env) < sizeof value ? notify_address(n, env) : SB_ERR_INVAL;
	unsetenv("NOTIFY_SOCKET");
	if (!value[0])
		return SB_OK; /* set but empty: as good as unset */
	if (rc != SB_OK)
		goto out;
	rc = SB_ERR_IO;
	n->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (n->fd < 0)
		goto out;
	/* A manager that stops reading must not hold the loop for long. */
	if (setsockopt(n->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) != 0)
		goto out;
	rc = SB_OK;
out:
	if (rc != SB_OK) {
		log_warn("gateway", "NOTIFY_SOCKET is unusable; not notifying the service manager",
		         LOG_S("notify_socket", value), LOG_S("error", sb_strerror(rc)));
		notify_close(n);
	}
	return rc;
}

int notify_send(struct notify *n, const char *state)
{
	size_t len = strlen(state);
	ssize_t sent;

	if (n->fd < 0)
		return SB_OK;
	if (len > NOTIFY_MESSAGE_MAX)
		return SB_ERR_TOOBIG;
	do
		sent = sendto(n->fd, state, len, MSG_NOSIGNAL, (const struct sockaddr *)&n->addr,
		              n->addr_len);
	while (sent < 0 && errno == EINTR);
	if (sent != (ssize_t)len) {
		log_warn("gateway", "the service manager did not take a notification",
		         LOG_S("state", state),
		         LOG_S("error", sent < 0 ? strerror(errno) : "short"));
		return SB_ERR_IO;
	}
	return SB_OK;
}

int notify_ready(struct notify *n)
{
	char msg[64];
	int rc;

	if ((rc = FMT(msg, "READY=1\nMAINPID=%ld", (long)getpid())) != SB_OK)
		return rc;
	return notify_send(n, msg);
}

int notify_reloading(struct notify *n)
{
	struct timespec ts;
	char msg[64];
	int rc;

	/* systemd compares MONOTONIC_USEC with its own CLOCK_MONOTONIC. */
	clock_gettime(CLOCK_MONOTONIC, &ts);
	if ((rc = FMT(msg, "RELOADING=1\nMONOTONIC_USEC=%llu",
	              (unsigned long long)ts.tv_sec * 1000000ULL +
	                  (unsigned long long)ts.tv_nsec / 1000ULL)) != SB_OK)
		return rc;
	return notify_send(n, msg);
}

int notify_stopping(struct notify *n)
{
	return notify_send(n, "STOPPING=1");
}

void notify_close(struct notify *n)
{
	if (n->fd >= 0)
		close(n->fd);
	n->fd = -1;
}
