/* Which segments to merge. Pure functions over segment sizes, so the
 * policy is testable without building segments. */
#include <string.h>

#include "../common/cm_alloc.h"
#include "shard_private.h"

static int
tier_of(uint64_t bytes, int factor, uint64_t floor_bytes)
{
	int t = 0;
	uint64_t limit = floor_bytes ? floor_bytes : 1;
	while (bytes >= limit && t < 64) {
		t++;
		if (limit > UINT64_MAX / (uint64_t)factor)
			break;
		limit *= (uint64_t)factor;
	}
	return t;
}

/* Insertion sort of indices by size: segment counts are small. */
static void
sort_by_size(size_t *idx, size_t n, const uint64_t *bytes)
{
	for (size_t i = 1; i < n; i++) {
		size_t v = idx[i], j = i;
		while (j > 0 && bytes[idx[j - 1]] > bytes[v]) {
			idx[j] = idx[j - 1];
			j--;
		}
		idx[j] = v;
	}
}

size_t
st_merge_pick_tiered(const uint64_t *bytes, const bool *busy, size_t n, int factor,
                     uint64_t floor_bytes, size_t *out)
{
	if (factor < 2 || n < (size_t)factor)
		return 0;
	size_t *idx = cm_malloc(CM_MEM_STORAGE, n * sizeof(*idx));
	size_t m = 0;
	for (size_t i = 0; i < n; i++)
		if (!busy || !busy[i])
			idx[m++] = i;
	sort_by_size(idx, m, bytes);
	size_t picked = 0;
	/* Walk runs of equal tier, smallest tier first. */
	for (size_t a = 0; a < m && !picked;) {
		int t = tier_of(bytes[idx[a]], factor, floor_bytes);
		size_t b = a;
		while (b < m && tier_of(bytes[idx[b]], factor, floor_bytes) == t)
			b++;
		if (b - a >= (size_t)factor) {
			for (size_t i = 0; i < (size_t)factor; i++)
				out[picked++] = idx[a + i];
		}
		a = b;
	}
	cm_free(CM_MEM_STORAGE, idx);
	return picked;
}

size_t
st_merge_pick_forced(const uint64_t *bytes, const bool *has_deletes, size_t n, int max_segments,
                     size_t *out)
{
	if (max_segments < 1)
		max_segments = 1;
	if (n == 0)
		return 0;
	if (n <= (size_t)max_segments) {
		/* Rewriting a lone segment only pays when it sheds deleted docs;
		 * with a larger target, segments are left as they are (as
		 * Lucene's forceMerge does). */
		if (max_segments == 1 && n == 1 && has_deletes && has_deletes[0]) {
			out[0] = 0;
			return 1;
		}
		return 0;
	}
	size_t *idx = cm_malloc(CM_MEM_STORAGE, n * sizeof(*idx));
	for (size_t i = 0; i < n; i++)
		idx[i] = i;
	sort_by_size(idx, n, bytes);
	size_t k = n - (size_t)max_segments + 1;
	memcpy(out, idx, k * sizeof(*out));
	cm_free(CM_MEM_STORAGE, idx);
	return k;
}
