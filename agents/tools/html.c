/*
 * html.c - see html.h.
 */
#include "agents/tools/html.h"

#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "gateway/core/buf.h"
#include "gateway/core/err.h"

#define HTML_TITLE_MAX 300
#define HTML_NAME_MAX 16
#define HTML_HREF_MAX 2048

struct html_state {
	struct buf out;
	struct buf title;
	bool in_title;
	int pre;        /* depth of <pre> */
	int pending_nl; /* line breaks asked for before the next text (0-2) */
	bool space;     /* a space is due before the next text */
	bool started;   /* some text was written */
	bool cut;
	char href[HTML_HREF_MAX + 1];
	size_t link_start; /* out.len when the link's text began */
	bool in_link;
	int err;
};

static const char *const html_skip[] = {"script", "style",  "noscript", "template", "svg", "math",
                                        "iframe", "object", "canvas",   "select",   NULL};
static const char *const html_blocks[] = {
    "address", "article", "aside", "blockquote", "body",       "dd",     "details", "dialog",
    "div",     "dl",      "dt",    "fieldset",   "figcaption", "figure", "footer",  "form",
    "header",  "hr",      "html",  "main",       "nav",        "ol",     "p",       "section",
    "summary", "table",   "tbody", "tfoot",      "thead",      "tr",     "ul",      NULL};

static bool html_in(const char *const *list, const char *name)
{
	for (size_t i = 0; list[i]; i++)
		if (strcmp(list[i], name) == 0)
			return true;
	return false;
}

/* Appends raw bytes, stopping (cut) at the bound. */
static void html_put(struct html_state *s, const char *p, size_t n)
{
	size_t room;

	if (s->cut || s->err)
		return;
	room = s->out.max > s->out.len ? s->out.max - s->out.len : 0;
	if (n > room) {
		n = room;
		/* not half a character */
		while (n > 0 && ((unsigned char)p[n] & 0xc0) == 0x80)
			n--;
		s->cut = true;
	}
	if (n && buf_append(&s->out, p, n) != SB_OK)
		s->err = SB_ERR_NOMEM;
}

static void html_break(struct html_state *s, int n)
{
	if (s->pending_nl < n)
		s->pending_nl = n;
	s->space = false;
}

/* Text that the document shows (decoded already). */
static void html_text(struct html_state *s, const char *p, size_t n)
{
	if (s->in_title) {
		for (size_t i = 0; i < n && s->title.len < HTML_TITLE_MAX; i++) {
			char ch = isspace((unsigned char)p[i]) ? ' ' : p[i];

			if (ch == ' ' &&
			    (s->title.len == 0 || s->title.data[s->title.len - 1] == ' '))
				continue;
			if (buf_append(&s->title, &ch, 1) != SB_OK)
				s->err = SB_ERR_NOMEM;
		}
		return;
	}
	if (s->pre) {
		if (s->started && s->pending_nl)
			html_put(s, "\n\n", (size_t)s->pending_nl);
		s->pending_nl = 0;
		s->space = false;
		html_put(s, p, n);
		s->started = true;
		return;
	}
	for (size_t i = 0; i < n;) {
		size_t j = i;

		if (isspace((unsigned char)p[i])) {
			s->space = true;
			i++;
			continue;
		}
		while (j < n && !isspace((unsigned char)p[j]))
			j++;
		if (s->started && s->pending_nl)
			html_put(s, "\n\n", (size_t)s->pending_nl);
		else if (s->started && s->space)
			html_put(s, " ", 1);
		s->pending_nl = 0;
		s->space = false;
		s->started = true;
		/* a word at once: a cut falls on a character boundary */
		html_put(s, p + i, j - i);
		i = j;
	}
}

static size_t html_utf8(uint32_t cp, char *o)
{
	if (cp == 0 || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
		cp = 0xfffd;
	if (cp < 0x80) {
		o[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		o[0] = (char)(0xc0 | (cp >> 6));
		o[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		o[0] = (char)(0xe0 | (cp >> 12));
		o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		o[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	o[0] = (char)(0xf0 | (cp >> 18));
	o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
	o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
	o[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

static const struct {
	const char *name;
	uint32_t cp;
} html_entities[] = {
    {"amp", '&'},      {"lt", '<'},        {"gt", '>'},       {"quot", '"'},     {"apos", '\''},
    {"nbsp", 0xa0},    {"copy", 0xa9},     {"reg", 0xae},     {"trade", 0x2122}, {"mdash", 0x2014},
    {"ndash", 0x2013}, {"hellip", 0x2026}, {"lsquo", 0x2018}, {"rsquo", 0x2019}, {"ldquo", 0x201c},
    {"rdquo", 0x201d}, {"laquo", 0xab},    {"raquo", 0xbb},   {"middot", 0xb7},  {"bull", 0x2022},
    {"euro", 0x20ac},  {"deg", 0xb0},      {"times", 0xd7},
};

/* Decodes the character reference at p[0] == '&' into o; returns the bytes
 * consumed (0: not a reference, the '&' is text). */
static size_t html_entity(const char *p, size_t n, char *o, size_t *olen)
{
	size_t i = 1;
	uint32_t cp = 0;

	if (n > 2 && p[1] == '#') {
		bool hex = n > 3 && (p[2] == 'x' || p[2] == 'X');
		size_t digits = 0;

		i = hex ? 3 : 2;
		for (; i < n && digits < 8; i++, digits++) {
			int d;

			if (isdigit((unsigned char)p[i]))
				d = p[i] - '0';
			else if (hex && isxdigit((unsigned char)p[i]))
				d = tolower((unsigned char)p[i]) - 'a' + 10;
			else
				break;
			cp = cp * (hex ? 16 : 10) + (uint32_t)d;
		}
		if (!digits)
			return 0;
		if (i < n && p[i] == ';')
			i++;
		*olen = html_utf8(cp, o);
		return i;
	}
	for (size_t k = 0; k < sizeof html_entities / sizeof html_entities[0]; k++) {
		size_t l = strlen(html_entities[k].name);

		if (l + 1 < n && memcmp(p + 1, html_entities[k].name, l) == 0 && p[l + 1] == ';') {
			*olen = html_utf8(html_entities[k].cp, o);
			return l + 2;
		}
	}
	return 0;
}

/* Text between tags, with character references decoded. */
static void html_chars(struct html_state *s, const char *p, size_t n)
{
	size_t i = 0, run = 0;
	char enc[8];
	size_t elen, used;

	while (i < n) {
		if (p[i] == '&' && (used = html_entity(p + i, n - i, enc, &elen)) > 0) {
			html_text(s, p + run, i - run);
			html_text(s, enc, elen);
			i += used;
			run = i;
			continue;
		}
		i++;
	}
	html_text(s, p + run, n - run);
}

/* Finds "</name" (any case) followed by a non-name byte, from p; returns
 * where it starts, or end. */
static const char *html_find_close(const char *p, const char *end, const char *name)
{
	size_t l = strlen(name);

	for (; p + 2 + l <= end; p++) {
		if (p[0] != '<' || p[1] != '/' || strncasecmp(p + 2, name, l) != 0)
			continue;
		if (p + 2 + l == end || !isalnum((unsigned char)p[2 + l]))
			return p;
	}
	return end;
}

/* Reads the value of attribute attr ("href") from a tag's attribute text. */
static void html_attr(const char *p, const char *end, const char *attr, char *out, size_t size)
{
	size_t al = strlen(attr);

	out[0] = '\0';
	while (p < end) {
		const char *name;
		size_t nl;

		while (p < end && (isspace((unsigned char)*p) || *p == '/'))
			p++;
		name = p;
		while (p < end && !isspace((unsigned char)*p) && *p != '=' && *p != '/')
			p++;
		nl = (size_t)(p - name);
		while (p < end && isspace((unsigned char)*p))
			p++;
		if (p < end && *p == '=') {
			const char *v, *ve;

			p++;
			while (p < end && isspace((unsigned char)*p))
				p++;
			if (p < end && (*p == '"' || *p == '\'')) {
				char q = *p++;

				v = p;
				while (p < end && *p != q)
					p++;
				ve = p;
				if (p < end)
					p++;
			} else {
				v = p;
				while (p < end && !isspace((unsigned char)*p))
					p++;
				ve = p;
			}
			if (nl == al && strncasecmp(name, attr, al) == 0) {
				size_t vl = (size_t)(ve - v);

				if (vl >= size)
					return; /* too long to be useful: none */
				memcpy(out, v, vl);
				out[vl] = '\0';
				return;
			}
		} else if (nl == 0 && p < end) {
			p++;
		}
	}
}

static bool html_href_shown(const char *href)
{
	if (!href[0] || href[0] == '#')
		return false;
	if (strncasecmp(href, "javascript:", 11) == 0 || strncasecmp(href, "data:", 5) == 0)
		return false;
	for (const char *p = href; *p; p++)
		if ((unsigned char)*p < 0x20)
			return false;
	return true;
}

static void html_tag(struct html_state *s, const char *name, bool closing, const char *attrs,
                     const char *attrs_end)
{
	if (strcmp(name, "title") == 0) {
		s->in_title = !closing;
		return;
	}
	if (strcmp(name, "br") == 0) {
		html_break(s, 1);
		return;
	}
	if (strcmp(name, "pre") == 0) {
		html_break(s, 2);
		if (closing)
			s->pre -= s->pre > 0;
		else
			s->pre++;
		return;
	}
	if (name[0] == 'h' && name[1] >= '1' && name[1] <= '6' && !name[2]) {
		html_break(s, 2);
		if (!closing && !s->in_title) {
			char hashes[8] = "#######";

			hashes[name[1] - '0'] = ' ';
			if (s->started)
				html_put(s, "\n\n", 2);
			html_put(s, hashes, (size_t)(name[1] - '0') + 1);
			s->pending_nl = 0;
			s->started = false; /* the heading's text follows directly */
		}
		return;
	}
	if (strcmp(name, "li") == 0) {
		html_break(s, 1);
		if (!closing) {
			if (s->started)
				html_put(s, "\n", 1);
			html_put(s, "- ", 2);
			s->pending_nl = 0;
			s->started = false;
		}
		return;
	}
	if (strcmp(name, "td") == 0 || strcmp(name, "th") == 0) {
		s->space = true;
		return;
	}
	if (strcmp(name, "a") == 0) {
		if (!closing) {
			html_attr(attrs, attrs_end, "href", s->href, sizeof s->href);
			s->in_link = html_href_shown(s->href);
			s->link_start = s->out.len;
		} else if (s->in_link) {
			s->in_link = false;
			if (s->out.len > s->link_start) {
				html_put(s, " (", 2);
				html_put(s, s->href, strlen(s->href));
				html_put(s, ")", 1);
			}
		}
		return;
	}
	if (html_in(html_blocks, name))
		html_break(s, strcmp(name, "p") == 0 || strcmp(name, "table") == 0 ? 2 : 1);
}

int html_to_text(const char *html, size_t len, size_t max, struct html_text *out)
{
	struct html_state s;
	const char *p = html, *end = html + len, *text = html;
	int rc = SB_ERR_NOMEM;

	memset(out, 0, sizeof *out);
	memset(&s, 0, sizeof s);
	buf_init(&s.out, max ? max : 1);
	buf_init(&s.title, HTML_TITLE_MAX + 1);
	while (p < end && !s.cut && !s.err) {
		char name[HTML_NAME_MAX + 1];
		const char *q, *attrs;
		size_t nl = 0;
		bool closing = false;

		if (*p != '<') {
			p++;
			continue;
		}
		q = p + 1;
		if (q < end && *q == '/') {
			closing = true;
			q++;
		}
		if (q >= end || (!isalpha((unsigned char)*q) && *q != '!' && *q != '?')) {
			p++; /* a lone '<' is text */
			continue;
		}
		html_chars(&s, text, (size_t)(p - text));
		if (*q == '!' || *q == '?') {
			if (end - q >= 3 && q[0] == '!' && q[1] == '-' && q[2] == '-') {
				const char *c = q + 3;

				while (c + 3 <= end && memcmp(c, "-->", 3) != 0)
					c++;
				p = c + 3 <= end ? c + 3 : end;
			} else {
				q = memchr(q, '>', (size_t)(end - q));
				p = q ? q + 1 : end;
			}
			text = p;
			continue;
		}
		while (q < end && (isalnum((unsigned char)*q) || *q == '-' || *q == ':')) {
			if (nl < HTML_NAME_MAX)
				name[nl++] = (char)tolower((unsigned char)*q);
			q++;
		}
		name[nl] = '\0';
		attrs = q;
		/* The tag ends at the first '>' outside quotes. */
		{
			char quote = 0;

			while (q < end && (quote || *q != '>')) {
				if (quote && *q == quote)
					quote = 0;
				else if (!quote && (*q == '"' || *q == '\'') && q > attrs &&
				         (q[-1] == '=' || isspace((unsigned char)q[-1])))
					quote = *q;
				q++;
			}
		}
		html_tag(&s, name, closing, attrs, q);
		p = q < end ? q + 1 : end;
		if (!closing && html_in(html_skip, name)) {
			const char *c = html_find_close(p, end, name);

			q = c < end ? memchr(c, '>', (size_t)(end - c)) : NULL;
			p = q ? q + 1 : end;
		}
		text = p;
	}
	if (!s.cut)
		html_chars(&s, text, (size_t)(p - text));
	if (s.err)
		goto out;
	out->cut = s.cut;
	out->text = s.out.data ? buf_steal(&s.out) : strdup("");
	out->title = s.title.data ? buf_steal(&s.title) : strdup("");
	if (!out->text || !out->title) {
		html_text_free(out);
		goto out;
	}
	/* The title's last collapsed space. */
	{
		size_t tl = strlen(out->title);

		while (tl && out->title[tl - 1] == ' ')
			out->title[--tl] = '\0';
	}
	rc = SB_OK;
out:
	buf_free(&s.out);
	buf_free(&s.title);
	return rc;
}

void html_text_free(struct html_text *t)
{
	if (!t)
		return;
	free(t->text);
	free(t->title);
	t->text = t->title = NULL;
}
