/* `shoal-engine query`: runs ES query JSON lines against one shard
 * directory in process, single-threaded, and prints per-class figures. */
#ifndef SR_ENGINE_H
#define SR_ENGINE_H

int sr_engine_query_main(int argc, char **argv);

#endif
