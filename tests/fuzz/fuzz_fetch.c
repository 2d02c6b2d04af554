/*
 * fuzz_fetch.c - libFuzzer harness for what web_fetch reads from outside:
 * the HTML reducer (agents/tools/html.h) and the URL parser with redirect
 * joins (gateway/core/url.h).
 *
 * Properties checked on every input:
 *  - html_to_text never fails but for memory, keeps its bound (the text at
 *    most max bytes, the title at most 300), leaves no run of three line
 *    breaks outside <pre>, and gives the same result twice;
 *  - a URL that parses is at most URL_MAX bytes, has a host, a port in
 *    1..65535, only visible ASCII, no '@' before its path and no fragment,
 *    and parses again to itself (the normal form is a fixed point); a
 *    join of the input as a redirect against it gives either an error or a
 *    URL with the same properties.
 * The bound (64, 1,024 or 64 KiB) comes from the first byte.
 * Built by `make fuzz` (clang, -fsanitize=fuzzer,address,undefined).
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "agents/tools/html.h"
#include "gateway/core/err.h"
#include "gateway/core/url.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_url(const struct url *u)
{
	const char *path = u->href + u->path_off;

	if (strlen(u->href) > URL_MAX || !u->host[0] || u->port < 1 || u->port > 65535)
		abort();
	for (const char *p = u->href; *p; p++)
		if ((unsigned char)*p <= 0x20 || (unsigned char)*p >= 0x7f || *p == '#')
			abort();
	if (memchr(u->href, '@', u->path_off) || path[0] != '/')
		abort();
}

static void fuzz_url(const char *text)
{
	struct url u, again, joined;
	char why[256];

	if (url_parse(text, &u, why, sizeof why) != SB_OK) {
		if (!why[0])
			abort(); /* a refusal always says why */
		return;
	}
	check_url(&u);
	if (url_parse(u.href, &again, why, sizeof why) != SB_OK || strcmp(again.href, u.href) != 0)
		abort();
	if (url_join(&u, text, &joined, why, sizeof why) == SB_OK)
		check_url(&joined);
	if (url_join(&u, "../x?y", &joined, why, sizeof why) == SB_OK)
		check_url(&joined);
}

static bool has_pre(const uint8_t *d, size_t n)
{
	for (size_t i = 0; i + 4 <= n; i++)
		if (d[i] == '<' && strncasecmp((const char *)d + i + 1, "pre", 3) == 0)
			return true;
	return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const size_t bounds[] = {64, 1024, 65536};
	struct html_text a, b;
	size_t max;
	char *text;

	if (size == 0 || size > (1u << 20))
		return 0;
	max = bounds[data[0] % 3];
	text = malloc(size + 1);
	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	if (html_to_text((const char *)data, size, max, &a) != SB_OK) {
		free(text);
		return 0;
	}
	/* <pre> keeps its line breaks as written */
	if (strlen(a.text) > max || strlen(a.title) > 300 ||
	    (strstr(a.text, "\n\n\n") && !has_pre(data, size)))
		abort();
	if (html_to_text((const char *)data, size, max, &b) != SB_OK) {
		html_text_free(&a);
		free(text);
		return 0;
	}
	if (strcmp(a.text, b.text) != 0 || strcmp(a.title, b.title) != 0 || a.cut != b.cut)
		abort();
	html_text_free(&a);
	html_text_free(&b);

	fuzz_url(text);
	free(text);
	return 0;
}
