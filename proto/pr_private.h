/* Helpers shared by the message codecs of proto/ (pr.c, pr_ctx.c,
 * pr_cluster.c); not for use outside the folder. What they allocate is
 * accounted to CM_MEM_NODE, as every decoded message is. */
#ifndef PR_PRIVATE_H
#define PR_PRIVATE_H

#include <protobuf-c/protobuf-c.h>
#include <stdint.h>

#include "../common/cm_buf.h"
#include "../common/cm_err.h"

/* Appends any message to out through its generic descriptor. */
cm_err pr_pack(const ProtobufCMessage *m, cm_buf *out);

/* A borrowed view of n bytes at p as a `bytes` field (never freed by us). */
static inline ProtobufCBinaryData
pr_bin(const void *p, size_t n)
{
	return (ProtobufCBinaryData){n, (uint8_t *)(uintptr_t)p};
}

/* A borrowed string for a `string` field: NULL reads as "". */
static inline char *
pr_str(const char *s)
{
	return (char *)(uintptr_t)(s ? s : "");
}

/* A NUL-terminated copy of a `bytes` field; its length in *len when
 * len is not NULL. */
char *pr_dup_bin(const ProtobufCBinaryData *b, size_t *len);

/* Copies of repeated fields: n elements, of which the first `have` come
 * from v (protobuf-c leaves an empty repeated field NULL) and the rest are
 * zero; never NULL, even for n = 0. */
uint32_t *pr_dup_u32(const uint32_t *v, size_t have, size_t n);
uint64_t *pr_dup_u64(const uint64_t *v, size_t have, size_t n);

#endif
