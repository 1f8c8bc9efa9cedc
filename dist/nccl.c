// NCCL through dlopen (see dist/nccl.h).
#include "dist/nccl.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// nccl.h 2.x ABI, the parts used here.
enum { NCCL_SUCCESS = 0 };
enum { NCCL_FLOAT32 = 7 };
enum { NCCL_AVG = 4 };
typedef int nccl_result;
typedef void *nccl_comm;

struct NcclLib {
    void *so;
    char desc[600];
    int (*get_version)(int *);
    nccl_result (*get_unique_id)(NcclId *);
    nccl_result (*comm_init_rank)(nccl_comm *, int, NcclId, int);
    nccl_result (*group_start)(void);
    nccl_result (*group_end)(void);
    nccl_result (*all_reduce)(const void *, void *, size_t, int, int, nccl_comm, void *);
    nccl_result (*comm_destroy)(nccl_comm);
    const char *(*get_error_string)(nccl_result);
};

static NcclLib g_lib;
static const NcclLib *g_loaded;
static char g_load_err[700];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void load_once(void) {
    const char *name = getenv("NCCL_LIBRARY");
    if (!name || !*name) name = "libnccl.so.2";
    void *so = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!so) {
        snprintf(g_load_err, sizeof g_load_err, "cannot load NCCL (%s): %s; install NCCL or point NCCL_LIBRARY at libnccl.so.2",
                 name, dlerror());
        return;
    }
    NcclLib *l = &g_lib;
    l->so = so;
    struct {
        void **slot;
        const char *sym;
    } syms[] = {
        {(void **)&l->get_version, "ncclGetVersion"},        {(void **)&l->get_unique_id, "ncclGetUniqueId"},
        {(void **)&l->comm_init_rank, "ncclCommInitRank"},   {(void **)&l->group_start, "ncclGroupStart"},
        {(void **)&l->group_end, "ncclGroupEnd"},            {(void **)&l->all_reduce, "ncclAllReduce"},
        {(void **)&l->comm_destroy, "ncclCommDestroy"},
        {(void **)&l->get_error_string, "ncclGetErrorString"},
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        *syms[i].slot = dlsym(so, syms[i].sym);
        if (!*syms[i].slot) {
            snprintf(g_load_err, sizeof g_load_err, "%s has no %s: not an NCCL 2 library", name, syms[i].sym);
            dlclose(so);
            return;
        }
    }
    int v = 0;
    l->get_version(&v);
    // NCCL >= 2.9 encodes major*10000 + minor*100 + patch; ncclAvg needs 2.10.
    if (v < 21000) {
        snprintf(g_load_err, sizeof g_load_err, "%s is NCCL version code %d; ctrain needs NCCL >= 2.10 (ncclAvg)", name, v);
        dlclose(so);
        return;
    }
    snprintf(l->desc, sizeof l->desc, "%d.%d.%d (%s)", v / 10000, v / 100 % 100, v % 100, name);
    g_loaded = l;
}

const NcclLib *nccl_load(char *err, size_t errlen) {
    pthread_once(&g_once, load_once);
    if (!g_loaded) snprintf(err, errlen, "%s", g_load_err);
    return g_loaded;
}

const char *nccl_describe(const NcclLib *lib) { return lib->desc; }

static int check(const NcclLib *lib, nccl_result r, const char *call, char *err, size_t errlen) {
    if (r == NCCL_SUCCESS) return 0;
    snprintf(err, errlen, "%s: %s (NCCL error %d)", call, lib->get_error_string(r), r);
    return -1;
}

int nccl_unique_id(const NcclLib *lib, NcclId *id, char *err, size_t errlen) {
    return check(lib, lib->get_unique_id(id), "ncclGetUniqueId", err, errlen);
}

int nccl_init_ranks(const NcclLib *lib, void **comms, int n_local, int world, const int *ranks, const NcclId *id,
                    void (*set_device)(void *ctx, int local_rank), void *ctx, char *err, size_t errlen) {
    if (check(lib, lib->group_start(), "ncclGroupStart", err, errlen)) return -1;
    int rc = 0;
    for (int k = 0; k < n_local && !rc; k++) {
        set_device(ctx, k);
        char call[64];
        snprintf(call, sizeof call, "ncclCommInitRank(rank %d of %d)", ranks[k], world);
        rc = check(lib, lib->comm_init_rank((nccl_comm *)&comms[k], world, *id, ranks[k]), call, err, errlen);
    }
    nccl_result e = lib->group_end();
    if (rc) return -1;
    return check(lib, e, "ncclGroupEnd (communicator setup)", err, errlen);
}

int nccl_allreduce_mean_f32(const NcclLib *lib, void *comm, float *buf, size_t n, void *stream, char *err,
                            size_t errlen) {
    return check(lib, lib->all_reduce(buf, buf, n, NCCL_FLOAT32, NCCL_AVG, comm, stream), "ncclAllReduce", err, errlen);
}

void nccl_destroy(const NcclLib *lib, void *comm) {
    if (comm) lib->comm_destroy(comm);
}
