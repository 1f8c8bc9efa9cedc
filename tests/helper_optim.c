// Helper for tests/test_optim_torch.sh: runs the optimizer table's CPU step (nn/optim.h) on flat
// buffers the test's PyTorch side wrote, so torch.optim.AdamW and timm's Lamb formulas can be held
// against it on the same tensors.
//   helper_optim layout ARCH CLASSES   prints n_params, then per trainable parameter tensor:
//                                      name offset count no_decay
//   helper_optim run ARCH CLASSES OPTIMIZER NO_WD_BN WD BETA1 BETA2 EPS MAX_GRAD_NORM DIR LR1,LR2,...
//       reads DIR/p0.bin (n_params floats) and DIR/g1.bin... (one per rate), takes one step per
//       rate, writes DIR/ct_params.bin and DIR/ct_<state name>.bin
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/optim.h"
#include "nn/resnet.h"
#include "util/common.h"

static float *read_floats(const char *path, size_t n) {
    size_t size = 0;
    float *p = (float *)ct_read_file(path, &size);
    if (size != n * sizeof(float)) ct_die("%s: %zu bytes, expected %zu floats", path, size, n);
    return p;
}

static void write_floats(const char *path, const float *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, sizeof(float), n, f) != n || fclose(f)) ct_die("cannot write %s", path);
}

int main(int argc, char **argv) {
    if (argc < 4) ct_die("usage: helper_optim layout ARCH CLASSES | run ARCH CLASSES ...");
    ResNet *m = resnet_create(argv[2], 3, atoi(argv[3]));
    if (!m) ct_die("unknown arch %s", argv[2]);
    if (!strcmp(argv[1], "layout")) {
        printf("%zu\n", m->n_params);
        for (int i = 0; i < m->n_entries; i++) {
            const StateEntry *e = &m->entries[i];
            if (e->kind == ENTRY_PARAM) printf("%s %zu %zu %d\n", e->name, e->offset, e->count, e->no_decay);
        }
        resnet_free(m);
        return 0;
    }
    if (strcmp(argv[1], "run") || argc != 13) ct_die("usage: helper_optim run ARCH CLASSES OPTIMIZER NO_WD_BN WD BETA1 BETA2 EPS MAX_GRAD_NORM DIR LRS");
    const OptDesc *d = optim_find(argv[4]);
    if (!d) ct_die("unknown optimizer %s", argv[4]);
    OptConfig c;
    memset(&c, 0, sizeof c);
    c.kind = (OptKind)(d - OPT_TABLE);
    c.wd_exclude_norm_bias = atoi(argv[5]);
    c.weight_decay = (float)atof(argv[6]);
    c.beta1 = atof(argv[7]);
    c.beta2 = atof(argv[8]);
    c.eps = atof(argv[9]);
    c.max_grad_norm = atof(argv[10]);
    const char *dir = argv[11];
    char path[4200];
    snprintf(path, sizeof path, "%s/p0.bin", dir);
    float *p0 = read_floats(path, m->n_params);
    memcpy(m->params, p0, m->n_params * sizeof(float));
    OptState st;
    optim_init(&st, c.kind, m->n_params);
    int k = 0;
    for (char *s = argv[12], *end; *s; s = *end ? end + 1 : end) {
        float lr = strtof(s, &end);
        snprintf(path, sizeof path, "%s/g%d.bin", dir, ++k);
        float *g = read_floats(path, m->n_params);
        optim_step(&c, &st, m, m->params, g, lr);
        free(g);
    }
    snprintf(path, sizeof path, "%s/ct_params.bin", dir);
    write_floats(path, m->params, m->n_params);
    for (int i = 0; i < d->n_state; i++) {
        snprintf(path, sizeof path, "%s/ct_%s.bin", dir, d->state[i]);
        write_floats(path, st.state[i], m->n_params);
    }
    printf("%d steps of %s\n", k, d->name);
    optim_free(&st);
    free(p0);
    resnet_free(m);
    return 0;
}
