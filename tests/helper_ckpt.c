// Helper for tests/test_train_resume.sh: writes a checkpoint as builds before the parameter padding
// (nn/resnet.h) wrote it, so the tests can check that such files still load.
//   helper_ckpt pack IN OUT   OUT = IN with params, momentum and the EMA's params in the unpadded
//                             layout (tensors back to back in backward order, n_params = the real
//                             parameter count); prints "packed N -> M floats"
//   helper_ckpt old IN OUT    OUT = IN in the format of builds before the named optimizer state
//                             (version 1, or 2 with an EMA: SGD's or LARS's buffer as the one
//                             momentum array); for sgd and lars checkpoints only
// The packing walks the ops itself rather than calling into nn/resnet.c's reader, so that a bug
// in the one is not mirrored by the other.
#include <string.h>

#include "nn/checkpoint.h"
#include "nn/resnet.h"
#include "util/common.h"

static float *pack(const ResNet *m, const float *flat, size_t *n) {
    if (!flat) return NULL;
    float *out = ct_alloc(m->n_params * sizeof(float));
    size_t at = 0;
    for (int i = m->n_ops - 1; i >= 0; i--) {
        int ids[2] = {m->ops[i].w, m->ops[i].b};
        for (int k = 0; k < 2; k++) {
            if (ids[k] < 0) continue;
            const StateEntry *e = &m->entries[ids[k]];
            memcpy(out + at, flat + e->offset, e->count * sizeof(float));
            at += e->count;
        }
    }
    *n = at;
    return out;
}

int main(int argc, char **argv) {
    if (argc != 4 || (strcmp(argv[1], "pack") && strcmp(argv[1], "old"))) ct_die("usage: helper_ckpt pack|old IN OUT");
    Checkpoint ck;
    const char *err = checkpoint_load(argv[2], &ck);
    if (err) ct_die("%s: %s", argv[2], err);
    if (!strcmp(argv[1], "old")) {
        if (strcmp(ck.opt.optimizer, "sgd") && strcmp(ck.opt.optimizer, "lars"))
            ct_die("%s: a %s checkpoint has no old format", argv[2], ck.opt.optimizer);
        checkpoint_save_ema(argv[3], &ck.meta, ck.params, ck.momentum, ck.buffers, ck.counts, ck.ema_params, ck.ema_buffers);
        printf("%s: version %d, %s momentum\n", argv[3], ck.ema_params ? 2 : 1, ck.momentum ? "with" : "without");
        checkpoint_free(&ck);
        return 0;
    }
    CheckpointMeta meta = ck.meta;
    ResNet *m = resnet_create_ex(meta.arch, (int)meta.in_channels, (int)meta.num_classes, (int)meta.blurpool);
    if (!m) ct_die("%s: unknown arch %s", argv[2], meta.arch);
    if (meta.n_params != m->n_params) ct_die("%s: %llu params, a %s has %zu", argv[2], (unsigned long long)meta.n_params, m->arch, m->n_params);
    size_t n = 0;
    float *p = pack(m, ck.params, &n), *mo = pack(m, ck.momentum, &n), *ep = pack(m, ck.ema_params, &n);
    meta.n_params = n;
    checkpoint_save_ema(argv[3], &meta, p, mo, ck.buffers, ck.counts, ep, ck.ema_buffers);
    printf("packed %zu -> %zu floats\n", m->n_params, n);
    free(p), free(mo), free(ep);
    checkpoint_free(&ck);
    resnet_free(m);
    return 0;
}
