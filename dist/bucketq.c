// See dist/bucketq.h. Two marks under one mutex: "released" (moved by the backward thread) and
// "done" (moved by the communication thread); the mutex also orders the backward's writes to a
// bucket before the thread's reads of it.
#include "dist/bucketq.h"

#include <pthread.h>

#include "util/common.h"

struct BucketQueue {
    int n;
    BucketFn fn;
    void *ctx;
    void (*thread_init)(void *ctx);
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int released, done, failed, quit;
};

static void *run(void *arg) {
    BucketQueue *q = arg;
    if (q->thread_init) q->thread_init(q->ctx);
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (!q->quit && q->done == q->released) pthread_cond_wait(&q->cv, &q->mu);
        if (q->quit) break;
        int i = q->done, skip = q->failed;
        pthread_mutex_unlock(&q->mu);
        int rc = skip ? 0 : q->fn(q->ctx, i);
        pthread_mutex_lock(&q->mu);
        if (rc) q->failed = 1;
        q->done++;
        pthread_cond_broadcast(&q->cv);
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

BucketQueue *bucketq_create(int n_buckets, BucketFn fn, void *ctx, void (*thread_init)(void *ctx)) {
    BucketQueue *q = ct_zalloc(sizeof *q);
    q->n = n_buckets;
    q->fn = fn;
    q->ctx = ctx;
    q->thread_init = thread_init;
    q->released = q->done = n_buckets;  // idle until bucketq_begin
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    if (pthread_create(&q->thread, NULL, run, q)) ct_die("cannot start the gradient communication thread");
    return q;
}

void bucketq_free(BucketQueue *q) {
    if (!q) return;
    pthread_mutex_lock(&q->mu);
    q->quit = 1;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
    pthread_join(q->thread, NULL);
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
    free(q);
}

void bucketq_begin(BucketQueue *q) {
    pthread_mutex_lock(&q->mu);
    if (q->done != q->n) ct_die("gradient buckets: the previous step was never waited for");
    q->released = q->done = 0;
    q->failed = 0;
    pthread_mutex_unlock(&q->mu);
}

void bucketq_release(BucketQueue *q, int upto) {
    pthread_mutex_lock(&q->mu);
    if (upto > q->n) upto = q->n;
    if (upto > q->released) {
        q->released = upto;
        pthread_cond_broadcast(&q->cv);
    }
    pthread_mutex_unlock(&q->mu);
}

int bucketq_wait(BucketQueue *q) {
    pthread_mutex_lock(&q->mu);
    q->released = q->n;
    pthread_cond_broadcast(&q->cv);
    while (q->done < q->n) pthread_cond_wait(&q->cv, &q->mu);
    int failed = q->failed;
    pthread_mutex_unlock(&q->mu);
    return failed ? -1 : 0;
}

int bucketq_done(BucketQueue *q) {
    pthread_mutex_lock(&q->mu);
    int d = q->done;
    pthread_mutex_unlock(&q->mu);
    return d;
}
