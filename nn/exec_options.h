// Execution options: every choice of how a model is computed that can change a bit of the result
// without changing the model (which conv engine, which fusions, which CPU routes). They are settings
// of a run like the learning rate: trainer/config fills them from flags, config.json, the checkpoint
// and the nodes' settings fingerprint record them, and the executors receive them as an argument.
// Nothing below trainer/ reads them from the environment.
//
// The defaults are the fastest routes known and the ones every test without an explicit option
// runs; a value of 1 means "on where the shape allows", never "forced".
#pragma once

typedef enum {
    EXEC_CONV_V2 = 0,     // bf16 tensor-core engine v2 (mma.sync, kernels/conv_tc2.cu): the default until silicon decides
    EXEC_CONV_V1 = 1,     // engine v1 (kernels/conv_tc1.cu)
    EXEC_CONV_WGMMA = 2,  // the Hopper engine (kernels/conv_wgmma.cu), v2 for what it does not take
} ExecConvEngine;

typedef struct {
    ExecConvEngine conv_engine;  // bf16 convolutions on the GPU
    int maxpool_vector;          // GPU max pool in 16-byte vectors where C and alignment allow
    int fuse_bn_add;             // a BN and the residual ADD after it in one pass
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
