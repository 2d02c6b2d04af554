/*
 * strmap.c - see strmap.h.
 */
#include "gateway/core/strmap.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/core/err.h"

struct strmap_entry {
	char *key;
	void *value;
	uint64_t hash;
	struct strmap_entry *next;
};

struct strmap {
	struct strmap_entry **slots;
	size_t n_slots; /* a power of two */
	size_t n;
};

/* FNV-1a, 64-bit. */
static uint64_t strmap_hash(const char *s)
{
	uint64_t h = 1469598103934665603ull;

	for (; *s; s++) {
		h ^= (unsigned char)*s;
		h *= 1099511628211ull;
	}
	return h;
}

int strmap_new(struct strmap **out)
{
	struct strmap *m = calloc(1, sizeof *m);

	if (!m)
		return SB_ERR_NOMEM;
	m->n_slots = 16;
	m->slots = calloc(m->n_slots, sizeof *m->slots);
	if (!m->slots) {
		free(m);
		return SB_ERR_NOMEM;
	}
	*out = m;
	return SB_OK;
}

void strmap_free(struct strmap *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < m->n_slots; i++)
		for (struct strmap_entry *e = m->slots[i], *next; e; e = next) {
			next = e->next;
			free(e->key);
			free(e);
		}
	free(m->slots);
	free(m);
}

static int strmap_grow(struct strmap *m)
{
	size_t n_slots = m->n_slots * 2;
	struct strmap_entry **slots = calloc(n_slots, sizeof *slots);

	if (!slots)
		return SB_ERR_NOMEM;
	for (size_t i = 0; i < m->n_slots; i++)
		for (struct strmap_entry *e = m->slots[i], *next; e; e = next) {
			next = e->next;
			e->next = slots[e->hash & (n_slots - 1)];
			slots[e->hash & (n_slots - 1)] = e;
		}
	free(m->slots);
	m->slots = slots;
	m->n_slots = n_slots;
	return SB_OK;
}

static struct strmap_entry **strmap_find(const struct strmap *m, const char *key, uint64_t h)
{
	struct strmap_entry **pp = &m->slots[h & (m->n_slots - 1)];

	for (; *pp; pp = &(*pp)->next)
		if ((*pp)->hash == h && strcmp((*pp)->key, key) == 0)
			break;
	return pp;
}

int strmap_put(struct strmap *m, const char *key, void *value)
{
	uint64_t h = strmap_hash(key);
	struct strmap_entry **pp = strmap_find(m, key, h), *e;

	if (*pp) {
		(*pp)->value = value;
		return SB_OK;
	}
	if (m->n >= m->n_slots && strmap_grow(m) == SB_OK)
		pp = strmap_find(m, key, h);
	e = calloc(1, sizeof *e);
	if (!e || !(e->key = strdup(key))) {
		free(e);
		return SB_ERR_NOMEM;
	}
	e->hash = h;
	e->value = value;
	*pp = e;
	m->n++;
	return SB_OK;
}

void *strmap_get(const struct strmap *m, const char *key)
{
	struct strmap_entry **pp = strmap_find(m, key, strmap_hash(key));

	return *pp ? (*pp)->value : NULL;
}

void *strmap_del(struct strmap *m, const char *key)
{
	struct strmap_entry **pp = strmap_find(m, key, strmap_hash(key)), *e = *pp;
	void *v;

	if (!e)
		return NULL;
	*pp = e->next;
	v = e->value;
	free(e->key);
	free(e);
	m->n--;
	return v;
}

size_t strmap_size(const struct strmap *m)
{
	return m->n;
}

void strmap_each(const struct strmap *m, void (*fn)(void *ud, const char *key, void *value),
                 void *ud)
{
	for (size_t i = 0; i < m->n_slots; i++)
		for (struct strmap_entry *e = m->slots[i]; e; e = e->next)
			fn(ud, e->key, e->value);
}
