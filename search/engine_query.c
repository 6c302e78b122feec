/* Placeholder until the query engine lands; replaced by the search work. */
#include <stdio.h>

#include "sr_engine.h"

int
sr_engine_query_main(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	fprintf(stderr, "shoal-engine query: the query engine is not built yet\n");
	return 2;
}
