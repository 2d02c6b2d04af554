/*
 * cli_route.c - subcommands: route (explain a routing decision), bindings
 * (list the compiled table), pairing list|approve|deny.
 *
 * The pairing verbs open the store directly on a private loop: the gateway
 * may be running on the same home at the same time, which SQLite in WAL
 * mode with a busy timeout allows.
 */
#include "gateway/cli/cli_route.h"

#include <ctype.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "bindings/bindings.h"
#include "gateway/config/channels_config.h"
#include "gateway/cli/cli.h"
#include "gateway/config/config.h"
#include "agents/safety/permissions.h"
#include "gateway/core/buf.h"
#include "gateway/core/envelope.h"
#include "gateway/core/err.h"
#include "gateway/core/log.h"
#include "gateway/store/store.h"

#define CR_OUT_MAX (16u << 20) /* explain / list text */

/* ---- shared ---- */

/* Loads the configuration (home, --config); prints errors. 0 or 1. */
static int cr_load(const char *explicit_cfg, struct config **out)
{
	char home[PATH_MAX], path[PATH_MAX];
	struct cfg_errors errs;
	int rc;

	*out = NULL;
	if (sodium_init() < 0 || cli_home(home, sizeof home) ||
	    cli_config_path(home, explicit_cfg, path, sizeof path))
		return 1;
	cfg_errors_init(&errs);
	rc = config_load(path, home, out, &errs);
	if (rc) {
		cfg_errors_print(&errs, stderr);
		fprintf(stderr, "switchboard: %s: %s\n", path,
		        rc == SB_ERR_CONFIG ? "the configuration has errors (fix them first)"
		                            : sb_strerror(rc));
	}
	cfg_errors_free(&errs);
	return rc ? 1 : 0;
}

static int cr_table(const struct config *c, struct bindings_table **out)
{
	int rc = config_bindings_table(c, out);

	if (rc)
		fprintf(stderr, "switchboard: cannot compile the bindings: %s\n", sb_strerror(rc));
	return rc ? 1 : 0;
}

static bool cr_known_channel(const char *name)
{
	for (size_t i = 0; i < CHANNELS_CONFIG_COUNT; i++)
		if (strcmp(channels_config_names[i], name) == 0)
			return true;
	return false;
}

static int cr_print_json(json_t *j)
{
	int rc = json_dumpf(j, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);

	fputc('\n', stdout);
	return rc == 0 ? 0 : 1;
}

/* The store on a private loop, for the duration of one command. */
struct cr_store {
	uv_loop_t loop;
	bool loop_ok;
	struct store *st;
};

static int cr_store_open(struct cr_store *s, const struct config *c)
{
	struct store_options o = {0};
	int rc;

	memset(s, 0, sizeof *s);
	if (uv_loop_init(&s->loop) != 0) {
		fprintf(stderr, "switchboard: cannot start an event loop\n");
		return 1;
	}
	s->loop_ok = true;
	o.path = c->store.path;
	o.busy_timeout_ms = c->store.busy_timeout_ms;
	rc = store_open(&s->st, &s->loop, &o);
	if (rc) {
		fprintf(stderr, "switchboard: cannot open the store %s: %s\n", c->store.path,
		        sb_strerror(rc));
		return 1;
	}
	return 0;
}

/* Runs the loop until *done (the operation's callback ran). */
static void cr_store_wait(struct cr_store *s, const bool *done)
{
	while (!*done && uv_run(&s->loop, UV_RUN_ONCE))
		;
}

static void cr_store_close(struct cr_store *s)
{
	if (s->st)
		store_close(s->st);
	s->st = NULL;
	if (s->loop_ok) {
		uv_run(&s->loop, UV_RUN_DEFAULT);
		uv_loop_close(&s->loop);
		s->loop_ok = false;
	}
}

/* ---- route ---- */

static void cr_route_usage(FILE *f)
{
	fprintf(f, "usage: switchboard route --channel C [--account A] [--team T] [--guild G]\n"
	           "           [--peer KIND:ID] [--parent KIND:ID] [--thread ID] [--sender ID]\n"
	           "           [--mention] [--text T] [--from-bot] [--from-self] [--json]\n"
	           "           [--config FILE]\n\n"
	           "Explains where a message with these properties would go: the agent, the\n"
	           "session key, the winning binding with its file:line, every tier tried and why\n"
	           "each candidate did or did not match, and whether the sender may reach the\n"
	           "agent (allow, pairing, mention-required, deny, drop).\n"
	           "  --channel C       telegram, slack, webhook or webchat (required)\n"
	           "  --account A       the channel account (default: \"default\")\n"
	           "  --peer KIND:ID    the conversation; KIND is direct, group or channel\n"
	           "                    (default: direct:<sender>)\n"
	           "  --parent KIND:ID  the conversation a thread belongs to\n"
	           "  --thread ID       a thread (on telegram: a forum topic)\n"
	           "  --sender ID       the sender's user id (default for direct: the peer id)\n"
	           "  --mention         the bot was mentioned or replied to (always so for\n"
	           "                    webhook, whose deliveries address the bot)\n"
	           "  --text T          the message text (mention patterns, reset triggers)\n"
	           "  --from-bot        the sender is a bot;  --from-self  the bot itself\n"
	           "  --json            print the explanation as JSON\n"
	           "Senders approved by pairing are read from the store when it exists.\n");
}

/* "KIND:ID" into kind and id (id points into s). */
static int cr_parse_peer(const char *s, enum envelope_peer_kind *kind, const char **id)
{
	const char *colon = strchr(s, ':');
	char k[16];
	size_t n;

	if (!colon || colon == s || !colon[1])
		return SB_ERR_INVAL;
	n = (size_t)(colon - s);
	if (n >= sizeof k)
		return SB_ERR_INVAL;
	memcpy(k, s, n);
	k[n] = '\0';
	if (envelope_peer_kind_parse(k, kind))
		return SB_ERR_INVAL;
	*id = colon + 1;
	return SB_OK;
}

struct cr_allow {
	bool done;
	int rc;
	bool allowed;
};

static void cr_allow_cb(void *ud, int rc, bool allowed)
{
	struct cr_allow *a = ud;

	a->done = true;
	a->rc = rc;
	a->allowed = allowed;
}

/* Whether s (NULL: yes) is valid UTF-8: JSON carries nothing else. */
static bool cr_utf8(const char *s)
{
	json_t *j = s ? json_string(s) : NULL;

	json_decref(j);
	return !s || j != NULL;
}

static bool cr_approved(void *ud, const char *channel, const char *account, const char *sender)
{
	const struct cr_allow *a = ud;

	(void)channel;
	(void)account;
	(void)sender;
	return a->allowed;
}

/* Asks the store (when its file exists) whether the sender was approved. */
static void cr_lookup_approval(const struct config *c, const struct envelope *e, struct cr_allow *a)
{
	struct cr_store s;
	int rc;

	memset(a, 0, sizeof *a);
	if (e->peer_kind != ENVELOPE_PEER_DIRECT || !e->sender_id ||
	    access(c->store.path, F_OK) != 0)
		return;
	if (cr_store_open(&s, c)) {
		cr_store_close(&s);
		return;
	}
	rc = store_allow_check(s.st, e->channel, e->account, e->sender_id, cr_allow_cb, a);
	if (rc == SB_OK)
		cr_store_wait(&s, &a->done);
	cr_store_close(&s);
	if (rc || a->rc) {
		fprintf(stderr,
		        "switchboard: cannot read the allow list (%s); treating the "
		        "sender as not approved\n",
		        sb_strerror(rc ? rc : a->rc));
		a->allowed = false;
	}
}

int cli_route(int argc, char **argv)
{
	enum {
		O_CHANNEL = 1000,
		O_ACCOUNT,
		O_TEAM,
		O_GUILD,
		O_PEER,
		O_PARENT,
		O_THREAD,
		O_SENDER,
		O_MENTION,
		O_TEXT,
		O_BOT,
		O_SELF,
		O_JSON
	};
	static const struct option opts[] = {{"channel", required_argument, NULL, O_CHANNEL},
	                                     {"account", required_argument, NULL, O_ACCOUNT},
	                                     {"team", required_argument, NULL, O_TEAM},
	                                     {"guild", required_argument, NULL, O_GUILD},
	                                     {"peer", required_argument, NULL, O_PEER},
	                                     {"parent", required_argument, NULL, O_PARENT},
	                                     {"thread", required_argument, NULL, O_THREAD},
	                                     {"sender", required_argument, NULL, O_SENDER},
	                                     {"mention", no_argument, NULL, O_MENTION},
	                                     {"text", required_argument, NULL, O_TEXT},
	                                     {"from-bot", no_argument, NULL, O_BOT},
	                                     {"from-self", no_argument, NULL, O_SELF},
	                                     {"json", no_argument, NULL, O_JSON},
	                                     {"config", required_argument, NULL, 'c'},
	                                     {"help", no_argument, NULL, 'h'},
	                                     {0}};
	struct envelope e = {.account = BINDINGS_DEFAULT_ACCOUNT};
	struct bindings_input in = {.env = &e};
	const char *explicit_cfg = NULL, *peer = NULL, *parent = NULL;
	struct bindings_table *t = NULL;
	struct config *cfg = NULL;
	struct cr_allow allow;
	struct buf out;
	json_t *j = NULL;
	bool json = false;
	int c, rc = 1, brc;

	optind = 1;
	while ((c = getopt_long(argc, argv, "c:h", opts, NULL)) != -1) {
		switch (c) {
		case O_CHANNEL:
			e.channel = optarg;
			break;
		case O_ACCOUNT:
			e.account = optarg;
			break;
		case O_TEAM:
			e.team_id = optarg;
			break;
		case O_GUILD:
			e.guild_id = optarg;
			break;
		case O_PEER:
			peer = optarg;
			break;
		case O_PARENT:
			parent = optarg;
			break;
		case O_THREAD:
			e.thread_id = optarg;
			break;
		case O_SENDER:
			e.sender_id = optarg;
			break;
		case O_MENTION:
			e.mentioned = true;
			break;
		case O_TEXT:
			e.text = optarg;
			break;
		case O_BOT:
			in.sender_is_bot = true;
			break;
		case O_SELF:
			in.sender_is_self = true;
			break;
		case O_JSON:
			json = true;
			break;
		case 'c':
			explicit_cfg = optarg;
			break;
		case 'h':
			cr_route_usage(stdout);
			return 0;
		default:
			cr_route_usage(stderr);
			return 2;
		}
	}
	if (optind != argc || !e.channel || !*e.channel) {
		if (optind == argc)
			fprintf(stderr, "switchboard route: --channel is required\n\n");
		cr_route_usage(stderr);
		return 2;
	}
	if (peer && cr_parse_peer(peer, &e.peer_kind, &e.peer_id)) {
		fprintf(stderr,
		        "switchboard route: --peer wants KIND:ID with KIND direct, group or "
		        "channel, got \"%s\"\n",
		        peer);
		return 2;
	}
	if (parent && cr_parse_peer(parent, &in.parent_kind, &e.parent_id)) {
		fprintf(stderr,
		        "switchboard route: --parent wants KIND:ID with KIND direct, group or "
		        "channel, got \"%s\"\n",
		        parent);
		return 2;
	}
	in.parent_kind_set = parent != NULL;
	if (!peer && !e.sender_id) {
		fprintf(stderr, "switchboard route: give --peer, or --sender for a direct "
		                "message\n\n");
		cr_route_usage(stderr);
		return 2;
	}
	if (json && (!cr_utf8(e.channel) || !cr_utf8(e.account) || !cr_utf8(e.team_id) ||
	             !cr_utf8(e.guild_id) || !cr_utf8(peer) || !cr_utf8(parent) ||
	             !cr_utf8(e.thread_id) || !cr_utf8(e.sender_id) || !cr_utf8(e.text))) {
		fprintf(stderr, "switchboard route: --json needs every argument in UTF-8\n");
		return 2;
	}
	/* A delivery to a webhook addresses the bot, as the channel marks it:
	 * without this, every group delivery would read "mention required". */
	if (strcmp(e.channel, "webhook") == 0)
		e.mentioned = true;
	if (!peer)
		e.peer_id = e.sender_id; /* a direct message from the sender */
	if (!e.sender_id && e.peer_kind == ENVELOPE_PEER_DIRECT)
		e.sender_id = e.peer_id;
	log_configure(LOG_WARN, LOG_FORMAT_LOGFMT, NULL);
	buf_init(&out, CR_OUT_MAX);
	if (cr_load(explicit_cfg, &cfg) || cr_table(cfg, &t))
		goto out;
	if (!cr_known_channel(e.channel))
		fprintf(stderr,
		        "switchboard route: note: \"%s\" is not a configured channel; its access "
		        "defaults apply\n",
		        e.channel);
	cr_lookup_approval(cfg, &e, &allow);
	in.approved = cr_approved;
	in.approved_ud = &allow;
	/* as the dispatcher decides it: only the operator's DMs share main */
	in.owner = permissions_is_owner(&cfg->security, e.channel, e.sender_id);
	if (json) {
		brc = bindings_explain_json(t, &in, &j);
		if (brc == SB_OK)
			rc = cr_print_json(j);
	} else {
		brc = bindings_explain(t, &in, &out);
		if (brc == SB_OK) {
			fputs(out.data ? out.data : "", stdout);
			rc = 0;
		}
	}
	if (brc)
		fprintf(stderr, "switchboard route: %s\n",
		        brc == SB_ERR_INVAL    ? "the message lacks a peer to key a session on"
		        : brc == SB_ERR_TOOBIG ? "the ids are too long for a session key"
		                               : sb_strerror(brc));
out:
	json_decref(j);
	buf_free(&out);
	bindings_table_free(t);
	config_unref(cfg);
	return rc;
}

/* ---- bindings ---- */

static void cr_bindings_usage(FILE *f)
{
	fprintf(f, "usage: switchboard bindings [--json] [--config FILE]\n\n"
	           "Lists the compiled bindings in precedence order: tier by tier (peer,\n"
	           "peer-wildcard, guild, team, account, channel), in file order within a tier,\n"
	           "each with its file:line; bindings that can never win are marked. Ends with\n"
	           "the default agent.\n");
}

int cli_bindings(int argc, char **argv)
{
	static const struct option opts[] = {{"json", no_argument, NULL, 'j'},
	                                     {"config", required_argument, NULL, 'c'},
	                                     {"help", no_argument, NULL, 'h'},
	                                     {0}};
	const char *explicit_cfg = NULL;
	struct bindings_table *t = NULL;
	struct config *cfg = NULL;
	struct buf out;
	json_t *j = NULL;
	bool json = false;
	int c, rc = 1;

	optind = 1;
	while ((c = getopt_long(argc, argv, "c:h", opts, NULL)) != -1) {
		switch (c) {
		case 'j':
			json = true;
			break;
		case 'c':
			explicit_cfg = optarg;
			break;
		case 'h':
			cr_bindings_usage(stdout);
			return 0;
		default:
			cr_bindings_usage(stderr);
			return 2;
		}
	}
	if (optind != argc) {
		cr_bindings_usage(stderr);
		return 2;
	}
	log_configure(LOG_WARN, LOG_FORMAT_LOGFMT, NULL);
	buf_init(&out, CR_OUT_MAX);
	if (cr_load(explicit_cfg, &cfg) || cr_table(cfg, &t))
		goto out;
	if (json) {
		if (bindings_list_json(t, &j) == SB_OK)
			rc = cr_print_json(j);
	} else if (bindings_list(t, &out) == SB_OK) {
		fputs(out.data ? out.data : "", stdout);
		rc = 0;
	}
	if (rc)
		fprintf(stderr, "switchboard bindings: out of memory\n");
out:
	json_decref(j);
	buf_free(&out);
	bindings_table_free(t);
	config_unref(cfg);
	return rc;
}

/* ---- pairing ---- */

static void cr_pairing_usage(FILE *f)
{
	fprintf(f, "usage: switchboard pairing list [CHANNEL] [--json] [--config FILE]\n"
	           "       switchboard pairing approve CHANNEL CODE [--config FILE]\n"
	           "       switchboard pairing deny CHANNEL CODE [--config FILE]\n"
	           "       switchboard pairing approved [CHANNEL] [--json] [--config FILE]\n"
	           "       switchboard pairing revoke CHANNEL SENDER [--account ACCOUNT] [--config "
	           "FILE]\n\n"
	           "An unknown sender who writes to the bot in a direct message (dm_policy\n"
	           "pairing) gets a one-time code of 8 characters, valid for an hour; at most 3\n"
	           "are pending per channel account.\n"
	           "  list     the pending requests (all channels, or one)\n"
	           "  approve  lets the sender with that code talk to the bot from now on\n"
	           "  deny     drops the request; the sender may ask again\n"
	           "  approved the senders approved so far\n"
	           "  revoke   takes an approved sender off the list (on every account of the\n"
	           "           channel, or one); their next message asks for a new code\n"
	           "CHANNEL is telegram, slack, webhook or webchat.\n");
}

struct cr_pairing_res {
	bool done;
	int rc;
	char channel[64], account[160], sender[512];
};

static void cr_pairing_cb(void *ud, int rc, const struct store_pairing *p, bool created)
{
	struct cr_pairing_res *r = ud;

	(void)created;
	r->done = true;
	r->rc = rc;
	if (p) {
		snprintf(r->channel, sizeof r->channel, "%s", p->channel);
		snprintf(r->account, sizeof r->account, "%s", p->account);
		snprintf(r->sender, sizeof r->sender, "%s", p->sender_id);
	}
}

struct cr_list_res {
	bool done;
	int rc;
	bool json;
	int64_t now;
	const char *channel;
};

static void cr_list_cb(void *ud, int rc, const struct store_pairing *v, size_t n)
{
	struct cr_list_res *r = ud;
	json_t *a = NULL;

	r->done = true;
	r->rc = rc;
	if (rc)
		return;
	if (r->json) {
		a = json_array();
		for (size_t i = 0; a && i < n; i++) {
			json_t *o =
			    json_pack("{s:s, s:s, s:s, s:s, s:I, s:I}", "channel", v[i].channel,
			              "account", v[i].account, "sender_id", v[i].sender_id, "code",
			              v[i].code, "created_at", (json_int_t)v[i].created_at,
			              "expires_at", (json_int_t)v[i].expires_at);

			if (!o || json_array_append_new(a, o)) {
				json_decref(a);
				a = NULL;
			}
		}
		if (!a || cr_print_json(a))
			r->rc = SB_ERR_NOMEM;
		json_decref(a);
		return;
	}
	if (!n) {
		printf("no pending pairing requests%s%s\n", r->channel ? " on " : "",
		       r->channel ? r->channel : "");
		return;
	}
	printf("%-10s %-12s %-20s %-9s %s\n", "CHANNEL", "ACCOUNT", "SENDER", "CODE", "EXPIRES IN");
	for (size_t i = 0; i < n; i++) {
		int64_t left = (v[i].expires_at - r->now + 59999) / 60000;

		printf("%-10s %-12s %-20s %-9s %lldm\n", v[i].channel, v[i].account, v[i].sender_id,
		       v[i].code, (long long)(left > 0 ? left : 0));
	}
}

static void cr_approved_cb(void *ud, int rc, const struct store_allow_entry *v, size_t n)
{
	struct cr_list_res *r = ud;
	json_t *a = NULL;

	r->done = true;
	r->rc = rc;
	if (rc)
		return;
	if (r->json) {
		a = json_array();
		for (size_t i = 0; a && i < n; i++) {
			json_t *o = json_pack("{s:s, s:s, s:s, s:I}", "channel", v[i].channel,
			                      "account", v[i].account, "sender_id", v[i].sender_id,
			                      "approved_at", (json_int_t)v[i].approved_at);

			if (!o || json_array_append_new(a, o)) {
				json_decref(a);
				a = NULL;
			}
		}
		if (!a || cr_print_json(a))
			r->rc = SB_ERR_NOMEM;
		json_decref(a);
		return;
	}
	if (!n) {
		printf("no approved senders%s%s\n", r->channel ? " on " : "",
		       r->channel ? r->channel : "");
		return;
	}
	printf("%-10s %-12s %-20s %s\n", "CHANNEL", "ACCOUNT", "SENDER", "APPROVED");
	for (size_t i = 0; i < n; i++) {
		int64_t ago = (r->now - v[i].approved_at) / 3600000;

		printf("%-10s %-12s %-20s %lldh ago\n", v[i].channel, v[i].account, v[i].sender_id,
		       (long long)(ago > 0 ? ago : 0));
	}
}

static void cr_revoke_cb(void *ud, int rc)
{
	struct cr_pairing_res *r = ud;

	r->done = true;
	r->rc = rc;
}

static int64_t cr_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int cli_pairing(int argc, char **argv)
{
	static const struct option opts[] = {{"json", no_argument, NULL, 'j'},
	                                     {"config", required_argument, NULL, 'c'},
	                                     {"account", required_argument, NULL, 'a'},
	                                     {"help", no_argument, NULL, 'h'},
	                                     {0}};
	const char *verb, *explicit_cfg = NULL, *channel = NULL, *code = NULL, *account = NULL;
	char code_upper[64];
	struct cr_pairing_res pr = {0};
	struct cr_list_res lr = {0};
	struct config *cfg = NULL;
	struct cr_store s;
	bool json = false, list, approved, revoke;
	int c, rc = 1, qrc;

	memset(&s, 0, sizeof s);
	if (argc < 2) {
		cr_pairing_usage(stderr);
		return 2;
	}
	verb = argv[1];
	if (strcmp(verb, "-h") == 0 || strcmp(verb, "--help") == 0) {
		cr_pairing_usage(stdout);
		return 0;
	}
	approved = strcmp(verb, "approved") == 0;
	revoke = strcmp(verb, "revoke") == 0;
	list = strcmp(verb, "list") == 0 || approved;
	if (!list && !revoke && strcmp(verb, "approve") != 0 && strcmp(verb, "deny") != 0) {
		fprintf(stderr, "switchboard pairing: unknown subcommand \"%s\"\n\n", verb);
		cr_pairing_usage(stderr);
		return 2;
	}
	optind = 1;
	while ((c = getopt_long(argc - 1, argv + 1, "c:h", opts, NULL)) != -1) {
		switch (c) {
		case 'j':
			json = true;
			break;
		case 'a':
			account = optarg;
			break;
		case 'c':
			explicit_cfg = optarg;
			break;
		case 'h':
			cr_pairing_usage(stdout);
			return 0;
		default:
			cr_pairing_usage(stderr);
			return 2;
		}
	}
	argc -= 1 + optind;
	argv += 1 + optind;
	if ((list && argc > 1) || (!list && argc != 2) || (!list && json) || (account && !revoke)) {
		cr_pairing_usage(stderr);
		return 2;
	}
	channel = argc > 0 ? argv[0] : NULL;
	code = argc > 1 ? argv[1] : NULL;
	if (code && !revoke && strlen(code) < sizeof code_upper) {
		/* Codes are upper case; accept them typed either way. */
		for (size_t i = 0; i <= strlen(code); i++)
			code_upper[i] = (char)toupper((unsigned char)code[i]);
		code = code_upper;
	}
	if (channel && !cr_known_channel(channel)) {
		fprintf(stderr,
		        "switchboard pairing: unknown channel \"%s\" (telegram, slack, webhook, "
		        "webchat)\n",
		        channel);
		return 2;
	}
	log_configure(LOG_WARN, LOG_FORMAT_LOGFMT, NULL);
	if (cr_load(explicit_cfg, &cfg) || cr_store_open(&s, cfg))
		goto out;
	if (list) {
		lr.json = json;
		lr.now = cr_now_ms();
		lr.channel = channel;
		qrc = approved ? store_allow_list(s.st, channel, cr_approved_cb, &lr)
		               : store_pairing_list(s.st, channel, cr_list_cb, &lr);
		if (qrc == SB_OK)
			cr_store_wait(&s, &lr.done);
		qrc = qrc ? qrc : lr.rc;
	} else if (revoke) {
		qrc = store_allow_remove(s.st, channel, account, code, cr_revoke_cb, &pr);
		if (qrc == SB_OK)
			cr_store_wait(&s, &pr.done);
		qrc = qrc ? qrc : pr.rc;
		if (qrc == SB_ERR_NOTFOUND) {
			fprintf(stderr,
			        "switchboard pairing: %s sender %s is not approved%s%s (see "
			        "`switchboard pairing approved`)\n",
			        channel, code, account ? " on account " : "",
			        account ? account : "");
			goto out;
		}
	} else {
		qrc = strcmp(verb, "approve") == 0
		          ? store_pairing_approve(s.st, channel, code, cr_pairing_cb, &pr)
		          : store_pairing_deny(s.st, channel, code, cr_pairing_cb, &pr);
		if (qrc == SB_OK)
			cr_store_wait(&s, &pr.done);
		qrc = qrc ? qrc : pr.rc;
	}
	if (qrc == SB_ERR_NOTFOUND) {
		fprintf(stderr,
		        "switchboard pairing: no pending request on %s with code %s (codes expire "
		        "after an hour; see `switchboard pairing list`)\n",
		        channel, code);
		goto out;
	}
	if (qrc) {
		fprintf(stderr, "switchboard pairing: %s failed: %s\n", verb, sb_strerror(qrc));
		goto out;
	}
	if (revoke)
		printf("revoked: %s sender %s%s%s must ask for a new code to talk to the bot\n",
		       channel, code, account ? " on account " : "", account ? account : "");
	else if (!list && strcmp(verb, "approve") == 0)
		printf("approved: %s sender %s (account %s) may now talk to the bot\n", pr.channel,
		       pr.sender, pr.account);
	else if (!list)
		printf("denied: the request of %s sender %s (account %s) is removed; they may ask "
		       "again\n",
		       pr.channel, pr.sender, pr.account);
	rc = 0;
out:
	cr_store_close(&s);
	config_unref(cfg);
	return rc;
}
