// Helper for tests/test_safetensors_py.sh: ctrain's side of the file exchange with PyTorch.
//   helper_stio save ARCH IN_CH CLASSES SEED OUT      init from SEED (plus non-trivial BN buffers
//                                                   and counts) and write OUT
//   helper_stio eval ARCH IN_CH CLASSES WEIGHTS X OUT strict-load WEIGHTS, run the eval-mode forward
//                                                   on tensor "x" (NHWC F32) of X, write "logits"
//   helper_stio evalfold ...                        the same through the BN-folded executor (nn/fold.h)
// ARCH may end in "+blurpool" (--blurpool's network).
#include <string.h>

#include "nn/fold.h"
#include "nn/model_cpu.h"
#include "nn/resnet.h"
#include "nn/safetensors.h"
#include "util/common.h"
#include "util/rng.h"

int main(int argc, char **argv) {
    if (argc < 6) ct_die("usage: helper_stio save|eval ARCH IN_CH CLASSES ...");
    // ARCH+blurpool: the network with BlurPool's blurs (the file cannot say: they have no tensors).
    char arch[32];
    snprintf(arch, sizeof arch, "%s", argv[2]);
    char *plus = strchr(arch, '+');
    if (plus) *plus = 0;
    ResNet *m = resnet_create_ex(arch, atoi(argv[3]), atoi(argv[4]), plus && !strcmp(plus + 1, "blurpool"));
    if (!m) ct_die("unknown arch %s", argv[2]);
    if (!strcmp(argv[1], "save") && argc == 7) {
        resnet_init(m, (uint64_t)atoll(argv[5]), 0);
        Rng r = rng_make(99, 0, 0);
        for (int i = 0; i < m->n_entries; i++) {
            StateEntry *e = &m->entries[i];
            int is_var = strstr(e->name, "running_var") != NULL;
            if (e->kind == ENTRY_BUF)
                for (size_t j = 0; j < e->count; j++)
                    m->bufs[e->offset + j] = is_var ? 0.5f + rng_uniform(&r) : 0.2f * rng_normal(&r);
            if (e->kind == ENTRY_COUNT) m->counts[e->offset] = 1234 + i;
            if (e->kind == ENTRY_PARAM && !e->is_conv && strncmp(e->name, "fc.", 3) != 0)
                for (size_t j = 0; j < e->count; j++) m->params[e->offset + j] += 0.1f * rng_normal(&r);
        }
        st_save_resnet(argv[6], m, NULL, 0, NULL, NULL, 0);
    } else if ((!strcmp(argv[1], "eval") || !strcmp(argv[1], "evalfold")) && argc == 8) {
        st_load_resnet(argv[5], m);
        StFile xf;
        char *err = st_open(argv[6], &xf);
        if (err) ct_die("%s", err);
        const StTensor *x = st_find(&xf, "x");
        if (!x || x->dtype != ST_F32 || x->ndim != 4 || x->shape[3] != m->in_channels)
            ct_die("%s: tensor x must be F32 [N,H,W,%d]", argv[6], m->in_channels);
        int N = (int)x->shape[0], H = (int)x->shape[1], W = (int)x->shape[2];
        float *xb = ct_alloc(x->nbytes);
        memcpy(xb, x->data, x->nbytes);
        CpuExec *e = cpu_exec_create(m);
        FoldNet *f = strcmp(argv[1], "evalfold") ? NULL : fold_create(m);
        if (!strcmp(argv[1], "evalfold") && !f) ct_die("%s does not fold", m->arch);
        const float *logits = f ? fold_forward(f, xb, N, H, W) : cpu_forward(e, m, xb, N, H, W, 0);
        StWrite out = {"logits", ST_F32, 2, {N, m->num_classes}, logits};
        st_write(argv[7], &out, 1, NULL, NULL, 0);
        fold_free(f);
        cpu_exec_free(e);
        free(xb);
        st_close(&xf);
    } else {
        ct_die("helper_stio: bad command line");
    }
    resnet_free(m);
    return 0;
}
