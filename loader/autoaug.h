// Per-sample photometric and geometric augmentation policies on the uint8 crop, after
// RandomResizedCrop and the flip (torchvision's and timm's order): TrivialAugmentWide and
// RandAugment (torchvision's), RandAugment (timm's "rand-m9-mstd0.5-inc1" grammar), and
// RandomErasing (torchvision's).
//
// The ops are torchvision's functional ops on uint8 tensors (torchvision/transforms/
// functional_tensor.py), reproduced to the byte: float32 blends truncated to uint8 (brightness,
// saturation, contrast, sharpness), autocontrast, equalize, posterize, solarize, invert, integer
// translations; rotate and shear sample a float32 grid bilinearly (grid_sample, zeros padding,
// align_corners=False) and round half to even, so they agree with torchvision up to the float32
// rounding of the grid and the sampler: at most 1 level on under 2% of values (1.1% seen on shears) (tests/test_autoaug.c).
//
// timm's RandAugment runs its ops on PIL images; here its op set, magnitude noise and level
// mapping (timm/data/auto_augment.py) drive the same tensor ops. Against PIL the photometric ops
// differ by PIL's rounding (PIL rounds blends and its grey level, torchvision truncates), the
// geometric ones by the filter (timm draws bilinear or bicubic per op when the train
// interpolation is "random"; here always bilinear), with timm's fill (the mean colour) where the
// image is uncovered.
//
// Randomness: every draw of a sample comes from rng_make(seed ^ key, epoch, draw key) with keys of
// their own (the crop's stream is untouched, so runs without these policies keep their bits).
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "util/rng.h"

#ifdef __cplusplus
extern "C" {
#endif

// Ops, named as torchvision's _apply_op (SolarizeAdd: timm's).
typedef enum {
    AA_IDENTITY = 0, AA_SHEAR_X, AA_SHEAR_Y, AA_TRANSLATE_X, AA_TRANSLATE_Y, AA_ROTATE, AA_BRIGHTNESS, AA_COLOR,
    AA_CONTRAST, AA_SHARPNESS, AA_POSTERIZE, AA_SOLARIZE, AA_AUTOCONTRAST, AA_EQUALIZE, AA_INVERT, AA_SOLARIZE_ADD,
    AA_N_OPS
} AaOp;

typedef enum { AA_POLICY_NONE = 0, AA_POLICY_TA_WIDE, AA_POLICY_RA_TV, AA_POLICY_RA_TIMM } AaPolicy;

typedef struct {
    AaPolicy policy;
    int num_ops;       // RandAugment: ops per image (torchvision 2, timm n, default 2)
    int magnitude;     // RandAugment: torchvision's bin (0..bins-1, default 9); timm's M (default 10)
    int bins;          // torchvision: magnitude bins (31)
    double mstd;       // timm: std of the magnitude noise (0: none; INFINITY: uniform in [0, M])
    int mmax;          // timm: upper clip of the noisy magnitude (0: 10, timm's _LEVEL_DENOM)
    int increasing;    // timm: the "inc" op set
    double op_prob;    // timm: each chosen op applies with this probability (0.5)
    uint8_t fill[3];   // timm: the colour of uncovered pixels (its img_mean: round(255 * mean))
} AaConfig;

// Parses a policy: "none", "ta_wide", "ra" (torchvision's RandAugment; magnitude from ra_magnitude),
// or timm's "rand-m7-mstd0.5-inc1" grammar (sections m, n, mstd, mmax, inc, p; "w" is refused).
// Returns 0, or -1 with a message naming the section at fault in err.
int aa_parse(const char *spec, int ra_magnitude, AaConfig *c, char *err, size_t errlen);
// The description of a parsed config, e.g. "timm RandAugment n=2 m=7 mstd=0.5 inc" (for logs).
void aa_describe(const AaConfig *c, char *buf, size_t len);

// Applies the policy to an H x W x C (C = 1 or 3) image in place; tmp holds H * W * C bytes.
void aa_apply(const AaConfig *c, Rng *r, uint8_t *img, int H, int W, int C, uint8_t *tmp);

// torchvision's _apply_op(img, op, magnitude, BILINEAR, fill) on uint8 (fill NULL: torchvision's
// None, i.e. zeros padding). SolarizeAdd takes magnitude = timm's add (threshold 128).
void aa_apply_op(AaOp op, double magnitude, const uint8_t *fill, uint8_t *img, int H, int W, int C, uint8_t *tmp);
// torchvision's _get_inverse_affine_matrix (scale 1) about (cx, cy), in double: m[6] row-major 2x3.
// Shared by the reference and the fast warp.
void aa_inverse_affine(double cx, double cy, double angle, double tx, double ty, double shx, double shy,
                       double m[6]);
// The scalar per-pixel reference of aa_apply_op and aa_affine (loader/autoaug_ref.c): the code
// held against torchvision, kept so that tests hold the fast ops to its bytes everywhere.
void aa_apply_op_ref(AaOp op, double magnitude, const uint8_t *fill, uint8_t *img, int H, int W, int C, uint8_t *tmp);
void aa_affine_ref(uint8_t *img, int H, int W, int C, double angle, double tx, double ty, double shear_x,
                   double shear_y, int center_zero, const uint8_t *fill, uint8_t *tmp);
// The affine warp behind ShearX/Y, Translate and Rotate: torchvision's F.affine(angle, translate,
// scale 1, shear, center) with float translations (timm's relative ones are fractional).
// center_zero: center=[0, 0] (the shears); else the image centre.
void aa_affine(uint8_t *img, int H, int W, int C, double angle, double tx, double ty, double shear_x, double shear_y,
               int center_zero, const uint8_t *fill, uint8_t *tmp);

// Tests: 0 makes the warp take the x86-64 baseline (SSE2) path instead of the AVX2 one chosen at
// run time (same bytes by construction); returns the previous setting.
int aa_set_simd(int on);

// torch.linspace(start, end, steps)[i] in float32 (scalar formula; torch's vectorised path may
// differ by an ulp).
float aa_linspace(float start, float end, int steps, int i);
// The magnitude torchvision's policy (TA wide or RandAugment) uses for op at bin b on an H x W
// image (unsigned; Posterize gives bits); tests compare the tables with torchvision's.
double aa_tv_magnitude(AaPolicy p, AaOp op, int bins, int b, int H, int W);

// torchvision's RandomErasing on the uint8 image that is normalised later ((x / 255 - mean) / std):
// with probability p, ten tries of (area fraction uniform in scale, aspect log-uniform in ratio,
// h = round(sqrt(area * ratio)), w = round(sqrt(area / ratio)), accepted when h < H and w < W) at a
// uniform position. value 0 (random = 0) writes round(255 * mean), the uint8 whose normalised value
// is within 0.5 / (255 std) of torchvision's 0; random = 1 writes torchvision's per-pixel N(0, 1)
// of the normalised tensor as round(255 * (mean + std * z)), saturated to 0..255 (|z| beyond about
// 2 saturates for ImageNet's statistics).
typedef struct {
    float p;
    float scale_min, scale_max, ratio_min, ratio_max;  // 0: torchvision's 0.02-0.33, 0.3-3.3
    int random;
    float mean[3], std[3];
} EraseConfig;

// Returns 1 when a box was erased (box in *top, *left, *h, *w), else 0.
int erase_apply(const EraseConfig *e, Rng *r, uint8_t *img, int H, int W, int C, int *top, int *left, int *h, int *w);

#ifdef __cplusplus
}
#endif
