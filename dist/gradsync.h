// Gradient averaging over the ranks of a data-parallel run, overlapped with backward.
//
// The gradients live in one flat buffer laid out in the order backward produces them, and
// backward reports through its ready callback that grads[0, n) are final. The caller gives the
// n values backward will report, in order (the op boundaries; for a ResNet,
// nn/resnet.h's resnet_grad_boundaries): dist/ learns the model only as these numbers. The buffer
// is cut into buckets at those boundaries; a bucket is handed to a communication thread the
// moment backward has passed its end, so the allreduce of the last layers' gradients runs while
// backward is still computing the first layers'. Every rank cuts the same buckets from the same
// model, so every rank makes the same collectives in the same order (dist/comm.h checks that).
// After gradsync_wait, grads holds (sum over ranks) / ranks on every rank, the same bits
// everywhere: a non-finite gradient on any rank is non-finite on all of them, so all ranks skip
// such a step together.
#pragma once
#include <stddef.h>

#include "dist/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    size_t lo, hi;  // grads[lo, hi)
} Bucket;

// Cuts [0, n_params) at the boundaries bounds[0..n_bounds) (non-decreasing, the last one
// n_params; a repeated value is no new boundary) into buckets of at most bucket_bytes, except
// where the gradients between two boundaries alone are larger. Writes up to max buckets, returns
// how many there are (call with max 0 to count). Dies when the boundaries go backwards or do not
// end at n_params.
int gradsync_plan(const size_t *bounds, size_t n_bounds, size_t n_params, size_t bucket_bytes, Bucket *out,
                  int max);
// The whole plan in a new array (free it); *n gets the bucket count.
Bucket *gradsync_plan_alloc(const size_t *bounds, size_t n_bounds, size_t n_params, size_t bucket_bytes,
                            int *n);

typedef struct GradSync GradSync;

// grads: this rank's gradient buffer (n_params floats), reduced in place; bounds as gradsync_plan
// (only read during the call). Starts the thread.
GradSync *gradsync_create(Comm *c, const size_t *bounds, size_t n_bounds, size_t n_params, float *grads,
                          size_t bucket_bytes);
void gradsync_free(GradSync *s);  // joins the thread
// Before each backward.
void gradsync_begin(GradSync *s);
// The backward's ready callback (ctx = the GradSync; the shape of nn/resnet.h's GradReadyFn):
// queues every bucket that ends at or before n.
void gradsync_ready(void *ctx, size_t n);
// Queues what is left, waits until every bucket is averaged. Returns 0, or -1 when a collective
// failed (comm error mode 1; comm_error has the message).
int gradsync_wait(GradSync *s);
int gradsync_buckets(const GradSync *s);
// Buckets of the current step already averaged (progress; tests of the overlap).
int gradsync_done(GradSync *s);

#ifdef __cplusplus
}
#endif
