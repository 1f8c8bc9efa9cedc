// test: tsan
// dist/comm.h, host backend (ranks are threads): sums are bit-identical to a serial sum in rank
// order whatever the arrival order, broadcasts copy, and the failure modes (ranks that disagree,
// a rank that never comes, a rank that gives up) end every waiting rank quickly with a message
// naming the ranks and the collective, instead of a hang.
#define _GNU_SOURCE
#include <pthread.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dist/comm.h"
#include "tests/test.h"
#include "util/common.h"
#include "util/rng.h"

#define MAX_RANKS 8

// ---------------------------------------------------------------------------------------------
// Sums and broadcasts against a serial reference.
typedef struct {
    Comm *c;
    int rounds;
    size_t n;
    float **f32;     // [rounds * size] inputs, replaced by the results
    double **f64;
    int64_t **i64;
    uint8_t **bytes; // broadcast buffers
    int fails;
} Worker;

static void *sum_worker(void *arg) {
    Worker *w = arg;
    int r = comm_rank(w->c), R = comm_size(w->c);
    Rng jitter = rng_make(99, r, 0);
    for (int k = 0; k < w->rounds; k++) {
        nap_us(rng_below(&jitter, 300));  // a different arrival order every round
        int i = k * R + r;
        w->fails += comm_allreduce_f32(w->c, w->f32[i], w->n) != 0;
        w->fails += comm_allreduce_f64(w->c, w->f64[i], w->n) != 0;
        w->fails += comm_allreduce_i64(w->c, w->i64[i], w->n) != 0;
        w->fails += comm_broadcast(w->c, w->bytes[i], w->n, k % R) != 0;
        w->fails += comm_barrier(w->c) != 0;
    }
    return NULL;
}

static void test_sums(int R, size_t n, int rounds) {
    CommGroup *g = comm_group_create(R, 30);
    Rng rng = rng_make(7, R, n);
    int total = rounds * R;
    float **f32 = ct_alloc(total * sizeof *f32);
    double **f64 = ct_alloc(total * sizeof *f64);
    int64_t **i64 = ct_alloc(total * sizeof *i64);
    uint8_t **by = ct_alloc(total * sizeof *by);
    float *ref32 = ct_alloc((n + 1) * sizeof(float) * rounds);
    double *ref64 = ct_alloc((n + 1) * sizeof(double) * rounds);
    int64_t *refi = ct_alloc((n + 1) * sizeof(int64_t) * rounds);
    uint8_t *refb = ct_alloc((n + 1) * rounds);
    for (int i = 0; i < total; i++) {
        f32[i] = ct_alloc((n + 1) * sizeof(float));
        f64[i] = ct_alloc((n + 1) * sizeof(double));
        i64[i] = ct_alloc((n + 1) * sizeof(int64_t));
        by[i] = ct_alloc(n + 1);
        for (size_t j = 0; j < n; j++) {
            // Magnitudes spread over 2^-20..2^20: the sum order shows in the low bits.
            f32[i][j] = (rng_uniform(&rng) - 0.5f) * ldexpf(1.f, (int)rng_below(&rng, 41) - 20);
            f64[i][j] = (rng_uniform(&rng) - 0.5) * ldexp(1., (int)rng_below(&rng, 81) - 40);
            i64[i][j] = (int64_t)rng_below(&rng, 1u << 30) - (1 << 29);
            by[i][j] = (uint8_t)rng_below(&rng, 256);
        }
    }
    for (int k = 0; k < rounds; k++)
        for (size_t j = 0; j < n; j++) {
            float s = f32[k * R][j];
            double d = f64[k * R][j];
            int64_t q = i64[k * R][j];
            for (int r = 1; r < R; r++) {
                s += f32[k * R + r][j];
                d += f64[k * R + r][j];
                q += i64[k * R + r][j];
            }
            ref32[k * n + j] = s;
            ref64[k * n + j] = d;
            refi[k * n + j] = q;
            refb[k * n + j] = by[k * R + k % R][j];
        }
    Worker w[MAX_RANKS];
    pthread_t th[MAX_RANKS];
    for (int r = 0; r < R; r++) {
        w[r] = (Worker){comm_group_rank(g, r), rounds, n, f32, f64, i64, by, 0};
        pthread_create(&th[r], NULL, sum_worker, &w[r]);
    }
    int fails = 0, bad = 0;
    for (int r = 0; r < R; r++) {
        pthread_join(th[r], NULL);
        fails += w[r].fails;
    }
    for (int k = 0; k < rounds; k++)
        for (int r = 0; r < R; r++) {
            int i = k * R + r;
            bad += memcmp(f32[i], ref32 + k * n, n * sizeof(float)) != 0;
            bad += memcmp(f64[i], ref64 + k * n, n * sizeof(double)) != 0;
            bad += memcmp(i64[i], refi + k * n, n * sizeof(int64_t)) != 0;
            bad += memcmp(by[i], refb + k * n, n) != 0;
        }
    CHECK(fails == 0 && bad == 0, "%d ranks, n=%zu: %d failed calls, %d buffers differ from the rank-order sum", R, n,
          fails, bad);
    for (int i = 0; i < total; i++) free(f32[i]), free(f64[i]), free(i64[i]), free(by[i]);
    free(f32), free(f64), free(i64), free(by), free(ref32), free(ref64), free(refi), free(refb);
    comm_group_free(g);
}

// ---------------------------------------------------------------------------------------------
// Failure modes (error mode 1: the collective returns -1 and comm_error says why).
typedef struct {
    Comm *c;
    int mode;  // what this rank does, see run_failure
    int rc;
    double took;
    char err[512];
} FailWorker;

static void *fail_worker(void *arg) {
    FailWorker *w = arg;
    float buf[64] = {0};
    double t0 = ct_now();
    switch (w->mode) {
    case 0: w->rc = comm_allreduce_f32(w->c, buf, 64); break;      // the normal call
    case 1: w->rc = comm_allreduce_f32(w->c, buf, 65); break;      // a different length
    case 2: w->rc = comm_broadcast(w->c, buf, 64, 0); break;       // a different collective
    case 3: nap_us(1500000); w->rc = comm_allreduce_f32(w->c, buf, 64); break;  // far too late
    case 4: nap_us(100000); comm_abort(w->c, "loader: shard /x/train.shard record 12 is corrupt"); w->rc = -1; break;
    }
    w->took = ct_now() - t0;
    snprintf(w->err, sizeof w->err, "%s", comm_error(w->c));
    return NULL;
}

static void run_failure(int R, const int *modes, double timeout, FailWorker *w) {
    CommGroup *g = comm_group_create(R, timeout);
    comm_group_set_error_mode(g, 1);
    pthread_t th[MAX_RANKS];
    for (int r = 0; r < R; r++) {
        w[r] = (FailWorker){.c = comm_group_rank(g, r), .mode = modes[r]};
        pthread_create(&th[r], NULL, fail_worker, &w[r]);
    }
    for (int r = 0; r < R; r++) pthread_join(th[r], NULL);
    comm_group_free(g);
}

static void test_failures(void) {
    FailWorker w[MAX_RANKS];
    // A rank with another bucket length: every rank fails, the message names both calls.
    int m1[] = {0, 0, 1};
    run_failure(3, m1, 30, w);
    for (int r = 0; r < 3; r++) {
        CHECK(w[r].rc == -1, "length mismatch: rank %d returned %d", r, w[r].rc);
        CHECK(strstr(w[r].err, "rank 0 called allreduce(f32) #1 (64 elements), rank 2 called allreduce(f32) #1 (65 elements)"),
              "length mismatch: rank %d says '%s'", r, w[r].err);
    }
    // A broadcast against an allreduce.
    int m2[] = {0, 2};
    run_failure(2, m2, 30, w);
    CHECK(w[0].rc == -1 && w[1].rc == -1 && strstr(w[0].err, "rank 1 called broadcast #1 (64 bytes from rank 0)"),
          "kind mismatch: '%s'", w[0].err);
    // A rank that never arrives in time: the others stop after the timeout, naming it; the late
    // rank then fails at once instead of waiting for ranks that are gone. (The time bounds only
    // tell "after the timeout, and no hang" apart; they leave room for a loaded machine.)
    int m3[] = {0, 3, 0, 0};
    run_failure(4, m3, 0.4, w);
    for (int r = 0; r < 4; r++) {
        if (r == 1) continue;
        CHECK(w[r].rc == -1 && w[r].took > 0.3 && w[r].took < 3, "timeout: rank %d rc %d after %.2f s", r, w[r].rc,
              w[r].took);
        CHECK(strstr(w[r].err, "for rank(s) 1, which never arrived") && strstr(w[r].err, "allreduce(f32) #1 (64 elements)"),
              "timeout: rank %d says '%s'", r, w[r].err);
    }
    CHECK(w[1].rc == -1 && w[1].took < 5 && strstr(w[1].err, "never arrived"), "late rank: rc %d, %.2f s, '%s'", w[1].rc,
          w[1].took, w[1].err);
    // A rank that gives up: the waiting ranks stop at once (not after the 30 s timeout) with its reason.
    int m4[] = {0, 0, 4};
    run_failure(3, m4, 30, w);
    for (int r = 0; r < 2; r++)
        CHECK(w[r].rc == -1 && w[r].took < 5 && strstr(w[r].err, "rank 2 gave up: loader: shard /x/train.shard record 12"),
              "abort: rank %d rc %d after %.2f s: '%s'", r, w[r].rc, w[r].took, w[r].err);
}

// Default error mode: a disagreement ends the process with exit status 1 and the message.
static void test_dies(void) {
    int pipefd[2];
    if (pipe(pipefd)) ct_die_errno("pipe");
    pid_t pid = fork();
    if (pid == 0) {
        dup2(pipefd[1], 2);
        CommGroup *g = comm_group_create(2, 30);
        FailWorker w[2];
        pthread_t th[2];
        int modes[] = {0, 1};
        for (int r = 0; r < 2; r++) {
            w[r] = (FailWorker){.c = comm_group_rank(g, r), .mode = modes[r]};
            pthread_create(&th[r], NULL, fail_worker, &w[r]);
        }
        for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
        _exit(0);  // not reached: the mismatch dies
    }
    close(pipefd[1]);
    char out[2048] = {0};
    size_t got = 0;
    ssize_t k;
    while (got + 1 < sizeof out && (k = read(pipefd[0], out + got, sizeof out - 1 - got)) > 0) got += (size_t)k;
    close(pipefd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 1, "mismatch in die mode: status %d", status);
    CHECK(strstr(out, "ctrain: error: comm: ranks disagree on a collective"), "mismatch in die mode printed '%s'", out);
}

int main(void) {
    double t0 = ct_now();
    test_sums(1, 100, 3);
    size_t ns[] = {0, 1, 17, 1000, 100003};
    for (size_t i = 0; i < CT_ARRAY_LEN(ns); i++) {
        test_sums(2, ns[i], 6);
        test_sums(3, ns[i], 4);
    }
    test_sums(5, 4099, 8);
    test_sums(8, 33, 20);
    test_failures();
    test_dies();
    printf("test_comm: %.1f s\n", ct_now() - t0);
    return test_summary("test_comm");
}
