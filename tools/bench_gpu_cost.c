// Exact cost accounting of one training step, no GPU needed: runs forward, softmax cross-entropy,
// backward and an SGD step (bf16, train's SGD defaults) of ARCH at SIZE x SIZE and BATCH through
// the GPU executor on the EMULATED kernels with the emulator's counters on (kernels/emu/cost.cpp),
// and prints what each kernel launch asked of the machine, totals per op kind and pass, per image
// figures and a roofline time for an H100 SXM (a model, not a measurement).
//   build/emu-tools/bench_gpu_cost ARCH SIZE BATCH [--classes N] [--res FILE] [--launches]
//                                  [--verify] [--quiet]
// --res FILE: per-kernel registers/spills/static shared memory from tools/sass_report.sh --table
//   (nvcc's sm_90 build), joined on the mangled kernel symbol; without it those columns are '-'.
// --launches: one line per kernel launch (else only the tables).
// --verify: first runs the same step with the counters off on a fresh executor and checks that
//   counting changed no bit of the loss or of the gradients (prints "verify: ... identical").
// --quiet: no per-op FLOP table.
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
#include "nn/resnet.h"
#include "nn/sgd.h"
#include "util/common.h"
#include "util/rng.h"

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

// Row of the per-kind table: 0 = other (input normalisation, loss), 1 = SGD, 2 + kind.
enum { ROW_OTHER = 0, ROW_SGD = 1, ROW_KIND0 = 2, ROWS = ROW_KIND0 + 8 };

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
    fprintf(stderr, "usage: %s ARCH SIZE BATCH [--classes N] [--res FILE] [--launches] [--verify] [--quiet] [--blurpool]\n", prog);
    exit(2);
}

int main(int argc, char **argv) {
    const char *pos[3], *res_path = NULL;
    int npos = 0, classes = 0, launches = 0, verify = 0, quiet = 0, blurpool = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--classes") || !strcmp(a, "--res")) {
            if (i + 1 >= argc) ct_die("bench_gpu_cost: %s needs a value", a);
            if (!strcmp(a, "--res")) res_path = argv[++i];
            else classes = atoi(argv[++i]);
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
    TensorDim *dims = ct_alloc((size_t)m->n_tensors * sizeof(TensorDim));
    if (resnet_shapes(m, S, S, dims)) ct_die("bench_gpu_cost: %s cannot take %dx%d images", arch, S, S);

    const size_t nbytes = (size_t)N * S * S * 3;
    uint8_t *x = ct_alloc(nbytes);
    int32_t *labels = ct_alloc((size_t)N * sizeof(int32_t));
    Rng r = rng_make(7, 0, 0);
    for (size_t i = 0; i < nbytes; i++) x[i] = (uint8_t)(rng_u32(&r) & 0xff);
    for (int i = 0; i < N; i++) labels[i] = (int32_t)rng_below(&r, (uint32_t)classes);
    static const float mean[3] = {0.485f, 0.456f, 0.406f}, stdv[3] = {0.229f, 0.224f, 0.225f};
    const SgdConfig cfg = {.momentum = 0.9f, .weight_decay = 1e-4f};

    float loss_off = 0, *grads_off = NULL, *grads_on = NULL;
    if (verify) {
        grads_off = ct_alloc(m->n_params * sizeof(float));
        GpuExec *e0 = gpu_exec_create(m, CT_BF16);
        gpu_exec_use_graphs(e0, 0);
        gpu_exec_profile(e0, m, 1);  // the same launches as the counted run, only uncounted
        loss_off = gpu_train_step_u8(e0, m, x, labels, N, S, S, mean, stdv, 0.0f, grads_off, NULL);
        gpu_exec_free(e0);
        grads_on = ct_alloc(m->n_params * sizeof(float));
    }
    // Eager launches (graphs off) with the profiler's marks: each launch gets its op and pass.
    GpuExec *e = gpu_exec_create(m, CT_BF16);
    gpu_exec_use_graphs(e, 0);
    gpu_exec_profile(e, m, 1);
    SgdState st;
    sgd_init(&st, m->n_params);
    const double t0 = ct_now();
    ct_cost_enable(1);
    float loss = gpu_train_step_u8(e, m, x, labels, N, S, S, mean, stdv, 0.0f, grads_on, NULL);
    gpu_sgd_step(e, m, &cfg, &st, 0.1f);
    ct_cost_enable(0);
    const double wall = ct_now() - t0;

    const size_t nl = ct_cost_count();
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
        CtCostLaunch c;
        ct_cost_get(i, &c);
        int op = c.tag_op, part = c.tag_part < 0 || c.tag_part > 3 ? 0 : c.tag_part;
        int row = op < 0 || op > m->n_ops ? ROW_OTHER : op == m->n_ops ? ROW_SGD : ROW_KIND0 + m->ops[op].kind;
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
            const char *kn = k == ROW_OTHER ? "other" : k == ROW_SGD ? "sgd" : resnet_op_kind_name(k - ROW_KIND0);
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
    // (kernels/conv.cu), 128x128 with k steps of 64 on the wgmma engine (kernels/conv_wgmma.cu). The executor pads a stem of fewer than 8 channels to 8 (nn/model_cuda.cu),
    // so its reduction is R*S*8. The gradients' split-K and stride-phase plans are not modelled.
    double analytic = 0;
    if (!quiet)
        printf("\ntensor FLOPs per conv/fc op (analytic 2*N*P*Q*K*R*S*C per GEMM; fwd also padded to its engine's tiles,\n"
               "128x128x32 on v2, 128x64x32 on v1, 128x128x64 on wgmma; "
               "counted = mma x 4096):\n  %-22s %-6s %14s %14s %14s %7s\n", "op", "pass", "analytic", "padded",
               "counted", "ratio");
    int all_ge = 1, fwd_exact = 1;
    for (int i = 0; i < m->n_ops; i++) {
        const Op *op = &m->ops[i];
        if (op->kind != OP_CONV && op->kind != OP_FC) continue;
        const TensorDim *dout = &dims[op->out];
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

    gpu_exec_free(e);
    sgd_free(&st);
    resnet_free(m);
    free(x), free(labels), free(dims), free(op_mma), free(op_v2), free(grads_off), free(grads_on), free(res_tab);
    return 0;
}
