// Gradient averaging over the ranks of a data-parallel run, overlapped with backward.
//
// The parameters (and so the gradients) of a ResNet are laid out in the order backward produces
// them (nn/resnet.h), and backward reports through its ready callback that grads[0, n) are final.
// The buffer is cut into buckets at those op boundaries; a bucket is handed to a communication
// thread the moment backward has passed its end, so the allreduce of the last layers' gradients
// runs while backward is still computing the first layers'. Every rank cuts the same buckets from
// the same model, so every rank makes the same collectives in the same order (dist/comm.h
// checks that). After gradsync_wait, grads holds (sum over ranks) / ranks on every rank, the same
// bits everywhere: a non-finite gradient on any rank is non-finite on all of them, so all ranks
// skip such a step together.
#pragma once
#include <stddef.h>

#include "dist/comm.h"
#include "nn/resnet.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    size_t lo, hi;  // grads[lo, hi)
} Bucket;

// Cuts [0, m->n_params) at op boundaries (Op.grad_done) into buckets of at most bucket_bytes,
// except where a single op's gradients alone are larger. Writes up to max buckets, returns how
// many there are (call with max 0 to count).
int gradsync_plan(const ResNet *m, size_t bucket_bytes, Bucket *out, int max);
// The whole plan in a new array (free it); *n gets the bucket count.
Bucket *gradsync_plan_alloc(const ResNet *m, size_t bucket_bytes, int *n);

typedef struct GradSync GradSync;

// grads: this rank's gradient buffer (m->n_params floats), reduced in place. Starts the thread.
GradSync *gradsync_create(Comm *c, const ResNet *m, float *grads, size_t bucket_bytes);
void gradsync_free(GradSync *s);  // joins the thread
// Before each backward.
void gradsync_begin(GradSync *s);
// The backward's GradReadyFn (ctx = the GradSync): queues every bucket that ends at or before n.
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
