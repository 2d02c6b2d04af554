/*
 * scheduler_rules.h - the heartbeat's rules as pure functions: when a reply
 * is only an acknowledgement (HEARTBEAT_OK), when HEARTBEAT.md has nothing
 * to do, and whether an instant falls inside the active hours. Any thread.
 */
#ifndef SB_GATEWAY_SCHEDULER_RULES_H
#define SB_GATEWAY_SCHEDULER_RULES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gateway/cron/cron_tz.h"

#define HEARTBEAT_TOKEN "HEARTBEAT_OK"
#define HEARTBEAT_ACK_MAX 300
#define HEARTBEAT_DEFAULT_PROMPT                                                                   \
	"Read HEARTBEAT.md if it exists (workspace context). Follow it strictly. Do not infer "    \
	"or repeat old tasks from prior chats. If nothing needs attention, reply HEARTBEAT_OK."

/* Whether reply is an acknowledgement that must not be delivered: after
 * trimming blanks (and markup such as ** or ` around the token), it starts
 * or ends with HEARTBEAT_OK, and what remains without the token is at most
 * max_other characters (UTF-8 code points, blanks trimmed). The token in
 * the middle of a reply does not count. */
bool heartbeat_is_ack(const char *reply, size_t max_other);

/* Whether a HEARTBEAT.md holds nothing to act on: only blank lines,
 * markdown headings, empty list items ("-", "* [ ]", "1.") and HTML
 * comments. */
bool heartbeat_file_empty(const char *text, size_t len);

/* "HH:MM" -> minutes after midnight; "24:00" only when allow_24. SB_OK or
 * SB_ERR_INVAL. */
int heartbeat_hhmm_parse(const char *s, bool allow_24, int *minutes);

/* Whether the wall-clock time of utc_s in zone z is inside [start, end)
 * (minutes after midnight). start > end wraps past midnight; start == end
 * is an empty window (never active). */
bool heartbeat_in_window(int start, int end, const struct cron_tz *z, int64_t utc_s);

#endif
