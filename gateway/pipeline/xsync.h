/*
 * xsync.h - transcripts off the fsync path: the store keeps what a run
 * wrote to its transcript until one batched sync has put the file on disk.
 *
 * A run writes its transcript lines with write(2) and no fsync
 * (agents/transcript.h). At its end the runner hands the bytes it wrote to
 * xsync_record, which queues them for the store (store_transcript_put) in
 * the loop iteration that also queues the run's inbox_done: they commit
 * together, so the reply commit is the durable copy of the transcript lines
 * it answers for. Every XSYNC_INTERVAL_MS while some are committed, a thread
 * of its own (never a pool thread, and a stop does not wait for it: syncfs
 * waits for every dirty page of the file system, other programs' too)
 * syncs the file systems that hold their files (syncfs(2):
 * one call for every file and directory entry written since, instead of an
 * fsync of each file and of its directory), then the rows up to the last one
 * committed before the sync are trimmed, lazily, with a later commit. At
 * start-up, xsync_repair compares every row left with its file and writes
 * back what a crash of the machine lost (transcript_restore), syncs, trims,
 * and only then does the gateway run anything that reads a transcript.
 *
 * Loop thread only.
 */
#ifndef SB_GATEWAY_XSYNC_H
#define SB_GATEWAY_XSYNC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "gateway/store/store.h"

#define XSYNC_INTERVAL_MS 200

struct xsync;

/* A syncer for store's rows on loop. SB_OK, SB_ERR_NOMEM. */
int xsync_new(struct xsync **out, uv_loop_t *loop, struct store *store);

/* Keeps [offset, offset + len) of the transcript file at path (bytes,
 * borrowed: copied) in the store until the file is synced. Call it after
 * the bytes are written (transcript_flush), in the loop iteration that
 * queues the run's reply. SB_OK, or the store's code (nothing queued: the
 * caller syncs the file itself). */
int xsync_record(struct xsync *x, const char *path, int64_t offset, const char *bytes, size_t len);

/* Start-up: restores every file from the rows left by the last run, syncs
 * them and trims the rows; cb runs once, later, with SB_OK or the store's
 * error (a file that cannot be restored is logged and the rows kept: the
 * syncer's trims never reach the rows this repair saw); not at all when
 * xsync_close comes first. */
int xsync_repair(struct xsync *x, void (*cb)(void *ud, int rc), void *ud);

/* Stops the timer; rows committed and not yet synced stay in the store
 * (the next start restores from them if need be). A sync in progress is
 * left to finish on its thread, or to end with the process. Frees x once
 * nothing of its own is outstanding (its handles, store callbacks, a
 * repair). NULL is a no-op. */
void xsync_close(struct xsync *x);

/* Tests only: while held, a sync thread waits before it syncs (a slow file
 * system); xsync_test_held counts sync threads that have not returned. */
void xsync_test_hold(bool on);
int xsync_test_held(void);

#endif
