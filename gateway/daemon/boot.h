/*
 * boot.h - BOOT.md: once per agent at gateway start, an isolated turn.
 *
 * When the gateway is ready, every agent whose workspace holds a BOOT.md
 * that is not blank runs one turn with its text, in a fresh session under
 * the key "agent:<id>:boot" (so it never mixes with a conversation). The
 * reply is recorded in that session's transcript and delivered only when
 * the file's first line says where:
 *
 *   deliver: <channel>:<account>:<target>
 *
 * (the target is everything after the second colon). That line is not part
 * of the text the agent gets. Delivery goes through the outbox like any
 * reply (idempotency key "boot:<agent>:<session id>").
 *
 * Loop thread only (the files are read on the thread pool).
 */
#ifndef SB_GATEWAY_BOOT_H
#define SB_GATEWAY_BOOT_H

#include <stddef.h>
#include <uv.h>

#include "gateway/config/config.h"
#include "gateway/core/host.h"
#include "gateway/pipeline/runner.h"

#define BOOT_FILE "BOOT.md"
#define BOOT_FILE_MAX (256u << 10)

struct boot;

/* Starts reading every agent's BOOT.md (cfg is borrowed for the call);
 * runs follow. SB_OK, SB_ERR_NOMEM, SB_ERR_IO. */
int boot_start(struct boot **out, uv_loop_t *loop, const struct host *host, struct runner *runner,
               const struct config *cfg);

/* Aborts the boot runs still going (the gateway is stopping). NULL: no-op. */
void boot_abort(struct boot *b);

/* Frees b; a read still on the thread pool finishes first. NULL: no-op. */
void boot_free(struct boot *b);

/* Splits BOOT.md's text: when its first line is "deliver: C:A:T", the
 * channel, account and target are copied out (each NUL-terminated, within
 * size) and *body points past that line; otherwise they are "" and *body is
 * text. Returns 1 when a deliver line was found, 0 when none, -1 when the
 * first line starts with "deliver:" but is malformed. Any thread. */
int boot_parse(const char *text, char *channel, char *account, char *target, size_t size,
               const char **body);

#endif
