#include "err.h"

static const char *const sb_err_names[SB_ERR__COUNT] = {
    [SB_OK] = "success",
    [SB_ERR_NOMEM] = "out of memory",
    [SB_ERR_INVAL] = "invalid argument",
    [SB_ERR_IO] = "input/output error",
    [SB_ERR_NOTFOUND] = "not found",
    [SB_ERR_EXISTS] = "already exists",
    [SB_ERR_AGAIN] = "temporarily unavailable, try again",
    [SB_ERR_TOOBIG] = "too large",
    [SB_ERR_TIMEOUT] = "timed out",
    [SB_ERR_CONFIG] = "invalid configuration",
    [SB_ERR_STORE] = "store failure",
    [SB_ERR_PROTO] = "protocol error",
    [SB_ERR_CLOSED] = "closed",
    [SB_ERR_ABORTED] = "aborted",
    [SB_ERR_PERM] = "permission denied",
    [SB_ERR_HTTP] = "HTTP transport error",
};

const char *sb_strerror(int rc)
{
	if (rc < 0 || rc >= SB_ERR__COUNT)
		return "unknown error";
	return sb_err_names[rc];
}
