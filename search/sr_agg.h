/* Aggregations as mergeable partial states. A shard collects into a state;
 * the coordinator merges shard states in arrival order and renders the
 * final "aggregations" object once. */
#ifndef SR_AGG_H
#define SR_AGG_H

#include "sr.h"

/* Parses the value of "aggs"/"aggregations". Unknown types → CM_EPARSE
 * ("Unknown aggregation type [x]"); bad parameters → CM_EPARSE/CM_EINVAL. */
cm_err sr_agg_from_json(const cJSON *aggs, sr_agg **out, cm_error *err);
void sr_agg_free(sr_agg *a);

/* A fresh, empty partial state for spec a (shard-side). */
sr_agg_state *sr_agg_state_new(const sr_agg *a);
void sr_agg_state_free(sr_agg_state *s);
/* A collector feeding the state; valid while s lives. Docs passed to
 * collect are segment-local (0 .. max_doc-1), ascending within a segment.
 * One state collects one shard; per-segment states of the same shard must
 * not be merged with sr_agg_state_merge (merge treats each input as a
 * whole shard's result when cutting terms to shard_size). */
sr_collector sr_agg_collector(sr_agg_state *s);
/* Call once after the shard's last segment, while its segments are still
 * open: samplers feed their chosen docs to their sub-aggregations then.
 * The first error, as sr_agg_state_error. */
cm_err sr_agg_state_shard_end(sr_agg_state *s);
/* Folds `from` into `into` (same spec); from is left empty. */
void sr_agg_state_merge(sr_agg_state *into, sr_agg_state *from);
/* Writes the final ES "aggregations" object ({"name":{...},...}) to out,
 * after all merges (terms size cut, min_doc_count, pipeline of order). */
cm_err sr_agg_render(const sr_agg_state *s, cm_buf *out, cm_error *err);
/* The same; typed_keys writes each name as ES's "type#name" (sterms#,
 * date_histogram#, tdigest_percentiles#, simple_value#, ...). */
cm_err sr_agg_render_typed(const sr_agg_state *s, cm_buf *out, bool typed_keys, cm_error *err);
/* Wire form of a partial state (the spec itself is not encoded: the
 * receiver decodes against the same sr_agg it parsed from the request).
 * A shard-level state is trimmed (terms shard_size) before encoding. */
cm_err sr_agg_state_encode(sr_agg_state *s, cm_buf *out);
/* Bounds-checked: corrupt or truncated bytes → CM_ECORRUPT, never a crash.
 * *out is owned by the caller (sr_agg_state_free). */
cm_err sr_agg_state_decode(const sr_agg *a, const void *p, size_t n, sr_agg_state **out,
                           cm_error *err);
/* The first error met while collecting (text field aggregated, too many
 * buckets, a filter that failed), or NULL. begin_segment also returns it. */
const cm_error *sr_agg_state_error(const sr_agg_state *s);
/* True when some top_hits ranks by _score: the collector must then be fed
 * scores (otherwise collect may get scores == NULL). */
bool sr_agg_needs_scores(const sr_agg *a);
/* Index name rendered as top_hits' "_index" (copied; may be NULL). */
void sr_agg_state_set_index(sr_agg_state *s, const char *index, uint32_t shard);
/* Checks fields against a mapping before fan-out: a text field without a
 * column → CM_EINVAL with ES's fielddata message; a metric over a keyword
 * field that needs numbers → CM_EINVAL. Fields not in m are unmapped (ok). */
cm_err sr_agg_validate(const sr_agg *a, const st_mapping *m, cm_error *err);
/* search.max_buckets: rendering more buckets than this is CM_ELIMIT with
 * type "too_many_buckets_exception". */
#define SR_MAX_BUCKETS 65535

#endif
