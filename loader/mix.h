// Mixup and CutMix on uint8 batches, timm's semantics (timm.data.Mixup, mode 'batch'): with
// probability `prob` a batch is mixed, by CutMix with probability `switch_prob` when both are on,
// with lam ~ Beta(alpha, alpha); CutMix pastes a box of area about (1 - lam) and corrects lam to
// the box actually pasted. Each sample i is paired with sample N-1-i (the batch reversed, as timm
// does), so the batch is mixed in place pair by pair and needs no second copy.
//
// Mixing happens in the loader, on the uint8 crops, after augmentation (as timm's FastCollateMixup
// does in its collate function): the CPU and GPU backends then see the same bytes (one
// implementation, no device kernel, no extra device traffic), and the work is done by a loader
// worker, off the training thread. Normalisation is affine, so mixing before it is mixing after
// it, up to the rounding of the mixed pixel to uint8 (to nearest, at most half a level); Mixup's
// lam is quantised to 1/65536 so that pixels are mixed in exact integer arithmetic and the loss
// sees the same lam.
//
// Randomness: one draw per batch from rng_make(seed ^ MIX key, epoch, batch key), batch key =
// batch * world + rank (the batch's global position), so it depends on nothing else: not on the
// worker count, the timing, nor on where a resumed run starts.
#pragma once
#include <stdint.h>

#include "util/rng.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    float mixup_alpha;   // > 0 enables Mixup
    float cutmix_alpha;  // > 0 enables CutMix
    float prob;          // probability that a batch is mixed
    float switch_prob;   // with both on: probability of CutMix rather than Mixup
    uint64_t seed;
} MixConfig;

typedef enum { MIX_NONE = 0, MIX_MIXUP = 1, MIX_CUTMIX = 2 } MixMode;

typedef struct {
    MixMode mode;
    float lam;            // weight of sample i's own label; 1 for MIX_NONE
    uint32_t weight;      // Mixup: lam * 65536 (the exact pixel weight)
    int y0, y1, x0, x1;   // CutMix: rows [y0, y1) and columns [x0, x1) come from the partner
} MixDraw;

static inline int mix_enabled(const MixConfig *c) { return c->mixup_alpha > 0 || c->cutmix_alpha > 0; }

// Dies naming the flag on a bad value (negative alpha, a probability outside [0, 1]).
void mix_config_check(const MixConfig *c);
// The draw of one batch of H x W images.
void mix_draw(const MixConfig *c, int64_t epoch, uint64_t batch_key, int H, int W, MixDraw *d);
// Mixes N images (H x W x C uint8, NHWC) in place per the draw and writes each sample's partner
// label (labels[N-1-i]) into labels_b; with MIX_NONE the images are untouched.
// Whether mix_apply may take its AVX2 loop (16-bit lanes, the same bytes) where the CPU has AVX2
// (default on; the tests turn it off to cover the baseline loop). Returns the previous setting.
int mix_set_simd(int on);
void mix_apply(const MixDraw *d, uint8_t *images, const int32_t *labels, int32_t *labels_b, int N, int H, int W,
               int C);
// Beta(a, b) from the counter-based stream (Marsaglia-Tsang gamma variates); exposed for tests.
double mix_beta(Rng *r, double a, double b);

#ifdef __cplusplus
}
#endif
