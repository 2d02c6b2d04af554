/*
 * server_stream.h - streamed HTTP answers (chunked transfer encoding) on the
 * gateway's HTTP server: the OpenAI-compatible endpoint's server-sent
 * events, and any other answer whose body is not known when it starts.
 *
 * A request is answered either with server_respond (one body) or with
 * server_stream_start, then any number of server_stream_write, then
 * server_stream_end: headers go out at once (no Content-Length, with
 * "Transfer-Encoding: chunked"), each write becomes one chunk, and end
 * writes the last, empty chunk. The request stays valid until
 * server_stream_end, which the caller must call exactly once after
 * server_stream_start, whatever the earlier calls returned, even after the
 * client went away (that is what frees the request).
 *
 * Implemented in gateway/http/server.c (it needs the request's internals).
 *
 * Loop thread only.
 */
#ifndef SB_GATEWAY_SERVER_STREAM_H
#define SB_GATEWAY_SERVER_STREAM_H

#include <stdbool.h>
#include <stddef.h>

#include "gateway/http/server.h"

/* Unsent bytes one streamed answer may hold; past it writes fail. */
#define SERVER_STREAM_PENDING_MAX ((size_t)8 << 20)

/* Starts a streamed answer: status, content type (copied), optional extra
 * headers as a NULL-terminated "Name: value" list. Counts the answer in
 * the route's metrics. Returns SB_OK; SB_ERR_INVAL when r was answered
 * already (nothing changes: do not call server_stream_end then);
 * SB_ERR_CLOSED when the client is gone (call server_stream_end);
 * SB_ERR_NOMEM. */
int server_stream_start(struct server_request *r, int status, const char *content_type,
                        const char *const *headers);

/* Queues len bytes (copied) as one chunk. len 0 is a no-op. Returns SB_OK;
 * SB_ERR_CLOSED when the client is gone; SB_ERR_TOOBIG when the client
 * reads too slowly (SERVER_STREAM_PENDING_MAX unsent bytes); SB_ERR_INVAL
 * when the stream was not started or has ended; SB_ERR_NOMEM. */
int server_stream_write(struct server_request *r, const void *data, size_t len);

/* Ends the stream once what was queued is written, then frees r (at once
 * when the client is gone). Returns SB_OK, or SB_ERR_CLOSED when the
 * client was gone (r is freed either way). */
int server_stream_end(struct server_request *r);

/* Whether the client of a started stream went away. */
bool server_stream_gone(const struct server_request *r);

#endif
