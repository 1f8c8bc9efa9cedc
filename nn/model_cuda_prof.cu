// The GPU executor's per-op profiler (gpu_exec_profile in nn/model_cuda.h): CUDA events recorded
// between the parts of each step of a training pass (Prof in nn/model_cuda_impl.h; a step is
// marked by its graph op, nn/plan.h), summed per step and part, and the report that ranks them by
// the plan's step kinds. Profiling runs every pass eagerly (no CUDA graphs).
#include "nn/model_cuda_impl.h"

void prof_free(Prof *p) {
    if (!p) return;
    for (int i = 0; i < p->cap; i++) cudaEventDestroy(p->ev[i]);
    free(p->ev);
    free(p->what);
    free(p->ms);
    free(p);
}

void gpu_exec_profile(GpuExec *e, const ResNet *m, int on) {
    prof_free(e->prof);
    e->prof = NULL;
    if (!on) return;
    Prof *p = (Prof *)ct_zalloc(sizeof(Prof));
    p->cap = 3 * m->n_ops + 8;
    p->ev = (cudaEvent_t *)ct_zalloc((size_t)p->cap * sizeof(cudaEvent_t));
    p->what = (int *)ct_zalloc((size_t)p->cap * sizeof(int));
    p->ms = (double *)ct_zalloc((size_t)(m->n_ops + 1) * PROF_PARTS * sizeof(double));
    for (int i = 0; i < p->cap; i++) CK(cudaEventCreate(&p->ev[i]));
    e->prof = p;
}


typedef struct {
    double ms;
    int op, part;
} ProfRow;
int prof_row_desc(const void *a, const void *b) {
    const ProfRow *x = (const ProfRow *)a, *y = (const ProfRow *)b;
    return x->ms < y->ms ? 1 : x->ms > y->ms ? -1 : (x->op - y->op) * PROF_PARTS + (x->part - y->part);
}

void gpu_exec_profile_report(const GpuExec *e, const ResNet *m, int top, FILE *f) {
    const Prof *p = e->prof;
    if (!p || !p->passes[0]) {
        fprintf(f, "profile: no training step was timed\n");
        return;
    }
    static const char *part_name[PROF_PARTS] = {"fwd", "wgrad", "dgrad", "bwd"};
    const double steps = (double)p->passes[0];
    // Per step: by the plan's step kind (a block tail is one bn_add step) and pass, and the whole.
    enum { KINDS = PLAN_KINDS + 1 };  // SGD and every PlanKind
    double by[KINDS][PROF_PARTS] = {{0}}, total = 0;
    int nrows = 0;
    ProfRow *rows = (ProfRow *)ct_alloc((size_t)(m->n_ops + 1) * PROF_PARTS * sizeof(ProfRow));
    for (int i = 0; i <= m->n_ops; i++)
        for (int part = 0; part < PROF_PARTS; part++) {
            double ms = p->ms[i * PROF_PARTS + part] / steps;
            if (ms <= 0) continue;
            int kind = i == m->n_ops ? 0 : plan_step_of(e->plan, i)->kind + 1;  // 0: SGD
            if (kind < KINDS) by[kind][part] += ms;
            total += ms;
            rows[nrows++] = (ProfRow){ms, i, part};
        }
    fprintf(f, "profile: %s, %s, %ld steps timed with events between ops (eager launches: no CUDA graphs)\n",
            m->arch, e->dt == CT_BF16 ? "bf16" : "fp32", p->passes[0]);
    fprintf(f, "  %-10s %-6s %10s %7s\n", "kind", "pass", "ms/step", "share");
    for (int k = 0; k < KINDS; k++)
        for (int part = 0; part < PROF_PARTS; part++)
            if (by[k][part] > 0)
                fprintf(f, "  %-10s %-6s %10.3f %6.1f%%\n", k == 0 ? "sgd" : plan_kind_name(k - 1),
                        k == 0 ? "" : part_name[part], by[k][part], 100 * by[k][part] / total);
    fprintf(f, "  %-17s %10.3f  (the GPU time of the step's passes, as the events saw it)\n", "total", total);
    qsort(rows, nrows, sizeof(ProfRow), prof_row_desc);
    if (top > nrows) top = nrows;
    fprintf(f, "  the %d slowest parts:\n", top);
    for (int r = 0; r < top; r++) {
        const ProfRow *w = &rows[r];
        if (w->op == m->n_ops) {
            fprintf(f, "  %8.3f ms %5.1f%%  sgd over %zu params\n", w->ms, 100 * w->ms / total, m->n_params);
            continue;
        }
        const Op *op = &m->ops[w->op];
        const TensorDim *di = &e->mem.dims[op->in];
        char shape[96];
        if (op->kind == OP_CONV)
            snprintf(shape, sizeof shape, "%dx%d/%d %d->%d @%dx%d", op->R, op->S, op->stride, op->C, op->K, di->H, di->W);
        else
            snprintf(shape, sizeof shape, "%d ch @%dx%d", di->C, di->H, di->W);
        fprintf(f, "  %8.3f ms %5.1f%%  %-22s %-9s %-5s %s\n", w->ms, 100 * w->ms / total, op->name,
                plan_kind_name(plan_step_of(e->plan, w->op)->kind), part_name[w->part], shape);
    }
    free(rows);
}

// Marks the start of part `part` of op `op` (op < 0: the end of the pass) when profiling.
void prof_mark(GpuExec *e, int op, int part) {
    Prof *p = e->prof;
    if (!p) return;
    ct_cost_tag(op, part);  // the emulator's cost records (tools/bench_gpu_cost.c) take this label
    if (p->n == p->cap) ct_die("gpu: profiler out of events (%d)", p->cap);
    p->what[p->n] = op < 0 ? -1 : op * PROF_PARTS + part;
    CK(cudaEventRecord(p->ev[p->n++], e->st));
}
// Closes a pass: waits for its last mark and adds each gap to the part it belongs to.
void prof_pass_done(GpuExec *e, int backward) {
    Prof *p = e->prof;
    if (!p || !p->n) return;
    prof_mark(e, -1, 0);
    CK(cudaEventSynchronize(p->ev[p->n - 1]));
    for (int i = 0; i + 1 < p->n; i++) {
        if (p->what[i] < 0) continue;
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, p->ev[i], p->ev[i + 1]));
        p->ms[p->what[i]] += ms;
    }
    p->n = 0;
    p->passes[backward]++;
}
