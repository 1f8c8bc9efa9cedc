// The CPU losses on given inputs, for comparisons with PyTorch (tests/test_loss_torch.sh):
//   helper_loss IN OUT [bce THRESHOLD SUM_CLASSES]
// IN: int32 N, K; float32 smoothing, lam; float32 logits[N*K]; int32 labels[N], labels_b[N].
// OUT: float32 loss, then float32 dlogits[N*K] of softmax_xent_mix (or, with bce, of bce_mix;
// grad_scale 1); int32 hits.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/layers.h"
#include "util/common.h"

int main(int argc, char **argv) {
    if (argc != 3 && !(argc == 6 && !strcmp(argv[3], "bce"))) ct_die("usage: helper_loss IN OUT [bce THRESHOLD SUM_CLASSES]");
    size_t len = 0;
    char *in = ct_read_file(argv[1], &len);
    int32_t NK[2];
    float el[2];
    if (len < 16) ct_die("%s: too short", argv[1]);
    memcpy(NK, in, 8);
    memcpy(el, in + 8, 8);
    const int N = NK[0], K = NK[1];
    if (N < 1 || K < 1 || len != 16 + (size_t)N * K * 4 + (size_t)N * 8) ct_die("%s: bad size %zu for N=%d K=%d", argv[1], len, N, K);
    float *z = ct_alloc((size_t)N * K * 4), *d = ct_alloc((size_t)N * K * 4);
    int32_t *a = ct_alloc((size_t)N * 4), *b = ct_alloc((size_t)N * 4);
    memcpy(z, in + 16, (size_t)N * K * 4);
    memcpy(a, in + 16 + (size_t)N * K * 4, (size_t)N * 4);
    memcpy(b, in + 16 + (size_t)N * K * 4 + (size_t)N * 4, (size_t)N * 4);
    int hits = 0;
    float loss = argc == 6 ? bce_mix(d, z, a, b, el[1], N, K, el[0], (float)atof(argv[4]), atoi(argv[5]), 1.0f, &hits)
                           : softmax_xent_mix(d, z, a, b, el[1], N, K, el[0], 1.0f, &hits);
    FILE *f = fopen(argv[2], "wb");
    if (!f || fwrite(&loss, 4, 1, f) != 1 || fwrite(d, 4, (size_t)N * K, f) != (size_t)N * K || fwrite(&hits, 4, 1, f) != 1 ||
        fclose(f) != 0)
        ct_die_errno("%s", argv[2]);
    free(in), free(z), free(d), free(a), free(b);
    return 0;
}
