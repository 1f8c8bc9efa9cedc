// The GPU executor's memory plan (struct GpuExec in nn/model_cuda_impl.h): the device buffers
// the passes use, and their release (which drops the CUDA graphs: they hold the plan's pointers).
//
// Memory plan (per N x H x W, grown when a larger batch or another image size comes):
// - every activation slot has its own buffer (training keeps them all for backward anyway), but
//   a fused BN's output and a stats-only BN's (applied by the tail it feeds) have none;
//   the logits are fp32 whatever the dtype (the loss reads them);
// - activation-gradient slots share a pool: walking backward, a slot's gradient buffer is taken
//   when its first consumer's backward writes it and given back after its producer's backward
//   read it, best fit from the free buffers, so only the gradients alive together cost memory;
//   a fused tail's residual operand takes over the tail output's gradient buffer (the residual's
//   gradient is the masked output gradient, written in place: nn/model_cuda.cu);
// - one fp32 scratch covers the largest reduction workspace (BN partials, conv split-K partials).
#include <string.h>

#include "nn/model_cuda_impl.h"

void exec_free_plan(GpuExec *e, const ResNet *m) {
    MemPlan *p = &e->mem;
    if (!p->dims) return;
    CK(cudaDeviceSynchronize());
    graph_drop(&e->cg.fwd);
    graph_drop(&e->cg.bwd);
    for (int s = 0; s < m->n_tensors; s++)
        if (p->act[s] != (void *)p->logits) dfree(p->act[s]);
    for (int i = 0; i < p->n_gpool; i++) dfree(p->gpool[i]);
    dfree(p->scratch);
    dfree(p->work);
    dfree(p->bnstat);
    for (int i = 0; p->relu_mask && i < m->n_ops; i++) dfree(p->relu_mask[i]);
    free(p->relu_mask);
    free(p->mask_ok);
    dfree(p->xpad);
    dfree(p->wpad);
    dfree(p->dwpad);
    dfree(p->logits);
    dfree(p->dlogits);
    dfree(p->labels);
    dfree(p->labels_b);
    dfree(p->loss_work);
    if (p->h_logits) cudaFreeHost(p->h_logits);
    free(p->dims);
    free(p->act);
    free(p->grad);
    free(p->gpool);
    free(p->bnstat_off);
    e->dev_bytes -= p->bytes;
    int gen = p->gen;  // goes on counting: a graph of an earlier plan must never match a later one
    memset(p, 0, sizeof *p);
    p->gen = gen;
    e->fwd_train_N = 0;
}

// Build the memory plan for batches of up to N images of H x W.
void exec_plan(GpuExec *e, const ResNet *m, int N, int H, int W) {
    MemPlan *mp = &e->mem;
    if (mp->dims && N <= mp->N && H == mp->H && W == mp->W) return;
    exec_free_plan(e, m);
    mp->dims = (TensorDim *)ct_alloc((size_t)m->n_tensors * sizeof(TensorDim));
    if (resnet_shapes(m, H, W, mp->dims) != 0)
        ct_die("%s: input %dx%d is too small for the architecture", m->arch, H, W);
    mp->N = N;
    mp->H = H;
    mp->W = W;
    mp->gen++;
    size_t bytes0 = e->dev_bytes;
    int K = m->num_classes, last = m->n_tensors - 1;
    mp->logits = (float *)dmalloc(e, (size_t)N * K * sizeof(float));
    mp->dlogits = (float *)dmalloc(e, (size_t)N * K * sizeof(float));
    mp->labels = (int32_t *)dmalloc(e, (size_t)N * sizeof(int32_t));
    mp->labels_b = (int32_t *)dmalloc(e, (size_t)N * sizeof(int32_t));
    mp->loss_work = dmalloc(e, loss_workspace_bytes(N));
    CK(cudaMallocHost((void **)&mp->h_logits, (size_t)N * K * sizeof(float)));

    mp->act = (void **)ct_zalloc((size_t)m->n_tensors * sizeof(void *));
    // A slot no step writes (a fused BN's own output, a PLAN_BN_STATS step's) has no buffer (NULL);
    // the latter still has a gradient.
    const ExecPlan *p = e->plan;
    for (int s = 0; s < m->n_tensors; s++) mp->act[s] = s == last ? (void *)mp->logits : NULL;
    for (int s = 0; s < m->n_tensors; s++)
        if (s != last && !p->no_act[s]) mp->act[s] = dmalloc(e, slot_elems(e, s, N) * e->esz);
    mp->cpad = e->dt == CT_BF16 && mp->dims[0].C < 8 ? 8 : 0;
    if (mp->cpad) {
        size_t wmax = 0;
        for (int i = 0; i < m->n_ops; i++)
            if (m->ops[i].kind == OP_CONV && m->ops[i].in == 0) {
                size_t w = (size_t)m->ops[i].K * m->ops[i].R * m->ops[i].S;
                if (w > wmax) wmax = w;
            }
        mp->xpad = dmalloc(e, (size_t)N * H * W * mp->cpad * e->esz);
        mp->wpad = (uint16_t *)dmalloc(e, wmax * mp->cpad * sizeof(uint16_t));
        mp->dwpad = (float *)dmalloc(e, wmax * mp->cpad * sizeof(float));
    }

    // Gradient pool: walk backward, take a buffer for a slot at its first consumer, give the
    // producer's output buffer back after the producer.
    mp->grad = (void **)ct_zalloc((size_t)m->n_tensors * sizeof(void *));
    int *owner = (int *)ct_alloc((size_t)m->n_tensors * sizeof(int));  // pool index per slot
    size_t *cap = (size_t *)ct_zalloc((size_t)2 * m->n_tensors * sizeof(size_t));
    int *busy = (int *)ct_zalloc((size_t)2 * m->n_tensors * sizeof(int));
    int npool = 0;
    size_t max_slot = 0;
    for (int s = 0; s < m->n_tensors; s++) owner[s] = -1;
    for (int i = m->n_ops - 1; i >= 0; i--) {
        const Op *op = &m->ops[i];
        int ins[2] = {op->in, op->kind == OP_ADD ? op->in2 : -1};
        int handed = 0;  // the output's buffer went on to the residual operand
        for (int j = 0; j < 2; j++) {
            int s = ins[j];
            if (s <= 0 || owner[s] >= 0 || p->no_grad[s]) continue;  // slot 0 (the input) needs no gradient
            size_t need = slot_elems(e, s, N) * e->esz;
            // A fused tail's residual gradient is its (masked) output gradient: one buffer.
            if (plan_op_folded(p, i) && op->out != last && owner[op->out] >= 0 &&
                need == slot_elems(e, op->out, N) * e->esz) {
                owner[s] = owner[op->out];
                handed = 1;
                continue;
            }
            if (need > max_slot) max_slot = need;
            int best = -1;
            for (int b = 0; b < npool; b++) {  // best fit, else the largest free one (it grows)
                if (busy[b]) continue;
                if (best < 0) { best = b; continue; }
                int fits_b = cap[b] >= need, fits_best = cap[best] >= need;
                if (fits_b && (!fits_best || cap[b] < cap[best])) best = b;
                else if (!fits_b && !fits_best && cap[b] > cap[best]) best = b;
            }
            if (best < 0) best = npool++;
            if (cap[best] < need) cap[best] = need;
            busy[best] = 1;
            owner[s] = best;
        }
        if (op->out != last && owner[op->out] >= 0 && !handed) busy[owner[op->out]] = 0;
    }
    mp->n_gpool = npool;
    mp->gpool = (void **)ct_zalloc((size_t)(npool ? npool : 1) * sizeof(void *));
    for (int b = 0; b < npool; b++) mp->gpool[b] = dmalloc(e, cap[b]);
    for (int s = 0; s < m->n_tensors; s++)
        if (owner[s] >= 0) mp->grad[s] = mp->gpool[owner[s]];
    mp->scratch = dmalloc(e, max_slot);
    free(owner);
    free(cap);
    free(busy);

    // The tails' ReLU mask bits (bf16: one byte per 8 channels), for the conv whose data-gradient
    // epilogue does the tail's backward reductions (the plan's tail_mask, bwd_tail).
    mp->relu_mask = (uint8_t **)ct_zalloc((size_t)m->n_ops * sizeof(uint8_t *));
    mp->mask_ok = (uint8_t *)ct_zalloc((size_t)m->n_ops);
    for (int k = 0; k < p->n_steps && e->dt == CT_BF16; k++)
        if (p->steps[k].tail_mask)
            mp->relu_mask[p->steps[k].op] = (uint8_t *)dmalloc(e, (slot_elems(e, p->steps[k].out, N) + 7) / 8);

    // BN statistics and the reduction workspace.
    mp->bnstat_off = (size_t *)ct_zalloc((size_t)m->n_ops * sizeof(size_t));
    size_t nstat = 0, work = 0;
    for (int i = 0; i < m->n_ops; i++) {
        const Op *op = &m->ops[i];
        if (op->kind == OP_BN) {
            mp->bnstat_off[i] = nstat;
            int C = mp->dims[op->in].C;
            nstat += 2 * (size_t)C;
            size_t w = batchnorm_gpu_work_floats(N * mp->dims[op->in].H * mp->dims[op->in].W, C);
            if (w > work) work = w;
        } else if (op->kind == OP_CONV) {
            ConvShape s = op_conv_shape(e, op, N);
            size_t w = conv2d_gpu_work_floats(&s);
            if (w > work) work = w;
        }
    }
    mp->bnstat = (float *)dmalloc(e, nstat * sizeof(float));
    mp->work_floats = work;
    mp->work = (float *)dmalloc(e, work * sizeof(float));
    mp->bytes = e->dev_bytes - bytes0;
}
