/* The one accounted allocator. Every module allocates through these with
 * its tag, so memory per module shows in /_nodes/stats and sanitizers see
 * one choke point. Allocation failure aborts (there is no sane recovery
 * from a failed small malloc); large, input-driven sizes must be checked
 * against limits *before* calling. */
#ifndef CM_ALLOC_H
#define CM_ALLOC_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
	CM_MEM_COMMON,
	CM_MEM_STORAGE,
	CM_MEM_SEARCH,
	CM_MEM_REPLICATION,
	CM_MEM_COORD,
	CM_MEM_NODE,
	CM_MEM_COORDINATOR,
	CM_MEM_COUNT
} cm_mem_tag;

void *cm_malloc(cm_mem_tag tag, size_t n);
void *cm_calloc(cm_mem_tag tag, size_t count, size_t n);
void *cm_realloc(cm_mem_tag tag, void *p, size_t n);
void cm_free(cm_mem_tag tag, void *p);
char *cm_strndup(cm_mem_tag tag, const char *s, size_t n);
char *cm_strdup(cm_mem_tag tag, const char *s);

int64_t cm_mem_used(cm_mem_tag tag);  /* bytes currently held */
const char *cm_mem_tag_name(cm_mem_tag tag);

#endif
