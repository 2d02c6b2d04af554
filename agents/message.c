/*
 * message.c - canonical messages: builders, accessors and the checks of
 * their shape and of the tool_use/tool_result pairing. See message.h.
 */
#include "agents/message.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/core/buf.h"
#include "gateway/core/err.h"

/* msg_text's bound: the text of one message never gets near it in practice. */
#define MSG_TEXT_MAX (64u << 20)

static json_t *msg_new(const char *role)
{
	return json_pack("{s:s,s:[]}", "role", role, "content");
}

json_t *msg_user_text_new(const char *text)
{
	json_t *msg = msg_new("user");

	if (msg && msg_add_text(msg, text) != SB_OK) {
		json_decref(msg);
		msg = NULL;
	}
	return msg;
}

json_t *msg_assistant_new(void)
{
	return msg_new("assistant");
}

json_t *msg_user_new(void)
{
	return msg_new("user");
}

/* Appends block (taken) to msg's content. */
static int msg_add_block_take(json_t *msg, json_t *block)
{
	json_t *content = json_object_get(msg, "content");
	int rc = SB_ERR_NOMEM;

	if (!block)
		goto out;
	rc = SB_ERR_INVAL;
	if (!json_is_array(content))
		goto out;
	rc = json_array_append_new(content, block) == 0 ? SB_OK : SB_ERR_NOMEM;
	block = NULL;
out:
	json_decref(block);
	return rc;
}

int msg_add_text(json_t *msg, const char *text)
{
	if (!text)
		return SB_ERR_INVAL;
	return msg_add_block_take(msg, json_pack("{s:s,s:s}", "type", "text", "text", text));
}

int msg_add_tool_use(json_t *msg, const char *id, const char *name, json_t *input)
{
	json_t *copy;

	if (!id || !name || (input && !json_is_object(input)))
		return SB_ERR_INVAL;
	copy = input ? json_deep_copy(input) : json_object();
	if (!copy)
		return SB_ERR_NOMEM;
	return msg_add_block_take(msg, json_pack("{s:s,s:s,s:s,s:o}", "type", "tool_use", "id", id,
	                                         "name", name, "input", copy));
}

int msg_add_tool_result(json_t *msg, const char *tool_use_id, const char *content, bool is_error)
{
	if (!tool_use_id || !content)
		return SB_ERR_INVAL;
	return msg_add_block_take(msg, json_pack("{s:s,s:s,s:s,s:b}", "type", "tool_result",
	                                         "tool_use_id", tool_use_id, "content", content,
	                                         "is_error", is_error));
}

char *msg_text(const json_t *msg)
{
	const json_t *content = json_object_get(msg, "content");
	const json_t *block;
	struct buf b;
	size_t i;

	buf_init(&b, MSG_TEXT_MAX);
	json_array_foreach(content, i, block)
	{
		const char *type = json_string_value(json_object_get(block, "type"));
		const json_t *text = json_object_get(block, "text");

		if (!type || strcmp(type, "text") != 0 || !json_is_string(text))
			continue;
		/* On TOOBIG the text stays as it was: the longest prefix of whole blocks. */
		if (buf_append(&b, json_string_value(text), json_string_length(text)) ==
		    SB_ERR_NOMEM)
			break;
	}
	return buf_steal(&b);
}

static bool msg_block_is(const json_t *block, const char *type)
{
	const char *t = json_string_value(json_object_get(block, "type"));

	return t && strcmp(t, type) == 0;
}

size_t msg_tool_use_count(const json_t *msg)
{
	const json_t *block;
	size_t i, n = 0;

	json_array_foreach(json_object_get(msg, "content"), i, block)
	{
		if (msg_block_is(block, "tool_use"))
			n++;
	}
	return n;
}

static int msg_why(char *why, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Writes the description of a violation (when why is not NULL); returns
 * SB_ERR_INVAL so that callers can `return msg_why(...)`. */
static int msg_why(char *why, size_t size, const char *fmt, ...)
{
	va_list ap;

	if (why && size) {
		va_start(ap, fmt);
		vsnprintf(why, size, fmt, ap);
		va_end(ap);
	}
	return SB_ERR_INVAL;
}

static bool msg_nonempty_string(const json_t *v)
{
	return json_is_string(v) && json_string_length(v) > 0;
}

/* The shape check behind msg_validate, with a description of what is wrong
 * ("content[1]: tool_use in a user message"). */
static int msg_check_shape(const json_t *msg, char *why, size_t size)
{
	const char *role = json_string_value(json_object_get(msg, "role"));
	const json_t *content = json_object_get(msg, "content"), *block;
	bool user;
	size_t i;

	if (!json_is_object(msg))
		return msg_why(why, size, "not an object");
	if (!role || (strcmp(role, "user") != 0 && strcmp(role, "assistant") != 0))
		return msg_why(why, size, "role must be \"user\" or \"assistant\"");
	user = strcmp(role, "user") == 0;
	if (!json_is_array(content))
		return msg_why(why, size, "content must be an array");
	if (json_array_size(content) == 0)
		return msg_why(why, size, "content is empty");
	json_array_foreach(content, i, block)
	{
		const char *type = json_string_value(json_object_get(block, "type"));
		const json_t *v;

		if (!json_is_object(block) || !type)
			return msg_why(why, size, "content[%zu]: not a block with a type", i);
		if (strcmp(type, "text") == 0) {
			if (!json_is_string(json_object_get(block, "text")))
				return msg_why(why, size, "content[%zu]: text without \"text\"", i);
		} else if (strcmp(type, "tool_use") == 0) {
			if (user)
				return msg_why(why, size,
				               "content[%zu]: tool_use in a user message", i);
			if (!msg_nonempty_string(json_object_get(block, "id")) ||
			    !msg_nonempty_string(json_object_get(block, "name")) ||
			    !json_is_object(json_object_get(block, "input")))
				return msg_why(
				    why, size,
				    "content[%zu]: tool_use needs \"id\", \"name\" and an "
				    "object \"input\"",
				    i);
		} else if (strcmp(type, "tool_result") == 0) {
			if (!user)
				return msg_why(why, size,
				               "content[%zu]: tool_result in an assistant message",
				               i);
			v = json_object_get(block, "content");
			if (!msg_nonempty_string(json_object_get(block, "tool_use_id")) ||
			    !(json_is_string(v) || json_is_array(v)))
				return msg_why(
				    why, size,
				    "content[%zu]: tool_result needs \"tool_use_id\" and "
				    "\"content\"",
				    i);
			v = json_object_get(block, "is_error");
			if (v && !json_is_boolean(v))
				return msg_why(
				    why, size,
				    "content[%zu]: tool_result \"is_error\" must be a boolean", i);
		} else {
			return msg_why(why, size, "content[%zu]: unknown block type \"%s\"", i,
			               type);
		}
	}
	return SB_OK;
}

int msg_validate(const json_t *msg)
{
	return msg_check_shape(msg, NULL, 0);
}

static bool msg_is_user(const json_t *msg)
{
	const char *role = json_string_value(json_object_get(msg, "role"));

	return role && strcmp(role, "user") == 0;
}

/* Index of the block of msg of this type whose id_key equals id, from
 * block `from` on; -1 when none. */
static long msg_find_block(const json_t *msg, const char *type, const char *id_key, const char *id,
                           size_t from)
{
	const json_t *content = json_object_get(msg, "content");

	for (size_t i = from; i < json_array_size(content); i++) {
		const json_t *b = json_array_get(content, i);
		const char *v = json_string_value(json_object_get(b, id_key));

		if (msg_block_is(b, type) && v && strcmp(v, id) == 0)
			return (long)i;
	}
	return -1;
}

int msg_check_pairing(const json_t *history, char *why, size_t why_size)
{
	const json_t *msg, *prev = NULL;
	size_t i, n = json_array_size(history);
	char shape[256];

	if (!json_is_array(history))
		return msg_why(why, why_size, "the history is not an array");
	json_array_foreach(history, i, msg)
	{
		const json_t *block, *next = i + 1 < n ? json_array_get(history, i + 1) : NULL;
		size_t j;

		if (msg_check_shape(msg, shape, sizeof shape) != SB_OK)
			return msg_why(why, why_size, "message %zu: %s", i, shape);
		json_array_foreach(json_object_get(msg, "content"), j, block)
		{
			const char *id;

			if (msg_block_is(block, "tool_use")) {
				id = json_string_value(json_object_get(block, "id"));
				if (msg_find_block(msg, "tool_use", "id", id, j + 1) >= 0)
					return msg_why(why, why_size,
					               "message %zu: duplicate tool_use id \"%s\"",
					               i, id);
				if (!next)
					return msg_why(
					    why, why_size,
					    "message %zu: tool_use \"%s\" has no tool_result "
					    "(the history ends there)",
					    i, id);
				if (!msg_is_user(next) ||
				    msg_find_block(next, "tool_result", "tool_use_id", id, 0) < 0)
					return msg_why(
					    why, why_size,
					    "message %zu: tool_use \"%s\" has no tool_result "
					    "in message %zu",
					    i, id, i + 1);
			} else if (msg_block_is(block, "tool_result")) {
				id = json_string_value(json_object_get(block, "tool_use_id"));
				if (!prev || msg_is_user(prev) ||
				    msg_find_block(prev, "tool_use", "id", id, 0) < 0)
					return msg_why(why, why_size,
					               "message %zu: tool_result \"%s\" answers no "
					               "tool_use",
					               i, id);
				if (msg_find_block(msg, "tool_result", "tool_use_id", id, j + 1) >=
				    0)
					return msg_why(why, why_size,
					               "message %zu: duplicate tool_result \"%s\"",
					               i, id);
			}
		}
		prev = msg;
	}
	return SB_OK;
}
