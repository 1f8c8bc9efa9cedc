// Host communicator for ranks that are threads of one process (see dist/comm.h).
//
// A collective is two meetings. At the first every rank has posted (kind, length, root, buffer);
// each rank checks that all posts agree, then works on its own slice of the result, reading every
// rank's buffer and writing every rank's buffer only inside that slice. The second meeting means
// every slice is done, so no buffer is read or written after its owner returns. A meeting is a
// generation counter under one mutex with a timed wait, which is what lets a late rank be named.

#include "dist/comm.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>

#include "dist/net.h"
#include "util/common.h"

enum { K_SUM_F32, K_SUM_F64, K_SUM_I64, K_BCAST, K_BARRIER };
static const char *kind_name[] = {"allreduce(f32)", "allreduce(f64)", "allreduce(i64)", "broadcast", "barrier"};

typedef struct {
    int kind, root;
    size_t n;  // elements (bytes for a broadcast)
    void *buf;
    uint64_t seq;  // this rank's collective count, 1-based
} Post;

struct Comm {
    CommGroup *g;
    int rank;
    uint64_t seq;
    char err[512];
};

struct CommGroup {
    int size;
    double timeout;
    int return_errors;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t gen;      // meetings completed
    int arrived;       // ranks waiting at the current meeting
    uint64_t *entered; // per rank: meetings entered (names the late ones)
    Post *post[2];     // per rank, by collective parity: a rank that has left collective k may
                       // post k+1 while slower ranks still read k's posts (never k+2: that needs
                       // everybody at k+1's meeting)
    int failed;        // a rank aborted or a wait timed out: every collective fails from now on
    char fail_msg[512];
    Comm *ranks;
    NodeNet *net;      // other nodes (NULL: this process is the whole run)
};

CommGroup *comm_group_create(int size, double timeout_s) {
    if (size < 1) ct_die("comm: group of %d ranks", size);
    CommGroup *g = ct_zalloc(sizeof *g);
    g->size = size;
    g->timeout = timeout_s > 0 ? timeout_s : 1e9;
    pthread_mutex_init(&g->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&g->cv, &ca);
    pthread_condattr_destroy(&ca);
    g->entered = ct_zalloc(size * sizeof(uint64_t));
    g->post[0] = ct_zalloc(size * sizeof(Post));
    g->post[1] = ct_zalloc(size * sizeof(Post));
    g->ranks = ct_zalloc(size * sizeof(Comm));
    for (int r = 0; r < size; r++) g->ranks[r] = (Comm){.g = g, .rank = r};
    return g;
}

Comm *comm_group_rank(CommGroup *g, int r) {
    if (r < 0 || r >= g->size) ct_die("comm: rank %d of a group of %d", r, g->size);
    return &g->ranks[r];
}

void comm_group_free(CommGroup *g) {
    if (!g) return;
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    free(g->entered);
    free(g->post[0]);
    free(g->post[1]);
    free(g->ranks);
    free(g);
}

void comm_group_set_error_mode(CommGroup *g, int return_errors) { g->return_errors = return_errors != 0; }
void comm_group_set_net(CommGroup *g, NodeNet *net) { g->net = net; }
int comm_rank(const Comm *c) { return (c->g->net ? net_rank_offset(c->g->net) : 0) + c->rank; }
int comm_size(const Comm *c) { return c->g->net ? net_world(c->g->net) : c->g->size; }
const char *comm_error(const Comm *c) { return c->err; }

static void describe(char *buf, size_t len, const Post *p) {
    if (p->kind == K_BARRIER) snprintf(buf, len, "barrier #%llu", (unsigned long long)p->seq);
    else if (p->kind == K_BCAST)
        snprintf(buf, len, "broadcast #%llu (%zu bytes from rank %d)", (unsigned long long)p->seq, p->n, p->root);
    else snprintf(buf, len, "%s #%llu (%zu elements)", kind_name[p->kind], (unsigned long long)p->seq, p->n);
}

// Marks the group failed (caller holds the lock) and wakes every waiter.
static void fail_locked(CommGroup *g, const char *msg) {
    if (!g->failed) {
        g->failed = 1;
        snprintf(g->fail_msg, sizeof g->fail_msg, "%s", msg);
    }
    pthread_cond_broadcast(&g->cv);
}

// Reports this rank's error: dies, or stores it and returns -1.
__attribute__((format(printf, 2, 3))) static int error(Comm *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof c->err, fmt, ap);
    va_end(ap);
    if (!c->g->return_errors) ct_die("%s", c->err);
    return -1;
}

// One meeting: returns when every rank has arrived, or -1 on timeout/abort (c->err set).
static int meet(Comm *c) {
    CommGroup *g = c->g;
    pthread_mutex_lock(&g->mu);
    if (g->failed) {
        pthread_mutex_unlock(&g->mu);
        return error(c, "comm: rank %d: %s", c->rank, g->fail_msg);
    }
    uint64_t my_gen = g->gen;
    g->entered[c->rank]++;
    if (++g->arrived == g->size) {
        g->arrived = 0;
        g->gen++;
        pthread_cond_broadcast(&g->cv);
        pthread_mutex_unlock(&g->mu);
        return 0;
    }
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    double secs = g->timeout;
    dl.tv_sec += (time_t)secs;
    dl.tv_nsec += (long)((secs - (double)(time_t)secs) * 1e9);
    if (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000L;
    }
    while (g->gen == my_gen && !g->failed) {
        if (pthread_cond_timedwait(&g->cv, &g->mu, &dl) == ETIMEDOUT && g->gen == my_gen && !g->failed) {
            char late[256] = "", what[160];
            size_t used = 0;
            for (int r = 0; r < g->size && used + 16 < sizeof late; r++)
                if (g->entered[r] < g->entered[c->rank])
                    used += snprintf(late + used, sizeof late - used, "%s%d", used ? ", " : "", r);
            describe(what, sizeof what, &g->post[c->seq & 1][c->rank]);
            char msg[512];
            snprintf(msg, sizeof msg, "rank %d waited %.0f s in %s for rank(s) %s, which never arrived", c->rank,
                     g->timeout, what, late);
            fail_locked(g, msg);
        }
    }
    int ok = g->gen != my_gen;  // completed even if somebody failed right after
    pthread_mutex_unlock(&g->mu);
    if (ok) return 0;
    return error(c, "comm: %s", g->fail_msg);
}

void comm_abort(Comm *c, const char *msg) {
    CommGroup *g = c->g;
    char m[512];
    snprintf(m, sizeof m, "rank %d gave up: %s", c->rank, msg);
    pthread_mutex_lock(&g->mu);
    fail_locked(g, m);
    pthread_mutex_unlock(&g->mu);
}

// The slice [lo, hi) of n elements that rank r works on; 16-element aligned (no false sharing of
// cache lines between ranks writing neighbouring slices of one buffer).
static void slice(size_t n, int r, int size, size_t *lo, size_t *hi) {
    size_t per = (n + size - 1) / size;
    per = (per + 15) & ~(size_t)15;
    *lo = CT_MIN(n, per * (size_t)r);
    *hi = CT_MIN(n, *lo + per);
}

#define SUM_SLICE(T)                                                    \
    do {                                                                \
        for (size_t i = lo; i < hi; i++) {                              \
            T s = ((T *)post[0].buf)[i];                                \
            for (int r = 1; r < g->size; r++) s += ((T *)post[r].buf)[i]; \
            for (int r = 0; r < g->size; r++) ((T *)post[r].buf)[i] = s;  \
        }                                                               \
    } while (0)

static int local_collective(Comm *c, int kind, void *buf, size_t n, int root);

// Across nodes: the ranks of each node combine locally, then local rank 0 combines with the other
// nodes (dist/net.h: node order), then the node's ranks take rank 0's result. Sums come out as
// (node 0's rank-order sum) + (node 1's) + ...: the same bits on every rank of every node.
static int collective(Comm *c, int kind, void *buf, size_t n, int root) {
    CommGroup *g = c->g;
    if (!g->net) return local_collective(c, kind, buf, n, root);
    const int L = g->size, node = net_node(g->net), world = net_world(g->net);
    if (kind == K_BCAST && (root < 0 || root >= world))
        return error(c, "comm: rank %d: broadcast from rank %d of %d", comm_rank(c), root, world);
    const int root_node = kind == K_BCAST ? root / L : 0;
    if (local_collective(c, kind, buf, n, kind == K_BCAST && node == root_node ? root % L : 0)) return -1;
    if (c->rank == 0) {
        char err[400], msg[512];
        int rc = kind == K_BARRIER ? net_barrier(g->net, err, sizeof err)
                 : kind == K_BCAST ? net_broadcast(g->net, buf, n, root_node, err, sizeof err)
                                   : net_allreduce(g->net, kind == K_SUM_F32 ? NET_F32 : kind == K_SUM_F64 ? NET_F64 : NET_I64,
                                                   buf, n, err, sizeof err);
        if (rc) {
            snprintf(msg, sizeof msg, "node %d: %s", node, err);
            pthread_mutex_lock(&g->mu);
            fail_locked(g, msg);
            pthread_mutex_unlock(&g->mu);
            return error(c, "comm: %s", msg);
        }
    }
    if (L == 1) return 0;
    if (meet(c)) return -1;  // rank 0's exchange with the other nodes is done
    if (c->rank != 0 && kind != K_BARRIER) {
        size_t bytes = kind == K_BCAST ? n : n * (kind == K_SUM_F32 ? 4 : 8);
        memcpy(buf, g->post[c->seq & 1][0].buf, bytes);
    }
    return meet(c);
}

static int local_collective(Comm *c, int kind, void *buf, size_t n, int root) {
    CommGroup *g = c->g;
    if (kind == K_BCAST && (root < 0 || root >= g->size))
        return error(c, "comm: rank %d: broadcast from rank %d in a group of %d", c->rank, root, g->size);
    c->seq++;
    Post *post = g->post[c->seq & 1];
    post[c->rank] = (Post){kind, root, n, buf, c->seq};  // read by others only after the meeting
    if (meet(c)) return -1;
    // Every rank checks every post against rank 0's, so all of them find the same disagreement.
    const Post *p0 = &post[0];
    for (int r = 1; r < g->size; r++) {
        const Post *p = &post[r];
        if (p->kind != p0->kind || p->n != p0->n || (p->kind == K_BCAST && p->root != p0->root)) {
            char a[160], b[160];
            describe(a, sizeof a, p0);
            describe(b, sizeof b, p);
            int rc = error(c, "comm: ranks disagree on a collective: rank 0 called %s, rank %d called %s "
                              "(every rank must make the same calls in the same order)", a, r, b);
            return rc;
        }
    }
    if (g->size > 1 && kind != K_BARRIER) {
        size_t lo, hi;
        if (kind == K_BCAST) {
            if (c->rank != root) memcpy(buf, post[root].buf, n);
        } else {
            slice(n, c->rank, g->size, &lo, &hi);
            if (kind == K_SUM_F32) SUM_SLICE(float);
            else if (kind == K_SUM_F64) SUM_SLICE(double);
            else SUM_SLICE(int64_t);
        }
        if (meet(c)) return -1;
    }
    return 0;
}

int comm_allreduce_f32(Comm *c, float *buf, size_t n) { return collective(c, K_SUM_F32, buf, n, 0); }
int comm_allreduce_f64(Comm *c, double *buf, size_t n) { return collective(c, K_SUM_F64, buf, n, 0); }
int comm_allreduce_i64(Comm *c, int64_t *buf, size_t n) { return collective(c, K_SUM_I64, buf, n, 0); }
int comm_broadcast(Comm *c, void *buf, size_t bytes, int root) { return collective(c, K_BCAST, buf, bytes, root); }
int comm_barrier(Comm *c) { return collective(c, K_BARRIER, NULL, 0, 0); }
