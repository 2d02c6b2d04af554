/*
 * yamljson.c - a YAML document as jansson values, bounded (yamljson.h).
 */
#include "gateway/core/yamljson.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "gateway/core/err.h"

static bool yj_is(const char *s, const char *a, const char *b, const char *c)
{
	return strcmp(s, a) == 0 || strcmp(s, b) == 0 || strcmp(s, c) == 0;
}

static json_t *yj_scalar(const struct yamljson_opt *o, const yaml_node_t *node)
{
	const char *s = (const char *)node->data.scalar.value;
	size_t len = node->data.scalar.length;
	char *end;

	if (node->data.scalar.style != YAML_PLAIN_SCALAR_STYLE || strlen(s) != len)
		return json_stringn(s, len);
	if (o->core_schema) {
		if (len == 0 || strcmp(s, "~") == 0 || yj_is(s, "null", "Null", "NULL"))
			return json_null();
		if (yj_is(s, "true", "True", "TRUE"))
			return json_true();
		if (yj_is(s, "false", "False", "FALSE"))
			return json_false();
	} else {
		if (strcmp(s, "true") == 0)
			return json_true();
		if (strcmp(s, "false") == 0)
			return json_false();
	}
	if (len && (s[0] == '-' || (s[0] >= '0' && s[0] <= '9') || (o->core_schema && s[0] == '+'))) {
		long long v = strtoll(s, &end, 10);

		if (*end == '\0' && (o->core_schema || len < 19))
			return json_integer(v);
		if (o->core_schema) {
			double d = strtod(s, &end);

			if (*end == '\0')
				return json_real(d);
		}
	}
	return json_stringn(s, len);
}

static json_t *yj_node(const struct yamljson_opt *o, yaml_document_t *doc, yaml_node_t *node,
                       int depth, size_t *budget, char *why, size_t why_size)
{
	json_t *v = NULL, *item;

	if (!node || depth > o->depth_max || *budget == 0) {
		snprintf(why, why_size, "%s is too deep or too large", o->what);
		return NULL;
	}
	(*budget)--;
	switch (node->type) {
	case YAML_SCALAR_NODE:
		v = yj_scalar(o, node);
		if (!v) /* json_stringn refuses what is not UTF-8 */
			snprintf(why, why_size, "%s %zu: not UTF-8 text", o->line_label,
			         node->start_mark.line + 1);
		break;
	case YAML_SEQUENCE_NODE:
		v = json_array();
		for (yaml_node_item_t *it = node->data.sequence.items.start;
		     v && it < node->data.sequence.items.top; it++) {
			item = yj_node(o, doc, yaml_document_get_node(doc, *it), depth + 1, budget,
			               why, why_size);
			if (!item || json_array_append_new(v, item) != 0) {
				json_decref(v);
				return NULL;
			}
		}
		break;
	case YAML_MAPPING_NODE:
		v = json_object();
		for (yaml_node_pair_t *p = node->data.mapping.pairs.start;
		     v && p < node->data.mapping.pairs.top; p++) {
			yaml_node_t *k = yaml_document_get_node(doc, p->key);

			if (!k || k->type != YAML_SCALAR_NODE ||
			    strlen((const char *)k->data.scalar.value) != k->data.scalar.length) {
				snprintf(why, why_size, "%s %zu: keys must be plain text", o->line_label,
				         k ? k->start_mark.line + 1 : 0);
				json_decref(v);
				return NULL;
			}
			item = yj_node(o, doc, yaml_document_get_node(doc, p->value), depth + 1,
			               budget, why, why_size);
			if (!item ||
			    json_object_set_new(v, (const char *)k->data.scalar.value, item) != 0) {
				json_decref(v);
				return NULL;
			}
		}
		break;
	default:
		break;
	}
	if (!v && !why[0])
		snprintf(why, why_size, "out of memory");
	return v;
}

int yamljson_load(const char *text, size_t len, const struct yamljson_opt *o, json_t **out,
                  char *why, size_t why_size)
{
	yaml_parser_t parser;
	yaml_document_t doc;
	yaml_node_t *root;
	size_t budget = o->nodes_max;
	int rc = SB_ERR_INVAL;

	*out = NULL;
	if (why_size)
		why[0] = '\0';
	if (!yaml_parser_initialize(&parser)) {
		snprintf(why, why_size, "out of memory");
		return SB_ERR_NOMEM;
	}
	yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
	if (!yaml_parser_load(&parser, &doc)) {
		snprintf(why, why_size, "%s %zu: %s", o->line_label, parser.problem_mark.line + 1,
		         parser.problem ? parser.problem : "YAML syntax error");
		yaml_parser_delete(&parser);
		return SB_ERR_INVAL;
	}
	root = yaml_document_get_root_node(&doc);
	*out = root ? yj_node(o, &doc, root, 0, &budget, why, why_size) : json_null();
	if (*out)
		rc = SB_OK;
	else if (strcmp(why, "out of memory") == 0)
		rc = SB_ERR_NOMEM;
	yaml_document_delete(&doc);
	yaml_parser_delete(&parser);
	return rc;
}
