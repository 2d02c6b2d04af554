/*
 * schema.c - the JSON Schema subset tools declare their input with
 * (tool_schema_validate in executor.h).
 *
 * Keywords: type (a name or a list of names), properties, required,
 * additionalProperties (false, or a schema for the others), items, enum,
 * minimum, maximum, minLength, maxLength, minItems, maxItems. Others
 * (description, default, ...) are ignored. The first violation found is
 * reported, naming the field: `"offset": expected an integer`,
 * `missing required field "path"`, `unknown field "pth"`. Nested fields are
 * named with dots and brackets: "edits[2].old_string".
 */
#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agents/executor.h"
#include "gateway/core/buf.h"
#include "gateway/core/err.h"

#define SCHEMA_MAX_DEPTH 32
#define SCHEMA_PATH_MAX 512

struct schema_check {
	char *why;
	size_t size;
};

static int schema_fail(struct schema_check *sc, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int schema_fail(struct schema_check *sc, const char *fmt, ...)
{
	va_list ap;

	if (sc->why && sc->size) {
		va_start(ap, fmt);
		if (vsnprintf(sc->why, sc->size, fmt, ap) < 0)
			sc->why[0] = '\0';
		va_end(ap);
	}
	return SB_ERR_INVAL;
}

/* The field's name as messages show it: "offset", or input for the root. */
static const char *schema_label(const char *path, char *out, size_t size)
{
	if (!*path)
		return "input";
	if (snprintf(out, size, "\"%s\"", path) < 0)
		return "input";
	return out;
}

static bool schema_type_is(const char *type, const json_t *v)
{
	if (strcmp(type, "object") == 0)
		return json_is_object(v);
	if (strcmp(type, "string") == 0)
		return json_is_string(v);
	if (strcmp(type, "integer") == 0)
		return json_is_integer(v);
	if (strcmp(type, "number") == 0)
		return json_is_number(v);
	if (strcmp(type, "boolean") == 0)
		return json_is_boolean(v);
	if (strcmp(type, "array") == 0)
		return json_is_array(v);
	if (strcmp(type, "null") == 0)
		return json_is_null(v);
	return false;
}

static const char *schema_type_noun(const char *type)
{
	if (strcmp(type, "object") == 0)
		return "an object";
	if (strcmp(type, "string") == 0)
		return "a string";
	if (strcmp(type, "integer") == 0)
		return "an integer";
	if (strcmp(type, "number") == 0)
		return "a number";
	if (strcmp(type, "boolean") == 0)
		return "a boolean";
	if (strcmp(type, "array") == 0)
		return "an array";
	if (strcmp(type, "null") == 0)
		return "null";
	return type;
}

static int schema_check_type(struct schema_check *sc, const json_t *type, const json_t *v,
                             const char *label)
{
	struct buf b;
	size_t i;
	const json_t *t;
	int rc;

	if (json_is_string(type)) {
		if (schema_type_is(json_string_value(type), v))
			return SB_OK;
		return schema_fail(sc, "%s: expected %s", label,
		                   schema_type_noun(json_string_value(type)));
	}
	if (!json_is_array(type))
		return SB_OK;
	json_array_foreach(type, i, t)
	{
		if (json_is_string(t) && schema_type_is(json_string_value(t), v))
			return SB_OK;
	}
	buf_init(&b, 256);
	json_array_foreach(type, i, t)
	{
		if (json_is_string(t))
			(void)buf_printf(&b, "%s%s", i ? " or " : "",
			                 schema_type_noun(json_string_value(t)));
	}
	rc = schema_fail(sc, "%s: expected %s", label, b.data ? b.data : "another type");
	buf_free(&b);
	return rc;
}

static int schema_check_enum(struct schema_check *sc, const json_t *en, const json_t *v,
                             const char *label)
{
	struct buf b;
	size_t i;
	const json_t *e;
	char *s;
	int rc;

	if (!json_is_array(en))
		return SB_OK;
	json_array_foreach(en, i, e)
	{
		if (json_equal((json_t *)e, (json_t *)v))
			return SB_OK;
	}
	buf_init(&b, 512);
	json_array_foreach(en, i, e)
	{
		s = json_dumps(e, JSON_ENCODE_ANY | JSON_COMPACT);
		if (s)
			(void)buf_printf(&b, "%s%s", i ? ", " : "", s);
		free(s);
	}
	rc = schema_fail(sc, "%s: must be one of %s", label, b.data ? b.data : "the listed values");
	buf_free(&b);
	return rc;
}

static int schema_check_range(struct schema_check *sc, const json_t *schema, const json_t *v,
                              const char *label)
{
	const json_t *min = json_object_get(schema, "minimum");
	const json_t *max = json_object_get(schema, "maximum");
	double x = json_number_value(v);

	if (json_is_number(min) && x < json_number_value(min)) {
		if (json_is_integer(min))
			return schema_fail(sc, "%s: must be at least %lld", label,
			                   (long long)json_integer_value(min));
		return schema_fail(sc, "%s: must be at least %g", label, json_number_value(min));
	}
	if (json_is_number(max) && x > json_number_value(max)) {
		if (json_is_integer(max))
			return schema_fail(sc, "%s: must be at most %lld", label,
			                   (long long)json_integer_value(max));
		return schema_fail(sc, "%s: must be at most %g", label, json_number_value(max));
	}
	return SB_OK;
}

/* Characters (code points) of a valid UTF-8 string. */
static size_t schema_utf8_len(const char *s, size_t bytes)
{
	size_t i, n = 0;

	for (i = 0; i < bytes; i++)
		if (((unsigned char)s[i] & 0xC0) != 0x80)
			n++;
	return n;
}

static int schema_check_length(struct schema_check *sc, const json_t *schema, const json_t *v,
                               const char *label)
{
	const json_t *min = json_object_get(schema, "minLength");
	const json_t *max = json_object_get(schema, "maxLength");
	size_t n = schema_utf8_len(json_string_value(v), json_string_length(v));

	if (json_is_integer(min) && (json_int_t)n < json_integer_value(min)) {
		if (json_integer_value(min) == 1)
			return schema_fail(sc, "%s: must not be empty", label);
		return schema_fail(sc, "%s: must be at least %lld characters long", label,
		                   (long long)json_integer_value(min));
	}
	if (json_is_integer(max) && (json_int_t)n > json_integer_value(max))
		return schema_fail(sc, "%s: must be at most %lld characters long", label,
		                   (long long)json_integer_value(max));
	return SB_OK;
}

static int schema_check(struct schema_check *sc, const json_t *schema, const json_t *v,
                        const char *path, int depth);

static int schema_check_object(struct schema_check *sc, const json_t *schema, const json_t *v,
                               const char *path, int depth)
{
	const json_t *props = json_object_get(schema, "properties");
	const json_t *req = json_object_get(schema, "required");
	const json_t *extra = json_object_get(schema, "additionalProperties");
	const json_t *r, *sub, *pv;
	const char *key;
	char child[SCHEMA_PATH_MAX];
	size_t i;
	int rc;

	/* Unknown fields first: "pth" for "path" is a typo, and saying so
	 * helps more than "missing path". */
	json_object_foreach((json_t *)v, key, pv)
	{
		if (json_object_get(props, key))
			continue;
		if (json_is_false(extra)) {
			if (*path)
				return schema_fail(sc, "unknown field \"%s.%s\"", path, key);
			return schema_fail(sc, "unknown field \"%s\"", key);
		}
	}
	if (json_is_array(req)) {
		json_array_foreach(req, i, r)
		{
			if (!json_is_string(r) || json_object_get(v, json_string_value(r)))
				continue;
			if (*path)
				return schema_fail(sc, "missing required field \"%s.%s\"", path,
				                   json_string_value(r));
			return schema_fail(sc, "missing required field \"%s\"",
			                   json_string_value(r));
		}
	}
	json_object_foreach((json_t *)v, key, pv)
	{
		sub = json_object_get(props, key);
		if (!sub && json_is_object(extra))
			sub = extra;
		if (!sub)
			continue;
		if (snprintf(child, sizeof child, "%s%s%s", path, *path ? "." : "", key) >=
		    (int)sizeof child)
			return schema_fail(sc, "a field name is too long");
		if ((rc = schema_check(sc, sub, pv, child, depth + 1)) != SB_OK)
			return rc;
	}
	return SB_OK;
}

static int schema_check_array(struct schema_check *sc, const json_t *schema, const json_t *v,
                              const char *path, const char *label, int depth)
{
	const json_t *items = json_object_get(schema, "items");
	const json_t *min = json_object_get(schema, "minItems");
	const json_t *max = json_object_get(schema, "maxItems");
	const json_t *e;
	char child[SCHEMA_PATH_MAX];
	size_t i;
	int rc;

	if (json_is_integer(min) && (json_int_t)json_array_size(v) < json_integer_value(min))
		return schema_fail(sc, "%s: must have at least %lld items", label,
		                   (long long)json_integer_value(min));
	if (json_is_integer(max) && (json_int_t)json_array_size(v) > json_integer_value(max))
		return schema_fail(sc, "%s: must have at most %lld items", label,
		                   (long long)json_integer_value(max));
	if (!json_is_object(items))
		return SB_OK;
	json_array_foreach(v, i, e)
	{
		if (snprintf(child, sizeof child, "%s[%zu]", *path ? path : "input", i) >=
		    (int)sizeof child)
			return schema_fail(sc, "a field name is too long");
		if ((rc = schema_check(sc, items, e, child, depth + 1)) != SB_OK)
			return rc;
	}
	return SB_OK;
}

static int schema_check(struct schema_check *sc, const json_t *schema, const json_t *v,
                        const char *path, int depth)
{
	char lb[SCHEMA_PATH_MAX + 2];
	const char *label = schema_label(path, lb, sizeof lb);
	int rc;

	if (depth > SCHEMA_MAX_DEPTH)
		return schema_fail(sc, "%s: nested too deeply", label);
	if (!json_is_object(schema))
		return SB_OK;
	if ((rc = schema_check_type(sc, json_object_get(schema, "type"), v, label)) != SB_OK)
		return rc;
	if ((rc = schema_check_enum(sc, json_object_get(schema, "enum"), v, label)) != SB_OK)
		return rc;
	if (json_is_number(v))
		return schema_check_range(sc, schema, v, label);
	if (json_is_string(v))
		return schema_check_length(sc, schema, v, label);
	if (json_is_object(v))
		return schema_check_object(sc, schema, v, path, depth);
	if (json_is_array(v))
		return schema_check_array(sc, schema, v, path, label, depth);
	return SB_OK;
}

int tool_schema_validate(const json_t *schema, const json_t *input, char *why, size_t size)
{
	struct schema_check sc = {.why = why, .size = size};

	if (why && size)
		why[0] = '\0';
	if (!input)
		return schema_fail(&sc, "input: expected an object");
	return schema_check(&sc, schema, input, "", 0);
}
