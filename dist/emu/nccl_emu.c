// A stand-in libnccl.so.2 for machines without GPUs: the calls ctrain makes (dist/nccl.c), for
// ranks that are threads of one process under the CUDA emulator, where device memory is host
// memory and stream work runs when it is enqueued. Built as build/libnccl_emu.so and loaded with
// NCCL_LIBRARY by the tests, so the NCCL path of the GPU ranks (communicator setup, in-place
// allreduce on the communication stream, ordering against backward) runs in ./build.sh test.
//
// Semantics: ncclAllReduce blocks until every rank of the communicator has called it, then sums
// each element in rank order (ncclAvg: that sum divided by the rank count), like dist/comm.c.
// Only what ctrain uses: float32/float64 sum and average; anything else is ncclInvalidArgument.
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    char internal[128];
} ncclUniqueId;

enum { ok = 0, unhandled_cuda = 1, system_error = 2, internal_error = 3, invalid_argument = 4, invalid_usage = 5 };

typedef struct Group {
    char id[128];
    int nranks, joined;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t gen;
    int arrived;
    const void **send;
    void **recv;
    size_t count;
    int dtype, op;
    struct Group *next;
} Group;

typedef struct {
    Group *g;
    int rank;
} Comm;

static pthread_mutex_t g_reg = PTHREAD_MUTEX_INITIALIZER;
static Group *g_groups;
static uint64_t g_next_id;

int ncclGetVersion(int *v) {
    *v = 22800;
    return ok;
}

int ncclGetUniqueId(ncclUniqueId *id) {
    memset(id, 0, sizeof *id);
    pthread_mutex_lock(&g_reg);
    uint64_t n = ++g_next_id, pid = (uint64_t)getpid();
    pthread_mutex_unlock(&g_reg);
    memcpy(id->internal, "ctrain-nccl-emu", 15);
    memcpy(id->internal + 16, &pid, 8);
    memcpy(id->internal + 24, &n, 8);
    return ok;
}

int ncclGroupStart(void) { return ok; }
int ncclGroupEnd(void) { return ok; }

int ncclCommInitRank(void **comm, int nranks, ncclUniqueId id, int rank) {
    if (nranks < 1 || rank < 0 || rank >= nranks) return invalid_argument;
    pthread_mutex_lock(&g_reg);
    Group *g = g_groups;
    while (g && memcmp(g->id, id.internal, 128)) g = g->next;
    if (!g) {
        g = calloc(1, sizeof *g);
        memcpy(g->id, id.internal, 128);
        g->nranks = nranks;
        pthread_mutex_init(&g->mu, NULL);
        pthread_cond_init(&g->cv, NULL);
        g->send = calloc(nranks, sizeof *g->send);
        g->recv = calloc(nranks, sizeof *g->recv);
        g->next = g_groups;
        g_groups = g;
    }
    int bad = g->nranks != nranks;
    if (!bad) g->joined++;
    pthread_mutex_unlock(&g_reg);
    if (bad) return invalid_usage;
    Comm *c = calloc(1, sizeof *c);
    c->g = g;
    c->rank = rank;
    *comm = c;
    return ok;
}

#define REDUCE(T)                                                              \
    do {                                                                       \
        T *tmp = malloc((count ? count : 1) * sizeof(T));                      \
        for (size_t i = 0; i < count; i++) {                                   \
            T s = ((const T *)g->send[0])[i];                                  \
            for (int r = 1; r < g->nranks; r++) s += ((const T *)g->send[r])[i]; \
            tmp[i] = op == 4 ? s / (T)g->nranks : s;                           \
        }                                                                      \
        for (int r = 0; r < g->nranks; r++) memcpy(g->recv[r], tmp, count * sizeof(T)); \
        free(tmp);                                                             \
    } while (0)

int ncclAllReduce(const void *send, void *recv, size_t count, int dtype, int op, void *comm, void *stream) {
    (void)stream;
    if (!comm || (dtype != 7 && dtype != 8) || (op != 0 && op != 4)) return invalid_argument;
    Comm *c = comm;
    Group *g = c->g;
    pthread_mutex_lock(&g->mu);
    uint64_t my = g->gen;
    if (g->arrived == 0) {
        g->count = count;
        g->dtype = dtype;
        g->op = op;
    } else if (g->count != count || g->dtype != dtype || g->op != op) {
        pthread_mutex_unlock(&g->mu);
        return invalid_usage;  // ranks disagree (real NCCL would hang or corrupt)
    }
    g->send[c->rank] = send;
    g->recv[c->rank] = recv;
    if (++g->arrived == g->nranks) {
        if (dtype == 7) REDUCE(float);
        else REDUCE(double);
        g->arrived = 0;
        g->gen++;
        pthread_cond_broadcast(&g->cv);
    } else {
        while (g->gen == my) pthread_cond_wait(&g->cv, &g->mu);
    }
    pthread_mutex_unlock(&g->mu);
    return ok;
}

int ncclCommDestroy(void *comm) {
    free(comm);
    return ok;
}
const char *ncclGetErrorString(int r) {
    switch (r) {
    case ok: return "no error";
    case invalid_argument: return "invalid argument (nccl_emu: float32/float64 sum/avg only)";
    case invalid_usage: return "invalid usage (ranks disagree)";
    default: return "unknown error";
    }
}
