/*
 * cli_ctl.c - status, chat, send, sessions, devices: WebSocket clients of
 * the control plane. See cli_ctl.h.
 *
 * One struct ctl per run: a libuv loop, an lws context on it (foreign
 * loop), one client connection. The connection goes: resolve the host (off
 * the loop) -> connect -> connect.challenge -> connect request with the
 * token -> hello-ok -> the verb's ready() -> frames to the verb's frame()
 * -> ctl_finish() -> close frame -> the lws context is destroyed from a
 * timer (never inside an lws callback) -> the loop ends.
 */
#include "gateway/cli/cli_ctl.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <libwebsockets.h>
#include <limits.h>
#include <netdb.h>
#include <poll.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "gateway/cli/cli.h"
#include "gateway/config/config.h"
#include "gateway/config/runtime.h"
#include "gateway/core/buf.h"
#include "gateway/core/err.h"
#include "gateway/core/fmt.h"
#include "gateway/core/num.h"
#include "gateway/core/resolve.h"

#define CTL_MSG_MAX ((size_t)64 << 20)
#define CTL_LINE_MAX 65536
#define CTL_DEFAULT_TIMEOUT_S 30
#define CTL_SEND_TIMEOUT_S 900
#define CTL_HOST_MAX 256
/* chat: reconnecting after the gateway went away */
#define CTL_RETRY_FIRST_MS 250
#define CTL_RETRY_MAX_MS 5000
#define CTL_HANDSHAKE_MS 10000
#define CTL_WAITING_MAX 64 /* lines typed while away, waiting to be sent */
#define CTL_SETTLE_MS 2000
#define CTL_PATH_MAX 512
/* lws_write()'s close opcode, kept out of lws' public enum but in its ABI. */
#define CTL_WRITE_CLOSE ((enum lws_write_protocol)4)

struct ctl;

struct ctl_verb {
	const char *name;
	/* hello-ok arrived: start the work. */
	void (*ready)(struct ctl *c);
	/* Every later frame (res and event); borrowed. */
	void (*frame)(struct ctl *c, const json_t *f);
	/* stdin lines (chat only); line NULL at EOF. */
	void (*line)(struct ctl *c, const char *line);
};

struct ctl_msg {
	struct ctl_msg *next;
	size_t len;
	unsigned char data[]; /* LWS_PRE, then len bytes */
};

/* chat: a line the gateway has not taken yet (no answer to its chat.send):
 * sent again, under the same idempotency key, after a reconnect. */
struct ctl_line {
	struct ctl_line *next;
	char idem[48];
	char req[32]; /* the id of its chat.send on this connection; "" = not sent */
	char text[];
};

struct ctl_opts {
	bool json;
	const char *url;
	const char *token;
	const char *token_file; /* "-": standard input */
	const char *config;
	const char *agent;
	const char *session;
	int64_t timeout_s;
	int64_t limit;
};

struct ctl {
	struct ctl_opts o;
	const struct ctl_verb *verb;
	uv_loop_t loop;
	struct lws_context *lws;
	struct lws *wsi;
	uv_timer_t deadline;
	uv_timer_t reaper; /* destroys the lws context outside its callbacks */
	bool reaper_started;
	bool tls;
	char host[CTL_HOST_MAX];
	char addr[RESOLVE_ADDR_MAX];
	int port;
	char path[CTL_PATH_MAX];
	char *token;
	/* Found by the home's runtime file (config/runtime.h): its pid; else
	 * 0, and home says whose gateway should have answered. */
	long live_pid;
	char home[PATH_MAX];
	struct buf rx;
	struct ctl_msg *q_head, *q_tail;
	bool hello_done;
	bool established; /* the WebSocket is open: it can be closed politely */
	bool closing;
	bool finished;
	int rc;
	int next_id;
	/* verb state */
	char req_id[32];
	char req2_id[32];
	char run_id[48];
	char key[512];
	const char *text; /* send: the message (argv) */
	json_t *acc;      /* collected results */
	bool streamed_any;
	struct buf streamed;
	int pending; /* chat: messages whose reply has not ended */
	bool input_done;
	/* chat input */
	uv_pipe_t in_pipe;
	uv_tty_t in_tty;
	uv_stream_t *in;
	struct buf line;
	/* chat: surviving a gateway restart */
	bool reconnect; /* the verb wants it once it was connected */
	bool away;      /* the connection is gone; retrying */
	bool connected_once;
	uv_timer_t retry;
	bool retry_open;
	int64_t retry_ms; /* the next backoff */
	int attempts;
	uint64_t away_since;
	struct ctl_line *lines, *lines_tail; /* not taken by the gateway yet */
	size_t n_lines;
	/* chat: runs of the session going on (lifecycle start, then a final
	 * chat event). A line taken while a run goes on may be steered into
	 * it and get no run, nor final, of its own: once no run has gone on
	 * for CTL_SETTLE_MS, every taken line counts as answered. */
	int active_runs;
	uv_timer_t settle;
};

/* ---- output ---- */

static const char *ctl_s(const char *s, const char *def)
{
	return s ? s : def;
}

static void ctl_err(const struct ctl *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void ctl_err(const struct ctl *c, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "switchboard %s: ", c->verb ? c->verb->name : "");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static void ctl_print_json(const json_t *j)
{
	char *text = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS);

	if (text)
		printf("%s\n", text);
	free(text);
	fflush(stdout);
}

static void ctl_print_error(struct ctl *c, const json_t *f)
{
	const json_t *e = json_object_get(f, "error");
	const char *code = json_string_value(json_object_get(e, "code"));
	const char *msg = json_string_value(json_object_get(e, "message"));

	if (c->o.json) {
		ctl_print_json(f);
		return;
	}
	ctl_err(c, "%s: %s", code ? code : "ERROR", msg ? msg : "(no message)");
	if (!code || strcmp(code, "UNAUTHORIZED") != 0 || c->o.url)
		return;
	/* Say whose gateway refused: this home's, or another one on the port
	 * this home's configuration names. */
	if (c->live_pid > 0)
		fprintf(stderr,
		        "hint: this home's gateway (pid %ld) refused the token; it comes from "
		        "--token, SWITCHBOARD_TOKEN, gateway.auth_token or %s/gateway.token\n",
		        c->live_pid, c->home);
	else
		fprintf(stderr,
		        "hint: this home (%s) has no gateway running; the one on %s:%d is another "
		        "(another home's?) and does not take this home's token. Start this home's "
		        "with `switchboard gateway`, or give --url and --token for that one\n",
		        c->home, c->host, c->port);
}

/* ---- the connection ---- */

static void ctl_shutdown_timer(uv_timer_t *t)
{
	struct ctl *c = t->data;

	uv_close((uv_handle_t *)&c->reaper, NULL);
	if (c->lws)
		lws_context_destroy(c->lws);
}

/* Destroys the lws context from a timer: never inside its callbacks. */
static void ctl_reap(struct ctl *c)
{
	if (c->reaper_started)
		return;
	c->reaper_started = true;
	uv_timer_start(&c->reaper, ctl_shutdown_timer, 0, 0);
}

/* Ends the run: exit code rc; the connection is closed politely. */
static void ctl_finish(struct ctl *c, int rc)
{
	if (c->finished)
		return;
	c->finished = true;
	c->rc = rc;
	uv_timer_stop(&c->deadline);
	if (!uv_is_closing((uv_handle_t *)&c->deadline))
		uv_close((uv_handle_t *)&c->deadline, NULL);
	if (c->retry_open && !uv_is_closing((uv_handle_t *)&c->retry)) {
		uv_timer_stop(&c->retry);
		uv_close((uv_handle_t *)&c->retry, NULL);
		uv_timer_stop(&c->settle);
		uv_close((uv_handle_t *)&c->settle, NULL);
	}
	if (c->in && !uv_is_closing((uv_handle_t *)c->in)) {
		uv_read_stop(c->in);
		uv_close((uv_handle_t *)c->in, NULL);
	}
	if (c->wsi && c->established) {
		c->closing = true;
		lws_callback_on_writable(c->wsi);
		lws_set_timeout(c->wsi, PENDING_TIMEOUT_CLOSE_SEND, 2);
		return;
	}
	ctl_reap(c);
}

static void ctl_deadline(uv_timer_t *t)
{
	struct ctl *c = t->data;

	if (c->away && c->n_lines)
		ctl_err(c,
		        "the gateway did not come back within %" PRId64 " s; %zu line%s not sent",
		        c->o.timeout_s, c->n_lines, c->n_lines == 1 ? " was" : "s were");
	else if (c->away)
		ctl_err(c,
		        "the gateway did not come back within %" PRId64
		        " s; the replies still due will be in the session's history "
		        "(`switchboard sessions show %s`)",
		        c->o.timeout_s, c->key);
	else
		ctl_err(c, "no answer from the gateway within %" PRId64 " s", c->o.timeout_s);
	ctl_finish(c, 1);
}

static int ctl_send_frame(struct ctl *c, json_t *frame)
{
	char *text = json_dumps(frame, JSON_COMPACT);
	size_t len = text ? strlen(text) : 0;
	struct ctl_msg *m = text ? malloc(sizeof *m + LWS_PRE + len) : NULL;

	json_decref(frame);
	if (!m) {
		free(text);
		return SB_ERR_NOMEM;
	}
	m->next = NULL;
	m->len = len;
	memcpy(m->data + LWS_PRE, text, len);
	free(text);
	if (c->q_tail)
		c->q_tail->next = m;
	else
		c->q_head = m;
	c->q_tail = m;
	if (c->wsi)
		lws_callback_on_writable(c->wsi);
	return SB_OK;
}

/* Sends a request (params taken); its id goes to id_out (32 bytes). */
static void ctl_request(struct ctl *c, const char *method, json_t *params, char *id_out)
{
	char id[32];

	snprintf(id, sizeof id, "cli-%d", ++c->next_id);
	if (id_out)
		snprintf(id_out, 32, "%s", id);
	ctl_send_frame(c, json_pack("{ss ss ss so}", "type", "req", "id", id, "method", method,
	                            "params", params ? params : json_object()));
}

static bool ctl_is_res(const json_t *f, const char *id)
{
	const char *type = json_string_value(json_object_get(f, "type"));
	const char *fid = json_string_value(json_object_get(f, "id"));

	return type && fid && strcmp(type, "res") == 0 && strcmp(fid, id) == 0;
}

static bool ctl_is_event(const json_t *f, const char *name)
{
	const char *type = json_string_value(json_object_get(f, "type"));
	const char *ev = json_string_value(json_object_get(f, "event"));

	return type && ev && strcmp(type, "event") == 0 && strcmp(ev, name) == 0;
}

static void ctl_connect_frame(struct ctl *c, const json_t *challenge)
{
	(void)challenge;
	ctl_send_frame(c, json_pack("{ss ss ss s{si si s{ss ss ss ss} ss s[sss] s[] s{ss}}}",
	                            "type", "req", "id", "connect", "method", "connect", "params",
	                            "minProtocol", 3, "maxProtocol", 4, "client", "id",
	                            "switchboard-cli", "version", SB_VERSION, "platform", "linux",
	                            "mode", "cli", "role", "operator", "scopes", "operator.read",
	                            "operator.write", "operator.admin", "caps", "auth", "token",
	                            c->token ? c->token : ""));
}

static void ctl_on_frame(struct ctl *c, const json_t *f)
{
	if (c->finished)
		return;
	if (!c->hello_done) {
		if (ctl_is_event(f, "connect.challenge")) {
			ctl_connect_frame(c, f);
			return;
		}
		if (!ctl_is_res(f, "connect"))
			return;
		if (!json_is_true(json_object_get(f, "ok"))) {
			ctl_print_error(c, f);
			ctl_finish(c, 1);
			return;
		}
		c->hello_done = true;
		if (c->away) {
			c->away = false;
			uv_timer_stop(&c->retry);
			fprintf(stderr, "reconnected to ws://%s:%d%s after %.1f s\n", c->host,
			        c->port, c->path,
			        (double)(uv_now(&c->loop) - c->away_since) / 1000.0);
			fflush(stderr);
		}
		c->connected_once = true;
		c->verb->ready(c);
		return;
	}
	c->verb->frame(c, f);
}

static void ctl_on_message(struct ctl *c)
{
	json_error_t err;
	json_t *f = json_loadb(c->rx.data ? c->rx.data : "", c->rx.len, 0, &err);

	buf_reset(&c->rx);
	if (!f || !json_is_object(f)) {
		json_decref(f);
		ctl_err(c, "the gateway sent a frame that is not a JSON object");
		ctl_finish(c, 1);
		return;
	}
	ctl_on_frame(c, f);
	json_decref(f);
}

static int ctl_writeable(struct ctl *c, struct lws *wsi)
{
	struct ctl_msg *m = c->q_head;
	int n;

	if (c->closing && !m) {
		/* Written by hand: with the libuv loop lws 4.1 drops the close
		 * frame lws_close_reason() prepares (see gateway/http/server_ws.c). */
		unsigned char frame[LWS_PRE + 2] = {0};

		frame[LWS_PRE] = LWS_CLOSE_STATUS_NORMAL >> 8;
		frame[LWS_PRE + 1] = LWS_CLOSE_STATUS_NORMAL & 0xff;
		lws_write(wsi, frame + LWS_PRE, 2, CTL_WRITE_CLOSE);
		return -1;
	}
	if (!m)
		return 0;
	c->q_head = m->next;
	if (!c->q_head)
		c->q_tail = NULL;
	n = lws_write(wsi, m->data + LWS_PRE, m->len, LWS_WRITE_TEXT);
	free(m);
	if (n < 0)
		return -1;
	if (c->q_head || c->closing)
		lws_callback_on_writable(wsi);
	return 0;
}

/* Whether nothing listens where the gateway should be: a TCP connect of
 * its own, at most 500 ms, told apart from every other failure (lws says
 * only "closed before established"). */
static bool ctl_refused(const struct ctl *c)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST}, *ai = NULL;
	char port[8];
	bool refused = false;
	int fd;

	snprintf(port, sizeof port, "%d", c->port);
	if (getaddrinfo(c->addr, port, &hints, &ai) != 0 || !ai)
		return false;
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd >= 0) {
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
			if (errno == ECONNREFUSED) {
				refused = true;
			} else if (errno == EINPROGRESS) {
				struct pollfd p = {.fd = fd, .events = POLLOUT};
				int err = 0;
				socklen_t len = sizeof err;

				if (poll(&p, 1, 500) == 1 &&
				    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0)
					refused = err == ECONNREFUSED;
			}
		}
		close(fd);
	}
	freeaddrinfo(ai);
	return refused;
}

static void ctl_lost(struct ctl *c);

static int ctl_cb(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                  size_t len)
{
	struct ctl *c = lws_context_user(lws_get_context(wsi));

	(void)user;
	switch (reason) {
	case LWS_CALLBACK_CLIENT_CONNECTION_ERROR:
		c->wsi = NULL;
		if (c->finished)
			return 0;
		if (c->reconnect && c->connected_once) {
			ctl_lost(c);
			return 0;
		}
		if (ctl_refused(c))
			ctl_err(c,
			        "connection refused on %s:%d: is the gateway running? start it with "
			        "`switchboard gateway`",
			        c->host, c->port);
		else
			ctl_err(c, "cannot connect to ws://%s:%d%s: %s", c->host, c->port, c->path,
			        in ? (const char *)in : "connection failed");
		ctl_finish(c, 1);
		ctl_reap(c);
		return 0;
	case LWS_CALLBACK_CLIENT_ESTABLISHED:
		c->established = true;
		if (c->q_head)
			lws_callback_on_writable(wsi);
		return 0;
	case LWS_CALLBACK_CLIENT_RECEIVE:
		if (buf_append(&c->rx, in, len) != SB_OK) {
			ctl_err(c, "a message from the gateway is too large");
			ctl_finish(c, 1);
			return -1;
		}
		if (lws_is_final_fragment(wsi))
			ctl_on_message(c);
		return 0;
	case LWS_CALLBACK_CLIENT_WRITEABLE:
		return ctl_writeable(c, wsi);
	case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE:
		if (!c->finished && len > 2 && !(c->reconnect && c->connected_once))
			ctl_err(c, "the gateway closed the connection: %.*s", (int)(len - 2),
			        (const char *)in + 2);
		return 0;
	case LWS_CALLBACK_CLIENT_CLOSED:
		c->wsi = NULL;
		if (!c->finished && c->reconnect && c->connected_once) {
			ctl_lost(c);
			return 0;
		}
		if (!c->finished)
			ctl_err(c, "the connection closed");
		ctl_finish(c, 1);
		ctl_reap(c);
		return 0;
	default:
		return 0;
	}
}

static const struct lws_protocols ctl_protocols[] = {
    {.name = "switchboard-cli", .callback = ctl_cb},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

static void ctl_retry_later(struct ctl *c);

static void ctl_resolved(void *ud, int rc, const char *addr)
{
	struct ctl *c = ud;
	struct lws_client_connect_info i;

	if (c->finished)
		return;
	if (rc && c->away) {
		uv_timer_stop(&c->retry);
		ctl_retry_later(c);
		return;
	}
	if (rc) {
		ctl_err(c, "cannot resolve %s: %s", c->host, sb_strerror(rc));
		ctl_finish(c, 1);
		return;
	}
	snprintf(c->addr, sizeof c->addr, "%s", addr);
	memset(&i, 0, sizeof i);
	i.context = c->lws;
	i.address = c->addr;
	i.port = c->port;
	i.path = c->path;
	i.host = c->host;
	i.origin = NULL; /* not a browser: no Origin header */
	i.ssl_connection = c->tls ? LCCSCF_USE_SSL : 0;
	i.local_protocol_name = ctl_protocols[0].name; /* no subprotocol is asked for */
	i.ietf_version_or_minus_one = -1;
	i.pwsi = &c->wsi;
	if (!lws_client_connect_via_info(&i)) {
		c->wsi = NULL;
		if (c->away) {
			uv_timer_stop(&c->retry);
			ctl_retry_later(c);
			return;
		}
		if (!c->finished) {
			ctl_err(c, "cannot connect to %s:%d", c->host, c->port);
			ctl_finish(c, 1);
		}
	}
}

/* ---- reconnecting (chat) ---- */

static void ctl_drop_queue(struct ctl *c)
{
	struct ctl_msg *m;

	while ((m = c->q_head)) {
		c->q_head = m->next;
		free(m);
	}
	c->q_tail = NULL;
}

static void ctl_retry_fire(uv_timer_t *t);
static int ctl_parse_url(struct ctl *c, const char *url);
static void ctl_chat_send_line(struct ctl *c, struct ctl_line *l);

/* Starts the next attempt after the backoff (doubling, at most
 * CTL_RETRY_MAX_MS). */
static void ctl_retry_later(struct ctl *c)
{
	int64_t ms = c->retry_ms;

	c->retry_ms = ms * 2 > CTL_RETRY_MAX_MS ? CTL_RETRY_MAX_MS : ms * 2;
	uv_timer_start(&c->retry, ctl_retry_fire, (uint64_t)ms, 0);
}

/* The connection is gone after it worked: the verb goes on, and the
 * client tries again until the gateway is back. */
static void ctl_lost(struct ctl *c)
{
	if (c->finished)
		return;
	if (!c->away) {
		c->away = true;
		c->away_since = uv_now(&c->loop);
		c->retry_ms = CTL_RETRY_FIRST_MS;
		c->attempts = 0;
		fprintf(stderr, "%sgateway went away; reconnecting…\n",
		        c->streamed_any ? "\n" : "");
		fflush(stderr);
		/* With the input over, the wait for the gateway is bounded. */
		if (c->input_done)
			uv_timer_start(&c->deadline, ctl_deadline, (uint64_t)c->o.timeout_s * 1000,
			               0);
	}
	c->hello_done = false;
	c->established = false;
	c->closing = false;
	c->streamed_any = false;
	c->active_runs = 0; /* runs cut by a restart start again, announced anew */
	uv_timer_stop(&c->settle);
	buf_reset(&c->rx);
	ctl_drop_queue(c); /* what it had not sent goes again after the handshake */
	for (struct ctl_line *l = c->lines; l; l = l->next)
		l->req[0] = '\0';
	if (c->input_done && !c->n_lines && c->pending <= 0) {
		ctl_finish(c, 0);
		return;
	}
	ctl_retry_later(c);
}

static void ctl_retry_fire(uv_timer_t *t)
{
	struct ctl *c = t->data;

	if (c->finished)
		return;
	if (c->hello_done && !c->away) {
		/* Connected: the lines the gateway asked to send again. */
		for (struct ctl_line *l = c->lines; l; l = l->next)
			if (!l->req[0])
				ctl_chat_send_line(c, l);
		return;
	}
	if (c->wsi) {
		/* An attempt that connected and never finished the handshake. */
		lws_set_timeout(c->wsi, PENDING_TIMEOUT_CLOSE_SEND, LWS_TO_KILL_ASYNC);
		return;
	}
	c->attempts++;
	/* This home's gateway may come back elsewhere (gateway.port edited
	 * before the restart): its runtime file says where. It is small and
	 * local; a blocking read is fine in the CLI. */
	if (!c->o.url) {
		struct runtime_info ri;

		if (runtime_read(c->home, &ri) == SB_OK && ctl_parse_url(c, ri.control) == 0)
			c->live_pid = ri.pid;
	}
	if (resolve_host(&c->loop, c->host, ctl_resolved, c) != SB_OK) {
		ctl_retry_later(c);
		return;
	}
	/* Bounds the handshake too: it starts again if nothing came back. */
	uv_timer_start(&c->retry, ctl_retry_fire, CTL_HANDSHAKE_MS, 0);
}

static void ctl_lws_log(int level, const char *line)
{
	(void)level;
	(void)line; /* failures reach the user through the callbacks */
}

/* ---- where the gateway is, and the token ---- */

static int ctl_parse_url(struct ctl *c, const char *url)
{
	const char *p = url, *host, *end;
	int64_t port = 0;
	char num[8];

	if (strncmp(p, "ws://", 5) == 0) {
		p += 5;
	} else if (strncmp(p, "wss://", 6) == 0) {
		p += 6;
		c->tls = true;
	} else {
		return -1;
	}
	if (*p == '[') {
		host = p + 1;
		end = strchr(host, ']');
		if (!end)
			return -1;
		p = end + 1;
	} else {
		host = p;
		end = p + strcspn(p, ":/");
		p = end;
	}
	if ((size_t)(end - host) >= sizeof c->host || end == host)
		return -1;
	memcpy(c->host, host, (size_t)(end - host));
	c->host[end - host] = '\0';
	c->port = c->tls ? 443 : 80;
	if (*p == ':') {
		size_t n = strcspn(p + 1, "/");

		if (n == 0 || n >= sizeof num)
			return -1;
		memcpy(num, p + 1, n);
		num[n] = '\0';
		if (num_parse_i64(num, 1, 65535, &port))
			return -1;
		c->port = (int)port;
		p += 1 + n;
	}
	snprintf(c->path, sizeof c->path, "%s", *p ? p : "/");
	return 0;
}

/* Reads a small secret file ("-": standard input), trimmed; NULL when
 * absent or empty. */
static char *ctl_read_secret(const char *path)
{
	char buf[4097];
	ssize_t n = 0, r;
	bool in = strcmp(path, "-") == 0;
	int fd = in ? STDIN_FILENO : open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);

	if (fd < 0)
		return NULL;
	while (
	    (size_t)n < sizeof buf - 1 &&
	    ((r = read(fd, buf + n, sizeof buf - 1 - (size_t)n)) > 0 || (r < 0 && errno == EINTR)))
		if (r > 0)
			n += r;
	if (!in)
		close(fd);
	if (n <= 0)
		return NULL;
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
		n--;
	buf[n] = '\0';
	return n ? strdup(buf) : NULL;
}

/* Fills url and token from the options, the environment and the home. */
static int ctl_locate(struct ctl *c)
{
	char home[PATH_MAX], cfg_path[PATH_MAX], tpath[PATH_MAX + 32];
	struct cfg_errors errs;
	struct config *cfg = NULL;
	const char *env = getenv("SWITCHBOARD_TOKEN");
	struct runtime_info ri;
	bool live = false;
	int rc = -1;

	cfg_errors_init(&errs);
	if (cli_home(home, sizeof home))
		goto out;
	if (c->o.token_file) {
		c->token = ctl_read_secret(c->o.token_file);
		if (!c->token) {
			ctl_err(c, "--token-file %s: cannot read a token from it",
			        strcmp(c->o.token_file, "-") == 0 ? "- (standard input)"
			                                          : c->o.token_file);
			goto out;
		}
	} else if (c->o.token)
		c->token = strdup(c->o.token);
	else if (env && *env)
		c->token = strdup(env);
	/* The running gateway says where it listens (config/runtime.h): a
	 * configuration broken on disk, or a port edited and not applied yet,
	 * does not matter then. */
	snprintf(c->home, sizeof c->home, "%s", home);
	if (!c->o.url && runtime_read(home, &ri) == SB_OK && ctl_parse_url(c, ri.control) == 0) {
		live = true;
		c->live_pid = ri.pid;
	}
	if ((!c->o.url && !live) || !c->token) {
		if (cli_config_path(home, c->o.config, cfg_path, sizeof cfg_path) ||
		    config_load(cfg_path, home, &cfg, &errs) != SB_OK) {
			if (live) {
				fprintf(stderr,
				        "note: %s does not load; the running gateway (pid %ld) keeps "
				        "its last good configuration (`switchboard config check` says "
				        "why)\n",
				        cfg_path, ri.pid);
			} else if (!c->o.url) {
				cfg_errors_print(&errs, stderr);
				ctl_err(c,
				        "cannot find the gateway: no usable configuration at %s "
				        "(pass --url ws://HOST:PORT)",
				        cfg_path);
				goto out;
			}
		}
	}
	/* gateway.auth_token, when set, is the only token the gateway takes;
	 * the home's gateway.token only without it. */
	if (!c->token && cfg && cfg->gateway.auth_token && *cfg->gateway.auth_token)
		c->token = strdup(cfg->gateway.auth_token);
	else if (!c->token && FMT(tpath, "%s/gateway.token", home) == SB_OK)
		c->token = ctl_read_secret(tpath);
	if (!c->token) {
		ctl_err(c,
		        "no token: pass --token, set SWITCHBOARD_TOKEN, or run `switchboard init`");
		goto out;
	}
	if (c->o.url) {
		if (ctl_parse_url(c, c->o.url)) {
			ctl_err(c, "--url wants ws://HOST:PORT[/PATH], got \"%s\"", c->o.url);
			goto out;
		}
	} else if (!live) {
		const char *bind = cfg->gateway.bind;

		if (!cfg->gateway.control.enabled) {
			ctl_err(c, "the control plane is off (gateway.control.enabled: false)");
			goto out;
		}
		if (strcmp(bind, "0.0.0.0") == 0 || strcmp(bind, "localhost") == 0)
			bind = "127.0.0.1";
		else if (strcmp(bind, "::") == 0)
			bind = "::1";
		snprintf(c->host, sizeof c->host, "%s", bind);
		c->port = (int)cfg->gateway.port;
		snprintf(c->path, sizeof c->path, "%s",
		         cfg->gateway.control.n_paths ? cfg->gateway.control.paths[0] : "/");
	}
	rc = 0;
out:
	config_unref(cfg);
	cfg_errors_free(&errs);
	return rc;
}

/* ---- running a verb ---- */

static int ctl_run(struct ctl *c)
{
	struct lws_context_creation_info info;
	void *loops[1];
	struct ctl_msg *m;

	c->rc = 1;
	buf_init(&c->rx, CTL_MSG_MAX);
	buf_init(&c->streamed, CTL_MSG_MAX);
	buf_init(&c->line, CTL_LINE_MAX);
	if (sodium_init() < 0 || ctl_locate(c))
		goto out;
	if (uv_loop_init(&c->loop) != 0)
		goto out;
	loops[0] = &c->loop;
	lws_set_log_level(LLL_ERR, ctl_lws_log);
	memset(&info, 0, sizeof info);
	info.port = CONTEXT_PORT_NO_LISTEN;
	info.protocols = ctl_protocols;
	info.foreign_loops = loops;
	info.user = c;
	info.pcontext = &c->lws;
	info.options = LWS_SERVER_OPTION_LIBUV | LWS_SERVER_OPTION_VALIDATE_UTF8;
	if (c->tls)
		info.options |= LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
	c->lws = lws_create_context(&info);
	uv_timer_init(&c->loop, &c->deadline);
	uv_timer_init(&c->loop, &c->reaper);
	uv_timer_init(&c->loop, &c->retry);
	uv_timer_init(&c->loop, &c->settle);
	c->retry_open = true;
	c->deadline.data = c->reaper.data = c->retry.data = c->settle.data = c;
	if (!c->lws) {
		ctl_err(c, "cannot start the WebSocket client");
		ctl_finish(c, 1);
	} else {
		uv_timer_start(&c->deadline, ctl_deadline, (uint64_t)c->o.timeout_s * 1000, 0);
		if (resolve_host(&c->loop, c->host, ctl_resolved, c) != SB_OK) {
			ctl_err(c, "cannot resolve %s", c->host);
			ctl_finish(c, 1);
		}
	}
	uv_run(&c->loop, UV_RUN_DEFAULT);
	/* With a foreign loop the first destroy only starts closing lws'
	 * handles; this one frees what is left once they are closed. */
	if (c->lws)
		lws_context_destroy(c->lws);
	uv_run(&c->loop, UV_RUN_DEFAULT);
	if (uv_loop_close(&c->loop) != 0)
		ctl_err(c, "handles left open");
out:
	while ((m = c->q_head)) {
		c->q_head = m->next;
		free(m);
	}
	while (c->lines) {
		struct ctl_line *l = c->lines;

		c->lines = l->next;
		free(l);
	}
	if (c->token) {
		sodium_memzero(c->token, strlen(c->token));
		free(c->token);
	}
	json_decref(c->acc);
	buf_free(&c->rx);
	buf_free(&c->streamed);
	buf_free(&c->line);
	return c->rc;
}

/* ---- options ---- */

enum ctl_opt_mask {
	CTL_O_AGENT = 1u << 0,
	CTL_O_SESSION = 1u << 1,
	CTL_O_LIMIT = 1u << 2,
};

static int ctl_parse_opts(struct ctl *c, int argc, char **argv, unsigned allowed,
                          void (*usage)(FILE *f), int *first_arg)
{
	static const struct option opts[] = {
	    {"json", no_argument, NULL, 'j'},
	    {"url", required_argument, NULL, 'u'},
	    {"token", required_argument, NULL, 't'},
	    {"config", required_argument, NULL, 'c'},
	    {"agent", required_argument, NULL, 'a'},
	    {"session", required_argument, NULL, 's'},
	    {"timeout", required_argument, NULL, 'T'},
	    {"limit", required_argument, NULL, 'n'},
	    {"token-file", required_argument, NULL, 'F'},
	    {"help", no_argument, NULL, 'h'},
	    {0},
	};
	int ch;

	optind = 1;
	while ((ch = getopt_long(argc, argv, "ju:t:F:c:a:s:T:n:h", opts, NULL)) != -1) {
		switch (ch) {
		case 'j':
			c->o.json = true;
			break;
		case 'u':
			c->o.url = optarg;
			break;
		case 't':
			c->o.token = optarg;
			break;
		case 'F':
			c->o.token_file = optarg;
			break;
		case 'c':
			c->o.config = optarg;
			break;
		case 'a':
		case 's':
		case 'n':
			if (!(allowed & (ch == 'a'   ? CTL_O_AGENT
			                 : ch == 's' ? CTL_O_SESSION
			                             : CTL_O_LIMIT))) {
				usage(stderr);
				return 2;
			}
			if (ch == 'a')
				c->o.agent = optarg;
			else if (ch == 's')
				c->o.session = optarg;
			else if (num_parse_i64(optarg, 1, 1000, &c->o.limit)) {
				ctl_err(c, "--limit wants a number from 1 to 1000");
				return 2;
			}
			break;
		case 'T':
			if (num_parse_i64(optarg, 1, 86400, &c->o.timeout_s)) {
				ctl_err(c, "--timeout wants seconds from 1 to 86400");
				return 2;
			}
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	*first_arg = optind;
	return -1;
}

#define CTL_COMMON_USAGE                                                                           \
	"  --json            machine-readable output (the gateway's JSON)\n"                       \
	"  --url URL         ws://HOST:PORT[/PATH] (default: from the home's switchboard.yaml)\n"  \
	"  --token-file FILE the token from FILE (- for standard input): unlike --token,\n"        \
	"                    it is not on the command line other users can see\n"                  \
	"  --token TOKEN     default: $SWITCHBOARD_TOKEN, then gateway.auth_token,\n"      \
	"                    else the home's gateway.token\n"  \
	"  --config FILE     the configuration to find the gateway in\n"                           \
	"  --timeout SECONDS how long to wait for the gateway\n"

/* ---- status ---- */

static void ctl_status_ready(struct ctl *c)
{
	ctl_request(c, "status", NULL, c->req_id);
}

/* One line per channel account that reports more than being there. */
/* Whether f is the answer to this verb's request and says ok; a failed
 * answer is printed and ends the verb. */
static bool ctl_answer_ok(struct ctl *c, const json_t *f)
{
	if (!ctl_is_res(f, c->req_id))
		return false;
	if (!json_is_true(json_object_get(f, "ok"))) {
		ctl_print_error(c, f);
		ctl_finish(c, 1);
		return false;
	}
	return true;
}

static void ctl_status_channels(const json_t *channels)
{
	const char *name;
	const json_t *ch, *a;
	size_t i;
	int64_t now = (int64_t)time(NULL) * 1000;

	json_object_foreach((json_t *)channels, name, ch)
	{
		json_array_foreach(json_object_get(ch, "accounts"), i, a)
		{
			const char *mode = json_string_value(json_object_get(a, "mode"));
			const json_t *conn = json_object_get(a, "connected");
			int64_t ev = json_integer_value(json_object_get(a, "lastEventAt"));
			const char *err = json_string_value(json_object_get(a, "lastError"));

			if ((!mode && !conn && !ev && !err) ||
			    (mode && strcmp(mode, "unconfigured") == 0))
				continue;
			printf("  channel:     %s/%s: %s", name,
			       json_string_value(json_object_get(a, "accountId")),
			       mode ? mode : "running");
			if (conn)
				printf(", %s", json_is_true(conn) ? "connected" : "not connected");
			if (ev)
				printf(", last event %" PRId64 "s ago", (now - ev) / 1000);
			if (err)
				printf(", last error: %s", err);
			printf("\n");
		}
	}
}

/* Heartbeats (last, next due) and cron jobs, when the gateway reports them. */
static void ctl_status_scheduler(const json_t *sch)
{
	const json_t *h;
	int64_t now = json_integer_value(json_object_get(sch, "now"));
	size_t i;

	json_array_foreach(json_object_get(sch, "heartbeats"), i, h)
	{
		int64_t last = json_integer_value(json_object_get(h, "lastAt")),
		        next = json_integer_value(json_object_get(h, "nextDue"));
		char span[32];

		printf("  heartbeat:   %s: ", json_string_value(json_object_get(h, "agentId")));
		if (!json_is_true(json_object_get(h, "enabled"))) {
			printf("off\n");
			continue;
		}
		printf("every %s, target %s",
		       fmt_span(span, sizeof span,
		                (int64_t)json_integer_value(json_object_get(h, "everyMs"))),
		       ctl_s(json_string_value(json_object_get(h, "target")), "none"));
		if (last)
			printf(", last %s ago (%s)", fmt_span(span, sizeof span, (now - last) / 1000 * 1000),
			       ctl_s(json_string_value(json_object_get(h, "lastStatus")), "?"));
		if (next)
			printf(", next in %s", fmt_span(span, sizeof span, (next - now) / 1000 * 1000));
		printf("\n");
	}
	if (json_object_get(sch, "cron")) {
		const json_t *cr = json_object_get(sch, "cron");
		int64_t next = json_integer_value(json_object_get(cr, "nextDue"));

		printf("  cron:        %" PRId64 " jobs, %" PRId64 " enabled",
		       (int64_t)json_integer_value(json_object_get(cr, "jobs")),
		       (int64_t)json_integer_value(json_object_get(cr, "enabled")));
		if (next)
			printf(", next in %" PRId64 "s", (next - now) / 1000);
		printf("\n");
	}
}

static void ctl_status_frame(struct ctl *c, const json_t *f)
{
	const json_t *p = json_object_get(f, "payload"), *ids;
	const json_t *v;
	size_t i;
	int64_t up;

	if (!ctl_answer_ok(c, f))
		return;
	if (c->o.json) {
		ctl_print_json(p);
		ctl_finish(c, 0);
		return;
	}
	up = json_integer_value(json_object_get(p, "uptimeMs")) / 1000;
	printf("switchboard %s at ws://%s:%d%s: %s, up %" PRId64 "h%02" PRId64 "m%02" PRId64
	       "s, pid %" PRId64 "\n",
	       json_string_value(json_object_get(p, "version")), c->host, c->port, c->path,
	       json_string_value(json_object_get(p, "state")), up / 3600, up / 60 % 60, up % 60,
	       (int64_t)json_integer_value(json_object_get(p, "pid")));
	ids = json_object_get(json_object_get(p, "agents"), "list");
	if (json_array_size(ids)) {
		const char *def =
		    json_string_value(json_object_get(json_object_get(p, "agents"), "defaultId"));

		json_array_foreach(ids, i, v)
		{
			const char *aid = json_string_value(json_object_get(v, "id"));
			const json_t *fb = json_object_get(v, "fallbacks"), *fv;
			size_t k;

			printf("  agent:       %s%s: %s", aid,
			       def && aid && strcmp(def, aid) == 0 ? " (default)" : "",
			       ctl_s(json_string_value(json_object_get(v, "model")), "no model"));
			if (json_array_size(fb)) {
				printf(", then ");
				json_array_foreach(fb, k, fv)
				printf("%s%s", k ? ", " : "", json_string_value(fv));
			}
			printf("\n");
		}
	} else {
		printf("  agents:      ");
		ids = json_object_get(json_object_get(p, "agents"), "ids");
		json_array_foreach(ids, i, v) printf("%s%s", i ? ", " : "", json_string_value(v));
		printf(" (default: %s)\n",
		       ctl_s(json_string_value(
		                 json_object_get(json_object_get(p, "agents"), "defaultId")),
		             "none"));
	}
	printf("  clients:     %" PRId64 " connected\n",
	       (int64_t)json_integer_value(
	           json_object_get(json_object_get(p, "connections"), "control")));
	printf("  runs:        %" PRId64 " active, %" PRId64 " messages in the pipeline\n",
	       (int64_t)json_integer_value(json_object_get(json_object_get(p, "runs"), "active")),
	       (int64_t)json_integer_value(json_object_get(json_object_get(p, "runs"), "waiting")));
	printf("  inbox:       %" PRId64 " pending\n",
	       (int64_t)json_integer_value(json_object_get(json_object_get(p, "queues"), "inbox")));
	printf("  config:      %s",
	       json_string_value(json_object_get(json_object_get(p, "config"), "path")));
	{
		const json_t *lr = json_object_get(json_object_get(p, "config"), "lastReload");
		int64_t now = json_integer_value(json_object_get(p, "ts"));
		char span[32];

		if (lr) {
			int64_t at = json_integer_value(json_object_get(lr, "at"));

			printf(", last reload %s ago", fmt_span(span, sizeof span,
			                                        now > at ? (now - at) / 1000 * 1000 : 0));
			if (json_is_true(json_object_get(lr, "ok")))
				printf(" (applied)");
			else
				printf(" REJECTED, still running the previous one: %s",
				       ctl_s(json_string_value(json_object_get(lr, "error")), "?"));
		}
	}
	printf("\n");
	ctl_status_channels(json_object_get(p, "channels"));
	ctl_status_scheduler(json_object_get(p, "scheduler"));
	fflush(stdout);
	ctl_finish(c, 0);
}

static const struct ctl_verb ctl_status_verb = {
    .name = "status", .ready = ctl_status_ready, .frame = ctl_status_frame};

static void ctl_status_usage(FILE *f)
{
	fprintf(f, "usage: switchboard status [--json] [--url URL] [--token TOKEN]\n\n"
	           "Asks the running gateway how it is: version, uptime, agents, clients, "
	           "runs.\n" CTL_COMMON_USAGE);
}

int cli_status(int argc, char **argv)
{
	struct ctl c;
	int first, rc;

	memset(&c, 0, sizeof c);
	c.verb = &ctl_status_verb;
	c.o.timeout_s = CTL_DEFAULT_TIMEOUT_S;
	rc = ctl_parse_opts(&c, argc, argv, 0, ctl_status_usage, &first);
	if (rc >= 0)
		return rc;
	if (first != argc) {
		ctl_status_usage(stderr);
		return 2;
	}
	return ctl_run(&c);
}

/* ---- send ---- */

static void ctl_new_idempotency_key(char *out, size_t size)
{
	unsigned char raw[12];
	char hex[25];

	randombytes_buf(raw, sizeof raw);
	sodium_bin2hex(hex, sizeof hex, raw, sizeof raw);
	snprintf(out, size, "cli-%s", hex);
}

/* The session params of chat and send: sessionKey and agentId. */
static void ctl_session_params(struct ctl *c, json_t *params)
{
	if (c->o.session)
		json_object_set_new(params, "sessionKey", json_string(c->o.session));
	if (c->o.agent)
		json_object_set_new(params, "agentId", json_string(c->o.agent));
}

static void ctl_send_ready(struct ctl *c)
{
	json_t *params =
	    json_pack("{ss ss sb}", "message", c->text, "idempotencyKey", c->run_id, "deliver", 0);

	ctl_session_params(c, params);
	ctl_request(c, "agent", params, c->req_id);
}

static void ctl_send_on_frame(struct ctl *c, const json_t *f)
{
	const json_t *p = json_object_get(f, "payload");
	const char *status, *text;

	if (ctl_is_event(f, "agent")) {
		const char *run = json_string_value(json_object_get(p, "runId"));
		const char *stream = json_string_value(json_object_get(p, "stream"));
		const char *delta =
		    json_string_value(json_object_get(json_object_get(p, "data"), "delta"));

		if (!c->o.json && run && stream && delta && strcmp(run, c->run_id) == 0 &&
		    strcmp(stream, "assistant") == 0 && isatty(STDOUT_FILENO)) {
			fputs(delta, stdout);
			fflush(stdout);
			buf_puts(&c->streamed, delta);
			c->streamed_any = true;
		}
		return;
	}
	if (!ctl_is_res(f, c->req_id))
		return;
	if (!json_is_true(json_object_get(f, "ok"))) {
		if (c->streamed_any)
			putchar('\n');
		ctl_print_error(c, f);
		ctl_finish(c, 1);
		return;
	}
	status = json_string_value(json_object_get(p, "status"));
	if (status && strcmp(status, "accepted") == 0)
		return; /* the second answer carries the reply */
	if (status && strcmp(status, "in_flight") == 0) {
		ctl_err(c, "a message with this idempotency key was sent already");
		ctl_finish(c, 1);
		return;
	}
	text = json_string_value(json_object_get(p, "text"));
	if (c->o.json) {
		ctl_print_json(p);
	} else if (c->streamed_any) {
		/* The final text may carry a note after what streamed. */
		size_t n = c->streamed.len;

		if (text && strncmp(text, c->streamed.data, n) == 0)
			printf("%s\n", text + n);
		else
			printf("\n%s\n", text ? text : "");
	} else {
		printf("%s\n", text ? text : "");
	}
	fflush(stdout);
	ctl_finish(c, status && strcmp(status, "ok") == 0 ? 0 : 1);
}

static const struct ctl_verb ctl_send_verb = {
    .name = "send", .ready = ctl_send_ready, .frame = ctl_send_on_frame};

static void ctl_send_usage(FILE *f)
{
	fprintf(f, "usage: switchboard send [--agent ID] [--session KEY] [--json] \"text\"\n\n"
	           "Sends one message to an agent through the running gateway (as the web chat)\n"
	           "and prints the reply. KEY is a session key (agent:ID:REST, or a short key\n"
	           "such as main for the agent's own session); by default the agent's main\n"
	           "session. Exit code 0 when the run ended normally.\n"
	           "  --agent ID        the agent (default: the default agent)\n"
	           "  --session KEY     the session\n" CTL_COMMON_USAGE);
}

int cli_send(int argc, char **argv)
{
	struct ctl c;
	int first, rc;

	memset(&c, 0, sizeof c);
	c.verb = &ctl_send_verb;
	c.o.timeout_s = CTL_SEND_TIMEOUT_S;
	rc = ctl_parse_opts(&c, argc, argv, CTL_O_AGENT | CTL_O_SESSION, ctl_send_usage, &first);
	if (rc >= 0)
		return rc;
	if (first != argc - 1 || !*argv[first]) {
		ctl_send_usage(stderr);
		return 2;
	}
	c.text = argv[first];
	if (sodium_init() < 0)
		return 1;
	ctl_new_idempotency_key(c.run_id, sizeof c.run_id);
	return ctl_run(&c);
}

/* ---- chat ---- */

static void ctl_chat_prompt(struct ctl *c)
{
	if (!c->o.json && isatty(STDIN_FILENO) && isatty(STDOUT_FILENO)) {
		fputs("> ", stdout);
		fflush(stdout);
	}
}

static void ctl_chat_maybe_done(struct ctl *c)
{
	if (c->input_done && c->pending <= 0)
		ctl_finish(c, 0);
}

static void ctl_chat_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
	static char chunk[4096];

	(void)h;
	(void)suggested;
	*b = uv_buf_init(chunk, sizeof chunk);
}

static void ctl_chat_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
	struct ctl *c = s->data;

	if (n < 0) {
		if (c->line.len)
			c->verb->line(c, c->line.data);
		buf_reset(&c->line);
		c->verb->line(c, NULL);
		return;
	}
	for (ssize_t i = 0; i < n && !c->finished; i++) {
		if (b->base[i] != '\n') {
			if (buf_append(&c->line, &b->base[i], 1) != SB_OK) {
				ctl_err(c, "a line longer than %d bytes", CTL_LINE_MAX);
				buf_reset(&c->line);
			}
			continue;
		}
		c->verb->line(c, c->line.data ? c->line.data : "");
		buf_reset(&c->line);
	}
}

/* Sends line l (again, after a reconnect: the same idempotency key, so a
 * message the gateway had taken is not taken twice). */
static void ctl_chat_send_line(struct ctl *c, struct ctl_line *l)
{
	json_t *params = json_pack("{ss ss ss}", "message", l->text, "idempotencyKey", l->idem,
	                           "sessionKey", c->key);

	if (params)
		ctl_request(c, "chat.send", params, l->req);
}

/* The line whose chat.send has request id, unlinked; NULL when none. */
static struct ctl_line *ctl_chat_take_line(struct ctl *c, const char *id)
{
	struct ctl_line **pp = &c->lines, *prev = NULL;

	for (; *pp; prev = *pp, pp = &(*pp)->next) {
		struct ctl_line *l = *pp;

		if (!l->req[0] || !id || strcmp(l->req, id) != 0)
			continue;
		*pp = l->next;
		if (c->lines_tail == l)
			c->lines_tail = prev;
		c->n_lines--;
		return l;
	}
	return NULL;
}

static void ctl_chat_ready(struct ctl *c)
{
	const char *s = c->o.session ? c->o.session : "main";

	/* The session, named as the gateway would resolve it; and followed,
	 * so that replies to anyone's messages in it show up too. */
	if (!c->key[0]) {
		if (c->o.agent && strncmp(s, "agent:", 6) != 0)
			snprintf(c->key, sizeof c->key, "agent:%s:%s", c->o.agent, s);
		else
			snprintf(c->key, sizeof c->key, "%s", s);
	}
	ctl_request(c, "sessions.subscribe", json_pack("{ss}", "sessionKey", c->key), c->req_id);
	/* After a reconnect: what the gateway had not taken goes again. */
	for (struct ctl_line *l = c->lines; l; l = l->next)
		ctl_chat_send_line(c, l);
	if (c->in || c->input_done)
		return;
	if (uv_guess_handle(STDIN_FILENO) == UV_TTY) {
		uv_tty_init(&c->loop, &c->in_tty, STDIN_FILENO, 1);
		c->in = (uv_stream_t *)&c->in_tty;
	} else if (uv_pipe_init(&c->loop, &c->in_pipe, 0) == 0 &&
	           uv_pipe_open(&c->in_pipe, STDIN_FILENO) == 0) {
		c->in = (uv_stream_t *)&c->in_pipe;
	} else {
		ctl_err(c, "stdin must be a terminal or a pipe");
		ctl_finish(c, 2);
		return;
	}
	c->in->data = c;
	uv_timer_stop(&c->deadline); /* interactive: no overall limit */
	if (!c->o.json && isatty(STDOUT_FILENO))
		fprintf(stderr, "connected to ws://%s:%d%s; type a message, /quit to leave\n",
		        c->host, c->port, c->path);
	ctl_chat_prompt(c);
	uv_read_start(c->in, ctl_chat_alloc, ctl_chat_read);
}

static void ctl_chat_line(struct ctl *c, const char *line)
{
	struct ctl_line *l;
	size_t n;

	if (!line || strcmp(line, "/quit") == 0 || strcmp(line, "/exit") == 0) {
		c->input_done = true;
		if (c->in && !uv_is_closing((uv_handle_t *)c->in)) {
			uv_read_stop(c->in);
			uv_close((uv_handle_t *)c->in, NULL);
		}
		c->in = NULL;
		/* Input is over: waiting for the gateway to come back is
		 * bounded now (--timeout). */
		if (c->away && c->pending > 0)
			uv_timer_start(&c->deadline, ctl_deadline, (uint64_t)c->o.timeout_s * 1000,
			               0);
		ctl_chat_maybe_done(c);
		return;
	}
	if (!*line) {
		ctl_chat_prompt(c);
		return;
	}
	if (c->away && c->n_lines >= CTL_WAITING_MAX) {
		ctl_err(c,
		        "not sent: %d lines already wait for the gateway to come back; type it "
		        "again once it has",
		        CTL_WAITING_MAX);
		ctl_chat_prompt(c);
		return;
	}
	n = strlen(line);
	l = calloc(1, sizeof *l + n + 1);
	if (!l) {
		ctl_err(c, "not sent: out of memory");
		return;
	}
	memcpy(l->text, line, n + 1);
	ctl_new_idempotency_key(l->idem, sizeof l->idem);
	if (c->lines_tail)
		c->lines_tail->next = l;
	else
		c->lines = l;
	c->lines_tail = l;
	c->n_lines++;
	c->pending++;
	/* streamed_any stays: a reply still streaming is not printed twice
	 * when its final event comes after this line. */
	if (c->away || !c->hello_done) {
		fprintf(stderr, "(the gateway is away: this line is sent once it is back)\n");
		fflush(stderr);
		return;
	}
	ctl_chat_send_line(c, l);
}

static void ctl_chat_settled(uv_timer_t *t)
{
	struct ctl *c = t->data;

	if (c->finished || c->away || c->active_runs > 0 || c->n_lines)
		return;
	c->pending = 0; /* what was taken was steered into the runs that ended */
	ctl_chat_maybe_done(c);
}

/* Counts the session's runs from their lifecycle start and their final
 * chat event, and arms the settle timer when the last one ended with
 * lines still unanswered. */
static void ctl_chat_track_runs(struct ctl *c, const json_t *f)
{
	const json_t *p = json_object_get(f, "payload");

	if (ctl_is_event(f, "agent")) {
		const char *stream = json_string_value(json_object_get(p, "stream"));
		const char *phase =
		    json_string_value(json_object_get(json_object_get(p, "data"), "phase"));

		if (stream && phase && strcmp(stream, "lifecycle") == 0 &&
		    strcmp(phase, "start") == 0) {
			c->active_runs++;
			uv_timer_stop(&c->settle);
		}
		return;
	}
	if (ctl_is_event(f, "chat")) {
		const char *state = json_string_value(json_object_get(p, "state"));

		if (!state || strcmp(state, "delta") == 0)
			return;
		if (c->active_runs > 0)
			c->active_runs--;
		/* Checked later, once the caller has counted the run's own line
		 * down and a queued line has had time to start its run. */
		if (c->active_runs == 0)
			uv_timer_start(&c->settle, ctl_chat_settled, CTL_SETTLE_MS, 0);
	}
}

static void ctl_chat_frame(struct ctl *c, const json_t *f)
{
	const json_t *p = json_object_get(f, "payload");
	const char *type = json_string_value(json_object_get(f, "type"));

	if (c->o.json && (ctl_is_event(f, "chat") || ctl_is_event(f, "agent") ||
	                  (type && strcmp(type, "res") == 0))) {
		char *text = json_dumps(f, JSON_COMPACT);

		if (text)
			printf("%s\n", text);
		free(text);
		fflush(stdout);
	}
	ctl_chat_track_runs(c, f);
	if (type && strcmp(type, "res") == 0) {
		const char *status = json_string_value(json_object_get(p, "status"));
		bool subscribe = ctl_is_res(f, c->req_id);
		struct ctl_line *l =
		    ctl_chat_take_line(c, json_string_value(json_object_get(f, "id")));
		const json_t *e = json_object_get(f, "error");

		/* A gateway that has just come back may say "not ready; try
		 * again": the line waits and goes again, under the same key. */
		if (l && !json_is_true(json_object_get(f, "ok")) &&
		    json_is_true(json_object_get(e, "retryable")) && !c->finished) {
			json_int_t after = json_integer_value(json_object_get(e, "retryAfterMs"));

			l->req[0] = '\0';
			l->next = c->lines;
			c->lines = l;
			if (!c->lines_tail)
				c->lines_tail = l;
			c->n_lines++;
			uv_timer_start(&c->retry, ctl_retry_fire,
			               (uint64_t)(after > 0 && after < 60000 ? after : 1000), 0);
			return;
		}
		/* The gateway answered a line: it is taken (or refused), not to be
		 * sent again. */
		free(l);

		if (!json_is_true(json_object_get(f, "ok"))) {
			if (!c->o.json)
				ctl_print_error(c, f);
			if (subscribe) {
				ctl_finish(c, 1);
				return;
			}
			if (c->pending > 0)
				c->pending--;
			ctl_chat_maybe_done(c);
			return;
		}
		if (status && strcmp(status, "in_flight") == 0 && c->pending > 0)
			c->pending--;
		return;
	}
	if (c->o.json) {
		if (ctl_is_event(f, "chat")) {
			const char *state = json_string_value(json_object_get(p, "state"));

			if (state && strcmp(state, "delta") != 0 && c->pending > 0)
				c->pending--;
			ctl_chat_maybe_done(c);
		}
		return;
	}
	if (ctl_is_event(f, "agent")) {
		const char *stream = json_string_value(json_object_get(p, "stream"));
		const json_t *data = json_object_get(p, "data");

		if (stream && strcmp(stream, "assistant") == 0) {
			fputs(ctl_s(json_string_value(json_object_get(data, "delta")), ""), stdout);
			c->streamed_any = true;
		} else if (stream && strcmp(stream, "tool") == 0 &&
		           strcmp(ctl_s(json_string_value(json_object_get(data, "phase")), ""),
		                  "start") == 0) {
			printf("[tool %s]\n",
			       ctl_s(json_string_value(json_object_get(data, "name")), ""));
		}
		fflush(stdout);
		return;
	}
	if (ctl_is_event(f, "chat")) {
		const char *state = json_string_value(json_object_get(p, "state"));

		if (!state || strcmp(state, "delta") == 0)
			return;
		if (!c->streamed_any) {
			const json_t *content =
			    json_object_get(json_object_get(p, "message"), "content");

			fputs(ctl_s(json_string_value(
			                json_object_get(json_array_get(content, 0), "text")),
			            ""),
			      stdout);
		}
		if (strcmp(state, "final") != 0)
			printf("\n[%s%s%s]", state, json_object_get(p, "errorMessage") ? ": " : "",
			       ctl_s(json_string_value(json_object_get(p, "errorMessage")), ""));
		putchar('\n');
		c->streamed_any = false;
		if (c->pending > 0)
			c->pending--;
		fflush(stdout);
		if (c->input_done)
			ctl_chat_maybe_done(c);
		else
			ctl_chat_prompt(c);
	}
}

static const struct ctl_verb ctl_chat_verb = {
    .name = "chat", .ready = ctl_chat_ready, .frame = ctl_chat_frame, .line = ctl_chat_line};

static void ctl_chat_usage(FILE *f)
{
	fprintf(f, "usage: switchboard chat [--agent ID] [--session KEY] [--json]\n\n"
	           "Chats with an agent through the running gateway: each line typed is a\n"
	           "message (the web chat channel), the reply streams back. Replies to other\n"
	           "clients' messages in the same session show up too. /quit or end of input\n"
	           "leaves once the replies have arrived. --json prints every frame.\n"
	           "When the gateway goes away (a restart), chat says so and reconnects to the\n"
	           "same session, retrying with backoff; lines typed meanwhile are sent once it\n"
	           "is back (at most 64 wait; past that they are refused). After the end of\n"
	           "input it waits --timeout seconds for the gateway, then names what was not\n"
	           "sent and exits 1.\n"
	           "  --agent ID        the agent (default: the default agent)\n"
	           "  --session KEY     the session (default: the agent's main "
	           "session)\n" CTL_COMMON_USAGE);
}

int cli_chat(int argc, char **argv)
{
	struct ctl c;
	int first, rc;

	memset(&c, 0, sizeof c);
	c.verb = &ctl_chat_verb;
	c.reconnect = true;
	c.o.timeout_s = CTL_DEFAULT_TIMEOUT_S;
	rc = ctl_parse_opts(&c, argc, argv, CTL_O_AGENT | CTL_O_SESSION, ctl_chat_usage, &first);
	if (rc >= 0)
		return rc;
	if (first != argc) {
		ctl_chat_usage(stderr);
		return 2;
	}
	return ctl_run(&c);
}

/* ---- sessions ---- */

static void ctl_sessions_print(const json_t *p)
{
	const json_t *list = json_object_get(p, "sessions"), *s;
	int wkey = 3, wagent = 5;
	size_t i;

	if (!json_array_size(list)) {
		printf("no sessions yet\n");
		return;
	}
	/* Columns as wide as their longest value: a long key never pushes
	 * the others out of line. */
	json_array_foreach(list, i, s)
	{
		const char *k = json_string_value(json_object_get(s, "key"));
		const char *a = json_string_value(json_object_get(s, "agentId"));

		if (k && (int)strlen(k) > wkey)
			wkey = (int)strlen(k) > 200 ? 200 : (int)strlen(k);
		if (a && (int)strlen(a) > wagent)
			wagent = (int)strlen(a) > 64 ? 64 : (int)strlen(a);
	}
	printf("%-*s  %-*s  %-19s  %s\n", wkey, "KEY", wagent, "AGENT", "UPDATED (UTC)",
	       "SESSION ID");
	json_array_foreach(list, i, s)
	{
		time_t t = (time_t)(json_integer_value(json_object_get(s, "updatedAt")) / 1000);
		struct tm tm;
		char when[32] = "";

		if (gmtime_r(&t, &tm))
			strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
		printf("%-*s  %-*s  %-19s  %s\n", wkey,
		       ctl_s(json_string_value(json_object_get(s, "key")), ""), wagent,
		       ctl_s(json_string_value(json_object_get(s, "agentId")), ""), when,
		       ctl_s(json_string_value(json_object_get(s, "sessionId")), ""));
	}
}

static void ctl_history_print(const json_t *p)
{
	const json_t *msgs = json_object_get(p, "messages"), *m, *b;
	size_t i, j;

	json_array_foreach(msgs, i, m)
	{
		const char *role = json_string_value(json_object_get(m, "role"));

		json_array_foreach(json_object_get(m, "content"), j, b)
		{
			const char *type = json_string_value(json_object_get(b, "type"));

			if (type && strcmp(type, "text") == 0)
				printf("%s: %s\n", role ? role : "?",
				       json_string_value(json_object_get(b, "text")));
			else if (type && strcmp(type, "tool_use") == 0)
				printf("%s: [tool %s]\n", role ? role : "?",
				       json_string_value(json_object_get(b, "name")));
		}
	}
}

static void ctl_sessions_ready(struct ctl *c)
{
	if (*c->key) {
		ctl_request(c, "sessions.get", json_pack("{ss}", "sessionKey", c->key), c->req_id);
		return;
	}
	ctl_request(c, "sessions.list",
	            c->o.agent
	                ? json_pack("{ss sI}", "agentId", c->o.agent, "limit",
	                            (json_int_t)(c->o.limit ? c->o.limit : 200))
	                : json_pack("{sI}", "limit", (json_int_t)(c->o.limit ? c->o.limit : 200)),
	            c->req_id);
}

static void ctl_sessions_frame(struct ctl *c, const json_t *f)
{
	const json_t *p = json_object_get(f, "payload");

	if (ctl_is_res(f, c->req_id)) {
		if (!json_is_true(json_object_get(f, "ok"))) {
			ctl_print_error(c, f);
			ctl_finish(c, 1);
			return;
		}
		if (!*c->key) {
			if (c->o.json)
				ctl_print_json(p);
			else
				ctl_sessions_print(p);
			fflush(stdout);
			ctl_finish(c, 0);
			return;
		}
		/* show: the session, then its history. */
		c->acc = json_pack("{sO}", "session", p);
		ctl_request(c, "chat.history",
		            json_pack("{ss sI}", "sessionKey", c->key, "limit",
		                      (json_int_t)(c->o.limit ? c->o.limit : 20)),
		            c->req2_id);
		return;
	}
	if (!ctl_is_res(f, c->req2_id))
		return;
	if (!json_is_true(json_object_get(f, "ok"))) {
		ctl_print_error(c, f);
		ctl_finish(c, 1);
		return;
	}
	if (c->o.json) {
		json_object_set(c->acc, "history", (json_t *)p);
		ctl_print_json(c->acc);
	} else {
		const json_t *s = json_object_get(c->acc, "session");

		const json_t *todo = json_object_get(p, "todo"), *it;
		size_t i;

		printf("session %s (agent %s, id %s)\n",
		       json_string_value(json_object_get(s, "key")),
		       json_string_value(json_object_get(s, "agentId")),
		       json_string_value(json_object_get(s, "sessionId")));
		if (json_array_size(todo)) {
			printf("todo:\n");
			json_array_foreach(todo, i, it)
			{
				const char *st = json_string_value(json_object_get(it, "status"));

				printf("  %s %s\n",
				       st && strcmp(st, "done") == 0          ? "[x]"
				       : st && strcmp(st, "in_progress") == 0 ? "[>]"
				       : st && strcmp(st, "cancelled") == 0   ? "[-]"
				                                              : "[ ]",
				       ctl_s(json_string_value(json_object_get(it, "text")), ""));
			}
		}
		ctl_history_print(p);
	}
	fflush(stdout);
	ctl_finish(c, 0);
}

static const struct ctl_verb ctl_sessions_verb = {
    .name = "sessions", .ready = ctl_sessions_ready, .frame = ctl_sessions_frame};

static void ctl_sessions_usage(FILE *f)
{
	fprintf(
	    f,
	    "usage: switchboard sessions [list] [--agent ID] [--limit N] [--json]\n"
	    "       switchboard sessions show KEY [--limit N] [--json]\n\n"
	    "Lists the sessions of the running gateway, most recent first, or shows one\n"
	    "with its last N messages (default 20). KEY may be short (main).\n" CTL_COMMON_USAGE);
}

int cli_sessions(int argc, char **argv)
{
	struct ctl c;
	int first, rc;

	memset(&c, 0, sizeof c);
	c.verb = &ctl_sessions_verb;
	c.o.timeout_s = CTL_DEFAULT_TIMEOUT_S;
	rc = ctl_parse_opts(&c, argc, argv, CTL_O_AGENT | CTL_O_LIMIT, ctl_sessions_usage, &first);
	if (rc >= 0)
		return rc;
	if (first < argc && strcmp(argv[first], "list") == 0 && first + 1 == argc) {
		/* list */
	} else if (first + 2 == argc && strcmp(argv[first], "show") == 0) {
		if (snprintf(c.key, sizeof c.key, "%s", argv[first + 1]) >= (int)sizeof c.key) {
			ctl_err(&c, "the session key is too long");
			return 2;
		}
	} else if (first != argc) {
		ctl_sessions_usage(stderr);
		return 2;
	}
	return ctl_run(&c);
}

/* ---- devices ---- */

static void ctl_devices_print(const json_t *p)
{
	static const char *const groups[] = {"pending", "paired"};

	for (size_t g = 0; g < 2; g++) {
		const json_t *list = json_object_get(p, groups[g]), *d, *s;
		size_t i, j;

		printf("%s (%zu):\n", g ? "approved" : "waiting for approval",
		       json_array_size(list));
		json_array_foreach(list, i, d)
		{
			printf("  %s  %s from %s, scopes ",
			       json_string_value(json_object_get(d, "deviceId")),
			       ctl_s(json_string_value(json_object_get(d, "clientId")), "?"),
			       ctl_s(json_string_value(json_object_get(d, "remoteAddr")), "?"));
			json_array_foreach(json_object_get(d, "scopes"), j, s)
			    printf("%s%s", j ? "," : "", json_string_value(s));
			printf("\n");
		}
	}
	printf("approve with: switchboard devices approve DEVICE_ID\n");
}

static void ctl_devices_ready(struct ctl *c)
{
	if (!*c->key)
		ctl_request(c, "devices.list", NULL, c->req_id);
	else
		ctl_request(c, c->run_id, json_pack("{ss}", "deviceId", c->key), c->req_id);
}

static void ctl_devices_frame(struct ctl *c, const json_t *f)
{
	const json_t *p = json_object_get(f, "payload");

	if (!ctl_answer_ok(c, f))
		return;
	if (c->o.json)
		ctl_print_json(p);
	else if (!*c->key)
		ctl_devices_print(p);
	else if (strcmp(c->run_id, "devices.approve") == 0)
		printf("approved %s%s\n", c->key,
		       json_is_true(json_object_get(p, "alreadyApproved")) ? " (already)" : "");
	else
		printf("revoked %s\n", c->key);
	fflush(stdout);
	ctl_finish(c, 0);
}

static const struct ctl_verb ctl_devices_verb = {
    .name = "devices", .ready = ctl_devices_ready, .frame = ctl_devices_frame};

static void ctl_devices_usage(FILE *f)
{
	fprintf(f, "usage: switchboard devices [list] [--json]\n"
	           "       switchboard devices approve DEVICE_ID\n"
	           "       switchboard devices revoke DEVICE_ID\n\n"
	           "Devices are control-plane clients with their own Ed25519 key. A new one\n"
	           "waits until approved here; it then receives its own token. Revoking\n"
	           "disconnects it and makes its token worthless.\n" CTL_COMMON_USAGE);
}

int cli_devices(int argc, char **argv)
{
	struct ctl c;
	int first, rc;

	memset(&c, 0, sizeof c);
	c.verb = &ctl_devices_verb;
	c.o.timeout_s = CTL_DEFAULT_TIMEOUT_S;
	rc = ctl_parse_opts(&c, argc, argv, 0, ctl_devices_usage, &first);
	if (rc >= 0)
		return rc;
	if (first == argc || (first + 1 == argc && strcmp(argv[first], "list") == 0)) {
		/* list */
	} else if (first + 2 == argc &&
	           (strcmp(argv[first], "approve") == 0 || strcmp(argv[first], "revoke") == 0)) {
		snprintf(c.run_id, sizeof c.run_id, "devices.%s", argv[first]);
		if (snprintf(c.key, sizeof c.key, "%s", argv[first + 1]) >= (int)sizeof c.key) {
			ctl_err(&c, "the device id is too long");
			return 2;
		}
	} else {
		ctl_devices_usage(stderr);
		return 2;
	}
	return ctl_run(&c);
}

/* ---- one request (cli_cron.c and other simple verbs) ---- */

struct ctl_call {
	const char *method;
	json_t *params;
	void (*print)(const json_t *payload);
};

static struct ctl_call ctl_the_call;

static void ctl_call_ready(struct ctl *c)
{
	ctl_request(c, ctl_the_call.method, ctl_the_call.params, c->req_id);
	ctl_the_call.params = NULL;
}

static void ctl_call_frame(struct ctl *c, const json_t *f)
{
	const json_t *p = json_object_get(f, "payload");

	if (!ctl_answer_ok(c, f))
		return;
	if (c->o.json || !ctl_the_call.print)
		ctl_print_json(p);
	else
		ctl_the_call.print(p);
	fflush(stdout);
	ctl_finish(c, 0);
}

int cli_ctl_call(const struct cli_ctl_common *o, const char *verb, const char *method,
                 json_t *params, void (*print)(const json_t *payload))
{
	static struct ctl_verb v;
	struct ctl c;
	int rc;

	memset(&c, 0, sizeof c);
	v = (struct ctl_verb){.name = verb, .ready = ctl_call_ready, .frame = ctl_call_frame};
	c.verb = &v;
	c.o.json = o->json;
	c.o.url = o->url;
	c.o.token = o->token;
	c.o.token_file = o->token_file;
	c.o.config = o->config;
	c.o.timeout_s = o->timeout_s > 0 ? o->timeout_s : CTL_DEFAULT_TIMEOUT_S;
	ctl_the_call = (struct ctl_call){.method = method, .params = params, .print = print};
	rc = ctl_run(&c);
	json_decref(ctl_the_call.params);
	ctl_the_call.params = NULL;
	return rc;
}

/* ---- approvals (gate 3: tool calls waiting for the operator) ---- */

static void ctl_approvals_print(const json_t *p)
{
	const json_t *list = json_object_get(p, "approvals"), *a;
	size_t i;

	printf("waiting for approval (%zu):\n", json_array_size(list));
	json_array_foreach(list, i, a)
	{
		printf("  %s  agent %s, %s: %s\n", json_string_value(json_object_get(a, "id")),
		       ctl_s(json_string_value(json_object_get(a, "agentId")), "?"),
		       ctl_s(json_string_value(json_object_get(a, "tool")), "?"),
		       ctl_s(json_string_value(json_object_get(a, "summary")), ""));
		printf("      session %s, asked from %s%s%s, scope %s\n",
		       ctl_s(json_string_value(json_object_get(a, "sessionKey")), "-"),
		       ctl_s(json_string_value(json_object_get(a, "channel")), "the gateway"),
		       json_object_get(a, "sender") ? " by " : "",
		       ctl_s(json_string_value(json_object_get(a, "sender")), ""),
		       ctl_s(json_string_value(json_object_get(a, "scope")), "-"));
	}
	printf("answer with: switchboard approvals approve ID [--scope once|session|agent]\n"
	       "             switchboard approvals deny ID\n");
}

static void ctl_approvals_ready(struct ctl *c)
{
	if (!*c->key)
		ctl_request(c, "approvals.list", NULL, c->req_id);
	else if (c->text)
		ctl_request(c, c->run_id, json_pack("{ss ss}", "id", c->key, "scope", c->text),
		            c->req_id);
	else
		ctl_request(c, c->run_id, json_pack("{ss}", "id", c->key), c->req_id);
}

static void ctl_approvals_frame(struct ctl *c, const json_t *f)
{
	const json_t *p = json_object_get(f, "payload");

	if (!ctl_answer_ok(c, f))
		return;
	if (c->o.json)
		ctl_print_json(p);
	else if (!*c->key)
		ctl_approvals_print(p);
	else
		printf("%s %s\n",
		       ctl_s(json_string_value(json_object_get(p, "decision")), "answered"),
		       c->key);
	fflush(stdout);
	ctl_finish(c, 0);
}

static const struct ctl_verb ctl_approvals_verb = {
    .name = "approvals", .ready = ctl_approvals_ready, .frame = ctl_approvals_frame};

static void ctl_approvals_usage(FILE *f)
{
	fprintf(f,
	        "usage: switchboard approvals [list] [--json]\n"
	        "       switchboard approvals approve ID [--scope once|session|agent]\n"
	        "       switchboard approvals deny ID\n\n"
	        "Tool calls that need the operator's approval wait here (until the\n"
	        "security.approval_timeout, then they are denied). --scope session or\n"
	        "agent also approves later calls of the same tool on the same path prefix\n"
	        "or command, in this session or in every session of the agent.\n" CTL_COMMON_USAGE);
}

int cli_approvals(int argc, char **argv)
{
	struct ctl c;
	char *args[64];
	const char *scope = NULL;
	int first, rc, n = 0;

	memset(&c, 0, sizeof c);
	c.verb = &ctl_approvals_verb;
	c.o.timeout_s = CTL_DEFAULT_TIMEOUT_S;
	/* --scope is this verb's own option; the rest are the common ones */
	for (int i = 0; i < argc; i++) {
		if (strcmp(argv[i], "--scope") == 0 && i + 1 < argc) {
			scope = argv[++i];
			continue;
		}
		if (strncmp(argv[i], "--scope=", 8) == 0) {
			scope = argv[i] + 8;
			continue;
		}
		if (n == (int)(sizeof args / sizeof args[0]) - 1) {
			ctl_approvals_usage(stderr);
			return 2;
		}
		args[n++] = argv[i];
	}
	args[n] = NULL;
	if (scope && strcmp(scope, "once") != 0 && strcmp(scope, "session") != 0 &&
	    strcmp(scope, "agent") != 0) {
		ctl_approvals_usage(stderr);
		return 2;
	}
	rc = ctl_parse_opts(&c, n, args, 0, ctl_approvals_usage, &first);
	if (rc >= 0)
		return rc;
	if (first == n || (first + 1 == n && strcmp(args[first], "list") == 0)) {
		/* list */
	} else if (first + 2 == n &&
	           (strcmp(args[first], "approve") == 0 || strcmp(args[first], "deny") == 0)) {
		snprintf(c.run_id, sizeof c.run_id, "approvals.%s", args[first]);
		if (snprintf(c.key, sizeof c.key, "%s", args[first + 1]) >= (int)sizeof c.key) {
			ctl_err(&c, "the approval id is too long");
			return 2;
		}
		if (strcmp(args[first], "approve") == 0)
			c.text = scope;
	} else {
		ctl_approvals_usage(stderr);
		return 2;
	}
	return ctl_run(&c);
}
