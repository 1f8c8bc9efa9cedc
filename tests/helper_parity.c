// Parity helper for tests/test_parity.sh: loads the state dict and the float64 reference written
// by tools/torch_ref.py, runs one training step of ctrain's CPU executor and SGD, and compares.
//   helper_parity DIR [--tol-logits X] [--tol-grad X] [--tol-state X] [--floor F] [--dump FILE]
// --dump writes ctrain's float32 train logits and gradients (grad.<name>, torch layout) to FILE,
// for a per-tensor look against torch's float32 and float64 runs (tools/torch_ref.py --compare).
// Prints one line per quantity (norm-wise relative error against the reference) and exits 1 if any
// exceeds its tolerance.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "nn/layers.h"
#include "nn/model_cpu.h"
#include "nn/resnet.h"
#include "nn/safetensors.h"
#include "nn/sgd.h"
#include "util/common.h"
#include "tools/exec_env.h"

static StFile ref;
static int failures;
// --floor F: a quantity whose float32 rounding alone (measured as torch float32 against the
// float64 reference, tensors floor.<key>) exceeds the tolerance is held to F times that instead.
static double floor_factor;
static const char *dump_path;

static double tol_for(const char *key, double tol) {
    if (floor_factor <= 0) return tol;
    char name[160];
    snprintf(name, sizeof name, "floor.%s", key);
    const StTensor *t = st_find(&ref, name);
    if (!t || t->dtype != ST_F64 || t->count != 1) ct_die("reference: %s missing (run torch_ref.py --fp32-floor)", name);
    double f;
    memcpy(&f, t->data, 8);
    return f * floor_factor > tol ? f * floor_factor : tol;
}

static float *ref_f32(const char *name, size_t count) {
    const StTensor *t = st_find(&ref, name);
    if (!t) ct_die("reference: missing tensor '%s'", name);
    float *out = ct_alloc(count * sizeof(float));
    char *err = st_to_f32(t, out, count);
    if (err) ct_die("reference: %s", err);
    return out;
}

static double rel_err(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    if (!(num == num)) return INFINITY;
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

// Torch-layout copy of a parameter-shaped buffer (conv KRSC -> OIHW).
static void to_torch(const StateEntry *e, float *dst, const float *src) {
    if (e->is_conv)
        krsc_to_oihw(dst, src, (int)e->shape[0], (int)e->shape[1], (int)e->shape[2], (int)e->shape[3]);
    else memcpy(dst, src, e->count * sizeof(float));
}

// Compares every parameter-shaped quantity with the reference tensors "<prefix><name>"; prints the
// worst one. Returns the worst error.
static double compare_params(const ResNet *m, const float *buf, const char *prefix, const char *what, double tol,
                             int use_floor) {
    double worst = 0, worst_ratio = 0;
    const char *worst_name = "";
    int bad = 0, floored = 0;
    float *tmp = ct_alloc(m->n_params * sizeof(float));
    for (int i = 0; i < m->n_entries; i++) {
        const StateEntry *e = &m->entries[i];
        if (e->kind != ENTRY_PARAM) continue;
        char name[128];
        snprintf(name, sizeof name, "%s%s", prefix, e->name);
        float *r = ref_f32(name, e->count);
        to_torch(e, tmp, buf + e->offset);
        double err = rel_err(tmp, r, e->count), t = use_floor ? tol_for(name, tol) : tol;
        floored += t > tol;
        if (!(err <= t)) {
            printf("    %-44s %.3e  > %.1e\n", e->name, err, t);
            bad++;
        }
        if (!(err <= worst)) {
            worst = err;
            worst_name = e->name;
        }
        if (!(err / t <= worst_ratio)) worst_ratio = err / t;
        free(r);
    }
    free(tmp);
    failures += bad > 0;
    printf("  %-28s worst %.3e (%s)  tol %.0e", what, worst, worst_name, tol);
    if (floored) printf(" (%d tensors at %gx their fp32 floor; worst err/tol %.2f)", floored, floor_factor, worst_ratio);
    printf("  %s\n", bad ? "FAIL" : "ok");
    return worst;
}

static void dump_step(const ResNet *m, const char *path, const float *logits, int N, int classes,
                      const float *grads) {
    StWrite *ts = ct_alloc((size_t)(m->n_entries + 1) * sizeof(StWrite));
    char **names = ct_alloc((size_t)(m->n_entries + 1) * sizeof(char *));
    int n = 0;
    ts[n++] = (StWrite){"logits", ST_F32, 2, {N, classes}, logits};
    for (int i = 0; i < m->n_entries; i++) {
        const StateEntry *e = &m->entries[i];
        if (e->kind != ENTRY_PARAM) continue;
        float *t = ct_alloc(e->count * sizeof(float));
        to_torch(e, t, grads + e->offset);
        names[n] = ct_alloc(strlen(e->name) + 6);
        sprintf(names[n], "grad.%s", e->name);
        StWrite w = {names[n], ST_F32, 1, {(int64_t)e->count}, t};
        ts[n++] = w;
    }
    st_write(path, ts, n, NULL, NULL, 0);
    for (int i = 1; i < n; i++) {
        free((void *)ts[i].data);
        free(names[i]);
    }
    free(names);
    free(ts);
}

static void report(const char *what, const char *key, double err, double tol) {
    double t = key ? tol_for(key, tol) : tol;
    int ok = err <= t;
    failures += !ok;
    printf("  %-28s %.3e  tol %.1e%s  %s\n", what, err, t, t > tol ? " (fp32 floor)" : "", ok ? "ok" : "FAIL");
}

static double meta_num(const char *key) {
    const char *v = st_meta(&ref, key);
    if (!v) ct_die("reference: metadata '%s' missing", key);
    return atof(v);
}

int main(int argc, char **argv) {
    if (argc < 2) ct_die("usage: helper_parity DIR [--tol-logits X] [--tol-grad X] [--tol-state X] [--floor F]");
    double tol_logits = 1e-5, tol_grad = 1e-4, tol_state = 1e-5;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--tol-logits")) tol_logits = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--tol-grad")) tol_grad = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--tol-state")) tol_state = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--floor")) floor_factor = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--dump")) dump_path = argv[i + 1];
        else ct_die("helper_parity: unknown flag %s", argv[i]);
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/ref.safetensors", argv[1]);
    char *err = st_open(path, &ref);
    if (err) ct_die("%s", err);
    const char *arch = st_meta(&ref, "arch");
    if (!arch) ct_die("%s: metadata 'arch' missing", path);
    int in_ch = (int)meta_num("in_ch"), classes = (int)meta_num("classes"), N = (int)meta_num("batch");
    int S = (int)meta_num("size");
    float smoothing = (float)meta_num("smoothing"), lr = (float)meta_num("lr");
    SgdConfig sc = {(float)meta_num("momentum"), (float)meta_num("wd"), (int)meta_num("nesterov"),
                    (int)meta_num("wd_exclude"), 0, 0};

    const char *blur = st_meta(&ref, "blurpool");  // absent in references from before --blurpool
    // Stochastic depth (torch_ref.py --drop-path: timm's rule on the rows ctrain draws from drop_key).
    const char *dp = st_meta(&ref, "drop_path"), *dk = st_meta(&ref, "drop_key");
    double drop = dp ? atof(dp) : 0.0;
    ResNet *m = resnet_create_dp(arch, in_ch, classes, blur && atoi(blur), drop);
    if (!m) ct_die("unknown arch %s", arch);
    snprintf(path, sizeof path, "%s/weights.safetensors", argv[1]);
    st_load_resnet(path, m);  // strict: exactly torchvision's state_dict
    printf("%s%s: N=%d %dx%dx%d classes %d smoothing %g, sgd lr %g momentum %g wd %g nesterov %d wd_exclude %d\n",
           arch, m->blurpool ? " (blurpool)" : "", N, S, S, in_ch, classes, smoothing, lr, sc.momentum, sc.weight_decay, sc.nesterov,
           sc.wd_exclude_bn_bias);

    size_t nx = (size_t)N * S * S * in_ch;
    float *x = ref_f32("x", nx);
    const StTensor *lt = st_find(&ref, "labels");
    if (!lt || lt->dtype != ST_I64 || lt->count != (size_t)N) ct_die("reference: labels");
    int32_t *labels = ct_alloc(N * sizeof(int32_t));
    for (int i = 0; i < N; i++) {
        int64_t v;
        memcpy(&v, lt->data + 8 * i, 8);
        labels[i] = (int32_t)v;
    }
    size_t nk = (size_t)N * classes;
    // The CPU routes as the old variables say (tests/test_parity.sh sets CTRAIN_CPU_WINOGRAD per route).
    ExecOptions opt = tool_exec_options();
    CpuExec *e = cpu_exec_create_opts(m, &opt);
    if (drop > 0) {
        if (!dk) ct_die("reference: --drop-path without metadata 'drop_key'");
        cpu_exec_set_drop_path_key(e, strtoull(dk, NULL, 10));
    }

    // Eval mode first: the running statistics are still the initial ones.
    double t0 = ct_now();
    const float *lg = cpu_forward(e, m, x, N, S, S, 0);
    float *r = ref_f32("eval_logits", nk);
    report("eval logits", "eval_logits", rel_err(lg, r, nk), tol_logits);
    free(r);

    // Training step.
    float *grads = ct_alloc(m->n_params * sizeof(float));
    float *dlogits = ct_alloc(nk * sizeof(float));
    lg = cpu_forward(e, m, x, N, S, S, 1);
    if (drop > 0) {  // the rows ctrain dropped are the ones torch's replay dropped, at timm's rates
        int ops = 0, dropped = 0, bad = 0;
        for (int i = 0; i < m->n_ops; i++) {
            const float *s = cpu_exec_drop_path_scales(e, i);
            if (!s) continue;
            char key[32];
            snprintf(key, sizeof key, "drop.%d", m->ops[i].drop_block);
            float *rows = ref_f32(key, (size_t)N);
            for (int n = 0; n < N; n++) {
                float want = rows[n] != 0.f ? 1.0f / (float)(1.0 - m->ops[i].drop) : 0.f;
                bad += s[n] != want;
                dropped += s[n] == 0.f;
            }
            free(rows);
            ops++;
        }
        printf("drop path %g: %d blocks, %d of %d rows dropped, %d scales differ from torch's replay\n", drop, ops,
               dropped, ops * N, bad);
        if (bad || !ops || !dropped || dropped == ops * N) ct_die("drop path: the rows differ, or none or all dropped");
    }
    float loss = softmax_xent(dlogits, lg, labels, N, classes, smoothing, 1.0f, NULL);
    cpu_backward(e, m, dlogits, grads, NULL, NULL);
    double t_step = ct_now() - t0;
    r = ref_f32("logits", nk);
    report("train logits", "logits", rel_err(lg, r, nk), tol_logits);
    free(r);
    r = ref_f32("loss", 1);
    report("loss", "loss", fabs((double)loss - r[0]) / fabs(r[0]), tol_logits);
    free(r);
    compare_params(m, grads, "grad.", "gradients", tol_grad, 1);
    if (dump_path) dump_step(m, dump_path, lg, N, classes, grads);

    // BN buffers after the training forward.
    double worst = 0, worst_tol = tol_state;
    const char *worst_name = "";
    int counts_ok = 1;
    for (int i = 0; i < m->n_entries; i++) {
        const StateEntry *en = &m->entries[i];
        char name[128];
        snprintf(name, sizeof name, "post.%s", en->name);
        if (en->kind == ENTRY_BUF) {
            float *rb = ref_f32(name, en->count);
            double err2 = rel_err(m->bufs + en->offset, rb, en->count), t = tol_for(name, tol_state);
            if (!(err2 / t <= worst / worst_tol)) {
                worst_tol = t;
                worst = err2;
                worst_name = en->name;
            }
            free(rb);
        } else if (en->kind == ENTRY_COUNT) {
            const StTensor *t = st_find(&ref, name);
            int64_t v = -1;
            if (t && t->dtype == ST_I64 && t->count == 1) memcpy(&v, t->data, 8);
            counts_ok &= v == m->counts[en->offset];
        }
    }
    printf("  (worst running stat relative to its tolerance: %s)\n", worst_name);
    report("running stats", NULL, worst, worst_tol);
    report("num_batches_tracked equal", NULL, counts_ok ? 0 : 1, 0);

    // SGD on the reference gradients isolates the optimizer formula; on ctrain's gradients it
    // checks the whole chain.
    float *p0 = ct_alloc(m->n_params * sizeof(float));
    memcpy(p0, m->params, m->n_params * sizeof(float));
    float *rg = ct_alloc(m->n_params * sizeof(float));
    for (int i = 0; i < m->n_entries; i++) {
        const StateEntry *en = &m->entries[i];
        if (en->kind != ENTRY_PARAM) continue;
        char name[128];
        snprintf(name, sizeof name, "grad.%s", en->name);
        float *g = ref_f32(name, en->count);
        if (en->is_conv) oihw_to_krsc(rg + en->offset, g, (int)en->shape[0], (int)en->shape[1], (int)en->shape[2], (int)en->shape[3]);
        else memcpy(rg + en->offset, g, en->count * sizeof(float));
        free(g);
    }
    for (int pass = 0; pass < 2; pass++) {
        const float *g = pass == 0 ? rg : grads;
        memcpy(m->params, p0, m->n_params * sizeof(float));
        SgdState st;
        sgd_init(&st, m->n_params);
        sgd_step(&sc, &st, m, m->params, g, lr);
        compare_params(m, m->params, "step1.", pass == 0 ? "sgd step 1 (ref grads)" : "sgd step 1 (ctrain grads)",
                       tol_state, pass == 1);
        sgd_step(&sc, &st, m, m->params, g, lr);
        compare_params(m, m->params, "step2.", pass == 0 ? "sgd step 2 (ref grads)" : "sgd step 2 (ctrain grads)",
                       tol_state, pass == 1);
        sgd_free(&st);
    }
    printf("  forward(eval)+forward(train)+backward: %.2f s, arena %.1f MB\n", t_step,
           cpu_exec_arena_bytes(e) / 1e6);
    printf("%s\n", failures ? "FAILED" : "PASSED");
    cpu_exec_free(e);
    resnet_free(m);
    free(x);
    free(labels);
    free(grads);
    free(dlogits);
    free(p0);
    free(rg);
    st_close(&ref);
    return failures ? 1 : 0;
}
