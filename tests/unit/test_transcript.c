/*
 * test_transcript.c - session transcripts (agents/transcript.c): the header,
 * appends in order with their parent chain, reopening, torn last lines and
 * their isolation, corrupt lines, and a burst of appends queued without the
 * loop running in between.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <regex.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "agents/message.h"
#include "agents/transcript.h"
#include "gateway/core/err.h"
#include "gateway/core/fsutil.h"

struct fixture {
	char dir[64];
	char path[PATH_MAX];
	uv_loop_t loop;
};

static const struct transcript_info info = {
    .session_id = "01jabcdefghjkmnpqrstvwxyz0",
    .session_key = "agent:main:main",
    .agent_id = "main",
};

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st;
	(void)flag;
	(void)f;
	return remove(p);
}

static int setup(void **state)
{
	struct fixture *fx = calloc(1, sizeof *fx);

	assert_non_null(fx);
	snprintf(fx->dir, sizeof fx->dir, "/tmp/sb-transcript-XXXXXX");
	assert_non_null(mkdtemp(fx->dir));
	/* The sessions directory does not exist yet: open creates it. */
	snprintf(fx->path, sizeof fx->path, "%s/agents/main/sessions/%s.jsonl", fx->dir,
	         info.session_id);
	assert_int_equal(uv_loop_init(&fx->loop), 0);
	*state = fx;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *fx = *state;

	uv_run(&fx->loop, UV_RUN_DEFAULT);
	assert_int_equal(uv_loop_close(&fx->loop), 0);
	nftw(fx->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	free(fx);
	return 0;
}

static char *slurp(const char *path)
{
	char *data = NULL;
	size_t len;

	assert_int_equal(fs_read_all(path, 64 << 20, &data, &len), SB_OK);
	return data;
}

static void append_raw(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_APPEND);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static json_t *message_fields(json_t *msg_take)
{
	json_t *f = json_object();

	json_object_set_new(f, "message", msg_take);
	return f;
}

/* Appends a message entry with the user text; returns its id in id. */
static void append_text(struct transcript *t, const char *text, char *id)
{
	json_t *f = message_fields(msg_user_text_new(text));

	assert_int_equal(transcript_append(t, "message", f, id, 40), SB_OK);
	json_decref(f);
}

static void open_t(struct fixture *fx, struct transcript **t)
{
	assert_int_equal(transcript_open(t, &fx->loop, fx->path, &info), SB_OK);
	assert_non_null(*t);
}

static void close_t(struct fixture *fx, struct transcript *t)
{
	transcript_close(t);
	uv_run(&fx->loop, UV_RUN_DEFAULT);
}

static void assert_matches(const char *s, const char *pattern)
{
	regex_t re;

	assert_int_equal(regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB), 0);
	if (regexec(&re, s, 0, NULL, 0) != 0)
		fail_msg("\"%s\" does not match /%s/", s, pattern);
	regfree(&re);
}

static void assert_message_texts(const json_t *messages, const char *const *texts, size_t n)
{
	assert_int_equal(json_array_size(messages), n);
	for (size_t i = 0; i < n; i++) {
		json_t *want = msg_user_text_new(texts[i]);

		if (!json_equal(json_array_get(messages, i), want))
			fail_msg("message %zu is not \"%s\"", i, texts[i]);
		json_decref(want);
	}
}

#define TS_RE "[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z"

static void test_header(void **state)
{
	struct fixture *fx = *state;
	struct transcript *t;
	struct stat st;
	char *data, dir[PATH_MAX];

	open_t(fx, &t);
	close_t(fx, t);
	data = slurp(fx->path);
	assert_matches(data, "^\\{\"type\":\"session\",\"version\":1,\"id\":\"01jabcdefghjkmnpqrst"
	                     "vwxyz0\",\"key\":\"agent:main:main\",\"agent\":\"main\","
	                     "\"created\":\"" TS_RE "\"\\}\n$");
	free(data);
	assert_int_equal(stat(fx->path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	snprintf(dir, sizeof dir, "%s/agents/main/sessions", fx->dir);
	assert_int_equal(stat(dir, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0700);

	/* Opening again does not add a second header. */
	open_t(fx, &t);
	close_t(fx, t);
	data = slurp(fx->path);
	assert_non_null(strchr(data, '\n'));
	assert_string_equal(strchr(data, '\n'), "\n");
	free(data);
}

static void on_flush(void *ud, int rc)
{
	int *calls = ud;

	assert_int_equal(rc, SB_OK);
	(*calls)++;
}

static void test_append_order_and_chain(void **state)
{
	struct fixture *fx = *state;
	struct transcript *t;
	struct transcript_loaded l;
	char id1[40], id2[40], id3[40];
	json_t *asst = msg_assistant_new(), *f, *e;
	int flushed = 0;
	time_t before = time(NULL);

	open_t(fx, &t);
	append_text(t, "first", id1);
	msg_add_text(asst, "Let me look.");
	msg_add_tool_use(asst, "call_1", "read", NULL);
	f = message_fields(json_incref(asst));
	json_object_set_new(f, "model", json_string("offline/demo"));
	/* The transcript's own keys win over the caller's. */
	json_object_set_new(f, "type", json_string("spoofed"));
	json_object_set_new(f, "id", json_string("spoofed"));
	assert_int_equal(transcript_append(t, "message", f, id2, sizeof id2), SB_OK);
	json_decref(f);
	f = json_pack("{s:s,s:s}", "event", "tool_end", "name", "read");
	assert_int_equal(transcript_append(t, "event", f, id3, sizeof id3), SB_OK);
	json_decref(f);
	assert_int_equal(transcript_flush(t, on_flush, &flushed), SB_OK);
	/* Callbacks never run inside the call. */
	assert_int_equal(flushed, 0);
	uv_run(&fx->loop, UV_RUN_DEFAULT);
	assert_int_equal(flushed, 1);
	/* The ids are distinct hex. */
	assert_matches(id1, "^[0-9a-f]{24}$");
	assert_string_not_equal(id1, id2);
	assert_string_not_equal(id2, id3);

	/* Written already, before close. */
	assert_int_equal(transcript_load(fx->path, &l), SB_OK);
	assert_int_equal(json_array_size(l.entries), 3);
	assert_int_equal(l.torn, 0);
	assert_string_equal(l.last_id, id3);
	assert_string_equal(json_string_value(json_object_get(l.header, "id")), info.session_id);

	e = json_array_get(l.entries, 0);
	assert_string_equal(json_string_value(json_object_get(e, "type")), "message");
	assert_string_equal(json_string_value(json_object_get(e, "id")), id1);
	assert_true(json_is_null(json_object_get(e, "parent_id")));
	assert_matches(json_string_value(json_object_get(e, "ts")), "^" TS_RE "$");
	{
		/* The time itself: read back as UTC, between the clock read before
		 * the append and now (the digits of each field in their place). */
		struct tm tm = {0};
		const char *ts = json_string_value(json_object_get(e, "ts"));
		const char *end = strptime(ts, "%Y-%m-%dT%H:%M:%S", &tm);
		time_t now = time(NULL), at;

		assert_non_null(end);
		assert_int_equal(end[0], '.');
		at = timegm(&tm);
		assert_true(at >= before && at <= now);
	}
	e = json_array_get(l.entries, 1);
	assert_string_equal(json_string_value(json_object_get(e, "type")), "message");
	assert_string_equal(json_string_value(json_object_get(e, "id")), id2);
	assert_string_equal(json_string_value(json_object_get(e, "parent_id")), id1);
	assert_string_equal(json_string_value(json_object_get(e, "model")), "offline/demo");
	e = json_array_get(l.entries, 2);
	assert_string_equal(json_string_value(json_object_get(e, "type")), "event");
	assert_string_equal(json_string_value(json_object_get(e, "event")), "tool_end");
	assert_string_equal(json_string_value(json_object_get(e, "parent_id")), id2);

	/* The history is the messages, in order, and the tool_use left
	 * without a result (as a kill while the tool ran leaves it) has an
	 * error result after it, so that a provider takes the history. */
	assert_int_equal(json_array_size(l.messages), 3);
	assert_int_equal(l.repaired, 1);
	{
		const json_t *res =
		    json_array_get(json_object_get(json_array_get(l.messages, 2), "content"), 0);
		char why[256];

		assert_string_equal(json_string_value(json_object_get(res, "tool_use_id")),
		                    "call_1");
		assert_true(json_is_true(json_object_get(res, "is_error")));
		assert_non_null(strstr(json_string_value(json_object_get(res, "content")),
		                       "interrupted by a restart"));
		assert_int_equal(msg_check_pairing(l.messages, why, sizeof why), SB_OK);
	}
	{
		json_t *first = msg_user_text_new("first");

		assert_true(json_equal(json_array_get(l.messages, 0), first));
		json_decref(first);
	}
	assert_true(json_equal(json_array_get(l.messages, 1), asst));
	transcript_loaded_free(&l);
	transcript_loaded_free(&l); /* a second free is harmless */
	json_decref(asst);
	close_t(fx, t);

	/* Bad arguments. */
	assert_int_equal(transcript_load("/nonexistent/x.jsonl", &l), SB_ERR_NOTFOUND);
}

/* The exact bytes of a line: the transcript's keys first, then the
 * caller's fields in their order (a spoofed reserved key left out), then
 * the stamp on an assistant message; compact JSON, text escaped. */
static void test_line_bytes(void **state)
{
	struct fixture *fx = *state;
	struct transcript *t;
	char id1[40], id2[40], want[1024], *data, *line;
	json_t *asst = msg_assistant_new(), *f, *stamp = json_pack("{s:s}", "model", "x/y");
	const char *ts;
	struct transcript_loaded l;

	open_t(fx, &t);
	append_text(t, "first", id1);
	assert_int_equal(transcript_set_stamp(t, "usage", stamp), SB_OK);
	msg_add_text(asst, "tab\there \"quoted\" \\ é €");
	f = message_fields(asst);
	json_object_set_new(f, "ts", json_string("spoofed"));
	json_object_set_new(f, "z", json_integer(-1));
	json_object_set_new(f, "a", json_pack("[b,n,{}]", 1));
	assert_int_equal(transcript_append(t, "message", f, id2, sizeof id2), SB_OK);
	json_decref(f);
	close_t(fx, t);
	assert_int_equal(transcript_load(fx->path, &l), SB_OK);
	ts = json_string_value(json_object_get(json_array_get(l.entries, 1), "ts"));
	snprintf(want, sizeof want,
	         "{\"type\":\"message\",\"id\":\"%s\",\"parent_id\":\"%s\",\"ts\":\"%s\","
	         "\"message\":{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":"
	         "\"tab\\there \\\"quoted\\\" \\\\ é €\"}]},\"z\":-1,\"a\":[true,null,{}],"
	         "\"usage\":{\"model\":\"x/y\"}}\n",
	         id2, id1, ts);
	transcript_loaded_free(&l);
	data = slurp(fx->path);
	line = strstr(data, "{\"type\":\"message\",\"id\":\"");
	assert_non_null(line);
	line = strstr(line + 1, "{\"type\":\"message\",\"id\":\""); /* the second entry */
	assert_non_null(line);
	assert_string_equal(line, want);
	free(data);
	json_decref(stamp);
}

/* A cut tool call is repaired in the file once: the repair edits the loader
 * hands out, appended as a "repair" event, pair the file itself, and a note
 * the resumed run writes on the synthetic result loads. Both a cut call in
 * the last message and one followed by a user message are covered. */
static void test_repair_written_once(void **state)
{
	struct fixture *fx = *state;
	struct transcript *t;
	struct transcript_loaded l;
	json_t *asst = msg_assistant_new(), *asst2 = msg_assistant_new(), *f;
	char why[256];

	open_t(fx, &t);
	append_text(t, "first", NULL);
	msg_add_tool_use(asst, "call_a", "read", NULL);
	f = message_fields(json_incref(asst));
	assert_int_equal(transcript_append(t, "message", f, NULL, 0), SB_OK);
	json_decref(f);
	append_text(t, "second", NULL); /* a user turn after the cut call */
	msg_add_tool_use(asst2, "call_b", "bash", NULL);
	f = message_fields(json_incref(asst2));
	assert_int_equal(transcript_append(t, "message", f, NULL, 0), SB_OK);
	json_decref(f);
	close_t(fx, t);

	/* Never resumed: repaired in memory, with the edits to write. */
	assert_int_equal(transcript_load(fx->path, &l), SB_OK);
	assert_int_equal(l.repaired, 2);
	assert_non_null(l.repair);
	assert_int_equal(json_array_size(l.messages), 5);
	assert_int_equal(msg_check_pairing(l.messages, why, sizeof why), SB_OK);

	/* The resumed run writes them, then a note on the synthetic result
	 * of call_b (message 4, block 0). */
	open_t(fx, &t);
	f = json_pack("{sssO}", "event", "repair", "edits", l.repair);
	assert_int_equal(transcript_append(t, "event", f, NULL, 0), SB_OK);
	json_decref(f);
	f = json_pack("{sss{sssIsIss}}", "event", "note", "edit", "op", "set_result", "message",
	              (json_int_t)4, "block", (json_int_t)0, "content", "noted");
	assert_int_equal(transcript_append(t, "event", f, NULL, 0), SB_OK);
	json_decref(f);
	close_t(fx, t);
	transcript_loaded_free(&l);

	/* Now the file is paired: no repair at load. */
	assert_int_equal(transcript_load(fx->path, &l), SB_OK);
	assert_int_equal(l.repaired, 0);
	assert_null(l.repair);
	assert_int_equal(json_array_size(l.messages), 5);
	assert_int_equal(msg_check_pairing(l.messages, why, sizeof why), SB_OK);
	{
		const json_t *c = json_object_get(json_array_get(l.messages, 2), "content");

		/* The result goes first in the user message after call_a. */
		assert_string_equal(
		    json_string_value(json_object_get(json_array_get(c, 0), "tool_use_id")),
		    "call_a");
		assert_int_equal(json_array_size(c), 2);
		c = json_object_get(json_array_get(l.messages, 4), "content");
		assert_string_equal(
		    json_string_value(json_object_get(json_array_get(c, 0), "content")), "noted");
	}
	transcript_loaded_free(&l);
	json_decref(asst);
	json_decref(asst2);
}

/* A file written before "repair" events: the resumed run's note edits the
 * result the loader's repair makes; it still loads, paired. */
static void test_repair_legacy_note(void **state)
{
	struct fixture *fx = *state;
	struct transcript_loaded l;
	char why[256], path[PATH_MAX + 32];

	snprintf(path, sizeof path, "%s/legacy.jsonl", fx->dir);
	write_file(
	    path,
	    "{\"type\":\"session\",\"version\":1,\"id\":\"s1\",\"key\":\"k\",\"agent\":\"a\","
	    "\"created\":\"2026-01-01T00:00:00.000Z\"}\n"
	    "{\"type\":\"message\",\"id\":\"e1\",\"parent_id\":null,\"ts\":\"x\",\"message\":"
	    "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"go\"}]}}\n"
	    "{\"type\":\"message\",\"id\":\"e2\",\"parent_id\":\"e1\",\"ts\":\"x\",\"message\":"
	    "{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"c1\","
	    "\"name\":\"bash\",\"input\":{}}]}}\n"
	    "{\"type\":\"event\",\"id\":\"e3\",\"parent_id\":\"e2\",\"ts\":\"x\",\"event\":"
	    "\"note\",\"text\":\"and now?\",\"edit\":{\"op\":\"add_text\",\"message\":2,"
	    "\"text\":\"and now?\"}}\n");
	assert_int_equal(transcript_load(path, &l), SB_OK);
	assert_int_equal(l.repaired, 1);
	assert_int_equal(json_array_size(l.messages), 3);
	assert_int_equal(msg_check_pairing(l.messages, why, sizeof why), SB_OK);
	assert_int_equal(json_array_size(json_object_get(json_array_get(l.messages, 2), "content")),
	                 2);
	transcript_loaded_free(&l);
}

static void test_reopen_continues_chain(void **state)
{
	struct fixture *fx = *state;
	struct transcript *t;
	struct transcript_loaded l;
	char id1[40], id2[40], id3[40];
	static const char *const texts[] = {"one", "two", "three"};

	open_t(fx, &t);
	append_text(t, "one", id1);
	append_text(t, "two", id2);
	close_t(fx, t);
	open_t(fx, &t);
	append_text(t, "three", id3);
	close_t(fx, t);

	assert_int_equal(transcript_load(fx->path, &l), SB_OK);
	assert_message_texts(l.messages, texts, 3);
	assert_string_equal(
	    json_string_value(json_object_get(json_array_get(l.entries, 2), "parent_id")), id2);
	assert_string_equal(
	    json_string_value(json_object_get(json_array_get(l.entries, 1), "parent_id")), id1);
	assert_string_equal(l.last_id, id3);
	assert_int_equal(l.torn, 0);
	transcript_loaded_free(&l);
}

static void test_torn_last_line(void **state)
{
	struct fixture *fx = *state;
	struct transcript *t;
	struct transcript_loaded l;
	char id1[40], id2[40], id3[40], *data, *frag;
	static const char *const two[] = {"one", "two"};
	static const char *const three[] = {"one", "two", "three"};
	const char *half = "{\"type\":\"message\",\"id\":\"deadbeef\",\"parent_id\":\"x\",\"mess";

	open_t(fx, &t);
	append_text(t, "one", id1);
	append_text(t, "two", id2);
	close_t(fx, t);
	append_raw(fx->path, half);

	/* Load ignores the torn line. */
	assert_int_equal(transcript_load(fx->path, &l), SB_OK);
	assert_int_equal(l.torn, 1);
	assert_message_texts(l.messages, two, 2);
	assert_string_equal(l.last_id, id2);
	transcript_loaded_free(&l);

	/* The next append starts on a fresh line and continues the chain
	 * from the last whole entry. */
	open_t(fx, &t);
	append_text(t, "three", id3);
	close_t(fx, t);
	data = slurp(fx->path);
	frag = strstr(data, half);
	assert_non_null(frag);
	assert_int_equal(frag[strlen(half)], '\n');
	assert_memory_equal(frag + strlen(half) + 1, "{\"type\":\"message\"", 17);
	free(data);

	assert_int_equal(transcript_load(fx->path, &l), SB_OK);
	assert_int_equal(l.torn, 1);
	assert_message_texts(l.messages, three, 3);
	assert_string_equal(
	    json_string_value(json_object_get(json_array_get(l.entries, 2), "parent_id")), id2);
	assert_true(json_is_true(json_object_get(json_array_get(l.entries, 2), "follows_torn")));
	assert_string_equal(l.last_id, id3);
	transcript_loaded_free(&l);

	/* And it goes on normally after that. */
	open_t(fx, &t);
	append_text(t, "four", NULL);
	close_t(fx, t);
	assert_int_equal(transcript_load(fx->path, &l), SB_OK);
	assert_int_equal(json_array_size(l.messages), 4);
	assert_null(json_object_get(json_array_get(l.entries, 3), "follows_torn"));
	assert_string_equal(
	    json_string_value(json_object_get(json_array_get(l.entries, 3), "parent_id")), id3);
	transcript_loaded_free(&l);
}

/* A torn line whose bytes are complete JSON but lack the "\n" is torn too:
 * it never becomes an entry, and the chain skips it. */
static void test_torn_complete_json(void **state)
{
	struct fixture *fx = *state;
	struct transcript *t;
	struct transcript_loaded l;
	char id1[40];
	static const char *const texts[] = {"one", "three"};

	open_t(fx, &t);
	append_text(t, "one", id1);
	close_t(fx, t);
	append_raw(fx->path,
	           "{\"type\":\"message\",\"id\":\"aaaa\",\"parent_id\":null,\"message\":"
	           "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"two\"}]}}");
	assert_int_equal(transcript_load(fx->path, &l), SB_OK);
	assert_int_equal(l.torn, 1);
	assert_int_equal(json_array_size(l.messages), 1);
	transcript_loaded_free(&l);

	open_t(fx, &t);
	append_text(t, "three", NULL);
	close_t(fx, t);
	assert_int_equal(transcript_load(fx->path, &l), SB_OK);
	assert_int_equal(l.torn, 1);
	assert_message_texts(l.messages, texts, 2);
	assert_string_equal(
	    json_string_value(json_object_get(json_array_get(l.entries, 1), "parent_id")), id1);
	transcript_loaded_free(&l);
}

/* A crash while the torn line was being isolated leaves two fragments; the
 * next append isolates both. */
static void test_torn_twice(void **state)
{
	struct fixture *fx = *state;
	struct transcript *t;
	struct transcript_loaded l;
	char id1[40];
	static const char *const texts[] = {"one", "two"};

	open_t(fx, &t);
	append_text(t, "one", id1);
	close_t(fx, t);
	append_raw(fx->path, "{\"type\":\"mess");
	append_raw(fx->path, "\n{\"type\":\"message\",\"id\":\"b");
	assert_int_equal(transcript_load(fx->path, &l), SB_OK);
	assert_int_equal(l.torn, 2);
	assert_int_equal(json_array_size(l.messages), 1);
	transcript_loaded_free(&l);

	open_t(fx, &t);
	append_text(t, "two", NULL);
	close_t(fx, t);
	assert_int_equal(transcript_load(fx->path, &l), SB_OK);
	assert_int_equal(l.torn, 2);
	assert_message_texts(l.messages, texts, 2);
	assert_string_equal(
	    json_string_value(json_object_get(json_array_get(l.entries, 1), "parent_id")), id1);
	transcript_loaded_free(&l);
}

/* A last line that ends with "\n" but is not JSON is torn as well; the next
 * append needs no newline but marks itself. */
static void test_torn_invalid_terminated(void **state)
{
	struct fixture *fx = *state;
	struct transcript *t;
	struct transcript_loaded l;
	char *data;

	open_t(fx, &t);
	append_text(t, "one", NULL);
	close_t(fx, t);
	append_raw(fx->path, "{\"type\":\n");
	assert_int_equal(transcript_load(fx->path, &l), SB_OK);
	assert_int_equal(l.torn, 1);
	transcript_loaded_free(&l);
	open_t(fx, &t);
	append_text(t, "two", NULL);
	close_t(fx, t);
	data = slurp(fx->path);
	assert_null(strstr(data, "\n\n"));
	free(data);
	assert_int_equal(transcript_load(fx->path, &l), SB_OK);
	assert_int_equal(l.torn, 1);
	assert_int_equal(json_array_size(l.messages), 2);
	transcript_loaded_free(&l);
}

static void test_invalid_lines(void **state)
{
	struct fixture *fx = *state;
	struct transcript_loaded l;
	char path[PATH_MAX];
	static const char hdr[] =
	    "{\"type\":\"session\",\"version\":1,\"id\":\"s\",\"key\":\"k\",\"agent\":\"a\","
	    "\"created\":\"2026-01-01T00:00:00.000Z\"}\n";
	static const char e1[] =
	    "{\"type\":\"event\",\"id\":\"e1\",\"parent_id\":null,\"ts\":\"t\"}\n";
	static const char e2[] =
	    "{\"type\":\"event\",\"id\":\"e2\",\"parent_id\":\"e1\",\"ts\":\"t\"}\n";
	char text[1024];

	snprintf(path, sizeof path, "%s/hand.jsonl", fx->dir);

	/* Valid as written by hand. */
	snprintf(text, sizeof text, "%s%s%s", hdr, e1, e2);
	write_file(path, text);
	assert_int_equal(transcript_load(path, &l), SB_OK);
	assert_int_equal(json_array_size(l.entries), 2);
	assert_int_equal(json_array_size(l.messages), 0);
	assert_string_equal(l.last_id, "e2");
	transcript_loaded_free(&l);

	/* An invalid line in the middle is corruption. */
	snprintf(text, sizeof text, "%s%s{\"type\":\"ev\n%s", hdr, e1, e2);
	write_file(path, text);
	assert_int_equal(transcript_load(path, &l), SB_ERR_INVAL);
	assert_null(l.header);
	assert_null(l.messages);
	/* Two invalid whole lines at the end: the first is not torn. */
	snprintf(text, sizeof text, "%s%sgarbage\ngarbage\n", hdr, e1);
	write_file(path, text);
	assert_int_equal(transcript_load(path, &l), SB_ERR_INVAL);
	/* An empty line in the middle too. */
	snprintf(text, sizeof text, "%s%s\n%s", hdr, e1, e2);
	write_file(path, text);
	assert_int_equal(transcript_load(path, &l), SB_ERR_INVAL);
	/* A JSON line that is not an entry. */
	snprintf(text, sizeof text, "%s[1,2]\n%s", hdr, e2);
	write_file(path, text);
	assert_int_equal(transcript_load(path, &l), SB_ERR_INVAL);
	/* An entry without an id. */
	snprintf(text, sizeof text, "%s{\"type\":\"event\"}\n%s", hdr, e2);
	write_file(path, text);
	assert_int_equal(transcript_load(path, &l), SB_ERR_INVAL);
	/* A message entry without a message. */
	snprintf(text, sizeof text, "%s{\"type\":\"message\",\"id\":\"m\"}\n", hdr);
	write_file(path, text);
	assert_int_equal(transcript_load(path, &l), SB_ERR_INVAL);
	/* The header must be line 1, with a version we know. */
	snprintf(text, sizeof text, "%s%s", e1, hdr);
	write_file(path, text);
	assert_int_equal(transcript_load(path, &l), SB_ERR_INVAL);
	write_file(path, "{\"type\":\"session\",\"version\":2,\"id\":\"s\"}\n");
	assert_int_equal(transcript_load(path, &l), SB_ERR_INVAL);
	write_file(path, "{\"type\":\"session\",\"version\":\"1\",\"id\":\"s\"}\n");
	assert_int_equal(transcript_load(path, &l), SB_ERR_INVAL);
	/* Empty: a session whose file was made but never written (new). */
	write_file(path, "");
	assert_int_equal(transcript_load(path, &l), SB_ERR_NOTFOUND);
	/* A second header later on. */
	snprintf(text, sizeof text, "%s%s%s", hdr, e1, hdr);
	write_file(path, text);
	assert_int_equal(transcript_load(path, &l), SB_ERR_INVAL);
	/* follows_torn only excuses the line right before it and the
	 * invalid ones right before that. */
	snprintf(text, sizeof text,
	         "%sgarbage\n%s%s{\"type\":\"event\",\"id\":\"e3\",\"follows_torn\":true}\n", hdr,
	         e1, e2);
	write_file(path, text);
	assert_int_equal(transcript_load(path, &l), SB_ERR_INVAL);
	snprintf(text, sizeof text,
	         "%s%sgarbage\n{\"type\":\"event\",\"id\":\"e3\",\"follows_torn\":true}\n", hdr,
	         e1);
	write_file(path, text);
	assert_int_equal(transcript_load(path, &l), SB_OK);
	assert_int_equal(l.torn, 1);
	assert_string_equal(l.last_id, "e3");
	transcript_loaded_free(&l);
}

/* A file whose header was torn at creation (no whole line) starts again. */
static void test_torn_header_restarts(void **state)
{
	struct fixture *fx = *state;
	struct transcript *t;
	struct transcript_loaded l;
	char dir[PATH_MAX];

	snprintf(dir, sizeof dir, "%s/agents/main/sessions", fx->dir);
	assert_int_equal(fs_mkdirs(dir, 0700), SB_OK);
	write_file(fx->path, "{\"type\":\"sess");
	assert_int_equal(transcript_load(fx->path, &l), SB_ERR_NOTFOUND);
	open_t(fx, &t);
	append_text(t, "one", NULL);
	close_t(fx, t);
	assert_int_equal(transcript_load(fx->path, &l), SB_OK);
	assert_int_equal(json_array_size(l.messages), 1);
	assert_int_equal(l.torn, 0);
	transcript_loaded_free(&l);

	/* An existing empty file gets its header too. */
	write_file(fx->path, "");
	open_t(fx, &t);
	close_t(fx, t);
	assert_int_equal(transcript_load(fx->path, &l), SB_OK);
	assert_int_equal(json_array_size(l.entries), 0);
	assert_string_equal(l.last_id, "");
	transcript_loaded_free(&l);

	/* Whole lines but none valid: not a transcript; left alone. */
	write_file(fx->path, "hello\nworld\n");
	assert_int_equal(transcript_open(&t, &fx->loop, fx->path, &info), SB_ERR_INVAL);
	assert_null(t);
	{
		char *data = slurp(fx->path);

		assert_string_equal(data, "hello\nworld\n");
		free(data);
	}
}

struct burst {
	const char *path;
	int flushed;
	size_t lines_at_flush;
};

static void on_burst_flush(void *ud, int rc)
{
	struct burst *b = ud;
	struct transcript_loaded l;

	assert_int_equal(rc, SB_OK);
	b->flushed++;
	/* Everything appended before the flush is on disk now. */
	assert_int_equal(transcript_load(b->path, &l), SB_OK);
	b->lines_at_flush = json_array_size(l.entries);
	transcript_loaded_free(&l);
}

static void test_burst_in_order(void **state)
{
	struct fixture *fx = *state;
	struct transcript *t;
	struct transcript_loaded l;
	struct burst b = {.path = fx->path};
	char ids[1000][40];
	json_t *e;
	size_t i;

	open_t(fx, &t);
	for (i = 0; i < 1000; i++) {
		json_t *f = json_pack("{s:s,s:i}", "event", "n", "n", (int)i);

		assert_int_equal(transcript_append(t, "event", f, ids[i], sizeof ids[i]), SB_OK);
		json_decref(f);
	}
	assert_int_equal(transcript_flush(t, on_burst_flush, &b), SB_OK);
	for (i = 0; i < 5; i++)
		append_text(t, "after the flush", NULL);
	close_t(fx, t);
	assert_int_equal(b.flushed, 1);
	assert_int_equal(b.lines_at_flush, 1000);

	assert_int_equal(transcript_load(fx->path, &l), SB_OK);
	assert_int_equal(json_array_size(l.entries), 1005);
	assert_int_equal(json_array_size(l.messages), 5);
	json_array_foreach(l.entries, i, e)
	{
		if (i >= 1000)
			break;
		assert_int_equal(json_integer_value(json_object_get(e, "n")), (json_int_t)i);
		assert_string_equal(json_string_value(json_object_get(e, "id")), ids[i]);
		if (i > 0)
			assert_string_equal(json_string_value(json_object_get(e, "parent_id")),
			                    ids[i - 1]);
	}
	transcript_loaded_free(&l);
}

#define LANE_N 40
#define LANE_ROUNDS 10

struct lane_flush {
	char path[PATH_MAX];
	size_t want; /* entries on disk when the flush completes */
	int called, bad;
};

static void on_lane_flush(void *ud, int rc)
{
	struct lane_flush *f = ud;
	struct transcript_loaded l;

	f->called++;
	if (rc != SB_OK || transcript_load(f->path, &l) != SB_OK) {
		f->bad++;
		return;
	}
	if (json_array_size(l.entries) != f->want)
		f->bad++;
	transcript_loaded_free(&l);
}

/* Many transcripts at once, on two loops: each file gets its lines in order,
 * each flush completes with everything before it on disk, a transcript
 * closed half-way leaves the others going, and lines appended to many
 * transcripts in one loop iteration are written by one job, not one each. */
static void test_lane_many_transcripts(void **state)
{
	struct fixture *fx = *state;
	struct transcript *t[LANE_N + 1];
	struct lane_flush fl[LANE_N + 1][LANE_ROUNDS];
	struct transcript_info ti[LANE_N + 1];
	char ids[LANE_N + 1][40], paths[LANE_N + 1][PATH_MAX];
	uv_loop_t other;
	unsigned long long jobs;

	memset(fl, 0, sizeof fl);
	assert_int_equal(uv_loop_init(&other), 0);
	for (int i = 0; i <= LANE_N; i++) {
		snprintf(ids[i], sizeof ids[i], "01jabcdefghjkmnpqrstvwx%03d", i);
		snprintf(paths[i], sizeof paths[i], "%s/agents/main/sessions/%s.jsonl", fx->dir,
		         ids[i]);
		ti[i] = info;
		ti[i].session_id = ids[i];
		/* The last one is on another loop. */
		assert_int_equal(
		    transcript_open(&t[i], i == LANE_N ? &other : &fx->loop, paths[i], &ti[i]),
		    SB_OK);
	}
	for (int r = 0; r < LANE_ROUNDS; r++) {
		jobs = transcript_jobs_submitted();
		for (int i = 0; i <= LANE_N; i++) {
			json_t *f;

			if (!t[i])
				continue;
			f = json_pack("{s:i,s:i}", "t", i, "r", r);
			assert_int_equal(transcript_append(t[i], "event", f, NULL, 0), SB_OK);
			json_decref(f);
			if (i % 3 == 0) {
				snprintf(fl[i][r].path, sizeof fl[i][r].path, "%s", paths[i]);
				fl[i][r].want = (size_t)r + 1;
				assert_int_equal(transcript_flush(t[i], on_lane_flush, &fl[i][r]),
				                 SB_OK);
			}
		}
		/* One job for this loop's 40 transcripts (the previous round's
		 * may still be on the pool: then the next completion takes them
		 * all), one for the other loop's. */
		assert_true(transcript_jobs_submitted() - jobs <= 2);
		if (r == 4)
			for (int i = 0; i < LANE_N; i += 5) {
				transcript_close(t[i]);
				t[i] = NULL;
			}
		uv_run(&fx->loop, r % 2 ? UV_RUN_NOWAIT : UV_RUN_ONCE);
		uv_run(&other, UV_RUN_NOWAIT);
	}
	for (int i = 0; i <= LANE_N; i++)
		transcript_close(t[i]);
	uv_run(&fx->loop, UV_RUN_DEFAULT);
	uv_run(&other, UV_RUN_DEFAULT);
	assert_int_equal(uv_loop_close(&other), 0);
	for (int i = 0; i <= LANE_N; i++) {
		struct transcript_loaded l;
		size_t k, n = i % 5 == 0 && i < LANE_N ? 5 : LANE_ROUNDS;
		json_t *e;

		assert_int_equal(transcript_load(paths[i], &l), SB_OK);
		assert_int_equal(json_array_size(l.entries), n);
		json_array_foreach(l.entries, k, e)
		{
			assert_int_equal(json_integer_value(json_object_get(e, "t")), i);
			assert_int_equal(json_integer_value(json_object_get(e, "r")),
			                 (json_int_t)k);
		}
		transcript_loaded_free(&l);
		for (size_t r = 0; i % 3 == 0 && r < n; r++) {
			assert_int_equal(fl[i][r].called, 1);
			assert_int_equal(fl[i][r].bad, 0);
		}
	}
}

static void test_flush_when_idle(void **state)
{
	struct fixture *fx = *state;
	struct transcript *t;
	int flushed = 0;

	open_t(fx, &t);
	assert_int_equal(transcript_flush(t, on_flush, &flushed), SB_OK);
	assert_int_equal(flushed, 0);
	uv_run(&fx->loop, UV_RUN_DEFAULT);
	assert_int_equal(flushed, 1);
	/* Flush queued right before close still runs. */
	assert_int_equal(transcript_flush(t, on_flush, &flushed), SB_OK);
	close_t(fx, t);
	assert_int_equal(flushed, 2);
}

static void on_flush_failed(void *ud, int rc)
{
	int *got = ud;

	*got = rc;
}

/* A write that fails half-way (the file size limit) is cut back off, later
 * appends are refused, and the file still loads. */
static void test_write_failure(void **state)
{
	struct fixture *fx = *state;
	struct transcript *t;
	struct transcript_loaded l;
	struct rlimit old, lim;
	struct stat st;
	char big[4096];
	int flushed = -1;
	json_t *f;

	open_t(fx, &t);
	append_text(t, "one", NULL);
	close_t(fx, t);
	open_t(fx, &t);
	assert_int_equal(stat(fx->path, &st), 0);
	memset(big, 'x', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
	lim = old;
	lim.rlim_cur = (rlim_t)st.st_size + 1000;
	signal(SIGXFSZ, SIG_IGN);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
	f = message_fields(msg_user_text_new(big));
	assert_int_equal(transcript_append(t, "message", f, NULL, 0), SB_OK);
	json_decref(f);
	assert_int_equal(transcript_flush(t, on_flush_failed, &flushed), SB_OK);
	uv_run(&fx->loop, UV_RUN_DEFAULT);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
	signal(SIGXFSZ, SIG_DFL);
	assert_int_equal(flushed, SB_ERR_IO);
	/* Sticky: no hole in the history. */
	f = message_fields(msg_user_text_new("later"));
	assert_int_equal(transcript_append(t, "message", f, NULL, 0), SB_ERR_IO);
	json_decref(f);
	close_t(fx, t);
	assert_int_equal(transcript_load(fx->path, &l), SB_OK);
	assert_int_equal(l.torn, 0);
	assert_int_equal(json_array_size(l.messages), 1);
	transcript_loaded_free(&l);
}

/* Two transcripts in one write job (the lane), one of whose writes fails
 * half-way: that one is cut back to its last whole line, the other gets
 * its lines whole, and neither gets the other's bytes. */
static void test_write_failure_in_a_shared_lane(void **state)
{
	struct fixture *fx = *state;
	struct transcript *a, *b;
	struct transcript_info bi = info;
	struct transcript_loaded l;
	struct rlimit old, lim;
	struct stat sa, sb;
	char big[4096], bpath[PATH_MAX];
	int fa = -1, fb = -1;
	char text[16384];
	unsigned long long jobs;
	json_t *f;

	bi.session_id = "01jabcdefghjkmnpqrstvwxyz1";
	snprintf(bpath, sizeof bpath, "%s/agents/main/sessions/%s.jsonl", fx->dir, bi.session_id);
	open_t(fx, &a);
	append_text(a, "a one", NULL);
	close_t(fx, a);
	open_t(fx, &a);
	assert_int_equal(transcript_open(&b, &fx->loop, bpath, &bi), SB_OK);
	append_text(b, "b one", NULL);
	close_t(fx, b);
	assert_int_equal(transcript_open(&b, &fx->loop, bpath, &bi), SB_OK);
	assert_int_equal(stat(fx->path, &sa), 0);
	assert_int_equal(stat(bpath, &sb), 0);
	memset(big, 'x', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
	lim = old;
	lim.rlim_cur = (rlim_t)(sa.st_size > sb.st_size ? sa.st_size : sb.st_size) + 1000;
	signal(SIGXFSZ, SIG_IGN);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
	jobs = transcript_jobs_submitted();
	f = message_fields(msg_user_text_new(big));
	assert_int_equal(transcript_append(a, "message", f, NULL, 0), SB_OK);
	json_decref(f);
	append_text(b, "b two", NULL);
	assert_int_equal(transcript_flush(a, on_flush_failed, &fa), SB_OK);
	assert_int_equal(transcript_flush(b, on_flush_failed, &fb), SB_OK);
	assert_int_equal(transcript_jobs_submitted() - jobs, 1); /* one job for both */
	uv_run(&fx->loop, UV_RUN_DEFAULT);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
	signal(SIGXFSZ, SIG_DFL);
	assert_int_equal(fa, SB_ERR_IO);
	assert_int_equal(fb, SB_OK);
	close_t(fx, a);
	close_t(fx, b);
	assert_int_equal(stat(fx->path, &sa), 0);
	assert_true(sa.st_size < (off_t)lim.rlim_cur);
	assert_int_equal(transcript_load(fx->path, &l), SB_OK);
	assert_int_equal(l.torn, 0);
	assert_int_equal(json_array_size(l.messages), 1);
	transcript_loaded_free(&l);
	assert_int_equal(transcript_load(bpath, &l), SB_OK);
	assert_int_equal(l.torn, 0);
	assert_int_equal(json_array_size(l.messages), 2);
	transcript_loaded_free(&l);
	{
		FILE *fp = fopen(bpath, "r");
		size_t n;

		assert_non_null(fp);
		n = fread(text, 1, sizeof text - 1, fp);
		fclose(fp);
		text[n] = '\0';
		assert_non_null(strstr(text, "b two"));
		assert_null(strstr(text, "a one"));
		assert_null(strstr(text, "xxxxxxxx"));
	}
	assert_int_equal(unlink(bpath), 0);
}

/* What loading says about the context: the summary breaker counts failed
 * summaries (level 3) only, with the time of the last, not failed archive
 * or trim writes; a note's edit is applied; the last todo list. */
static void test_context_bookkeeping(void **state)
{
	struct fixture *fx = *state;
	struct transcript_loaded l;
	char path[PATH_MAX];
	static const char text[] =
	    "{\"type\":\"session\",\"version\":1,\"id\":\"s\",\"key\":\"k\",\"agent\":\"a\","
	    "\"created\":\"2026-01-01T00:00:00.000Z\"}\n"
	    "{\"type\":\"message\",\"id\":\"m1\",\"ts\":\"t\",\"message\":{\"role\":\"user\","
	    "\"content\":[{\"type\":\"text\",\"text\":\"hi\"}]}}\n"
	    "{\"type\":\"event\",\"id\":\"n1\",\"ts\":\"t\",\"event\":\"note\",\"text\":\" there\","
	    "\"edit\":{\"op\":\"add_text\",\"message\":0,\"text\":\" there\"}}\n"
	    "{\"type\":\"event\",\"id\":\"n2\",\"ts\":\"t\",\"event\":\"note\",\"text\":\"old\"}\n"
	    "{\"type\":\"event\",\"id\":\"e1\",\"ts\":\"2026-01-01T00:00:01.000Z\","
	    "\"event\":\"compaction_failed\",\"level\":2,\"error\":\"disk full\"}\n"
	    "{\"type\":\"event\",\"id\":\"e2\",\"ts\":\"2026-01-01T00:00:02.000Z\","
	    "\"event\":\"compaction_failed\",\"level\":1,\"error\":\"disk full\"}\n"
	    "{\"type\":\"event\",\"id\":\"e3\",\"ts\":\"2026-01-01T00:00:03.250Z\","
	    "\"event\":\"compaction_failed\",\"level\":3,\"error\":\"empty\"}\n"
	    "{\"type\":\"event\",\"id\":\"t1\",\"ts\":\"t\",\"event\":\"todo\",\"items\":"
	    "[{\"text\":\"a\",\"status\":\"done\"}]}\n"
	    "{\"type\":\"event\",\"id\":\"t2\",\"ts\":\"t\",\"event\":\"todo\",\"items\":"
	    "[{\"text\":\"b\",\"status\":\"pending\"}]}\n";
	char *t;

	snprintf(path, sizeof path, "%s/ctx.jsonl", fx->dir);
	write_file(path, text);
	assert_int_equal(transcript_load(path, &l), SB_OK);
	assert_int_equal(l.compact_failures, 1);
	assert_int_equal(l.compact_failed_ms, 1767225603250LL);
	t = msg_text(json_array_get(l.messages, 0));
	assert_string_equal(t, "hi there");
	free(t);
	assert_non_null(l.todo);
	assert_string_equal(json_string_value(json_object_get(json_array_get(l.todo, 0), "text")),
	                    "b");
	transcript_loaded_free(&l);
}

static void test_session_ids(void **state)
{
	char a[40], b[40];

	(void)state;
	transcript_new_session_id(a, sizeof a);
	usleep(3000);
	transcript_new_session_id(b, sizeof b);
	assert_matches(a, "^[0-9a-hjkmnp-tv-z]{26}$");
	assert_matches(b, "^[0-9a-hjkmnp-tv-z]{26}$");
	/* Time-ordered: the later id sorts after. */
	assert_true(strcmp(a, b) < 0);
	assert_true(memcmp(a, b, 10) < 0);
	/* A small buffer gets a terminated prefix. */
	transcript_new_session_id(a, 5);
	assert_int_equal(strlen(a), 4);
}

/* ---- the bytes a run wrote, kept elsewhere and restored ---- */

static void flushed_cb(void *ud, int rc)
{
	*(int *)ud = rc == SB_OK ? 1 : -1;
}

static void flush_t(struct fixture *fx, struct transcript *t)
{
	int done = 0;

	assert_int_equal(transcript_flush(t, flushed_cb, &done), SB_OK);
	while (!done)
		uv_run(&fx->loop, UV_RUN_ONCE);
	assert_int_equal(done, 1);
}

struct kept {
	int64_t offset;
	char *bytes;
	size_t len;
};

static void take_t(struct transcript *t, struct kept *k)
{
	assert_int_equal(transcript_take_pending(t, &k->offset, &k->bytes, &k->len), SB_OK);
	assert_true(k->len > 0);
}

static void restore_k(struct fixture *fx, const struct kept *k, size_t want)
{
	size_t restored = 99;

	assert_int_equal(transcript_restore(fx->path, k->offset, k->bytes, k->len, &restored),
	                 SB_OK);
	assert_int_equal(restored, want);
}

static size_t file_size(const char *path)
{
	struct stat st;

	assert_int_equal(stat(path, &st), 0);
	return (size_t)st.st_size;
}

/* What two opens wrote (a new file with its header, then lines at the end
 * of the existing one) comes back whole from the kept bytes after the file
 * lost them (a crash of the machine before a sync), and is not written
 * twice when the file has them. */
static void test_take_and_restore(void **state)
{
	struct fixture *fx = *state;
	struct transcript *t;
	struct transcript_loaded l;
	struct kept a, b;
	static const char *const three[] = {"one", "two", "three"};
	char *whole;

	open_t(fx, &t);
	append_text(t, "one", NULL);
	append_text(t, "two", NULL);
	flush_t(fx, t);
	take_t(t, &a);
	close_t(fx, t);
	whole = slurp(fx->path);
	assert_int_equal(a.offset, 0);
	assert_int_equal(a.len, strlen(whole));
	assert_memory_equal(a.bytes, whole, a.len);
	free(whole);

	open_t(fx, &t);
	append_text(t, "three", NULL);
	flush_t(fx, t);
	take_t(t, &b);
	close_t(fx, t);
	assert_int_equal(b.offset, (int64_t)a.len);
	assert_int_equal(file_size(fx->path), a.len + b.len);
	whole = slurp(fx->path);

	/* The file has them: nothing is written. */
	restore_k(fx, &a, 0);
	restore_k(fx, &b, 0);
	assert_int_equal(file_size(fx->path), a.len + b.len);

	/* Gone with its directory entry: written again, whole. */
	assert_int_equal(unlink(fx->path), 0);
	restore_k(fx, &a, a.len);
	restore_k(fx, &b, b.len);
	{
		char *again = slurp(fx->path);

		assert_string_equal(again, whole);
		free(again);
	}
	/* Only the second open's lines lost, the file cut short. */
	assert_int_equal(truncate(fx->path, (off_t)a.len), 0);
	restore_k(fx, &a, 0);
	restore_k(fx, &b, b.len);
	assert_int_equal(transcript_load(fx->path, &l), SB_OK);
	assert_int_equal(l.torn, 0);
	assert_message_texts(l.messages, three, 3);
	transcript_loaded_free(&l);

	/* An empty file (its blocks never reached the disk). */
	assert_int_equal(truncate(fx->path, 0), 0);
	restore_k(fx, &a, a.len);
	restore_k(fx, &b, b.len);
	{
		char *again = slurp(fx->path);

		assert_string_equal(again, whole);
		free(again);
	}
	free(whole);
	free(a.bytes);
	free(b.bytes);
}

/* A tail torn inside the kept bytes is completed (only the missing part
 * is written); one that differs from them (zeros where the machine lost
 * the blocks) is written over; a torn line after them, which no commit
 * holds, stays and is still reported torn by load. */
static void test_restore_torn_tail(void **state)
{
	struct fixture *fx = *state;
	struct transcript *t;
	struct transcript_loaded l;
	struct kept a;
	static const char *const two[] = {"one", "two"};
	size_t cut;

	open_t(fx, &t);
	append_text(t, "one", NULL);
	append_text(t, "two", NULL);
	flush_t(fx, t);
	take_t(t, &a);
	close_t(fx, t);

	cut = a.len - 10;
	assert_int_equal(truncate(fx->path, (off_t)cut), 0);
	assert_int_equal(transcript_load(fx->path, &l), SB_OK);
	assert_int_equal(l.torn, 1);
	transcript_loaded_free(&l);
	restore_k(fx, &a, a.len - cut);
	assert_int_equal(transcript_load(fx->path, &l), SB_OK);
	assert_int_equal(l.torn, 0);
	assert_message_texts(l.messages, two, 2);
	transcript_loaded_free(&l);

	{
		int fd = open(fx->path, O_WRONLY);
		char zeros[16] = {0};

		assert_true(fd >= 0);
		assert_int_equal(pwrite(fd, zeros, sizeof zeros, (off_t)(a.len - 40)),
		                 (ssize_t)sizeof zeros);
		close(fd);
	}
	restore_k(fx, &a, a.len);
	assert_int_equal(transcript_load(fx->path, &l), SB_OK);
	assert_int_equal(l.torn, 0);
	assert_message_texts(l.messages, two, 2);
	transcript_loaded_free(&l);

	append_raw(fx->path, "{\"type\":\"message\",\"id\":\"tor");
	restore_k(fx, &a, 0);
	assert_int_equal(transcript_load(fx->path, &l), SB_OK);
	assert_int_equal(l.torn, 1);
	assert_message_texts(l.messages, two, 2);
	transcript_loaded_free(&l);
	free(a.bytes);
}

/* Nothing to hand over while appends are queued; after a write error the
 * error is the answer (the close syncs what there is). */
static void test_take_needs_flush(void **state)
{
	struct fixture *fx = *state;
	struct transcript *t;
	int64_t off;
	char *bytes;
	size_t len;

	open_t(fx, &t);
	append_text(t, "one", NULL);
	assert_int_equal(transcript_take_pending(t, &off, &bytes, &len), SB_ERR_INVAL);
	assert_null(bytes);
	flush_t(fx, t);
	assert_int_equal(transcript_take_pending(t, &off, &bytes, &len), SB_OK);
	assert_non_null(bytes);
	free(bytes);
	/* Taken: the next take has only what came after. */
	assert_int_equal(transcript_take_pending(t, &off, &bytes, &len), SB_OK);
	assert_int_equal(len, 0);
	free(bytes);
	close_t(fx, t);
}

/* More than 8 MiB written by one open is not kept (the close syncs the
 * file instead); the appends themselves all go through. */
static void test_take_too_big(void **state)
{
	struct fixture *fx = *state;
	struct transcript *t;
	struct transcript_loaded l;
	int64_t off;
	char *bytes, *big = malloc((1 << 20) + 1);
	size_t len;

	assert_non_null(big);
	memset(big, 'x', 1 << 20);
	big[1 << 20] = '\0';
	open_t(fx, &t);
	for (int i = 0; i < 9; i++)
		append_text(t, big, NULL);
	flush_t(fx, t);
	assert_int_equal(transcript_take_pending(t, &off, &bytes, &len), SB_ERR_TOOBIG);
	assert_null(bytes);
	close_t(fx, t);
	assert_int_equal(transcript_load(fx->path, &l), SB_OK);
	assert_int_equal(json_array_size(l.messages), 9);
	transcript_loaded_free(&l);
	free(big);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_header, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_append_order_and_chain, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_line_bytes, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_reopen_continues_chain, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_repair_written_once, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_repair_legacy_note, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_torn_last_line, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_torn_complete_json, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_torn_twice, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_torn_invalid_terminated, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_invalid_lines, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_torn_header_restarts, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_burst_in_order, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_flush_when_idle, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_lane_many_transcripts, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_write_failure, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_write_failure_in_a_shared_lane, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_take_and_restore, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_restore_torn_tail, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_take_needs_flush, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_take_too_big, setup, teardown),
	    cmocka_unit_test(test_session_ids),
	    cmocka_unit_test_setup_teardown(test_context_bookkeeping, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
