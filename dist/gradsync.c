// Bucketed, overlapped gradient averaging (see dist/gradsync.h): the bucket plan, and the work on
// each bucket for the communication thread of dist/bucketq.h.
#include "dist/gradsync.h"

#include <string.h>

#include "dist/bucketq.h"
#include "util/common.h"

int gradsync_plan(const size_t *bounds, size_t n_bounds, size_t n_params, size_t bucket_bytes, Bucket *out,
                  int max) {
    const size_t cap = CT_MAX(bucket_bytes / sizeof(float), 1);
    size_t lo = 0, last = 0;
    int nb = 0;
    for (size_t i = 0; i < n_bounds; i++) {
        const size_t b = bounds[i];
        if (b < last) ct_die("gradsync: gradient boundary %zu is %zu, below the previous one (%zu)", i, b, last);
        if (b == last) continue;
        if (b - lo > cap && last > lo) {  // going on to b would overflow: close at the previous boundary
            if (nb < max) out[nb] = (Bucket){lo, last};
            nb++;
            lo = last;
        }
        last = b;
    }
    if (last != n_params)
        ct_die("gradsync: the gradient boundaries reach %zu of %zu parameters", last, n_params);
    if (last > lo) {
        if (nb < max) out[nb] = (Bucket){lo, last};
        nb++;
    }
    return nb;
}

struct GradSync {
    Comm *c;
    float *grads;
    Bucket *b;
    int nb;
    int released;  // buckets handed to the queue (backward thread only)
    BucketQueue *q;
};

// The communication thread's work on one bucket: the rank-order sum, then the mean as DDP takes
// it (sum divided by the rank count, the same on every rank).
static int reduce_bucket(void *ctx, int i) {
    GradSync *s = ctx;
    const int R = comm_size(s->c);
    if (R == 1) return 0;
    float *g = s->grads + s->b[i].lo;
    size_t n = s->b[i].hi - s->b[i].lo;
    if (comm_allreduce_f32(s->c, g, n)) return -1;
    for (size_t k = 0; k < n; k++) g[k] /= (float)R;
    return 0;
}

Bucket *gradsync_plan_alloc(const size_t *bounds, size_t n_bounds, size_t n_params, size_t bucket_bytes,
                            int *n) {
    *n = gradsync_plan(bounds, n_bounds, n_params, bucket_bytes, NULL, 0);
    Bucket *b = ct_alloc((size_t)*n * sizeof(Bucket));
    gradsync_plan(bounds, n_bounds, n_params, bucket_bytes, b, *n);
    return b;
}

GradSync *gradsync_create(Comm *c, const size_t *bounds, size_t n_bounds, size_t n_params, float *grads,
                          size_t bucket_bytes) {
    GradSync *s = ct_zalloc(sizeof *s);
    s->c = c;
    s->grads = grads;
    s->b = gradsync_plan_alloc(bounds, n_bounds, n_params, bucket_bytes, &s->nb);
    s->q = bucketq_create(s->nb, reduce_bucket, s, NULL);
    return s;
}

void gradsync_free(GradSync *s) {
    if (!s) return;
    bucketq_free(s->q);
    free(s->b);
    free(s);
}

void gradsync_begin(GradSync *s) {
    bucketq_begin(s->q);
    s->released = 0;
}

void gradsync_ready(void *ctx, size_t n) {
    GradSync *s = ctx;
    while (s->released < s->nb && s->b[s->released].hi <= n) s->released++;
    bucketq_release(s->q, s->released);
}

int gradsync_wait(GradSync *s) { return bucketq_wait(s->q); }

int gradsync_buckets(const GradSync *s) { return s->nb; }
int gradsync_done(GradSync *s) { return bucketq_done(s->q); }
