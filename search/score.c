/* Lucene 8 BM25 (k1 = 1.2, b = 0.75, no (k1 + 1) factor), computed in
 * float with Lucene's operation order so scores agree to the last bits. */
#include <pthread.h>

#include "../common/cm_alloc.h"
#include "exec.h"

#define BM25_K1 1.2f
#define BM25_B 0.75f

float
sr_idf(uint64_t df, uint64_t doc_count)
{
	/* BM25Similarity.idf: (float) Math.log(1 + (docCount - docFreq + 0.5D) / (docFreq + 0.5D)) */
	return (float)log(1.0 + ((double)doc_count - (double)df + 0.5) / ((double)df + 0.5));
}

/* Lengths of the 256 norm bytes, decoded once per process: the cache's
 * loop is then divisions alone, which the compiler runs four or eight to
 * an instruction (a search fills it per field and shard). */
static float norm_len[256];
static pthread_once_t norm_len_once = PTHREAD_ONCE_INIT;

static void
norm_len_init(void)
{
	for (int i = 0; i < 256; i++)
		norm_len[i] = (float)st_norm_decode((uint8_t)i);
}

const float *
sr_fstat_init_cache(sr_fstat *fs)
{
	pthread_once(&norm_len_once, norm_len_init);
	float *c = cm_malloc(CM_MEM_SEARCH, 256 * sizeof(float));
	for (int i = 0; i < 256; i++)
		c[i] = 1.0f / (BM25_K1 * ((1 - BM25_B) + BM25_B * norm_len[i] / fs->avgdl));
	float *none = NULL;
	if (atomic_compare_exchange_strong_explicit(&fs->cache, &none, c, memory_order_acq_rel,
	                                            memory_order_acquire))
		return c;
	cm_free(CM_MEM_SEARCH, c); /* another search made it first */
	return none;
}
