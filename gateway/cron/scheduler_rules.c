/*
 * scheduler_rules.c - see scheduler_rules.h.
 */
#include "gateway/cron/scheduler_rules.h"

#include <ctype.h>
#include <string.h>

#include "gateway/core/err.h"

static bool rules_blank(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

static bool rules_markup(char c)
{
	return c == '*' || c == '_' || c == '`' || c == '~';
}

static size_t rules_codepoints(const char *s, size_t n)
{
	size_t count = 0;

	for (size_t i = 0; i < n; i++)
		if (((unsigned char)s[i] & 0xC0) != 0x80)
			count++;
	return count;
}

/* Trims blanks at both ends of [*b, *e). */
static void rules_trim(const char **b, const char **e)
{
	while (*b < *e && rules_blank(**b))
		(*b)++;
	while (*e > *b && rules_blank((*e)[-1]))
		(*e)--;
}

bool heartbeat_is_ack(const char *reply, size_t max_other)
{
	const size_t tn = sizeof HEARTBEAT_TOKEN - 1;
	const char *b, *e, *rb, *re;

	if (!reply)
		return false;
	b = reply;
	e = reply + strlen(reply);
	rules_trim(&b, &e);
	/* At the start, possibly wrapped in markup. */
	rb = b;
	while (rb < e && rules_markup(*rb))
		rb++;
	if ((size_t)(e - rb) >= tn && memcmp(rb, HEARTBEAT_TOKEN, tn) == 0) {
		rb += tn;
		while (rb < e && (rules_markup(*rb) || *rb == '.' || *rb == '!' || *rb == ':'))
			rb++;
		re = e;
		rules_trim(&rb, &re);
		return rules_codepoints(rb, (size_t)(re - rb)) <= max_other;
	}
	/* At the end, possibly followed by markup or a full stop. */
	re = e;
	while (re > b && (rules_markup(re[-1]) || re[-1] == '.' || re[-1] == '!'))
		re--;
	if ((size_t)(re - b) >= tn && memcmp(re - tn, HEARTBEAT_TOKEN, tn) == 0) {
		re -= tn;
		while (re > b && rules_markup(re[-1]))
			re--;
		rb = b;
		rules_trim(&rb, &re);
		return rules_codepoints(rb, (size_t)(re - rb)) <= max_other;
	}
	return false;
}

/* Whether one line (no newline) says nothing. */
static bool rules_line_empty(const char *s, size_t n)
{
	const char *b = s, *e = s + n;

	rules_trim(&b, &e);
	if (b == e || *b == '#')
		return true;
	/* An empty list item: "-", "*", "+", "1." or "1)", then maybe "[ ]". */
	if (*b == '-' || *b == '*' || *b == '+') {
		b++;
	} else if (isdigit((unsigned char)*b)) {
		while (b < e && isdigit((unsigned char)*b))
			b++;
		if (b == e || (*b != '.' && *b != ')'))
			return false;
		b++;
	} else {
		return false;
	}
	rules_trim(&b, &e);
	if (e - b == 3 && b[0] == '[' && (b[1] == ' ' || b[1] == 'x' || b[1] == 'X') && b[2] == ']')
		return true;
	return b == e;
}

bool heartbeat_file_empty(const char *text, size_t len)
{
	bool in_comment = false;
	size_t i = 0;

	while (i < len) {
		size_t j = i;
		char line[4096];
		size_t n, k = 0, w = 0;

		while (j < len && text[j] != '\n')
			j++;
		n = j - i;
		/* Drop HTML comments, which may span lines. */
		while (k < n && w < sizeof line - 1) {
			if (in_comment) {
				if (k + 3 <= n && memcmp(text + i + k, "-->", 3) == 0) {
					in_comment = false;
					k += 3;
				} else {
					k++;
				}
			} else if (k + 4 <= n && memcmp(text + i + k, "<!--", 4) == 0) {
				in_comment = true;
				k += 4;
			} else {
				line[w++] = text[i + k++];
			}
		}
		if (k < n)
			return false; /* a line too long to be an empty one */
		if (!rules_line_empty(line, w))
			return false;
		i = j + 1;
	}
	return true;
}

int heartbeat_hhmm_parse(const char *s, bool allow_24, int *minutes)
{
	int h, m;

	if (!s || strlen(s) != 5 || !isdigit((unsigned char)s[0]) ||
	    !isdigit((unsigned char)s[1]) || s[2] != ':' || !isdigit((unsigned char)s[3]) ||
	    !isdigit((unsigned char)s[4]))
		return SB_ERR_INVAL;
	h = (s[0] - '0') * 10 + (s[1] - '0');
	m = (s[3] - '0') * 10 + (s[4] - '0');
	if (m > 59 || h > 24 || (h == 24 && (m != 0 || !allow_24)))
		return SB_ERR_INVAL;
	*minutes = h * 60 + m;
	return SB_OK;
}

bool heartbeat_in_window(int start, int end, const struct cron_tz *z, int64_t utc_s)
{
	struct cron_tm tm;
	int now;

	if (start == end)
		return false;
	cron_tz_to_tm(z, utc_s, &tm);
	now = tm.hour * 60 + tm.min;
	if (start < end)
		return now >= start && now < end;
	return now >= start || now < end;
}
