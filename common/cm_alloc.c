#include "cm_alloc.h"

#include <malloc.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Atomic int64_t cm_mem_bytes[CM_MEM_COUNT];

static void *
cm_check(void *p, size_t n)
{
	if (p == NULL && n != 0) {
		fprintf(stderr, "shoal: out of memory allocating %zu bytes\n", n);
		abort();
	}
	return p;
}

void *
cm_malloc(cm_mem_tag tag, size_t n)
{
	void *p = cm_check(malloc(n ? n : 1), n);
	atomic_fetch_add(&cm_mem_bytes[tag], (int64_t)malloc_usable_size(p));
	return p;
}

void *
cm_calloc(cm_mem_tag tag, size_t count, size_t n)
{
	void *p = cm_check(calloc(count ? count : 1, n ? n : 1), count * n);
	atomic_fetch_add(&cm_mem_bytes[tag], (int64_t)malloc_usable_size(p));
	return p;
}

void *
cm_realloc(cm_mem_tag tag, void *p, size_t n)
{
	int64_t before = p ? (int64_t)malloc_usable_size(p) : 0;
	void *q = cm_check(realloc(p, n ? n : 1), n);
	atomic_fetch_add(&cm_mem_bytes[tag], (int64_t)malloc_usable_size(q) - before);
	return q;
}

void
cm_free(cm_mem_tag tag, void *p)
{
	if (p == NULL)
		return;
	atomic_fetch_sub(&cm_mem_bytes[tag], (int64_t)malloc_usable_size(p));
	free(p);
}

char *
cm_strndup(cm_mem_tag tag, const char *s, size_t n)
{
	char *d = cm_malloc(tag, n + 1);
	memcpy(d, s, n);
	d[n] = '\0';
	return d;
}

char *
cm_strdup(cm_mem_tag tag, const char *s)
{
	return cm_strndup(tag, s, strlen(s));
}

int64_t
cm_mem_used(cm_mem_tag tag)
{
	return atomic_load(&cm_mem_bytes[tag]);
}

const char *
cm_mem_tag_name(cm_mem_tag tag)
{
	static const char *names[] = {"common", "storage", "search", "replication", "coord", "node", "coordinator"};
	return (int)tag >= 0 && tag < CM_MEM_COUNT ? names[tag] : "?";
}
