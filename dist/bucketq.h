// The communication thread shared by the gradient averagers (dist/gradsync.c for host gradients,
// dist/gradsync_cuda.cu for device gradients): it runs fn(ctx, i) for buckets i = 0, 1, ... in
// order, each as soon as the backward thread has released it, so communication overlaps backward.
// Releasing is monotone within a step; bucketq_wait releases the rest and returns once every
// bucket is through. After a bucket fails (fn returns -1) the rest of the step is skipped.
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

typedef struct BucketQueue BucketQueue;
typedef int (*BucketFn)(void *ctx, int bucket);

// thread_init (may be NULL) runs first on the new thread (a CUDA device selection, say).
BucketQueue *bucketq_create(int n_buckets, BucketFn fn, void *ctx, void (*thread_init)(void *ctx));
void bucketq_free(BucketQueue *q);  // joins the thread
// A new step: nothing released. Dies if the last step was never waited for.
void bucketq_begin(BucketQueue *q);
// Buckets [0, upto) may go (upto below the current mark changes nothing).
void bucketq_release(BucketQueue *q, int upto);
// Releases everything and waits. 0, or -1 when a bucket failed.
int bucketq_wait(BucketQueue *q);
int bucketq_done(BucketQueue *q);  // buckets of this step through so far

#ifdef __cplusplus
}
#endif
