// The GPU executor's fusion plan (struct GpuExec in nn/model_cuda_impl.h): which batch-norm passes
// ride in which kernels, decided once per executor from the op list and its execution options (an
// option per fusion, nn/exec_options.h, so that one GPU run can compare them: tools/gpu_session.sh's
// variants). Every fused path
// has an unfused one the executor falls back to, and nn/model_cuda.cu's passes read only the tables
// made here. The fusions, by op pattern:
//
// - The block tail (resnet_bn_add_fusable, --no-fuse-bn-add turns it off; e->fuse): bn3 + add
//   [+ relu] runs as one batch norm whose last pass adds the residual (the BN output slot is never
//   allocated), and its backward writes the residual's gradient in the BN's dx pass.
// - The residual's own BN (--fuse-bn-res; e->res_bn, e->stats_only): a fused tail whose
//   residual is a BN's output read by nothing else (bn3 or bn2 of a downsampling block, beside the
//   shortcut's BN fused with the ADD) applies that BN itself (batchnorm_add_bn_forward_train_gpu);
//   the BN only gathers its statistics and its output has no buffer; its backward needs its input.
// - The stem's BN + ReLU in the max pool (--fuse-bn-pool; e->pool_bn, e->stats_only): the pool
//   applies it to the BN's input on the fly (maxpool_forward_bn_gpu) and its backward recomputes it;
//   the BN only gathers its statistics and its output has no buffer.
// - BN statistics in the conv epilogue (--fuse-bn-stats; e->fuse_stats): a bf16 train forward
//   whose conv feeds a BN and runs on engine v2 leaves per-tile {sum, m2} in e->work
//   (conv2d_forward_stats_gpu), and that BN skips its statistics pass.
// - BN backward reductions in the dgrad epilogue (--fuse-bn-bwd; e->bn_bwd): a conv (or the
//   stem's max pool) whose input is relu(bn(x)) of the op before, read by it alone (bn1 -> conv2,
//   bn2 -> conv3, the stem's bn1 -> max pool) writes that BN's masked gradient and per-tile
//   {sum g, sum g (x - mean)} in e->work (conv2d_backward_data_bn_gpu, engine v2, stride 1 or 2;
//   maxpool_backward_bn_gpu), and the BN skips its reduction pass.
// - The same for a block tail (same switch; e->tail_bwd): the conv that adds the last contribution
//   to a block output's gradient (the next block's conv1) masks it by y > 0, read from the bits the
//   tail's forward wrote beside y (e->relu_mask, nn/model_cuda_plan.cu) or else from y, and sums the
//   tiles of the tail's BN (conv2d_backward_data_tail_gpu). The plan gives a fused tail's residual
//   gradient the output gradient's buffer (the masked gradient is both), so no pass writes it.
#include <string.h>

#include "nn/model_cuda_impl.h"

// Readers of slot s among ops [0, n): as an op's input, or an ADD's second input.
static int slot_readers(const ResNet *m, int s, int n) {
    int r = 0;
    for (int j = 0; j < n; j++) r += (m->ops[j].in == s) + (m->ops[j].kind == OP_ADD && m->ops[j].in2 == s);
    return r;
}

void exec_plan_fusions(GpuExec *e, const ResNet *m) {
    int n = m->n_ops, bwd_off = !e->opt.fuse_bn_bwd;
    e->fuse = (uint8_t *)ct_zalloc((size_t)n);
    for (int i = 0; i < n; i++) e->fuse[i] = (uint8_t)resnet_bn_add_fusable(m, i, &e->opt);
    e->fuse_stats = e->opt.fuse_bn_stats;
    e->bn_bwd = (uint8_t *)ct_zalloc((size_t)n);
    for (int i = 1; i < n && !bwd_off; i++) {
        const Op *op = &m->ops[i], *bn = &m->ops[i - 1];
        if ((op->kind != OP_CONV && op->kind != OP_MAXPOOL) || bn->kind != OP_BN || !bn->relu || e->fuse[i - 1] ||
            bn->out != op->in)
            continue;
        e->bn_bwd[i] = slot_readers(m, op->in, n) == 1;
    }
    e->res_bn = (int *)ct_alloc((size_t)n * sizeof(int));
    e->stats_only = (uint8_t *)ct_zalloc((size_t)n);
    int res_off = !e->opt.fuse_bn_res;
    for (int i = 0; i < n; i++) {
        e->res_bn[i] = -1;
        if (!e->fuse[i] || res_off) continue;
        const Op *add = &m->ops[i + 1];
        int rs = add->in == m->ops[i].out ? add->in2 : add->in, b = -1;
        for (int j = 0; j < n; j++)
            if (m->ops[j].out == rs) b = j;
        if (b < 0 || slot_readers(m, rs, n) != 1 || m->ops[b].kind != OP_BN || m->ops[b].relu || e->fuse[b]) continue;
        e->res_bn[i] = b;
        e->stats_only[b] = 1;
    }
    // The pool's backward must then recompute y: it rides on bn_bwd (--no-fuse-bn-bwd also
    // turns this off).
    e->pool_bn = (int *)ct_alloc((size_t)n * sizeof(int));
    int pool_off = !e->opt.fuse_bn_pool;
    for (int i = 0; i < n; i++) {
        e->pool_bn[i] = -1;
        if (!e->bn_bwd[i] || m->ops[i].kind != OP_MAXPOOL || pool_off) continue;
        e->pool_bn[i] = i - 1;
        e->stats_only[i - 1] = 1;
    }
    // A tail's conv: right after the ADD (nothing between may use e->work), reading its output,
    // with no reader of it earlier in the op list (backward visits those after it).
    e->tail_bwd = (int *)ct_alloc((size_t)n * sizeof(int));
    for (int i = 0; i < n; i++) {
        const Op *op = &m->ops[i];
        e->tail_bwd[i] = -1;
        if (bwd_off || op->kind != OP_CONV || i < 2 || !e->fuse[i - 2] || m->ops[i - 1].out != op->in ||
            !m->ops[i - 1].relu)
            continue;
        if (!slot_readers(m, op->in, i)) e->tail_bwd[i] = i - 2;
    }
}

void exec_free_fusions(GpuExec *e) {
    free(e->fuse);
    free(e->bn_bwd);
    free(e->tail_bwd);
    free(e->res_bn);
    free(e->pool_bn);
    free(e->stats_only);
}
