/* A tiny assertion header for unit tests: CHECK fails the test and keeps
 * going; REQUIRE stops it. main() returns check_report(). */
#ifndef CHECK_H
#define CHECK_H

#include <stdio.h>
#include <stdlib.h>

static int check_failures, check_count;

#define CHECK(cond)                                                                    \
	do {                                                                           \
		check_count++;                                                         \
		if (!(cond)) {                                                         \
			check_failures++;                                              \
			fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
		}                                                                      \
	} while (0)

#define CHECKF(cond, ...)                                                              \
	do {                                                                           \
		check_count++;                                                         \
		if (!(cond)) {                                                         \
			check_failures++;                                              \
			fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
			fprintf(stderr, __VA_ARGS__);                                  \
			fputc('\n', stderr);                                           \
		}                                                                      \
	} while (0)

#define REQUIRE(cond)                                                                  \
	do {                                                                           \
		check_count++;                                                         \
		if (!(cond)) {                                                         \
			fprintf(stderr, "%s:%d: REQUIRE failed: %s\n", __FILE__, __LINE__, #cond); \
			exit(1);                                                       \
		}                                                                      \
	} while (0)

static inline int
check_report(const char *name)
{
	printf("%s: %d checks, %d failed\n", name, check_count, check_failures);
	return check_failures ? 1 : 0;
}

#endif
