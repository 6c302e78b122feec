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
/* A collector feeding the state; valid while s lives. */
sr_collector sr_agg_collector(sr_agg_state *s);
/* Folds `from` into `into` (same spec); from is left empty. */
void sr_agg_state_merge(sr_agg_state *into, sr_agg_state *from);
/* Writes the final ES "aggregations" object ({"name":{...},...}) to out,
 * after all merges (terms size cut, min_doc_count, pipeline of order). */
cm_err sr_agg_render(const sr_agg_state *s, cm_buf *out, cm_error *err);
/* search.max_buckets: rendering more buckets than this is CM_ELIMIT. */
#define SR_MAX_BUCKETS 65535

#endif
