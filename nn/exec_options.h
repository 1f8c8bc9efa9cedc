// Execution options: every choice of how a model is computed that can change a bit of the result
// without changing the model (which conv engine, which fusions, which CPU routes). They are settings
// of a run like the learning rate: trainer/config fills them from flags of the same names
// (--conv-engine, --no-fuse-bn-add, ...), config.json, the checkpoint and the settings
// the nodes compare record them, and the executors receive them as an argument (gpu_exec_create_opts,
// cpu_exec_create_opts, the kernels an engine or vector choice). Nothing below trainer/ reads them
// from the environment: the old variables (CTRAIN_CONV_ENGINE, ...) are aliases that a program's
// top level reads through exec_options_from_env, passing its getenv.
//
// The defaults are the fastest routes known and the ones every test without an explicit option
// runs; a value of 1 means "on where the shape allows", never "forced".
#pragma once
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    EXEC_CONV_V2 = 0,     // bf16 tensor-core engine v2 (mma.sync, kernels/conv_tc2.cu): the default until silicon decides
    EXEC_CONV_V1 = 1,     // engine v1 (kernels/conv_tc1.cu)
    EXEC_CONV_WGMMA = 2,  // the Hopper engine (kernels/conv_wgmma.cu), v2 for what it does not take
} ExecConvEngine;

typedef struct {
    ExecConvEngine conv_engine;  // bf16 convolutions on the GPU
    int maxpool_vector;          // GPU max pool in 16-byte vectors where C and alignment allow
    int fuse_bn_add;             // a BN and the residual ADD after it in one pass (CPU and GPU)
    int fuse_bn_stats;           // BN statistics gathered by the conv epilogue before it
    int fuse_bn_bwd;             // BN backward reductions in the dgrad epilogue of the conv/pool after it
    int fuse_bn_pool;            // BN + ReLU applied on the fly by the max pool after it
    int fuse_bn_res;             // a downsampling block's residual BN applied by the fused tail
    int cpu_winograd;            // CPU Winograd F(2x2,3x3) route for the shapes it pays on
    int cpu_small;               // CPU small-map route (nn/conv_small.c)
} ExecOptions;

static inline ExecOptions exec_options_default(void) {
    ExecOptions o = {EXEC_CONV_V2, 1, 1, 1, 1, 1, 1, 1, 1};
    return o;
}

// The options by name, in the order of the struct: the names of trainer/config's flags and of the
// keys of config.json's "exec_options" (EXEC_N_OPTIONS of them).
#define EXEC_N_OPTIONS 9
extern const char *const EXEC_OPTION_NAMES[EXEC_N_OPTIONS];
// Option i of o as text: an engine's name ("v2", "v1", "wgmma"), else "on" or "off".
const char *exec_option_text(const ExecOptions *o, int i);
// Sets the option called `name` from text (an engine's name; on/off/1/0/true/false). Returns NULL,
// or a message saying what the option takes (static storage).
const char *exec_option_set(ExecOptions *o, const char *name, const char *text);
// The engines' names, for messages: "v2, v1, wgmma".
#define EXEC_CONV_ENGINE_NAMES "v2, v1, wgmma"

// The environment variables that set these options before they were settings, kept as documented
// aliases (docs/HACKING.md): CTRAIN_CONV_ENGINE=v1|v2|wgmma, CTRAIN_MAXPOOL_SCALAR=1 (maxpool-vector
// off), CTRAIN_FUSE_BN_ADD|STATS|BWD|POOL|RES=0 and CTRAIN_CPU_WINOGRAD|SMALL=0 (off; any other value:
// on). Alias i sets option EXEC_ALIASES[i].option.
typedef struct {
    const char *var, *option;
} ExecAlias;
#define EXEC_N_ALIASES 9
extern const ExecAlias EXEC_ALIASES[EXEC_N_ALIASES];
// The option's text for an alias variable's value, in the variable's old meaning.
const char *exec_alias_text(const ExecAlias *a, const char *value);
// For programs that have no trainer/config (tools, kernel tests): every alias that get (getenv)
// finds set is applied to o. Returns NULL, or a message naming the variable and what it takes
// (static storage).
const char *exec_options_from_env(ExecOptions *o, char *(*get)(const char *));

#ifdef __cplusplus
}
#endif
