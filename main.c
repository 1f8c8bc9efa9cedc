// train: the ctrain driver. Flags and config, data, the epoch loop (train + eval), checkpoints,
// logs (progress line, metrics.jsonl, TensorBoard events), distillation, --demo and --evaluate.
//
//   ./train [flags] SHARDS/        SHARDS/train.shard and SHARDS/val.shard (made by packdata)
//   ./train --demo                 Fashion-MNIST, packed on first use, CPU, ~91%+ in < 10 minutes
//   ./train --evaluate --weights W.safetensors SHARDS/
//
// Determinism: every random choice is keyed on (seed, epoch, index) (util/rng.h) and every CPU
// reduction has a fixed order, so a run is a pure function of its flags and data, whatever the
// number of loader workers, and a resumed run continues bit for bit where it stopped.
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "dist/comm.h"
#include "dist/gradsync.h"
#include "dist/nccl.h"
#include "dist/net.h"
#include "loader/loader.h"
#include "loader/shard.h"
#include "nn/checkpoint.h"
#include "nn/layers.h"
#include "nn/model_cpu.h"
#include "nn/resnet.h"
#include "nn/safetensors.h"
#include "nn/schedule.h"
#include "nn/sgd.h"
#include "util/common.h"
#include "util/crc32c.h"
#include "util/rng.h"
#include "util/tfevents.h"
#ifdef CTRAIN_CUDA
#include "dist/gradsync_cuda.h"
#include "nn/model_cuda.h"
#endif

#define DEMO_SHARDS "shards/fashion-mnist"
#define DEMO_IDX_DIR "/usr/share/datasets/fashion-mnist"

// ---------------------------------------------------------------------------------------------
// Configuration: every setting of a run, filled from defaults, then --demo's recipe, then flags.
typedef struct {
    const char *arch;
    int epochs;
    int batch;  // per device
    double lr, momentum, wd;
    int nesterov;
    const char *lr_schedule;
    double warmup_epochs;
    int lr_step_size;
    double lr_gamma;
    double label_smoothing;
    int crop_size, val_resize;
    double min_scale;  // RandomResizedCrop's lower scale bound
    int no_flip;
    const char *mean, *std;  // per-channel normalisation, comma-separated ("auto": by channels)
    int workers;
    long long seed;
    int deterministic;
    const char *resume, *weights;
    int evaluate;
    const char *out;
    const char *device;
    int print_freq;
    const char *teacher;
    double kd_alpha, kd_temperature;
    const char *precision;
    int demo;
    int zero_init_residual;
    int no_wd_bn;
    int max_nonfinite;
    int ranks;
    int gpus;
    int nodes, node_rank;
    const char *master;
    const char *comm;
    const char *cuda_graphs;
    double timeout;
    int bucket_mb;
    const char *dump_batches;
    const char *shards;  // positional
} Config;

typedef enum { F_INT, F_LL, F_DBL, F_STR, F_BOOL } FlagType;
typedef struct {
    const char *name;   // long name without dashes
    char short_name;    // 0 when none
    FlagType type;
    size_t offset;      // into Config
    const char *def;    // default, as shown in --help and applied at start
    const char *metavar;
    const char *help;
    int hidden;         // debugging/test flags: listed under a separate heading
} Flag;

#define OFF(f) offsetof(Config, f)
static const Flag FLAGS[] = {
    {"arch", 'a', F_STR, OFF(arch), "resnet18", "ARCH", "model architecture (resnet18/34/50/101/152; CIFAR-style resnet20/32/44/56/110)", 0},
    {"epochs", 0, F_INT, OFF(epochs), "90", "N", "number of epochs to train (a resumed run continues up to N)", 0},
    {"batch-size", 'b', F_INT, OFF(batch), "256", "N", "batch size per device (the global batch is printed)", 0},
    {"lr", 0, F_DBL, OFF(lr), "0.1", "LR", "peak learning rate (after warmup)", 0},
    {"momentum", 0, F_DBL, OFF(momentum), "0.9", "M", "SGD momentum (0 disables)", 0},
    {"wd", 0, F_DBL, OFF(wd), "1e-4", "WD", "weight decay (L2, PyTorch SGD semantics)", 0},
    {"nesterov", 0, F_BOOL, OFF(nesterov), "0", NULL, "Nesterov momentum", 0},
    {"lr-schedule", 0, F_STR, OFF(lr_schedule), "step", "step|cosine", "learning-rate schedule: step (x gamma every --lr-step-size epochs) or cosine to 0", 0},
    {"warmup-epochs", 0, F_DBL, OFF(warmup_epochs), "0", "E", "linear warmup from 0 over E epochs (fractions allowed)", 0},
    {"lr-step-size", 0, F_INT, OFF(lr_step_size), "30", "N", "step schedule: epochs between decays", 0},
    {"lr-gamma", 0, F_DBL, OFF(lr_gamma), "0.1", "G", "step schedule: decay factor", 0},
    {"label-smoothing", 0, F_DBL, OFF(label_smoothing), "0", "EPS", "label smoothing of the cross-entropy (PyTorch's definition)", 0},
    {"crop-size", 0, F_INT, OFF(crop_size), "224", "PX", "training and evaluation image size", 0},
    {"val-resize", 0, F_INT, OFF(val_resize), "256", "PX", "eval: resize the short side to PX, then center-crop --crop-size", 0},
    {"min-scale", 0, F_DBL, OFF(min_scale), "0.08", "S", "training RandomResizedCrop: smallest crop area as a fraction of the image (1: whole image)", 0},
    {"no-flip", 0, F_BOOL, OFF(no_flip), "0", NULL, "no random horizontal flip", 0},
    {"mean", 0, F_STR, OFF(mean), "auto", "M[,M,M]", "per-channel mean for normalisation (auto: ImageNet's for 3 channels, 0.5 for 1)", 0},
    {"std", 0, F_STR, OFF(std), "auto", "S[,S,S]", "per-channel std for normalisation (auto: ImageNet's for 3 channels, 0.25 for 1)", 0},
    {"workers", 'j', F_INT, OFF(workers), "2", "N", "data loader threads (results do not depend on it)", 0},
    {"seed", 0, F_LL, OFF(seed), "0", "S", "seed of initialisation, sampling and augmentation", 0},
    {"deterministic", 0, F_BOOL, OFF(deterministic), "1", NULL, "bit-reproducible runs (always true on the CPU backend)", 0},
    {"resume", 0, F_STR, OFF(resume), "", "PATH", "continue from a checkpoint (OUT/last.ckpt or best.ckpt)", 0},
    {"weights", 0, F_STR, OFF(weights), "", "PATH", "initial weights from a .safetensors file (torchvision names)", 0},
    {"evaluate", 'e', F_BOOL, OFF(evaluate), "0", NULL, "only evaluate (--weights or --resume) on the val shard: prints top-1/top-5", 0},
    {"out", 'o', F_STR, OFF(out), "runs/<date>-<arch>", "DIR", "output directory: config.json, metrics.jsonl, events, checkpoints, model.safetensors", 0},
    {"device", 0, F_STR, OFF(device), "auto", "auto|cpu|cuda", "compute backend (auto: cuda when a GPU is found, else cpu)", 0},
    {"print-freq", 'p', F_INT, OFF(print_freq), "10", "N", "steps between progress updates and metrics.jsonl step records", 0},
    {"teacher", 0, F_STR, OFF(teacher), "", "ARCH:PATH", "distill from a teacher (eval mode, no gradients) loaded from a .safetensors file", 0},
    {"kd-alpha", 0, F_DBL, OFF(kd_alpha), "0.5", "A", "distillation: loss = (1-A) * cross-entropy + A * T^2 * KL(teacher_T || student_T)", 0},
    {"kd-temperature", 0, F_DBL, OFF(kd_temperature), "4", "T", "distillation temperature", 0},
    {"precision", 0, F_STR, OFF(precision), "auto", "auto|bf16|fp32", "math precision (auto: bf16 on cuda, fp32 on cpu); bf16 on the CPU rounds exactly where the GPU does (slower: for checking GPU runs)", 0},
    {"demo", 0, F_BOOL, OFF(demo), "0", NULL, "Fashion-MNIST demo: packs " DEMO_SHARDS "/ when absent, trains a CIFAR-style ResNet on the CPU, evaluates", 0},
    {"zero-init-residual", 0, F_BOOL, OFF(zero_init_residual), "0", NULL, "zero-initialise the last BN of each residual block", 0},
    {"no-wd-bn", 0, F_BOOL, OFF(no_wd_bn), "0", NULL, "no weight decay on BN weights/biases and the fc bias", 0},
    {"max-nonfinite", 0, F_INT, OFF(max_nonfinite), "5", "N", "stop after N consecutive steps with a non-finite loss or gradient", 0},
    {"gpus", 0, F_INT, OFF(gpus), "0", "N", "train on N GPUs of this node (the same as --device cuda --ranks N)", 0},
    {"nodes", 0, F_INT, OFF(nodes), "1", "N", "nodes of a multi-node run, one train process each (default: $WORLD_SIZE or $SLURM_NNODES)", 0},
    {"node-rank", 0, F_INT, OFF(node_rank), "0", "K", "this node's number, 0..N-1 (default: $NODE_RANK, $RANK or $SLURM_NODEID)", 0},
    {"master", 0, F_STR, OFF(master), "", "HOST:PORT", "node 0's address for the rendezvous (default: $MASTER_ADDR:$MASTER_PORT, port 29500)", 0},
    {"ranks", 0, F_INT, OFF(ranks), "1", "N", "data-parallel ranks in this process (CPU: threads; each trains a replica on its share of every global batch of N x batch-size, gradients averaged)", 0},
    {"cuda-graphs", 0, F_STR, OFF(cuda_graphs), "on", "on|off", "GPU: from its second step, replay each training forward and backward as one CUDA graph instead of hundreds of kernel launches (same kernels, same bits; the backward stays eager with several ranks)", 0},
    {"comm", 0, F_STR, OFF(comm), "auto", "auto|nccl|host", "GPU ranks: how gradients travel (auto: NCCL when libnccl.so.2 loads, else through pinned host memory, with a warning)", 0},
    {"timeout", 0, F_DBL, OFF(timeout), "300", "S", "data parallel: a rank that does not reach a collective within S seconds ends the run with an error naming it", 0},
    {"bucket-mb", 0, F_INT, OFF(bucket_mb), "25", "MB", "data parallel: gradients are averaged in buckets of about MB megabytes while backward goes on", 0},
    {"dump-batches", 0, F_STR, OFF(dump_batches), "", "DIR", "write the initial weights, every training batch and the val batches to DIR (PyTorch comparison)", 1},
};
#define N_FLAGS ((int)CT_ARRAY_LEN(FLAGS))

static void usage(FILE *f) {
    fprintf(f,
            "usage: train [flags] SHARDS/\n"
            "       train --demo [flags]\n"
            "       train --evaluate --weights W.safetensors [flags] SHARDS/\n\n"
            "Trains a ResNet on SHARDS/train.shard, evaluating on SHARDS/val.shard after every epoch\n"
            "(shards are made by ./packdata). Flags take a value as '--flag V' or '--flag=V'.\n\nflags (default in brackets):\n");
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) fprintf(f, "\ntesting and debugging:\n");
        for (int i = 0; i < N_FLAGS; i++) {
            const Flag *fl = &FLAGS[i];
            if (fl->hidden != pass) continue;
            char lhs[64];
            if (fl->short_name)
                snprintf(lhs, sizeof lhs, "-%c, --%s%s%s", fl->short_name, fl->name, fl->metavar ? " " : "", fl->metavar ? fl->metavar : "");
            else
                snprintf(lhs, sizeof lhs, "    --%s%s%s", fl->name, fl->metavar ? " " : "", fl->metavar ? fl->metavar : "");
            const char *def = fl->type == F_BOOL ? (strcmp(fl->def, "1") ? "off" : "on") : (fl->def[0] ? fl->def : "none");
            fprintf(f, "  %-34s %s [%s]\n", lhs, fl->help, def);
        }
    }
    fprintf(f, "  -h, --help                         this help\n\n"
               "--demo uses: -a resnet20 --epochs 4 -b 128 --lr 0.2 --lr-schedule cosine --warmup-epochs 0.2\n"
               "  --wd 5e-4 --nesterov --label-smoothing 0.1 --crop-size 28 --val-resize 28 --min-scale 0.75\n"
               "  --mean 0.286 --std 0.353 --out runs/demo; flags given with --demo override these.\n"
               "Exit status: 0 done, 1 error, 128+signal after a checkpoint on SIGINT/SIGTERM.\n");
}

static const Flag *find_flag_long(const char *name, size_t len) {
    for (int i = 0; i < N_FLAGS; i++)
        if (strlen(FLAGS[i].name) == len && !strncmp(FLAGS[i].name, name, len)) return &FLAGS[i];
    return NULL;
}
static const Flag *find_flag_short(char c) {
    for (int i = 0; i < N_FLAGS; i++)
        if (FLAGS[i].short_name == c) return &FLAGS[i];
    return NULL;
}

// Set one flag from its text; dies naming the flag when the value does not parse.
static void set_flag(Config *c, const Flag *fl, const char *v) {
    void *p = (char *)c + fl->offset;
    char *end = NULL;
    errno = 0;
    switch (fl->type) {
    case F_INT: {
        long x = strtol(v, &end, 10);
        if (!*v || *end || errno || x < -2147483647L || x > 2147483647L)
            ct_die("--%s: '%s' is not an integer", fl->name, v);
        *(int *)p = (int)x;
        break;
    }
    case F_LL: {
        long long x = strtoll(v, &end, 0);
        if (!*v || *end || errno) ct_die("--%s: '%s' is not an integer", fl->name, v);
        *(long long *)p = x;
        break;
    }
    case F_DBL: {
        double x = strtod(v, &end);
        if (!*v || *end || errno || !isfinite(x)) ct_die("--%s: '%s' is not a number", fl->name, v);
        *(double *)p = x;
        break;
    }
    case F_STR: *(const char **)p = v; break;
    case F_BOOL:
        if (!strcmp(v, "1") || !strcmp(v, "true") || !strcmp(v, "on") || !strcmp(v, "yes")) *(int *)p = 1;
        else if (!strcmp(v, "0") || !strcmp(v, "false") || !strcmp(v, "off") || !strcmp(v, "no")) *(int *)p = 0;
        else ct_die("--%s: '%s' is not a boolean (use 1/0, true/false, on/off)", fl->name, v);
        break;
    }
}

static void config_defaults(Config *c) {
    memset(c, 0, sizeof *c);
    for (int i = 0; i < N_FLAGS; i++) set_flag(c, &FLAGS[i], FLAGS[i].def);
    c->out = "";  // chosen after parsing (needs the arch)
    c->shards = "";
}

// The demo recipe (Fashion-MNIST, 28x28 grey, 60k/10k): measured in docs/BENCHMARKS.md.
static const char *DEMO_ARGS[] = {
    "--arch", "resnet20", "--epochs", "4", "--batch-size", "128", "--lr", "0.2", "--lr-schedule", "cosine",
    "--warmup-epochs", "0.2", "--wd", "5e-4", "--nesterov", "--label-smoothing", "0.1", "--crop-size", "28",
    "--val-resize", "28", "--min-scale", "0.75", "--mean", "0.286", "--std", "0.353",
    "--out", "runs/demo",
};

// Parses argv into c. seen[i] records which flags the user gave (so --demo's recipe yields to them).
static void parse_args(Config *c, int argc, char **argv, int *seen) {
    int npos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const Flag *fl = NULL;
        const char *val = NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); exit(0); }
        if (!strcmp(a, "--")) {
            for (i++; i < argc; i++) { if (npos++) ct_die("unexpected extra argument '%s' (only one SHARDS directory)", argv[i]); c->shards = argv[i]; }
            break;
        }
        if (a[0] == '-' && a[1] == '-') {
            const char *name = a + 2, *eq = strchr(name, '=');
            size_t len = eq ? (size_t)(eq - name) : strlen(name);
            fl = find_flag_long(name, len);
            if (!fl && len > 3 && !strncmp(name, "no-", 3)) {  // --no-X for boolean X
                const Flag *neg = find_flag_long(name + 3, len - 3);
                if (neg && neg->type == F_BOOL && !eq) { set_flag(c, neg, "0"); seen[neg - FLAGS] = 1; continue; }
            }
            if (!fl) ct_die("unknown flag '%.*s' (see train --help)", (int)(len + 2), a);
            if (eq) val = eq + 1;
        } else if (a[0] == '-' && a[1] && !isdigit((unsigned char)a[1])) {
            fl = find_flag_short(a[1]);
            if (!fl) ct_die("unknown flag '%s' (see train --help)", a);
            if (a[2]) {
                if (fl->type == F_BOOL) ct_die("flag -%c takes no value (got '%s')", a[1], a);
                val = a + 2;
            }
        } else {
            if (npos++) ct_die("unexpected extra argument '%s' (only one SHARDS directory; flags start with -)", a);
            c->shards = a;
            continue;
        }
        if (fl->type == F_BOOL) {
            set_flag(c, fl, val ? val : "1");
        } else {
            if (!val) {
                if (i + 1 >= argc) ct_die("flag --%s needs a value (%s)", fl->name, fl->metavar);
                val = argv[++i];
            }
            set_flag(c, fl, val);
        }
        seen[fl - FLAGS] = 1;
    }
}

// Parse "a,b,c" into exactly n floats (or 1 value broadcast to n). Dies naming the flag.
static void parse_floats(const char *flag, const char *s, float *out, int n) {
    int k = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        double x = strtod(p, &end);
        if (end == p || errno || !isfinite(x)) ct_die("--%s: '%s' is not a comma-separated list of numbers", flag, s);
        if (k >= n) ct_die("--%s: '%s' has more than %d values (the data has %d channels)", flag, s, n, n);
        out[k++] = (float)x;
        p = end;
        if (*p == ',') p++;
        else if (*p) ct_die("--%s: '%s' is not a comma-separated list of numbers", flag, s);
    }
    if (k == 1) for (int i = 1; i < n; i++) out[i] = out[0];
    else if (k != n) ct_die("--%s: '%s' has %d values, the data has %d channels", flag, s, k, n);
}

// Range checks on values alone (before any file is opened).
// Launchers' conventions for multi-node runs, where the flags are not given: torchrun (one
// process per node: WORLD_SIZE nodes, NODE_RANK or RANK), SLURM (SLURM_NNODES, SLURM_NODEID, and
// node 0 = the first host of SLURM_JOB_NODELIST), MASTER_ADDR / MASTER_PORT for node 0's address.
static void node_env_defaults(Config *c, const int *seen) {
    const char *v;
    if (!seen[find_flag_long("nodes", 5) - FLAGS] && (((v = getenv("WORLD_SIZE")) && *v) || ((v = getenv("SLURM_NNODES")) && *v)))
        c->nodes = atoi(v);
    if (!seen[find_flag_long("node-rank", 9) - FLAGS] &&
        (((v = getenv("NODE_RANK")) && *v) || ((v = getenv("RANK")) && *v) || ((v = getenv("SLURM_NODEID")) && *v)))
        c->node_rank = atoi(v);
    if (!seen[find_flag_long("master", 6) - FLAGS]) {
        const char *port = getenv("MASTER_PORT");
        char host[256] = "", buf[300];
        if ((v = getenv("MASTER_ADDR")) && *v) snprintf(host, sizeof host, "%s", v);
        else if ((((v = getenv("SLURM_JOB_NODELIST")) && *v) || ((v = getenv("SLURM_NODELIST")) && *v)) &&
                 net_first_host(v, host, sizeof host))
            ct_die("SLURM_JOB_NODELIST '%s': cannot tell node 0's host; set MASTER_ADDR or --master", v);
        if (host[0]) {
            snprintf(buf, sizeof buf, "%s:%s", host, port && *port ? port : "29500");
            c->master = ct_strdup(buf);
        }
    }
}

static void validate_config(const Config *c) {
    if (!resnet_arch_valid(c->arch)) ct_die("--arch: unknown architecture '%s' (one of %s)", c->arch, resnet_arch_list());
    if (c->epochs < 1) ct_die("--epochs: must be >= 1 (got %d)", c->epochs);
    if (c->batch < 1 || c->batch > 65536) ct_die("--batch-size: must be in 1..65536 (got %d)", c->batch);
    if (!(c->lr > 0)) ct_die("--lr: must be > 0 (got %g)", c->lr);
    if (c->momentum < 0 || c->momentum >= 1) ct_die("--momentum: must be in [0, 1) (got %g)", c->momentum);
    if (c->wd < 0) ct_die("--wd: must be >= 0 (got %g)", c->wd);
    if (c->nesterov && c->momentum == 0) ct_die("--nesterov needs --momentum > 0");
    LrKind k;
    if (!lr_kind_parse(c->lr_schedule, &k)) ct_die("--lr-schedule: '%s' is not one of step, cosine", c->lr_schedule);
    if (c->warmup_epochs < 0 || c->warmup_epochs > c->epochs) ct_die("--warmup-epochs: must be in [0, --epochs] (got %g)", c->warmup_epochs);
    if (c->lr_step_size < 1) ct_die("--lr-step-size: must be >= 1 (got %d)", c->lr_step_size);
    if (!(c->lr_gamma > 0) || c->lr_gamma > 1) ct_die("--lr-gamma: must be in (0, 1] (got %g)", c->lr_gamma);
    if (c->label_smoothing < 0 || c->label_smoothing >= 1) ct_die("--label-smoothing: must be in [0, 1) (got %g)", c->label_smoothing);
    if (c->crop_size < 1 || c->crop_size > 4096) ct_die("--crop-size: must be in 1..4096 (got %d)", c->crop_size);
    if (c->val_resize < c->crop_size || c->val_resize > 8192) ct_die("--val-resize: must be in --crop-size (%d)..8192 (got %d)", c->crop_size, c->val_resize);
    if (!(c->min_scale > 0) || c->min_scale > 1) ct_die("--min-scale: must be in (0, 1] (got %g)", c->min_scale);
    if (c->workers < 1 || c->workers > 256) ct_die("--workers: must be in 1..256 (got %d)", c->workers);
    if (c->seed < 0) ct_die("--seed: must be >= 0 (got %lld)", c->seed);
    if (strcmp(c->device, "auto") && strcmp(c->device, "cpu") && strcmp(c->device, "cuda")) ct_die("--device: '%s' is not one of auto, cpu, cuda", c->device);
    if (c->print_freq < 1) ct_die("--print-freq: must be >= 1 (got %d)", c->print_freq);
    if (c->kd_alpha < 0 || c->kd_alpha > 1) ct_die("--kd-alpha: must be in [0, 1] (got %g)", c->kd_alpha);
    if (!(c->kd_temperature > 0)) ct_die("--kd-temperature: must be > 0 (got %g)", c->kd_temperature);
    if (strcmp(c->precision, "auto") && strcmp(c->precision, "bf16") && strcmp(c->precision, "fp32"))
        ct_die("--precision: '%s' is not one of auto, bf16, fp32", c->precision);
    if (c->max_nonfinite < 1) ct_die("--max-nonfinite: must be >= 1 (got %d)", c->max_nonfinite);
    if (c->ranks < 1 || c->ranks > 256) ct_die("--ranks: must be in 1..256 (got %d)", c->ranks);
    if (c->nodes < 1 || c->nodes > 4096) ct_die("--nodes: must be in 1..4096 (got %d)", c->nodes);
    if (c->node_rank < 0 || c->node_rank >= c->nodes)
        ct_die("--node-rank: %d is not in 0..%d (--nodes %d)", c->node_rank, c->nodes - 1, c->nodes);
    if (c->nodes > 1 && !strchr(c->master, ':'))
        ct_die("--nodes %d: --master HOST:PORT (or MASTER_ADDR and MASTER_PORT) must name node 0 (got '%s')", c->nodes, c->master);
    if (strcmp(c->cuda_graphs, "on") && strcmp(c->cuda_graphs, "off"))
        ct_die("--cuda-graphs: '%s' is not on or off", c->cuda_graphs);
    if (strcmp(c->comm, "auto") && strcmp(c->comm, "nccl") && strcmp(c->comm, "host"))
        ct_die("--comm: '%s' is not one of auto, nccl, host", c->comm);
    if (!(c->timeout > 0)) ct_die("--timeout: must be > 0 seconds (got %g)", c->timeout);
    if (c->bucket_mb < 1) ct_die("--bucket-mb: must be >= 1 (got %d)", c->bucket_mb);
    if (c->teacher[0]) {
        const char *colon = strchr(c->teacher, ':');
        if (!colon || colon == c->teacher || !colon[1]) ct_die("--teacher: '%s' is not ARCH:PATH.safetensors", c->teacher);
        char arch[32];
        snprintf(arch, sizeof arch, "%.*s", (int)(colon - c->teacher), c->teacher);
        if (!resnet_arch_valid(arch)) ct_die("--teacher: unknown architecture '%s' (one of %s)", arch, resnet_arch_list());
        if (!ct_file_exists(colon + 1)) ct_die("--teacher: no such file '%s'", colon + 1);
    }
    if (c->evaluate && !c->weights[0] && !c->resume[0]) ct_die("--evaluate needs --weights PATH.safetensors or --resume PATH");
    if (c->weights[0] && c->resume[0]) ct_die("--weights and --resume exclude each other (a checkpoint carries its weights)");
    if (c->weights[0] && !ct_file_exists(c->weights)) ct_die("--weights: no such file '%s'", c->weights);
    if (c->resume[0] && !ct_file_exists(c->resume)) ct_die("--resume: no such file '%s'", c->resume);
}

// ---------------------------------------------------------------------------------------------
// Small helpers: JSON strings, the git commit, the machine.
static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
        else if (ch == '\n') fputs("\\n", f);
        else if (ch == '\t') fputs("\\t", f);
        else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
        else fputc(ch, f);
    }
    fputc('"', f);
}

// The commit of the source tree this binary was built from (its path is known at compile time),
// with "-dirty" when it had uncommitted changes; "unknown" when git or the tree is not there.
static void git_commit(char *buf, size_t n) {
    snprintf(buf, n, "unknown");
    char src[1024];
    snprintf(src, sizeof src, "%s", __FILE__);
    char *slash = strrchr(src, '/');
    if (slash) *slash = 0;
    else snprintf(src, sizeof src, ".");
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "git -C '%s' describe --always --dirty --abbrev=12 2>/dev/null", src);
    FILE *p = popen(cmd, "r");
    if (!p) return;
    char line[128];
    if (fgets(line, sizeof line, p)) {
        line[strcspn(line, "\r\n")] = 0;
        if (line[0]) snprintf(buf, n, "%s", line);
    }
    pclose(p);
}

static void cpu_model(char *buf, size_t n) {
    snprintf(buf, n, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "model name", 10)) {
            char *c = strchr(line, ':');
            if (c) {
                c++;
                while (*c == ' ') c++;
                c[strcspn(c, "\n")] = 0;
                snprintf(buf, n, "%s", c);
            }
            break;
        }
    }
    fclose(f);
}

static void fmt_duration(char *buf, size_t n, double s) {
    if (!(s >= 0) || s > 1e7) { snprintf(buf, n, "--:--"); return; }
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
    else snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
}

// ---------------------------------------------------------------------------------------------
// Signals: the first SIGINT/SIGTERM asks the loop to finish the current step, checkpoint and exit;
// a second one exits at once (the checkpoints on disk are always complete: atomic writes).
static volatile sig_atomic_t g_stop_signal;

static void on_signal(int sig) {
    if (g_stop_signal) {
        static const char msg[] = "\nctrain: second signal: exiting without a checkpoint\n";
        ssize_t r = write(2, msg, sizeof msg - 1);
        (void)r;
        _exit(128 + sig);
    }
    g_stop_signal = sig;
}

static void install_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

// ---------------------------------------------------------------------------------------------
// A set of global step ranges (fault injection).
typedef struct {
    int64_t lo[16], hi[16];
    int n;
} StepSet;

// The run: everything the epoch loop touches.
typedef struct {
    Config cfg;
    char out[900];
    int channels, classes;
    uint64_t class_hash;
    float *mean, *std;  // [channels]
    Shard train, val;
    int have_train;
    Loader *ltrain, *lval;
    ResNet *m;
    CpuExec *ex;
    float *grads, *dlogits;
    SgdConfig sgdc;
    SgdState opt;
    ResNet *teacher;
    CpuExec *tex;
    int cuda;  // --device cuda: the GPU executor holds the state between steps
    int bf16;  // --precision bf16 (either backend)
#ifdef CTRAIN_CUDA
    GpuExec *ge, *tge;
    GpuGradSync *ggs;  // data parallel on the GPU
#endif
    LrSchedule sched;
    int64_t steps_per_epoch;
    FILE *metrics;
    TfEvents *tb;
    int tty;
    // Position and bookkeeping (all of it goes into checkpoints).
    int epoch;              // epoch in progress (0-based)
    int64_t step_in_epoch;  // batches of it done
    double best_top1;
    int best_epoch;
    uint32_t nonfinite_total;
    double epoch_loss_sum;
    int64_t epoch_correct, epoch_seen;
    // Non-finite step recovery: BN running statistics before the step.
    float *bufs_backup;
    int64_t *counts_backup;
    // Fault injection for tests: CTRAIN_FAULT_NAN_STEPS="a,b,c-d" makes these global steps report a
    // NaN loss; CTRAIN_FAULT_NAN_GRAD_STEPS a NaN gradient (a finite loss, a NaN logit gradient).
    StepSet fault_loss, fault_grad;
    // CTRAIN_FAULT_STALL="RANK:STEP": that rank stops responding before that global step (the
    // others must end the run within --timeout, naming it). CTRAIN_FAULT_DIVERGE=RANK: that
    // rank's replica starts with one weight changed (the replica check must catch it).
    int stall_rank;
    int64_t stall_step;
    FILE *dump_train;
    // Data parallel: this rank, the rank count, the group's communicator, the gradient averager.
    // Rank 0 writes every output; all ranks keep the same (global) bookkeeping.
    int rank, world;
    int local_rank;  // among this process's ranks (which GPU it drives)
    Comm *comm;
    GradSync *gs;
} Run;

static void run_path(const Run *r, char *buf, size_t n, const char *name) { snprintf(buf, n, "%.900s/%.64s", r->out, name); }

static void parse_steps(StepSet *set, const char *env) {
    const char *s = getenv(env);
    if (!s || !*s) return;
    const char *p = s;
    while (*p && set->n < 16) {
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
static void parse_faults(Run *r) {
    parse_steps(&r->fault_loss, "CTRAIN_FAULT_NAN_STEPS");
    parse_steps(&r->fault_grad, "CTRAIN_FAULT_NAN_GRAD_STEPS");
    r->stall_rank = -1;
    const char *st = getenv("CTRAIN_FAULT_STALL");
    long long sr, ss;
    if (st && *st) {
        if (sscanf(st, "%lld:%lld", &sr, &ss) != 2) ct_die("CTRAIN_FAULT_STALL: '%s' is not RANK:STEP", st);
        r->stall_rank = (int)sr;
        r->stall_step = ss;
    }
    const char *dv = getenv("CTRAIN_FAULT_DIVERGE");
    if (dv && *dv && atoi(dv) == r->rank && r->world > 1) r->m->params[0] += 1e-3f;
}
static int step_in(const StepSet *set, int64_t step) {
    for (int i = 0; i < set->n; i++)
        if (step >= set->lo[i] && step <= set->hi[i]) return 1;
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Data: shards and loaders.
static void open_shards(Run *r) {
    const Config *c = &r->cfg;
    char tp[1100], vp[1100], err[SHARD_ERR_LEN];
    struct stat st;
    if (stat(c->shards, &st) != 0 || !S_ISDIR(st.st_mode))
        ct_die("SHARDS: '%s' is not a directory (it should hold train.shard and val.shard made by packdata)", c->shards);
    snprintf(tp, sizeof tp, "%s/train.shard", c->shards);
    snprintf(vp, sizeof vp, "%s/val.shard", c->shards);
    if (!ct_file_exists(vp)) ct_die("%s: missing (SHARDS must hold val.shard%s)", vp, c->evaluate ? "" : " and train.shard");
    if (shard_open_err(&r->val, vp, err, sizeof err) != 0) ct_die("%s", err);
    if (!c->evaluate) {
        if (!ct_file_exists(tp)) ct_die("%s: missing (SHARDS must hold train.shard and val.shard)", tp);
        if (shard_open_err(&r->train, tp, err, sizeof err) != 0) ct_die("%s", err);
        r->have_train = 1;
        if (r->train.channels != r->val.channels)
            ct_die("channel count mismatch: %s has %u channels, %s has %u", tp, r->train.channels, vp, r->val.channels);
        if (shard_same_classes_err(&r->train, &r->val, err, sizeof err) != 0) ct_die("%s", err);
        if (r->train.n_records < (uint64_t)c->batch * c->ranks)
            ct_die("%s: %llu records, fewer than one global batch (--batch-size %d x --ranks %d)", tp,
                   (unsigned long long)r->train.n_records, c->batch, c->ranks);
    }
    if (r->val.n_records == 0) ct_die("%s: no records", vp);
    r->channels = (int)r->val.channels;
    r->classes = (int)r->val.n_classes;
    r->class_hash = r->val.class_hash;
    if (r->classes < 2) ct_die("%s: %d class(es); training needs at least 2", vp, r->classes);
}

#ifdef CTRAIN_CUDA
// Locks each shard's mapping in RAM once (read-only host registration): the loader's workers read
// records from it for the whole run. Not fatal when the system refuses (ulimit -l, size).
static void pin_shards(Run *r) {
    Shard *sh[2] = {r->have_train ? &r->train : NULL, &r->val};
    for (int i = 0; i < 2; i++) {
        char err[256];
        if (!sh[i] || !sh[i]->base || !sh[i]->size) continue;
        if (gpu_pin_host(sh[i]->base, sh[i]->size, err, sizeof err) != 0)
            ct_warn("%s: could not pin the %.1f MB mapping (%s); reading it unpinned", sh[i]->path,
                    sh[i]->size / 1e6, err);
    }
}
#endif

static void make_loaders(Run *r) {
    const Config *c = &r->cfg;
    LoaderConfig lc;
    memset(&lc, 0, sizeof lc);
    lc.batch_size = c->batch;
    lc.crop = c->crop_size;
    lc.val_resize = c->val_resize;
    lc.workers = c->workers;
    lc.seed = (uint64_t)c->seed;
    lc.rank = r->rank;
    lc.world = r->world;
    lc.no_flip = c->no_flip;
    // Test hook: CTRAIN_FAULT_LOADER_DELAY_MS=n slows every loader worker by n ms per chunk.
    const char *slow = getenv("CTRAIN_FAULT_LOADER_DELAY_MS");
    lc.test_delay_us = slow ? 1000 * atoi(slow) : 0;
#ifdef CTRAIN_CUDA
    if (r->cuda) {  // batches leave the ring by DMA on the copy stream: page-locked buffers
        lc.alloc = gpu_pinned_alloc;
        lc.free = gpu_pinned_free;
    }
#endif
    if (r->have_train) {
        lc.train = 1;
        if (c->min_scale != 0.08) {
            lc.scale_min = (float)c->min_scale;
            lc.scale_max = 1.0f;
            lc.ratio_min = 3.0f / 4.0f;
            lc.ratio_max = 4.0f / 3.0f;
        }
        r->ltrain = loader_create(&r->train, &lc);
        r->steps_per_epoch = loader_batches_per_epoch(r->ltrain);
    }
    lc.train = 0;
    lc.no_flip = 1;
    lc.scale_min = lc.scale_max = lc.ratio_min = lc.ratio_max = 0;
    r->lval = loader_create(&r->val, &lc);
}

// ---------------------------------------------------------------------------------------------
// Metrics: one flat JSON object per line ("type": "step" | "epoch" | "skip" | "eval"). Wall-clock
// fields are "time", "img_s", "data_wait" and "epoch_time"; everything else is a pure function of
// the flags and the data (tests compare the lines with those fields removed).
static void metrics_open(Run *r, int64_t keep_up_to_step) {
    char path[1100];
    run_path(r, path, sizeof path, "metrics.jsonl");
    if (keep_up_to_step >= 0 && ct_file_exists(path)) {
        // A resume into the same directory: drop records past the checkpoint (written after it,
        // before the run died), so the file reads like one uninterrupted run.
        size_t n;
        char *text = ct_read_file(path, &n);
        AtomicFile af = ct_atomic_open(path);
        char *line = text;
        while (*line) {
            char *nl = strchr(line, '\n');
            size_t len = nl ? (size_t)(nl - line + 1) : strlen(line);
            const char *sp = strstr(line, "\"step\":");
            long long st = sp && sp < line + len ? atoll(sp + 7) : 0;
            if (nl && st <= keep_up_to_step) ct_atomic_write(&af, line, len);
            line += len;
        }
        ct_atomic_commit(&af);
        free(text);
    }
    r->metrics = fopen(path, keep_up_to_step >= 0 ? "a" : "w");
    if (!r->metrics) ct_die_errno("cannot open %s", path);
}

static void write_config(Run *r, int argc, char **argv, size_t n_params) {
    char path[1100], commit[128], cpu[256], host[256] = "unknown";
    run_path(r, path, sizeof path, "config.json");
    git_commit(commit, sizeof commit);
    cpu_model(cpu, sizeof cpu);
    gethostname(host, sizeof host - 1);
    struct utsname un;
    uname(&un);
    AtomicFile af = ct_atomic_open(path);
    FILE *f = af.f;
    fprintf(f, "{\n  \"settings\": {\n");
    for (int i = 0; i < N_FLAGS; i++) {
        const Flag *fl = &FLAGS[i];
        const void *p = (const char *)&r->cfg + fl->offset;
        fprintf(f, "    \"%s\": ", fl->name);
        switch (fl->type) {
        case F_INT: fprintf(f, "%d", *(const int *)p); break;
        case F_LL: fprintf(f, "%lld", *(const long long *)p); break;
        case F_DBL: fprintf(f, "%.17g", *(const double *)p); break;
        case F_STR: json_str(f, *(const char *const *)p); break;
        case F_BOOL: fprintf(f, "%s", *(const int *)p ? "true" : "false"); break;
        }
        fprintf(f, ",\n");
    }
    fprintf(f, "    \"shards\": ");
    json_str(f, r->cfg.shards);
    fprintf(f, "\n  },\n  \"derived\": {\n    \"global_batch\": %d,\n    \"world_size\": %d,\n", r->cfg.batch * r->world, r->world);
    fprintf(f, "    \"steps_per_epoch\": %lld,\n", (long long)r->steps_per_epoch);
    fprintf(f, "    \"train_records\": %llu,\n    \"val_records\": %llu,\n",
            (unsigned long long)(r->have_train ? r->train.n_records : 0), (unsigned long long)r->val.n_records);
    fprintf(f, "    \"channels\": %d,\n    \"classes\": %d,\n    \"class_hash\": \"%016llx\",\n", r->channels, r->classes,
            (unsigned long long)r->class_hash);
    fprintf(f, "    \"mean\": [");
    for (int i = 0; i < r->channels; i++) fprintf(f, "%s%.9g", i ? ", " : "", r->mean[i]);
    fprintf(f, "],\n    \"std\": [");
    for (int i = 0; i < r->channels; i++) fprintf(f, "%s%.9g", i ? ", " : "", r->std[i]);
    fprintf(f, "],\n    \"parameters\": %zu,\n    \"precision\": \"%s\"\n  },\n", n_params, r->cfg.precision);
    fprintf(f, "  \"command\": [");
    for (int i = 0; i < argc; i++) { if (i) fputs(", ", f); json_str(f, argv[i]); }
    fprintf(f, "],\n  \"git_commit\": ");
    json_str(f, commit);
    time_t now = time(NULL);
    char when[64];
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    fprintf(f, ",\n  \"started\": \"%s\",\n  \"machine\": {\n    \"hostname\": ", when);
    json_str(f, host);
    fprintf(f, ",\n    \"os\": ");
    char os[600];
    snprintf(os, sizeof os, "%s %s %s", un.sysname, un.release, un.machine);
    json_str(f, os);
    fprintf(f, ",\n    \"cpu\": ");
    json_str(f, cpu);
    fprintf(f, ",\n    \"cpus\": %ld,\n    \"omp_threads\": %d,\n    \"device\": ", sysconf(_SC_NPROCESSORS_ONLN), omp_get_max_threads());
    json_str(f, r->cfg.device);
    fprintf(f, "\n  }\n}\n");
    ct_atomic_commit(&af);
}

// ---------------------------------------------------------------------------------------------
// Backend dispatch: the CPU executor, or the GPU one (kernels/model_cuda.h mirrors it).
static const float *forward_u8(Run *r, int teacher, const uint8_t *x, int N, int hw, int train) {
    ResNet *m = teacher ? r->teacher : r->m;
#ifdef CTRAIN_CUDA
    if (r->cuda) return gpu_forward_u8(teacher ? r->tge : r->ge, m, x, N, hw, hw, r->mean, r->std, train);
#endif
    return cpu_forward_u8(teacher ? r->tex : r->ex, m, x, N, hw, hw, r->mean, r->std, train);
}
// Bring the device's params, BN statistics and momentum into the host structs (checkpoints, files).
static void sync_to_host(Run *r) {
#ifdef CTRAIN_CUDA
    if (r->cuda) gpu_download_state(r->ge, r->m, r->grads ? &r->opt : NULL);
#else
    (void)r;
#endif
}

// ---------------------------------------------------------------------------------------------
// Checkpoints.
static void save_checkpoint(Run *r, const char *name, int64_t global_step) {
    sync_to_host(r);
    char path[1100];
    run_path(r, path, sizeof path, name);
    CheckpointMeta meta;
    memset(&meta, 0, sizeof meta);
    snprintf(meta.arch, sizeof meta.arch, "%s", r->m->arch);
    meta.num_classes = (uint32_t)r->classes;
    meta.in_channels = (uint32_t)r->channels;
    meta.class_hash = r->class_hash;
    meta.epoch = (uint32_t)r->epoch;
    meta.global_step = global_step;
    meta.step_in_epoch = r->step_in_epoch;
    meta.seed = (uint64_t)r->cfg.seed;
    meta.best_top1 = r->best_top1;
    meta.best_epoch = r->best_epoch;
    meta.nonfinite_total = r->nonfinite_total;
    meta.n_params = r->m->n_params;
    meta.n_buffers = r->m->n_bufs;
    meta.n_counts = r->m->n_counts;
    meta.opt_steps = r->opt.steps;
    meta.epoch_loss_sum = r->epoch_loss_sum;
    meta.epoch_correct = r->epoch_correct;
    meta.epoch_seen = r->epoch_seen;
    checkpoint_save(path, &meta, r->m->params, r->cfg.momentum > 0 ? r->opt.buf : NULL, r->m->bufs, r->m->counts);
}

// Load a checkpoint for --resume (or --evaluate --resume) with every compatibility check.
static void load_checkpoint(Run *r, const char *path, int restore_position) {
    Checkpoint ck;
    const char *err = checkpoint_load(path, &ck);
    if (err) ct_die("--resume %s: %s", path, err);
    const CheckpointMeta *m = &ck.meta;
    if (strcmp(m->arch, r->m->arch))
        ct_die("--resume %s: checkpoint is a %s, this run is a %s (--arch)", path, m->arch, r->m->arch);
    if ((int)m->in_channels != r->channels)
        ct_die("--resume %s: checkpoint has %u input channels, the shards have %d", path, m->in_channels, r->channels);
    if ((int)m->num_classes != r->classes)
        ct_die("--resume %s: checkpoint has %u classes, the shards have %d", path, m->num_classes, r->classes);
    if (m->class_hash != r->class_hash)
        ct_die("--resume %s: class table differs from the shards' (hash %016llx vs %016llx): trained on another dataset",
               path, (unsigned long long)m->class_hash, (unsigned long long)r->class_hash);
    if (m->n_params != r->m->n_params || m->n_buffers != r->m->n_bufs || m->n_counts != r->m->n_counts)
        ct_die("--resume %s: tensor sizes differ from a %s (%llu/%llu/%llu vs %zu/%zu/%zu)", path, r->m->arch,
               (unsigned long long)m->n_params, (unsigned long long)m->n_buffers, (unsigned long long)m->n_counts,
               r->m->n_params, r->m->n_bufs, r->m->n_counts);
    memcpy(r->m->params, ck.params, m->n_params * sizeof(float));
    memcpy(r->m->bufs, ck.buffers, m->n_buffers * sizeof(float));
    memcpy(r->m->counts, ck.counts, m->n_counts * sizeof(int64_t));
    if (restore_position) {
        if (ck.momentum) memcpy(r->opt.buf, ck.momentum, m->n_params * sizeof(float));
        else if (r->cfg.momentum > 0 && m->opt_steps > 0)
            ct_die("--resume %s: checkpoint has no momentum buffer but --momentum is %g", path, r->cfg.momentum);
        r->opt.steps = m->opt_steps;
        if ((uint64_t)r->cfg.seed != m->seed)
            ct_warn("--resume %s: checkpoint was trained with --seed %llu, continuing with --seed %lld", path,
                    (unsigned long long)m->seed, r->cfg.seed);
        r->epoch = (int)m->epoch;
        r->step_in_epoch = m->step_in_epoch;
        r->best_top1 = m->best_top1;
        r->best_epoch = m->best_epoch;
        r->nonfinite_total = m->nonfinite_total;
        r->epoch_loss_sum = m->epoch_loss_sum;
        r->epoch_correct = m->epoch_correct;
        r->epoch_seen = m->epoch_seen;
        if (r->step_in_epoch > r->steps_per_epoch)
            ct_die("--resume %s: checkpoint stands at step %lld of epoch %d but an epoch has %lld steps with --batch-size %d",
                   path, (long long)r->step_in_epoch, r->epoch + 1, (long long)r->steps_per_epoch, r->cfg.batch);
    }
    checkpoint_free(&ck);
}

// ---------------------------------------------------------------------------------------------
// Batch dumps for the PyTorch comparison (tools/torch_train_ref.py reads them):
//   per batch: "BTCH" | i32 n, h, w, c | i32 epoch | i64 global step | f32 lr | i32 labels[n] | u8 pixels[n*h*w*c]
static void dump_batch(FILE *f, const LoaderBatch *b, int hw, int c, int epoch, int64_t step, float lr) {
    int32_t hdr[5] = {b->count, hw, hw, c, epoch};
    fwrite("BTCH", 1, 4, f);
    fwrite(hdr, 4, 5, f);
    fwrite(&step, 8, 1, f);
    fwrite(&lr, 4, 1, f);
    fwrite(b->labels, 4, (size_t)b->count, f);
    fwrite(b->images, 1, (size_t)b->count * hw * hw * c, f);
}

// DIR/NAME.bin, or DIR/NAME.rankK.bin for each rank of a data-parallel run.
static FILE *dump_open(const Run *r, const char *name) {
    char path[1100];
    if (r->world > 1) snprintf(path, sizeof path, "%.900s/%.64s.rank%d.bin", r->cfg.dump_batches, name, r->rank);
    else snprintf(path, sizeof path, "%.900s/%.64s.bin", r->cfg.dump_batches, name);
    FILE *f = fopen(path, "wb");
    if (!f) ct_die_errno("--dump-batches: cannot create %s", path);
    return f;
}

// ---------------------------------------------------------------------------------------------
// Evaluation: every val record exactly once. Loss is the plain cross-entropy (no smoothing).
typedef struct {
    double loss, top1, top5;
    int64_t n;
} EvalResult;

static void bn_stats_from_rank0(Run *r);

// With ranks, each evaluates its exact share (every record once across ranks, no padding) with
// rank 0's BN running statistics (DDP broadcasts rank 0's buffers), and the sums are reduced.
static EvalResult evaluate(Run *r, int dump) {
    EvalResult res = {0, 0, 0, 0};
    int hw = r->cfg.crop_size, K = r->classes, k5 = CT_MIN(5, K);
    double loss_sum = 0;
    int64_t c1 = 0, c5 = 0;
    if (r->world > 1) bn_stats_from_rank0(r);
    FILE *df = dump ? dump_open(r, "val_batches") : NULL;
    loader_start_epoch(r->lval, 0);
    LoaderBatch b;
    while (loader_next(r->lval, &b)) {
        const float *logits = forward_u8(r, 0, b.images, b.count, hw, 0);
        int correct = 0;
        float l = softmax_xent(r->dlogits, logits, b.labels, b.count, K, 0.0f, 1.0f, &correct);
        loss_sum += (double)l * b.count;
        c1 += correct;
        c5 += topk_correct(logits, b.labels, b.count, K, k5);
        res.n += b.count;
        if (df) dump_batch(df, &b, hw, r->channels, -1, 0, 0.0f);
        loader_release(r->lval, &b);
    }
    if (df) fclose(df);
    if (r->world > 1) {
        double v[4] = {loss_sum, (double)c1, (double)c5, (double)res.n};
        comm_allreduce_f64(r->comm, v, 4);
        loss_sum = v[0];
        c1 = (int64_t)v[1];
        c5 = (int64_t)v[2];
        res.n = (int64_t)v[3];
    }
    res.loss = loss_sum / (double)res.n;
    res.top1 = 100.0 * (double)c1 / (double)res.n;
    res.top5 = 100.0 * (double)c5 / (double)res.n;
    return res;
}

// ---------------------------------------------------------------------------------------------
// One training step on a batch. With ranks, the loss, hits and batch size come back summed over
// the ranks (and whether any rank was asked to stop), so every rank takes the same decisions: a
// non-finite loss anywhere skips the step everywhere; gradients are averaged while backward runs,
// and the average is the same bits on every rank, so the finiteness check agrees too.
typedef struct {
    float loss;      // mean over the global batch (NaN/inf when the step was skipped)
    int64_t correct, n;
    int skipped, stop;
} StepResult;

static StepResult train_step(Run *r, const LoaderBatch *b, double lr, int64_t global_step) {
    ResNet *m = r->m;
    if (r->rank == r->stall_rank && global_step == r->stall_step)
        for (;;) pause();  // a hung rank (test hook): never returns
    int hw = r->cfg.crop_size, K = r->classes, N = b->count;
#ifdef CTRAIN_CUDA
    if (r->cuda) gpu_bufs_snapshot(r->ge);
    else
#endif
        memcpy(r->bufs_backup, m->bufs, m->n_bufs * sizeof(float));
    memcpy(r->counts_backup, m->counts, m->n_counts * sizeof(int64_t));
    double alpha = r->teacher ? r->cfg.kd_alpha : 0.0;
    int correct = 0;
    float ce, loss;
    // Cross-entropy writes dlogits scaled by (1 - alpha); distillation adds its alpha share. With no
    // teacher this is the same arithmetic as alpha = 0 (scale 1), which the KD test relies on. Each
    // rank's gradient is of its own mean loss; averaging over ranks makes the global mean.
#ifdef CTRAIN_CUDA
    if (r->cuda) {  // the same losses on the device: the logits never leave it
        gpu_forward_u8_dev(r->ge, m, b->images, N, hw, hw, r->mean, r->std, 1);
        ce = gpu_loss_xent(r->ge, m, b->labels, N, (float)r->cfg.label_smoothing, (float)(1.0 - alpha), &correct);
        loss = ce;
        if (r->teacher) {
            gpu_forward_u8_dev(r->tge, r->teacher, b->images, N, hw, hw, r->mean, r->std, 0);
            gpu_exec_sync(r->tge);
            float kd = gpu_loss_kd(r->ge, m, gpu_exec_logits(r->tge), N, (float)r->cfg.kd_temperature, (float)alpha);
            loss = (float)(1.0 - alpha) * ce + (float)alpha * kd;
        }
        if (step_in(&r->fault_grad, global_step)) gpu_dlogits_poison(r->ge);  // every gradient becomes NaN
    } else
#endif
    {
        const float *logits = forward_u8(r, 0, b->images, N, hw, 1);
        ce = softmax_xent(r->dlogits, logits, b->labels, N, K, (float)r->cfg.label_smoothing, (float)(1.0 - alpha), &correct);
        loss = ce;
        if (r->teacher) {
            const float *tl = forward_u8(r, 1, b->images, N, hw, 0);
            float kd = kd_loss(r->dlogits, logits, tl, N, K, (float)r->cfg.kd_temperature, (float)alpha);
            loss = (float)(1.0 - alpha) * ce + (float)alpha * kd;
        }
        if (step_in(&r->fault_grad, global_step)) r->dlogits[0] = NAN;  // every gradient becomes NaN
    }
    if (step_in(&r->fault_loss, global_step)) loss = NAN;
    StepResult res = {loss, correct, N, 0, g_stop_signal != 0};
    if (r->world > 1) {
        double v[4] = {(double)loss * N, (double)correct, (double)N, (double)(g_stop_signal != 0)};
        comm_allreduce_f64(r->comm, v, 4);
        res.loss = (float)(v[0] / v[2]);
        res.correct = (int64_t)v[1];
        res.n = (int64_t)v[2];
        res.stop = v[3] > 0;
    }
    if (isfinite(res.loss)) {
#ifdef CTRAIN_CUDA
        if (r->cuda) {
            // The gradients stay on the device; only the finiteness flag comes back.
            if (r->ggs) {
                gpu_gradsync_begin(r->ggs);
                gpu_backward_dev(r->ge, m, gpu_gradsync_ready, r->ggs);
                gpu_gradsync_wait(r->ggs);
            } else {
                gpu_backward_dev(r->ge, m, NULL, NULL);
            }
            if (gpu_grads_finite(r->ge)) {
                gpu_sgd_step(r->ge, m, &r->sgdc, &r->opt, (float)lr);
                return res;
            }
            res.loss = NAN;
        } else
#endif
        {
            if (r->gs) {
                gradsync_begin(r->gs);
                cpu_backward(r->ex, m, r->dlogits, r->grads, gradsync_ready, r->gs);
                gradsync_wait(r->gs);
            } else {
                cpu_backward(r->ex, m, r->dlogits, r->grads, NULL, NULL);
            }
            if (all_finite(r->grads, m->n_params)) {
                sgd_step(&r->sgdc, &r->opt, m, m->params, r->grads, (float)lr);
                return res;
            }
            res.loss = NAN;
        }
    }
    // Skip: the weights are untouched (no update), and the BN statistics go back to before the step.
#ifdef CTRAIN_CUDA
    if (r->cuda) gpu_bufs_rollback(r->ge);
    else
#endif
        memcpy(m->bufs, r->bufs_backup, m->n_bufs * sizeof(float));
    memcpy(m->counts, r->counts_backup, m->n_counts * sizeof(int64_t));
    res.skipped = 1;
    return res;
}

// ---------------------------------------------------------------------------------------------
// Demo: pack Fashion-MNIST on first use.
static void demo_prepare(void) {
    char tp[256], vp[256];
    snprintf(tp, sizeof tp, "%s/train.shard", DEMO_SHARDS);
    snprintf(vp, sizeof vp, "%s/val.shard", DEMO_SHARDS);
    if (ct_file_exists(tp) && ct_file_exists(vp)) return;
    const char *need = DEMO_IDX_DIR "/train-images-idx3-ubyte.gz";
    if (!ct_file_exists(need)) {
        if (geteuid() == 0) {
            fprintf(stderr, "demo: installing Debian's dataset-fashion-mnist\n");
            int rc = system("DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dataset-fashion-mnist >/dev/null "
                            "|| (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dataset-fashion-mnist >/dev/null)");
            if (rc != 0 || !ct_file_exists(need)) ct_die("demo: installing dataset-fashion-mnist failed; run: apt-get install dataset-fashion-mnist");
        } else {
            ct_die("demo: %s not found; install the data with: sudo apt-get install dataset-fashion-mnist", need);
        }
    }
    fprintf(stderr, "demo: packing %s into %s/\n", DEMO_IDX_DIR, DEMO_SHARDS);
    ct_mkdir_p(DEMO_SHARDS);
    idx_pack_dir(DEMO_IDX_DIR, DEMO_SHARDS, NULL, 10);
}

// ---------------------------------------------------------------------------------------------
// Progress: a live line on a terminal, plain lines otherwise.
typedef struct {
    double t_start;          // this process's training start
    int64_t steps_done;      // steps run by this process (for the ETA)
    double t_last, wait_last;
    int64_t seen_last;       // samples at t_last
    double t_draw;
    int drawn;               // a live line is on screen
} Progress;

static void progress_clear(Run *r, Progress *p) {
    if (r->tty && p->drawn) { fprintf(stderr, "\r\033[K"); p->drawn = 0; }
}

// ---------------------------------------------------------------------------------------------
#ifdef CTRAIN_CUDA
static void select_device_cb(void *ctx, int rank) {
    (void)ctx;
    gpu_select_device(rank % gpu_device_count());  // global rank -> this node's device
}

// NCCL communicators for the GPU ranks of this process (--comm): NULL means host staging. With
// several nodes, node 0 makes NCCL's unique id and sends it to the others over the rendezvous link.
static void **gpu_ranks_nccl(const Config *c, int local, int offset, int world, NodeNet *net, const NcclLib **lib) {
    char err[800];
    *lib = strcmp(c->comm, "host") ? nccl_load(err, sizeof err) : NULL;
    if (!*lib) {
        if (!strcmp(c->comm, "nccl")) ct_die("--comm nccl: %s", err);
        if (!strcmp(c->comm, "auto"))
            ct_warn("%s; GPU gradients are averaged through pinned host memory instead (slower; --comm host "
                    "silences this)", err);
        return NULL;
    }
    NcclId id;
    memset(&id, 0, sizeof id);
    if (offset == 0 && nccl_unique_id(*lib, &id, err, sizeof err)) ct_die("NCCL %s: %s", nccl_describe(*lib), err);
    if (net && net_broadcast(net, &id, sizeof id, 0, err, sizeof err)) ct_die("NCCL unique id from node 0: %s", err);
    void **comms = ct_zalloc(local * sizeof(void *));
    int *ranks = ct_alloc(local * sizeof(int));
    for (int k = 0; k < local; k++) ranks[k] = offset + k;
    if (nccl_init_ranks(*lib, comms, local, world, ranks, &id, select_device_cb, NULL, err, sizeof err))
        ct_die("NCCL %s: %s; --comm host averages the gradients through host memory instead", nccl_describe(*lib), err);
    free(ranks);
    if (offset == 0) fprintf(stderr, "train: NCCL %s: %d ranks\n", nccl_describe(*lib), world);
    return comms;
}
#endif

static int n_gpu_buckets(const Run *r) {
#ifdef CTRAIN_CUDA
    if (r->ggs) return gpu_gradsync_buckets(r->ggs);
#endif
    (void)r;
    return 0;
}

// With ranks, every rank evaluates with rank 0's BN running statistics (DDP's broadcast_buffers).
static void bn_stats_from_rank0(Run *r) {
#ifdef CTRAIN_CUDA
    if (r->cuda) gpu_bufs_to_host(r->ge, r->m->bufs);
#endif
    comm_broadcast(r->comm, r->m->bufs, r->m->n_bufs * sizeof(float), 0);
#ifdef CTRAIN_CUDA
    if (r->cuda) gpu_bufs_from_host(r->ge, r->m->bufs);
#endif
}

// Data parallel: every replica must hold exactly rank 0's weights and momentum (same averaged
// gradients, same update). A rank whose checksum differs has silently diverged (a misconfigured
// or non-deterministic replica): an error naming it, before rank 0 checkpoints.
static void check_replicas(Run *r, int epochs_done) {
    sync_to_host(r);
    uint32_t crc = crc32c(0, r->m->params, r->m->n_params * sizeof(float));
    if (r->cfg.momentum > 0) crc = crc32c(crc, r->opt.buf, r->m->n_params * sizeof(float));
    uint32_t crc0 = crc;
    comm_broadcast(r->comm, &crc0, sizeof crc0, 0);
    if (crc != crc0)
        ct_die("rank %d's weights differ from rank 0's after epoch %d (checksum %08x vs %08x): the replicas have "
               "diverged, so their gradients were not the same average", r->rank, epochs_done, crc, crc0);
}

// ---------------------------------------------------------------------------------------------
// The epoch loop of one rank. Every rank runs it (rank 0 on the main thread); rank 0 writes the
// progress line, metrics, TensorBoard events and checkpoints. Returns 0, or 128 + the signal when
// a SIGINT/SIGTERM stopped the run after a checkpoint.
static int train_loop(Run *r, EvalResult *final_eval) {
    const Config *c = &r->cfg;
    const int lead = r->rank == 0;
    // ---- the epoch loop ----
    Progress pr;
    memset(&pr, 0, sizeof pr);
    pr.t_start = ct_now();
    int64_t total_steps = (int64_t)c->epochs * r->steps_per_epoch;
    int consecutive_bad = 0;
    EvalResult last_eval = {0, 0, 0, 0};
    int stopped = 0;
    for (; r->epoch < c->epochs; r->epoch++) {
        double t_epoch = ct_now(), wait_epoch = loader_wait_seconds(r->ltrain);
        int64_t seen_at_start = r->epoch_seen;
        loader_start_epoch(r->ltrain, r->epoch);
        pr.t_last = t_epoch;
        pr.wait_last = wait_epoch;
        pr.seen_last = r->epoch_seen;
        LoaderBatch b;
        // A resume mid-epoch: skip the batches done before the checkpoint (same batches, same order).
        for (int64_t i = 0; i < r->step_in_epoch; i++) {
            if (!loader_next(r->ltrain, &b)) ct_die("internal: epoch %d ended while skipping to step %lld", r->epoch, (long long)r->step_in_epoch);
            loader_release(r->ltrain, &b);
        }
        // On the GPU the next batch is taken from the ring and its copy started on the copy stream
        // before this step runs, so the transfer overlaps the compute (two batches held at once).
        LoaderBatch next;
        int have_next = 0;
        while (r->step_in_epoch < r->steps_per_epoch) {
            int staged = have_next;  // b's copy was started during the previous step
            if (have_next) {
                b = next;
                have_next = 0;
            } else if (!loader_next(r->ltrain, &b))
                ct_die("internal: the loader ended epoch %d after %lld of %lld batches", r->epoch + 1,
                       (long long)r->step_in_epoch, (long long)r->steps_per_epoch);
#ifdef CTRAIN_CUDA
            if (r->cuda && r->step_in_epoch + 1 < r->steps_per_epoch && !g_stop_signal) {
                if (!staged) gpu_prefetch_u8(r->ge, b.images, b.count, c->crop_size, c->crop_size);
                if (!loader_next(r->ltrain, &next)) ct_die("internal: the loader ended epoch %d early", r->epoch + 1);
                have_next = 1;
                gpu_prefetch_u8(r->ge, next.images, next.count, c->crop_size, c->crop_size);
            }
#else
            (void)staged;
#endif
            int64_t gstep = (int64_t)r->epoch * r->steps_per_epoch + r->step_in_epoch;
            double lr = lr_at(&r->sched, gstep);
            if (r->dump_train) dump_batch(r->dump_train, &b, c->crop_size, r->channels, r->epoch, gstep + 1, (float)lr);
            StepResult sr = train_step(r, &b, lr, gstep + 1);
            float loss = sr.loss;
            int skipped = sr.skipped;
            int64_t correct = sr.correct, n = sr.n;  // over all ranks
            loader_release(r->ltrain, &b);
            r->step_in_epoch++;
            pr.steps_done++;
            int64_t step = gstep + 1;  // steps done in the whole run
            if (skipped) {
                consecutive_bad++;
                r->nonfinite_total++;
                if (lead) {
                    progress_clear(r, &pr);
                    fprintf(stderr, "train: epoch %d step %lld: non-finite loss or gradient (%g); step skipped (%d in a row)\n",
                            r->epoch + 1, (long long)step, loss, consecutive_bad);
                    fprintf(r->metrics, "{\"type\":\"skip\",\"epoch\":%d,\"step\":%lld,\"lr\":%.9g,\"consecutive\":%d}\n",
                            r->epoch + 1, (long long)step, lr, consecutive_bad);
                    fflush(r->metrics);
                }
                // Every rank counts the same skips; rank 0 ends the process (the others are then
                // waiting in the next step's collective).
                if (lead && consecutive_bad >= c->max_nonfinite) {
                    char lp[1100];
                    run_path(r, lp, sizeof lp, "last.ckpt");
                    ct_die("%d consecutive steps with a non-finite loss or gradient (epoch %d, step %lld, lr %g): the run has "
                           "diverged; stopping. %s", consecutive_bad, r->epoch + 1, (long long)step, lr,
                           ct_file_exists(lp) ? "The last good checkpoint is kept: resume from it with a lower --lr"
                                              : "No checkpoint was written yet (diverged within the first epoch)");
                }
            } else {
                consecutive_bad = 0;
                r->epoch_loss_sum += loss * (double)n;
                r->epoch_correct += correct;
                r->epoch_seen += n;
            }
            int last_of_epoch = r->step_in_epoch == r->steps_per_epoch;
            int record = r->step_in_epoch % c->print_freq == 0 || last_of_epoch;
            double now = ct_now();
            if (lead && (record || (r->tty && now - pr.t_draw > 0.25))) {
                double dt = now - pr.t_last, wnow = loader_wait_seconds(r->ltrain);
                double img_s = dt > 0 ? (double)(r->epoch_seen - pr.seen_last) / dt : 0;
                double wait = dt > 0 ? (wnow - pr.wait_last) / dt : 0;
                double avg = r->epoch_seen ? r->epoch_loss_sum / (double)r->epoch_seen : NAN;
                double eta = (now - pr.t_start) / (double)pr.steps_done * (double)(total_steps - step);
                char etas[32];
                fmt_duration(etas, sizeof etas, eta);
                if (r->tty) {
                    fprintf(stderr, "\r\033[Kepoch %d/%d [%lld/%lld] loss %.4f (avg %.4f) lr %.4g %.0f img/s data-wait %.1f%% ETA %s",
                            r->epoch + 1, c->epochs, (long long)r->step_in_epoch, (long long)r->steps_per_epoch, loss, avg, lr,
                            img_s, 100 * wait, etas);
                    pr.drawn = 1;
                    pr.t_draw = now;
                } else if (record) {
                    fprintf(stderr, "epoch %d/%d [%lld/%lld] loss %.4f (avg %.4f) lr %.4g %.0f img/s data-wait %.1f%% ETA %s\n",
                            r->epoch + 1, c->epochs, (long long)r->step_in_epoch, (long long)r->steps_per_epoch, loss, avg, lr,
                            img_s, 100 * wait, etas);
                }
                if (record) {
                    fprintf(r->metrics, "{\"type\":\"step\",\"epoch\":%d,\"step\":%lld,\"loss\":%.9g,\"loss_avg\":%.9g,\"top1\":%.9g,"
                                        "\"lr\":%.9g,\"img_s\":%.1f,\"data_wait\":%.4f,\"time\":%.3f}\n",
                            r->epoch + 1, (long long)step, loss, avg, 100.0 * correct / n, lr, img_s, wait, now - pr.t_start);
                    fflush(r->metrics);
                    tfevents_scalar(r->tb, "train/loss", step, loss);
                    tfevents_scalar(r->tb, "train/lr", step, (float)lr);
                    tfevents_scalar(r->tb, "train/img_per_s", step, (float)img_s);
                    tfevents_scalar(r->tb, "train/data_wait", step, (float)wait);
                    pr.t_last = now;
                    pr.wait_last = wnow;
                    pr.seen_last = r->epoch_seen;
                }
            }
            if (sr.stop && !last_of_epoch) {  // agreed by all ranks in the step's reduction
                stopped = 1;
                if (!lead) break;
                progress_clear(r, &pr);
                save_checkpoint(r, "last.ckpt", step);
                fprintf(stderr, "train: %s: checkpoint saved to %s/last.ckpt at epoch %d step %lld/%lld; resume with --resume %s/last.ckpt\n",
                        g_stop_signal == SIGINT ? "SIGINT" : "SIGTERM", r->out, r->epoch + 1, (long long)r->step_in_epoch,
                        (long long)r->steps_per_epoch, r->out);
                break;
            }
        }
        if (have_next) loader_release(r->ltrain, &next);
        if (stopped) break;
        if (lead) progress_clear(r, &pr);
        // End of epoch: eval, records, checkpoints.
        double train_time = ct_now() - t_epoch, train_wait = loader_wait_seconds(r->ltrain) - wait_epoch;
        int64_t step = (int64_t)(r->epoch + 1) * r->steps_per_epoch;
        double t_eval = ct_now();
        EvalResult e = evaluate(r, r->dump_train && r->epoch + 1 == c->epochs);
        last_eval = e;
        double eval_time = ct_now() - t_eval;
        double tr_loss = r->epoch_seen ? r->epoch_loss_sum / (double)r->epoch_seen : NAN;
        double tr_top1 = r->epoch_seen ? 100.0 * (double)r->epoch_correct / (double)r->epoch_seen : NAN;
        double img_s = train_time > 0 ? (double)(r->epoch_seen - seen_at_start) / train_time : 0;
        int best = e.top1 > r->best_top1;
        if (best) { r->best_top1 = e.top1; r->best_epoch = r->epoch + 1; }
        if (lead) {
            fprintf(stderr, "epoch %d/%d  train loss %.4f top-1 %.2f%%  |  val loss %.4f top-1 %.2f%% top-5 %.2f%%%s  |  %.1fs "
                            "(eval %.1fs), %.0f img/s, data-wait %.1f%%\n",
                    r->epoch + 1, c->epochs, tr_loss, tr_top1, e.loss, e.top1, e.top5, best ? " (best)" : "", train_time + eval_time,
                    eval_time, img_s, train_time > 0 ? 100 * train_wait / train_time : 0);
            fprintf(r->metrics, "{\"type\":\"epoch\",\"epoch\":%d,\"step\":%lld,\"train_loss\":%.9g,\"train_top1\":%.9g,\"val_loss\":%.9g,"
                                "\"val_top1\":%.9g,\"val_top5\":%.9g,\"lr\":%.9g,\"skipped_steps\":%u,\"epoch_time\":%.3f,\"eval_time\":%.3f,"
                                "\"img_s\":%.1f,\"data_wait\":%.4f}\n",
                    r->epoch + 1, (long long)step, tr_loss, tr_top1, e.loss, e.top1, e.top5, lr_at(&r->sched, step - 1),
                    r->nonfinite_total, train_time + eval_time, eval_time, img_s, train_time > 0 ? train_wait / train_time : 0);
            fflush(r->metrics);
            // A starved device is the commonest silent waste: say so, with what to change.
            double wait_share = train_time > 0 ? train_wait / train_time : 0;
            if (wait_share > 0.1 && r->epoch_seen > seen_at_start)
                fprintf(stderr,
                        "train: warning: %.0f%% of epoch %d's training time was spent waiting for data: the loader "
                        "(%d worker thread%s) cannot keep up; give it more --workers (this machine has %ld cores), "
                        "or pack the shards smaller (packdata --max-short) or as LZ4 rather than JPEG\n",
                        100 * wait_share, r->epoch + 1, c->workers, c->workers == 1 ? "" : "s",
                        sysconf(_SC_NPROCESSORS_ONLN));
            tfevents_scalar(r->tb, "train/epoch_loss", step, (float)tr_loss);
            tfevents_scalar(r->tb, "train/top1", step, (float)tr_top1);
            tfevents_scalar(r->tb, "val/loss", step, (float)e.loss);
            tfevents_scalar(r->tb, "val/top1", step, (float)e.top1);
            tfevents_scalar(r->tb, "val/top5", step, (float)e.top5);
            tfevents_flush(r->tb);
        }
        // The position after this epoch: the next one, from its start.
        r->epoch++;
        r->step_in_epoch = 0;
        r->epoch_loss_sum = 0;
        r->epoch_correct = r->epoch_seen = 0;
        if (r->world > 1) check_replicas(r, r->epoch);  // r->epoch already counts this one
        if (lead) {
            save_checkpoint(r, "last.ckpt", step);
            if (best) save_checkpoint(r, "best.ckpt", step);
        }
        r->epoch--;
        int stop_now = g_stop_signal != 0;
        if (r->world > 1) {  // the ranks must agree on stopping here too
            double v = stop_now;
            comm_allreduce_f64(r->comm, &v, 1);
            stop_now = v > 0;
        }
        if (stop_now && r->epoch + 1 < c->epochs) {
            if (lead) fprintf(stderr, "train: %s: checkpoint saved to %s/last.ckpt after epoch %d; resume with --resume %s/last.ckpt\n",
                    g_stop_signal == SIGINT ? "SIGINT" : "SIGTERM", r->out, r->epoch + 1, r->out);
            stopped = 1;
            r->epoch++;
            break;
        }
        r->step_in_epoch = 0;
    }
    *final_eval = last_eval;
    if (r->dump_train) fclose(r->dump_train);
    if (lead) {
        tfevents_close(r->tb);
        fclose(r->metrics);
    }
    return stopped ? 128 + (g_stop_signal ? g_stop_signal : SIGTERM) : 0;
}

typedef struct {
    Run *r;
    int omp_threads;
    int rc;
    EvalResult eval;
    int evaluate_only;
} RankThread;

static void *rank_thread(void *arg) {
    RankThread *t = arg;
    omp_set_num_threads(t->omp_threads);
#ifdef CTRAIN_CUDA
    if (t->r->cuda) gpu_select_device(t->r->local_rank);  // per host thread
#endif
    if (t->evaluate_only) t->eval = evaluate(t->r, 0);
    else t->rc = train_loop(t->r, &t->eval);
    return NULL;
}

// Runs fn on every rank: ranks 1.. on their own threads, rank 0 on this one. Returns rank 0's rc.
static int run_ranks(Run *runs, int world, int evaluate_only, EvalResult *eval0) {
    int omp = omp_get_max_threads() / world;
    if (omp < 1) omp = 1;
    RankThread *t = ct_zalloc(world * sizeof *t);
    pthread_t *th = ct_zalloc(world * sizeof *th);
    for (int k = 0; k < world; k++) t[k] = (RankThread){&runs[k], omp, 0, {0, 0, 0, 0}, evaluate_only};
    for (int k = 1; k < world; k++)
        if (pthread_create(&th[k], NULL, rank_thread, &t[k])) ct_die("--ranks %d: cannot start rank %d's thread", world, k);
    rank_thread(&t[0]);
    for (int k = 1; k < world; k++) pthread_join(th[k], NULL);
    int rc = t[0].rc;
    *eval0 = t[0].eval;
    free(t);
    free(th);
    return rc;
}

// ---------------------------------------------------------------------------------------------
// Everything one rank owns: its model replica (the same init on every rank: the seed decides),
// executors, loaders over its share, and for training the optimizer, schedule, teacher and the
// state of a resumed checkpoint. r arrives with the shared settings (config, shards, mean/std).
static void setup_rank(Run *r) {
    const Config *c = &r->cfg;
    // Model.
    r->m = resnet_create(c->arch, r->channels, r->classes);
    if (!r->m) ct_die("--arch: unknown architecture '%s'", c->arch);
    resnet_init(r->m, (uint64_t)c->seed, c->zero_init_residual);
    {
        TensorDim *dims = ct_alloc(sizeof(TensorDim) * r->m->n_tensors);
        if (resnet_shapes(r->m, c->crop_size, c->crop_size, dims) != 0)
            ct_die("--crop-size %d: too small for %s (some layer would have no pixels left)", c->crop_size, c->arch);
        free(dims);
    }
    r->ex = cpu_exec_create(r->m);
    cpu_exec_set_bf16(r->ex, r->bf16);
    r->dlogits = ct_alloc(sizeof(float) * (size_t)c->batch * r->classes);
    if (c->weights[0]) st_load_resnet(c->weights, r->m);

#ifdef CTRAIN_CUDA
    if (r->cuda && r->local_rank == 0) pin_shards(r);  // the mapping is shared by this node's ranks
#endif
    make_loaders(r);
#ifdef CTRAIN_CUDA
    CtDtype dt = r->bf16 ? CT_BF16 : CT_F32;
    if (r->cuda) {
        gpu_select_device(r->local_rank);  // one GPU per rank of this node
        r->ge = gpu_exec_create(r->m, dt);
        gpu_exec_use_graphs(r->ge, !strcmp(c->cuda_graphs, "on"));
    }
#endif

    if (c->evaluate) {
        if (c->resume[0]) load_checkpoint(r, c->resume, 0);
#ifdef CTRAIN_CUDA
        if (r->cuda) gpu_upload_state(r->ge, r->m, NULL);
#endif
        return;
    }

    // Optimizer, schedule, teacher.
    r->grads = ct_alloc(sizeof(float) * r->m->n_params);
    r->bufs_backup = ct_alloc(sizeof(float) * (r->m->n_bufs + 1));
    r->counts_backup = ct_alloc(sizeof(int64_t) * (r->m->n_counts + 1));
    r->sgdc.momentum = (float)c->momentum;
    r->sgdc.weight_decay = (float)c->wd;
    r->sgdc.nesterov = c->nesterov;
    r->sgdc.wd_exclude_bn_bias = c->no_wd_bn;
    sgd_init(&r->opt, r->m->n_params);
    lr_kind_parse(c->lr_schedule, &r->sched.kind);
    r->sched.base_lr = c->lr;
    r->sched.epochs = c->epochs;
    r->sched.steps_per_epoch = r->steps_per_epoch;
    r->sched.warmup_epochs = c->warmup_epochs;
    r->sched.step_size = c->lr_step_size;
    r->sched.gamma = c->lr_gamma;
    r->best_top1 = -1;
    r->best_epoch = 0;
    if (c->teacher[0]) {
        const char *colon = strchr(c->teacher, ':');
        char tarch[32];
        snprintf(tarch, sizeof tarch, "%.*s", (int)(colon - c->teacher), c->teacher);
        r->teacher = resnet_create(tarch, r->channels, r->classes);
        st_load_resnet(colon + 1, r->teacher);
        r->tex = cpu_exec_create(r->teacher);
        cpu_exec_set_bf16(r->tex, r->bf16);
    }
    parse_faults(r);

    if (c->resume[0]) load_checkpoint(r, c->resume, 1);
#ifdef CTRAIN_CUDA
    if (r->cuda) {
        gpu_upload_state(r->ge, r->m, &r->opt);
        if (r->teacher) {
            r->tge = gpu_exec_create(r->teacher, dt);
            gpu_upload_state(r->tge, r->teacher, NULL);
        }
    }
#endif
    if (r->epoch >= c->epochs && r->step_in_epoch == 0)
        ct_die("--resume %s: the checkpoint has finished epoch %d already; raise --epochs beyond %d to train on", c->resume, r->epoch, r->epoch);

}

// What every node of a run must agree on: every flag but the node-local ones (output directory,
// loader workers, print frequency, this node's number, the rendezvous address, the timeout, the
// batch dump, CUDA graphs), and the dataset as this node sees it (record counts, class table).
static uint64_t config_fingerprint(const Run *r) {
    static const char *local_flags[] = {"out",     "workers", "print-freq",   "node-rank",
                                        "master",  "timeout", "dump-batches", "cuda-graphs"};
    uint64_t h = 1469598103934665603ull;
#define FP_MIX(p, n)                                                       \
    for (size_t i_ = 0; i_ < (n); i_++) h = (h ^ ((const uint8_t *)(p))[i_]) * 1099511628211ull
    for (int i = 0; i < N_FLAGS; i++) {
        const Flag *fl = &FLAGS[i];
        int skip = 0;
        for (size_t j = 0; j < CT_ARRAY_LEN(local_flags); j++) skip |= !strcmp(fl->name, local_flags[j]);
        if (skip) continue;
        const void *p = (const char *)&r->cfg + fl->offset;
        FP_MIX(fl->name, strlen(fl->name));
        if (fl->type == F_STR) FP_MIX(*(const char *const *)p, strlen(*(const char *const *)p) + 1);
        else FP_MIX(p, fl->type == F_DBL ? sizeof(double) : fl->type == F_LL ? sizeof(long long) : sizeof(int));
    }
    FP_MIX(&r->class_hash, sizeof r->class_hash);
    FP_MIX(&r->train.n_records, sizeof r->train.n_records);
    FP_MIX(&r->val.n_records, sizeof r->val.n_records);
#undef FP_MIX
    return h;
}

static void print_banner(const Run *r) {
    const Config *c = &r->cfg;
    fprintf(stderr, "train: %s (%zu parameters), %d classes, %d channel(s), %dx%d crops\n", c->arch, r->m->n_params,
            r->classes, r->channels, c->crop_size, c->crop_size);
    fprintf(stderr, "train: %llu train / %llu val images from %s/; batch %d per rank x %d rank%s = global batch %d, "
                    "%lld steps per epoch\n",
            (unsigned long long)r->train.n_records, (unsigned long long)r->val.n_records, c->shards, c->batch, r->world,
            r->world > 1 ? "s" : "", c->batch * r->world, (long long)r->steps_per_epoch);
    if (r->world > 1)
        fprintf(stderr, "train: %d data-parallel ranks (threads, %d CPU threads each), gradients averaged in %d bucket(s) of "
                        "<= %d MB during backward\n", r->world, CT_MAX(1, omp_get_max_threads() / r->world),
                r->gs ? gradsync_buckets(r->gs) : n_gpu_buckets(r), c->bucket_mb);
    fprintf(stderr, "train: device %s%s (%d CPU threads, %d loader workers), lr %g %s, %d epochs, out %s/%s\n",
            r->cuda ? (r->bf16 ? "cuda, bf16" : "cuda, fp32") : (r->bf16 ? "cpu, bf16 rounding" : "cpu"),
            r->cuda && !strcmp(c->cuda_graphs, "on") ? ", CUDA graphs" : "", omp_get_max_threads(), c->workers, c->lr, c->lr_schedule, c->epochs, r->out,
            c->resume[0] ? " (resumed)" : "");
    if (c->resume[0])
        fprintf(stderr, "train: resuming %s at epoch %d step %lld/%lld\n", c->resume, r->epoch + 1,
                (long long)r->step_in_epoch, (long long)r->steps_per_epoch);

    if (c->nodes > 1) fprintf(stderr, "train: %d nodes x %d ranks\n", c->nodes, c->ranks);
}

int main(int argc, char **argv) {
    Run run;
    memset(&run, 0, sizeof run);
    Run *r = &run;
    Config *c = &r->cfg;
    config_defaults(c);
    int seen[N_FLAGS];
    memset(seen, 0, sizeof seen);
    parse_args(c, argc, argv, seen);
    if (c->demo) {
        // The demo recipe fills every flag the user did not give.
        Config user = *c;
        int dn = (int)CT_ARRAY_LEN(DEMO_ARGS), dseen[N_FLAGS];
        memset(dseen, 0, sizeof dseen);
        char *dargv[64];
        dargv[0] = argv[0];
        for (int i = 0; i < dn; i++) dargv[i + 1] = (char *)DEMO_ARGS[i];
        parse_args(c, dn + 1, dargv, dseen);
        for (int i = 0; i < N_FLAGS; i++)
            if (seen[i]) memcpy((char *)c + FLAGS[i].offset, (char *)&user + FLAGS[i].offset,
                                FLAGS[i].type == F_DBL ? sizeof(double) : FLAGS[i].type == F_LL ? sizeof(long long)
                                : FLAGS[i].type == F_STR ? sizeof(char *) : sizeof(int));
        if (c->shards[0]) ct_die("--demo takes no SHARDS argument (it uses %s/)", DEMO_SHARDS);
        c->shards = DEMO_SHARDS;
        if (!seen[find_flag_long("device", 6) - FLAGS]) c->device = "cpu";  // the demo is the CPU showcase
    }
    if (!c->shards[0]) { usage(stderr); ct_die("missing SHARDS directory (or --demo)"); }
    if (seen[find_flag_long("gpus", 4) - FLAGS]) {
        if (c->gpus < 1) ct_die("--gpus: must be >= 1 (got %d)", c->gpus);
        if (seen[find_flag_long("ranks", 5) - FLAGS] && c->ranks != c->gpus)
            ct_die("--gpus %d and --ranks %d disagree (--gpus N is --device cuda --ranks N)", c->gpus, c->ranks);
        if (seen[find_flag_long("device", 6) - FLAGS] && strcmp(c->device, "cuda"))
            ct_die("--gpus %d with --device %s: --gpus trains on GPUs", c->gpus, c->device);
        c->ranks = c->gpus;
        c->device = "cuda";
    }
    node_env_defaults(c, seen);
    validate_config(c);
    if (!strcmp(c->device, "auto")) {
#ifdef CTRAIN_CUDA
        c->device = gpu_available() ? "cuda" : "cpu";
#else
        c->device = "cpu";
#endif
    }
    if (!strcmp(c->device, "cuda")) {
#ifdef CTRAIN_CUDA
        if (!gpu_available()) ct_die("--device cuda: no usable CUDA device (use --device cpu)");
        r->cuda = 1;
#else
        ct_die("--device cuda: this train was built without CUDA (no nvcc at build time); use --device cpu");
#endif
    }
    if (!c->deterministic) ct_warn("--no-deterministic: the CPU backend is deterministic anyway");
#ifdef CTRAIN_CUDA
    if (r->cuda && c->ranks > 1) {
        int ndev = gpu_device_count();
        if (c->ranks > ndev)
            ct_die("--ranks %d with --device cuda: one GPU per rank, and this node has %d", c->ranks, ndev);
    }
#endif
    if (!strcmp(c->precision, "auto")) c->precision = r->cuda ? "bf16" : "fp32";
    r->bf16 = !strcmp(c->precision, "bf16");
    double t_program = ct_now();

    if (c->demo) demo_prepare();
    open_shards(r);
    r->mean = ct_alloc(sizeof(float) * r->channels);
    r->std = ct_alloc(sizeof(float) * r->channels);
    if (!strcmp(c->mean, "auto")) {
        static const float im_mean[3] = {0.485f, 0.456f, 0.406f};
        for (int i = 0; i < r->channels; i++) r->mean[i] = r->channels == 3 ? im_mean[i] : 0.5f;
    } else parse_floats("mean", c->mean, r->mean, r->channels);
    if (!strcmp(c->std, "auto")) {
        static const float im_std[3] = {0.229f, 0.224f, 0.225f};
        for (int i = 0; i < r->channels; i++) r->std[i] = r->channels == 3 ? im_std[i] : 0.25f;
    } else parse_floats("std", c->std, r->std, r->channels);
    for (int i = 0; i < r->channels; i++)
        if (!(r->std[i] > 0)) ct_die("--std: channel %d is %g; must be > 0", i, r->std[i]);

    // An explicit --arch must match a checkpoint being resumed; without one, the checkpoint's is used.
    Checkpoint peek;
    if (c->resume[0]) {
        const char *err = checkpoint_load(c->resume, &peek);
        if (err) ct_die("--resume %s: %s", c->resume, err);
        if (!seen[0] && !c->demo) c->arch = ct_strdup(peek.meta.arch);
        checkpoint_free(&peek);
    }

    // The ranks of this process (this node): the first is r; the others start as copies of its
    // shared settings. With --nodes, the nodes meet first (dist/net.h) and the ranks are global.
    const int local = c->ranks;
    int world = local, offset = 0;
    CommGroup *group = local > 1 || c->nodes > 1 ? comm_group_create(local, c->timeout) : NULL;
    NodeNet *net = NULL;
    if (c->nodes > 1) {
        char host[256], err[800];
        const char *colon = strrchr(c->master, ':');
        snprintf(host, sizeof host, "%.*s", (int)(colon - c->master), c->master);
        uint64_t fp = config_fingerprint(r);
        if (c->node_rank == 0) fprintf(stderr, "train: node 0 of %d waiting on port %d for the other nodes\n", c->nodes, atoi(colon + 1));
        net = net_connect(c->nodes, c->node_rank, host, atoi(colon + 1), fp, local, c->timeout, err, sizeof err);
        if (!net) ct_die("--nodes %d, node %d: %s", c->nodes, c->node_rank, err);
        comm_group_set_net(group, net);
        offset = net_rank_offset(net);
        world = net_world(net);
        fprintf(stderr, "train: node %d of %d: ranks %d..%d of %d\n", c->node_rank, c->nodes, offset, offset + local - 1, world);
    }
    r->world = world;
    const int lead = offset == 0;  // global rank 0 lives here: this process writes the outputs
    Run *runs = ct_zalloc(local * sizeof(Run));
    for (int k = 0; k < local; k++) {
        runs[k] = *r;
        runs[k].rank = offset + k;
        runs[k].local_rank = k;
        if (group) runs[k].comm = comm_group_rank(group, k);
        setup_rank(&runs[k]);
    }
    r = &runs[0];
    c = &r->cfg;

    // --evaluate: weights in, top-1/top-5 out (with ranks: each its share, counts reduced).
    if (c->evaluate) {
        if (c->dump_batches[0]) ct_mkdir_p(c->dump_batches);
        double t0 = ct_now();
        EvalResult e;
        if (world == 1) e = evaluate(r, c->dump_batches[0] != 0);
        else run_ranks(runs, local, 1, &e);
        if (lead) printf("evaluate %s on %s/val.shard: %lld images  loss %.4f  top-1 %.2f%%  top-5 %.2f%%  (%.1fs)\n",
               c->weights[0] ? c->weights : c->resume, c->shards, (long long)e.n, e.loss, e.top1, e.top5, ct_now() - t0);
        return 0;
    }
#ifdef CTRAIN_CUDA
    void **nccl_comms = NULL;
    const NcclLib *nccl = NULL;
    if (r->cuda && world > 1) nccl_comms = gpu_ranks_nccl(c, local, offset, world, net, &nccl);
#endif
    for (int k = 0; k < local && world > 1; k++) {
        size_t nb, *bounds = resnet_grad_boundaries_alloc(runs[k].m, &nb);  // dist/ cuts buckets at these
#ifdef CTRAIN_CUDA
        if (r->cuda) {
            runs[k].ggs = gpu_gradsync_create(runs[k].comm, bounds, nb, runs[k].m->n_params, gpu_exec_grads(runs[k].ge),
                                              (size_t)c->bucket_mb << 20, k, gpu_exec_stream(runs[k].ge), nccl,
                                              nccl_comms ? nccl_comms[k] : NULL);
            free(bounds);
            continue;
        }
#endif
        runs[k].gs = gradsync_create(runs[k].comm, bounds, nb, runs[k].m->n_params, runs[k].grads,
                                     (size_t)c->bucket_mb << 20);
        free(bounds);
    }

    // Output directory.
    if (!c->out[0]) {
        char buf[256], when[64];
        time_t now = time(NULL);
        strftime(when, sizeof when, "%Y%m%d-%H%M%S", localtime(&now));
        snprintf(buf, sizeof buf, "runs/%s-%s", when, c->arch);
        c->out = ct_strdup(buf);
    }
    snprintf(r->out, sizeof r->out, "%s", c->out);
    if (lead) {
        ct_mkdir_p(r->out);
        int64_t start_step = (int64_t)r->epoch * r->steps_per_epoch + r->step_in_epoch;
        write_config(r, argc, argv, r->m->n_params);
        metrics_open(r, c->resume[0] ? start_step : -1);
        r->tb = tfevents_open(r->out);
        r->tty = isatty(2);
    }
    if (c->dump_batches[0]) {
        ct_mkdir_p(c->dump_batches);
        char p[1100];
        snprintf(p, sizeof p, "%s/init.safetensors", c->dump_batches);
        if (lead) st_save_resnet(p, r->m, NULL, 0, NULL, NULL, 0);
        for (int k = 0; k < local; k++) runs[k].dump_train = dump_open(&runs[k], "train_batches");
    }
    install_signals();

    if (lead) print_banner(r);
    EvalResult last_eval;
    int rc = run_ranks(runs, local, 0, &last_eval);
    if (rc || !lead) {
        for (int k = 0; k < local; k++) {
            loader_destroy(runs[k].ltrain);
            loader_destroy(runs[k].lval);
        }
        return rc;
    }
    // Final model for torchvision (load_state_dict) and --evaluate --weights.
    char mp[1100];
    run_path(r, mp, sizeof mp, "model.safetensors");
    sync_to_host(r);
    {
        char ncls[16], nch[16];
        snprintf(ncls, sizeof ncls, "%d", r->classes);
        snprintf(nch, sizeof nch, "%d", r->channels);
        const char *keys[] = {"arch", "num_classes", "in_channels"};
        const char *vals[] = {r->m->arch, ncls, nch};
        st_save_resnet(mp, r->m, NULL, 0, keys, vals, 3);
    }
    double total = ct_now() - t_program;
    char ts[32];
    fmt_duration(ts, sizeof ts, total);
    fprintf(stderr, "train: done in %s (%.1fs): val top-1 %.2f%% top-5 %.2f%% (best %.2f%% at epoch %d); model %s\n", ts, total,
            last_eval.top1, last_eval.top5, r->best_top1, r->best_epoch, mp);
    if (c->demo)
        printf("demo: Fashion-MNIST test top-1 %.2f%% in %s (%.1fs) on %d CPU threads\n", last_eval.top1, ts, total,
               omp_get_max_threads());
    loader_destroy(r->ltrain);
    loader_destroy(r->lval);
    return 0;
}
