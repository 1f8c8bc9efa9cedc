// Stochastic depth (timm's DropPath, torchvision's StochasticDepth(p, "row")): in training, each
// sample's residual branch is kept with probability 1 - p and then scaled by 1 / (1 - p) (timm's
// scale_by_keep, torchvision's noise.div_(survival_rate)), or zeroed; in eval it is the identity.
// The graph carries it as OP_DROP_PATH ops (nn/resnet.h: timm's per-block rate rule).
//
// Randomness: one key per training batch, rng_make(seed ^ DROP key, epoch, batch key) with batch
// key = batch * world + rank (the batch's global position, as loader/mix.h keys Mixup), and from
// it one draw per (block, row): rng_make(key, block, row). So the masks depend on nothing else
// (not the worker count, not where a resumed run starts), and both executors get the same scales
// from drop_path_scales on the host (the GPU executor uploads them with the batch).
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

uint64_t drop_path_batch_key(uint64_t seed, int64_t epoch, uint64_t batch_key);
// s[n] for rows n = 0..N-1 of block `block` at drop probability p in [0, 1): 1 / (1 - p) in fp32
// (0 when p rounds it to infinity) for a kept row (uniform draw < 1 - p, bernoulli_'s rule), 0 for a
// dropped one. Returns how many rows were dropped.
int drop_path_scales(float *s, int N, double p, uint64_t key, int block);
// y[n, :] = s[n] * x[n, :] over N rows of `row` elements (forward and backward alike); y may be x.
void drop_path_apply(float *y, const float *x, const float *s, int N, size_t row);

#ifdef __cplusplus
}
#endif
