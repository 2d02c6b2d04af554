/*
 * harness_oai.c - see harness_oai.h.
 */
#include "harness_oai.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

int harness_oai_token(const char *home, char *out, size_t size)
{
	char path[700];
	struct buf b;
	int rc = -1;

	snprintf(path, sizeof path, "%s/gateway.token", home);
	buf_init(&b, 8192);
	if (harness_read_file(path, &b) == 0 && b.len) {
		while (b.len && (b.data[b.len - 1] == '\n' || b.data[b.len - 1] == ' '))
			b.data[--b.len] = '\0';
		if (b.len < size) {
			memcpy(out, b.data, b.len + 1);
			rc = 0;
		}
	}
	buf_free(&b);
	return rc;
}

int harness_oai_start(struct harness_oai_client *c, int port, const char *token, const char *plan,
                      const char *out_path)
{
	char script[1024], base[128];
	int fd, in[2];

	memset(c, 0, sizeof c[0]);
	c->stdin_fd = -1;
	snprintf(c->out_path, sizeof c->out_path, "%s", out_path);
	snprintf(script, sizeof script, "%s/tests/fakes/openai_client.js", SB_SOURCE_DIR);
	snprintf(base, sizeof base, "http://127.0.0.1:%d/v1", port);
	fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd < 0)
		return -1;
	if (pipe(in) != 0) {
		close(fd);
		return -1;
	}
	c->pid = fork();
	if (c->pid == 0) {
		const char *argv[] = {"node", script, base, token, plan, NULL};

		dup2(in[0], STDIN_FILENO);
		dup2(fd, STDOUT_FILENO);
		close(in[0]);
		close(in[1]);
		close(fd);
		execvp("node", (char *const *)argv);
		_exit(127);
	}
	close(in[0]);
	close(fd);
	c->stdin_fd = in[1];
	return c->pid > 0 ? 0 : -1;
}

int harness_oai_open_gate(struct harness_oai_client *c, const char *name)
{
	char line[128];
	int n = snprintf(line, sizeof line, "%s\n", name);

	if (c->stdin_fd < 0 || n < 0 || (size_t)n >= sizeof line)
		return -1;
	return write(c->stdin_fd, line, (size_t)n) == n ? 0 : -1;
}

int harness_oai_finish(struct harness_oai_client *c, int timeout_ms, json_t **results)
{
	struct buf out;
	json_error_t err;
	int code;

	if (c->stdin_fd >= 0)
		close(c->stdin_fd);
	c->stdin_fd = -1;
	code = harness_wait(c->pid, timeout_ms);
	*results = NULL;
	c->pid = 0;
	buf_init(&out, 64 << 20);
	harness_read_file(c->out_path, &out);
	if (code == 0 && out.data)
		*results = json_loads(out.data, 0, &err);
	if (!json_is_array(*results)) {
		fprintf(stderr, "openai_client exited %d with: %s\n", code,
		        out.data ? out.data : "(nothing)");
		json_decref(*results);
		*results = NULL;
	}
	buf_free(&out);
	return *results ? 0 : -1;
}

int harness_oai_run(const char *dir, int port, const char *token, const char *plan, int timeout_ms,
                    json_t **results)
{
	struct harness_oai_client c;
	char path[700];

	snprintf(path, sizeof path, "%s/oai-client.out", dir);
	*results = NULL;
	if (harness_oai_start(&c, port, token, plan, path) != 0)
		return -1;
	return harness_oai_finish(&c, timeout_ms, results);
}

/* The header line of a transcript file (new reference) or NULL. */
static json_t *harness_oai_header(const char *path)
{
	char line[4096];
	FILE *f = fopen(path, "r");
	json_t *h = NULL;

	if (!f)
		return NULL;
	if (fgets(line, sizeof line, f))
		h = json_loads(line, 0, NULL);
	fclose(f);
	return h;
}

/* Counts the transcripts of agent whose header key is session_key, and
 * puts the path of the newest in newest (when not NULL). */
static int harness_oai_each(const char *home, const char *agent, const char *session_key,
                            char *newest, size_t size)
{
	char dir[1024], path[2048];
	struct dirent *de;
	DIR *d;
	int n = 0;

	snprintf(dir, sizeof dir, "%s/agents/%s/sessions", home, agent);
	d = opendir(dir);
	if (!d)
		return 0;
	if (newest && size)
		newest[0] = '\0';
	while ((de = readdir(d))) {
		json_t *h;
		const char *key;

		if (!strstr(de->d_name, ".jsonl"))
			continue;
		snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
		h = harness_oai_header(path);
		key = json_string_value(json_object_get(h, "key"));
		if (key && strcmp(key, session_key) == 0) {
			n++;
			/* Session ids are ULIDs: the greatest name is the newest. */
			if (newest && strcmp(path, newest) > 0)
				snprintf(newest, size, "%s", path);
		}
		json_decref(h);
	}
	closedir(d);
	return n;
}

int harness_oai_transcripts(const char *home, const char *agent, const char *session_key)
{
	return harness_oai_each(home, agent, session_key, NULL, 0);
}

json_t *harness_oai_transcript(const char *home, const char *agent, const char *session_key)
{
	char path[2048];
	char line[1 << 16];
	json_t *messages;
	FILE *f;

	if (harness_oai_each(home, agent, session_key, path, sizeof path) == 0)
		return NULL;
	f = fopen(path, "r");
	if (!f)
		return NULL;
	messages = json_array();
	/* Every "message" entry in order (the history as sent), skipping torn
	 * lines, which do not parse. */
	while (fgets(line, sizeof line, f)) {
		json_t *e = json_loads(line, 0, NULL);
		const char *type = json_string_value(json_object_get(e, "type"));

		if (type && strcmp(type, "message") == 0 && json_object_get(e, "message"))
			json_array_append(messages, json_object_get(e, "message"));
		json_decref(e);
	}
	fclose(f);
	return messages;
}

long long harness_oai_metric(int port, const char *name)
{
	struct buf body;
	long long v = -1;
	size_t n = strlen(name);

	buf_init(&body, 16 << 20);
	if (harness_http(port, "GET", "/metrics", NULL, NULL, &body) == 200 && body.data) {
		for (char *line = body.data; line && *line;) {
			char *nl = strchr(line, '\n');

			if (strncmp(line, name, n) == 0 && line[n] == ' ') {
				v = strtoll(line + n + 1, NULL, 10);
				break;
			}
			line = nl ? nl + 1 : NULL;
		}
	}
	buf_free(&body);
	return v;
}

char *harness_oai_message_text(const json_t *msg)
{
	const json_t *content = json_object_get(msg, "content"), *b;
	struct buf out;
	size_t i;

	buf_init(&out, 64 << 20);
	if (json_is_string(content)) {
		buf_puts(&out, json_string_value(content));
	} else {
		json_array_foreach(content, i, b)
		{
			const char *t = json_string_value(json_object_get(b, "text"));

			/* The date note the gateway adds to a new message is not
			 * what the user wrote. */
			if (t && strncmp(t, "[Today is ", 10) == 0)
				continue;
			if (t) {
				if (out.len)
					buf_puts(&out, "\n");
				buf_puts(&out, t);
			}
		}
	}
	return buf_steal(&out);
}

int harness_oai_wait_message(const char *home, const char *agent, const char *session_key,
                             const char *text, int timeout_ms)
{
	for (int waited = 0; waited <= timeout_ms; waited += 10) {
		json_t *msgs = harness_oai_transcript(home, agent, session_key);
		bool found = false;

		for (size_t i = 0; !found && i < json_array_size(msgs); i++) {
			char *t = harness_oai_message_text(json_array_get(msgs, i));

			found = t && strcmp(t, text) == 0;
			free(t);
		}
		json_decref(msgs);
		if (found)
			return 0;
		usleep(10000);
	}
	return -1;
}

int harness_oai_wait_metric(int port, const char *name, long long value, int timeout_ms)
{
	for (int waited = 0; waited <= timeout_ms; waited += 10) {
		if (harness_oai_metric(port, name) >= value)
			return 0;
		usleep(10000);
	}
	return -1;
}

long harness_oai_ask(int port, const char *token, const char *user, const char *text, char **reply)
{
	char auth[400], *body;
	const char *h[] = {auth, "Content-Type: application/json", NULL};
	struct buf resp;
	json_t *req, *res;
	long status;

	if (reply)
		*reply = NULL;
	snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
	req = json_pack("{sssss[{ssss}]}", "model", "switchboard/main", "user", user, "messages",
	                "role", "user", "content", text);
	body = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	buf_init(&resp, 1 << 20);
	status = harness_http(port, "POST", "/v1/chat/completions", h, body, &resp);
	free(body);
	res = resp.data ? json_loads(resp.data, 0, NULL) : NULL;
	if (status == 200 && reply) {
		const char *c = json_string_value(json_object_get(
		    json_object_get(json_array_get(json_object_get(res, "choices"), 0), "message"),
		    "content"));

		*reply = c ? strdup(c) : NULL;
	}
	json_decref(res);
	buf_free(&resp);
	return status;
}
