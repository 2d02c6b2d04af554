/*
 * bench_pipeline.c - load generator for the webhook pipeline.
 *
 *   bench_pipeline BINARY HOME [MESSAGES] [LEVELS]
 *   bench_pipeline --echo [MESSAGES] [LEVELS]
 *
 * Closed-loop senders (LEVELS, default "1,8,64"; MESSAGES round trips per
 * level, default 400): each sender signs a webhook (Standard Webhooks,
 * HMAC-SHA256 with a whsec_ secret), POSTs it on its own keep-alive
 * connection to a callback-mode hook, and waits for the signed callback at
 * the built-in receiver (which verifies webhook-id, webhook-timestamp and the
 * v1 signature, and matches the callback to its message by event_id) before
 * it sends the next. Every message is a new conversation. One thread, one
 * epoll loop, a minimal HTTP/1.1 client and server: the driver's own cost is
 * printed with the figures.
 *
 * With BINARY and HOME (made by `switchboard init`), the driver writes the
 * configuration (a scripted provider whose every turn calls `ls` once and then
 * answers, one callback hook), starts `BINARY gateway` on a free loopback port
 * and, per level after a warm-up, reads around the timed messages the
 * gateway's CPU time (/proc/PID/stat, all threads) and I/O counters
 * (/proc/PID/io). Then, when `perf` can count tracepoints here, a separate
 * counting phase of the same load (COUNT_MESSAGES, default a quarter of
 * MESSAGES, at least 50) gives its system calls and fsync/fdatasync/syncfs calls
 * (perf stat -p, enabled only while those messages flow; kept out of the
 * timed phase because the tracepoints slow each call). With --echo the
 * gateway is replaced by a child process that answers 202 and calls back at
 * once: the driver's ceiling.
 *
 * Environment: LLM_PORT (use the OpenAI-compatible model server
 * bench_llm.js on that port instead of the in-process scripted provider),
 * PIPELINE_PREFIX (figure names, default "pipeline_" or "pipeline_echo_"),
 * COUNT_MESSAGES, PERF=0 (no counting phase). Prints `name: value` lines;
 * exits 1 on any failure, an invalid callback or a callback that matches no
 * outstanding message. Loopback (127.0.0.1) only.
 *
 * Before the gateway starts, the driver times the creation of 200 files in
 * a directory of the home (`fs_create_us_per_file`, the files kept until
 * the gateway has stopped): every message of this pipeline is a new
 * conversation with a new transcript file, and on some file systems that
 * cost swings by an order of magnitude with their state (ext4 without a
 * journal skips inodes freed in the last half minute, so a home made just
 * after another was deleted pays hundreds of microseconds per file;
 * docs/performance.md). Read the figures of two runs side by side only when
 * this one is alike.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BP_SENDERS_MAX 256
#define BP_CONNS_MAX 1024
#define BP_BUF 16384
#define BP_STALL_MS 30000
#define BP_SIG_B64 64 /* sodium_base64_ENCODED_LEN(32, ORIGINAL) is 45 */

static const char HOOK_KEY[] = "bench-hook-secret-0123456789abcdef";
static const char CB_KEY[] = "bench-callback-secret-0123456789ab";

enum conn_kind {
	CK_RECV_LISTEN, /* the callback receiver's socket */
	CK_RECV,        /* a connection the gateway made to the receiver */
	CK_SEND,        /* a sender's connection to the gateway */
	CK_ECHO_LISTEN, /* --echo: the stand-in gateway's socket */
	CK_ECHO_IN,     /* --echo: a sender's connection, accepted */
	CK_ECHO_OUT,    /* --echo: the callback connection paired with a CK_ECHO_IN */
};

struct sender;

struct conn {
	enum conn_kind kind;
	int fd;
	bool want_out;
	bool continued;   /* 100 Continue sent for the request in rbuf */
	struct sender *s; /* CK_SEND */
	struct conn *out; /* CK_ECHO_IN: its callback connection; CK_ECHO_OUT: that CK_ECHO_IN */
	int slot;         /* in bench.conns, for those conn_new made */
	size_t rlen, wlen, woff;
	char rbuf[BP_BUF + 1];
	char wbuf[BP_BUF];
};

struct sender {
	int index;
	struct conn c;
	unsigned long seq;
	char id[64];
	double t0, tack, t1;
	bool busy, acked, answered;
	/* The request in flight, sent again on a new connection when the
	 * gateway closes the old one before any byte of an answer (an idle
	 * keep-alive connection it timed out just as the request went). */
	char req[1024];
	int req_len;
	int resends;
};

struct bench {
	int ep;
	int target_port; /* the gateway, or the echo child */
	int recv_port;
	const char *prefix;
	struct sender senders[BP_SENDERS_MAX];
	int level;
	long target, issued, completed;
	double *lat, *ack;
	long invalid, stray;
	long resent; /* requests sent again (see struct sender) */
	bool failed;
	bool echo_child;
	struct conn *conns[BP_CONNS_MAX]; /* the connections conn_new made */
	int nconns;
	double best, best_cpu; /* --echo: the fastest level and its driver CPU per message */
};

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* The gateway (or the echo child), stopped by die(): the one file-level
 * variable, so that a failure anywhere does not leave it running. */
static pid_t bp_child;

static void die(const char *what)
{
	fprintf(stderr, "bench_pipeline: %s\n", what);
	if (bp_child > 0)
		kill(bp_child, SIGTERM);
	exit(1);
}

static void sign(const char *key, const char *id, long long ts, const char *body, size_t body_len,
                 char out[BP_SIG_B64])
{
	crypto_auth_hmacsha256_state st;
	unsigned char mac[crypto_auth_hmacsha256_BYTES];
	char tsb[24];
	int n = snprintf(tsb, sizeof tsb, "%lld", ts);

	crypto_auth_hmacsha256_init(&st, (const unsigned char *)key, strlen(key));
	crypto_auth_hmacsha256_update(&st, (const unsigned char *)id, strlen(id));
	crypto_auth_hmacsha256_update(&st, (const unsigned char *)".", 1);
	crypto_auth_hmacsha256_update(&st, (const unsigned char *)tsb, (size_t)n);
	crypto_auth_hmacsha256_update(&st, (const unsigned char *)".", 1);
	crypto_auth_hmacsha256_update(&st, (const unsigned char *)body, body_len);
	crypto_auth_hmacsha256_final(&st, mac);
	sodium_bin2base64(out, BP_SIG_B64, mac, sizeof mac, sodium_base64_VARIANT_ORIGINAL);
}

static void whsec(const char *key, char *out, size_t size)
{
	memcpy(out, "whsec_", 6);
	sodium_bin2base64(out + 6, size - 6, (const unsigned char *)key, strlen(key),
	                  sodium_base64_VARIANT_ORIGINAL);
}

/* ---- HTTP/1.1 framing (Content-Length bodies only) ---- */

struct http_msg {
	int status; /* responses; 0 for requests */
	size_t head_len, body_len;
	const char *id, *ts, *sig;
	size_t id_len, ts_len, sig_len;
	bool expect;
};

/* 1: a whole message at buf; 0: not yet (m->head_len set once the head is
 * in); -1: malformed or unsupported. */
static int http_parse(const char *buf, size_t len, struct http_msg *m)
{
	const char *end = memmem(buf, len, "\r\n\r\n", 4), *p, *eol;
	unsigned long cl = 0;

	memset(m, 0, sizeof *m);
	if (!end)
		return len >= BP_BUF ? -1 : 0;
	m->head_len = (size_t)(end - buf) + 4;
	if (len >= 12 && memcmp(buf, "HTTP/1.1 ", 9) == 0)
		m->status = (int)strtol(buf + 9, NULL, 10);
	p = memchr(buf, '\n', (size_t)(end - buf));
	for (p = p ? p + 1 : end; p < end; p = eol + 2) {
		const char *colon, *v;
		size_t vlen;

		eol = memmem(p, (size_t)(end + 2 - p), "\r\n", 2);
		colon = memchr(p, ':', (size_t)(eol - p));
		if (!colon)
			continue;
		for (v = colon + 1; v < eol && (*v == ' ' || *v == '\t'); v++)
			;
		vlen = (size_t)(eol - v);
#define IS(name)                                                                                   \
	((size_t)(colon - p) == sizeof name - 1 && strncasecmp(p, name, sizeof name - 1) == 0)
		if (IS("content-length")) {
			char *e;

			cl = strtoul(v, &e, 10);
			if (e == v || cl > BP_BUF)
				return -1;
		} else if (IS("transfer-encoding")) {
			return -1;
		} else if (IS("webhook-id")) {
			m->id = v, m->id_len = vlen;
		} else if (IS("webhook-timestamp")) {
			m->ts = v, m->ts_len = vlen;
		} else if (IS("webhook-signature")) {
			m->sig = v, m->sig_len = vlen;
		} else if (IS("expect")) {
			m->expect = vlen >= 3 && strncmp(v, "100", 3) == 0;
		}
#undef IS
	}
	m->body_len = cl;
	if (m->head_len + cl > BP_BUF)
		return -1;
	return len >= m->head_len + cl ? 1 : 0;
}

/* ---- connections ---- */

static void conn_events(struct bench *b, struct conn *c, bool out)
{
	struct epoll_event ev = {.events = EPOLLIN | (out ? EPOLLOUT : 0), .data.ptr = c};

	if (c->want_out != out) {
		c->want_out = out;
		epoll_ctl(b->ep, EPOLL_CTL_MOD, c->fd, &ev);
	}
}

static void conn_add(struct bench *b, struct conn *c, int fd, enum conn_kind kind)
{
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
	int one = 1;

	c->kind = kind;
	c->fd = fd;
	c->rlen = c->wlen = c->woff = 0;
	c->want_out = false;
	c->continued = false;
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	if (kind != CK_RECV_LISTEN && kind != CK_ECHO_LISTEN)
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	if (epoll_ctl(b->ep, EPOLL_CTL_ADD, fd, &ev) != 0)
		die("epoll_ctl");
}

static void conn_close(struct bench *b, struct conn *c)
{
	if (c->fd < 0)
		return;
	epoll_ctl(b->ep, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	c->fd = -1;
}

static void conn_flush(struct bench *b, struct conn *c)
{
	while (c->woff < c->wlen) {
		ssize_t n = write(c->fd, c->wbuf + c->woff, c->wlen - c->woff);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			break;
		if (n <= 0) {
			c->woff = c->wlen;
			break;
		}
		c->woff += (size_t)n;
	}
	if (c->woff == c->wlen)
		c->woff = c->wlen = 0;
	conn_events(b, c, c->wlen > 0);
}

static void conn_write(struct bench *b, struct conn *c, const char *data, size_t len)
{
	if (c->woff > 0 && c->woff == c->wlen)
		c->woff = c->wlen = 0;
	if (c->wlen + len > sizeof c->wbuf)
		die("a connection's output buffer is full");
	memcpy(c->wbuf + c->wlen, data, len);
	c->wlen += len;
	if (!c->want_out)
		conn_flush(b, c);
}

static int listen_loopback(int *port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof sa;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

	if (fd < 0)
		die("socket");
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, 1024) != 0 ||
	    getsockname(fd, (struct sockaddr *)&sa, &len) != 0)
		die("cannot listen on 127.0.0.1");
	*port = ntohs(sa.sin_port);
	return fd;
}

static int connect_loopback(int port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET,
	                         .sin_port = htons((unsigned short)port),
	                         .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

/* ---- the senders ---- */

/* Writes s's request, on a new connection when it has none. */
static void sender_write(struct bench *b, struct sender *s)
{
	if (s->c.fd < 0) {
		int fd = connect_loopback(b->target_port);

		if (fd < 0)
			die("cannot connect to the gateway");
		conn_add(b, &s->c, fd, CK_SEND);
	}
	conn_write(b, &s->c, s->req, (size_t)s->req_len);
}

static void sender_send(struct bench *b, struct sender *s)
{
	char body[256], sig[BP_SIG_B64], *req = s->req;
	long long ts = (long long)time(NULL);
	int blen, rlen;

	s->seq++;
	snprintf(s->id, sizeof s->id, "pb_%d_%d_%lu", b->level, s->index, s->seq);
	blen = snprintf(body, sizeof body,
	                "{\"text\":\"bench message %lu\",\"sender\":\"bench-c%d-s%d\","
	                "\"conversation\":\"bench-c%d-s%d-m%lu\"}",
	                s->seq, b->level, s->index, b->level, s->index, s->seq);
	sign(HOOK_KEY, s->id, ts, body, (size_t)blen, sig);
	rlen = snprintf(
	    req, sizeof s->req,
	    "POST /hooks/bench HTTP/1.1\r\nHost: 127.0.0.1\r\n"
	    "Content-Type: application/json\r\nContent-Length: %d\r\n"
	    "webhook-id: %s\r\nwebhook-timestamp: %lld\r\nwebhook-signature: v1,%s\r\n\r\n%s",
	    blen, s->id, ts, sig, body);
	if (rlen <= 0 || (size_t)rlen >= sizeof s->req)
		die("request too long");
	s->req_len = rlen;
	s->resends = 0;
	s->busy = true;
	s->acked = s->answered = false;
	s->t0 = now_ms();
	sender_write(b, s);
}

static void sender_check_done(struct bench *b, struct sender *s)
{
	if (!s->acked || !s->answered)
		return;
	s->busy = false;
	b->lat[b->completed] = s->t1 - s->t0;
	b->ack[b->completed] = s->tack - s->t0;
	b->completed++;
	if (b->issued < b->target) {
		b->issued++;
		sender_send(b, s);
	}
}

static void on_send_response(struct bench *b, struct conn *c, const struct http_msg *m)
{
	struct sender *s = c->s;

	if (!s->busy || s->acked) {
		b->stray++;
		return;
	}
	if (m->status != 202) {
		fprintf(stderr, "bench_pipeline: the gateway answered %d\n", m->status);
		b->failed = true;
		return;
	}
	s->acked = true;
	s->tack = now_ms();
	sender_check_done(b, s);
}

/* ---- the callback receiver ---- */

/* Whether the signature header holds a "v1,EXPECTED" entry. */
static bool sig_has(const char *sig, size_t len, const char *expected)
{
	size_t elen = strlen(expected);
	const char *p = sig, *end = sig + len;

	while (p < end) {
		const char *sp = memchr(p, ' ', (size_t)(end - p));
		size_t tlen = (size_t)((sp ? sp : end) - p);

		if (tlen == elen + 3 && memcmp(p, "v1,", 3) == 0 &&
		    memcmp(p + 3, expected, elen) == 0)
			return true;
		p = sp ? sp + 1 : end;
	}
	return false;
}

static bool header_copy(char *out, size_t size, const char *v, size_t len)
{
	if (!v || len == 0 || len >= size)
		return false;
	memcpy(out, v, len);
	out[len] = '\0';
	return true;
}

/* The sender an event id "pb_LEVEL_INDEX_SEQ" belongs to, or NULL. */
static struct sender *sender_of(struct bench *b, const char *eid)
{
	char *e;
	long level, index;

	if (strncmp(eid, "pb_", 3) != 0)
		return NULL;
	level = strtol(eid + 3, &e, 10);
	if (*e != '_' || level != b->level)
		return NULL;
	index = strtol(e + 1, &e, 10);
	if (*e != '_' || index < 0 || index >= BP_SENDERS_MAX)
		return NULL;
	return &b->senders[index];
}

static void on_callback(struct bench *b, struct conn *c, const char *req, const struct http_msg *m)
{
	static const char ok[] = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
	static const char bad[] = "HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n";
	const char *body = req + m->head_len, *k, *q;
	char id[160], tsb[24], expected[BP_SIG_B64], eid[64];
	struct sender *s;
	bool valid = false;

	if (header_copy(id, sizeof id, m->id, m->id_len) &&
	    header_copy(tsb, sizeof tsb, m->ts, m->ts_len) && m->sig) {
		char *e;
		long long ts = strtoll(tsb, &e, 10), skew = ts - (long long)time(NULL);

		if (e != tsb && *e == '\0' && skew <= 300 && skew >= -300) {
			sign(CB_KEY, id, ts, body, m->body_len, expected);
			valid = sig_has(m->sig, m->sig_len, expected);
		}
	}
	if (!valid) {
		b->invalid++;
		conn_write(b, c, bad, sizeof bad - 1);
		return;
	}
	conn_write(b, c, ok, sizeof ok - 1);
	k = memmem(body, m->body_len, "\"event_id\":\"", 12);
	q = k ? memchr(k + 12, '"', (size_t)(body + m->body_len - (k + 12))) : NULL;
	if (!q || !header_copy(eid, sizeof eid, k + 12, (size_t)(q - (k + 12)))) {
		b->stray++;
		return;
	}
	s = sender_of(b, eid);
	if (!s || !s->busy || s->answered || strcmp(s->id, eid) != 0) {
		b->stray++;
		return;
	}
	s->answered = true;
	s->t1 = now_ms();
	sender_check_done(b, s);
}

/* ---- --echo: the stand-in gateway ---- */

static struct conn *conn_new(struct bench *b, int fd, enum conn_kind kind)
{
	struct conn *c;

	if (b->nconns >= BP_CONNS_MAX) {
		close(fd);
		return NULL;
	}
	if (!(c = calloc(1, sizeof *c)))
		die("out of memory");
	conn_add(b, c, fd, kind);
	c->slot = b->nconns;
	b->conns[b->nconns++] = c;
	return c;
}

static void conn_free(struct bench *b, struct conn *c)
{
	conn_close(b, c);
	b->conns[c->slot] = b->conns[--b->nconns];
	b->conns[c->slot]->slot = c->slot;
	free(c);
}

static void on_echo_request(struct bench *b, struct conn *c, const struct http_msg *m)
{
	static const char resp[] = "HTTP/1.1 202 Accepted\r\nContent-Type: application/json\r\n"
	                           "Content-Length: 19\r\n\r\n{\"status\":\"queued\"}";
	char id[64], cid[80], body[256], sig[BP_SIG_B64], out[1024];
	long long ts = (long long)time(NULL);
	int blen, olen;

	conn_write(b, c, resp, sizeof resp - 1);
	if (!header_copy(id, sizeof id, m->id, m->id_len))
		return;
	snprintf(cid, sizeof cid, "cb_%s", id);
	blen = snprintf(body, sizeof body,
	                "{\"type\":\"message.reply\",\"hook\":\"bench\",\"event_id\":\"%s\","
	                "\"text\":\"done\",\"status\":\"ok\"}",
	                id);
	sign(CB_KEY, cid, ts, body, (size_t)blen, sig);
	olen = snprintf(
	    out, sizeof out,
	    "POST /replies HTTP/1.1\r\nHost: 127.0.0.1\r\n"
	    "Content-Type: application/json\r\nContent-Length: %d\r\n"
	    "webhook-id: %s\r\nwebhook-timestamp: %lld\r\nwebhook-signature: v1,%s\r\n\r\n%s",
	    blen, cid, ts, sig, body);
	if (!c->out) {
		int fd = connect_loopback(b->recv_port);

		if (fd < 0)
			die("echo: cannot connect to the receiver");
		if (!(c->out = conn_new(b, fd, CK_ECHO_OUT)))
			die("echo: too many connections");
		c->out->out = c;
	}
	conn_write(b, c->out, out, (size_t)olen);
}

/* ---- the loop ---- */

struct graveyard {
	struct conn *dead[BP_CONNS_MAX];
	int n;
};

static void conn_bury(struct bench *b, struct graveyard *g, struct conn *c)
{
	conn_close(b, c);
	if (c->kind == CK_SEND)
		return; /* a sender's own connection: reconnected when it sends again */
	if (c->out) {
		c->out->out = NULL;
		if (c->kind == CK_ECHO_IN)
			conn_bury(b, g, c->out);
		c->out = NULL;
	}
	if (g->n < BP_CONNS_MAX)
		g->dead[g->n++] = c;
}

static void conn_gone(struct bench *b, struct graveyard *g, struct conn *c)
{
	struct sender *s = c->kind == CK_SEND ? c->s : NULL;
	bool resend = s && s->busy && !s->acked && c->rlen == 0 && s->resends < 3;

	if (s && s->busy && !s->acked && !resend) {
		fprintf(stderr,
		        "bench_pipeline: the gateway closed a connection before answering\n");
		b->failed = true;
	}
	conn_bury(b, g, c);
	/* Nothing of an answer came: the request goes again on a new
	 * connection, as any HTTP client does when a server closes an idle
	 * persistent connection under it. The same webhook-id: the gateway
	 * takes it once. */
	if (resend) {
		s->resends++;
		b->resent++;
		sender_write(b, s);
	}
}

static void conn_readable(struct bench *b, struct graveyard *g, struct conn *c)
{
	static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
	size_t off = 0;
	ssize_t n = read(c->fd, c->rbuf + c->rlen, BP_BUF - c->rlen);

	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return;
	if (n <= 0) {
		conn_gone(b, g, c);
		return;
	}
	c->rlen += (size_t)n;
	while (off < c->rlen) {
		struct http_msg m;
		int r = http_parse(c->rbuf + off, c->rlen - off, &m);

		if (r < 0) {
			fprintf(stderr,
			        "bench_pipeline: a malformed or unsupported HTTP message\n");
			b->failed = true;
			conn_bury(b, g, c);
			return;
		}
		if (r == 0) {
			if (m.head_len && m.expect && !c->continued && c->kind == CK_RECV) {
				conn_write(b, c, cont, sizeof cont - 1);
				c->continued = true;
			}
			break;
		}
		c->continued = false;
		switch (c->kind) {
		case CK_RECV:
			on_callback(b, c, c->rbuf + off, &m);
			break;
		case CK_SEND:
			on_send_response(b, c, &m);
			break;
		case CK_ECHO_IN:
			on_echo_request(b, c, &m);
			break;
		default: /* CK_ECHO_OUT: the receiver's 200s */
			break;
		}
		off += m.head_len + m.body_len;
	}
	memmove(c->rbuf, c->rbuf + off, c->rlen - off);
	c->rlen -= off;
}

static void accept_all(struct bench *b, struct conn *l)
{
	for (;;) {
		int fd = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC);

		if (fd < 0)
			return;
		conn_new(b, fd, l->kind == CK_RECV_LISTEN ? CK_RECV : CK_ECHO_IN);
	}
}

/* One epoll_wait and its events; returns the number of events. */
static int loop_once(struct bench *b, int timeout_ms)
{
	struct epoll_event ev[64];
	struct graveyard g;
	int n = epoll_wait(b->ep, ev, 64, timeout_ms);

	g.n = 0;
	for (int i = 0; i < n; i++) {
		struct conn *c = ev[i].data.ptr;

		if (c->fd < 0)
			continue;
		if (c->kind == CK_RECV_LISTEN || c->kind == CK_ECHO_LISTEN) {
			accept_all(b, c);
			continue;
		}
		if (ev[i].events & EPOLLOUT)
			conn_flush(b, c);
		if (c->fd >= 0 && (ev[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
			conn_readable(b, &g, c);
	}
	for (int i = 0; i < g.n; i++)
		conn_free(b, g.dead[i]);
	return n < 0 ? 0 : n;
}

/* ---- the gateway's counters ---- */

struct gw_sample {
	double cpu_s;
	long long rchar, wchar, write_bytes;
};

static bool gw_read(int pid, struct gw_sample *g)
{
	char path[64], buf[1024], *p;
	long hz = sysconf(_SC_CLK_TCK);
	unsigned long long ut = 0, st = 0;
	FILE *f;
	size_t n;

	memset(g, 0, sizeof *g);
	snprintf(path, sizeof path, "/proc/%d/stat", pid);
	if (!(f = fopen(path, "r")))
		return false;
	n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	p = strrchr(buf, ')');
	if (!p)
		return false;
	p += 2; /* fields from the state (field 3); utime is field 14, stime 15 */
	for (int field = 3; field <= 15 && p && *p; field++) {
		char *e;
		unsigned long long v = strtoull(p, &e, 10);

		if (field == 14)
			ut = v;
		if (field == 15)
			st = v;
		p = strchr(p, ' ');
		if (p)
			p++;
	}
	g->cpu_s = (double)(ut + st) / (double)(hz > 0 ? hz : 100);
	snprintf(path, sizeof path, "/proc/%d/io", pid);
	if (!(f = fopen(path, "r")))
		return true;
	while (fgets(buf, sizeof buf, f)) {
		long long v = strtoll(strchr(buf, ':') ? strchr(buf, ':') + 1 : buf, NULL, 10);

		if (strncmp(buf, "rchar:", 6) == 0)
			g->rchar = v;
		else if (strncmp(buf, "wchar:", 6) == 0)
			g->wchar = v;
		else if (strncmp(buf, "write_bytes:", 12) == 0)
			g->write_bytes = v;
	}
	fclose(f);
	return true;
}

static long proc_rss_kib(int pid)
{
	char path[64], line[256];
	long kib = -1;
	FILE *f;

	snprintf(path, sizeof path, "/proc/%d/status", pid);
	if (!(f = fopen(path, "r")))
		return -1;
	while (fgets(line, sizeof line, f))
		if (strncmp(line, "VmRSS:", 6) == 0)
			kib = strtol(line + 6, NULL, 10);
	fclose(f);
	return kib;
}

/* perf stat -p PID on tracepoints, started disabled and enabled only while a
 * level runs (--control), so that its start-up is not in the counts. */
struct perf {
	pid_t pid;
	int ctl, ack;
	char ctl_path[256], ack_path[256], out_path[256];
};

static bool perf_cmd(struct perf *p, const char *cmd)
{
	char buf[16];

	if (write(p->ctl, cmd, strlen(cmd)) != (ssize_t)strlen(cmd))
		return false;
	for (int i = 0; i < 500; i++) {
		ssize_t n = read(p->ack, buf, sizeof buf);

		if (n > 0)
			return strncmp(buf, "ack", 3) == 0;
		usleep(10000);
	}
	return false;
}

static void perf_end(struct perf *p)
{
	if (p->ctl >= 0)
		close(p->ctl);
	if (p->ack >= 0)
		close(p->ack);
	if (p->pid > 0) {
		kill(p->pid, SIGINT);
		waitpid(p->pid, NULL, 0);
	}
	unlink(p->ctl_path);
	unlink(p->ack_path);
	p->pid = 0;
	p->ctl = p->ack = -1;
}

static bool perf_start(struct perf *p, const char *dir, int target)
{
	char ctl[600], pid[16];

	memset(p, 0, sizeof *p);
	p->ctl = p->ack = -1;
	snprintf(p->ctl_path, sizeof p->ctl_path, "%s/perf-ctl", dir);
	snprintf(p->ack_path, sizeof p->ack_path, "%s/perf-ack", dir);
	snprintf(p->out_path, sizeof p->out_path, "%s/perf-out", dir);
	snprintf(ctl, sizeof ctl, "fifo:%s,%s", p->ctl_path, p->ack_path);
	snprintf(pid, sizeof pid, "%d", target);
	unlink(p->ctl_path);
	unlink(p->ack_path);
	if (mkfifo(p->ctl_path, 0600) != 0 || mkfifo(p->ack_path, 0600) != 0)
		return false;
	p->ack = open(p->ack_path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	p->pid = fork();
	if (p->pid == 0) {
		int null = open("/dev/null", O_WRONLY);

		if (null >= 0) {
			dup2(null, 1);
			dup2(null, 2);
		}
		execlp("perf", "perf", "stat", "-x", ",", "-o", p->out_path, "--delay", "-1",
		       "--control", ctl, "-e",
		       "syscalls:sys_enter_fsync,syscalls:sys_enter_fdatasync,syscalls:sys_enter_"
		       "syncfs,"
		       "raw_syscalls:sys_enter",
		       "-p", pid, (char *)NULL);
		_exit(127);
	}
	for (int i = 0; p->pid > 0 && i < 500; i++) {
		p->ctl = open(p->ctl_path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
		if (p->ctl >= 0 || waitpid(p->pid, NULL, WNOHANG) != 0)
			break;
		usleep(10000);
	}
	if (p->ctl < 0 || p->ack < 0) {
		perf_end(p);
		return false;
	}
	return true;
}

/* Stops perf and reads its counts: fsync, fdatasync, all system calls,
 * syncfs (the batched sync of transcripts: one call for many files). */
static bool perf_stop(struct perf *p, long long counts[4])
{
	static const char *const names[4] = {"syscalls:sys_enter_fsync",
	                                     "syscalls:sys_enter_fdatasync",
	                                     "raw_syscalls:sys_enter", "syscalls:sys_enter_syncfs"};
	char line[512];
	int found = 0;
	FILE *f;

	perf_end(p);
	counts[0] = counts[1] = counts[2] = counts[3] = 0;
	if (!(f = fopen(p->out_path, "r")))
		return false;
	while (fgets(line, sizeof line, f)) {
		char *c1 = strchr(line, ','), *c2 = c1 ? strchr(c1 + 1, ',') : NULL, *c3;

		if (line[0] == '#' || !c2)
			continue;
		c3 = strchr(c2 + 1, ',');
		if (c3)
			*c3 = '\0';
		for (int i = 0; i < 4; i++)
			if (strcmp(c2 + 1, names[i]) == 0 && line[0] != '<') {
				counts[i] = strtoll(line, NULL, 10);
				found++;
			}
	}
	fclose(f);
	unlink(p->out_path);
	return found == 4;
}

/* ---- the gateway ---- */

static int free_port(void)
{
	int port, fd = listen_loopback(&port);

	close(fd);
	return port;
}

static int readyz(int port)
{
	static const char req[] = "GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
	char resp[256];
	int fd = connect_loopback(port), status = 0;

	if (fd < 0)
		return 0;
	if (write(fd, req, sizeof req - 1) == (ssize_t)(sizeof req - 1)) {
		ssize_t n = read(fd, resp, sizeof resp - 1);

		if (n > 12) {
			resp[n] = '\0';
			status = (int)strtol(resp + 9, NULL, 10);
		}
	}
	close(fd);
	return status;
}

static void write_config(const char *home, int recv_port)
{
	char path[512], hook[128], cb[128], provider[256];
	const char *llm = getenv("LLM_PORT");
	FILE *f;

	snprintf(path, sizeof path, "%s/bench-script.yaml", home);
	if (!(f = fopen(path, "w")))
		die("cannot write bench-script.yaml");
	fputs("steps:\n"
	      "  - match: \"/./\"\n"
	      "    tool_calls: [{name: ls, input: {path: \".\"}}]\n"
	      "  - text: \"done: {{user_text}}\"\n",
	      f);
	fclose(f);
	whsec(HOOK_KEY, hook, sizeof hook);
	whsec(CB_KEY, cb, sizeof cb);
	if (llm && *llm)
		snprintf(provider, sizeof provider,
		         "  - {id: s, api: openai-chat, base_url: \"http://127.0.0.1:%ld/v1\", "
		         "api_key: bench}\n",
		         strtol(llm, NULL, 10));
	else
		snprintf(provider, sizeof provider,
		         "  - {id: s, api: scripted, script: bench-script.yaml}\n");
	snprintf(path, sizeof path, "%s/switchboard.yaml", home);
	umask(077);
	if (!(f = fopen(path, "w")))
		die("cannot write switchboard.yaml");
	fprintf(f,
	        "gateway: {bind: 127.0.0.1}\n"
	        "log: {level: warn}\n"
	        "providers:\n%s"
	        "agents:\n"
	        "  - {id: main, default: true, model: s/bench, queue_mode: followup}\n"
	        "channels:\n"
	        "  webchat: {dm_policy: open, allow_from: [\"*\"]}\n"
	        "  webhook:\n"
	        "    dm_policy: open\n"
	        "    allow_from: [\"*\"]\n"
	        "    group_policy: open\n"
	        "    hooks:\n"
	        "      - name: bench\n"
	        "        secret: \"%s\"\n"
	        "        mode: callback\n"
	        "        callback_url: http://127.0.0.1:%d/replies\n"
	        "        callback_secret: \"%s\"\n",
	        provider, hook, recv_port, cb);
	fclose(f);
}

static pid_t gateway_start(const char *bin, const char *home, int port)
{
	char log[512], ports[16];
	pid_t pid;

	snprintf(log, sizeof log, "%s/gateway.log", home);
	snprintf(ports, sizeof ports, "%d", port);
	pid = fork();
	if (pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);

		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		setenv("SWITCHBOARD_HOME", home, 1);
		execl(bin, bin, "gateway", "--port", ports, (char *)NULL);
		_exit(127);
	}
	for (int i = 0; pid > 0 && i < 1000; i++) {
		if (readyz(port) == 200)
			return pid;
		if (waitpid(pid, NULL, WNOHANG) == pid)
			break;
		usleep(10000);
	}
	fprintf(stderr, "bench_pipeline: the gateway did not become ready; see %s\n", log);
	if (pid > 0)
		kill(pid, SIGTERM);
	exit(1);
}

/* The echo child: answers every webhook with 202 and calls back at once. */
static void echo_serve(struct bench *b, int lfd)
{
	struct conn *l;

	b->ep = epoll_create1(EPOLL_CLOEXEC);
	l = conn_new(b, lfd, CK_ECHO_LISTEN);
	(void)l;
	for (;;)
		loop_once(b, -1);
}

/* ---- levels and figures ---- */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double pct(const double *sorted, long n, double p)
{
	long i = (long)((p / 100.0) * (double)n + 0.999999) - 1;

	if (n <= 0)
		return 0;
	return sorted[i < 0 ? 0 : i >= n ? n - 1 : i];
}

static double self_cpu_s(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static void run_level(struct bench *b, int level, long n, pid_t gw)
{
	double last = now_ms();
	long done = 0;

	b->level = level;
	b->target = n;
	b->issued = b->completed = 0;
	for (int k = 0; k < level && b->issued < n; k++) {
		b->issued++;
		sender_send(b, &b->senders[k]);
	}
	while (b->completed < b->target && !b->failed) {
		int events = loop_once(b, 1000);

		if (b->completed != done) {
			done = b->completed;
			last = now_ms();
		} else if (now_ms() - last > BP_STALL_MS) {
			fprintf(stderr, "bench_pipeline: no callback for %d s (%ld of %ld done)\n",
			        BP_STALL_MS / 1000, b->completed, b->target);
			b->failed = true;
		} else if (events == 0 && gw > 0 && waitpid(gw, NULL, WNOHANG) == gw) {
			fprintf(stderr, "bench_pipeline: the gateway exited\n");
			exit(1);
		}
	}
}

static void print_loadavg(const char *prefix, const char *name)
{
	char buf[128] = "";
	FILE *f = fopen("/proc/loadavg", "r");

	if (f) {
		if (!fgets(buf, sizeof buf, f))
			buf[0] = '\0';
		fclose(f);
	}
	buf[strcspn(buf, "\n")] = '\0';
	printf("%s%s: %s\n", prefix, name, buf);
}

struct level_figures {
	long n;
	double secs, mean, p50, p99, ack50, ack99, driver_us, gw_cpu_us;
	double write_bytes, wchar, rchar;
};

/* Runs N messages at LEVEL senders and reads the counters around them; PERF,
 * when given, is enabled only while the messages flow. */
static bool measure_level(struct bench *b, int level, long n, pid_t gw, struct perf *perf,
                          struct level_figures *f)
{
	struct gw_sample g0, g1;
	double t0, cpu0;

	memset(f, 0, sizeof *f);
	gw_read(gw, &g0);
	if (perf && !perf_cmd(perf, "enable\n"))
		return false;
	cpu0 = self_cpu_s();
	t0 = now_ms();
	run_level(b, level, n, gw);
	f->secs = (now_ms() - t0) / 1000.0;
	f->driver_us = (self_cpu_s() - cpu0) * 1e6;
	if (perf)
		perf_cmd(perf, "disable\n");
	gw_read(gw, &g1);
	if (b->failed || b->completed <= 0)
		return false;
	f->n = b->completed;
	for (long j = 0; j < f->n; j++)
		f->mean += b->lat[j];
	f->mean /= (double)f->n;
	qsort(b->lat, (size_t)f->n, sizeof *b->lat, cmp_double);
	qsort(b->ack, (size_t)f->n, sizeof *b->ack, cmp_double);
	f->p50 = pct(b->lat, f->n, 50);
	f->p99 = pct(b->lat, f->n, 99);
	f->ack50 = pct(b->ack, f->n, 50);
	f->ack99 = pct(b->ack, f->n, 99);
	f->driver_us /= (double)f->n;
	f->gw_cpu_us = (g1.cpu_s - g0.cpu_s) * 1e6 / (double)f->n;
	f->write_bytes = (double)(g1.write_bytes - g0.write_bytes) / (double)f->n;
	f->wchar = (double)(g1.wchar - g0.wchar) / (double)f->n;
	f->rchar = (double)(g1.rchar - g0.rchar) / (double)f->n;
	return true;
}

static void print_level(struct bench *b, int c, const struct level_figures *f, bool echo, pid_t gw)
{
	const char *prefix = b->prefix;

	printf("%sc%d_messages: %ld\n", prefix, c, f->n);
	printf("%sc%d_throughput_msgs_per_s: %.1f\n", prefix, c, (double)f->n / f->secs);
	printf("%sc%d_latency_p50_ms: %.3f\n", prefix, c, f->p50);
	printf("%sc%d_latency_p99_ms: %.3f\n", prefix, c, f->p99);
	printf("%sc%d_latency_mean_ms: %.3f\n", prefix, c, f->mean);
	printf("%sc%d_ack_p50_ms: %.3f\n", prefix, c, f->ack50);
	printf("%sc%d_ack_p99_ms: %.3f\n", prefix, c, f->ack99);
	printf("%sc%d_driver_cpu_us_per_msg: %.1f\n", prefix, c, f->driver_us);
	if (echo) {
		printf("%sc%d_echo_server_cpu_us_per_msg: %.1f\n", prefix, c, f->gw_cpu_us);
		if ((double)f->n / f->secs > b->best) {
			b->best = (double)f->n / f->secs;
			b->best_cpu = f->driver_us;
		}
	} else {
		printf("%sc%d_gateway_cpu_us_per_msg: %.0f\n", prefix, c, f->gw_cpu_us);
		printf("%sc%d_gateway_write_bytes_per_msg: %.0f\n", prefix, c, f->write_bytes);
		printf("%sc%d_gateway_wchar_per_msg: %.0f\n", prefix, c, f->wchar);
		printf("%sc%d_gateway_rchar_per_msg: %.0f\n", prefix, c, f->rchar);
		printf("%sc%d_gateway_rss_kib: %ld\n", prefix, c, proc_rss_kib(gw));
	}
	print_loadavg(prefix, "loadavg");
	fflush(stdout);
}

#define BP_PROBE_FILES 200

/* Times BP_PROBE_FILES creations (open O_CREAT|O_EXCL, a line, close) in
 * HOME/bench-fs-probe; *dir gets the directory for the clean-up. Returns
 * microseconds per file, or -1. */
static double fs_probe(const char *home, char *dir, size_t size)
{
	struct timespec a, z;
	char path[4200];

	if (snprintf(dir, size, "%s/bench-fs-probe", home) >= (int)size || mkdir(dir, 0700) != 0)
		return -1;
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (int i = 0; i < BP_PROBE_FILES; i++) {
		int fd;

		snprintf(path, sizeof path, "%s/%04d.jsonl", dir, i);
		fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (fd < 0 || write(fd, "{}\n", 3) != 3) {
			if (fd >= 0)
				close(fd);
			return -1;
		}
		close(fd);
	}
	clock_gettime(CLOCK_MONOTONIC, &z);
	return ((double)(z.tv_sec - a.tv_sec) * 1e9 + (double)(z.tv_nsec - a.tv_nsec)) / 1e3 /
	       BP_PROBE_FILES;
}

static void fs_probe_clean(const char *dir)
{
	char path[4200];

	if (!*dir)
		return;
	for (int i = 0; i < BP_PROBE_FILES; i++) {
		snprintf(path, sizeof path, "%s/%04d.jsonl", dir, i);
		(void)unlink(path);
	}
	(void)rmdir(dir);
}

int main(int argc, char **argv)
{
	static struct bench bench;
	char probe_dir[4096] = "";
	struct bench *b = &bench;
	bool echo = argc >= 2 && strcmp(argv[1], "--echo") == 0;
	const char *bin = NULL, *home = NULL, *lv, *prefix = getenv("PIPELINE_PREFIX");
	const char *perf_env = getenv("PERF");
	int levels[16], nlevels = 0, ai = echo ? 2 : 3, recv_fd, maxlevel = 1;
	long messages = 400;
	long count_messages;
	bool have_perf;
	pid_t gw;
	char *e;

	if (!echo && argc < 3) {
		fprintf(stderr, "usage: bench_pipeline BINARY HOME [MESSAGES] [LEVELS]\n"
		                "       bench_pipeline --echo [MESSAGES] [LEVELS]\n");
		return 2;
	}
	if (!echo) {
		bin = argv[1];
		home = argv[2];
	}
	if (argc > ai) {
		messages = strtol(argv[ai], &e, 10);
		if (*e || messages < 1 || messages > 10000000)
			die("MESSAGES: a number from 1 to 10,000,000");
	}
	lv = argc > ai + 1 ? argv[ai + 1] : "1,8,64";
	for (const char *p = lv; *p && nlevels < 16;) {
		long v = strtol(p, &e, 10);

		if (e == p || v < 1 || v > BP_SENDERS_MAX)
			die("LEVELS: comma-separated sender counts from 1 to 256");
		levels[nlevels++] = (int)v;
		maxlevel = (int)v > maxlevel ? (int)v : maxlevel;
		p = *e == ',' ? e + 1 : e;
		if (e == p && *p)
			die("LEVELS: comma-separated sender counts from 1 to 256");
	}
	count_messages = messages / 4 > 50 ? messages / 4 : messages < 50 ? messages : 50;
	if ((e = getenv("COUNT_MESSAGES")) && *e)
		count_messages = strtol(e, NULL, 10) > 0 ? strtol(e, NULL, 10) : count_messages;
	if (count_messages > messages)
		count_messages = messages;
	have_perf = !echo && !(perf_env && strcmp(perf_env, "0") == 0);
	if (!prefix)
		prefix = echo ? "pipeline_echo_" : "pipeline_";
	if (sodium_init() < 0)
		die("sodium_init");
	signal(SIGPIPE, SIG_IGN);
	b->prefix = prefix;
	for (int k = 0; k < BP_SENDERS_MAX; k++) {
		b->senders[k].index = k;
		b->senders[k].c.fd = -1;
		b->senders[k].c.kind = CK_SEND;
		b->senders[k].c.s = &b->senders[k];
	}
	b->lat =
	    calloc((size_t)(messages > 2 * maxlevel ? messages : 2 * maxlevel), sizeof *b->lat);
	b->ack =
	    calloc((size_t)(messages > 2 * maxlevel ? messages : 2 * maxlevel), sizeof *b->ack);
	if (!b->lat || !b->ack)
		die("out of memory");
	recv_fd = listen_loopback(&b->recv_port);
	if (echo) {
		int efd = listen_loopback(&b->target_port);

		fflush(stdout);
		gw = fork();
		if (gw < 0)
			die("fork");
		if (gw == 0) {
			close(recv_fd);
			b->echo_child = true;
			echo_serve(b, efd);
		}
		close(efd);
	} else {
		double us = fs_probe(home, probe_dir, sizeof probe_dir);

		if (us < 0)
			printf("%sfs_create_us_per_file: not measured\n", prefix);
		else
			printf("%sfs_create_us_per_file: %.1f\n", prefix, us);
		write_config(home, b->recv_port);
		b->target_port = free_port();
		gw = gateway_start(bin, home, b->target_port);
	}
	bp_child = gw;
	b->ep = epoll_create1(EPOLL_CLOEXEC);
	conn_new(b, recv_fd, CK_RECV_LISTEN);
	print_loadavg(prefix, "loadavg_before");
	/* Warm-up: sessions, the store, the gateway's HTTP client connections. */
	for (int i = 0; i < nlevels && !b->failed; i++)
		run_level(b, levels[i], 2L * levels[i], gw);
	for (int i = 0; i < nlevels && !b->failed; i++) {
		int c = levels[i];
		struct level_figures f;

		/* The timed phase: nothing traces the gateway. */
		if (!measure_level(b, c, messages, gw, NULL, &f))
			break;
		print_level(b, c, &f, echo, gw);
		/* The counting phase: the same load with perf counting the
		 * gateway's system calls (its tracepoints slow each call a little,
		 * so the timed figures above come from the phase without it). */
		if (!echo && have_perf) {
			struct perf perf;
			long long counts[4];
			bool ok = perf_start(&perf, home, gw);

			if (!measure_level(b, c, count_messages, gw, ok ? &perf : NULL, &f))
				break;
			ok = ok && perf_stop(&perf, counts);
			if (ok) {
				printf("%sc%d_counted_messages: %ld\n", prefix, c, f.n);
				printf("%sc%d_gateway_syscalls_per_msg: %.1f\n", prefix, c,
				       (double)counts[2] / (double)f.n);
				printf("%sc%d_gateway_fsyncs_per_msg: %.2f\n", prefix, c,
				       (double)(counts[0] + counts[1] + counts[3]) / (double)f.n);
				printf("%sc%d_gateway_fsync_calls_per_msg: %.2f\n", prefix, c,
				       (double)counts[0] / (double)f.n);
				printf("%sc%d_gateway_fdatasync_calls_per_msg: %.2f\n", prefix, c,
				       (double)counts[1] / (double)f.n);
				printf("%sc%d_gateway_syncfs_calls_per_msg: %.3f\n", prefix, c,
				       (double)counts[3] / (double)f.n);
				printf("%sc%d_counted_gateway_cpu_us_per_msg: %.0f\n", prefix, c,
				       f.gw_cpu_us);
			} else {
				printf("%sc%d_gateway_syscalls_per_msg: not measured (perf stat "
				       "cannot count "
				       "syscall tracepoints here)\n",
				       prefix, c);
			}
			fflush(stdout);
		}
	}
	if (echo && !b->failed) {
		printf("%sdriver_max_msgs_per_s: %.0f\n", prefix, b->best);
		printf("%sdriver_cpu_us_per_msg: %.1f\n", prefix, b->best_cpu);
	}
	printf("%sresent_requests: %ld\n", prefix, b->resent);
	printf("%sinvalid_callbacks: %ld\n", prefix, b->invalid);
	printf("%sstray_callbacks: %ld\n", prefix, b->stray);
	fflush(stdout);
	kill(gw, SIGTERM);
	{
		int st = 0;

		waitpid(gw, &st, 0);
		if (!echo && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
			fprintf(stderr, "bench_pipeline: the gateway exited with status %d\n", st);
			b->failed = true;
		}
	}
	fs_probe_clean(probe_dir);
	while (b->nconns > 0)
		conn_free(b, b->conns[0]);
	for (int k = 0; k < BP_SENDERS_MAX; k++)
		conn_close(b, &b->senders[k].c);
	close(b->ep);
	free(b->lat);
	free(b->ack);
	return b->failed || b->invalid || b->stray ? 1 : 0;
}
