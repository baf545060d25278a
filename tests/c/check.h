/* check.h — the tiny assertion helpers of Tern's C unit tests.
 * A test binary exits 0 when every CHECK held; each failure prints file:line and the values. */
#ifndef TERN_CHECK_H
#define TERN_CHECK_H
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int check_failures = 0;
static int check_count = 0;

#define CHECK(cond) do { check_count++; if (!(cond)) { check_failures++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); } } while (0)
#define CHECK_MSG(cond, ...) do { check_count++; if (!(cond)) { check_failures++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
    fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)
/* |a - b| <= atol + rtol * |b| */
#define CHECK_NEAR(a, b, atol, rtol) do { double _a = (a), _b = (b); check_count++; \
    if (!(fabs(_a - _b) <= (atol) + (rtol) * fabs(_b))) { check_failures++; \
    fprintf(stderr, "%s:%d: CHECK_NEAR failed: %s = %.9g vs %s = %.9g\n", __FILE__, __LINE__, \
            #a, _a, #b, _b); } } while (0)
#define CHECK_EQ_INT(a, b) do { long long _a = (a), _b = (b); check_count++; if (_a != _b) { \
    check_failures++; fprintf(stderr, "%s:%d: CHECK_EQ failed: %s = %lld vs %s = %lld\n", \
    __FILE__, __LINE__, #a, _a, #b, _b); } } while (0)

static inline int check_report(const char *name) {
    printf("%s: %d checks, %d failed\n", name, check_count, check_failures);
    return check_failures ? 1 : 0;
}
#endif
