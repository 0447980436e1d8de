/* unit.h — a minimal TAP producer for the C unit tests.
 * Each check prints "ok N - what" or "not ok N - what"; unit_done() prints the
 * plan line and returns the exit status, so `prove` or tests/run.sh can count. */
#ifndef DTPC_UNIT_H
#define DTPC_UNIT_H
#include <stdio.h>

static int unit_n, unit_failed;

#define UNIT_CHECK(cond, ...)                                                   \
	do {                                                                    \
		++unit_n;                                                       \
		if (cond) {                                                     \
			printf("ok %d - ", unit_n);                             \
		} else {                                                        \
			++unit_failed;                                          \
			printf("not ok %d - %s:%d: ", unit_n, __FILE__, __LINE__); \
		}                                                               \
		printf(__VA_ARGS__);                                            \
		printf("\n");                                                   \
	} while (0)

static inline int unit_done(void)
{
	printf("1..%d\n", unit_n);
	if (unit_failed)
		printf("# %d of %d checks failed\n", unit_failed, unit_n);
	return unit_failed ? 1 : 0;
}
#endif
