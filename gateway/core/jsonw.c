/*
 * jsonw.c - see jsonw.h.
 */
#include "gateway/core/jsonw.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/core/err.h"

/* Room for n more bytes and the terminator; inline when there is some
 * already (buf_reserve never lets cap pass max + 1, so that is within the
 * buffer's maximum too). */
static inline int jw_room(struct buf *b, size_t n)
{
	if (b->data && n < b->cap - b->len)
		return SB_OK;
	return buf_reserve(b, n);
}

/* What a byte is in a string: copied as it is, escaped with a letter,
 * escaped as \u00XX, or the first byte of a multi-byte UTF-8 sequence of
 * that many bytes (2..4); 0 marks a byte that never starts one. */
enum {
	JW_PLAIN = 1,
	JW_LETTER,
	JW_HEX,
	JW_LEAD2,
	JW_LEAD3,
	JW_LEAD4,
	JW_BAD,
};

static unsigned char jw_class[256];
static char jw_letter[256];

static pthread_once_t jw_once = PTHREAD_ONCE_INIT;

static void jw_tables_fill(void)
{
	for (unsigned c = 0; c < 256; c++) {
		unsigned char k;

		if (c < 0x20)
			k = JW_HEX;
		else if (c < 0x80)
			k = JW_PLAIN;
		else if (c >= 0xc2 && c <= 0xdf)
			k = JW_LEAD2;
		else if (c >= 0xe0 && c <= 0xef)
			k = JW_LEAD3;
		else if (c >= 0xf0 && c <= 0xf4)
			k = JW_LEAD4;
		else
			k = JW_BAD; /* continuation bytes, overlong leads, past U+10FFFF */
		jw_class[c] = k;
	}
	jw_class['"'] = jw_class['\\'] = JW_LETTER;
	jw_letter['"'] = '"';
	jw_letter['\\'] = '\\';
	jw_letter['\b'] = 'b';
	jw_letter['\f'] = 'f';
	jw_letter['\n'] = 'n';
	jw_letter['\r'] = 'r';
	jw_letter['\t'] = 't';
	for (unsigned c = 0; c < 0x20; c++)
		if (jw_letter[c])
			jw_class[c] = JW_LETTER;
}

/* The length of the valid UTF-8 sequence of n bytes (2..4) at p, or 0:
 * continuation bytes, no overlong form, no surrogate, at most U+10FFFF
 * (the rules jansson checks). */
static size_t jw_utf8_seq(const unsigned char *p, size_t left, size_t n)
{
	if (left < n)
		return 0;
	for (size_t i = 1; i < n; i++)
		if ((p[i] & 0xc0) != 0x80)
			return 0;
	if (n == 3) {
		if (p[0] == 0xe0 && p[1] < 0xa0)
			return 0; /* overlong */
		if (p[0] == 0xed && p[1] >= 0xa0)
			return 0; /* U+D800..U+DFFF */
	} else if (n == 4) {
		if (p[0] == 0xf0 && p[1] < 0x90)
			return 0; /* overlong */
		if (p[0] == 0xf4 && p[1] >= 0x90)
			return 0; /* past U+10FFFF */
	}
	return n;
}

static int jw_string(struct buf *b, const char *str, size_t len)
{
	static const char hex[] = "0123456789ABCDEF";
	const unsigned char *s = (const unsigned char *)str, *end = s + len;
	int rc;

	/* Room for the worst case of a short string (every byte a \u00XX),
	 * for the text as it is and two quotes otherwise. */
	rc = len <= 1024 ? jw_room(b, 6 * len + 2) : SB_ERR_TOOBIG;
	if (rc != SB_OK && (rc = jw_room(b, len + 2)) != SB_OK)
		return rc;
	b->data[b->len++] = '"';
	while (s < end) {
		const unsigned char *run = s;
		size_t n;

		while (s < end && jw_class[*s] == JW_PLAIN)
			s++;
		if (s > run) {
			n = (size_t)(s - run);
			if ((rc = jw_room(b, n + 1)) != SB_OK)
				return rc;
			memcpy(b->data + b->len, run, n);
			b->len += n;
		}
		if (s == end)
			break;
		switch (jw_class[*s]) {
		case JW_LETTER:
			if ((rc = jw_room(b, 2 + 1)) != SB_OK)
				return rc;
			b->data[b->len++] = '\\';
			b->data[b->len++] = jw_letter[*s];
			s++;
			break;
		case JW_HEX:
			if ((rc = jw_room(b, 6 + 1)) != SB_OK)
				return rc;
			memcpy(b->data + b->len, "\\u00", 4);
			b->data[b->len + 4] = hex[*s >> 4];
			b->data[b->len + 5] = hex[*s & 15];
			b->len += 6;
			s++;
			break;
		case JW_LEAD2:
		case JW_LEAD3:
		case JW_LEAD4:
			n = jw_utf8_seq(s, (size_t)(end - s),
			                (size_t)(jw_class[*s] - JW_LEAD2 + 2));
			if (!n)
				return SB_ERR_INVAL;
			if ((rc = jw_room(b, n + 1)) != SB_OK)
				return rc;
			memcpy(b->data + b->len, s, n);
			b->len += n;
			s += n;
			break;
		default:
			return SB_ERR_INVAL;
		}
	}
	if ((rc = jw_room(b, 1)) != SB_OK)
		return rc;
	b->data[b->len++] = '"';
	return SB_OK;
}

static int jw_integer(struct buf *b, json_int_t v)
{
	char tmp[24], *p = tmp + sizeof tmp;
	/* The magnitude as unsigned, so that the most negative value works. */
	unsigned long long u = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
	size_t n;
	int rc;

	do {
		*--p = (char)('0' + u % 10);
		u /= 10;
	} while (u);
	if (v < 0)
		*--p = '-';
	n = (size_t)(tmp + sizeof tmp - p);
	if ((rc = jw_room(b, n)) != SB_OK)
		return rc;
	memcpy(b->data + b->len, p, n);
	b->len += n;
	return SB_OK;
}

/* Reals are rare on the message path; their format (precision, the ".0"
 * of a whole number, the exponent's form) is jansson's own. */
static int jw_real(struct buf *b, const json_t *v)
{
	char *t = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
	int rc;

	if (!t)
		return SB_ERR_NOMEM;
	rc = buf_append(b, t, strlen(t));
	free(t);
	return rc;
}

static int jw_put(struct buf *b, const char *s, size_t n)
{
	int rc = jw_room(b, n);

	if (rc)
		return rc;
	memcpy(b->data + b->len, s, n);
	b->len += n;
	return SB_OK;
}

struct jw_key {
	const char *key;
	size_t len;
	const json_t *value;
};

static int jw_key_cmp(const void *a, const void *b)
{
	const struct jw_key *x = a, *y = b;
	int c = memcmp(x->key, y->key, x->len < y->len ? x->len : y->len);

	if (c)
		return c;
	return x->len < y->len ? -1 : x->len > y->len;
}

static int jw_value(struct buf *b, const json_t *v, unsigned flags, int depth);

static int jw_member(struct buf *b, const char *key, size_t len, const json_t *value,
                     unsigned flags, int depth)
{
	int rc = jw_string(b, key, len);

	if (rc == SB_OK)
		rc = jw_put(b, ":", 1);
	if (rc == SB_OK)
		rc = jw_value(b, value, flags, depth + 1);
	return rc;
}

/* An object's members with its keys sorted. */
static int jw_sorted(struct buf *b, const json_t *v, unsigned flags, int depth)
{
	struct jw_key few[16], *keys = few;
	size_t n = json_object_size(v), i = 0;
	int rc = SB_OK;

	if (n > sizeof few / sizeof *few && !(keys = malloc(n * sizeof *keys)))
		return SB_ERR_NOMEM;
	for (void *it = json_object_iter((json_t *)v); it && i < n;
	     it = json_object_iter_next((json_t *)v, it), i++) {
		keys[i].key = json_object_iter_key(it);
		keys[i].len = json_object_iter_key_len(it);
		keys[i].value = json_object_iter_value(it);
	}
	qsort(keys, i, sizeof *keys, jw_key_cmp);
	for (size_t k = 0; k < i && rc == SB_OK; k++) {
		if (k)
			rc = jw_put(b, ",", 1);
		if (rc == SB_OK)
			rc = jw_member(b, keys[k].key, keys[k].len, keys[k].value, flags, depth);
	}
	if (keys != few)
		free(keys);
	return rc;
}

static int jw_value(struct buf *b, const json_t *v, unsigned flags, int depth)
{
	int rc;

	if (!v)
		return SB_ERR_INVAL;
	switch (json_typeof(v)) {
	case JSON_NULL:
		return jw_put(b, "null", 4);
	case JSON_TRUE:
		return jw_put(b, "true", 4);
	case JSON_FALSE:
		return jw_put(b, "false", 5);
	case JSON_INTEGER:
		return jw_integer(b, json_integer_value(v));
	case JSON_REAL:
		return jw_real(b, v);
	case JSON_STRING:
		return jw_string(b, json_string_value(v), json_string_length(v));
	case JSON_ARRAY: {
		size_t n = json_array_size(v);

		if (depth >= JSONW_DEPTH_MAX)
			return SB_ERR_INVAL;
		if ((rc = jw_put(b, "[", 1)) != SB_OK)
			return rc;
		for (size_t i = 0; i < n; i++) {
			if (i && (rc = jw_put(b, ",", 1)) != SB_OK)
				return rc;
			if ((rc = jw_value(b, json_array_get(v, i), flags, depth + 1)) != SB_OK)
				return rc;
		}
		return jw_put(b, "]", 1);
	}
	case JSON_OBJECT: {
		bool first = true;

		if (depth >= JSONW_DEPTH_MAX)
			return SB_ERR_INVAL;
		if ((rc = jw_put(b, "{", 1)) != SB_OK)
			return rc;
		if (flags & JSONW_SORT_KEYS) {
			if ((rc = jw_sorted(b, v, flags, depth)) != SB_OK)
				return rc;
			return jw_put(b, "}", 1);
		}
		for (void *it = json_object_iter((json_t *)v); it;
		     it = json_object_iter_next((json_t *)v, it)) {
			if (!first && (rc = jw_put(b, ",", 1)) != SB_OK)
				return rc;
			first = false;
			rc = jw_member(b, json_object_iter_key(it), json_object_iter_key_len(it),
			               json_object_iter_value(it), flags, depth);
			if (rc != SB_OK)
				return rc;
		}
		return jw_put(b, "}", 1);
	}
	}
	return SB_ERR_INVAL;
}

int jsonw_append(struct buf *b, const json_t *v, unsigned flags)
{
	size_t start = b->len;
	int rc;

	pthread_once(&jw_once, jw_tables_fill);
	rc = jw_value(b, v, flags, 0);
	if (rc != SB_OK)
		b->len = start;
	if (b->data)
		b->data[b->len] = '\0';
	return rc;
}

int jsonw_append_string(struct buf *b, const char *s, size_t len)
{
	size_t start = b->len;
	int rc;

	pthread_once(&jw_once, jw_tables_fill);
	rc = jw_string(b, s, len);
	if (rc != SB_OK)
		b->len = start;
	if (b->data)
		b->data[b->len] = '\0';
	return rc;
}

int jsonw_append_member(struct buf *b, const char *key, size_t key_len, const json_t *v,
                        unsigned flags)
{
	size_t start = b->len;
	int rc;

	pthread_once(&jw_once, jw_tables_fill);
	rc = jw_member(b, key, key_len, v, flags, 0);
	if (rc != SB_OK)
		b->len = start;
	if (b->data)
		b->data[b->len] = '\0';
	return rc;
}

char *jsonw_dumps(const json_t *v, unsigned flags, size_t *len_out)
{
	struct buf b;
	size_t len;

	buf_init(&b, SIZE_MAX - 1);
	if (jsonw_append(&b, v, flags) != SB_OK) {
		buf_free(&b);
		return NULL;
	}
	len = b.len;
	if (len_out)
		*len_out = len;
	return buf_steal(&b);
}
