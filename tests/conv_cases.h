// The convolution test cases, one table for every program that exercises the conv engines:
// tests/emu_conv.c (every engine against the CPU oracle, the BN epilogues, other devices),
// tests/emu_conv_grouped.c (grouped shapes), tests/emu_conv_engines.c (the dispatcher against the
// engines' rules) and tools/bench_conv.cu (the engines side by side on silicon: the ResNet-50 cases
// by default, these with --cases). A new awkward shape goes here once and every one of them runs it;
// the flags say which extra checks a case takes part in.
// Kernels' types only (tests/test_layering.sh: tools/ and tests/ may include it).
#pragma once
#include "kernels/kernels.h"

enum {
    CC_ENGINES = 1 << 0,        // emu_conv: every engine, every pass, against the CPU (dense cases)
    CC_RERUN = 1 << 1,          // emu_conv: forward and data gradient run twice, bits compared
    CC_DEVICES = 1 << 2,        // emu_conv: also on the emulated A100 and L4 (no wgmma, less shared memory)
    CC_BN_STATS = 1 << 3,       // emu_conv: the forward's BN statistics epilogue
    CC_BN_DGRAD = 1 << 4,       // emu_conv: the data gradient's BN backward epilogue (3 variants)
    CC_GROUPED_ALL = 1 << 5,    // emu_conv_grouped: every engine asked (else the default only)
    CC_DISPATCH_LIVE = 1 << 6,  // emu_conv_engines: launched with every engine asked
};

typedef struct {
    const char *name;  // what the case is there for
    int N, H, W, C, K, R, S, stride, pad, groups;  // N 0: the benchmark's batch
    int flags;
} ConvCase;

// The ConvShape of case c (batch: N when the case leaves it 0).
static inline ConvShape conv_case_shape(const ConvCase *c, int batch) {
    ConvShape s = {c->N ? c->N : batch, c->H, c->W, c->C, c->K, c->R, c->S, c->stride, c->pad, 0, 0, c->groups};
    s.P = (s.H + 2 * s.pad - s.R) / s.stride + 1;
    s.Q = (s.W + 2 * s.pad - s.S) / s.stride + 1;
    return s;
}

// Small enough to emulate (one host thread per CUDA thread). Channel counts that are not multiples
// of 8 reach v1 and generic only; v2 (128x128x32) and wgmma (128x128x64, 4-stage ring) get ragged
// row and column tiles, k tails, stride phases and split weight gradients.
#define CC_E CC_ENGINES
static const ConvCase CONV_CASES[] = {
    // name                                          N   H   W    C    K  R  S st pad g  flags
    {"batch 1, 3 channels",                          1,  5,  5,   3,   4, 3, 3, 1, 1, 1, CC_E | CC_RERUN | CC_DEVICES | CC_DISPATCH_LIVE},
    {"odd sizes, stride 2, non-square",              2,  7,  6,   5,   7, 3, 3, 2, 1, 1, CC_E},
    {"1x1",                                          2,  6,  6,   6,   5, 1, 1, 1, 0, 1, CC_E},
    {"1x1 stride 2 (projection shortcut)",           2,  7,  7,   6,  10, 1, 1, 2, 0, 1, CC_E | CC_RERUN},
    {"7x7/2 stem",                                   1, 13, 11,   3,   8, 7, 7, 2, 3, 1, CC_E},
    {"5x5",                                          2,  4,  4,   8,   8, 5, 5, 2, 2, 1, CC_E},
    {"tensor cores: 3x3",                            2,  8,  8,  16,  16, 3, 3, 1, 1, 1, CC_E | CC_RERUN | CC_DEVICES | CC_DISPATCH_LIVE},
    {"tensor cores: 3x3/2, odd input",               2,  9,  9,  16,  32, 3, 3, 2, 1, 1, CC_E | CC_DEVICES},
    {"tensor cores: 1x1, C 24 (k chunks straddle taps)", 1, 6, 5, 24,  8, 1, 1, 1, 0, 1, CC_E},
    {"tensor cores: 1x1/2",                          2,  7,  7,  16,  24, 1, 1, 2, 0, 1, CC_E | CC_RERUN | CC_DEVICES},
    {"tensor cores: several tiles in M and N",       2,  9,  9,  16,  72, 1, 1, 1, 0, 1, CC_E},
    {"N*P*Q 512: split weight gradient",             2, 16, 16,   8,   8, 3, 3, 1, 1, 1, CC_E | CC_RERUN},
    {"split weight gradient, 128-row tiles (K > 64)", 2, 16, 16,  8,  72, 1, 1, 1, 0, 1, CC_E | CC_RERUN},
    {"pad 0",                                        3,  5,  7,  32,  24, 3, 3, 1, 0, 1, CC_E},
    {"7x7/2 stem with C padded to 8",                1, 11, 11,   8,   8, 7, 7, 2, 3, 1, CC_E | CC_DEVICES},
    {"1x1 image, 3x3 kernel: mostly padding",        1,  1,  1,  16,  16, 3, 3, 1, 1, 1, CC_E | CC_RERUN},
    // Engine v2: several tiles in M and N with ragged edges, k tails (K = 9*24 = 216, 1x1 with
    // C = 40), a rasterisation group boundary (9 row tiles, 2 column tiles), stride-2 phases.
    {"v2: ragged M and N tiles, k tail",             2,  9,  9,  24, 136, 3, 3, 1, 1, 1, CC_E | CC_BN_STATS},
    {"v2: k tail (C 40), 3x3/2",                   1, 12, 11,  40,  16, 3, 3, 2, 1, 1, CC_E},
    {"v2: rasterisation group boundary",             2, 24, 24,   8, 136, 1, 1, 1, 0, 1, CC_E | CC_RERUN},
    {"v2: split weight gradient",                    3, 16, 16,  16,   8, 3, 3, 1, 1, 1, CC_E},
    {"v2: 5x5/2 phases",                             2, 10, 10,  16,  24, 5, 5, 2, 2, 1, CC_E},
    // wgmma: more k-tiles than stages in the data gradient (K = 9*48: 7 tiles, the last partial),
    // a stride-2 one, a weight gradient over 338 pixels with two ragged column tiles (N = 9*24).
    {"wgmma: k-tiles past the ring",                 1,  6,  6,  64,  48, 3, 3, 1, 1, 1, CC_E | CC_RERUN | CC_DEVICES},
    {"wgmma: stride-2 data gradient",                2,  9,  9,  24,  56, 3, 3, 2, 1, 1, CC_E},
    {"wgmma: ragged column tiles",                   2, 13, 13,  24, 136, 3, 3, 1, 1, 1, CC_E},
    // The forward's BN statistics epilogue: one partial tile, 1x1 stride 2, a 7x7 stem-like.
    {"bn stats: one partial tile",                   1,  6,  5,  16,   8, 1, 1, 1, 0, 1, CC_BN_STATS},
    {"bn stats: 1x1/2",                              3, 13, 11,   8,  24, 1, 1, 2, 0, 1, CC_BN_STATS},
    {"bn stats: 7x7/2",                              1, 21, 19,   8,  16, 7, 7, 2, 3, 1, CC_BN_STATS},
    // The data gradient's BN backward epilogue: ragged row tiles (M = 198, 105), two column tiles
    // with a ragged edge (C = 136), one partial tile; stride 2 with four phases of uneven sizes (odd
    // H, W), a 1x1 stride-2 conv whose odd phases get no tap (K = 0: zeros, masked and summed all the
    // same); stride 3 and C = 12 are not taken (0 returned, nothing run).
    {"bn dgrad: ragged row tiles",                   2,  9, 11,  24,  16, 3, 3, 1, 1, 1, CC_BN_DGRAD},
    {"bn dgrad: C 136, two column tiles",            1, 16,  9, 136,   8, 1, 1, 1, 0, 1, CC_BN_DGRAD},
    {"bn dgrad: one partial tile",                   3,  7,  5,   8,  40, 3, 3, 1, 1, 1, CC_BN_DGRAD},
    {"bn dgrad: stride 2",                           2,  8,  8,  16,  16, 3, 3, 2, 1, 1, CC_BN_DGRAD | CC_DISPATCH_LIVE},
    {"bn dgrad: stride 2, uneven phases",            3, 21, 19,  16,  24, 3, 3, 2, 1, 1, CC_BN_DGRAD},
    {"bn dgrad: 1x1/2, tapless phases",              2, 11,  9,   8,  16, 1, 1, 2, 0, 1, CC_BN_DGRAD},
    {"bn dgrad: stride 3 (declined)",                1,  9,  9,   8,   8, 3, 3, 3, 1, 1, CC_BN_DGRAD},
    {"bn dgrad: C 12 (declined)",                    1,  6,  6,  12,  16, 3, 3, 1, 1, 1, CC_BN_DGRAD},
    // Grouped (ResNeXt): v2's tensor-core path where it takes them (bf16), else the generic
    // engine; no fused epilogue.
    {"grouped: 4 per group, odd map",                2,  5,  7,   8,   8, 3, 3, 1, 1, 2, CC_GROUPED_ALL | CC_DISPATCH_LIVE},
    {"grouped: resnext50 stage 1, stride 2",         1,  7,  5,  64,  64, 3, 3, 2, 1, 32, CC_GROUPED_ALL},
    {"grouped: depthwise",                           1,  4,  5,  32,  32, 3, 3, 1, 1, 32, 0},
    {"grouped: 32 per group",                        1,  4,  4, 128, 128, 3, 3, 1, 1, 4, 0},
    {"grouped: Cg 8 != Kg 16",                       1,  5,  5,  24,  48, 3, 3, 2, 1, 3, 0},
    {"grouped: 64 groups of 2",                      2,  3,  3, 128, 128, 3, 3, 2, 1, 64, 0},
    {"grouped: split weight gradient",               2, 16, 16,   8,   8, 3, 3, 1, 1, 2, 0},
    // v2's block-diagonal tensor-core path (kernels/conv_tcg.cu; the others above reach it too
    // where Cg and Kg are 4 or multiples of 8): full 128-channel slabs of 4, 8, 16 per group,
    // two slabs, Cg != Kg both ways, 64 per group (one group a CTA), stride 2 and odd maps.
    {"tc grouped: 32 groups of 4, stride 2, odd map", 1, 7,  5, 128, 128, 3, 3, 2, 1, 32, CC_GROUPED_ALL},
    {"tc grouped: 16 groups of 8, batch 3",          3,  5,  3, 128, 128, 3, 3, 1, 1, 16, 0},
    {"tc grouped: 8 groups of 16, stride 2, odd",    1,  9,  7, 128, 128, 3, 3, 2, 1,  8, 0},
    {"tc grouped: 64 groups of 4, two slabs",        1,  3,  5, 256, 256, 3, 3, 1, 1, 64, 0},
    {"tc grouped: Cg 4, Kg 8",                       2,  5,  5,  32,  64, 3, 3, 1, 1,  8, 0},
    {"tc grouped: Cg 16, Kg 4, stride 2",            1,  6,  7,  64,  16, 3, 3, 2, 1,  4, 0},
    {"tc grouped: 64 per group",                     1,  4,  3, 128, 128, 3, 3, 1, 1,  2, 0},
};
#undef CC_E
#define CONV_CASES_N ((int)(sizeof CONV_CASES / sizeof CONV_CASES[0]))

// The convolutions of a torchvision ResNet-50 at 224x224 (v1.5: stride on the 3x3), at the
// benchmark's batch (N 0), pad R/2: what the engines are measured on (tools/bench_conv.cu).
static const ConvCase CONV_BENCH_CASES[] = {
    {"stem 7x7/2", 0, 224, 224, 3, 64, 7, 7, 2, 3, 1, 0},
    {"l1 1x1 64-64", 0, 56, 56, 64, 64, 1, 1, 1, 0, 1, 0},
    {"l1 3x3 64-64", 0, 56, 56, 64, 64, 3, 3, 1, 1, 1, 0},
    {"l1 1x1 64-256", 0, 56, 56, 64, 256, 1, 1, 1, 0, 1, 0},
    {"l1 1x1 256-64", 0, 56, 56, 256, 64, 1, 1, 1, 0, 1, 0},
    {"l2 3x3/2 128", 0, 56, 56, 128, 128, 3, 3, 2, 1, 1, 0},
    {"l2 3x3 128", 0, 28, 28, 128, 128, 3, 3, 1, 1, 1, 0},
    {"l2 1x1 512-128", 0, 28, 28, 512, 128, 1, 1, 1, 0, 1, 0},
    {"l2 ds 1x1/2", 0, 56, 56, 256, 512, 1, 1, 2, 0, 1, 0},
    {"l3 3x3 256", 0, 14, 14, 256, 256, 3, 3, 1, 1, 1, 0},
    {"l3 1x1 1024-256", 0, 14, 14, 1024, 256, 1, 1, 1, 0, 1, 0},
    {"l3 1x1 256-1024", 0, 14, 14, 256, 1024, 1, 1, 1, 0, 1, 0},
    {"l4 3x3 512", 0, 7, 7, 512, 512, 3, 3, 1, 1, 1, 0},
    {"l4 1x1 2048-512", 0, 7, 7, 2048, 512, 1, 1, 1, 0, 1, 0},
    {"resnext50 l1 grouped 3x3 g32", 0, 56, 56, 128, 128, 3, 3, 1, 1, 32, 0},
    {"resnext50 l2 grouped 3x3 g32", 0, 28, 28, 256, 256, 3, 3, 1, 1, 32, 0},
    {"resnext50 l3 grouped 3x3 g32", 0, 14, 14, 512, 512, 3, 3, 1, 1, 32, 0},
    {"resnext50 l4 grouped 3x3 g32", 0, 7, 7, 1024, 1024, 3, 3, 1, 1, 32, 0},
};
#define CONV_BENCH_CASES_N ((int)(sizeof CONV_BENCH_CASES / sizeof CONV_BENCH_CASES[0]))
