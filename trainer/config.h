// The settings of a run: the flag table (names, defaults, help), parsing of argv, the --demo
// recipe, the launchers' environment (torchrun, SLURM), validation of values, and which
// flags are node-local (the rest every node of a multi-node run must share).
//
// Order of precedence: defaults < --demo's recipe < environment (multi-node only) < --config
// FILE < flags on the command line (a file's flags count as given: they beat the demo and the
// environment, and yield to the command line).
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define DEMO_SHARDS "shards/fashion-mnist"
#define CTRAIN_VERSION "0.12"  // the build plan's step (DESIGN.md)

typedef struct {
    const char *arch;
    int epochs;
    int batch;  // per rank
    double lr, momentum, wd;
    int nesterov;
    const char *optimizer;  // sgd | lars | adamw | lamb (nn/optim.h's table)
    double lars_eta;
    const char *betas;      // adamw, lamb: "B1,B2"
    const char *eps;        // adamw, lamb: a number or auto
    double lamb_max_grad_norm;
    double ema;     // --ema decay, 0: off
    int ema_every;  // --ema-every K steps
    const char *lr_schedule;
    double warmup_epochs;
    int lr_step_size;
    double lr_gamma;
    double lr_power, lr_end;  // poly schedule
    double label_smoothing;
    int crop_size, val_resize;  // val_resize 0 while parsing: auto, resolved by config_from_args
    // Progressive resizing and evaluation's size; 0 while parsing: auto (res_start and res_end:
    // crop_size, val_crop_size: crop_size), resolved by config_from_args.
    int res_start, res_end, res_step, val_crop_size;
    const char *res_ramp;            // "E0,E1" or "" (none)
    int res_ramp_start, res_ramp_end;  // not flags: res_ramp parsed by config_from_args
    const char *tta;                 // none | flip
    double min_scale;  // RandomResizedCrop's lower scale bound
    int no_flip;
    const char *mean, *std;  // per-channel normalisation, comma-separated ("auto": by channels)
    int workers;  // per rank; 0 = auto until job_create resolves it (config_workers_auto)
    int workers_auto;  // not a flag: set when job_create chose the count (the banner says so)
    long long seed;
    int deterministic;
    const char *resume, *weights;
    int evaluate;
    const char *out;
    int overwrite;   // replace the run already in out
    int reset_head;  // --weights: the classifier starts fresh
    int freeze_backbone;  // linear probe: only fc trains, BN in eval mode
    const char *device;
    int print_freq;
    const char *teacher;
    double kd_alpha, kd_temperature;
    double mixup, cutmix, mix_prob, mix_switch_prob;  // Mixup/CutMix (loader/mix.h); alphas 0: off
    double drop_path;          // stochastic depth's rate (nn/resnet.h ResNet.drop_path; 0: off)
    const char *auto_augment;  // loader/autoaug.h policy: none | ta_wide | ra | timm's rand-...
    int ra_magnitude;          // torchvision's RandAugment magnitude bin
    double random_erase;       // RandomErasing probability (0: off)
    const char *random_erase_mode;  // const | pixel
    int ra_repeats;            // repeated augmentation: copies of each record per epoch (1: off)
    int bce;                   // timm's binary cross-entropy in place of the softmax cross-entropy
    double bce_target_thresh;  // < 0: none
    int bce_sum;
    const char *precision;
    int demo;
    const char *config_file;  // --config: a recipe file of flags
    int zero_init_residual;
    int blurpool;  // BlurPool (nn/resnet.h ResNet.blurpool); taken from a checkpoint/model file when not given
    int no_wd_bn;
    int max_nonfinite;
    int max_bad_records;  // 0 while parsing: auto (0.1% of the train shard, at least 1)
    int strict_data;
    int dry_run;
    int ranks;
    int gpus;
    int nodes, node_rank;
    const char *master;
    const char *comm;
    const char *cuda_graphs;
    double timeout;
    int bucket_mb;
    const char *dump_batches;
    // Execution options (nn/exec_options.h; config_exec_options): how the same model is computed.
    const char *conv_engine;
    int maxpool_vector, fuse_bn_add, fuse_bn_stats, fuse_bn_bwd, fuse_bn_pool, fuse_bn_res, cpu_winograd, cpu_small;
    const char *shards;  // positional
    // Not flags: argv[0] as typed (the commands printed for the user start with it), and which
    // flags were auto before config_from_args/job_create resolved them (recorded, so a resume
    // resolves them again rather than freezing a value derived from other flags).
    const char *argv0;
    unsigned char was_auto[96];
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

// The flag table, in --help order.
extern const Flag CONFIG_FLAGS[];
extern const int CONFIG_N_FLAGS;
#define CONFIG_MAX_FLAGS 96

// Which flags the command line gave (the demo recipe and the environment yield to those), and
// where the multi-node settings came from (an error names the variable, not a flag not given).
typedef struct {
    unsigned char flag[CONFIG_MAX_FLAGS];
    const char *nodes_from, *node_rank_from, *master_from;  // "--nodes" or "$WORLD_SIZE", ...
    const char *config_file;                 // --config's file when one was read
    int config_line[CONFIG_MAX_FLAGS];       // the file's line that set each flag, 0: not the file
    unsigned char demo[CONFIG_MAX_FLAGS];    // set by --demo's recipe
    unsigned char resumed[CONFIG_MAX_FLAGS]; // taken from --resume's recorded settings
    const char *env[CONFIG_MAX_FLAGS];       // the old variable that set it (an alias, config_env_aliases)
    const char *resumed_from;                // that checkpoint, when it had a record
} ConfigGiven;

// The flag called `name` (dies on an unknown name: a programming error, not a user's).
const Flag *config_flag(const char *name);
int config_given(const ConfigGiven *g, const char *name);
// Where flag i's value came from, as --dry-run prints it ("command line", "--demo", "recipe F:L",
// "recorded in R", "default"...); trainer/dryrun.c.
void config_flag_source(const Config *c, const ConfigGiven *g, int i, char *buf, size_t n);

void config_usage(FILE *f);
// Sets one flag from its text; dies naming the flag when the value does not parse.
void config_set_flag(Config *c, const Flag *fl, const char *v);
// The pieces of config_from_args (trainer/args.h), also for tests.
void config_defaults(Config *c);
void config_parse_args(Config *c, ConfigGiven *given, int argc, char **argv);
void config_env_defaults(Config *c, ConfigGiven *given);
void config_validate(const Config *c, const ConfigGiven *given);
// The demo recipe fills every flag not given (given->demo marks them); SHARDS is the demo's.
void config_apply_demo(Config *c, ConfigGiven *given, const char *argv0);
// --gpus N is --device cuda --ranks N (dies when --ranks or --device given disagree).
void config_apply_gpus(Config *c, const ConfigGiven *given);
// The flag whose long name is name[0, len), or NULL; the bytes a flag's value takes in Config.
const Flag *config_flag_named(const char *name, size_t len);
size_t config_flag_size(const Flag *fl);

// --workers auto (stored as 0 until the backend is known): loader threads per rank from the
// cores this process may use (its CPU affinity, not the machine's) and the local rank count.
int config_cpus_available(void);
int config_workers_auto(int cores, int ranks, int cuda);

// The training resolution of each epoch (--res-start, --res-end, --res-ramp, --res-step), once
// config_from_args has resolved them.
#include "loader/resolution.h"
void config_res_schedule(const Config *c, ResSchedule *s);
// The optimizer's settings (nn/optim.h) from --optimizer, --momentum, --wd, --nesterov,
// --no-wd-bn, --lars-eta, --betas, --eps and --lamb-max-grad-norm; dies naming the flag at fault.
#include "nn/optim.h"
void config_optimizer(const Config *c, OptConfig *o);
// The execution options (nn/exec_options.h) from --conv-engine, --maxpool-vector, --fuse-bn-add,
// --fuse-bn-stats, --fuse-bn-bwd, --fuse-bn-pool, --fuse-bn-res, --cpu-winograd and --cpu-small
// (the flags carry the options' names); dies naming the flag at fault.
#include "nn/exec_options.h"
void config_exec_options(const Config *c, ExecOptions *o);
// The old environment variables of those options (CTRAIN_CONV_ENGINE, CTRAIN_FUSE_BN_ADD, ...;
// EXEC_ALIASES) set the flags neither the command line nor --config gave, count as given (a resume
// compares them) and are noted on stderr; given->env names the variable. Part of config_from_args.
void config_env_aliases(Config *c, ConfigGiven *given);
// "E0,E1" of --res-ramp into two epochs; 0 on success, -1 when it is not two integers.
int config_parse_ramp(const char *s, int *e0, int *e1);

// --val-resize auto: torchvision's resize for a center crop, int(crop / 0.875) (224 -> 256).
int config_auto_val_resize(int crop);
// "a,b,c" into exactly n floats (one value is broadcast to n); dies naming --flag.
void config_parse_floats(const char *flag, const char *s, float *out, int n);
// HOST:PORT of --master; dies naming where the address came from when the port is not 1..65535.
void config_master(const Config *c, const ConfigGiven *given, char *host, size_t hostlen, int *port);

// 1 for the flags that may differ between the nodes of a run because they do not change what is
// computed: output directory, loader workers, print frequency, node number, rendezvous address,
// timeout, batch dump, CUDA graphs, --overwrite, --config's path (the values it set are compared).
int config_flag_node_local(const Flag *fl);
