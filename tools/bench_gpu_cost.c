// Exact cost accounting of one training step, no GPU needed: runs forward, softmax cross-entropy,
// backward and an SGD step (bf16, train's SGD defaults) of ARCH at SIZE x SIZE and BATCH through
// the GPU executor on the EMULATED kernels with the emulator's counters on (kernels/emu/cost.cpp),
// and prints what each kernel launch asked of the machine, totals per op kind and pass, per image
// figures and a roofline time for an H100 SXM (a model, not a measurement).
//   build/emu-tools/bench_gpu_cost ARCH SIZE BATCH [--classes N] [--res FILE] [--launches]
//                                  [--verify] [--quiet] [--target-batch T] [--fit-batch B2]
//                                  [--check-batch B3]
// --res FILE: per-kernel registers/spills/static shared memory from tools/sass_report.sh --table
//   (nvcc's sm_90 build), joined on the mangled kernel symbol; without it those columns are '-'.
// --launches: one line per kernel launch (else only the tables).
// --verify: first runs the same step with the counters off on a fresh executor and checks that
//   counting changed no bit of the loss or of the gradients (prints "verify: ... identical").
// --quiet: no per-op FLOP table.
// --target-batch T (default 256; 0: off): per-image compulsory bytes and launches at batch T, which
//   the emulator cannot afford at 224, extrapolated EXACTLY from a second counted step at batch B2
//   (--fit-batch, default BATCH - 1, or 2 when BATCH is 1). Per op and pass, compulsory bytes are
//   a + b*B + W(B): W is the workspace the kernels' batch-dependent plans touch (BN's per-chunk
//   partial sums: 16 bytes per chunk and channel, written by bn_sums_k and read by its finish
//   kernel; a weight gradient's split-K partials: splits x M x N fp32, written by the GEMM and read
//   by reduce_splits_k, one launch more; the conv epilogue's BN tile statistics, 8 bytes per
//   128-row tile and channel; the backward's sums from a data-gradient epilogue (tiles per stride
//   phase) or the stem's max pool), priced by the plans themselves (batchnorm_gpu_chunks,
//   conv2d_gpu_wgrad_splits; each run checks them against the launches' grids); the rest is linear
//   in the batch (activations and their gradients: b per image; weights, their gradients, per-channel
//   vectors, optimizer state: a per step) and is fitted from the two runs. --check-batch B3 counts a
//   third step and requires the prediction to equal its count byte for byte in every op and pass.
// What is counted (exact, per launch): grid, block, dynamic shared memory, warp-level mma.sync
// m16n8k16 bf16 instructions (x 4096 FLOPs), global bytes requested through cp.async and
// kernels/act.cuh's ct_ld/ct_st/ct_ldv/ct_stv, and the distinct bytes those requests touched
// (reads and writes apart: "compulsory", what a perfect cache would still move), and device-to-
// device copies and memsets as records of their own (grid 0x0x0). NOT counted: plain pointer
// dereferences in kernels (today only kernels/loss.cu's); the `cov` column says NO for a launch that made no counted access at
// all (all its traffic is plain dereferences).
// build.sh links it twice; the build against the real kernels (build/tools/) has no counters and
// says so.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "nn/layers.h"
#include "nn/model_cuda.h"
#include "nn/plan.h"
#include "nn/resnet.h"
#include "nn/sgd.h"
#include "util/common.h"
#include "util/rng.h"
#include "tools/exec_env.h"

// H100 SXM peaks the roofline model assumes (dense, no sparsity).
#define PEAK_WGMMA 989e12   // bf16 tensor FLOP/s with wgmma (NVIDIA's datasheet figure)
#define PEAK_MMA_SYNC 660e12 // mma.sync: an assumption (~2/3 of wgmma, the figure often quoted)
#define PEAK_HBM 3.35e12    // bytes/s, HBM3

// The executor's profiler marks parts of an op with these (nn/model_cuda_impl.h, enum PROF_*).
static const char *part_name[4] = {"fwd", "wgrad", "dgrad", "bwd"};

typedef struct {
    char symbol[160];
    int regs, spill_st, spill_ld, static_smem;
} Res;
static Res *res_tab;
static int n_res;

static void load_res(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) ct_die("bench_gpu_cost: cannot open --res file '%s'", path);
    char line[512];
    int cap = 0;
    while (fgets(line, sizeof line, f)) {
        Res r;
        if (line[0] == '#') continue;
        if (sscanf(line, "%159s %d %d %d %d", r.symbol, &r.regs, &r.spill_st, &r.spill_ld, &r.static_smem) != 5) continue;
        if (n_res == cap) {
            cap = cap ? 2 * cap : 64;
            res_tab = realloc(res_tab, (size_t)cap * sizeof(Res));
            if (!res_tab) ct_die("bench_gpu_cost: out of memory");
        }
        res_tab[n_res++] = r;
    }
    fclose(f);
}
static const Res *find_res(const char *symbol) {
    for (int i = 0; symbol[0] && i < n_res; i++)
        if (!strcmp(res_tab[i].symbol, symbol)) return &res_tab[i];
    return NULL;
}

// Row of the per-kind table: 0 = other (input normalisation, loss), 1 = SGD, 2 + the kind of the
// plan step that ran the op (nn/plan.h: a block tail is one "bn_add" step, a BN applied by the op
// after it a "bn_stats" one), so the table names what the executor launched.
enum { ROW_OTHER = 0, ROW_SGD = 1, ROW_KIND0 = 2, ROWS = ROW_KIND0 + PLAN_KINDS };
// The execution options of every executor this tool makes, and the plan they give.
static ExecOptions opts_;
static ExecPlan *plan_;
static int row_of(const ResNet *m, int op) {
    return op < 0 || op > m->n_ops ? ROW_OTHER : op == m->n_ops ? ROW_SGD : ROW_KIND0 + plan_step_of(plan_, op)->kind;
}
static const char *row_name(int k) {
    return k == ROW_OTHER ? "other" : k == ROW_SGD ? "sgd" : plan_kind_name(k - ROW_KIND0);
}

typedef struct {
    double mma, rd, wr, rdu, wru, launches, t_model;
} Sum;
static void add(Sum *s, const CtCostLaunch *c, double t) {
    s->mma += (double)c->mma, s->rd += (double)c->rd_bytes, s->wr += (double)c->wr_bytes;
    s->rdu += (double)c->rd_unique, s->wru += (double)c->wr_unique, s->launches += 1, s->t_model += t;
}
// Per-launch roofline (a model): the larger of its tensor time at mma.sync's assumed peak and its
// compulsory bytes at HBM bandwidth.
static double roofline(const CtCostLaunch *c) {
    double tf = (double)c->mma * 4096.0 / PEAK_MMA_SYNC;
    double tb = (double)(c->rd_unique + c->wr_unique) / PEAK_HBM;
    return tf > tb ? tf : tb;
}

static void usage(const char *prog) {
    fprintf(stderr,
            "usage: %s ARCH SIZE BATCH [--classes N] [--res FILE] [--launches] [--verify] [--quiet] [--blurpool]\n"
            "       [--target-batch T] [--fit-batch B2] [--check-batch B3]\n",
            prog);
    exit(2);
}

// The step's input: random pixels and labels from a fixed key (the same for every batch size's
// first images).
static void make_batch(int N, int S, int classes, uint8_t **x, int32_t **labels) {
    const size_t nbytes = (size_t)N * S * S * 3;
    *x = ct_alloc(nbytes);
    *labels = ct_alloc((size_t)N * sizeof(int32_t));
    Rng r = rng_make(7, 0, 0);
    for (size_t i = 0; i < nbytes; i++) (*x)[i] = (uint8_t)(rng_u32(&r) & 0xff);
    for (int i = 0; i < N; i++) (*labels)[i] = (int32_t)rng_below(&r, (uint32_t)classes);
}

static const float mean_rgb[3] = {0.485f, 0.456f, 0.406f}, std_rgb[3] = {0.229f, 0.224f, 0.225f};

// One counted training step (forward, loss, backward, SGD) at batch N on a fresh executor; returns
// its launch records (n in *nl).
static CtCostLaunch *count_step(ResNet *m, int S, int N, int classes, float *loss, float *grads, double *wall,
                                size_t *nl) {
    uint8_t *x;
    int32_t *labels;
    make_batch(N, S, classes, &x, &labels);
    const SgdConfig cfg = {.momentum = 0.9f, .weight_decay = 1e-4f};
    // Eager launches (graphs off) with the profiler's marks: each launch gets its op and pass.
    GpuExec *e = gpu_exec_create_opts(m, CT_BF16, &opts_);
    gpu_exec_use_graphs(e, 0);
    gpu_exec_profile(e, m, 1);
    SgdState st;
    sgd_init(&st, m->n_params);
    const double t0 = ct_now();
    ct_cost_enable(1);
    *loss = gpu_train_step_u8(e, m, x, labels, N, S, S, mean_rgb, std_rgb, 0.0f, grads, NULL);
    gpu_sgd_step(e, m, &cfg, &st, 0.1f);
    ct_cost_enable(0);
    *wall = ct_now() - t0;
    *nl = ct_cost_count();
    CtCostLaunch *rec = ct_alloc((*nl ? *nl : 1) * sizeof(CtCostLaunch));
    for (size_t i = 0; i < *nl; i++) ct_cost_get(i, &rec[i]);
    gpu_exec_free(e);
    sgd_free(&st);
    free(x), free(labels);
    return rec;
}

// Extrapolation to another batch. Groups: one per op and pass (op -1: input normalisation and
// loss; op n_ops: SGD), index (op + 1) * 4 + pass.
typedef struct {
    double rd, wr, l;     // compulsory bytes read, written, and launches
    double wrd, wwr, wl;  // of those, the plan-dependent workspace's (model W)
} Group;
static int group_of(const ResNet *m, const CtCostLaunch *c) {
    int op = c->tag_op < 0 || c->tag_op > m->n_ops ? -1 : c->tag_op;
    int part = op < 0 || op == m->n_ops || c->tag_part < 0 || c->tag_part > 3 ? 0 : c->tag_part;
    return (op + 1) * 4 + part;
}
// Adds W of one launch at batch B to its group: BN's partial sums (bn_sums_k writes them, its finish
// kernel reads them); a weight gradient's split-K partials and their reduction (one launch more),
// counted at the GEMM that plans them; a convolution epilogue's BN tile statistics (written by the
// conv forward before the BN, read by bn_finish_tiles_k: 8 bytes per 128-row tile and channel),
// counted at the finish kernel for both groups; likewise the backward's sums from the next conv's
// data-gradient epilogue (bn_finish_grad_tiles_k). *bad counts launches whose grid disagrees with
// the plan (pass NULL at a batch that did not run).
static void add_workspace(const ResNet *m, const TensorDim *dims, const CtCostLaunch *c, int B, Group *g, int *bad) {
    int op = c->tag_op;
    if (op < 0 || op >= m->n_ops) return;
    const Op *o = &m->ops[op];
    Group *x = &g[group_of(m, c)];
    if (strstr(c->name, "bn_sums_k")) {
        const TensorDim *d = &dims[o->in];
        int chunks = batchnorm_gpu_chunks(B * d->H * d->W);
        if (bad && (int)c->grid[1] != chunks) {
            fprintf(stderr, "bench_gpu_cost: %s: bn_sums_k grid.y %u, plan %d chunks\n", o->name, c->grid[1], chunks);
            (*bad)++;
        }
        x->wrd += 16.0 * chunks * d->C, x->wwr += 16.0 * chunks * d->C;
    } else if (strstr(c->name, "bn_finish_tiles_k") && op > 0) {
        const TensorDim *d = &dims[o->in];
        double bytes = 8.0 * ((B * d->H * d->W + 127) / 128) * d->C;
        x->wrd += bytes;
        g[op * 4].wwr += bytes;  // the conv before it (op - 1), forward
    } else if (strstr(c->name, "bn_finish_grad_tiles_k") && op + 1 < m->n_ops) {
        // The backward's sums, 8 bytes per tile and channel, written by the step the plan gave the
        // BN's reductions (bwd_bn, bwd_tail): a conv's data-gradient epilogue (part 2:
        // PROF_BWD_DATA; tiles per stride phase) or the stem's max pool (its backward, part 3:
        // PROF_BWD; 128-row tiles).
        const TensorDim *d = &dims[o->in];
        int w = -1;
        for (int k = 0; k < plan_->n_steps; k++)
            if (plan_->steps[k].bwd_bn == op || plan_->steps[k].bwd_tail == op) w = plan_->steps[k].op;
        if (w < 0) ct_die("bench_gpu_cost: %s's backward sums came from a data gradient the plan does not fuse", o->name);
        const Op *r = &m->ops[w];
        int tiles = (B * d->H * d->W + 127) / 128, part = 3;
        if (r->kind == OP_CONV) {
            const TensorDim *ri = &dims[r->in];
            ConvShape s = conv_shape(B, ri->H, ri->W, ri->C, r->K, r->R, r->S, r->stride, r->pad);
            tiles = conv2d_gpu_dgrad_bn_tiles(&s);
            part = 2;
        }
        double bytes = 8.0 * tiles * d->C;
        x->wrd += bytes;
        g[(w + 1) * 4 + part].wwr += bytes;
    } else if (o->kind == OP_CONV && (strstr(c->name, "gemm_tc2_k<2") || strstr(c->name, "gemm_tc_k<2") ||
                                      strstr(c->name, "conv_wgmma_bwd_k<2"))) {
        const TensorDim *d = &dims[o->out];
        int cin = o->in == 0 && o->C < 8 ? 8 : o->C;  // the executor pads a thin stem to 8 channels
        int M = o->K, N = o->R * o->S * cin, K = B * d->H * d->W;
        int algo = strstr(c->name, "gemm_tc_k") ? CT_CONV_TC : strstr(c->name, "conv_wgmma") ? CT_CONV_WGMMA : CT_CONV_TC2;
        int s = conv2d_gpu_wgrad_splits(algo, M, N, K);
        if (bad && (int)c->grid[2] != s) {
            fprintf(stderr, "bench_gpu_cost: %s: weight gradient grid.z %u, plan %d splits\n", o->name, c->grid[2], s);
            (*bad)++;
        }
        if (s > 1) x->wrd += 4.0 * s * M * N, x->wwr += 4.0 * s * M * N, x->wl += 1;
    }
}
static Group *group_costs(const ResNet *m, const TensorDim *dims, const CtCostLaunch *rec, size_t nl, int B,
                          int *bad) {
    Group *g = calloc((size_t)(m->n_ops + 2) * 4, sizeof(Group));
    for (size_t i = 0; i < nl; i++) {
        Group *x = &g[group_of(m, &rec[i])];
        x->rd += (double)rec[i].rd_unique, x->wr += (double)rec[i].wr_unique, x->l += 1;
        add_workspace(m, dims, &rec[i], B, g, bad);
    }
    return g;
}
// Fit per group from batches B1, B2: (measured - W) = a + b*B, for reads, writes and launches.
typedef struct {
    double a[3], b[3];
} Fit;
static Fit *fit_groups(int ng, const Group *g1, int B1, const Group *g2, int B2) {
    Fit *f = calloc((size_t)ng, sizeof(Fit));
    for (int i = 0; i < ng; i++) {
        double y1[3] = {g1[i].rd - g1[i].wrd, g1[i].wr - g1[i].wwr, g1[i].l - g1[i].wl};
        double y2[3] = {g2[i].rd - g2[i].wrd, g2[i].wr - g2[i].wwr, g2[i].l - g2[i].wl};
        for (int k = 0; k < 3; k++) {
            f[i].b[k] = (y1[k] - y2[k]) / (B1 - B2);
            f[i].a[k] = y1[k] - f[i].b[k] * B1;
        }
    }
    return f;
}
// The prediction at batch T: the fit plus the workspace of the first run's launches re-planned at T.
static Group *predict_groups(const ResNet *m, const TensorDim *dims, const CtCostLaunch *rec, size_t nl,
                             const Fit *f, int ng, int T) {
    Group *p = calloc((size_t)ng, sizeof(Group));
    for (size_t i = 0; i < nl; i++) add_workspace(m, dims, &rec[i], T, p, NULL);
    for (int i = 0; i < ng; i++) {
        p[i].rd = f[i].a[0] + f[i].b[0] * T + p[i].wrd;
        p[i].wr = f[i].a[1] + f[i].b[1] * T + p[i].wwr;
        p[i].l = f[i].a[2] + f[i].b[2] * T + p[i].wl;
    }
    return p;
}

// Per kind and pass: measured per image at B1 against the prediction at T; then the totals, split
// into per-image (b), per-step (a) and workspace (W) bytes. Returns nonzero when a plan disagrees
// with a launch grid or the check batch's count differs from its prediction.
static int extrapolate(const ResNet *m, const TensorDim *dims, int S, int classes, const CtCostLaunch *rec1,
                       size_t nl1, int B1, int B2, int B3, int T) {
    const int ng = (m->n_ops + 2) * 4;
    int bad = 0;
    Group *g1 = group_costs(m, dims, rec1, nl1, B1, &bad);
    float loss;
    double wall;
    size_t nl2;
    CtCostLaunch *rec2 = count_step((ResNet *)m, S, B2, classes, &loss, NULL, &wall, &nl2);
    Group *g2 = group_costs(m, dims, rec2, nl2, B2, &bad);
    printf("\nextrapolation: a second counted step at batch %d (%zu launches, %.0f s of emulation)\n", B2, nl2, wall);
    Fit *f = fit_groups(ng, g1, B1, g2, B2);
    Group *p = predict_groups(m, dims, rec1, nl1, f, ng, T);
    int nonint = 0;
    for (int i = 0; i < ng; i++)
        for (int k = 0; k < 3; k++)
            if (f[i].b[k] != floor(f[i].b[k]) || f[i].a[k] != floor(f[i].a[k])) nonint++;
    const double MB = 1e6;
    printf("compulsory MB per image, measured at batch %d and EXTRAPOLATED to batch %d (per op and pass: a + b*B\n"
           "fitted from batches %d and %d after taking out the plan-dependent workspace W, which is re-planned at %d):\n",
           B1, T, B1, B2, T);
    printf("  %-10s %-6s %12s %12s %12s %12s %10s %10s\n", "kind", "pass", "rd @B", "wr @B", "rd @T", "wr @T",
           "launch/img", "W MB/img");
    double tot1[3] = {0}, totT[6] = {0};
    for (int k = 0; k < ROWS; k++)
        for (int part = 0; part < 4; part++) {
            double a1[3] = {0}, aT[4] = {0};
            int any = 0;
            for (int i = 0; i < ng; i++) {
                int op = i / 4 - 1, pp = i % 4;
                int row = row_of(m, op);
                if (row != k || pp != part || !g1[i].l) continue;
                any = 1;
                a1[0] += g1[i].rd, a1[1] += g1[i].wr, a1[2] += g1[i].l;
                aT[0] += p[i].rd, aT[1] += p[i].wr, aT[2] += p[i].l, aT[3] += p[i].wrd + p[i].wwr;
                totT[3] += f[i].a[0] + f[i].a[1], totT[4] += (f[i].b[0] + f[i].b[1]) * T, totT[5] += p[i].wrd + p[i].wwr;
            }
            if (!any) continue;
            const char *kn = row_name(k);
            printf("  %-10s %-6s %12.3f %12.3f %12.3f %12.3f %10.3f %10.3f\n", kn, k <= ROW_SGD ? "-" : part_name[part],
                   a1[0] / B1 / MB, a1[1] / B1 / MB, aT[0] / T / MB, aT[1] / T / MB, aT[2] / T, aT[3] / T / MB);
            for (int j = 0; j < 3; j++) tot1[j] += a1[j], totT[j] += aT[j];
        }
    printf("  %-17s %12.3f %12.3f %12.3f %12.3f %10.3f %10.3f\n", "total", tot1[0] / B1 / MB, tot1[1] / B1 / MB,
           totT[0] / T / MB, totT[1] / T / MB, totT[2] / T, totT[5] / T / MB);
    printf("per image at measured batch %d: compulsory %.3f MB, %.2f launches\n", B1, (tot1[0] + tot1[1]) / B1 / MB,
           tot1[2] / B1);
    printf("per image at batch %d (extrapolated): compulsory %.3f MB = %.3f batch-proportional + %.3f per-step fixed "
           "(weights, optimizer: %.1f MB a step / %d) + %.3f workspace of the batch-%d plans; %.3f launches\n",
           T, (totT[0] + totT[1]) / T / MB, totT[4] / T / MB, totT[3] / T / MB, totT[3] / MB, T, totT[5] / T / MB, T,
           totT[2] / T);
    printf("summary_target: batch %d measured_batch %d fit_batch %d uniq_bytes_per_image %.0f launches_per_image %.4f "
           "plan_mismatches %d nonintegral_fits %d\n",
           T, B1, B2, (totT[0] + totT[1]) / T, totT[2] / T, bad, nonint);
    int rc = bad ? 1 : 0;
    if (B3) {
        size_t nl3;
        CtCostLaunch *rec3 = count_step((ResNet *)m, S, B3, classes, &loss, NULL, &wall, &nl3);
        Group *g3 = group_costs(m, dims, rec3, nl3, B3, &bad);
        Group *p3 = predict_groups(m, dims, rec1, nl1, f, ng, B3);
        int wrong = 0, groups = 0;
        for (int i = 0; i < ng; i++) {
            if (!g1[i].l && !g3[i].l) continue;
            groups++;
            if (g3[i].rd == p3[i].rd && g3[i].wr == p3[i].wr && g3[i].l == p3[i].l) continue;
            wrong++;
            int op = i / 4 - 1;
            printf("  check: %s %s: measured rd %.0f wr %.0f launches %.0f, predicted %.0f %.0f %.0f\n",
                   op < 0 ? "(other)" : op == m->n_ops ? "(sgd)" : m->ops[op].name, part_name[i % 4], g3[i].rd,
                   g3[i].wr, g3[i].l, p3[i].rd, p3[i].wr, p3[i].l);
        }
        printf("extrapolation check at batch %d (%zu launches, %.0f s): %d op/pass groups, prediction == count in "
               "every one: %s\n",
               B3, nl3, wall, groups, wrong || bad ? "NO" : "yes");
        if (wrong || bad) rc = 1;
        free(rec3), free(g3), free(p3);
    }
    free(rec2), free(g1), free(g2), free(f), free(p);
    return rc;
}

int main(int argc, char **argv) {
    const char *pos[3], *res_path = NULL;
    int npos = 0, classes = 0, launches = 0, verify = 0, quiet = 0, blurpool = 0, target = 256, fit_b = 0, check_b = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--classes") || !strcmp(a, "--res") || !strcmp(a, "--target-batch") ||
            !strcmp(a, "--fit-batch") || !strcmp(a, "--check-batch")) {
            if (i + 1 >= argc) ct_die("bench_gpu_cost: %s needs a value", a);
            const char *v = argv[++i];
            if (!strcmp(a, "--res")) {
                res_path = v;
                continue;
            }
            char *end;
            long n = strtol(v, &end, 10);
            if (*end || end == v || n < 0 || n > 1000000)
                ct_die("bench_gpu_cost: %s '%s': expected a whole number from 0 to 1000000", a, v);
            if (!strcmp(a, "--classes")) classes = (int)n;
            else if (!strcmp(a, "--target-batch")) target = (int)n;
            else if (!strcmp(a, "--fit-batch")) fit_b = (int)n;
            else check_b = (int)n;
        } else if (!strcmp(a, "--launches")) launches = 1;
        else if (!strcmp(a, "--verify")) verify = 1;
        else if (!strcmp(a, "--quiet")) quiet = 1;
        else if (!strcmp(a, "--blurpool")) blurpool = 1;  // train --blurpool's network
        else if (a[0] == '-') {
            fprintf(stderr, "bench_gpu_cost: unknown flag '%s'\n", a);
            usage(argv[0]);
        } else if (npos < 3) pos[npos++] = a;
        else usage(argv[0]);
    }
    if (npos < 3) usage(argv[0]);
    const char *arch = pos[0];
    const int S = atoi(pos[1]), N = atoi(pos[2]);
    if (!resnet_arch_valid(arch)) ct_die("bench_gpu_cost: unknown ARCH '%s' (one of %s)", arch, resnet_arch_list());
    if (S <= 0 || N <= 0) ct_die("bench_gpu_cost: SIZE and BATCH must be positive");
    if (!ct_cost_available())
        ct_die("bench_gpu_cost: this build runs the real kernels, which have no counters; run the emulated "
               "build (build/emu-tools/bench_gpu_cost, made by ./build.sh test)");
    if (res_path) load_res(res_path);
    if (!gpu_available()) ct_die("bench_gpu_cost: the emulated device did not start");
    gpu_select_device(0);

    ResNet *m = resnet_create(arch, 3, 10);
    if (!classes) classes = m->cifar ? 10 : 1000;
    resnet_free(m);
    m = resnet_create_ex(arch, 3, classes, blurpool);
    resnet_init(m, 1, 0);
    opts_ = tool_exec_options();  // the tool's run and its plan under the same options
    plan_ = plan_build(m, &opts_);
    TensorDim *dims = ct_alloc((size_t)m->n_tensors * sizeof(TensorDim));
    if (resnet_shapes(m, S, S, dims)) ct_die("bench_gpu_cost: %s cannot take %dx%d images", arch, S, S);

    if (target && !fit_b) fit_b = N > 1 ? N - 1 : 2;
    if (target && fit_b == N) ct_die("bench_gpu_cost: --fit-batch %d must differ from BATCH", fit_b);

    float loss_off = 0, *grads_off = NULL, *grads_on = NULL;
    if (verify) {
        uint8_t *x;
        int32_t *labels;
        make_batch(N, S, classes, &x, &labels);
        grads_off = ct_alloc(m->n_params * sizeof(float));
        GpuExec *e0 = gpu_exec_create_opts(m, CT_BF16, &opts_);
        gpu_exec_use_graphs(e0, 0);
        gpu_exec_profile(e0, m, 1);  // the same launches as the counted run, only uncounted
        loss_off = gpu_train_step_u8(e0, m, x, labels, N, S, S, mean_rgb, std_rgb, 0.0f, grads_off, NULL);
        gpu_exec_free(e0);
        grads_on = ct_alloc(m->n_params * sizeof(float));
        free(x), free(labels);
    }
    float loss;
    double wall;
    size_t nl;
    CtCostLaunch *rec = count_step(m, S, N, classes, &loss, grads_on, &wall, &nl);

    printf("cost: %s %dx%d batch %d bf16, one training step (forward, loss, backward, SGD) on the emulated GPU: "
           "%zu launches, loss %.6f, %.0f s of emulation\n",
           arch, S, S, N, nl, loss, wall);
    if (verify) {
        int same = memcmp(&loss, &loss_off, sizeof loss) == 0 &&
                   memcmp(grads_on, grads_off, m->n_params * sizeof(float)) == 0;
        printf("verify: loss and %zu gradients with counters on vs off: %s\n", m->n_params,
               same ? "identical" : "DIFFERENT");
        if (!same) return 1;
    }

    Sum by[ROWS][4];
    memset(by, 0, sizeof by);
    Sum tot = {0};
    double *op_mma = calloc((size_t)(m->n_ops + 1) * 4, sizeof(double));
    int *op_v2 = calloc((size_t)m->n_ops + 1, sizeof(int));  // the op's forward ran on conv engine v2 (1), wgmma (2)
    if (launches)
        printf("%-5s %-22s %-6s %-48s %-15s %-11s %6s %6s %4s %5s %12s %12s %12s %12s %12s %3s\n", "#", "op", "pass",
               "kernel", "grid", "block", "dsmem", "ssmem", "regs", "spill", "mma", "rd_req", "wr_req", "rd_uniq",
               "wr_uniq", "cov");
    for (size_t i = 0; i < nl; i++) {
        const CtCostLaunch c = rec[i];
        int op = c.tag_op, part = c.tag_part < 0 || c.tag_part > 3 ? 0 : c.tag_part;
        int row = row_of(m, op);
        if (row == ROW_OTHER || row == ROW_SGD) part = 0;
        double t = roofline(&c);
        add(&by[row][part], &c, t);
        add(&tot, &c, t);
        if (op >= 0 && op <= m->n_ops) op_mma[op * 4 + part] += (double)c.mma;
        if (op >= 0 && op <= m->n_ops && part == 0 && strstr(c.name, "gemm_tc2_k")) op_v2[op] = 1;
        if (op >= 0 && op <= m->n_ops && part == 0 && strstr(c.name, "conv_wgmma_fwd_k")) op_v2[op] = 2;
        if (!launches) continue;
        const Res *rs = find_res(c.symbol);
        char grid[40], block[40], regs[16] = "-", spill[16] = "-", ssm[16] = "-";
        snprintf(grid, sizeof grid, "%ux%ux%u", c.grid[0], c.grid[1], c.grid[2]);
        snprintf(block, sizeof block, "%ux%ux%u", c.block[0], c.block[1], c.block[2]);
        if (rs) {
            snprintf(regs, sizeof regs, "%d", rs->regs);
            snprintf(spill, sizeof spill, "%d", rs->spill_st + rs->spill_ld);
            snprintf(ssm, sizeof ssm, "%d", rs->static_smem);
        }
        const char *opname = op < 0 || op > m->n_ops ? "(other)" : op == m->n_ops ? "(sgd)" : m->ops[op].name;
        printf("%-5zu %-22s %-6s %-48.48s %-15s %-11s %6zu %6s %4s %5s %12llu %12llu %12llu %12llu %12llu %3s\n", i,
               opname, row <= ROW_SGD ? "-" : part_name[part], c.name, grid, block, c.dyn_smem, ssm, regs, spill,
               c.mma, c.rd_bytes, c.wr_bytes, c.rd_unique, c.wr_unique, c.accesses ? "yes" : "NO");
    }

    const double MB = 1e6, GF = 1e9;
    printf("\nper op kind and pass (one step of batch %d; bytes in MB = 1e6, tensor FLOPs in GFLOP = mma x 4096 / 1e9;\n"
           "req = requested by counted accesses, uniq = distinct bytes of those = compulsory; model = per-launch roofline):\n",
           N);
    printf("  %-10s %-6s %8s %10s %10s %10s %10s %10s %10s\n", "kind", "pass", "launches", "tensorGF", "rd_req",
           "wr_req", "rd_uniq", "wr_uniq", "model_us");
    for (int k = 0; k < ROWS; k++)
        for (int p = 0; p < 4; p++) {
            const Sum *s = &by[k][p];
            if (!s->launches) continue;
            const char *kn = row_name(k);
            printf("  %-10s %-6s %8.0f %10.3f %10.3f %10.3f %10.3f %10.3f %10.1f\n", kn,
                   k <= ROW_SGD ? "-" : part_name[p], s->launches, s->mma * 4096 / GF, s->rd / MB, s->wr / MB,
                   s->rdu / MB, s->wru / MB, s->t_model * 1e6);
        }
    printf("  %-17s %8.0f %10.3f %10.3f %10.3f %10.3f %10.3f %10.1f\n", "total", tot.launches, tot.mma * 4096 / GF,
           tot.rd / MB, tot.wr / MB, tot.rdu / MB, tot.wru / MB, tot.t_model * 1e6);

    // Analytic tensor FLOPs of the GEMMs the tensor-core engine runs: every conv forward and weight
    // gradient, the data gradient of every conv but the stem (its input needs none), the linear
    // forward (its backward takes the fp32 generic engine: no mma). The engine pads M and N to its
    // tiles and K to 16, so counted >= analytic; the ratio is the padding's waste.
    // A forward GEMM (M = N*P*Q rows, N = K columns, reduction R*S*C) runs on block tiles with k
    // steps of 32: its count must equal exactly its dimensions padded to those: 128x128 on conv
    // engine v2 (kernels/conv_tc2.cu; the launch's symbol says which engine ran), 128x64 on v1
    // (kernels/conv_tc1.cu), 128x128 with k steps of 64 on the wgmma engine (kernels/conv_wgmma.cu). The executor pads a stem of fewer than 8 channels to 8 (nn/model_cuda.cu),
    // so its reduction is R*S*8. The gradients' split-K and stride-phase plans are not modelled.
    double analytic = 0;
    if (!quiet)
        printf("\ntensor FLOPs per conv/fc op (analytic 2*N*P*Q*K*R*S*C per GEMM; fwd also padded to its engine's tiles,\n"
               "128x128x32 on v2, 128x64x32 on v1, 128x128x64 on wgmma; "
               "counted = mma x 4096):\n  %-22s %-6s %14s %14s %14s %7s\n", "op", "pass", "analytic", "padded",
               "counted", "ratio");
    int all_ge = 1, fwd_exact = 1;
    double grouped = 0;  // grouped convs (ResNeXt's 3x3s) on the generic engine: CUDA-core FLOPs, no mma
    // Grouped convs on v2's block-diagonal path (kernels/conv_tcg.cu): useful = the analytic FLOPs,
    // issued = its mma (docs/GROUPED.md has the tile plan's ratios per channel count).
    double grouped_tc_useful = 0, grouped_tc_issued = 0;
    for (int i = 0; i < m->n_ops; i++) {
        const Op *op = &m->ops[i];
        if (op->kind != OP_CONV && op->kind != OP_FC) continue;
        const TensorDim *dout = &dims[op->out];
        if (op->kind == OP_CONV && op->groups > 1) {
            const double fg = 2.0 * N * dout->H * dout->W * op->K * op->R * op->S * (op->C / op->groups);
            const int npg = op->in > 0 ? 3 : 2;
            double issued = 0;
            for (int j = 0; j < npg; j++) issued += op_mma[i * 4 + j] * 4096;
            if (issued == 0) {  // the generic engine
                grouped += npg * fg;
                continue;
            }
            for (int j = 0; j < npg; j++) {
                const double c = op_mma[i * 4 + j] * 4096;
                analytic += fg;
                grouped_tc_useful += fg;
                grouped_tc_issued += c;
                if (c < fg) all_ge = 0;
                if (!quiet)
                    printf("  %-22s %-6s %14.0f %14s %14.0f %7.3f (grouped)\n", op->name, part_name[j], fg, "-", c, c / fg);
            }
            continue;
        }
        double f = op->kind == OP_CONV ? 2.0 * N * dout->H * dout->W * op->K * op->R * op->S * op->C
                                       : 2.0 * N * dims[op->in].C * dout->C;
        double gm = (double)N * dout->H * dout->W, gn = dout->C;
        double gk = op->kind == OP_CONV ? (double)op->R * op->S * op->C : dims[op->in].C;
        int cin = op->kind == OP_CONV ? op->C : dims[op->in].C;
        if (op->kind == OP_CONV && op->in == 0 && cin < 8) {
            cin = 8;
            gk = (double)op->R * op->S * cin;
        }
        double bn = op_v2[i] ? 128 : 64, bk = op_v2[i] == 2 ? 64 : 32;
        double padded = 2.0 * ceil(gm / 128) * 128 * ceil(gn / bn) * bn * ceil(gk / bk) * bk;
        int parts[3] = {0, 1, 2}, np = op->kind == OP_CONV ? (op->in > 0 ? 3 : 2) : 1;
        for (int j = 0; j < np; j++) {
            double c = op_mma[i * 4 + parts[j]] * 4096;
            analytic += f;
            if (c < f) all_ge = 0;
            if (j == 0 && c != padded) fwd_exact = 0;
            char pad[24] = "-";
            if (j == 0) snprintf(pad, sizeof pad, "%.0f", padded);
            if (!quiet)
                printf("  %-22s %-6s %14.0f %14s %14.0f %7.3f\n", op->name, part_name[parts[j]], f, pad, c, c / f);
        }
    }
    printf("tensor FLOPs: counted %.0f, analytic %.0f (ratio %.4f; every GEMM counted >= analytic: %s; "
           "every forward GEMM == its tile-padded FLOPs: %s)\n",
           tot.mma * 4096, analytic, tot.mma * 4096 / analytic, all_ge ? "yes" : "NO", fwd_exact ? "yes" : "NO");
    if (grouped_tc_issued > 0)
        printf("grouped convolutions on tensor cores (v2's block-diagonal path): issued %.3f GFLOP per image, useful "
               "%.3f (%.1f%%; docs/GROUPED.md)\n", grouped_tc_issued / N / GF, grouped_tc_useful / N / GF,
               100.0 * grouped_tc_useful / grouped_tc_issued);
    if (grouped > 0)
        printf("grouped convolutions (generic engine, fp32 FMA on CUDA cores, not in the tensor FLOPs): %.0f FLOPs, "
               "%.3f GFLOP per image (docs/GROUPED.md)\n", grouped, grouped / N / GF);

    const double comp = tot.rdu + tot.wru, req = tot.rd + tot.wr;
    printf("\nper image: compulsory %.3f MB, requested %.3f MB (counted paths), tensor %.3f GFLOP, %.1f launches\n",
           comp / N / MB, req / N / MB, tot.mma * 4096 / N / GF, tot.launches / N);
    const double tf_mma = tot.mma * 4096 / PEAK_MMA_SYNC, tf_wg = tot.mma * 4096 / PEAK_WGMMA, tb = comp / PEAK_HBM;
    printf("roofline model, H100 SXM (not a measurement; peaks assumed: mma.sync %.0f TFLOP/s bf16 dense (an assumption),\n"
           "  wgmma %.0f TFLOP/s bf16 dense, HBM3 %.2f TB/s; launch overhead and the bytes of uncounted accesses ignored):\n",
           PEAK_MMA_SYNC / 1e12, PEAK_WGMMA / 1e12, PEAK_HBM / 1e12);
    printf("  step as a whole: tensor %.1f us at mma.sync (%.1f us at wgmma), compulsory bytes %.1f us -> %.1f us, "
           "%.0f img/s\n",
           tf_mma * 1e6, tf_wg * 1e6, tb * 1e6, (tf_mma > tb ? tf_mma : tb) * 1e6, N / (tf_mma > tb ? tf_mma : tb));
    printf("  sum of per-launch rooflines (mma.sync): %.1f us per step, %.1f us per image, %.0f img/s\n",
           tot.t_model * 1e6, tot.t_model * 1e6 / N, N / tot.t_model);
    unsigned loss_bits;
    memcpy(&loss_bits, &loss, sizeof loss_bits);
    printf("summary: arch %s size %d batch %d launches %.0f tensor_flops %.0f analytic_flops %.0f "
           "req_bytes %.0f uniq_bytes %.0f loss_bits %08x\n",
           arch, S, N, tot.launches, tot.mma * 4096, analytic, req, comp, loss_bits);

    int rc = 0;
    if (target) rc = extrapolate(m, dims, S, classes, rec, nl, N, fit_b, check_b, target);
    resnet_free(m);
    free(rec), free(dims), free(op_mma), free(op_v2), free(grads_off), free(grads_on), free(res_tab);
    return rc;
}
