// test: tsan
// dist/gradsync.h on synthetic gradient boundaries (no model code, so it also runs under
// ThreadSanitizer): the bucket plan covers the buffer exactly, cuts only at the boundaries and
// respects the size cap;
// with 1-4 rank threads producing gradients op by op (random delays: the communication thread and
// backward race differently every step), every rank ends with the rank-order mean, bit for bit,
// and the buckets were really reduced while "backward" was still running. A failing collective
// (a rank that disagrees) makes gradsync_wait return -1 on every rank instead of hanging.
#define _GNU_SOURCE
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "dist/gradsync.h"
#include "nn/resnet.h"  // GradReadyFn only: nothing of nn/ is linked
#include "tests/test.h"
#include "util/common.h"
#include "util/rng.h"

// dist/ may not include nn/, so the receiver cannot be declared a GradReadyFn: its shape must match.
_Static_assert(__builtin_types_compatible_p(GradReadyFn, __typeof__(&gradsync_ready)),
               "gradsync_ready is not a GradReadyFn");

// A fake network: the boundaries its backward reports (what nn/resnet.h's resnet_grad_boundaries
// gives for a ResNet), ops of the given sizes in backward order. with_gaps repeats every value
// once: a repeated report is no new boundary.
typedef struct {
    size_t *b;
    size_t n, n_params;
} Net;

static Net fake_net(const size_t *sizes, int n, int with_gaps) {
    Net net = {ct_zalloc(2 * n * sizeof(size_t)), 0, 0};
    size_t off = 0;
    for (int k = 0; k < n; k++) {
        off += sizes[k];
        net.b[net.n++] = off;
        if (with_gaps) net.b[net.n++] = off;
    }
    net.n_params = off;
    return net;
}

static void test_plan(void) {
    size_t sizes[] = {10, 3000, 5, 5, 5, 20000, 1, 1, 700};
    Net m = fake_net(sizes, 9, 1);
    size_t caps[] = {1, 4 * 100, 4 * 3010, 4 * 25000, (size_t)1 << 30};
    for (size_t ci = 0; ci < CT_ARRAY_LEN(caps); ci++) {
        int nb = gradsync_plan(m.b, m.n, m.n_params, caps[ci], NULL, 0);
        Bucket b[64];
        CHECK(nb >= 1 && nb <= 64 && gradsync_plan(m.b, m.n, m.n_params, caps[ci], b, 64) == nb,
              "plan cap %zu: %d buckets", caps[ci], nb);
        size_t at = 0;
        int bad = 0;
        for (int i = 0; i < nb; i++) {
            bad += b[i].lo != at || b[i].hi <= b[i].lo;
            int boundary = 0;  // every cut is a boundary
            for (size_t o = 0; o < m.n; o++) boundary |= m.b[o] == b[i].hi;
            bad += !boundary;
            // Over the cap only when the bucket is a single op's gradients.
            size_t bytes = (b[i].hi - b[i].lo) * sizeof(float);
            if (bytes > caps[ci]) {
                int single = 0;
                size_t prev = 0;
                for (size_t o = 0; o < m.n; o++) {
                    single |= prev == b[i].lo && m.b[o] == b[i].hi;
                    prev = m.b[o];
                }
                bad += !single;
            }
            at = b[i].hi;
        }
        CHECK(!bad && at == m.n_params, "plan cap %zu: %d bad buckets, covers %zu of %zu", caps[ci], bad, at, m.n_params);
        if (caps[ci] == 1) CHECK(nb == 9, "cap 1 byte: %d buckets, want one per op (9)", nb);
        if (caps[ci] == ((size_t)1 << 30)) CHECK(nb == 1, "huge cap: %d buckets", nb);
    }
    free(m.b);
}

typedef struct {
    Comm *c;
    const Net *m;
    float *grads;      // this rank's buffer
    const float *src;  // [steps][n_params] this rank's "backward" output per step
    int steps, disagree;
    int rc_sum;
    int overlapped;    // 1: the first bucket was averaged while "backward" was still running
} Rank;

// End of the first bucket (the test's own plan, same cap).
static size_t first_end_of(const Net *m, size_t cap) {
    Bucket b[64];
    gradsync_plan(m->b, m->n, m->n_params, cap, b, 64);
    return b[0].hi;
}
#define gradsync_first_end(s) first_end_of(m, cap)

static void *rank_main(void *arg) {
    Rank *rk = arg;
    const Net *m = rk->m;
    size_t cap = 4 * 1500;
    GradSync *s = gradsync_create(rk->c, m->b, m->n, m->n_params, rk->grads, rk->disagree ? cap / 2 : cap);
    Rng rng = rng_make(5, comm_rank(rk->c), 0);
    for (int st = 0; st < rk->steps; st++) {
        gradsync_begin(s);
        const float *g = rk->src + (size_t)st * m->n_params;
        size_t prev = 0;
        for (size_t i = 0; i < m->n; i++) {  // backward: write each op's gradients, report them
            const size_t done = m->b[i];
            memcpy(rk->grads + prev, g + prev, (done - prev) * sizeof(float));
            prev = done;
            nap_us(rng_below(&rng, 400));
            gradsync_ready(s, done);
            // Overlap: in the first step, once the first bucket is queued, backward goes on only
            // after it has been averaged. An implementation that reduced everything in
            // gradsync_wait would never get there (10 s, then the check fails).
            if (st == 0 && !rk->disagree && !rk->overlapped && done >= gradsync_first_end(s)) {
                double t0 = ct_now();
                while (gradsync_done(s) < 1 && ct_now() - t0 < 10) nap_us(200);
                rk->overlapped = gradsync_done(s) >= 1;
            }
        }
        rk->rc_sum += gradsync_wait(s);
    }
    gradsync_free(s);
    return NULL;
}

static void test_average(int R, int steps) {
    size_t sizes[] = {10, 3000, 5, 5, 5, 2000, 1, 1, 700, 64, 64, 1000};
    Net net = fake_net(sizes, 12, 1), *m = &net;
    size_t n = m->n_params;
    CommGroup *g = comm_group_create(R, 30);
    Rng rng = rng_make(11, R, 0);
    float *src[8], *grads[8];
    for (int r = 0; r < R; r++) {
        src[r] = ct_alloc(steps * n * sizeof(float));
        grads[r] = ct_alloc(n * sizeof(float));
        for (size_t i = 0; i < steps * n; i++)
            src[r][i] = (rng_uniform(&rng) - 0.5f) * ldexpf(1.f, (int)rng_below(&rng, 30) - 15);
        if (r == 1 && steps > 1) src[r][n + 17] = NAN;  // step 2: one rank's NaN reaches everybody
    }
    Rank rk[8];
    pthread_t th[8];
    for (int r = 0; r < R; r++) {
        rk[r] = (Rank){.c = comm_group_rank(g, r), .m = m, .grads = grads[r], .src = src[r], .steps = steps};
        pthread_create(&th[r], NULL, rank_main, &rk[r]);
    }
    for (int r = 0; r < R; r++) pthread_join(th[r], NULL);
    // The last step's result against the serial rank-order mean.
    int bad = 0, rc = 0;
    const size_t last = (size_t)(steps - 1) * n;
    for (size_t i = 0; i < n; i++) {
        float s = src[0][last + i];
        for (int r = 1; r < R; r++) s += src[r][last + i];
        if (R > 1) s /= (float)R;
        for (int r = 0; r < R; r++) bad += memcmp(&grads[r][i], &s, 4) != 0;
    }
    for (int r = 0; r < R; r++) {
        rc |= rk[r].rc_sum;
        CHECK(rk[r].overlapped, "%d ranks: rank %d's first bucket was not averaged before backward ended", R, r);
    }
    CHECK(rc == 0 && bad == 0, "%d ranks: rc %d, %d elements differ from the rank-order mean", R, rc, bad);
    comm_group_free(g);
    for (int r = 0; r < R; r++) free(src[r]), free(grads[r]);
    free(net.b);
}

// Ranks configured with different bucket sizes (a misconfiguration): every rank's wait fails.
static void test_disagree(void) {
    size_t sizes[] = {500, 500, 500, 500};  // cap 6000 bytes: buckets of 3 ops + 1; 3000: 4 of 1
    Net net = fake_net(sizes, 4, 0), *m = &net;
    CommGroup *g = comm_group_create(2, 30);
    comm_group_set_error_mode(g, 1);
    float *src = ct_zalloc(m->n_params * sizeof(float)), *g0 = ct_alloc(m->n_params * 4), *g1 = ct_alloc(m->n_params * 4);
    Rank rk[2] = {{.c = comm_group_rank(g, 0), .m = m, .grads = g0, .src = src, .steps = 1},
                  {.c = comm_group_rank(g, 1), .m = m, .grads = g1, .src = src, .steps = 1, .disagree = 1}};
    pthread_t th[2];
    for (int r = 0; r < 2; r++) pthread_create(&th[r], NULL, rank_main, &rk[r]);
    for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
    CHECK(rk[0].rc_sum == -1 && rk[1].rc_sum == -1, "bucket mismatch: wait returned %d and %d", rk[0].rc_sum, rk[1].rc_sum);
    CHECK(strstr(comm_error(comm_group_rank(g, 0)), "ranks disagree"), "bucket mismatch says '%s'",
          comm_error(comm_group_rank(g, 0)));
    comm_group_free(g);
    free(src), free(g0), free(g1), free(net.b);
}

int main(void) {
    test_plan();
    test_average(1, 2);
    test_average(2, 3);
    test_average(3, 3);
    test_average(4, 2);
    test_disagree();
    return test_summary("test_gradsync");
}
