/*
 * err.h - the one error enum of Switchboard.
 *
 * Every fallible function returns int: SB_OK (0) on success, or one of the
 * codes below. SB_ERR_AGAIN means "not now, try again later" (a full queue, a
 * store that is still opening) and is never a permanent failure.
 */
#ifndef SB_CORE_ERR_H
#define SB_CORE_ERR_H

enum sb_err {
	SB_OK = 0,
	SB_ERR_NOMEM,    /* allocation failed */
	SB_ERR_INVAL,    /* bad argument or malformed input */
	SB_ERR_IO,       /* file or socket error */
	SB_ERR_NOTFOUND, /* no such thing */
	SB_ERR_EXISTS,   /* already there (duplicate) */
	SB_ERR_AGAIN,    /* temporary: try again later */
	SB_ERR_TOOBIG,   /* a bound was hit */
	SB_ERR_TIMEOUT,  /* a deadline passed */
	SB_ERR_CONFIG,   /* configuration is invalid */
	SB_ERR_STORE,    /* the durable store failed */
	SB_ERR_PROTO,    /* a peer broke its protocol */
	SB_ERR_CLOSED,   /* the object is shutting down */
	SB_ERR_ABORTED,  /* cancelled by its owner */
	SB_ERR_PERM,     /* not allowed */
	SB_ERR_HTTP,     /* transport-level HTTP failure */
	SB_ERR__COUNT
};

/* Returns a static, human-readable string for rc; never NULL. Any thread. */
const char *sb_strerror(int rc);

#endif
