/*
 * store.h - the durable store: inbox, outbox, kv, sessions, pairing, devices.
 *
 * Callers see functions (store_inbox_put, ...) and records; the backends
 * (SQLite today, PostgreSQL as an addition) sit behind one table of
 * operations (gateway/store/store_backend.h). Every operation is
 * asynchronous: it is queued to the backend, and its callback runs later ON
 * THE LOOP THREAD with the result. The durability rule: a callback that
 * reports SB_OK for a write runs only after the transaction holding that
 * write is committed to disk (SQLite WAL, synchronous=FULL).
 *
 * The SQLite backend has one writer thread that group-commits: everything
 * queued while a commit runs goes into the next transaction (each operation in
 * its own savepoint, so one failure does not undo its neighbours), and the
 * writer is woken once per loop iteration, after its callbacks, so that what
 * one event queues (a run's session update and its reply, say) shares one
 * commit. A lazy operation (outbox_done, kv_put_lazy: nobody waits on
 * them) does not wake the writer: it joins the next commit that writes, or
 * commits after STORE_LAZY_DONE_MS (outbox_done: it bounds how long a
 * delivery stays unmarked) or STORE_LAZY_KV_MS (kv_put_lazy).
 *
 * All functions below: loop thread only, unless said otherwise. Strings passed
 * in are copied before the call returns. Results passed to callbacks are
 * borrowed for the duration of the callback.
 *
 * Every operation function returns SB_OK when the operation was queued: its
 * callback (which may be NULL) then runs exactly once, on the loop thread.
 * Any other return means nothing was queued and the callback never runs
 * (the arguments are checked first, then whether the store takes more):
 *   SB_ERR_INVAL   a required field is NULL or a number is out of range
 *   SB_ERR_NOMEM   copying the arguments failed
 *   SB_ERR_AGAIN   queue_max operations are outstanding (try again later);
 *                  never for inbox_done, inbox_release, outbox_done and
 *                  outbox_failed, which finish claimed work and are bounded
 *                  by what can be claimed
 *   SB_ERR_CLOSED  store_close has started (e.g. called from a callback it
 *                  runs)
 * Codes a callback may see: SB_OK; SB_ERR_NOTFOUND (no such row, see each
 * operation); SB_ERR_INVAL (a constraint was violated, e.g. an unknown
 * inbox_id); SB_ERR_NOMEM; SB_ERR_STORE (the database failed; for a write,
 * nothing of it is stored - a failed COMMIT fails every operation of its
 * batch). Results (ids, items, values) are meaningful only with SB_OK.
 */
#ifndef SB_GATEWAY_STORE_H
#define SB_GATEWAY_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

struct store;

/* ---- records ---- */

struct store_inbox_new {
	const char *channel;    /* "webhook", "telegram", ... */
	const char *account;    /* channel account id ("default") */
	const char *dedupe_key; /* unique per (channel, account): the event id */
	const char *payload;    /* the envelope as JSON text */
	/* 0: the entry is pending, for a later claim. > 0: it is inserted
	 * already claimed for that many ms (attempts 1, as after a claim), so
	 * that a caller that will run it at once needs no claim of its own;
	 * a duplicate keeps the existing entry's state. */
	int64_t claim_lease_ms;
};

struct store_inbox_item {
	int64_t id;
	const char *channel;
	const char *account;
	const char *dedupe_key;
	const char *payload;
	int attempts;        /* times it was claimed before this claim (0 the first time) */
	int64_t received_at; /* unix ms */
};

struct store_outbox_new {
	const char *idempotency_key; /* unique; a second put with it is a duplicate */
	const char *channel;
	const char *account;
	const char *target;  /* channel-specific destination (chat id, URL, ...) */
	const char *payload; /* JSON text */
	int64_t due_at;      /* unix ms; 0 = now */
	int64_t inbox_id;    /* the inbox entry it answers (must exist); 0 = none */
	/* 0: pending, for a claim. > 0: inserted already claimed for that
	 * many ms (attempts 1), for a caller that sends it at once
	 * (store_inbox_done_claimed). */
	int64_t claim_lease_ms;
};

struct store_outbox_item {
	int64_t id;
	const char *idempotency_key;
	const char *channel;
	const char *account;
	const char *target;
	const char *payload;
	int attempts; /* times it was claimed before this claim (0 the first time) */
	int64_t due_at;
	int64_t inbox_id; /* 0 = none */
};

struct store_session {
	const char *key; /* session key, e.g. agent:main:main */
	const char *agent_id;
	const char *session_id; /* current transcript id */
	const char *meta;       /* JSON text (may be NULL) */
	int64_t updated_at;     /* unix ms; on put, 0 = now */
};

/* A pending pairing request: an unknown sender's one-time code. */
struct store_pairing {
	const char *channel;
	const char *account;
	const char *sender_id;
	const char *code;   /* STORE_PAIRING_CODE_LEN characters of STORE_PAIRING_ALPHABET */
	int64_t created_at; /* unix ms */
	int64_t expires_at; /* unix ms */
};

/* A sender approved by pairing. */
struct store_allow_entry {
	const char *channel;
	const char *account;
	const char *sender_id;
	int64_t approved_at; /* unix ms */
};

/* A device of the control plane: an Ed25519 identity that asked to connect
 * (pending) and that the operator approved (approved). */
struct store_device {
	const char *device_id;  /* hex SHA-256 of the raw public key */
	const char *public_key; /* base64url of the raw 32-byte public key */
	const char *state;      /* "pending" or "approved" */
	const char *client_id;  /* the client's own name for itself; may be NULL */
	const char *platform;   /* may be NULL */
	const char *scopes; /* comma-separated: asked for while pending, granted once approved */
	const char *token_hash;  /* hex BLAKE2b-256 of its current token; NULL before the first */
	const char *remote_addr; /* the address it last connected from; may be NULL */
	int64_t created_at;      /* unix ms */
	int64_t approved_at;     /* unix ms; 0 while pending */
	int64_t last_seen_at;    /* unix ms */
};

/* A cron job as stored: its definition and its scheduling state, both JSON
 * text owned by the scheduler (gateway/cron/cron.h). */
struct store_cron_job {
	const char *id;
	const char *spec;   /* the definition */
	const char *state;  /* next run, last run, consecutive errors, ... */
	const char *source; /* "config" (declared in the config file) or "api" */
	int64_t created_at; /* unix ms; on put, kept when the job exists (0 = now) */
	int64_t updated_at; /* unix ms; set by put */
};

/* One run of a cron job, in its history. */
struct store_cron_run {
	int64_t id;
	const char *job_id;
	int64_t scheduled_at; /* unix ms: when it was due */
	int64_t started_at;
	int64_t finished_at;
	const char *status;      /* "ok", "error", "skipped" */
	const char *detail;      /* the error, or the start of the reply; may be NULL */
	const char *session_key; /* where it ran; may be NULL */
};

/* Transcript bytes a run appended to a transcript file (agents/transcript.h),
 * kept until the file is known to be synced to disk: the bytes [offset,
 * offset + len) of the file at path. */
struct store_transcript_lines {
	int64_t id; /* on list: the row (ascending with commit order) */
	const char *path;
	int64_t offset;
	const char *bytes; /* len bytes (not NUL-terminated on put) */
	size_t len;
};

struct store_stats {
	int64_t inbox_pending;  /* not yet done (pending or claimed) */
	int64_t outbox_pending; /* not yet sent or failed for good */
	int64_t queue_depth;    /* operations waiting for the writer (not counting this one) */
};

/* ---- callbacks (loop thread) ---- */

/* rc SB_OK; id of the row; duplicate=true when the dedupe/idempotency key
 * existed already (id is then the existing row's). */
typedef void (*store_put_cb)(void *ud, int rc, int64_t id, bool duplicate);
typedef void (*store_done_cb)(void *ud, int rc);
/* An inbox entry's state ("pending", "claimed", "done") and the payload of
 * the reply committed with it (NULL: none); both borrowed for the call. */
typedef void (*store_reply_cb)(void *ud, int rc, const char *state, const char *payload);
typedef void (*store_inbox_cb)(void *ud, int rc, const struct store_inbox_item *items, size_t n);
typedef void (*store_outbox_cb)(void *ud, int rc, const struct store_outbox_item *items, size_t n);
/* value NULL with rc SB_ERR_NOTFOUND when absent. */
typedef void (*store_kv_cb)(void *ud, int rc, const char *value);
typedef void (*store_session_cb)(void *ud, int rc, const struct store_session *s);
typedef void (*store_stats_cb)(void *ud, int rc, const struct store_stats *st);
/* How many inbox and outbox entries were claimed and are pending again. */
typedef void (*store_recover_cb)(void *ud, int rc, int64_t inbox, int64_t outbox);
/* p is the request (NULL unless rc is SB_OK); created tells a new code from
 * the sender's pending one. */
typedef void (*store_pairing_cb)(void *ud, int rc, const struct store_pairing *p, bool created);
typedef void (*store_pairing_list_cb)(void *ud, int rc, const struct store_pairing *v, size_t n);
typedef void (*store_allow_cb)(void *ud, int rc, bool allowed);
typedef void (*store_allow_list_cb)(void *ud, int rc, const struct store_allow_entry *v, size_t n);
/* d is the device (NULL unless rc is SB_OK); created tells a new pending
 * request from a known device. */
typedef void (*store_device_cb)(void *ud, int rc, const struct store_device *d, bool created);
typedef void (*store_device_list_cb)(void *ud, int rc, const struct store_device *v, size_t n);
typedef void (*store_session_list_cb)(void *ud, int rc, const struct store_session *v, size_t n);
typedef void (*store_cron_jobs_cb)(void *ud, int rc, const struct store_cron_job *v, size_t n);
typedef void (*store_cron_runs_cb)(void *ud, int rc, const struct store_cron_run *v, size_t n);
typedef void (*store_transcript_list_cb)(void *ud, int rc, const struct store_transcript_lines *v,
                                         size_t n);

/* Called on the loop thread after each group commit (for metrics). */
typedef void (*store_commit_cb)(void *ud, double seconds, size_t ops, int rc);

struct store_options {
	const char *backend;     /* "sqlite" (NULL means "sqlite") */
	const char *path;        /* SQLite file (copied); its directory must exist */
	int64_t busy_timeout_ms; /* 0 = 5000 */
	size_t batch_max;        /* ops in one transaction; 0 = 256 */
	/* Operations accepted and whose callbacks have not run yet (queued,
	 * being written, or waiting for the loop); one more is SB_ERR_AGAIN.
	 * 0 = 10000. */
	size_t queue_max;
	store_commit_cb on_commit; /* optional */
	void *on_commit_ud;
};

#define STORE_LAZY_DONE_MS 10
#define STORE_LAZY_KV_MS 1000

/* The largest max a claim accepts, and the most replies one inbox_done takes. */
#define STORE_CLAIM_MAX 1024

/* Pairing codes: uppercase letters and digits without the look-alikes
 * 0 O 1 I; valid for an hour; at most three pending per channel account. */
#define STORE_PAIRING_ALPHABET "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
#define STORE_PAIRING_CODE_LEN 8
#define STORE_PAIRING_TTL_MS (3600LL * 1000)
#define STORE_PAIRING_MAX_PENDING 3
/* The most entries pairing_list, allow_list, device_list and session_list
 * return. */
#define STORE_LIST_MAX 100000

/* Device requests: at most this many pending (a new one pushes the oldest
 * out), each for at most an hour. */
#define STORE_DEVICES_MAX_PENDING 32
#define STORE_DEVICE_PENDING_TTL_MS (3600LL * 1000)

/* ---- operations ---- */

/* Opens the store with opt->backend: creates and migrates the database
 * if needed, starts the writer and registers a uv_async_t handle on
 * loop. *out is set on SB_OK. Returns SB_ERR_CONFIG (no backend has
 * that name), SB_ERR_INVAL, SB_ERR_NOMEM, SB_ERR_IO, or SB_ERR_STORE
 * (cannot open, migration failed, or the file's schema is newer than
 * this build). */
int store_open(struct store **out, uv_loop_t *loop, const struct store_options *opt);
/* Refuses new operations (SB_ERR_CLOSED), finishes every queued one
 * and runs their callbacks on the calling thread, stops the writer,
 * closes the database and frees the store. Blocks until the writer is
 * joined; call it at shutdown only, never from a store callback. It
 * uv_close()s the store's async handle: run the loop afterwards (until
 * all handles are closed) so that the handle's memory is released.
 * NULL is a no-op. */
void store_close(struct store *s);
/* The name of the store's backend ("sqlite"). */
const char *store_backend_name(const struct store *s);

/* Adds a message, pending or (m->claim_lease_ms > 0) claimed; all string
 * fields are required, claim_lease_ms >= 0. A duplicate (channel,
 * account, dedupe_key) reports the existing id with duplicate=true (SB_OK,
 * nothing written). */
int store_inbox_put(struct store *s, const struct store_inbox_new *m, store_put_cb cb, void *ud);
/* Claims up to max (1..STORE_CLAIM_MAX) entries, oldest id first, for
 * lease_ms (>= 0): pending ones, and claimed ones whose lease has
 * expired (lease_until < now; this is how a crashed process's claims
 * come back). Sets them claimed, lease_until = now + lease_ms,
 * attempts + 1. n may be 0. */
int store_inbox_claim(struct store *s, size_t max, int64_t lease_ms, store_inbox_cb cb, void *ud);
/* Marks an entry done and, in the same transaction, puts the replies
 * (n may be 0, at most STORE_CLAIM_MAX; a reply's inbox_id of 0 means
 * this entry). Replies whose idempotency key exists are skipped. All or
 * nothing: if one reply fails, the entry is not marked done either.
 * SB_ERR_NOTFOUND when no entry has that id. */
int store_inbox_done(struct store *s, int64_t inbox_id, const struct store_outbox_new *replies,
                     size_t n, store_done_cb cb, void *ud);
/* The same, and cb gets the replies inserted claimed (claim_lease_ms >
 * 0; not those that were duplicates) as claimed items (attempts 0), in
 * the order given, to be sent at once: the reply needs no claim of its
 * own. */
int store_inbox_done_claimed(struct store *s, int64_t inbox_id,
                             const struct store_outbox_new *replies, size_t n, store_outbox_cb cb,
                             void *ud);
/* Gives a claimed entry back (pending again) without counting it done.
 * SB_ERR_NOTFOUND when no claimed entry has that id. */
int store_inbox_release(struct store *s, int64_t inbox_id, store_done_cb cb, void *ud);
/* Reads inbox_id's state and the reply committed with it (the first outbox
 * entry of that inbox id), so that a retry after a restart is answered from
 * the store. SB_ERR_NOTFOUND: no such entry. Loop thread only. */
int store_inbox_reply(struct store *s, int64_t inbox_id, store_reply_cb cb, void *ud);

/* Adds a pending entry; every string is required. A duplicate
 * idempotency key reports the existing id with duplicate=true. */
int store_outbox_put(struct store *s, const struct store_outbox_new *m, store_put_cb cb, void *ud);
/* Claims up to max entries, by due_at then id: pending ones with
 * due_at <= now, and claimed ones whose lease has expired. Same limits
 * and effects as inbox_claim. */
int store_outbox_claim_due(struct store *s, size_t max, int64_t lease_ms, store_outbox_cb cb,
                           void *ud);
/* Sent: records the channel's message id (may be NULL) and sent_at.
 * SB_ERR_NOTFOUND when no entry has that id. Lazy: it commits with the
 * next batch that writes, or within STORE_LAZY_DONE_MS. */
int store_outbox_done(struct store *s, int64_t id, const char *channel_msg_id, store_done_cb cb,
                      void *ud);
/* Not sent: records error (may be NULL) and makes it pending again with
 * due_at = retry_at (unix ms), or failed for good when retry_at < 0.
 * SB_ERR_NOTFOUND when no entry that is not already sent has that id. */
int store_outbox_failed(struct store *s, int64_t id, const char *error, int64_t retry_at,
                        store_done_cb cb, void *ud);

/* Reads a value (SB_ERR_NOTFOUND when absent) / inserts or replaces it
 * (value required). */
int store_kv_get(struct store *s, const char *ns, const char *key, store_kv_cb cb, void *ud);
/* value NULL deletes the key (no error when there was none). */
int store_kv_put(struct store *s, const char *ns, const char *key, const char *value,
                 store_done_cb cb, void *ud);
/* The same, lazy: it commits with the next batch that writes, or within
 * STORE_LAZY_KV_MS (for a value nobody waits on). */
int store_kv_put_lazy(struct store *s, const char *ns, const char *key, const char *value,
                      store_done_cb cb, void *ud);

/* Reads a session (SB_ERR_NOTFOUND and NULL when absent) / inserts or
 * replaces it (key, agent_id, session_id required). A put without meta
 * keeps the meta stored (a session's /model choice outlives its runs and
 * /new); "{}" clears it. */
int store_session_get(struct store *s, const char *key, store_session_cb cb, void *ud);
int store_session_put(struct store *s, const struct store_session *sess, store_done_cb cb,
                      void *ud);

/* Counts, read in the writer's transaction (see struct store_stats). */
int store_stats(struct store *s, store_stats_cb cb, void *ud);
/* Start-up recovery of a single-node gateway: every claimed inbox and
 * outbox entry is pending again (outbox entries due now). The counts
 * are what a crash left in flight. */
int store_recover(struct store *s, store_recover_cb cb, void *ud);

/* ---- pairing (every string required unless said otherwise) ---- */

/* The sender's pending code, or a new random one valid for
 * STORE_PAIRING_TTL_MS (expired requests are deleted first). The
 * callback gets SB_ERR_AGAIN when STORE_PAIRING_MAX_PENDING requests
 * of other senders are pending on (channel, account), and
 * SB_ERR_EXISTS when the sender is approved already. A caller sends
 * the code only when created is true, so that a sender who writes
 * again is not answered again. */
int store_pairing_request(struct store *s, const char *channel, const char *account,
                          const char *sender_id, store_pairing_cb cb, void *ud);
/* Pending, unexpired requests, oldest first; channel NULL = all. */
int store_pairing_list(struct store *s, const char *channel, store_pairing_list_cb cb, void *ud);
/* Approves the pending request with this code on channel (codes are
 * compared in constant time): the sender moves to the allow list and
 * the callback gets the request. SB_ERR_NOTFOUND when no unexpired
 * request has that code. */
int store_pairing_approve(struct store *s, const char *channel, const char *code,
                          store_pairing_cb cb, void *ud);
/* Deletes the pending request with this code (the sender may ask
 * again). SB_ERR_NOTFOUND as for approve. */
int store_pairing_deny(struct store *s, const char *channel, const char *code, store_pairing_cb cb,
                       void *ud);
/* Whether the sender is on the allow list. */
int store_allow_check(struct store *s, const char *channel, const char *account,
                      const char *sender_id, store_allow_cb cb, void *ud);
/* The whole allow list (channel NULL) or one channel's, by approval
 * time; at most STORE_LIST_MAX entries. For the routing table's
 * in-memory copy. */
int store_allow_list(struct store *s, const char *channel, store_allow_list_cb cb, void *ud);
/* Takes a sender off the allow list (account NULL: on every account
 * of the channel); from the next message on they are a stranger
 * again. SB_ERR_NOTFOUND when they were not on it. */
int store_allow_remove(struct store *s, const char *channel, const char *account,
                       const char *sender_id, store_done_cb cb, void *ud);

/* ---- sessions, devices ---- */

/* Sessions, most recently updated first; agent_id NULL = every
 * agent's; limit 1..STORE_LIST_MAX. */
int store_session_list(struct store *s, const char *agent_id, size_t limit,
                       store_session_list_cb cb, void *ud);
/* The device's record. An unknown device_id is added as pending with
 * d's public_key, client_id, platform, scopes and remote_addr
 * (created = true), after pending requests older than
 * STORE_DEVICE_PENDING_TTL_MS are deleted and, when
 * STORE_DEVICES_MAX_PENDING are pending, the oldest of them. A known
 * one gets last_seen_at and remote_addr updated and is returned as
 * stored. device_id and public_key are required. */
int store_device_request(struct store *s, const struct store_device *d, store_device_cb cb,
                         void *ud);
/* Finds a device by id (token_hash NULL), or an approved one by the
 * hash of its token (device_id NULL). SB_ERR_NOTFOUND when none. */
int store_device_get(struct store *s, const char *device_id, const char *token_hash,
                     store_device_cb cb, void *ud);
/* Every device: pending ones first, then approved, oldest first. */
int store_device_list(struct store *s, store_device_list_cb cb, void *ud);
/* Approves a pending device (its asked-for scopes become its grant);
 * the callback gets the record. SB_ERR_NOTFOUND when no device has
 * that id; SB_ERR_EXISTS when it is approved already. */
int store_device_approve(struct store *s, const char *device_id, store_device_cb cb, void *ud);
/* Replaces an approved device's token hash and marks it seen now.
 * SB_ERR_NOTFOUND when no approved device has that id. */
int store_device_set_token(struct store *s, const char *device_id, const char *token_hash,
                           store_done_cb cb, void *ud);
/* Forgets a device, pending or approved: its token stops working and
 * it has to be approved again. SB_ERR_NOTFOUND when unknown. */
int store_device_revoke(struct store *s, const char *device_id, store_done_cb cb, void *ud);

/* ---- cron jobs (gateway/sched/scheduler.c) ---- */

/* Inserts or replaces a job (id, spec, state and source required);
 * created_at of an existing job is kept. */
int store_cron_job_put(struct store *s, const struct store_cron_job *j, store_done_cb cb, void *ud);
/* Deletes a job and its run history. SB_ERR_NOTFOUND when unknown. */
int store_cron_job_delete(struct store *s, const char *id, store_done_cb cb, void *ud);
/* Every job, oldest first (at most STORE_LIST_MAX). */
int store_cron_job_list(struct store *s, store_cron_jobs_cb cb, void *ud);
/* Appends a run to its job's history (job_id and status required) and
 * keeps only the newest keep (>= 1) runs of that job; the callback
 * gets the run's id. */
int store_cron_run_add(struct store *s, const struct store_cron_run *r, size_t keep,
                       store_put_cb cb, void *ud);
/* Runs, newest first; job_id NULL = every job's; limit
 * 1..STORE_LIST_MAX. */
int store_cron_run_list(struct store *s, const char *job_id, size_t limit, store_cron_runs_cb cb,
                        void *ud);

/* ---- transcript lines not yet synced (gateway/pipeline/xsync.c) ---- */

/* Keeps the bytes a run appended to a transcript file (path, offset and
 * bytes required, len 1..STORE_TRANSCRIPT_BYTES_MAX) until the file is
 * synced; queued in the same loop iteration as the run's inbox_done, it
 * commits with it. The callback gets the row's id. Never SB_ERR_AGAIN
 * (bounded by the runs in flight). */
int store_transcript_put(struct store *s, const struct store_transcript_lines *l, store_put_cb cb,
                         void *ud);
/* Forgets every row with after < id <= upto (their files are synced;
 * after >= 0). Lazy: it commits with the next batch that writes, or within
 * STORE_LAZY_KV_MS. Never SB_ERR_AGAIN. */
int store_transcript_trim(struct store *s, int64_t after, int64_t upto, store_done_cb cb, void *ud);
/* Every row, by id (at most STORE_LIST_MAX): what start-up repair
 * compares with the files. */
int store_transcript_list(struct store *s, store_transcript_list_cb cb, void *ud);

#define STORE_TRANSCRIPT_BYTES_MAX ((size_t)16 << 20)

/* The schema version the SQLite backend migrates to. */
#define STORE_SQLITE_SCHEMA_VERSION 8

#endif
