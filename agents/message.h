/*
 * message.h - the conversation as the agent runtime keeps it.
 *
 * One canonical shape, whatever the provider: a message is a jansson object
 *
 *   {"role": "user" | "assistant",
 *    "content": [ {"type": "text", "text": "..."},
 *                 {"type": "tool_use", "id": "...", "name": "...", "input": {...}},
 *                 {"type": "tool_result", "tool_use_id": "...", "content": "...",
 *                  "is_error": false} ]}
 *
 * Tool results travel in the user message that follows the assistant message
 * with the tool_use blocks (the Messages API's rule; the Chat Completions
 * provider turns them into role "tool" messages on the wire). A history is a
 * JSON array of such messages. Everything here is loop-thread data: serialise
 * before crossing threads.
 *
 * Ownership follows CONVENTIONS §9: functions borrow json_t arguments; those
 * ending in _new return a new reference.
 */
#ifndef SB_AGENTS_MESSAGE_H
#define SB_AGENTS_MESSAGE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* {"role":"user","content":[{"type":"text","text":text}]} */
json_t *msg_user_text_new(const char *text);

/* An empty assistant message, to fill with msg_add_* below. */
json_t *msg_assistant_new(void);

/* An empty user message (for tool results). */
json_t *msg_user_new(void);

/* Appends a block to msg's content. input (may be NULL for {}) is borrowed
 * and deep-copied, so later changes to it do not reach the message. Return
 * SB_OK, SB_ERR_NOMEM, or SB_ERR_INVAL (msg has no content array, a string
 * is NULL, input is not an object). */
int msg_add_text(json_t *msg, const char *text);
int msg_add_tool_use(json_t *msg, const char *id, const char *name, json_t *input);
int msg_add_tool_result(json_t *msg, const char *tool_use_id, const char *content, bool is_error);

/* The concatenated text blocks of msg, without separators (caller frees);
 * "" when none. NULL only when out of memory. */
char *msg_text(const json_t *msg);

/* Number of tool_use blocks in msg. */
size_t msg_tool_use_count(const json_t *msg);

/* Checks the pairing invariant over a whole history: every tool_use of an
 * assistant message has exactly one tool_result, with the same id, in the
 * next message (which must be a user message), and no tool_result stands
 * anywhere else. Each message's shape is checked too (msg_validate).
 * Returns SB_OK, or SB_ERR_INVAL with a description of the first violation
 * in why (may be NULL; truncated to why_size). Messages are numbered by
 * their index in the history array, from 0:
 *   message 3: tool_use "t1" has no tool_result in message 4
 *   message 3: tool_use "t1" has no tool_result (the history ends there)
 *   message 3: duplicate tool_use id "t1"
 *   message 4: tool_result "t9" answers no tool_use
 *   message 4: duplicate tool_result "t1"
 *   message 2: content[0]: tool_use in a user message      (shape) */
int msg_check_pairing(const json_t *history, char *why, size_t why_size);

/* Checks the shape of one message: role user or assistant; a non-empty
 * content array of blocks: text (string "text"), tool_use (assistant only;
 * non-empty "id" and "name", object "input"), tool_result (user only;
 * non-empty "tool_use_id", "content" string or array, optional boolean
 * "is_error"). Other keys are allowed. SB_OK or SB_ERR_INVAL. */
int msg_validate(const json_t *msg);

#endif
