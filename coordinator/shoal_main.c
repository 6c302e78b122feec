/* shoal: one node speaking the Elasticsearch REST dialect.
 *   shoal --solo --data DIR [--http HOST:PORT] [--name NAME] [--log-level LEVEL]
 *   shoal --cluster FILE --name NAME --data DIR [--role coordinator]
 *         [--fanout serial|per_shard|per_node]
 *   [--users FILE]   require authentication (users, argon2 hashes, roles)
 *   shoal --hash-password < password   prints an argon2id hash for FILE */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <termios.h>
#include <unistd.h>

#include "../common/cm_log.h"
#include "../common/cm_sys.h"
#include "../node/nd_cluster.h"
#include "../node/nd_snap.h"
#include "co.h"
#include "co_auth.h"
#include "co_snapshot.h"

static void
usage(FILE *f)
{
	fprintf(
	    f, "usage: shoal --solo --data DIR [--http HOST:PORT] [--name NAME]\n"
	       "             [--log-level debug|info|warn|error] [-E setting=value]\n"
	       "             [--http-threads N]   (HTTP worker threads, default 8)\n"
	       "       shoal --cluster FILE --name NAME --data DIR [--role coordinator]\n"
	       "             [--fanout serial|per_shard|per_node]\n"
	       "       shoal --etcd HOST:PORT[,HOST:PORT..] --cluster-name NAME --name NAME\n"
	       "             --http HOST:PORT --transport HOST:PORT --data DIR [--secret S]\n"
	       "             [--role coordinator]\n"
	       "       shoal --hash-password   (reads a password on stdin, prints its hash)\n"
	       "  --solo       one node holding every shard of its indices\n"
	       "  --cluster    a static cluster described by FILE (see docs); --name picks\n"
	       "               this node; its HTTP address comes from the file\n"
	       "  --etcd       a live cluster on etcd: membership, master election and the\n"
	       "               cluster state; the other nodes are found there (docs/cluster.md)\n"
	       "  --transport  this node's node-to-node address (with --etcd)\n"
	       "  --data DIR   data directory (indices, metadata, lock file)\n"
	       "  --http       HTTP address, default 127.0.0.1:9200\n"
	       "  --users FILE require HTTP authentication: users with argon2 hashes and\n"
	       "               roles (read, write, admin); see docs/operations.md\n"
	       "  -E action.destructive_requires_name=false   allow DELETE /_all and /*\n"
	       "  -E http.max_content_length=100mb            request body limit\n"
	       "  -E http.max_open_connections=1000           past it, requests get 429\n"
	       "  -E http.header_timeout=10s                  whole request head, else closed\n"
	       "  -E http.body_timeout=60s                    whole request body, else closed\n"
	       "  -E path.repo=DIR                            where snapshot repositories may lie\n"
	       "  -E cluster.primary_failover_timeout=30s     promote a replica after this\n"
	       "  -E cluster.replica_timeout=10s              drop a silent replica after this\n"
	       "  -E cluster.lease_ttl=10s                    etcd lease of this node (--etcd)\n"
	       "  -E cluster.etcd_compaction_interval=60s     the master compacts etcd (0: never)\n"
	       "  -E cluster.etcd_compaction_retention=1000   revisions kept behind the nodes\n"
	       "  -E search.hedge.enabled=true                hedged shard requests (cluster)\n"
	       "  -E search.hedge.min_delay=2ms               a hedge waits at least this\n"
	       "  -E search.hedge.max_ratio=0.05              hedges per shard request, at most\n"
	       "  -E cluster.routing.use_adaptive_replica_selection=true  adaptive copy ranking\n"
	       "  -E search.max_open_scroll_context=500       scroll contexts per node\n"
	       "  -E indices.requests.cache.size=1%%           shard request cache budget\n");
}

/* An http.*_timeout value: 100ms..1d, as "500ms", "10s", "2m" (a bare
 * number is seconds, as for the cluster.* timeouts). */
static bool
parse_timeout(const char *v, uint64_t *ns)
{
	return cm_parse_duration_ns(v, ns) && *ns >= 100000000ull;
}

/* Reads one line from stdin (without echo on a terminal) and prints its
 * argon2id PHC string; the password is wiped and never printed. */
static int
hash_password(void)
{
	char pw[CO_AUTH_MAX_SECRET + 2], enc[256];
	struct termios old, noecho;
	bool tty = isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &old) == 0;
	cm_error err;
	int rc = 0;

	if (tty) {
		fprintf(stderr, "Password: ");
		noecho = old;
		noecho.c_lflag &= ~(tcflag_t)ECHO;
		tcsetattr(STDIN_FILENO, TCSAFLUSH, &noecho);
	}
	if (!fgets(pw, sizeof(pw), stdin))
		pw[0] = 0;
	if (tty) {
		tcsetattr(STDIN_FILENO, TCSAFLUSH, &old);
		fputc('\n', stderr);
	}
	size_t n = strcspn(pw, "\r\n");
	if (n > CO_AUTH_MAX_SECRET) {
		fprintf(stderr, "shoal: password longer than %d bytes\n", CO_AUTH_MAX_SECRET);
		rc = 2;
	} else if (n == 0) {
		fprintf(stderr, "shoal: empty password\n");
		rc = 2;
	} else {
		cm_error_clear(&err);
		if (co_auth_hash_password(pw, n, enc, sizeof(enc), &err)) {
			fprintf(stderr, "shoal: %s\n", err.reason);
			rc = 1;
		} else {
			printf("%s\n", enc);
		}
	}
	memset(pw, 0, sizeof(pw));
	return rc;
}

/* Every shard copy holds files and every connection a descriptor: the
 * soft limit on open files is raised to the hard one, as far as it goes,
 * and a low hard limit is said at start rather than found by a failed
 * open later. */
static void
raise_nofile(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return;
	if (rl.rlim_cur < rl.rlim_max) {
		rlim_t want = rl.rlim_max == RLIM_INFINITY ? 1048576 : rl.rlim_max;
		struct rlimit up = {want, rl.rlim_max};
		if (setrlimit(RLIMIT_NOFILE, &up) == 0)
			rl.rlim_cur = want;
	}
	if (rl.rlim_cur < 16384)
		cm_warn("node",
		        "open files limited to %llu (ulimit -n): every shard copy holds several "
		        "files and every connection one; raise the hard limit (65535 as for "
		        "Elasticsearch) before holding many shards",
		        (unsigned long long)rl.rlim_cur);
}

int
main(int argc, char **argv)
{
	const char *data = NULL, *http = "127.0.0.1:9200", *name = NULL, *level = "info";
	bool solo = false, drn_false = false, coord_only = false;
	const char *cluster_file = NULL, *fanout_s = NULL;
	const char *etcd = NULL, *cluster_name = NULL, *transport = NULL, *secret = NULL;
	nd_cl_fanout fanout = ND_CL_FANOUT_PER_SHARD;
	nd_cluster *cl = NULL;
	uint64_t max_content = 100ull << 20;
	const char *users_file = NULL;
	int max_conns = 0;
	int http_threads = 0; /* co_http.c's default */
	uint64_t header_timeout = 0, body_timeout = 0;
	co_auth *auth = NULL;
	char host[64];
	int port;
	sigset_t sigs;
	int sig;
	nd_node_opts no = {0};
	co_opts co = {0};
	nd_node *node = NULL;
	co_server *srv = NULL;
	cm_error err;
	const char *cl_settings[32]; /* -E cluster.*, applied once the cluster is open */
	int ncl_settings = 0;
	const char *path_repo = NULL;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (strcmp(a, "--solo") == 0)
			solo = true;
		else if (strcmp(a, "--cluster") == 0 && v)
			cluster_file = argv[++i];
		else if (strcmp(a, "--etcd") == 0 && v)
			etcd = argv[++i];
		else if (strcmp(a, "--cluster-name") == 0 && v)
			cluster_name = argv[++i];
		else if (strcmp(a, "--transport") == 0 && v)
			transport = argv[++i];
		else if (strcmp(a, "--secret") == 0 && v)
			secret = argv[++i];
		else if (strcmp(a, "--role") == 0 && v) {
			const char *role = argv[++i];
			if (strcmp(role, "coordinator") == 0)
				coord_only = true;
			else if (strcmp(role, "data") != 0) {
				fprintf(stderr, "shoal: --role wants coordinator or data, got %s\n",
				        role);
				return 2;
			}
		} else if (strcmp(a, "--fanout") == 0 && v) {
			fanout_s = argv[++i];
			if (!nd_fanout_parse(fanout_s, &fanout)) {
				fprintf(stderr,
				        "shoal: --fanout wants serial, per_shard or per_node\n");
				return 2;
			}
		} else if (strcmp(a, "--data") == 0 && v)
			data = argv[++i];
		else if (strcmp(a, "--users") == 0 && v)
			users_file = argv[++i];
		else if (strcmp(a, "--hash-password") == 0)
			return hash_password();
		else if (strcmp(a, "--http") == 0 && v)
			http = argv[++i];
		else if (strcmp(a, "--name") == 0 && v)
			name = argv[++i];
		else if (strcmp(a, "--log-level") == 0 && v)
			level = argv[++i];
		else if (strcmp(a, "--http-threads") == 0 && v) {
			http_threads = atoi(argv[++i]);
			if (http_threads < 1 || http_threads > 256) {
				fprintf(stderr, "shoal: --http-threads takes 1 to 256\n");
				return 2;
			}
		}
		else if (strcmp(a, "-E") == 0 && v) {
			/* Elasticsearch-style settings */
			const char *kv = argv[++i];
			if (strcmp(kv, "action.destructive_requires_name=false") == 0)
				drn_false = true;
			else if (strcmp(kv, "action.destructive_requires_name=true") == 0)
				drn_false = false;
			else if (strncmp(kv, "http.max_content_length=", 24) == 0) {
				char *end;
				double n = strtod(kv + 24, &end);
				double mul = strcasecmp(end, "kb") == 0           ? 1024.0
				             : strcasecmp(end, "mb") == 0         ? 1048576.0
				             : strcasecmp(end, "gb") == 0         ? 1073741824.0
				             : strcasecmp(end, "b") == 0 || !*end ? 1.0
				                                                  : -1.0;
				if (n <= 0 || mul < 0) {
					fprintf(stderr, "shoal: bad value in -E %s\n", kv);
					return 2;
				}
				max_content = (uint64_t)(n * mul);
			} else if (strncmp(kv, "http.max_open_connections=", 26) == 0) {
				char *end;
				long n = strtol(kv + 26, &end, 10);
				if (*end || n < 1 || n > 1000000) {
					fprintf(stderr, "shoal: bad value in -E %s (1..1000000)\n",
					        kv);
					return 2;
				}
				max_conns = (int)n;
			} else if (strncmp(kv, "http.header_timeout=", 20) == 0 ||
			           strncmp(kv, "http.body_timeout=", 18) == 0) {
				bool head = kv[5] == 'h';
				uint64_t *to = head ? &header_timeout : &body_timeout;
				if (!parse_timeout(kv + (head ? 20 : 18), to)) {
					fprintf(stderr, "shoal: bad value in -E %s (100ms..1d)\n",
					        kv);
					return 2;
				}
			} else if (strncmp(kv, "path.repo=", 10) == 0) {
				path_repo = kv + 10;
			} else if (strncmp(kv, "search.max_open_scroll_context=", 31) == 0) {
				char *end;
				long n = strtol(kv + 31, &end, 10);
				if (*end || n < 1 || n > 1000000) {
					fprintf(stderr, "shoal: bad value in -E %s (1..1000000)\n",
					        kv);
					return 2;
				}
				nd_ctx_set_max_scroll((int)n);
			} else if (strncmp(kv, "indices.requests.cache.size=", 28) == 0) {
				if (!nd_set_request_cache_size(kv + 28)) {
					fprintf(stderr,
					        "shoal: bad value in -E %s (a percentage of memory "
					        "such as 1%%, or a size such as 64mb)\n",
					        kv);
					return 2;
				}
			} else if ((strncmp(kv, "cluster.", 8) == 0 ||
			            strncmp(kv, "search.hedge.", 13) == 0) &&
			           ncl_settings < 32) {
				cl_settings[ncl_settings++] = kv;
			} else {
				fprintf(stderr, "shoal: unknown setting -E %s\n", kv);
				return 2;
			}
		} else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			usage(stdout);
			return 0;
		} else {
			fprintf(stderr, "shoal: unknown or incomplete option %s\n", a);
			usage(stderr);
			return 2;
		}
	}
	if (etcd && !cluster_file && (solo || !name || !cluster_name || !transport)) {
		fprintf(stderr, "shoal: %s\n",
		        solo
		            ? "--solo and --etcd exclude each other"
		            : "--etcd needs --cluster-name NAME, --name NAME, --http HOST:PORT and "
		              "--transport HOST:PORT (or --cluster FILE)");
		usage(stderr);
		return 2;
	}
	if (etcd && cluster_file) {
		fprintf(stderr, "shoal: --etcd and --cluster exclude each other (put \"etcd\" in "
		                "the cluster file)\n");
		return 2;
	}
	if ((!solo && !cluster_file && !etcd) || !data || (cluster_file && (solo || !name))) {
		fprintf(stderr, "shoal: %s\n",
		        solo && cluster_file    ? "--solo and --cluster exclude each other"
		        : cluster_file && !name ? "--cluster needs --name NAME"
		        : !data                 ? "--data DIR is required"
		                : "--solo, --cluster FILE or --etcd HOSTS is required");
		usage(stderr);
		return 2;
	}
	if (etcd) {
		nd_cl_etcd_opts eo = {.endpoints = etcd,
		                      .cluster_name = cluster_name,
		                      .name = name,
		                      .http = http,
		                      .transport = transport,
		                      .secret = secret,
		                      .coordinator_only = coord_only};
		cm_error_clear(&err);
		if (nd_cluster_open_etcd(&eo, fanout, &cl, &err)) {
			fprintf(stderr, "shoal: %s\n", err.reason);
			return 2;
		}
	} else if (cluster_file) {
		cm_error_clear(&err);
		if (nd_cluster_open(cluster_file, name, coord_only, fanout, &cl, &err)) {
			fprintf(stderr, "shoal: %s\n", err.reason);
			return 2;
		}
		http = nd_cluster_http(cl);
	}
	for (int k = 0; cl && k < ncl_settings; k++) {
		cm_error_clear(&err);
		if (nd_cluster_setting(cl, cl_settings[k], &err)) {
			fprintf(stderr, "shoal: -E %s: %s\n", cl_settings[k], err.reason);
			nd_cluster_stop(cl); /* not started yet: frees what open took */
			return 2;
		}
	}
	const char *colon = strrchr(http, ':');
	if (!colon || (size_t)(colon - http) >= sizeof(host) || (port = atoi(colon + 1)) <= 0 ||
	    port > 65535) {
		fprintf(stderr, "shoal: --http wants HOST:PORT, got %s\n", http);
		return 2;
	}
	memcpy(host, http, (size_t)(colon - http));
	host[colon - http] = 0;
	if (strcmp(host, "localhost") == 0)
		strcpy(host, "127.0.0.1");
	cm_log_set_level(strcmp(level, "debug") == 0   ? CM_LOG_DEBUG
	                 : strcmp(level, "warn") == 0  ? CM_LOG_WARN
	                 : strcmp(level, "error") == 0 ? CM_LOG_ERROR
	                                               : CM_LOG_INFO);
	raise_nofile();

	/* Signals are taken synchronously by the main thread, so every worker
	 * thread created below inherits the mask. */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);
	cm_crash_report_install();

	cm_error_clear(&err);
	if (users_file && co_auth_open(users_file, data, &auth, &err)) {
		fprintf(stderr, "shoal: %s\n", err.reason);
		return 2;
	}
	cm_error_clear(&err);
	no.data_dir = data;
	no.name = name;
	no.destructive_requires_name = true;
	no.destructive_requires_name = !drn_false;
	no.replicated = cl != NULL;
	if (nd_node_open(&no, &node, &err)) {
		fprintf(stderr, "shoal: %s\n", err.reason[0] ? err.reason : cm_err_msg(err.code));
		co_auth_close(auth);
		return 1;
	}
	if (nd_snap_open(node, path_repo, &err)) {
		fprintf(stderr, "shoal: %s\n", err.reason);
		nd_cluster_stop(cl);
		nd_node_close(node);
		co_auth_close(auth);
		return 1;
	}
	nd_snap_set_global(co_snapshot_global_get, co_snapshot_global_put);
	if (cl)
		nd_cluster_set_info(cl, co_node_entry, node);
	if (cl && nd_cluster_start(cl, node, &err)) {
		fprintf(stderr, "shoal: %s\n", err.reason[0] ? err.reason : cm_err_msg(err.code));
		nd_cluster_stop(cl);
		nd_node_close(node);
		co_auth_close(auth);
		return 1;
	}
	co.host = host;
	co.port = port;
	co.max_content_length = max_content;
	co.auth = auth;
	co.max_open_connections = max_conns;
	co.threads = http_threads;
	co.header_timeout_ns = header_timeout;
	co.body_timeout_ns = body_timeout;
	if (co_server_start(node, &co, &srv, &err)) {
		fprintf(stderr, "shoal: %s\n", err.reason);
		nd_cluster_stop(cl);
		nd_node_close(node);
		co_auth_close(auth);
		return 1;
	}
	cm_info("main", "node [%s] serving http://%s:%d data %s", nd_node_name(node), host, port,
	        data);
	if (strncmp(host, "127.", 4) != 0 && !auth)
		cm_warn("main",
		        "HTTP is bound to %s without authentication: anyone who can connect can "
		        "read, write and delete (start with --users FILE)",
		        host);
	if (auth)
		cm_info("main", "HTTP authentication on: users from %s", users_file);
	sigwait(&sigs, &sig);
	cm_info("main", "%s: shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT");
	nd_snap_stop();
	co_server_stop(srv);
	co_tasks_shutdown(); /* by-query tasks stop at their next batch */
	nd_cluster_stop(cl);
	nd_snap_close();
	nd_node_close(node);
	co_auth_close(auth);
	cm_info("main", "stopped");
	return 0;
}
