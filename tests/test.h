// Minimal test harness: CHECK-style assertions that count checks and failures, numeric comparison
// helpers, and the small helpers many tests share (random data, sleeping, writing a file). A test
// program returns test_summary() from main: non-zero exit when anything failed, or when nothing
// was checked at all (a test that silently skips its work must not pass).
// Included by C tests and by the emulator tests, which g++ compiles as C++: keep both spellings valid.
#pragma once
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "util/common.h"
#include "util/rng.h"

static int test_failures_;
static int test_checks_;

#define CHECK(cond, ...)                                                  \
    do {                                                                  \
        test_checks_++;                                                   \
        if (!(cond)) {                                                    \
            test_failures_++;                                             \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                 \
            fputc('\n', stderr);                                          \
        }                                                                 \
    } while (0)

// Norm-wise relative error ||a - b|| / max(||b||, tiny): robust to individual tiny entries.
static inline double rel_err_norm(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    if (den < 1e-30) return sqrt(num);
    return sqrt(num / den);
}

static inline double max_abs_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m)) m = d;  // NaN propagates as failure
    }
    return m;
}

// The shared random stream of rnd and rand_buf; a test seeds it in main (test_rng = rng_make(...))
// so its data, and so its shapes, are the same on every run.
static Rng test_rng;

// Uniform integer in [lo, hi].
static inline int rnd(int lo, int hi) { return lo + (int)rng_below(&test_rng, (uint32_t)(hi - lo + 1)); }
// n floats uniform in [-scale, scale), in a fresh ct_alloc buffer (one spare element: n may be 0).
static inline float *rand_buf(size_t n, float scale) {
    float *p = (float *)ct_alloc(n * sizeof(float) + 1);
    for (size_t i = 0; i < n; i++) p[i] = scale * (2 * rng_uniform(&test_rng) - 1);
    return p;
}

static inline void nap_us(long us) {
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

// Writes n bytes to path (a fixture or a deliberately damaged copy); dies naming the path.
static inline void test_write_file(const char *path, const void *d, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) ct_die_errno("%s", path);
    if (n && fwrite(d, 1, n, f) != n) ct_die_errno("%s: short write", path);
    if (fclose(f)) ct_die_errno("%s", path);
}

static inline int test_summary(const char *name) {
    printf("%s: %d checks, %d failed\n", name, test_checks_, test_failures_);
    if (test_checks_ == 0) {
        fprintf(stderr, "%s: FAIL: no check ran (a skipped or broken test must not pass)\n", name);
        return 1;
    }
    return test_failures_ ? 1 : 0;
}
