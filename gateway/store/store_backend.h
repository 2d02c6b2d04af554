/*
 * store_backend.h - the store's table of operations, and the contract of a
 * backend. Callers use store.h; this header is for gateway/store/ and its
 * backends (gateway/store/sqlite/; a PostgreSQL one is an addition).
 *
 * An operation is one line of STORE_OPS: its kind, its name N, and whether it
 * finishes claimed work. From that line come the kind's enum value, its slot
 * in struct store_op's argument union and its row in the table that replies
 * to callers. The name stands for four pieces of code, each of them a compile
 * or link error until it exists:
 *   struct store_args_N   below: the inputs, the results and the callback
 *   store_N()             store.h, gateway/store/ops_*.c: checks the
 *                         arguments, copies them into the operation, submits it
 *   store_reply_N()       gateway/store/ops_*.c: hands the results to the
 *                         callback (loop thread)
 *   <backend>_run_N()     each backend: does the work inside its transaction
 * So a new operation is one line here plus the code that is the operation.
 *
 * The life of an operation: store_N() (loop thread) allocates it with
 * store_op_new (which admits it or says why not), copies every string it was
 * given into the operation's memory, and hands it to store_op_submit. The
 * backend's submit takes it; the backend runs it (any thread it likes), sets
 * op->rc and the results, and later, on the loop thread, gives it to
 * store_op_finish, which runs its callback once and frees it. A backend that
 * commits in batches sets op->commit on the last operation of each commit.
 */
#ifndef SB_GATEWAY_STORE_BACKEND_H
#define SB_GATEWAY_STORE_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "gateway/store/store.h"

/* The operations that finish claimed work (an inbox entry done or released,
 * a delivery's outcome) are never refused for a full queue: refusing them
 * would strand what was claimed until a restart, and they are bounded by how
 * much can be claimed at once. */
#define STORE_OP_QUEUED 0
#define STORE_OP_FINISHES 1
/* Writes nothing: a batch of such operations alone commits no page and
 * syncs nothing, so a lazy operation waits for a batch that writes. */
#define STORE_OP_READS 2

/* X(KIND, name, flags): every operation of the store. */
#define STORE_OPS(X)                                                                               \
	X(INBOX_PUT, inbox_put, STORE_OP_QUEUED)                                                   \
	X(INBOX_CLAIM, inbox_claim, STORE_OP_QUEUED)                                               \
	X(INBOX_DONE, inbox_done, STORE_OP_FINISHES)                                               \
	X(INBOX_RELEASE, inbox_release, STORE_OP_FINISHES)                                         \
	X(INBOX_REPLY, inbox_reply, STORE_OP_READS)                                                \
	X(OUTBOX_PUT, outbox_put, STORE_OP_QUEUED)                                                 \
	X(OUTBOX_CLAIM_DUE, outbox_claim_due, STORE_OP_QUEUED)                                     \
	X(OUTBOX_DONE, outbox_done, STORE_OP_FINISHES)                                             \
	X(OUTBOX_FAILED, outbox_failed, STORE_OP_FINISHES)                                         \
	X(STATS, stats, STORE_OP_READS)                                                            \
	X(RECOVER, recover, STORE_OP_QUEUED)                                                       \
	X(KV_GET, kv_get, STORE_OP_READS)                                                          \
	X(KV_PUT, kv_put, STORE_OP_QUEUED)                                                         \
	X(SESSION_GET, session_get, STORE_OP_READS)                                                \
	X(SESSION_PUT, session_put, STORE_OP_QUEUED)                                               \
	X(SESSION_LIST, session_list, STORE_OP_READS)                                              \
	X(PAIRING_REQUEST, pairing_request, STORE_OP_QUEUED)                                       \
	X(PAIRING_LIST, pairing_list, STORE_OP_READS)                                              \
	X(PAIRING_APPROVE, pairing_approve, STORE_OP_QUEUED)                                       \
	X(PAIRING_DENY, pairing_deny, STORE_OP_QUEUED)                                             \
	X(ALLOW_CHECK, allow_check, STORE_OP_READS)                                                \
	X(ALLOW_LIST, allow_list, STORE_OP_READS)                                                  \
	X(ALLOW_REMOVE, allow_remove, STORE_OP_QUEUED)                                             \
	X(DEVICE_REQUEST, device_request, STORE_OP_QUEUED)                                         \
	X(DEVICE_GET, device_get, STORE_OP_READS)                                                  \
	X(DEVICE_LIST, device_list, STORE_OP_READS)                                                \
	X(DEVICE_APPROVE, device_approve, STORE_OP_QUEUED)                                         \
	X(DEVICE_SET_TOKEN, device_set_token, STORE_OP_QUEUED)                                     \
	X(DEVICE_REVOKE, device_revoke, STORE_OP_QUEUED)                                           \
	X(CRON_JOB_PUT, cron_job_put, STORE_OP_QUEUED)                                             \
	X(CRON_JOB_DELETE, cron_job_delete, STORE_OP_QUEUED)                                       \
	X(CRON_JOB_LIST, cron_job_list, STORE_OP_READS)                                            \
	X(CRON_RUN_ADD, cron_run_add, STORE_OP_QUEUED)                                             \
	X(CRON_RUN_LIST, cron_run_list, STORE_OP_READS)                                            \
	X(TRANSCRIPT_PUT, transcript_put, STORE_OP_FINISHES)                                       \
	X(TRANSCRIPT_TRIM, transcript_trim, STORE_OP_FINISHES)                                     \
	X(TRANSCRIPT_LIST, transcript_list, STORE_OP_READS)

#define STORE_OP_ENUM_(K, n, f) STORE_OP_##K,
enum store_op_kind { STORE_OPS(STORE_OP_ENUM_) STORE_OP__COUNT };
#undef STORE_OP_ENUM_

/* ---- the arguments and results of each kind ----
 * Strings are copies owned by the operation (store_op_strdup); results are
 * filled by the backend's run and are borrowed by the callback. */

/* messages (gateway/store/ops_messages.c) */
struct store_args_inbox_put {
	struct store_inbox_new m;
	store_put_cb cb;
	int64_t id;
	bool duplicate;
};
struct store_args_inbox_claim {
	size_t max;
	int64_t lease_ms;
	store_inbox_cb cb;
	struct store_inbox_item *items; /* max of them */
	size_t n;
};
struct store_args_inbox_done {
	int64_t inbox_id;
	struct store_outbox_new *replies;
	size_t n;
	store_done_cb cb;
	store_outbox_cb items_cb; /* store_inbox_done_claimed's */
	/* out: the replies inserted claimed (n of them at most) */
	struct store_outbox_item *claimed;
	size_t n_claimed;
};
struct store_args_inbox_release {
	int64_t inbox_id;
	store_done_cb cb;
};
struct store_args_inbox_reply {
	int64_t inbox_id;
	store_reply_cb cb;
	const char *state;   /* out */
	const char *payload; /* out: the reply's outbox payload, or NULL */
};
struct store_args_outbox_put {
	struct store_outbox_new m;
	store_put_cb cb;
	int64_t id;
	bool duplicate;
};
struct store_args_outbox_claim_due {
	size_t max;
	int64_t lease_ms;
	store_outbox_cb cb;
	struct store_outbox_item *items; /* max of them */
	size_t n;
};
struct store_args_outbox_done {
	int64_t id;
	const char *channel_msg_id;
	store_done_cb cb;
};
struct store_args_outbox_failed {
	int64_t id;
	const char *error;
	int64_t retry_at; /* < 0 (always -1): failed for good */
	store_done_cb cb;
};
struct store_args_stats {
	store_stats_cb cb;
	struct store_stats st;
};
struct store_args_recover {
	store_recover_cb cb;
	int64_t inbox, outbox;
};

/* keyed state: kv and sessions (gateway/store/ops_state.c) */
struct store_args_kv_get {
	const char *ns, *key;
	store_kv_cb cb;
	const char *value;
};
struct store_args_kv_put {
	const char *ns, *key, *value; /* value NULL deletes */
	store_done_cb cb;
};
struct store_args_session_get {
	store_session_cb cb;
	struct store_session sess; /* key in, the rest out */
};
struct store_args_session_put {
	struct store_session sess;
	store_done_cb cb;
};
struct store_args_session_list {
	const char *agent_id; /* NULL: every agent's */
	size_t limit;
	store_session_list_cb cb;
	struct store_session *v;
	size_t n;
};

/* transcript lines not yet synced to their file (gateway/store/ops_transcripts.c) */
struct store_args_transcript_put {
	struct store_transcript_lines l;
	store_put_cb cb;
	int64_t id;
};
struct store_args_transcript_trim {
	int64_t after, upto;
	store_done_cb cb;
};
struct store_args_transcript_list {
	store_transcript_list_cb cb;
	struct store_transcript_lines *v;
	size_t n;
};

/* identity: pairing, the allow list, devices (gateway/store/ops_identity.c) */
struct store_args_pairing_request {
	struct store_pairing p; /* channel, account, sender_id in; the rest out */
	store_pairing_cb cb;
	bool created;
};
struct store_args_pairing_list {
	const char *channel; /* NULL: every channel's */
	store_pairing_list_cb cb;
	struct store_pairing *v;
	size_t n;
};
/* approve and deny: channel and code (upper case) in, the request out */
struct store_args_pairing_approve {
	struct store_pairing p;
	store_pairing_cb cb;
};
struct store_args_pairing_deny {
	struct store_pairing p;
	store_pairing_cb cb;
};
struct store_args_allow_check {
	const char *channel, *account, *sender_id;
	store_allow_cb cb;
	bool allowed;
};
struct store_args_allow_list {
	const char *channel; /* NULL: every channel's */
	store_allow_list_cb cb;
	struct store_allow_entry *v;
	size_t n;
};
struct store_args_allow_remove {
	const char *channel, *account, *sender_id; /* account NULL: every account */
	store_done_cb cb;
};
struct store_args_device_request {
	struct store_device d; /* the request in, the record out */
	store_device_cb cb;
	bool created;
};
struct store_args_device_get {
	const char *device_id, *token_hash; /* exactly one of them */
	store_device_cb cb;
	struct store_device d;
};
struct store_args_device_list {
	store_device_list_cb cb;
	struct store_device *v;
	size_t n;
};
struct store_args_device_approve {
	const char *device_id;
	store_device_cb cb;
	struct store_device d;
};
struct store_args_device_set_token {
	const char *device_id, *token_hash;
	store_done_cb cb;
};
struct store_args_device_revoke {
	const char *device_id;
	store_done_cb cb;
};

/* cron jobs and their runs (gateway/store/ops_cron.c) */
struct store_args_cron_job_put {
	struct store_cron_job j;
	store_done_cb cb;
};
struct store_args_cron_job_delete {
	const char *id;
	store_done_cb cb;
};
struct store_args_cron_job_list {
	store_cron_jobs_cb cb;
	struct store_cron_job *v;
	size_t n;
};
struct store_args_cron_run_add {
	struct store_cron_run r;
	size_t keep;
	store_put_cb cb;
	int64_t id;
};
struct store_args_cron_run_list {
	const char *job_id; /* NULL: every job's */
	size_t limit;
	store_cron_runs_cb cb;
	struct store_cron_run *v;
	size_t n;
};

/* ---- operations ---- */

/* What a backend records on the last operation of a commit, for on_commit. */
struct store_commit {
	bool end; /* this operation is the last of its commit */
	int rc;
	size_t ops;
	double seconds;
};

#define STORE_OP_ARGS_(K, n, f) struct store_args_##n n;

struct store_op {
	struct store_op *next; /* the backend's queues */
	enum store_op_kind kind;
	int rc; /* set by the backend's run */
	void *ud;
	/* > 0: nobody waits on it: it may wait that many ms for the next
	 * commit that writes (store.h). */
	unsigned lazy_ms;
	/* The loop time (uv_now) by which a lazy one must commit, set when
	 * the backend queues it. */
	uint64_t lazy_due_at;
	struct store_commit commit;
	/* Every allocation the operation owns, freed with it. */
	void **mem;
	size_t nmem, capmem;
	union {
		STORE_OPS(STORE_OP_ARGS_)
	} a;
};

#undef STORE_OP_ARGS_

/* Every backend's struct begins with this; store_base_init fills it. */
struct store {
	const struct store_backend *backend;
	/* Loop thread only. */
	size_t queue_max;
	size_t outstanding; /* accepted, callback not run yet */
	bool closing;
	store_commit_cb on_commit;
	void *on_commit_ud;
};

struct store_backend {
	const char *name;
	/* Allocates the backend's struct (struct store first, set up with
	 * store_base_init), opens and migrates the database and starts
	 * whatever runs operations. Codes as for store_open. */
	int (*open)(struct store **out, uv_loop_t *loop, const struct store_options *opt);
	/* Takes an admitted operation (SB_OK) or leaves it to the caller
	 * (any other code). A taken operation is run and, on the loop thread
	 * or within close, handed to store_op_finish exactly once. */
	int (*submit)(struct store *s, struct store_op *op);
	/* Called by store_close after s->closing is set: finishes every taken
	 * operation (store_op_finish on the calling thread), releases the
	 * database and frees s. */
	void (*close)(struct store *s);
};

/* The backends (listed for store_open in gateway/store/backends.c, the one
 * file of the store that knows them). */
extern const struct store_backend store_sqlite_backend;

/* Sets up the common part of a backend's struct from the options. */
void store_base_init(struct store *s, const struct store_backend *b,
                     const struct store_options *opt);

/* The default of store_options.queue_max. */
#define STORE_DEFAULT_QUEUE_MAX 10000

/* Whether an operation of kind writes nothing (STORE_OP_READS). */
bool store_op_reads_only(enum store_op_kind kind);
/* The operation's name ("inbox_put"), for logs. */
const char *store_op_name(enum store_op_kind kind);

/* Checks that s accepts an operation of this kind now (SB_ERR_CLOSED,
 * SB_ERR_AGAIN) and allocates it for ud (SB_ERR_NOMEM). Loop thread. */
int store_op_new(struct store *s, enum store_op_kind kind, void *ud, struct store_op **out);
/* Hands op to the backend; op is the backend's on SB_OK and freed otherwise.
 * Loop thread. */
int store_op_submit(struct store *s, struct store_op *op);
/* Runs op's callback with its results and frees it. Loop thread (or the
 * thread that runs store_close). */
void store_op_finish(struct store *s, struct store_op *op);
/* Frees op and everything it owns; NULL is a no-op. */
void store_op_free(struct store_op *op);

/* The operation's memory. Any thread that holds the operation. */
/* Records p as owned by op; p NULL, or no room to record it, is SB_ERR_NOMEM
 * (and p is freed). */
int store_op_keep(struct store_op *op, void *p);
/* Copies s (NULL stays NULL) into op's memory. */
int store_op_strdup(struct store_op *op, const char *s, const char **out);
/* Copies n bytes and a terminating NUL into op's memory. */
int store_op_memdup(struct store_op *op, const void *p, size_t n, const char **out);
/* Zeroed room for n (0 counts as 1) elements of size, owned by op. */
int store_op_calloc(struct store_op *op, size_t n, size_t size, void **out);

/* The replies (ops_*.c), one per kind, for the table in store.c. */
#define STORE_OP_REPLY_(K, n, f) void store_reply_##n(struct store_op *op);
STORE_OPS(STORE_OP_REPLY_)
#undef STORE_OP_REPLY_

#endif
