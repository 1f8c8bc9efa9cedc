// The lowered execution plan (nn/plan.h): the fusion decisions, made once from the op pattern and
// the execution options. Each fusion by op pattern (the kernels: kernels/kernels.h):
//
// - The block tail (fuse_bn_add): bn3 + add [+ relu] runs as one batch norm whose last pass adds
//   the residual (the BN output slot is never allocated), and its backward writes the residual's
//   gradient in the BN's dx pass.
// - The residual's own BN (fuse_bn_res): a fused tail whose residual is a BN's output read by
//   nothing else (bn3 or bn2 of a downsampling block, beside the shortcut's BN fused with the ADD)
//   applies that BN itself (batchnorm_add_bn_forward_train_gpu); the BN only gathers its
//   statistics and its output has no buffer; its backward needs its input.
// - The stem's BN + ReLU in the max pool (fuse_bn_pool, which rides on fuse_bn_bwd: the pool's
//   backward must recompute y and does the BN's reductions): the pool applies it to the BN's input
//   on the fly (maxpool_forward_bn_gpu); the BN only gathers its statistics, its output no buffer.
// - BN statistics in the conv epilogue (fuse_bn_stats): a train forward whose conv feeds a BN
//   leaves per-tile {sum, m2} in the executor's workspace (conv2d_forward_stats_gpu, where the
//   engine has the epilogue) and that BN skips its statistics pass.
// - BN backward reductions in the dgrad epilogue (fuse_bn_bwd): a conv (or the stem's max pool)
//   whose input is relu(bn(x)) of the op before, read by it alone (bn1 -> conv2, bn2 -> conv3, the
//   stem's bn1 -> max pool), writes that BN's masked gradient and per-tile {sum g, sum g (x - mean)}
//   (conv2d_backward_data_bn_gpu; maxpool_backward_bn_gpu), and the BN skips its reduction pass.
// - The same for a block tail (fuse_bn_bwd): the conv that adds the last contribution to a block
//   output's gradient (the next block's conv1) masks it by y > 0, read from the bits the tail's
//   forward wrote beside y (tail_mask) or else from y, and sums the tiles of the tail's BN
//   (conv2d_backward_data_tail_gpu). The memory plan gives a fused tail's residual gradient the
//   output gradient's buffer (the masked gradient is both), so no pass writes it.
#include "nn/plan.h"

#include <stdio.h>
#include <stdlib.h>

#include "util/common.h"

const char *plan_kind_name(int kind) {
    static const char *names[PLAN_KINDS] = {"conv", "bn", "bn_stats", "bn_add", "relu",
                                            "maxpool", "add", "avgpool", "fc", "blur", "drop_path"};
    return kind >= 0 && kind < PLAN_KINDS ? names[kind] : "?";
}

// bn (op i, no ReLU of its own) + the ADD right after it, one of whose operands is the BN's
// output, read by nothing else, and not the logits.
static int bn_add_pattern(const ResNet *m, int i) {
    if (i < 0 || i + 1 >= m->n_ops) return 0;
    const Op *bn = &m->ops[i], *add = &m->ops[i + 1];
    if (bn->kind != OP_BN || bn->relu || add->kind != OP_ADD) return 0;
    if ((add->in == bn->out) == (add->in2 == bn->out)) return 0;  // exactly one operand is the BN's
    if (resnet_slot_readers(m, bn->out, m->n_ops) != 1) return 0;   // and nothing else reads it
    return bn->out != m->n_tensors - 1;
}

static int plain_kind(int op_kind) {
    switch (op_kind) {
    case OP_CONV: return PLAN_CONV;
    case OP_BN: return PLAN_BN;
    case OP_RELU: return PLAN_RELU;
    case OP_MAXPOOL: return PLAN_MAXPOOL;
    case OP_ADD: return PLAN_ADD;
    case OP_AVGPOOL: return PLAN_AVGPOOL;
    case OP_FC: return PLAN_FC;
    case OP_BLUR: return PLAN_BLUR;
    case OP_DROP_PATH: return PLAN_DROP_PATH;
    }
    return -1;
}

ExecPlan *plan_build(const ResNet *m, const ExecOptions *o) {
    ExecPlan *p = (ExecPlan *)ct_zalloc(sizeof(ExecPlan));
    p->opts = o ? *o : exec_options_default();
    o = &p->opts;
    int n = m->n_ops;
    p->n_ops = n;
    p->n_slots = m->n_tensors;
    p->step_of_op = (int *)ct_alloc((size_t)n * sizeof(int));
    p->no_act = (uint8_t *)ct_zalloc((size_t)m->n_tensors);
    p->no_grad = (uint8_t *)ct_zalloc((size_t)m->n_tensors);

    // Per graph op first (the decisions read each other), then the steps.
    uint8_t *fuse = (uint8_t *)ct_zalloc((size_t)n), *stats_only = (uint8_t *)ct_zalloc((size_t)n);
    int *bwd_bn = (int *)ct_alloc((size_t)n * sizeof(int)), *res_bn = (int *)ct_alloc((size_t)n * sizeof(int));
    int *pool_bn = (int *)ct_alloc((size_t)n * sizeof(int)), *tail_bwd = (int *)ct_alloc((size_t)n * sizeof(int));
    for (int i = 0; i < n; i++) {
        fuse[i] = (uint8_t)(o->fuse_bn_add && bn_add_pattern(m, i));
        bwd_bn[i] = res_bn[i] = pool_bn[i] = tail_bwd[i] = -1;
    }
    for (int i = 1; i < n && o->fuse_bn_bwd; i++) {
        const Op *op = &m->ops[i], *bn = &m->ops[i - 1];
        if ((op->kind != OP_CONV && op->kind != OP_MAXPOOL) || bn->kind != OP_BN || !bn->relu || fuse[i - 1] ||
            bn->out != op->in)
            continue;
        if (resnet_slot_readers(m, op->in, n) == 1) bwd_bn[i] = i - 1;
    }
    for (int i = 0; i < n && o->fuse_bn_res; i++) {
        if (!fuse[i]) continue;
        const Op *add = &m->ops[i + 1];
        int rs = add->in == m->ops[i].out ? add->in2 : add->in, b = -1;
        for (int j = 0; j < n; j++)
            if (m->ops[j].out == rs) b = j;
        if (b < 0 || resnet_slot_readers(m, rs, n) != 1 || m->ops[b].kind != OP_BN || m->ops[b].relu || fuse[b]) continue;
        res_bn[i] = b;
        stats_only[b] = 1;
    }
    for (int i = 0; i < n && o->fuse_bn_pool; i++) {
        if (bwd_bn[i] < 0 || m->ops[i].kind != OP_MAXPOOL) continue;
        pool_bn[i] = i - 1;
        stats_only[i - 1] = 1;
    }
    // A tail's conv: right after the ADD (nothing between may use the workspace), reading its
    // output, with no reader of it earlier in the op list (backward visits those after it).
    for (int i = 2; i < n && o->fuse_bn_bwd; i++) {
        const Op *op = &m->ops[i];
        if (op->kind != OP_CONV || !fuse[i - 2] || m->ops[i - 1].out != op->in || !m->ops[i - 1].relu) continue;
        if (!resnet_slot_readers(m, op->in, i)) tail_bwd[i] = i - 2;
    }

    p->steps = (PlanStep *)ct_zalloc((size_t)n * sizeof(PlanStep));
    for (int i = 0; i < n; i++) {
        const Op *op = &m->ops[i];
        if (i > 0 && fuse[i - 1]) {  // the ADD of a fused tail: done by its BN's step
            p->step_of_op[i] = p->n_steps - 1;
            continue;
        }
        PlanStep *s = &p->steps[p->n_steps];
        p->step_of_op[i] = p->n_steps++;
        s->kind = plain_kind(op->kind);
        if (s->kind < 0) ct_die("plan: op %d (%s) has unknown kind %d", i, op->name, op->kind);
        s->op = i;
        s->add = -1;
        s->in = op->in;
        s->out = op->out;
        s->res = op->kind == OP_ADD ? op->in2 : -1;
        s->relu = op->relu;
        s->fwd_stats = -1;
        s->bwd_bn = bwd_bn[i];
        s->bwd_tail = tail_bwd[i];
        s->residual_bn = res_bn[i];
        s->pool_bn = pool_bn[i];
        if (op->kind == OP_CONV && o->fuse_bn_stats && i + 1 < n && m->ops[i + 1].kind == OP_BN &&
            m->ops[i + 1].in == op->out)
            s->fwd_stats = i + 1;
        if (fuse[i]) {
            const Op *add = &m->ops[i + 1];
            s->kind = PLAN_BN_ADD;
            s->add = i + 1;
            s->out = add->out;
            s->res = add->in == op->out ? add->in2 : add->in;
            s->relu = add->relu;
            p->no_act[op->out] = p->no_grad[op->out] = 1;
        } else if (stats_only[i]) {
            s->kind = PLAN_BN_STATS;
            p->no_act[op->out] = 1;
        }
    }
    for (int i = 0; i < n; i++)
        if (tail_bwd[i] >= 0) p->steps[p->step_of_op[tail_bwd[i]]].tail_mask = 1;
    free(fuse);
    free(stats_only);
    free(bwd_bn);
    free(res_bn);
    free(pool_bn);
    free(tail_bwd);
    return p;
}

void plan_free(ExecPlan *p) {
    if (!p) return;
    free(p->steps);
    free(p->step_of_op);
    free(p->no_act);
    free(p->no_grad);
    free(p);
}

void plan_print(const ExecPlan *p, const ResNet *m, FILE *f) {
    for (int k = 0; k < p->n_steps; k++) {
        const PlanStep *s = &p->steps[k];
        fprintf(f, "%3d %-8s %-24s slots %d", k, plan_kind_name(s->kind), m->ops[s->op].name, s->in);
        if (s->res >= 0) fprintf(f, "+%d", s->res);
        fprintf(f, " -> %d%s", s->out, s->relu ? " relu" : "");
        if (s->fwd_stats >= 0) fprintf(f, "  stats:%s", m->ops[s->fwd_stats].name);
        if (s->residual_bn >= 0) fprintf(f, "  res_bn:%s", m->ops[s->residual_bn].name);
        if (s->pool_bn >= 0) fprintf(f, "  pool_bn:%s", m->ops[s->pool_bn].name);
        if (s->bwd_bn >= 0) fprintf(f, "  bwd_bn:%s", m->ops[s->bwd_bn].name);
        if (s->bwd_tail >= 0) fprintf(f, "  bwd_tail:%s", m->ops[s->bwd_tail].name);
        if (s->tail_mask) fprintf(f, "  mask");
        fputc('\n', f);
    }
}
