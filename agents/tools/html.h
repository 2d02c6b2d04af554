/*
 * html.h - HTML reduced to the text a person would read (web_fetch).
 *
 * Not a browser: a single pass over the bytes that drops comments,
 * declarations, tags and the contents of elements that are not text
 * (script, style, noscript, template, svg, math, iframe, object, canvas,
 * select), turns block elements into line breaks, headings into "# "
 * lines, list items into "- " lines and links into "text (href)", keeps
 * <pre> as written, decodes character references, collapses white space
 * and keeps at most one blank line in a row. The title is returned
 * separately. Malformed input (unclosed tags, quotes, comments) ends the
 * element or the document; it never fails. Pure; any thread.
 */
#ifndef SB_AGENTS_TOOLS_HTML_H
#define SB_AGENTS_TOOLS_HTML_H

#include <stdbool.h>
#include <stddef.h>

struct html_text {
	char *text;  /* malloc'd, NUL-terminated; at most max bytes */
	char *title; /* malloc'd ("" when none); at most 300 bytes */
	bool cut;    /* the text reached max and the rest was dropped */
};

/* Reduces html[0..len) into *out (the caller frees text and title with
 * html_text_free). max bounds the text in bytes (> 0). SB_OK or
 * SB_ERR_NOMEM (out then holds nothing). */
int html_to_text(const char *html, size_t len, size_t max, struct html_text *out);

void html_text_free(struct html_text *t);

#endif
