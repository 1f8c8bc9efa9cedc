// A stand-in libnccl.so.2 for machines without GPUs: the calls ctrain makes (dist/nccl.c), for
// ranks under the CUDA emulator (build/train-emu), where device memory is host memory. Built as
// build/libnccl_emu.so and loaded with NCCL_LIBRARY by the tests, so the NCCL path of the GPU
// ranks (communicator setup, in-place allreduce on the communication stream, ordering against
// backward) runs in ./build.sh test, with one process or several (--nodes: the ranks of every
// process meet in a POSIX shared-memory segment named after the unique id).
//
// As strict as NCCL where ctrain could go wrong:
//   - a communicator belongs to the device current at ncclCommInitRank; ncclAllReduce refuses a
//     stream or a buffer of another device (NCCL would touch the wrong GPU's memory or fail);
//   - the allreduce is queued on its stream (cudaLaunchHostFunc): it runs when the emulator's
//     schedule or a dependency runs that stream (CTRAIN_EMU_SCHEDULE, docs/EMULATION.md), not when
//     it is called, so a missing wait before it or after it shows.
// It finds the emulator's runtime in the process (dlsym): outside build/train-emu it refuses.
//
// Semantics: an allreduce blocks its stream until every rank of the communicator has reached it,
// then sums each element in rank order (ncclAvg: that sum divided by the rank count), like
// dist/comm.c. Only what ctrain uses: float32/float64 sum and average; anything else is
// ncclInvalidArgument.
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    char internal[128];
} ncclUniqueId;

enum { ok = 0, unhandled_cuda = 1, system_error = 2, internal_error = 3, invalid_argument = 4, invalid_usage = 5 };

// The emulator's runtime (kernels/emu/runtime.cpp), CUDA's signatures.
typedef struct {
    int type, device;
    void *device_pointer, *host_pointer;
} PointerAttributes;
static int (*cuda_get_device)(int *);
static int (*cuda_stream_get_device)(void *, int *);
static int (*cuda_pointer_attributes)(PointerAttributes *, const void *);
static int (*cuda_launch_host_func)(void *, void (*)(void *), void *);

// Every rank's send buffer gets a slot in the segment, and the sum one more; the file is sparse,
// so only the bytes used take memory.
#define SLOT_BYTES ((size_t)256 << 20)

typedef struct {
    atomic_int state;  // 0 new, 1 being initialised, 2 ready
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int nranks, joined, arrived;
    uint64_t gen;
    size_t count;
    int dtype, op;
} Header;

typedef struct {
    Header *h;
    unsigned char *slots;
    size_t map_bytes;
    int rank, nranks, device;
} Comm;

typedef struct {
    Comm *c;
    const void *send;
    void *recv;
    size_t count;
    int dtype, op;
} Job;

static pthread_mutex_t g_reg = PTHREAD_MUTEX_INITIALIZER;
static uint64_t g_next_id;

int ncclGetVersion(int *v) {
    *v = 22800;
    return ok;
}

int ncclGetUniqueId(ncclUniqueId *id) {
    memset(id, 0, sizeof *id);
    pthread_mutex_lock(&g_reg);
    uint64_t n = ++g_next_id;
    pthread_mutex_unlock(&g_reg);
    snprintf(id->internal, sizeof id->internal, "/ctrain-nccl-emu-%ld-%llu-%ld", (long)getpid(), (unsigned long long)n,
             (long)time(NULL));
    return ok;
}

int ncclGroupStart(void) { return ok; }
int ncclGroupEnd(void) { return ok; }

static int find_runtime(void) {
    if (cuda_launch_host_func) return 0;
    cuda_get_device = (int (*)(int *))dlsym(RTLD_DEFAULT, "cudaGetDevice");
    cuda_stream_get_device = (int (*)(void *, int *))dlsym(RTLD_DEFAULT, "cudaStreamGetDevice");
    cuda_pointer_attributes = (int (*)(PointerAttributes *, const void *))dlsym(RTLD_DEFAULT, "cudaPointerGetAttributes");
    cuda_launch_host_func = (int (*)(void *, void (*)(void *), void *))dlsym(RTLD_DEFAULT, "cudaLaunchHostFunc");
    if (cuda_get_device && cuda_stream_get_device && cuda_pointer_attributes && cuda_launch_host_func) return 0;
    cuda_launch_host_func = NULL;
    fprintf(stderr, "nccl_emu: the CUDA emulator's runtime is not in this process (use build/train-emu, linked with "
                    "-rdynamic)\n");
    return -1;
}

int ncclCommInitRank(void **comm, int nranks, ncclUniqueId id, int rank) {
    if (nranks < 1 || rank < 0 || rank >= nranks) return invalid_argument;
    if (find_runtime()) return system_error;
    int device = -1;
    if (cuda_get_device(&device)) return unhandled_cuda;
    char name[129];
    memcpy(name, id.internal, 128);
    name[128] = 0;
    if (name[0] != '/') return invalid_argument;
    int fd = shm_open(name, O_CREAT | O_RDWR, 0600);
    if (fd < 0) {
        fprintf(stderr, "nccl_emu: shm_open %s: %s\n", name, strerror(errno));
        return system_error;
    }
    size_t map_bytes = 4096 + (size_t)(nranks + 1) * SLOT_BYTES;
    struct stat st;
    if (fstat(fd, &st) || ((size_t)st.st_size < map_bytes && ftruncate(fd, (off_t)map_bytes))) {
        fprintf(stderr, "nccl_emu: sizing %s: %s\n", name, strerror(errno));
        close(fd);
        return system_error;
    }
    void *p = mmap(NULL, map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return system_error;
    Header *h = p;
    int expect = 0;
    if (atomic_compare_exchange_strong(&h->state, &expect, 1)) {
        pthread_mutexattr_t ma;
        pthread_mutexattr_init(&ma);
        pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
        pthread_mutex_init(&h->mu, &ma);
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&h->cv, &ca);
        h->nranks = nranks;
        atomic_store(&h->state, 2);
    }
    while (atomic_load(&h->state) != 2) usleep(100);
    pthread_mutex_lock(&h->mu);
    int bad = h->nranks != nranks;
    if (!bad && ++h->joined == nranks) shm_unlink(name);  // everyone has it mapped
    pthread_mutex_unlock(&h->mu);
    if (bad) {
        munmap(p, map_bytes);
        return invalid_usage;
    }
    Comm *c = calloc(1, sizeof *c);
    c->h = h;
    c->slots = (unsigned char *)p + 4096;
    c->map_bytes = map_bytes;
    c->rank = rank;
    c->nranks = nranks;
    c->device = device;
    *comm = c;
    return ok;
}

#define REDUCE(T)                                                                   \
    do {                                                                            \
        T *out = (T *)(c->slots + (size_t)n * SLOT_BYTES);                          \
        for (size_t i = 0; i < h->count; i++) {                                     \
            T s = ((const T *)c->slots)[i];                                         \
            for (int r = 1; r < n; r++) s += ((const T *)(c->slots + (size_t)r * SLOT_BYTES))[i]; \
            out[i] = h->op == 4 ? s / (T)n : s;                                     \
        }                                                                           \
    } while (0)

// The allreduce as its stream runs it.
static void run_allreduce(void *arg) {
    Job *j = arg;
    Comm *c = j->c;
    Header *h = c->h;
    const int n = c->nranks;
    size_t bytes = j->count * (j->dtype == 7 ? 4 : 8);
    pthread_mutex_lock(&h->mu);
    uint64_t my = h->gen;
    if (h->arrived == 0) {
        h->count = j->count;
        h->dtype = j->dtype;
        h->op = j->op;
    } else if (h->count != j->count || h->dtype != j->dtype || h->op != j->op) {
        // Real NCCL would hang or corrupt memory.
        fprintf(stderr, "nccl_emu: rank %d's allreduce (%zu elements, type %d, op %d) does not match the other ranks' "
                        "(%zu, %d, %d): the ranks disagree on the gradient buckets; aborting\n",
                c->rank, j->count, j->dtype, j->op, h->count, h->dtype, h->op);
        abort();
    }
    memcpy(c->slots + (size_t)c->rank * SLOT_BYTES, j->send, bytes);
    if (++h->arrived == n) {
        if (j->dtype == 7) REDUCE(float);
        else REDUCE(double);
        h->arrived = 0;
        h->gen++;
        pthread_cond_broadcast(&h->cv);
    } else {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        // A peer that died (its process ended with an error) must not hang the test: NCCL_EMU_TIMEOUT
        // seconds, 120 by default.
        const char *t = getenv("NCCL_EMU_TIMEOUT");
        int limit = t && atoi(t) > 0 ? atoi(t) : 120;
        until.tv_sec += limit;
        while (h->gen == my)
            if (pthread_cond_timedwait(&h->cv, &h->mu, &until) == ETIMEDOUT) {
                fprintf(stderr, "nccl_emu: rank %d waited %d s in an allreduce for the other ranks; aborting\n", c->rank,
                        limit);
                abort();
            }
    }
    // Under the lock: nobody starts the next allreduce before every rank has its result.
    memcpy(j->recv, c->slots + (size_t)n * SLOT_BYTES, bytes);
    pthread_mutex_unlock(&h->mu);
    free(j);
}

// The device a buffer lives on, or -1 when it is not device memory.
static int buffer_device(const void *p) {
    PointerAttributes a;
    if (cuda_pointer_attributes(&a, p)) return -1;
    return a.type == 2 ? a.device : -1;
}

int ncclAllReduce(const void *send, void *recv, size_t count, int dtype, int op, void *comm, void *stream) {
    if (!comm || (dtype != 7 && dtype != 8) || (op != 0 && op != 4)) return invalid_argument;
    Comm *c = comm;
    if (count * (dtype == 7 ? 4 : 8) > SLOT_BYTES) {
        fprintf(stderr, "nccl_emu: an allreduce of %zu elements is more than the stand-in's %zu MiB per rank\n", count,
                SLOT_BYTES >> 20);
        return invalid_argument;
    }
    int sdev = -1;
    if (cuda_stream_get_device(stream, &sdev)) return unhandled_cuda;
    int bsend = buffer_device(send), brecv = buffer_device(recv);
    if (sdev != c->device || bsend != c->device || brecv != c->device) {
        fprintf(stderr, "nccl_emu: rank %d's communicator belongs to device %d, but its allreduce got a stream of "
                        "device %d and buffers on device %d (send) and %d (receive; -1: not device memory): NCCL "
                        "would run on the wrong GPU; select each rank's own device before ncclCommInitRank\n",
                c->rank, c->device, sdev, bsend, brecv);
        return invalid_usage;
    }
    Job *j = malloc(sizeof *j);
    *j = (Job){c, send, recv, count, dtype, op};
    if (cuda_launch_host_func(stream, run_allreduce, j)) {
        free(j);
        return unhandled_cuda;
    }
    return ok;
}

int ncclCommDestroy(void *comm) {
    Comm *c = comm;
    if (!c) return ok;
    munmap(c->h, c->map_bytes);
    free(c);
    return ok;
}
const char *ncclGetErrorString(int r) {
    switch (r) {
    case ok: return "no error";
    case unhandled_cuda: return "unhandled cuda error (nccl_emu: the emulator refused a call)";
    case system_error: return "unhandled system error (nccl_emu: see stderr)";
    case invalid_argument: return "invalid argument (nccl_emu: float32/float64 sum/avg only)";
    case invalid_usage: return "invalid usage (nccl_emu: ranks disagree, or devices do not match: see stderr)";
    default: return "unknown error";
    }
}
