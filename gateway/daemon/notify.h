/*
 * notify.h - telling a service manager how the gateway is (the sd_notify
 * datagram protocol, written out here: no libsystemd).
 *
 * systemd (Type=notify) passes an AF_UNIX datagram socket in NOTIFY_SOCKET:
 * a path ("/run/systemd/notify") or an abstract name ("@name"). Each state
 * change is one datagram of newline-separated KEY=VALUE lines. Without
 * NOTIFY_SOCKET every call here does nothing, so the gateway behaves the same
 * under any supervisor or none.
 *
 * Loop thread only (the daemon's main thread).
 */
#ifndef SB_GATEWAY_DAEMON_NOTIFY_H
#define SB_GATEWAY_DAEMON_NOTIFY_H

#include <stdbool.h>
#include <sys/socket.h>
#include <sys/un.h>

/* The longest datagram notify_send sends. */
#define NOTIFY_MESSAGE_MAX 256
/* A send waits at most this long for room in the manager's queue. */
#define NOTIFY_SEND_TIMEOUT_MS 1000

struct notify {
	int fd; /* -1: nobody listens (no NOTIFY_SOCKET, or it was unusable) */
	struct sockaddr_un addr;
	socklen_t addr_len;
};

/* Reads NOTIFY_SOCKET and removes it from the environment, so that no
 * process the gateway starts later inherits it; opens a close-on-exec
 * datagram socket for it. Call it before anything is spawned.
 * n: the caller's, filled in; n->fd is -1 when there is nothing to tell.
 * Returns SB_OK (also when NOTIFY_SOCKET is unset), SB_ERR_INVAL for an
 * address that is neither an absolute path nor "@name" or does not fit,
 * SB_ERR_IO when the socket cannot be made; in both error cases n->fd is
 * -1 and the gateway runs on without notifying. */
int notify_init(struct notify *n);

/* Sends state (KEY=VALUE lines, at most NOTIFY_MESSAGE_MAX bytes) as one
 * datagram. SB_OK, also when n->fd is -1; SB_ERR_TOOBIG; SB_ERR_IO when the
 * manager did not take it (e.g. its queue stayed full for
 * NOTIFY_SEND_TIMEOUT_MS). */
int notify_send(struct notify *n, const char *state);

/* The gateway serves: "READY=1" and "MAINPID=<pid>". */
int notify_ready(struct notify *n);

/* A configuration reload began: "RELOADING=1" with "MONOTONIC_USEC=" (which
 * Type=notify-reload asks for). notify_ready says it is over. */
int notify_reloading(struct notify *n);

/* The gateway began to stop: "STOPPING=1". */
int notify_stopping(struct notify *n);

/* Closes the socket; n->fd becomes -1. A no-op when it is already -1. */
void notify_close(struct notify *n);

#endif
