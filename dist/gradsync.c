// Bucketed, overlapped gradient averaging (see dist/gradsync.h).
//
// One communication thread per rank. Backward's ready callback moves a "queued" mark forward over
// the bucket list; the thread reduces buckets in list order up to that mark and moves a "done"
// mark; gradsync_wait queues the rest and waits for done to reach the end. Both marks live under
// one mutex, which also orders the gradient writes of backward before the thread reads them.
#include "dist/gradsync.h"

#include <pthread.h>
#include <string.h>

#include "util/common.h"

int gradsync_plan(const ResNet *m, size_t bucket_bytes, Bucket *out, int max) {
    const size_t cap = CT_MAX(bucket_bytes / sizeof(float), 1);
    size_t lo = 0, last = 0;
    int nb = 0;
    for (int i = m->n_ops - 1; i >= 0; i--) {
        const Op *op = &m->ops[i];
        if (op->w < 0 || op->grad_done <= last) continue;
        if (op->grad_done - lo > cap && last > lo) {  // adding this op would overflow: close before it
            if (nb < max) out[nb] = (Bucket){lo, last};
            nb++;
            lo = last;
        }
        last = op->grad_done;
    }
    if (last != m->n_params)
        ct_die("gradsync: %s's ops report gradients up to %zu of %zu parameters", m->arch, last, m->n_params);
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
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int queued, done;  // buckets [0, queued) handed to the thread, [0, done) averaged
    int failed, quit;
    double exposed;
};

static void *comm_thread(void *arg) {
    GradSync *s = arg;
    const int R = comm_size(s->c);
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->quit && s->done == s->queued) pthread_cond_wait(&s->cv, &s->mu);
        if (s->quit) break;
        const Bucket bk = s->b[s->done];
        int skip = s->failed;  // after a failure the remaining buckets are only marked done
        pthread_mutex_unlock(&s->mu);
        int rc = 0;
        if (!skip && R > 1) {
            float *g = s->grads + bk.lo;
            size_t n = bk.hi - bk.lo;
            rc = comm_allreduce_f32(s->c, g, n);
            // The mean, as DDP: the rank-order sum divided by the rank count (the same on every rank).
            if (!rc)
                for (size_t i = 0; i < n; i++) g[i] /= (float)R;
        }
        pthread_mutex_lock(&s->mu);
        if (rc) s->failed = 1;
        s->done++;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

GradSync *gradsync_create(Comm *c, const ResNet *m, float *grads, size_t bucket_bytes) {
    GradSync *s = ct_zalloc(sizeof *s);
    s->c = c;
    s->grads = grads;
    s->nb = gradsync_plan(m, bucket_bytes, NULL, 0);
    s->b = ct_alloc(s->nb * sizeof(Bucket));
    gradsync_plan(m, bucket_bytes, s->b, s->nb);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->queued = s->done = s->nb;  // idle until gradsync_begin
    if (pthread_create(&s->thread, NULL, comm_thread, s)) ct_die("gradsync: cannot start the communication thread");
    return s;
}

void gradsync_free(GradSync *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->quit = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s->b);
    free(s);
}

void gradsync_begin(GradSync *s) {
    pthread_mutex_lock(&s->mu);
    if (s->done != s->nb) ct_die("gradsync_begin: the previous step's gradients were never waited for");
    s->queued = s->done = 0;
    s->failed = 0;
    pthread_mutex_unlock(&s->mu);
}

void gradsync_ready(void *ctx, size_t n) {
    GradSync *s = ctx;
    pthread_mutex_lock(&s->mu);
    int q = s->queued;
    while (q < s->nb && s->b[q].hi <= n) q++;
    if (q != s->queued) {
        s->queued = q;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
}

int gradsync_wait(GradSync *s) {
    double t0 = ct_now();
    pthread_mutex_lock(&s->mu);
    s->queued = s->nb;
    pthread_cond_broadcast(&s->cv);
    while (s->done < s->nb) pthread_cond_wait(&s->cv, &s->mu);
    int failed = s->failed;
    pthread_mutex_unlock(&s->mu);
    s->exposed = ct_now() - t0;
    return failed ? -1 : 0;
}

int gradsync_buckets(const GradSync *s) { return s->nb; }
int gradsync_done(GradSync *s) {
    pthread_mutex_lock(&s->mu);
    int d = s->done;
    pthread_mutex_unlock(&s->mu);
    return d;
}
double gradsync_exposed_seconds(const GradSync *s) { return s->exposed; }
