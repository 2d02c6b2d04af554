/*
 * runtime.h - where the running gateway listens, published in its home.
 *
 * Once the gateway is ready it writes $SWITCHBOARD_HOME/gateway.runtime.json
 * (0600, replaced by rename, removed at a clean stop):
 *
 *   {"pid": 4242, "home": "/abs/home", "version": "0.1.0",
 *    "http": "http://127.0.0.1:8790", "control": "ws://127.0.0.1:8790/",
 *    "started_at": "2026-12-03T07:00:00Z"}
 *
 * The CLI reads it before the configuration, so a configuration file broken
 * on disk, or a gateway.port edited and not yet applied, does not cut the
 * operator off from the gateway that runs. A file left by a gateway that was
 * killed is recognised: the home's gateway.lock is then not held by anyone.
 * It holds no secret.
 */
#ifndef SB_CONFIG_RUNTIME_H
#define SB_CONFIG_RUNTIME_H

#include <sys/types.h>

#define RUNTIME_FILE "gateway.runtime.json"

struct runtime_info {
	long pid;
	char home[4096];
	char version[64];
	char http[512];
	char control[512];
	char started_at[40];
};

/* Writes the file for this process (bind: the listener's address; a wildcard
 * becomes its loopback, as clients connect there). Blocking, small: at
 * start-up. SB_OK, SB_ERR_TOOBIG, SB_ERR_IO. */
int runtime_write(const char *home, const char *bind, int port, const char *control_path,
                  const char *version);

/* Removes the file when it names this process. */
void runtime_remove(const char *home);

/* Reads the file of the gateway running with home. SB_OK when it names a
 * gateway that holds the home's lock; SB_ERR_NOTFOUND when there is no
 * file or no gateway holds the lock (a file a kill left behind); SB_ERR_INVAL
 * when the file is not one this gateway writes. */
int runtime_read(const char *home, struct runtime_info *out);

#endif
