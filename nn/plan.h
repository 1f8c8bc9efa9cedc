// The lowered execution plan: from a model graph (nn/resnet.h's op list) and the execution options
// (nn/exec_options.h), the explicit list of the steps an executor runs, fused ones included, with
// the slots they read and write and the buffers they leave out. Plain data, made once per executor
// (plan_build), no device code: the GPU executor (nn/model_cuda.cu), its memory plan
// (nn/model_cuda_plan.cu) and its profiler walk it; nothing there decides a fusion again.
//
// The graph says what is computed, the plan how. Each step is one graph op, or two for a block
// tail (a BN and the ADD after it), and carries the fusions that change its kernels:
//
//   kind          graph ops        forward                                 backward
//   PLAN_CONV     conv             conv; its epilogue gathers the BN      wgrad; dgrad, whose epilogue may do
//                                  statistics of fwd_stats                 the reductions of bwd_bn or bwd_tail
//   PLAN_BN       bn [+relu]       bn [+relu]                              bn backward (reductions skipped when
//                                                                          the consumer's dgrad did them)
//   PLAN_BN_STATS bn [+relu]       statistics only: the step that reads    as PLAN_BN, from the BN's input
//                                  its output (a tail's residual_bn, a
//                                  pool's pool_bn) applies it on the fly
//   PLAN_BN_ADD   bn, add [+relu]  bn(in) + res [relu] in one pass; with   dx and the residual's gradient in one
//                                  residual_bn, res = bn'(residual input)  pass (or the tail conv's epilogue)
//   PLAN_MAXPOOL  maxpool          max pool, of relu(bn(x)) on the fly     recomputes relu(bn(x)) when pool_bn;
//                                  when pool_bn                            its epilogue does bwd_bn's reductions
//   PLAN_ADD, PLAN_RELU, PLAN_AVGPOOL, PLAN_FC, PLAN_BLUR, PLAN_DROP_PATH: the graph op alone.
//
// Stochastic depth (PLAN_DROP_PATH, a per-sample scale of a block's branch) stands between the
// branch's BN and the ADD, so a block that has one runs its BN, the scale and the ADD as three
// steps (the BN-ADD tail fusions see no BN before the ADD, or a residual that is no BN's output);
// the first block, whose rate is 0, and every block without --drop-path keep their fused tails.
//
// Every fusion here is "where the kernel takes the shape": the executor keeps the unfused path for
// a kernel that declines one (an engine without the epilogue, fp32, an eval pass), so a plan never
// changes what is computed, only which kernels compute it, and one option off gives the unfused
// steps (exec_options.h). Adding an op kind: the graph (nn/resnet.h), a PlanKind here, one CPU
// layer, one GPU kernel and their tests (docs/HACKING.md).
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "nn/exec_options.h"
#include "nn/resnet.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    PLAN_CONV = 0,
    PLAN_BN,
    PLAN_BN_STATS,
    PLAN_BN_ADD,
    PLAN_RELU,
    PLAN_MAXPOOL,
    PLAN_ADD,
    PLAN_AVGPOOL,
    PLAN_FC,
    PLAN_BLUR,
    PLAN_DROP_PATH,
    PLAN_KINDS
} PlanKind;

typedef struct {
    int kind;         // PlanKind
    int op;           // the graph op (a tail's BN); its index orders the steps, as the graph does
    int add;          // PLAN_BN_ADD: the graph's ADD fused into this step; else -1
    int in, out;      // slots: what the step reads, what it writes (a tail: the ADD's output)
    int res;          // PLAN_BN_ADD: the residual operand's slot; PLAN_ADD: the second operand; else -1
    int relu;         // ReLU on the output (a tail: the ADD's)
    int fwd_stats;    // PLAN_CONV: the BN op whose training statistics this conv's epilogue gathers (-1: none)
    int bwd_bn;       // PLAN_CONV, PLAN_MAXPOOL: the BN(+ReLU) op before it, read by it alone, whose backward
                      // reductions (and ReLU mask) its data-gradient epilogue does (-1: none)
    int bwd_tail;     // PLAN_CONV: the fused tail's BN op whose output this conv reads right after it and is the
                      // last to add to the gradient of: its dgrad epilogue masks by y > 0 and does that BN's
                      // reductions (-1: none)
    int residual_bn;  // PLAN_BN_ADD: the BN op whose output is the residual, applied by the tail (-1: none)
    int pool_bn;      // PLAN_MAXPOOL: the BN + ReLU op before it, applied on the fly (-1: none)
    int tail_mask;    // PLAN_BN_ADD: a later conv's dgrad reads this tail's ReLU mask bits (bwd_tail)
} PlanStep;

typedef struct {
    ExecOptions opts;  // what the plan was built for
    int n_steps;
    PlanStep *steps;   // in forward order; backward walks them in reverse
    int n_ops;
    int *step_of_op;   // [n_ops]: the step that runs graph op i (a tail's ADD: its BN's step)
    int n_slots;
    uint8_t *no_act;   // [n_slots]: 1 when no step writes the slot (a fused BN's own output, a
                       // PLAN_BN_STATS's output): no activation buffer
    uint8_t *no_grad;  // [n_slots]: 1 when no gradient flows through the slot (a fused BN's own output)
} ExecPlan;

// The plan of m under o (NULL: exec_options_default()). Never fails for a valid graph.
ExecPlan *plan_build(const ResNet *m, const ExecOptions *o);
void plan_free(ExecPlan *p);
// "conv", "bn", "bn_stats", "bn_add", "relu", "maxpool", "add", "avgpool", "fc", "blur", "drop_path".
const char *plan_kind_name(int kind);
// The step that runs graph op i, and whether op i is a fused tail's ADD (done by its BN's step).
static inline const PlanStep *plan_step_of(const ExecPlan *p, int i) { return &p->steps[p->step_of_op[i]]; }
static inline int plan_op_folded(const ExecPlan *p, int i) { return plan_step_of(p, i)->op != i; }
// Called by an executor after each forward step (cpu_exec_set_step_hook, gpu_exec_set_step_hook):
// the step's index and its output slot, n floats on the host (NULL for a step whose output has no
// buffer: a GPU PLAN_BN_STATS step).
typedef void (*PlanStepHook)(void *ctx, int step, const float *y, size_t n);
// One line per step (tests, --help of tools, the docs' walk through a batch).
void plan_print(const ExecPlan *p, const ResNet *m, FILE *f);

#ifdef __cplusplus
}
#endif
