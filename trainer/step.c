// train_step and evaluate (trainer/step.h).
#include "trainer/step.h"

#include <math.h>
#include <string.h>

#include "loader/augment.h"
#include "nn/drop_path.h"
#include "nn/layers.h"
#include "util/common.h"

EvalResult step_evaluate(Run *r, int dump) {
    EvalResult res = {0, 0, 0, 0};
    const Config *c = r->cfg;
    const Dataset *d = r->data;
    int K = d->classes, k5 = CT_MIN(5, K);
    // --tta flip: each image and its mirror go through the model, their logits are averaged
    // (the mirror is made here on the host for both backends: one more copy of an eval batch).
    int tta = !strcmp(c->tta, "flip");
    size_t img_cap = (size_t)c->batch * c->val_crop_size * c->val_crop_size * d->channels;
    uint8_t *flipped = tta ? ct_alloc(img_cap) : NULL;
    float *avg = tta ? ct_alloc(sizeof(float) * (size_t)c->batch * K) : NULL;
    double loss_sum = 0;
    int64_t c1 = 0, c5 = 0;
    if (r->rank.world > 1) backend_bn_from_rank0(r->model.backend, r->rank.comm);
    FILE *df = dump ? dump_open(c->dump_batches, "val_batches", r->rank.rank, r->rank.world) : NULL;
    Loader *lv = r->loaders.val;
    loader_start_epoch(lv, 0);
    LoaderBatch b;
    while (loader_next(lv, &b)) {
        const float *logits = backend_forward(r->model.backend, b.images, b.count, b.hw, d->mean, d->std, 0);
        if (tta) {
            size_t n = (size_t)b.count * K;
            memcpy(avg, logits, n * sizeof(float));
            augment_flip_batch(flipped, b.images, b.count, b.hw, b.hw, d->channels);
            const float *mirror = backend_forward(r->model.backend, flipped, b.count, b.hw, d->mean, d->std, 0);
            for (size_t i = 0; i < n; i++) avg[i] = (avg[i] + mirror[i]) * 0.5f;
            logits = avg;
        }
        int correct = 0;
        float l = softmax_xent(r->model.eval_dlogits, logits, b.labels, b.count, K, 0.0f, 1.0f, &correct);
        loss_sum += (double)l * b.count;
        c1 += correct;
        c5 += topk_correct(logits, b.labels, b.count, K, k5);
        res.n += b.count;
        if (df) dump_batch(df, c->dump_batches, &b, b.hw, d->channels, -1, 0, 0.0f);
        loader_release(lv, &b);
    }
    if (df) dump_close(df, c->dump_batches);
    free(flipped);
    free(avg);
    if (r->rank.world > 1) {
        double v[4] = {loss_sum, (double)c1, (double)c5, (double)res.n};
        comm_allreduce_f64(r->rank.comm, v, 4);
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

// With ranks, the loss, hits and batch size come back summed over the ranks (and whether any
// rank was asked to stop): a non-finite loss anywhere skips the step everywhere; gradients are
// averaged while backward runs, and the average is the same bits on every rank, so the
// finiteness check agrees too. Each rank's gradient is of its own mean loss; averaging over
// ranks makes the global mean.
StepResult step_train(Run *r, const LoaderBatch *b, double lr, int64_t global_step, int stop_requested) {
    Backend *be = r->model.backend;
    const Dataset *d = r->data;
    faults_maybe_stall(&r->faults, r->rank.rank, global_step);
    int N = b->count, correct = 0;
    backend_bn_snapshot(be);
    LossConfig lc = r->model.loss;  // a Mixup/CutMix batch brings its soft target (loader/mix.h)
    if (b->mix_lam < 1.0f) {
        lc.labels_b = b->labels_b;
        lc.lam = b->mix_lam;
    }
    // The batch's global position keys its stochastic depth draws, as it keys Mixup's.
    lc.drop_path_key = drop_path_batch_key((uint64_t)r->cfg->seed, r->pos.epoch,
                                           (uint64_t)b->batch * (uint64_t)r->rank.world + (uint64_t)r->rank.rank);
    float loss = backend_train_losses(be, r->model.teacher_backend, b->images, b->labels, N, b->hw, d->mean, d->std,
                                      &lc, &correct);
    if (faults_step_in(&r->faults.nan_grad, global_step)) backend_poison_dlogits(be);  // every gradient becomes NaN
    if (faults_step_in(&r->faults.nan_loss, global_step)) loss = NAN;
    StepResult res = {loss, correct, N, 0, stop_requested};
    if (r->rank.world > 1) {
        double v[4] = {(double)loss * N, (double)correct, (double)N, (double)stop_requested};
        comm_allreduce_f64(r->rank.comm, v, 4);
        res.loss = (float)(v[0] / v[2]);
        res.correct = (int64_t)v[1];
        res.n = (int64_t)v[2];
        res.stop = v[3] > 0;
    }
    if (isfinite(res.loss)) {
        backend_backward(be);
        if (backend_grads_finite(be)) {
            backend_optim_step(be, &r->model.optim, &r->model.opt, (float)lr);
            ema_after_step(r, global_step);
            return res;
        }
        res.loss = NAN;
    }
    // Skip: the weights are untouched (no update), and the BN statistics go back to before the step.
    backend_bn_rollback(be);
    res.skipped = 1;
    return res;
}
