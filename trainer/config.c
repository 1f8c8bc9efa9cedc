// Flags, the demo recipe, the launchers' environment and validation (trainer/config.h).
#include "trainer/config.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dist/net.h"
#include "nn/resnet.h"
#include "nn/schedule.h"
#include "util/common.h"

#define OFF(f) offsetof(Config, f)
const Flag CONFIG_FLAGS[] = {
    {"arch", 'a', F_STR, OFF(arch), "resnet18", "ARCH", "model architecture (resnet18/34/50/101/152; CIFAR-style resnet20/32/44/56/110)", 0},
    {"epochs", 0, F_INT, OFF(epochs), "90", "N", "number of epochs to train (a resumed run continues up to N)", 0},
    {"batch-size", 'b', F_INT, OFF(batch), "256", "N", "batch size per device (the global batch is printed)", 0},
    {"lr", 0, F_DBL, OFF(lr), "0.1", "LR", "peak learning rate (after warmup)", 0},
    {"momentum", 0, F_DBL, OFF(momentum), "0.9", "M", "SGD and LARS momentum (0 disables)", 0},
    {"wd", 0, F_DBL, OFF(wd), "1e-4", "WD", "weight decay: L2 in sgd, lars and lamb (PyTorch SGD's, timm Lamb's), decoupled in adamw (torch.optim.AdamW's)", 0},
    {"nesterov", 0, F_BOOL, OFF(nesterov), "0", NULL, "Nesterov momentum (sgd)", 0},
    {"optimizer", 0, F_STR, OFF(optimizer), "sgd", "sgd|lars|adamw|lamb", "sgd: torch.optim.SGD; lars: MLPerf's LARS (per-tensor trust ratio eta |w| / (|g| + wd |w|) on the rate; BN parameters and biases neither adapted nor decayed); adamw: torch.optim.AdamW; lamb: timm's Lamb (global gradient clipping, Adam moments, trust ratio |w| / |update| on decayed tensors). A resumed run must keep its optimizer", 0},
    {"lars-eta", 0, F_DBL, OFF(lars_eta), "0.001", "ETA", "LARS trust coefficient", 0},
    {"betas", 0, F_STR, OFF(betas), "0.9,0.999", "B1,B2", "adamw, lamb: the moments' decay rates", 0},
    {"eps", 0, F_STR, OFF(eps), "auto", "EPS|auto", "adamw, lamb: added to the second moment's root (auto: 1e-8 for adamw as torch, 1e-6 for lamb as timm)", 0},
    {"lamb-max-grad-norm", 0, F_DBL, OFF(lamb_max_grad_norm), "1", "N", "lamb: divide the gradients by max(|g| / N, 1), |g| the norm of all of them together (timm's max_grad_norm; 0: no clipping)", 0},
    {"ema", 0, F_DBL, OFF(ema), "0", "DECAY", "keep an exponential moving average of the weights and BN statistics (timm's ModelEma), ema += (1 - DECAY) (w - ema) after each update, e.g. 0.999; evaluation reports both models, model.safetensors holds the better by last val top-1 (default 0: off; a DECAY given must be in (0, 1)). Caution: the BN statistics are averaged too, not recomputed for the averaged weights, so after a short run at a high rate the average can evaluate far below the plain model (the demo with --ema 0.999: 21.68% against 93.49%; 91.50% once its BN statistics were recomputed on training batches; docs/BENCHMARKS.md)", 0},
    {"ema-every", 0, F_INT, OFF(ema_every), "1", "K", "--ema: update the average every K optimizer steps", 0},
    {"lr-schedule", 0, F_STR, OFF(lr_schedule), "step", "step|cosine|linear|poly", "learning-rate schedule, set per step: step (x gamma every --lr-step-size epochs), cosine to 0, linear to 0 at the end (FFCV's), poly (MLPerf's: (lr - end) * (1 - progress)^power + end)", 0},
    {"warmup-epochs", 0, F_DBL, OFF(warmup_epochs), "0", "E", "linear warmup from 0 over E epochs (fractions allowed)", 0},
    {"lr-step-size", 0, F_INT, OFF(lr_step_size), "30", "N", "step schedule: epochs between decays", 0},
    {"lr-gamma", 0, F_DBL, OFF(lr_gamma), "0.1", "G", "step schedule: decay factor", 0},
    {"lr-power", 0, F_DBL, OFF(lr_power), "2", "P", "poly schedule: exponent of the decay (MLPerf ResNet: 2)", 0},
    {"lr-end", 0, F_DBL, OFF(lr_end), "0", "LR", "poly schedule: the rate the decay ends at (MLPerf ResNet: 1e-4)", 0},
    {"label-smoothing", 0, F_DBL, OFF(label_smoothing), "0", "EPS", "label smoothing of the cross-entropy (PyTorch's definition)", 0},
    {"crop-size", 0, F_INT, OFF(crop_size), "224", "PX", "training and evaluation image size (the default of --res-start, --res-end and --val-crop-size)", 0},
    {"val-resize", 0, F_INT, OFF(val_resize), "auto", "PX", "eval: resize the short side to PX, then center-crop --val-crop-size; auto (crop/0.875), crop being --val-crop-size, rounded down: 224 -> 256, 32 -> 36", 0},
    {"val-crop-size", 0, F_INT, OFF(val_crop_size), "auto", "PX", "evaluation image size (auto: --crop-size); FFCV evaluates at 256 after training at up to 192", 0},
    {"res-start", 0, F_INT, OFF(res_start), "auto", "PX", "progressive resizing: training resolution up to the ramp's first epoch (auto: --crop-size)", 0},
    {"res-end", 0, F_INT, OFF(res_end), "auto", "PX", "progressive resizing: training resolution from the ramp's last epoch on (auto: --crop-size)", 0},
    {"res-ramp", 0, F_STR, OFF(res_ramp), "", "E0,E1", "progressive resizing: the resolution goes linearly from --res-start at epoch E0 to --res-end at epoch E1 (epochs from 0, as FFCV's start_ramp/end_ramp), rounded to --res-step; needed when they differ", 0},
    {"res-step", 0, F_INT, OFF(res_step), "32", "PX", "progressive resizing: resolutions are multiples of PX (FFCV: 32); --res-start and --res-end must be too", 0},
    {"tta", 0, F_STR, OFF(tta), "none", "none|flip", "test-time augmentation: flip averages the logits of each evaluated image and its mirror image (FFCV's lr_tta)", 0},
    {"min-scale", 0, F_DBL, OFF(min_scale), "0.08", "S", "training RandomResizedCrop: smallest crop area as a fraction of the image (1: whole image)", 0},
    {"no-flip", 0, F_BOOL, OFF(no_flip), "0", NULL, "no random horizontal flip", 0},
    {"mean", 0, F_STR, OFF(mean), "auto", "M[,M,M]", "per-channel mean for normalisation (auto: ImageNet's for 3 channels, 0.5 for 1)", 0},
    {"std", 0, F_STR, OFF(std), "auto", "S[,S,S]", "per-channel std for normalisation (auto: ImageNet's for 3 channels, 0.25 for 1)", 0},
    {"workers", 'j', F_INT, OFF(workers), "auto", "N|auto", "data loader threads per rank (results do not depend on it); auto: on cuda, the cores this process may use less one per rank, shared by the ranks; on cpu, where OpenMP compute owns the cores, 2 per rank with >= 8 cores per rank, else 1", 0},
    {"seed", 0, F_LL, OFF(seed), "0", "S", "seed of initialisation, sampling and augmentation", 0},
    {"deterministic", 0, F_BOOL, OFF(deterministic), "1", NULL, "bit-reproducible runs (always true on the CPU backend)", 0},
    {"resume", 0, F_STR, OFF(resume), "", "PATH", "continue from a checkpoint (OUT/last.ckpt or best.ckpt)", 0},
    {"weights", 0, F_STR, OFF(weights), "", "PATH", "initial weights: a .safetensors file (torchvision names) or a ctrain checkpoint (its weights and BN statistics; --resume continues a run)", 0},
    {"evaluate", 'e', F_BOOL, OFF(evaluate), "0", NULL, "only evaluate (--weights or --resume) on the val shard: prints top-1/top-5", 0},
    {"out", 'o', F_STR, OFF(out), "runs/<date>-<arch>", "DIR", "output directory: config.json, metrics.jsonl, events, checkpoints, model.safetensors", 0},
    {"overwrite", 0, F_BOOL, OFF(overwrite), "0", NULL, "replace the run in --out: delete its config.json, metrics.jsonl, events, checkpoints and model.safetensors first (without it an --out holding a run is refused, unless --resume continues from it)", 0},
    {"reset-head", 0, F_BOOL, OFF(reset_head), "0", NULL, "fine-tuning: with --weights, start the classifier (fc.weight, fc.bias) fresh instead of loading it, as needed when the weights have another class count (without it such weights are an error)", 0},
    {"freeze-backbone", 0, F_BOOL, OFF(freeze_backbone), "0", NULL, "linear probe: train only the classifier (fc); every other weight and the BN running statistics stay as loaded (BN in eval mode, no backbone gradients computed, so steps are cheaper). Usually with --weights and --reset-head; kept in checkpoints, and --resume must match it", 0},
    {"device", 0, F_STR, OFF(device), "auto", "auto|cpu|cuda", "compute backend (auto: cuda when a GPU is found, else cpu)", 0},
    {"print-freq", 'p', F_INT, OFF(print_freq), "10", "N", "steps between progress updates and metrics.jsonl step records", 0},
    {"teacher", 0, F_STR, OFF(teacher), "", "ARCH:PATH", "distill from a teacher (eval mode, no gradients) loaded from a .safetensors file", 0},
    {"kd-alpha", 0, F_DBL, OFF(kd_alpha), "0.5", "A", "distillation: loss = (1-A) * cross-entropy + A * T^2 * KL(teacher_T || student_T)", 0},
    {"kd-temperature", 0, F_DBL, OFF(kd_temperature), "4", "T", "distillation temperature", 0},
    {"mixup", 0, F_DBL, OFF(mixup), "0", "ALPHA", "Mixup (timm's): blend each training image with its partner (the batch reversed) by lam ~ Beta(ALPHA, ALPHA), one lam per batch, against the soft target lam * y + (1 - lam) * y_partner (label smoothing applies to each; top-1 counts the dominant label); 0: off", 0},
    {"cutmix", 0, F_DBL, OFF(cutmix), "0", "ALPHA", "CutMix (timm's): paste a box of the partner's image of area about (1 - lam), lam ~ Beta(ALPHA, ALPHA), lam corrected to the box's area; 0: off", 0},
    {"mix-prob", 0, F_DBL, OFF(mix_prob), "1", "P", "Mixup/CutMix: probability that a training batch is mixed", 0},
    {"mix-switch-prob", 0, F_DBL, OFF(mix_switch_prob), "0.5", "P", "with both --mixup and --cutmix: probability of CutMix rather than Mixup for a batch", 0},
    {"precision", 0, F_STR, OFF(precision), "auto", "auto|bf16|fp32", "math precision (auto: bf16 on cuda, fp32 on cpu); bf16 on the CPU rounds exactly where the GPU does (slower: for checking GPU runs)", 0},
    {"demo", 0, F_BOOL, OFF(demo), "0", NULL, "Fashion-MNIST demo: packs " DEMO_SHARDS "/ when absent, trains a CIFAR-style ResNet on the CPU, evaluates", 0},
    {"config", 0, F_STR, OFF(config_file), "", "FILE", "read flags from a recipe file (see recipes/): one '--flag value', '--flag=value' or bare '--flag' a line, '#' comments; flags on the command line win over the file's, the file's over --demo's", 0},
    {"zero-init-residual", 0, F_BOOL, OFF(zero_init_residual), "0", NULL, "zero-initialise the last BN of each residual block", 0},
    {"blurpool", 0, F_BOOL, OFF(blurpool), "0", NULL, "BlurPool (FFCV's): a fixed 3x3 blur [1,2,1]x[1,2,1]/16 per channel on the input of every strided conv with >= 16 input channels (CIFAR nets: layer2/3's first conv1 and downsample; never the stem); no parameters. Part of the model: checkpoints and model.safetensors record it, and --resume, --weights, evaluate, predict and export take it from there (default: off; --resume with the other setting is refused)", 0},
    {"no-wd-bn", 0, F_BOOL, OFF(no_wd_bn), "0", NULL, "no weight decay on BN weights/biases and the fc bias (sgd, adamw, lamb; lars always); lamb then leaves them unadapted too. timm's recipes want it (create_optimizer's filter_bias_and_bn)", 0},
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
const int CONFIG_N_FLAGS = (int)CT_ARRAY_LEN(CONFIG_FLAGS);
_Static_assert(CT_ARRAY_LEN(CONFIG_FLAGS) <= CONFIG_MAX_FLAGS, "raise CONFIG_MAX_FLAGS");

const Flag *config_flag(const char *name) {
    for (int i = 0; i < CONFIG_N_FLAGS; i++)
        if (!strcmp(CONFIG_FLAGS[i].name, name)) return &CONFIG_FLAGS[i];
    ct_die("internal: no flag named --%s", name);
}

int config_given(const ConfigGiven *g, const char *name) { return g->flag[config_flag(name) - CONFIG_FLAGS]; }

// The demo recipe (Fashion-MNIST, 28x28 grey, 60k/10k): measured in docs/BENCHMARKS.md (the
// search and ablation behind it: tools/bench_recipes.sh). Against the previous recipe (92.31% in 4
// epochs): whole images with flips instead of RandomResizedCrop's 0.75-1 zoom (resnet20 underfits
// in so few epochs, so less augmentation wins), 5 epochs with progressive resizing (16, 20, 24, 28,
// 28 px: about 0.9 of the time of 4 epochs at 28 px), flip TTA: 93.27% in 5:44 on 2 cores (direct
// convolutions), 93.46% on the CPU's Winograd route, the default since (another rounding). The
// first epochs' val top-1 is low because they train at 16-24 px and evaluate at 28.
static const char *DEMO_ARGS[] = {
    "--arch", "resnet20", "--epochs", "5", "--batch-size", "128", "--lr", "0.2", "--lr-schedule", "cosine",
    "--warmup-epochs", "0.2", "--wd", "5e-4", "--nesterov", "--label-smoothing", "0.1", "--crop-size", "28",
    "--res-start", "16", "--res-ramp", "0,3", "--res-step", "4", "--val-resize", "28", "--min-scale", "1",
    "--tta", "flip", "--mean", "0.286", "--std", "0.353", "--out", "runs/demo",
};


void config_usage(FILE *f) {
    fprintf(f,
            "usage: train [flags] SHARDS/\n"
            "       train --demo [flags]\n"
            "       train --evaluate --weights W.safetensors|W.ckpt [flags] SHARDS/\n"
            "       train --weights torchvision.safetensors --reset-head [flags] SHARDS/   (fine-tuning)\n"
            "       train export --weights W.safetensors --onnx OUT.onnx   (train export --help)\n"
            "       train predict --weights W.safetensors IMAGE|FOLDER...  (train predict --help)\n\n"
            "Trains a ResNet on SHARDS/train.shard, evaluating on SHARDS/val.shard after every epoch\n"
            "(shards are made by ./packdata). Flags take a value as '--flag V' or '--flag=V'.\n\nflags (default in brackets):\n");
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) fprintf(f, "\ntesting and debugging:\n");
        for (int i = 0; i < CONFIG_N_FLAGS; i++) {
            const Flag *fl = &CONFIG_FLAGS[i];
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
               "--demo uses:");
    // Printed from the recipe itself, so the help cannot drift from it.
    int col = 12;
    for (size_t i = 0; i < CT_ARRAY_LEN(DEMO_ARGS); i++) {
        int w = (int)strlen(DEMO_ARGS[i]) + 1;
        int flag = DEMO_ARGS[i][0] == '-', next_value = i + 1 < CT_ARRAY_LEN(DEMO_ARGS) && DEMO_ARGS[i + 1][0] != '-';
        if (flag && col + w + (next_value ? (int)strlen(DEMO_ARGS[i + 1]) + 1 : 0) > 100) { fputs("\n ", f); col = 1; }
        fprintf(f, " %s", DEMO_ARGS[i]);
        col += w;
    }
    fprintf(f, ";\n  flags given with --demo override these.\n"
               "Without --out a run goes to runs/DATE-ARCH (runs/demo for --demo), with a -2, -3... suffix when\n"
               "that holds a run already.\n"
               "Precedence: defaults < --demo's recipe < launchers' environment < --config FILE < command line.\n"
               "Multi-node runs also read torchrun's WORLD_SIZE, NODE_RANK/RANK, MASTER_ADDR, MASTER_PORT and\n"
               "SLURM's SLURM_NNODES, SLURM_NODEID, SLURM_JOB_NODELIST when the flags are not given.\n"
               "Exit status: 0 done, 1 error, 128+signal after a checkpoint on SIGINT/SIGTERM.\n");
}

const Flag *config_flag_named(const char *name, size_t len) {
    for (int i = 0; i < CONFIG_N_FLAGS; i++)
        if (strlen(CONFIG_FLAGS[i].name) == len && !strncmp(CONFIG_FLAGS[i].name, name, len)) return &CONFIG_FLAGS[i];
    return NULL;
}
static const Flag *find_flag_short(char c) {
    for (int i = 0; i < CONFIG_N_FLAGS; i++)
        if (CONFIG_FLAGS[i].short_name == c) return &CONFIG_FLAGS[i];
    return NULL;
}

size_t config_flag_size(const Flag *fl) {
    switch (fl->type) {
    case F_DBL: return sizeof(double);
    case F_LL: return sizeof(long long);
    case F_STR: return sizeof(const char *);
    default: return sizeof(int);
    }
}

// Set one flag from its text; dies naming the flag when the value does not parse.
static void set_flag(Config *c, const Flag *fl, const char *v) {
    void *p = (char *)c + fl->offset;
    char *end = NULL;
    errno = 0;
    switch (fl->type) {
    case F_INT: {
        // An int flag whose default is "auto" takes "auto" (stored as 0, resolved once the
        // backend is known) or a count >= 1, so 0 cannot be mistaken for "auto".
        int autoable = !strcmp(fl->def, "auto");
        if (autoable && !strcmp(v, "auto")) { *(int *)p = 0; break; }
        long x = strtol(v, &end, 10);
        if (!*v || *end || errno || x < -2147483647L || x > 2147483647L)
            ct_die("--%s: '%s' is not %s", fl->name, v, autoable ? "a count >= 1 or auto" : "an integer");
        if (autoable && x < 1) ct_die("--%s: '%s' is not a count >= 1 or auto", fl->name, v);
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

void config_defaults(Config *c) {
    memset(c, 0, sizeof *c);
    for (int i = 0; i < CONFIG_N_FLAGS; i++) set_flag(c, &CONFIG_FLAGS[i], CONFIG_FLAGS[i].def);
    c->out = "";  // chosen after parsing (needs the arch)
    c->shards = "";
}


void config_parse_args(Config *c, ConfigGiven *given, int argc, char **argv) {
    int npos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const Flag *fl = NULL;
        const char *val = NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { config_usage(stdout); exit(0); }
        if (!strcmp(a, "--")) {
            for (i++; i < argc; i++) { if (npos++) ct_die("unexpected extra argument '%s' (only one SHARDS directory)", argv[i]); c->shards = argv[i]; }
            break;
        }
        if (a[0] == '-' && a[1] == '-') {
            const char *name = a + 2, *eq = strchr(name, '=');
            size_t len = eq ? (size_t)(eq - name) : strlen(name);
            fl = config_flag_named(name, len);
            if (!fl && len > 3 && !strncmp(name, "no-", 3)) {  // --no-X for boolean X
                const Flag *neg = config_flag_named(name + 3, len - 3);
                if (neg && neg->type == F_BOOL && !eq) { set_flag(c, neg, "0"); given->flag[neg - CONFIG_FLAGS] = 1; continue; }
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
        given->flag[fl - CONFIG_FLAGS] = 1;
    }
}

// The demo recipe fills every flag the user did not give.
static void apply_demo(Config *c, const ConfigGiven *given, const char *argv0) {
    Config user = *c;
    ConfigGiven demo_given;
    memset(&demo_given, 0, sizeof demo_given);
    char *dargv[CT_ARRAY_LEN(DEMO_ARGS) + 1];
    dargv[0] = (char *)argv0;
    for (size_t i = 0; i < CT_ARRAY_LEN(DEMO_ARGS); i++) dargv[i + 1] = (char *)DEMO_ARGS[i];
    config_parse_args(c, &demo_given, (int)CT_ARRAY_LEN(dargv), dargv);
    for (int i = 0; i < CONFIG_N_FLAGS; i++)
        if (given->flag[i])
            memcpy((char *)c + CONFIG_FLAGS[i].offset, (char *)&user + CONFIG_FLAGS[i].offset, config_flag_size(&CONFIG_FLAGS[i]));
    if (c->shards[0]) ct_die("--demo takes no SHARDS argument (it uses %s/)", DEMO_SHARDS);
    c->shards = DEMO_SHARDS;
    if (!config_given(given, "device")) c->device = "cpu";  // the demo is the CPU showcase
}

// --gpus N is --device cuda --ranks N.
static void apply_gpus(Config *c, const ConfigGiven *given) {
    if (!config_given(given, "gpus")) return;
    if (c->gpus < 1) ct_die("--gpus: must be >= 1 (got %d)", c->gpus);
    if (config_given(given, "ranks") && c->ranks != c->gpus)
        ct_die("--gpus %d and --ranks %d disagree (--gpus N is --device cuda --ranks N)", c->gpus, c->ranks);
    if (config_given(given, "device") && strcmp(c->device, "cuda"))
        ct_die("--gpus %d with --device %s: --gpus trains on GPUs", c->gpus, c->device);
    c->ranks = c->gpus;
    c->device = "cuda";
}

static const char *env_nonempty(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

// Launchers' conventions for multi-node runs, where the flags are not given: torchrun (one
// process per node: WORLD_SIZE nodes, NODE_RANK or RANK), SLURM (SLURM_NNODES, SLURM_NODEID, and
// node 0 = the first host of SLURM_JOB_NODELIST), MASTER_ADDR / MASTER_PORT for node 0's address.
// Each integer is checked here, naming its variable, so a bad WORLD_SIZE is not reported as a
// problem with --nodes.
void config_env_defaults(Config *c, ConfigGiven *given) {
    static const char *nodes_vars[] = {"WORLD_SIZE", "SLURM_NNODES"};
    static const char *rank_vars[] = {"NODE_RANK", "RANK", "SLURM_NODEID"};
    given->nodes_from = "--nodes";
    given->node_rank_from = "--node-rank";
    given->master_from = "--master";
    const char *v;
    if (!config_given(given, "nodes"))
        for (size_t i = 0; i < CT_ARRAY_LEN(nodes_vars); i++)
            if ((v = env_nonempty(nodes_vars[i]))) {
                c->nodes = ct_parse_int(nodes_vars[i], v, 1, 4096);
                given->nodes_from = nodes_vars[i];
                break;
            }
    if (!config_given(given, "node-rank"))
        for (size_t i = 0; i < CT_ARRAY_LEN(rank_vars); i++)
            if ((v = env_nonempty(rank_vars[i]))) {
                c->node_rank = ct_parse_int(rank_vars[i], v, 0, 4095);
                given->node_rank_from = rank_vars[i];
                break;
            }
    if (!config_given(given, "master")) {
        const char *port = env_nonempty("MASTER_PORT");
        // The address outlives every copy of the Config, and the environment is read once a process.
        static char address[300];
        char host[256] = "";
        if ((v = env_nonempty("MASTER_ADDR"))) {
            snprintf(host, sizeof host, "%s", v);
            given->master_from = "MASTER_ADDR";
        } else if ((v = env_nonempty("SLURM_JOB_NODELIST")) || (v = env_nonempty("SLURM_NODELIST"))) {
            if (net_first_host(v, host, sizeof host))
                ct_die("SLURM_JOB_NODELIST '%s': cannot tell node 0's host; set MASTER_ADDR or --master", v);
            given->master_from = "SLURM_JOB_NODELIST";
        }
        if (host[0]) {
            if (port) ct_parse_int("MASTER_PORT", port, 1, 65535);
            snprintf(address, sizeof address, "%s:%s", host, port ? port : "29500");
            c->master = address;
        }
    }
}

void config_master(const Config *c, const ConfigGiven *given, char *host, size_t hostlen, int *port) {
    const char *colon = strrchr(c->master, ':');
    if (!colon || colon == c->master)
        ct_die("%s: '%s' is not HOST:PORT", given->master_from ? given->master_from : "--master", c->master);
    snprintf(host, hostlen, "%.*s", (int)(colon - c->master), c->master);
    char what[64];
    snprintf(what, sizeof what, "%s port", given->master_from ? given->master_from : "--master");
    *port = ct_parse_int(what, colon + 1, 1, 65535);
}

int config_parse_ramp(const char *s, int *e0, int *e1) {
    char *end;
    errno = 0;
    long a = strtol(s, &end, 10);
    if (end == s || *end != ',' || errno || a < 0 || a > 1000000) return -1;
    const char *q = end + 1;
    long b = strtol(q, &end, 10);
    if (end == q || *end || errno || b < 0 || b > 1000000) return -1;
    *e0 = (int)a;
    *e1 = (int)b;
    return 0;
}

// Progressive resizing's flags (autos still 0 here: they mean --crop-size).
static void validate_res(const Config *c) {
    if (c->res_step < 1 || c->res_step > 4096) ct_die("--res-step: must be in 1..4096 (got %d)", c->res_step);
    int start = c->res_start ? c->res_start : c->crop_size, end = c->res_end ? c->res_end : c->crop_size;
    if (start > 4096) ct_die("--res-start: must be in 1..4096 or auto (got %d)", start);
    if (end > 4096) ct_die("--res-end: must be in 1..4096 or auto (got %d)", end);
    int e0 = 0, e1 = 0;
    if (c->res_ramp[0] && config_parse_ramp(c->res_ramp, &e0, &e1))
        ct_die("--res-ramp: '%s' is not E0,E1 (the first and last epoch of the ramp, from 0)", c->res_ramp);
    if (c->res_ramp[0] && e1 <= e0)
        ct_die("--res-ramp %s: the ramp must end after it starts (E1 %d <= E0 %d)", c->res_ramp, e1, e0);
    if (start == end) return;
    if (!c->res_ramp[0])
        ct_die("--res-start %d and --res-end %d differ: --res-ramp E0,E1 must say over which epochs (FFCV's start_ramp,end_ramp)", start, end);
    if (start % c->res_step || end % c->res_step)
        ct_die("--res-%s %d is not a multiple of --res-step %d (the ramp's sizes are rounded to it)",
               start % c->res_step ? "start" : "end", start % c->res_step ? start : end, c->res_step);
}

void config_res_schedule(const Config *c, ResSchedule *s) {
    s->start = c->res_start;
    s->end = c->res_end;
    s->ramp_start = c->res_ramp_start;
    s->ramp_end = c->res_ramp_end;
    s->step = c->res_step;
}

void config_validate(const Config *c, const ConfigGiven *given) {
    if (!resnet_arch_valid(c->arch)) ct_die("--arch: unknown architecture '%s' (one of %s)", c->arch, resnet_arch_list());
    if (c->epochs < 1) ct_die("--epochs: must be >= 1 (got %d)", c->epochs);
    if (c->batch < 1 || c->batch > 65536) ct_die("--batch-size: must be in 1..65536 (got %d)", c->batch);
    if (!(c->lr > 0)) ct_die("--lr: must be > 0 (got %g)", c->lr);
    if (c->momentum < 0 || c->momentum >= 1) ct_die("--momentum: must be in [0, 1) (got %g)", c->momentum);
    if (c->wd < 0) ct_die("--wd: must be >= 0 (got %g)", c->wd);
    if (c->nesterov && c->momentum == 0) ct_die("--nesterov needs --momentum > 0");
    OptConfig oc;
    config_optimizer(c, &oc);  // dies naming the flag
    if (config_given(given, "ema") && !(c->ema > 0 && c->ema < 1))
        ct_die("--ema: the decay must be in (0, 1), e.g. 0.999 (got %g)", c->ema);
    if (c->ema_every < 1) ct_die("--ema-every: must be >= 1 (got %d)", c->ema_every);
    if (config_given(given, "ema-every") && !(c->ema > 0)) ct_die("--ema-every needs --ema DECAY");
    LrKind k;
    if (!lr_kind_parse(c->lr_schedule, &k)) ct_die("--lr-schedule: '%s' is not one of " LR_KIND_LIST, c->lr_schedule);
    if (c->warmup_epochs < 0 || c->warmup_epochs > c->epochs) ct_die("--warmup-epochs: must be in [0, --epochs] (got %g)", c->warmup_epochs);
    if (c->lr_step_size < 1) ct_die("--lr-step-size: must be >= 1 (got %d)", c->lr_step_size);
    if (!(c->lr_gamma > 0) || c->lr_gamma > 1) ct_die("--lr-gamma: must be in (0, 1] (got %g)", c->lr_gamma);
    if (!(c->lr_power > 0) || c->lr_power > 100) ct_die("--lr-power: must be in (0, 100] (got %g)", c->lr_power);
    if (c->lr_end < 0 || c->lr_end >= c->lr) ct_die("--lr-end: must be in [0, --lr %g) (got %g)", c->lr, c->lr_end);
    if (c->label_smoothing < 0 || c->label_smoothing >= 1) ct_die("--label-smoothing: must be in [0, 1) (got %g)", c->label_smoothing);
    if (c->crop_size < 1 || c->crop_size > 4096) ct_die("--crop-size: must be in 1..4096 (got %d)", c->crop_size);
    if (c->val_crop_size < 0 || c->val_crop_size > 4096) ct_die("--val-crop-size: must be in 1..4096 or auto (got %d)", c->val_crop_size);
    int vcrop = c->val_crop_size ? c->val_crop_size : c->crop_size;
    if (c->val_resize != 0 && (c->val_resize < vcrop || c->val_resize > 8192))
        ct_die("--val-resize: must be in %s (%d)..8192 or auto (got %d)", c->val_crop_size ? "--val-crop-size" : "--crop-size",
               vcrop, c->val_resize);
    validate_res(c);
    if (strcmp(c->tta, "none") && strcmp(c->tta, "flip")) ct_die("--tta: '%s' is not one of none, flip", c->tta);
    if (!(c->min_scale > 0) || c->min_scale > 1) ct_die("--min-scale: must be in (0, 1] (got %g)", c->min_scale);
    if (c->workers < 0 || c->workers > 256) ct_die("--workers: must be in 1..256 or auto (got %d)", c->workers);
    if (c->seed < 0) ct_die("--seed: must be >= 0 (got %lld)", c->seed);
    if (strcmp(c->device, "auto") && strcmp(c->device, "cpu") && strcmp(c->device, "cuda")) ct_die("--device: '%s' is not one of auto, cpu, cuda", c->device);
    if (c->print_freq < 1) ct_die("--print-freq: must be >= 1 (got %d)", c->print_freq);
    if (c->kd_alpha < 0 || c->kd_alpha > 1) ct_die("--kd-alpha: must be in [0, 1] (got %g)", c->kd_alpha);
    if (!(c->kd_temperature > 0)) ct_die("--kd-temperature: must be > 0 (got %g)", c->kd_temperature);
    if (!(c->mixup >= 0)) ct_die("--mixup: alpha must be >= 0 (got %g)", c->mixup);
    if (!(c->cutmix >= 0)) ct_die("--cutmix: alpha must be >= 0 (got %g)", c->cutmix);
    if (!(c->mix_prob >= 0 && c->mix_prob <= 1)) ct_die("--mix-prob: must be in [0, 1] (got %g)", c->mix_prob);
    if (!(c->mix_switch_prob >= 0 && c->mix_switch_prob <= 1))
        ct_die("--mix-switch-prob: must be in [0, 1] (got %g)", c->mix_switch_prob);
    if (c->dump_batches[0] && (c->mixup > 0 || c->cutmix > 0))  // the dump records hard labels only
        ct_die("--dump-batches: not with --mixup/--cutmix (the PyTorch comparison replays hard labels)");
    if (strcmp(c->precision, "auto") && strcmp(c->precision, "bf16") && strcmp(c->precision, "fp32"))
        ct_die("--precision: '%s' is not one of auto, bf16, fp32", c->precision);
    if (c->max_nonfinite < 1) ct_die("--max-nonfinite: must be >= 1 (got %d)", c->max_nonfinite);
    if (c->ranks < 1 || c->ranks > 256) ct_die("--ranks: must be in 1..256 (got %d)", c->ranks);
    if (c->nodes < 1 || c->nodes > 4096) ct_die("%s: must be in 1..4096 (got %d)", given->nodes_from, c->nodes);
    if (c->node_rank < 0 || c->node_rank >= c->nodes)
        ct_die("%s: %d is not in 0..%d (%s is %d)", given->node_rank_from, c->node_rank, c->nodes - 1, given->nodes_from, c->nodes);
    if (c->nodes > 1) {
        if (!strchr(c->master, ':'))
            ct_die("%s %d: --master HOST:PORT (or MASTER_ADDR and MASTER_PORT) must name node 0 (got '%s')",
                   given->nodes_from, c->nodes, c->master);
        char host[256];
        int port;
        config_master(c, given, host, sizeof host, &port);
    }
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
    if (c->freeze_backbone && !c->weights[0] && !c->resume[0])
        ct_warn("--freeze-backbone without --weights: only fc trains, on a randomly initialised backbone");
    if (c->reset_head && !c->weights[0]) ct_die("--reset-head needs --weights PATH (it says how to load them)");
    if (c->overwrite && c->evaluate) ct_die("--overwrite with --evaluate: an evaluation writes no run; drop --overwrite");
    if (c->weights[0] && c->resume[0]) ct_die("--weights and --resume exclude each other (a checkpoint carries its weights)");
    if (c->weights[0] && !ct_file_exists(c->weights)) ct_die("--weights: no such file '%s'", c->weights);
    if (c->resume[0] && !ct_file_exists(c->resume)) ct_die("--resume: no such file '%s'", c->resume);
}

int config_auto_val_resize(int crop) { return (int)floor(crop / 0.875); }

// p without trailing slashes ("/" stays "/"), in buf when one is dropped: static storage, like
// the --master address, since the path outlives every copy of the Config (argv may be read-only).
static const char *trim_slashes(const char *p, char *buf, size_t cap, const char *what) {
    size_t n = strlen(p);
    if (n < 2 || p[n - 1] != '/') return p;
    while (n > 1 && p[n - 1] == '/') n--;
    if (n >= cap) ct_die("%s: path longer than %zu bytes", what, cap - 1);
    memcpy(buf, p, n);
    buf[n] = 0;
    return buf;
}

void config_from_args(Config *c, ConfigGiven *given, int argc, char **argv) {
    config_defaults(c);
    memset(given, 0, sizeof *given);
    config_parse_args(c, given, argc, argv);
    if (c->config_file[0]) config_read_file(c, given, c->config_file);
    if (c->demo) apply_demo(c, given, argv[0]);
    if (!c->shards[0]) ct_die("missing SHARDS directory (or --demo); see train --help");
    if (given->config_file) config_file_blame(given);  // validation errors name FILE:LINE
    apply_gpus(c, given);
    config_env_defaults(c, given);
    config_validate(c, given);
    ct_set_error_context(NULL);
    if (c->val_crop_size == 0) c->val_crop_size = c->crop_size;
    if (c->val_resize == 0) c->val_resize = config_auto_val_resize(c->val_crop_size);
    if (c->res_start == 0) c->res_start = c->crop_size;
    if (c->res_end == 0) c->res_end = c->crop_size;
    if (c->res_ramp[0]) config_parse_ramp(c->res_ramp, &c->res_ramp_start, &c->res_ramp_end);
    // Paths are joined as DIR/name everywhere; a trailing slash would print as DIR//name.
    static char shards[4096], out[4096], dump[4096];
    c->shards = trim_slashes(c->shards, shards, sizeof shards, "SHARDS");
    c->out = trim_slashes(c->out, out, sizeof out, "--out");
    c->dump_batches = trim_slashes(c->dump_batches, dump, sizeof dump, "--dump-batches");
    if (!c->deterministic) ct_warn("--no-deterministic: the CPU backend is deterministic anyway");
}

int config_cpus_available(void) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

int config_workers_auto(int cores, int ranks, int cuda) {
    if (ranks < 1) ranks = 1;
    int n;
    if (cuda) {
        // The GPU computes; each rank's host thread keeps a core to launch kernels, and the
        // ranks' loaders share the rest (a loader worker makes thousands of crops a second, so
        // more than 32 a rank would only sit idle).
        n = (cores - ranks) / ranks;
        if (n > 32) n = 32;
    } else {
        // OpenMP compute threads already use every core, and a CPU step costs far more than
        // cropping its batch: a worker or two per rank keep up without taking cores from it.
        n = cores / ranks >= 8 ? 2 : 1;
    }
    return n < 1 ? 1 : n;
}

void config_parse_floats(const char *flag, const char *s, float *out, int n) {
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

uint64_t config_fingerprint(const Config *c, const void *data, size_t data_bytes) {
    static const char *local_flags[] = {"out",     "workers",      "print-freq",  "node-rank", "master",
                                        "timeout", "dump-batches", "cuda-graphs", "overwrite",
                                        "config"};  // the path: the values it set are hashed
    uint64_t h = 1469598103934665603ull;  // FNV-1a
#define FP_MIX(p, n)                                                       \
    for (size_t i_ = 0; i_ < (n); i_++) h = (h ^ ((const uint8_t *)(p))[i_]) * 1099511628211ull
    for (int i = 0; i < CONFIG_N_FLAGS; i++) {
        const Flag *fl = &CONFIG_FLAGS[i];
        int skip = 0;
        for (size_t j = 0; j < CT_ARRAY_LEN(local_flags); j++) skip |= !strcmp(fl->name, local_flags[j]);
        if (skip) continue;
        const void *p = (const char *)c + fl->offset;
        FP_MIX(fl->name, strlen(fl->name));
        if (fl->type == F_STR) FP_MIX(*(const char *const *)p, strlen(*(const char *const *)p) + 1);
        else FP_MIX(p, config_flag_size(fl));
    }
    FP_MIX(data, data_bytes);
#undef FP_MIX
    return h;
}

void config_optimizer(const Config *c, OptConfig *o) {
    memset(o, 0, sizeof *o);
    const OptDesc *d = optim_find(c->optimizer);
    if (!d) ct_die("--optimizer: '%s' is not one of %s", c->optimizer, optim_names());
    o->kind = (OptKind)(d - OPT_TABLE);
    if (o->kind == OPT_LARS && c->nesterov) ct_die("--optimizer lars: --nesterov is not part of LARS here (MLPerf's has none)");
    if ((o->kind == OPT_ADAMW || o->kind == OPT_LAMB) && c->nesterov)
        ct_die("--optimizer %s: --nesterov is SGD's; Adam's first moment is its momentum (--betas)", d->name);
    if (!(c->lars_eta > 0) || c->lars_eta > 1) ct_die("--lars-eta: must be in (0, 1] (got %g)", c->lars_eta);
    o->momentum = (float)c->momentum;
    o->weight_decay = (float)c->wd;
    o->nesterov = c->nesterov;
    o->wd_exclude_norm_bias = c->no_wd_bn;
    o->lars_eta = (float)c->lars_eta;
    char *end = NULL;
    o->beta1 = strtod(c->betas, &end);
    if (end == c->betas || *end != ',') ct_die("--betas: '%s' is not two numbers B1,B2 (e.g. 0.9,0.999)", c->betas);
    const char *b2 = end + 1;
    o->beta2 = strtod(b2, &end);
    if (end == b2 || *end) ct_die("--betas: '%s' is not two numbers B1,B2 (e.g. 0.9,0.999)", c->betas);
    if (!(o->beta1 >= 0 && o->beta1 < 1) || !(o->beta2 >= 0 && o->beta2 < 1))
        ct_die("--betas: each must be in [0, 1) (got %s)", c->betas);
    if (!strcmp(c->eps, "auto")) {
        o->eps = o->kind == OPT_LAMB ? 1e-6 : 1e-8;
    } else {
        o->eps = strtod(c->eps, &end);
        if (end == c->eps || *end || !(o->eps > 0) || !isfinite(o->eps)) ct_die("--eps: '%s' is not a number > 0 or auto", c->eps);
    }
    if (!(c->lamb_max_grad_norm >= 0)) ct_die("--lamb-max-grad-norm: must be >= 0 (got %g; 0 turns clipping off)", c->lamb_max_grad_norm);
    o->max_grad_norm = c->lamb_max_grad_norm;
}
