/*
 * harness_oai.h - integration helpers for the OpenAI-compatible endpoint:
 * run tests/fakes/openai_client.js (the official OpenAI SDK) against a
 * daemon, and read what the daemon wrote (its token, session transcripts,
 * metrics).
 *
 * Blocking helpers, for test processes only.
 */
#ifndef SB_TESTS_HARNESS_OAI_H
#define SB_TESTS_HARNESS_OAI_H

#include <jansson.h>
#include <stddef.h>
#include <sys/types.h>

/* A client process running in the background. */
struct harness_oai_client {
	pid_t pid;
	int stdin_fd;       /* lines written here open the plan's gates */
	char out_path[700]; /* its stdout: one JSON line */
};

/* The home's gateway.token (trimmed) into out. 0 on success. */
int harness_oai_token(const char *home, char *out, size_t size);

/* Starts `node openai_client.js http://127.0.0.1:PORT/v1 TOKEN PLAN` with
 * its stdout in out_path. 0 on success. */
int harness_oai_start(struct harness_oai_client *c, int port, const char *token, const char *plan,
                      const char *out_path);

/* Opens the gate name of the client's plan (ops with "gate": name start). */
int harness_oai_open_gate(struct harness_oai_client *c, const char *name);

/* Closes stdin (gates still shut fail their ops), then waits up to
 * timeout_ms for the client; *results is its JSON array (new
 * reference). 0 on success, -1 on timeout, a bad exit or bad output (the
 * output is printed then). */
int harness_oai_finish(struct harness_oai_client *c, int timeout_ms, json_t **results);

/* Both at once; the output goes to dir/oai-client.out. */
int harness_oai_run(const char *dir, int port, const char *token, const char *plan, int timeout_ms,
                    json_t **results);

/* One chat completion to switchboard/main as user, with the bearer token:
 * the HTTP status (0 when the connection broke); *reply (when not NULL) the
 * assistant's text of a 200 (strdup), else NULL. */
long harness_oai_ask(int port, const char *token, const char *user, const char *text, char **reply);

/* The transcript of session key under home/agents/<agent>/sessions (the
 * newest when there are several): its messages (new reference) or NULL. */
json_t *harness_oai_transcript(const char *home, const char *agent, const char *session_key);

/* Waits up to timeout_ms until the transcript of session_key holds a
 * message whose text is text. 0 when it does. */
int harness_oai_wait_message(const char *home, const char *agent, const char *session_key,
                             const char *text, int timeout_ms);

/* Waits up to timeout_ms until a metric reaches at least value. 0 then. */
int harness_oai_wait_metric(int port, const char *name, long long value, int timeout_ms);

/* How many transcripts of agent have a header whose key is session_key. */
int harness_oai_transcripts(const char *home, const char *agent, const char *session_key);

/* The value of one metric line "name value" (name may hold labels) from
 * GET /metrics; -1 when absent. */
long long harness_oai_metric(int port, const char *name);

/* All the text of a message (string content, or its text blocks joined
 * with newlines, without the gateway's date note). The caller frees it. */
char *harness_oai_message_text(const json_t *msg);

#endif
