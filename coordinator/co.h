/* The coordinator: the HTTP server speaking the Elasticsearch REST
 * dialect on top of a node. */
#ifndef CO_H
#define CO_H

#include <stdint.h>

#include "../common/cm_err.h"
#include "../node/nd.h"

typedef struct co_server co_server;
typedef struct co_auth co_auth;

typedef struct co_opts {
	const char *host;          /* "127.0.0.1" */
	int port;                  /* 9200 */
	int threads;               /* HTTP worker threads; 0 = default */
	uint64_t max_content_length; /* http.max_content_length, default 100mb */
	co_auth *auth;             /* users and API keys (borrowed); NULL = no authentication */
	int max_open_connections;  /* http.max_open_connections: past it, 429; 0 = default */
	uint64_t header_timeout_ns; /* http.header_timeout: the whole request head; 0 = 10 s */
	uint64_t body_timeout_ns;   /* http.body_timeout: the whole body; 0 = 60 s */
} co_opts;

/* Starts serving n (borrowed; must outlive the server). */
cm_err co_server_start(nd_node *n, const co_opts *o, co_server **out, cm_error *err);
/* Stops accepting, finishes in-flight requests, frees the server. */
void co_server_stop(co_server *s);
/* Cancels the running by-query tasks and waits (30 s at most) for those
 * running without a request; call after co_server_stop. */
void co_tasks_shutdown(void);

/* This node's _nodes entry (kind "info") or _nodes/stats entry ("stats");
 * node is the nd_node. main registers it with nd_cluster_set_info so every
 * node of a cluster answers for itself. */
typedef struct cJSON cJSON;
cJSON *co_node_entry(void *node, const char *kind);

#endif
