/*
 * test_channels.c - what the channel adapters share (channels/adapter.c)
 * and the limits they share with the schemas and the daemon: an account id
 * that validates also starts, a send outcome arrives on the next loop turn,
 * refusal logs are rate-limited, and the uniqueness rules across a
 * section's entries name the key to fix.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <uv.h>

#include "channels/adapter.h"
#include "channels/channel.h"
#include "gateway/config/config.h"
#include "gateway/core/buf.h"
#include "gateway/core/cfg.h"
#include "gateway/core/err.h"
#include "gateway/core/log.h"
#include "gateway/daemon/daemon_internal.h"

static char *load_errors(const char *yaml)
{
	struct cfg_errors e;
	struct config *c = NULL;
	char *out = NULL;
	size_t len = 0;
	FILE *f;

	cfg_errors_init(&e);
	if (config_load_text(yaml, "t.yaml", "/tmp", &c, &e) == SB_OK) {
		config_unref(c);
		cfg_errors_free(&e);
		return NULL;
	}
	f = open_memstream(&out, &len);
	cfg_errors_print(&e, f);
	fclose(f);
	cfg_errors_free(&e);
	return out;
}

static void id_of(char *out, size_t len)
{
	memset(out, 'a', len);
	out[len] = '\0';
}

/* The longest id every schema accepts is the longest an instance holds;
 * one more character is refused by the schema, with the key named. */
static void test_account_id_limit(void **state)
{
	char id[ENVELOPE_ACCOUNT_MAX + 2], yaml[512], *err;
	struct channel c;

	(void)state;
	memset(&c, 0, sizeof c);
	id_of(id, ENVELOPE_ACCOUNT_MAX);
	assert_int_equal(channel_init(&c, NULL, id), SB_OK);
	assert_string_equal(c.account, id);
	snprintf(yaml, sizeof yaml,
	         "agents: [{id: main}]\nchannels:\n  slack:\n    accounts:\n"
	         "      - {id: %s, bot_token: xoxb-1, signing_secret: abcdefgh12345678}\n"
	         "  telegram:\n    accounts:\n      - {id: %s, token: \"1:abc\"}\n",
	         id, id);
	err = load_errors(yaml);
	assert_null(err);

	id_of(id, ENVELOPE_ACCOUNT_MAX + 1);
	assert_int_equal(channel_init(&c, NULL, id), SB_ERR_TOOBIG);
	snprintf(yaml, sizeof yaml,
	         "agents: [{id: main}]\nchannels:\n  slack:\n    accounts:\n"
	         "      - {id: %s, bot_token: xoxb-1, signing_secret: abcdefgh12345678}\n"
	         "  telegram:\n    accounts:\n      - {id: %s, token: \"1:abc\"}\n",
	         id, id);
	err = load_errors(yaml);
	assert_non_null(err);
	assert_non_null(strstr(err, "channels.slack.accounts[0].id"));
	assert_non_null(strstr(err, "channels.telegram.accounts[0].id"));
	free(err);
	assert_int_equal(channel_init(&c, NULL, NULL), SB_OK);
	assert_string_equal(c.account, "default");
}

/* As many accounts as a section may declare validate, one more does not,
 * and that many on every adapter at once fit the daemon's instance table
 * (it used to hold 16 in all while Slack alone accepted 32). */
static void test_account_count_limit(void **state)
{
	struct buf yaml;
	size_t adapters = 0;
	char *err;

	(void)state;
	while (channel_registry[adapters])
		adapters++;
	assert_true(adapters <= CHANNEL_ADAPTERS_MAX);
	assert_true(DAEMON_CHANNELS_MAX >= adapters * CHANNEL_ACCOUNTS_MAX);
	for (int extra = 0; extra <= 1; extra++) {
		buf_init(&yaml, 1 << 20);
		buf_puts(&yaml, "agents: [{id: main}]\nchannels:\n  telegram:\n    accounts:\n");
		for (int i = 0; i < CHANNEL_ACCOUNTS_MAX + extra; i++)
			buf_printf(&yaml, "      - {id: b%d, token: \"%d:abc\"}\n", i, i + 1);
		err = load_errors(yaml.data);
		buf_free(&yaml);
		if (!extra) {
			assert_null(err);
		} else {
			assert_non_null(err);
			assert_non_null(strstr(err, "channels.telegram.accounts"));
			free(err);
		}
	}
}

struct later {
	int calls;
	int rc;
	char error[64], msg_id[64];
};

static void later_cb(void *ud, const struct channel_send_result *res)
{
	struct later *l = ud;

	l->calls++;
	l->rc = res->rc;
	snprintf(l->error, sizeof l->error, "%s", res->error ? res->error : "");
	snprintf(l->msg_id, sizeof l->msg_id, "%s", res->channel_msg_id ? res->channel_msg_id : "");
}

/* The outcome arrives on the next turn, not inside the call, with its own
 * copies of the strings. */
static void test_report_later(void **state)
{
	uv_loop_t loop;
	struct host host = {0};
	struct later l = {0};
	char error[] = "HTTP 502", msg_id[] = "m-1";
	struct channel_send_result res = {.rc = SB_ERR_HTTP,
	                                  .retryable = true,
	                                  .retry_after_ms = -1,
	                                  .channel_msg_id = msg_id,
	                                  .error = error};

	(void)state;
	assert_int_equal(uv_loop_init(&loop), 0);
	host.loop = &loop;
	assert_int_equal(channel_report_later(&host, &res, later_cb, &l), SB_OK);
	memset(error, 0, sizeof error);
	memset(msg_id, 0, sizeof msg_id);
	assert_int_equal(l.calls, 0);
	uv_run(&loop, UV_RUN_DEFAULT);
	assert_int_equal(l.calls, 1);
	assert_int_equal(l.rc, SB_ERR_HTTP);
	assert_string_equal(l.error, "HTTP 502");
	assert_string_equal(l.msg_id, "m-1");
	assert_int_equal(uv_loop_close(&loop), 0);
}

/* A burst, then silence counted, then the count with the next line. */
static void test_ratelog(void **state)
{
	struct channel_ratelog r = {0};
	int64_t suppressed = -1;

	(void)state;
	for (int i = 0; i < CHANNEL_LOG_BURST; i++) {
		assert_true(channel_ratelog_take(&r, &suppressed));
		assert_int_equal(suppressed, 0);
	}
	for (int i = 0; i < 5; i++)
		assert_false(channel_ratelog_take(&r, &suppressed));
	/* The window has passed (as if a minute went by). */
	r.window_ms -= CHANNEL_LOG_WINDOW_MS;
	assert_true(channel_ratelog_take(&r, &suppressed));
	assert_int_equal(suppressed, 5);
	assert_true(channel_ratelog_take(&r, &suppressed));
	assert_int_equal(suppressed, 0);
}

/* Webhook hooks: a repeated name and a shared path are each named at the
 * later entry's key. */
static void test_unique(void **state)
{
	char *err;

	(void)state;
	err = load_errors("agents: [{id: main}]\n"
	                  "channels:\n"
	                  "  webhook:\n"
	                  "    hooks:\n"
	                  "      - {name: a, verify: none, text: text}\n"
	                  "      - {name: a, verify: none, text: text, path: /hooks/other}\n"
	                  "      - {name: c, verify: none, text: text, path: /hooks/a}\n");
	assert_non_null(err);
	assert_non_null(strstr(err, "channels.webhook.hooks[1].name: hook \"a\" is defined twice "
	                            "(hooks[0] and hooks[1])"));
	assert_non_null(strstr(err, "channels.webhook.hooks[2].path: hooks \"a\" and \"c\" use the "
	                            "same path /hooks/a"));
	free(err);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_account_id_limit), cmocka_unit_test(test_account_count_limit),
	    cmocka_unit_test(test_report_later),     cmocka_unit_test(test_ratelog),
	    cmocka_unit_test(test_unique),
	};

	log_configure(LOG_ERROR, LOG_FORMAT_LOGFMT, NULL);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
