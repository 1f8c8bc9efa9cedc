// Fault hooks and batch dumps (trainer/faults.h).
#include "trainer/faults.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/common.h"

static void parse_steps(StepSet *set, const char *env) {
    memset(set, 0, sizeof *set);
    const char *s = getenv(env);
    if (!s || !*s) return;
    const char *p = s;
    while (*p) {
        if (set->n == (int)CT_ARRAY_LEN(set->lo)) ct_die("%s: '%s' has more than %d ranges", env, s, (int)CT_ARRAY_LEN(set->lo));
        char *end;
        long long a = strtoll(p, &end, 10), b = a;
        if (end == p) ct_die("%s: '%s' is not a list of steps like 3,5-7", env, s);
        p = end;
        if (*p == '-') { p++; b = strtoll(p, &end, 10); if (end == p) ct_die("%s: bad range in '%s'", env, s); p = end; }
        set->lo[set->n] = a;
        set->hi[set->n++] = b;
        if (*p == ',') p++;
        else if (*p) ct_die("%s: '%s' is not a list of steps like 3,5-7", env, s);
    }
}

void faults_init(Faults *f, int rank, int world, ResNet *m) {
    parse_steps(&f->nan_loss, "CTRAIN_FAULT_NAN_STEPS");
    parse_steps(&f->nan_grad, "CTRAIN_FAULT_NAN_GRAD_STEPS");
    f->stall_rank = -1;
    const char *st = getenv("CTRAIN_FAULT_STALL");
    long long sr, ss;
    char tail;
    if (st && *st) {
        if (sscanf(st, "%lld:%lld%c", &sr, &ss, &tail) != 2) ct_die("CTRAIN_FAULT_STALL: '%s' is not RANK:STEP", st);
        f->stall_rank = (int)sr;
        f->stall_step = ss;
    }
    const char *dv = getenv("CTRAIN_FAULT_DIVERGE");
    if (dv && *dv && ct_parse_int("CTRAIN_FAULT_DIVERGE", dv, 0, 1 << 20) == rank && world > 1) m->params[0] += 1e-3f;
}

int faults_step_in(const StepSet *set, int64_t step) {
    for (int i = 0; i < set->n; i++)
        if (step >= set->lo[i] && step <= set->hi[i]) return 1;
    return 0;
}

void faults_maybe_stall(const Faults *f, int rank, int64_t step) {
    if (rank == f->stall_rank && step == f->stall_step)
        for (;;) pause();  // a hung rank: never returns
}

FILE *dump_open(const char *dir, const char *name, int rank, int world) {
    char path[1100];
    if (world > 1) snprintf(path, sizeof path, "%.900s/%.64s.rank%d.bin", dir, name, rank);
    else snprintf(path, sizeof path, "%.900s/%.64s.bin", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) ct_die_errno("--dump-batches: cannot create %s", path);
    return f;
}

// A dump that silently lost bytes would make the PyTorch comparison compare the wrong batches.
static void dump_write(FILE *f, const char *dir, const void *p, size_t size, size_t n) {
    if (fwrite(p, size, n, f) != n) ct_die_errno("--dump-batches %s: write failed", dir);
}

void dump_batch(FILE *f, const char *dir, const LoaderBatch *b, int hw, int c, int epoch, int64_t step, float lr) {
    int32_t hdr[5] = {b->count, hw, hw, c, epoch};
    const int mixed = b->labels_b && b->mix_lam < 1.0f;
    const float lam = mixed ? b->mix_lam : 1.0f;
    dump_write(f, dir, "BTC2", 1, 4);
    dump_write(f, dir, hdr, 4, 5);
    dump_write(f, dir, &step, 8, 1);
    dump_write(f, dir, &lr, 4, 1);
    dump_write(f, dir, &lam, 4, 1);
    dump_write(f, dir, b->labels, 4, (size_t)b->count);
    dump_write(f, dir, mixed ? b->labels_b : b->labels, 4, (size_t)b->count);
    dump_write(f, dir, b->images, 1, (size_t)b->count * hw * hw * c);
}

void dump_close(FILE *f, const char *dir) {
    if (fclose(f) != 0) ct_die_errno("--dump-batches %s: write failed", dir);
}
