// Minimal test harness: CHECK-style assertions that count failures, and numeric comparison
// helpers. A test program returns test_summary() from main: non-zero exit when anything failed.
#pragma once
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

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

static inline int test_summary(const char *name) {
    printf("%s: %d checks, %d failed\n", name, test_checks_, test_failures_);
    return test_failures_ ? 1 : 0;
}
