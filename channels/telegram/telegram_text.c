/*
 * telegram_text.c - reply text for Telegram: length in UTF-16 units, chunks
 * on safe boundaries, HTML escaping, Markdown to Telegram HTML (see
 * telegram_proto.h).
 */
#include <stdlib.h>
#include <string.h>

#include "channels/telegram/telegram_proto.h"
#include "gateway/core/buf.h"

#define TG_TEXT_MAX ((size_t)64 << 20)
#define TG_FENCE_RESERVE 24 /* units kept for a closing/reopening fence */

/* Bytes of the character at s (len bytes left) and its UTF-16 units; a
 * malformed or cut sequence is one byte, one unit. */
static size_t tg_char(const unsigned char *s, size_t len, size_t *units)
{
	size_t n = 1;

	*units = 1;
	if (s[0] < 0x80)
		return 1;
	if ((s[0] & 0xE0) == 0xC0 && s[0] >= 0xC2)
		n = 2;
	else if ((s[0] & 0xF0) == 0xE0)
		n = 3;
	else if ((s[0] & 0xF8) == 0xF0 && s[0] <= 0xF4)
		n = 4;
	else
		return 1;
	if (n > len)
		return 1;
	for (size_t i = 1; i < n; i++)
		if ((s[i] & 0xC0) != 0x80)
			return 1;
	if (n == 4)
		*units = 2;
	return n;
}

size_t telegram_utf16_len(const char *s, size_t len)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0, total = 0, u;

	while (i < len) {
		i += tg_char(p + i, len - i, &u);
		total += u;
	}
	return total;
}

bool telegram_utf16_range(const char *s, size_t len, int64_t off, int64_t n, size_t *start,
                          size_t *bytes)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0, u;
	int64_t pos = 0;

	if (off < 0 || n < 0 || off > (int64_t)len * 2 || n > (int64_t)len * 2)
		return false;
	while (i < len && pos < off) {
		i += tg_char(p + i, len - i, &u);
		pos += (int64_t)u;
	}
	if (pos != off)
		return false;
	*start = i;
	while (i < len && pos < off + n) {
		i += tg_char(p + i, len - i, &u);
		pos += (int64_t)u;
	}
	if (pos != off + n)
		return false;
	*bytes = i - *start;
	return true;
}

/* ---- chunks ---- */

/* Whether the line starting at s (n bytes) is a code fence: up to three
 * spaces, then ```. */
static bool tg_is_fence(const char *s, size_t n)
{
	size_t i = 0;

	while (i < n && i < 3 && s[i] == ' ')
		i++;
	return n - i >= 3 && memcmp(s + i, "```", 3) == 0;
}

/* Walks s[0..n) line by line and updates the fence state: *in, and the
 * opening line in open (a malloc'd copy). */
static int tg_fence_scan(const char *s, size_t n, bool *in, char **open)
{
	size_t i = 0;

	while (i < n) {
		const char *nl = memchr(s + i, '\n', n - i);
		size_t ln = nl ? (size_t)(nl - (s + i)) : n - i;

		if (tg_is_fence(s + i, ln)) {
			*in = !*in;
			free(*open);
			*open = NULL;
			if (*in) {
				*open = malloc(ln + 1);
				if (!*open)
					return -1;
				memcpy(*open, s + i, ln);
				(*open)[ln] = '\0';
			}
		}
		i += ln + (nl ? 1 : 0);
	}
	return 0;
}

void telegram_chunks_free(char **chunks, size_t n)
{
	for (size_t i = 0; chunks && i < n; i++)
		free(chunks[i]);
	free(chunks);
}

static int tg_push(char ***v, size_t *n, size_t *cap, char *s)
{
	if (!s)
		return -1;
	if (*n == *cap) {
		size_t nc = *cap ? *cap * 2 : 4;
		char **nv = realloc(*v, nc * sizeof *nv);

		if (!nv) {
			free(s);
			return -1;
		}
		*v = nv;
		*cap = nc;
	}
	(*v)[(*n)++] = s;
	return 0;
}

/* The furthest character boundary from pos within budget units. */
static size_t tg_reach(const unsigned char *p, size_t len, size_t pos, size_t budget)
{
	size_t i = pos, units = 0, u, k;

	while (i < len) {
		k = tg_char(p + i, len - i, &u);
		if (units + u > budget)
			break;
		units += u;
		i += k;
	}
	return i;
}

size_t telegram_chunks(const char *text, size_t limit, char ***out)
{
	const unsigned char *p = (const unsigned char *)text;
	size_t len = text ? strlen(text) : 0, pos = 0, n = 0, cap = 0;
	char **v = NULL, *open = NULL, *reopen = NULL;
	bool in = false;
	struct buf b;

	*out = NULL;
	if (limit < 4 * TG_FENCE_RESERVE)
		limit = 4 * TG_FENCE_RESERVE;
	buf_init(&b, TG_TEXT_MAX);
	while (pos < len) {
		/* A chunk that continues a code fence starts by opening it again
		 * (its opening line, cut to the reserve). */
		size_t prefix = 0, budget, end, cut, para = 0, line = 0, word = 0, u, k;

		free(reopen);
		reopen = NULL;
		if (in && open) {
			size_t ol = tg_reach((const unsigned char *)open, strlen(open), 0,
			                     TG_FENCE_RESERVE - 1);

			reopen = malloc(ol + 2);
			if (!reopen)
				goto fail;
			memcpy(reopen, open, ol);
			reopen[ol] = '\n';
			reopen[ol + 1] = '\0';
			prefix = telegram_utf16_len(reopen, ol + 1);
		}
		budget = limit - prefix;
		end = tg_reach(p, len, pos, budget);
		if (end < len) {
			/* Room for a fence this chunk may have to close. */
			budget -= TG_FENCE_RESERVE;
			end = tg_reach(p, len, pos, budget);
			for (k = pos; k < end; k++) {
				if (p[k] == '\n' && k + 1 < end && p[k + 1] == '\n')
					para = k + 2;
				if (p[k] == '\n')
					line = k + 1;
				if (p[k] == ' ' || p[k] == '\t')
					word = k + 1;
			}
			/* The biggest kind of boundary that does not leave the chunk
			 * tiny; else the last character boundary. */
			if (para > pos + (end - pos) / 3)
				cut = para;
			else if (line > pos + (end - pos) / 3)
				cut = line;
			else if (word > pos + (end - pos) / 3)
				cut = word;
			else
				cut = end;
			if (cut <= pos)
				cut = pos + tg_char(p + pos, len - pos, &u);
		} else {
			cut = len;
		}
		if (tg_fence_scan(text + pos, cut - pos, &in, &open))
			goto fail;
		buf_reset(&b);
		if (reopen && buf_puts(&b, reopen))
			goto fail;
		{
			size_t e = cut;

			/* The boundary's own whitespace stays behind. */
			while (e > pos && (p[e - 1] == '\n' || p[e - 1] == ' ' || p[e - 1] == '\t'))
				e--;
			if (buf_append(&b, text + pos, e - pos))
				goto fail;
		}
		if (in && cut < len && buf_puts(&b, "\n```"))
			goto fail;
		if (b.len) {
			bool blank = true;

			for (size_t i = 0; i < b.len; i++)
				if (b.data[i] != '\n' && b.data[i] != ' ' && b.data[i] != '\t')
					blank = false;
			if (!blank && tg_push(&v, &n, &cap, buf_steal(&b)))
				goto fail;
		}
		pos = cut;
		while (pos < len && (p[pos] == '\n' || p[pos] == ' ' || p[pos] == '\t') && !in)
			pos++;
	}
	buf_free(&b);
	free(open);
	free(reopen);
	*out = v;
	return n;
fail:
	buf_free(&b);
	free(open);
	free(reopen);
	telegram_chunks_free(v, n);
	return 0;
}

/* ---- HTML ---- */

static int tg_escape_into(struct buf *b, const char *s, size_t len)
{
	size_t i, from = 0;
	int rc = 0;

	for (i = 0; i < len && !rc; i++) {
		const char *rep = NULL;

		switch (s[i]) {
		case '&':
			rep = "&amp;";
			break;
		case '<':
			rep = "&lt;";
			break;
		case '>':
			rep = "&gt;";
			break;
		case '"':
			rep = "&quot;";
			break;
		default:
			continue;
		}
		rc = buf_append(b, s + from, i - from);
		if (!rc)
			rc = buf_puts(b, rep);
		from = i + 1;
	}
	if (!rc)
		rc = buf_append(b, s + from, len - from);
	return rc;
}

char *telegram_html_escape(const char *s, size_t len)
{
	struct buf b;

	buf_init(&b, TG_TEXT_MAX);
	if (tg_escape_into(&b, s ? s : "", s ? len : 0)) {
		buf_free(&b);
		return NULL;
	}
	return buf_steal(&b);
}

/* The end of a link target starting at s (up to ')'), or NULL when it is
 * not an http(s) URL without spaces. */
static const char *tg_link_end(const char *s, const char *end)
{
	const char *q = s;

	if (!((end - s > 7 && strncmp(s, "http://", 7) == 0) ||
	      (end - s > 8 && strncmp(s, "https://", 8) == 0)))
		return NULL;
	while (q < end && *q != ')') {
		if (*q == ' ' || *q == '"' || *q == '<' || *q == '>')
			return NULL;
		q++;
	}
	return q < end ? q : NULL;
}

/* One line outside code fences. */
static int tg_inline(struct buf *b, const char *s, size_t len)
{
	const char *p = s, *end = s + len;
	int rc = 0;

	while (p < end && !rc) {
		const char *q;

		if (*p == '`' && (q = memchr(p + 1, '`', (size_t)(end - p - 1))) && q > p + 1) {
			rc = buf_puts(b, "<code>");
			if (!rc)
				rc = tg_escape_into(b, p + 1, (size_t)(q - p - 1));
			if (!rc)
				rc = buf_puts(b, "</code>");
			p = q + 1;
			continue;
		}
		if (*p == '*' && p + 1 < end && p[1] == '*' && p + 2 < end && p[2] != ' ') {
			const char *c = p + 2;

			q = NULL;
			while (c + 1 < end) {
				if (c[0] == '*' && c[1] == '*' && c[-1] != ' ') {
					q = c;
					break;
				}
				if (*c == '`')
					break; /* no code inside bold; leave it literal */
				c++;
			}
			if (q && q > p + 2) {
				rc = buf_puts(b, "<b>");
				if (!rc)
					rc = tg_escape_into(b, p + 2, (size_t)(q - p - 2));
				if (!rc)
					rc = buf_puts(b, "</b>");
				p = q + 2;
				continue;
			}
		}
		if (*p == '[' && (q = memchr(p + 1, ']', (size_t)(end - p - 1))) && q > p + 1 &&
		    q + 1 < end && q[1] == '(') {
			const char *u = q + 2, *ue = tg_link_end(u, end);

			if (ue) {
				rc = buf_puts(b, "<a href=\"");
				if (!rc)
					rc = tg_escape_into(b, u, (size_t)(ue - u));
				if (!rc)
					rc = buf_puts(b, "\">");
				if (!rc)
					rc = tg_escape_into(b, p + 1, (size_t)(q - p - 1));
				if (!rc)
					rc = buf_puts(b, "</a>");
				p = ue + 1;
				continue;
			}
		}
		rc = tg_escape_into(b, p, 1);
		p++;
	}
	return rc;
}

/* The language of an opening fence line ("```python" gives "python"), as
 * long as it is a plain word; else none. */
static size_t tg_fence_lang(const char *s, size_t n, const char **lang)
{
	size_t i = 0, k;

	while (i < n && s[i] == ' ')
		i++;
	i += 3;
	while (i < n && s[i] == '`')
		i++;
	while (i < n && s[i] == ' ')
		i++;
	for (k = i; k < n; k++)
		if (!((s[k] >= 'a' && s[k] <= 'z') || (s[k] >= 'A' && s[k] <= 'Z') ||
		      (s[k] >= '0' && s[k] <= '9') || s[k] == '+' || s[k] == '-' || s[k] == '_' ||
		      s[k] == '#'))
			return 0;
	*lang = s + i;
	return k - i;
}

char *telegram_markdown_html(const char *s)
{
	size_t len = s ? strlen(s) : 0, i = 0;
	bool in = false, first = true, after_open = false;
	struct buf b;
	int rc = 0;

	buf_init(&b, TG_TEXT_MAX);
	while (i < len && !rc) {
		const char *nl = memchr(s + i, '\n', len - i);
		size_t ln = nl ? (size_t)(nl - (s + i)) : len - i;
		bool fence = tg_is_fence(s + i, ln);

		if (!first && !after_open && !(fence && in))
			rc = buf_puts(&b, "\n");
		first = false;
		after_open = false;
		if (rc)
			break;
		if (fence && !in) {
			const char *lang = NULL;
			size_t n = tg_fence_lang(s + i, ln, &lang);

			if (n) {
				rc = buf_puts(&b, "<pre><code class=\"language-");
				if (!rc)
					rc = tg_escape_into(&b, lang, n);
				if (!rc)
					rc = buf_puts(&b, "\">");
			} else {
				rc = buf_puts(&b, "<pre><code>");
			}
			in = true;
			after_open = true;
		} else if (fence) {
			rc = buf_puts(&b, "</code></pre>");
			in = false;
		} else if (in) {
			rc = tg_escape_into(&b, s + i, ln);
		} else {
			rc = tg_inline(&b, s + i, ln);
		}
		i += ln + (nl ? 1 : 0);
		if (nl && i == len && !rc)
			rc = buf_puts(&b, "\n");
	}
	if (!rc && in)
		rc = buf_puts(&b, "</code></pre>");
	if (rc) {
		buf_free(&b);
		return NULL;
	}
	return buf_steal(&b);
}
