// nn/checkpoint and nn/schedule: round trip bit for bit, every corruption is detected and named,
// no temporary file is left behind; learning-rate schedules against their closed forms.
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "nn/checkpoint.h"
#include "nn/schedule.h"
#include "tests/test.h"
#include "util/common.h"
#include "util/crc32c.h"

static void test_checkpoint(const char *dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/x.ckpt", dir);
    enum { NP = 1000, NB = 37, NC = 5 };
    float p[NP], mo[NP], b[NB];
    int64_t cnt[NC];
    for (int i = 0; i < NP; i++) { p[i] = sinf(i) * 3.0f; mo[i] = -1.0f / (i + 1); }
    for (int i = 0; i < NB; i++) b[i] = (float)i * 0.25f;
    for (int i = 0; i < NC; i++) cnt[i] = 1000000000000LL + i;
    p[7] = -0.0f;
    CheckpointMeta m;
    memset(&m, 0, sizeof m);
    snprintf(m.arch, sizeof m.arch, "resnet20");
    m.num_classes = 10;
    m.in_channels = 3;
    m.class_hash = 0x0123456789abcdefull;
    m.epoch = 4;
    m.global_step = 12345;
    m.step_in_epoch = 17;
    m.seed = 99;
    m.best_top1 = 91.25;
    m.best_epoch = 3;
    m.nonfinite_total = 2;
    m.n_params = NP;
    m.n_buffers = NB;
    m.n_counts = NC;
    m.opt_steps = 12343;
    m.epoch_loss_sum = 1.5e3;
    m.epoch_correct = 555;
    m.epoch_seen = 1088;
    checkpoint_save(path, &m, p, mo, b, cnt);

    Checkpoint ck;
    const char *err = checkpoint_load(path, &ck);
    CHECK(err == NULL, "load: %s", err ? err : "");
    if (!err) {
        CHECK(!memcmp(&ck.meta.arch, "resnet20", 9), "arch %s", ck.meta.arch);
        CHECK(ck.meta.num_classes == 10 && ck.meta.in_channels == 3 && ck.meta.class_hash == m.class_hash, "ids");
        CHECK(ck.meta.epoch == 4 && ck.meta.global_step == 12345 && ck.meta.step_in_epoch == 17 && ck.meta.seed == 99, "position");
        CHECK(ck.meta.best_top1 == 91.25 && ck.meta.best_epoch == 3 && ck.meta.nonfinite_total == 2, "best");
        CHECK(ck.meta.opt_steps == 12343 && ck.meta.epoch_loss_sum == 1.5e3 && ck.meta.epoch_correct == 555 &&
                  ck.meta.epoch_seen == 1088, "accumulators");
        CHECK(!memcmp(ck.params, p, sizeof p), "params differ");
        CHECK(ck.momentum && !memcmp(ck.momentum, mo, sizeof mo), "momentum differs");
        CHECK(!memcmp(ck.buffers, b, sizeof b), "buffers differ");
        CHECK(!memcmp(ck.counts, cnt, sizeof cnt), "counts differ");
        checkpoint_free(&ck);
    }
    // No temporary left in the directory.
    char cmd[600];
    snprintf(cmd, sizeof cmd, "ls %s | grep -c tmp", dir);
    FILE *pp = popen(cmd, "r");
    int ntmp = -1;
    if (fscanf(pp, "%d", &ntmp) != 1) ntmp = -1;
    pclose(pp);
    CHECK(ntmp == 0, "temporary files left: %d", ntmp);

    // Without momentum.
    char path2[512];
    snprintf(path2, sizeof path2, "%s/nomom.ckpt", dir);
    checkpoint_save(path2, &m, p, NULL, b, cnt);
    err = checkpoint_load(path2, &ck);
    CHECK(err == NULL && ck.momentum == NULL, "no-momentum load: %s", err ? err : "momentum present");
    if (!err) checkpoint_free(&ck);

    // The settings section (trainer/settings.h): round trip, and read alone from the file's head.
    char path3[512];
    snprintf(path3, sizeof path3, "%s/settings.ckpt", dir);
    m.settings = "{\"lr\":0.1,\"arch\":\"resnet20\"}";
    checkpoint_save(path3, &m, p, mo, b, cnt);
    m.settings = NULL;
    err = checkpoint_load(path3, &ck);
    CHECK(err == NULL && ck.settings && !strcmp(ck.settings, "{\"lr\":0.1,\"arch\":\"resnet20\"}") &&
              !memcmp(ck.params, p, sizeof p) && !memcmp(ck.counts, cnt, sizeof cnt), "settings round trip: %s", err ? err : "");
    if (!err) checkpoint_free(&ck);
    char *st = NULL;
    err = checkpoint_read_settings(path3, &st);
    CHECK(err == NULL && st && !strcmp(st, "{\"lr\":0.1,\"arch\":\"resnet20\"}"), "checkpoint_read_settings: %s", err ? err : "");
    free(st);
    err = checkpoint_read_settings(path, &st);
    CHECK(err == NULL && st == NULL, "a checkpoint without settings: %s", err ? err : "settings found");
    err = checkpoint_load(path, &ck);
    CHECK(err == NULL && ck.settings == NULL, "no settings section: %s", err ? err : "");
    if (!err) checkpoint_free(&ck);
    unlink(path3);

    // Corruptions: every byte flip somewhere in each region, truncation, trailing bytes, bad magic.
    size_t n;
    uint8_t *data = (uint8_t *)ct_read_file(path, &n);
    char bad[512];
    snprintf(bad, sizeof bad, "%s/bad.ckpt", dir);
    size_t offs[] = {0, 9, 13, 20, 100, 150, 300, n / 2, n - 5, n - 1};
    for (size_t i = 0; i < CT_ARRAY_LEN(offs); i++) {
        data[offs[i]] ^= 0x40;
        test_write_file(bad, data, n);
        data[offs[i]] ^= 0x40;
        err = checkpoint_load(bad, &ck);
        CHECK(err != NULL, "flip at byte %zu not detected", offs[i]);
        if (!err) checkpoint_free(&ck);
    }
    size_t cuts[] = {0, 4, 100, 200, n - 1};
    for (size_t i = 0; i < CT_ARRAY_LEN(cuts); i++) {
        test_write_file(bad, data, cuts[i]);
        err = checkpoint_load(bad, &ck);
        CHECK(err != NULL, "truncation to %zu bytes not detected", cuts[i]);
        if (!err) checkpoint_free(&ck);
    }
    uint8_t *longer = ct_zalloc(n + 8);
    memcpy(longer, data, n);
    test_write_file(bad, longer, n + 8);
    err = checkpoint_load(bad, &ck);
    CHECK(err != NULL && strstr(err, "trailing"), "trailing bytes: %s", err ? err : "accepted");
    // Huge declared sizes must not overflow into a "valid" size.
    uint64_t huge = 0x4000000000000001ull;
    size_t size_fields[] = {16 + 96, 16 + 104, 16 + 112};  // n_params, n_buffers, n_counts in the meta block
    for (size_t i = 0; i < CT_ARRAY_LEN(size_fields); i++) {
        memcpy(longer, data, n);
        memcpy(longer + size_fields[i], &huge, 8);
        test_write_file(bad, longer, n);
        err = checkpoint_load(bad, &ck);
        CHECK(err != NULL, "huge size field at %zu accepted", size_fields[i]);
        if (!err) checkpoint_free(&ck);
    }
    free(longer);
    free(data);
    err = checkpoint_load("/nonexistent/ckpt", &ck);
    CHECK(err != NULL, "missing file accepted");
    unlink(path);
    unlink(path2);
    unlink(bad);
}

// --ema's average (version 2): round trip, the fields, and a file without one staying version 1
// byte for byte (older builds read it); flips in the average and a version 2 file cut back to
// version 1's length are detected.
static void test_checkpoint_ema(const char *dir) {
    enum { NP = 300, NB = 21, NC = 3 };
    float p[NP], b[NB], ep[NP], eb[NB];
    int64_t cnt[NC] = {1, 2, 3};
    for (int i = 0; i < NP; i++) { p[i] = cosf(i); ep[i] = p[i] * 0.5f + 1e-3f * i; }
    for (int i = 0; i < NB; i++) { b[i] = 0.125f * i; eb[i] = -b[i]; }
    CheckpointMeta m;
    memset(&m, 0, sizeof m);
    snprintf(m.arch, sizeof m.arch, "resnet20");
    m.n_params = NP;
    m.n_buffers = NB;
    m.n_counts = NC;
    m.best_top1 = 50;
    m.ema_decay = 0.999;
    m.ema_every = 4;
    m.best_is_ema = 1;
    char p1[512], p2[512], p3[512];
    snprintf(p1, sizeof p1, "%s/plain.ckpt", dir);
    snprintf(p2, sizeof p2, "%s/ema.ckpt", dir);
    snprintf(p3, sizeof p3, "%s/plain2.ckpt", dir);
    // Without the average, checkpoint_save_ema is checkpoint_save, and the EMA fields stay zero.
    checkpoint_save_ema(p1, &m, p, NULL, b, cnt, NULL, NULL);
    CheckpointMeta z = m;
    z.ema_decay = 0, z.ema_every = 0, z.best_is_ema = 0;
    checkpoint_save(p3, &z, p, NULL, b, cnt);
    size_t n1, n3, n2;
    uint8_t *d1 = (uint8_t *)ct_read_file(p1, &n1), *d3 = (uint8_t *)ct_read_file(p3, &n3);
    uint32_t version;
    memcpy(&version, d1 + 8, 4);
    CHECK(version == 1, "a checkpoint without EMA is version %u, want 1", version);
    CHECK(n1 == n3 && !memcmp(d1, d3, n1), "a checkpoint without EMA is not the version 1 bytes");
    Checkpoint ck;
    const char *err = checkpoint_load(p1, &ck);
    CHECK(!err && !ck.meta.has_ema && !ck.ema_params && !ck.ema_buffers && ck.meta.ema_decay == 0,
          "version 1 load: %s", err ? err : "EMA fields set");
    if (!err) checkpoint_free(&ck);

    checkpoint_save_ema(p2, &m, p, NULL, b, cnt, ep, eb);
    uint8_t *d2 = (uint8_t *)ct_read_file(p2, &n2);
    memcpy(&version, d2 + 8, 4);
    CHECK(version == 2 && n2 == n1 + 4 * (NP + NB), "EMA checkpoint: version %u, %zu bytes", version, n2);
    err = checkpoint_load(p2, &ck);
    CHECK(err == NULL, "EMA load: %s", err ? err : "");
    if (!err) {
        CHECK(ck.meta.has_ema == 1 && ck.meta.ema_decay == 0.999 && ck.meta.ema_every == 4 && ck.meta.best_is_ema == 1,
              "EMA fields: %u %g %u %u", ck.meta.has_ema, ck.meta.ema_decay, ck.meta.ema_every, ck.meta.best_is_ema);
        CHECK(!memcmp(ck.params, p, sizeof p) && !memcmp(ck.buffers, b, sizeof b) && !memcmp(ck.counts, cnt, sizeof cnt),
              "EMA checkpoint: model state differs");
        CHECK(ck.ema_params && !memcmp(ck.ema_params, ep, sizeof ep), "EMA params differ");
        CHECK(ck.ema_buffers && !memcmp(ck.ema_buffers, eb, sizeof eb), "EMA buffers differ");
        checkpoint_free(&ck);
    }
    // --blurpool is recorded at its fixed meta offset in both versions (byte 16 + 180 of the file),
    // and a plain file reads 0 there.
    for (int ema = 0; ema < 2; ema++) {
        CheckpointMeta mb = m;
        mb.blurpool = 1;
        char pb[512];
        snprintf(pb, sizeof pb, "%s/blur%d.ckpt", dir, ema);
        checkpoint_save_ema(pb, &mb, p, NULL, b, cnt, ema ? ep : NULL, ema ? eb : NULL);
        size_t nb;
        uint8_t *db = (uint8_t *)ct_read_file(pb, &nb);
        uint32_t flag;
        memcpy(&flag, db + 16 + 180, 4);
        err = checkpoint_load(pb, &ck);
        CHECK(!err && ck.meta.blurpool == 1 && flag == 1 && (int)ck.meta.has_ema == ema,
              "blurpool checkpoint (ema %d): %s, blurpool %u, byte %u", ema, err ? err : "loaded", err ? 0 : ck.meta.blurpool,
              flag);
        if (!err) checkpoint_free(&ck);
        free(db);
    }
    err = checkpoint_load(p2, &ck);
    CHECK(!err && ck.meta.blurpool == 0, "a plain checkpoint reads blurpool %u", err ? 9 : ck.meta.blurpool);
    if (!err) checkpoint_free(&ck);

    char bad[512];
    snprintf(bad, sizeof bad, "%s/bad_ema.ckpt", dir);
    size_t offs[] = {n1 - 2, n1 + 3, n2 - 4 * NB, n2 - 5};
    for (size_t i = 0; i < CT_ARRAY_LEN(offs); i++) {
        d2[offs[i]] ^= 0x10;
        test_write_file(bad, d2, n2);
        d2[offs[i]] ^= 0x10;
        err = checkpoint_load(bad, &ck);
        CHECK(err != NULL, "EMA checkpoint: flip at byte %zu not detected", offs[i]);
        if (!err) checkpoint_free(&ck);
    }
    test_write_file(bad, d2, n1);  // the average cut off: the header still says version 2
    err = checkpoint_load(bad, &ck);
    CHECK(err != NULL, "EMA checkpoint cut to version 1's length accepted");
    if (!err) checkpoint_free(&ck);
    uint32_t v1 = 1;  // version 1 with the EMA flag set
    memcpy(d2 + 8, &v1, 4);
    test_write_file(bad, d2, n2);
    err = checkpoint_load(bad, &ck);
    CHECK(err != NULL && strstr(err, "EMA flag"), "version 1 with the EMA flag: %s", err ? err : "accepted");
    if (!err) checkpoint_free(&ck);
    free(d1), free(d2), free(d3);
    unlink(p1), unlink(p2), unlink(p3), unlink(bad);
}

static void test_schedule(void) {
    LrSchedule s = {LR_COSINE, 0.4, 10, 100, 0, 30, 0.1, 2, 0};
    CHECK(lr_at(&s, 0) == 0.4, "cosine start %g", lr_at(&s, 0));
    CHECK(fabs(lr_at(&s, 500) - 0.2) < 1e-12, "cosine middle %g", lr_at(&s, 500));
    CHECK(fabs(lr_at(&s, 999) - 0.4 * 0.5 * (1 + cos(M_PI * 999 / 1000))) < 1e-15, "cosine end %g", lr_at(&s, 999));
    s.warmup_epochs = 2;  // 200 warmup steps, then cosine over 800
    CHECK(fabs(lr_at(&s, 0) - 0.4 / 200) < 1e-15, "warmup first %g", lr_at(&s, 0));
    CHECK(fabs(lr_at(&s, 99) - 0.4 * 100 / 200) < 1e-15, "warmup mid %g", lr_at(&s, 99));
    CHECK(lr_at(&s, 200) == 0.4, "after warmup %g", lr_at(&s, 200));
    CHECK(fabs(lr_at(&s, 600) - 0.2) < 1e-12, "cosine after warmup %g", lr_at(&s, 600));
    s.warmup_epochs = 0.5;  // fractional: 50 steps
    CHECK(fabs(lr_at(&s, 49) - 0.4) < 1e-15 && lr_at(&s, 48) < 0.4, "fractional warmup %g", lr_at(&s, 49));
    LrSchedule st = {LR_STEP, 0.1, 90, 10, 0, 30, 0.1, 2, 0};
    CHECK(lr_at(&st, 0) == 0.1 && lr_at(&st, 299) == 0.1, "step first span");
    CHECK(fabs(lr_at(&st, 300) - 0.01) < 1e-15 && fabs(lr_at(&st, 599) - 0.01) < 1e-15, "step second span %g", lr_at(&st, 300));
    CHECK(fabs(lr_at(&st, 600) - 0.001) < 1e-15, "step third span %g", lr_at(&st, 600));
    // Monotone non-increasing after warmup, always positive until the very end.
    s.warmup_epochs = 1;
    int mono = 1;
    for (int64_t t = 101; t < 1000; t++) mono &= lr_at(&s, t) <= lr_at(&s, t - 1) && lr_at(&s, t) > 0;
    CHECK(mono, "cosine not monotone/positive");
    LrKind k;
    CHECK(lr_kind_parse("cosine", &k) && k == LR_COSINE && lr_kind_parse("step", &k) && k == LR_STEP, "parse");
    CHECK(lr_kind_parse("linear", &k) && k == LR_LINEAR && lr_kind_parse("poly", &k) && k == LR_POLY, "parse linear, poly");
    CHECK(!lr_kind_parse("exp", &k) && !strcmp(lr_kind_name(LR_POLY), "poly"), "unknown schedule accepted");

    // linear (FFCV's): warmup to the peak, then straight down to 0 one step past the last.
    LrSchedule li = {LR_LINEAR, 0.4, 10, 100, 2, 30, 0.1, 2, 0};
    CHECK(fabs(lr_at(&li, 199) - 0.4) < 1e-15 && lr_at(&li, 200) == 0.4, "linear at warmup end %g %g", lr_at(&li, 199),
          lr_at(&li, 200));
    CHECK(fabs(lr_at(&li, 600) - 0.2) < 1e-15, "linear middle %g", lr_at(&li, 600));
    CHECK(fabs(lr_at(&li, 999) - 0.4 / 800) < 1e-17 && lr_at(&li, 1000) == 0 && lr_at(&li, 5000) == 0, "linear last step %g",
          lr_at(&li, 999));
    // FFCV interpolates [0, peak, epochs] -> [1e-4 lr, lr, 0] at x = epoch + iteration / iterations.
    int ffcv_same = 1;
    for (int64_t t = 200; t < 1000; t++) {
        double x = (double)t / 100, ffcv = 0.4 + (x - 2) * (0 - 0.4) / (10 - 2);
        ffcv_same &= fabs(lr_at(&li, t) - ffcv) < 1e-15;
    }
    CHECK(ffcv_same, "linear decay differs from FFCV's interpolation");
    li.warmup_epochs = 0;
    CHECK(lr_at(&li, 0) == 0.4 && fabs(lr_at(&li, 999) - 0.4 / 1000) < 1e-17, "linear without warmup");

    // poly (MLPerf's): warmup, then (lr - end) (1 - (t + 1 - W) / (T - W + 1))^p + end.
    LrSchedule po = {LR_POLY, 10.5, 37, 100, 2, 30, 0.1, 2, 1e-4};
    CHECK(fabs(lr_at(&po, 0) - 10.5 / 200) < 1e-14 && fabs(lr_at(&po, 199) - 10.5) < 1e-14, "poly warmup %g", lr_at(&po, 199));
    double d = 3700 - 200 + 1;
    CHECK(fabs(lr_at(&po, 200) - ((10.5 - 1e-4) * pow(1 - 1 / d, 2) + 1e-4)) < 1e-14, "poly first decay step %.17g",
          lr_at(&po, 200));
    CHECK(fabs(lr_at(&po, 3699) - ((10.5 - 1e-4) * pow(1 / d, 2) + 1e-4)) < 1e-14 && lr_at(&po, 3699) > 1e-4,
          "poly last step %.17g", lr_at(&po, 3699));
    CHECK(lr_at(&po, 3700) == 1e-4 && lr_at(&po, 9999) == 1e-4, "poly ends at --lr-end");
    po.power = 1;
    CHECK(fabs(lr_at(&po, 1950) - ((10.5 - 1e-4) * (1 - 1751 / d) + 1e-4)) < 1e-13, "poly power 1 %g", lr_at(&po, 1950));
    // The same curve in MLPerf's own step count s = t + 1 (lr 0 at its step 0, warmup s * lr / W
    // up to s = W, then the decay over max(s - W, 1) of decay_steps = T - W + 1).
    po.power = 2;
    int mlperf_same = 1;
    for (int64_t s = 1; s <= 3700; s++) {
        double ref = s <= 200 ? 10.5 * (double)s / 200
                              : (10.5 - 1e-4) * pow(1 - fmin((double)(s - 200), d) / d, 2) + 1e-4;
        mlperf_same &= fabs(lr_at(&po, s - 1) - ref) < 1e-13;
    }
    CHECK(mlperf_same, "poly differs from MLPerf's PolynomialDecayWithWarmup");

    // Resuming mid-epoch rebuilds the schedule from the flags and the checkpoint's (epoch, step):
    // the same global step gives the same bits whatever the schedule.
    for (int kind = 0; kind < 4; kind++) {
        LrSchedule a = {(LrKind)kind, 0.8, 16, 1251, 2, 5, 0.1, 2, 1e-4}, b = a;
        int64_t t = 7 * a.steps_per_epoch + 613;  // epoch 7, step 613 of the resumed run
        CHECK(lr_at(&a, t) == lr_at(&b, 7 * b.steps_per_epoch + 613) && lr_at(&a, t) > 0, "%s resume", lr_kind_name(a.kind));
    }
}

// Version 3: the optimizer's state as named tensors. Round trip (names, shapes, data, with and
// without an EMA, none at all); a version 1 file's momentum loads as the named tensor of the
// optimizer its header names; a corrupt section (dtype, rank, a name twice, no NUL, a cut or an
// extra byte) is refused, the checksum recomputed so the section's own checks are what catch it.
static void test_checkpoint_named(const char *dir) {
    enum { NP = 300, NB = 9, NC = 2 };
    float p[NP], m1[NP], m2[NP], b[NB], ep[NP], eb[NB];
    int64_t cnt[NC] = {5, 6};
    for (int i = 0; i < NP; i++) p[i] = cosf(i), m1[i] = 1e-3f * i, m2[i] = 1e-7f * i * i, ep[i] = p[i] * 0.5f;
    for (int i = 0; i < NB; i++) b[i] = (float)i, eb[i] = -(float)i;
    CheckpointMeta m;
    memset(&m, 0, sizeof m);
    snprintf(m.arch, sizeof m.arch, "resnet20");
    m.n_params = NP, m.n_buffers = NB, m.n_counts = NC, m.opt_steps = 9, m.optimizer = CKPT_OPT_ADAMW;
    CkptOptim o;
    memset(&o, 0, sizeof o);
    snprintf(o.optimizer, sizeof o.optimizer, "adamw");
    o.n = 2;
    snprintf(o.t[0].name, 32, "exp_avg");
    snprintf(o.t[1].name, 32, "exp_avg_sq");
    o.t[0].ndim = 1, o.t[0].shape[0] = NP, o.t[0].data = m1;
    o.t[1].ndim = 2, o.t[1].shape[0] = 3, o.t[1].shape[1] = NP / 3, o.t[1].data = m2;
    char path[600], bad[600];
    snprintf(path, sizeof path, "%s/n.ckpt", dir);
    snprintf(bad, sizeof bad, "%s/nbad.ckpt", dir);
    for (int ema = 0; ema < 2; ema++) {
        m.has_ema = 0;  // checkpoint_write sets it from its arguments
        checkpoint_write(path, &m, p, b, cnt, ema ? ep : NULL, ema ? eb : NULL, &o);
        Checkpoint ck;
        const char *err = checkpoint_load(path, &ck);
        CHECK(!err, "version 3 load (ema %d): %s", ema, err ? err : "");
        if (err) continue;
        const CkptTensor *a = checkpoint_opt_tensor(&ck, "exp_avg"), *v = checkpoint_opt_tensor(&ck, "exp_avg_sq");
        CHECK(!strcmp(ck.opt.optimizer, "adamw") && ck.opt.n == 2 && a && v && !ck.momentum, "named tensors: %s %d",
              ck.opt.optimizer, ck.opt.n);
        if (a && v) {
            CHECK(a->ndim == 1 && a->shape[0] == NP && !memcmp(a->data, m1, sizeof m1), "exp_avg round trip");
            CHECK(v->ndim == 2 && v->shape[0] == 3 && v->shape[1] == NP / 3 && !memcmp(v->data, m2, sizeof m2),
                  "exp_avg_sq round trip (shape and data)");
        }
        CHECK(!memcmp(ck.params, p, sizeof p) && !memcmp(ck.buffers, b, sizeof b) && ck.counts[1] == 6 &&
              ck.meta.opt_steps == 9 && ck.meta.optimizer == CKPT_OPT_ADAMW, "version 3: the rest round trips");
        CHECK((int)ck.meta.has_ema == ema && (!ema || (!memcmp(ck.ema_params, ep, sizeof ep) && !memcmp(ck.ema_buffers, eb, sizeof eb))),
              "version 3 EMA (ema %d)", ema);
        checkpoint_free(&ck);
    }
    // SGD's buffer in version 3 is also ck.momentum; no tensors at all is a valid section.
    CkptOptim s = o;
    snprintf(s.optimizer, sizeof s.optimizer, "sgd");
    s.n = 1;
    snprintf(s.t[0].name, 32, "momentum_buffer");
    checkpoint_write(bad, &m, p, b, cnt, NULL, NULL, &s);
    Checkpoint ck;
    const char *err = checkpoint_load(bad, &ck);
    CHECK(!err && ck.momentum && !memcmp(ck.momentum, m1, sizeof m1), "version 3 sgd: momentum alias %s", err ? err : "");
    if (!err) checkpoint_free(&ck);
    s.n = 0;
    checkpoint_write(bad, &m, p, b, cnt, NULL, NULL, &s);
    err = checkpoint_load(bad, &ck);
    CHECK(!err && ck.opt.n == 0 && !ck.momentum, "version 3 without state: %s", err ? err : "");
    if (!err) checkpoint_free(&ck);
    // Version 1 (the old writer): LARS's momentum array becomes the tensor 'momentum'.
    m.optimizer = CKPT_OPT_LARS;
    checkpoint_save(bad, &m, p, m1, b, cnt);
    err = checkpoint_load(bad, &ck);
    CHECK(!err && !strcmp(ck.opt.optimizer, "lars") && ck.opt.n == 1 && !strcmp(ck.opt.t[0].name, "momentum") &&
          ck.opt.t[0].shape[0] == NP && ck.momentum == ck.opt.t[0].data && !memcmp(ck.momentum, m1, sizeof m1),
          "version 1 lars: %s", err ? err : "wrong named tensor");
    if (!err) checkpoint_free(&ck);
    m.optimizer = CKPT_OPT_SGD;
    checkpoint_save(bad, &m, p, NULL, b, cnt);
    err = checkpoint_load(bad, &ck);
    CHECK(!err && !strcmp(ck.opt.optimizer, "sgd") && ck.opt.n == 0, "version 1 sgd without momentum: %s", err ? err : "");
    if (!err) checkpoint_free(&ck);

    // Corrupt sections. The section starts after params, buffers, counts (no EMA).
    m.optimizer = CKPT_OPT_ADAMW;
    checkpoint_write(path, &m, p, b, cnt, NULL, NULL, &o);
    size_t n = 0;
    uint8_t *d = (uint8_t *)ct_read_file(path, &n);
    const size_t sec = 8 + 4 + 4 + 192 + 4 * (NP + NB) + 8 * NC, desc1 = sec + 20 + 72;
    CHECK(!memcmp(d + sec, "adamw", 6) && !memcmp(d + sec + 20, "exp_avg", 8), "section not where the layout says");
    struct { size_t at; uint8_t v; const char *want; } flips[] = {
        {sec + 16, 5, "tensor count"},            // 5 tensors
        {sec + 20 + 32, 'B', "dtype"},           // "B32"
        {sec + 20 + 36, 5, "tensor rank"},       // ndim 5
        {desc1 + 7, 0, "a tensor name twice"},   // "exp_avg_sq" -> "exp_avg"
        {sec + 15, 'x', "optimizer name"},       // no NUL in optimizer[16]
        {desc1 + 47, 0x7f, "exceed"},            // a huge shape
    };
    for (size_t i = 0; i < CT_ARRAY_LEN(flips); i++) {
        uint8_t save = d[flips[i].at];
        if (flips[i].at == sec + 15) memset(d + sec, 'x', 16);
        d[flips[i].at] = flips[i].v;
        uint32_t crc = crc32c(0, d, n - 4);
        memcpy(d + n - 4, &crc, 4);
        test_write_file(bad, d, n);
        err = checkpoint_load(bad, &ck);
        CHECK(err && strstr(err, flips[i].want), "corrupt section (%s): %s", flips[i].want, err ? err : "accepted");
        if (!err) checkpoint_free(&ck);
        if (flips[i].at == sec + 15) memcpy(d + sec, "adamw\0\0\0\0\0\0\0\0\0\0", 16);
        d[flips[i].at] = save;
    }
    // One float short, one byte extra (checksums recomputed).
    for (int extra = -4; extra <= 1; extra += 5) {
        size_t m2n = n - 4 + (size_t)extra;
        uint8_t *e = (uint8_t *)ct_zalloc(m2n + 4);
        memcpy(e, d, extra < 0 ? m2n : n - 4);
        uint32_t crc = crc32c(0, e, m2n);
        memcpy(e + m2n, &crc, 4);
        test_write_file(bad, e, m2n + 4);
        err = checkpoint_load(bad, &ck);
        CHECK(err != NULL, "optimizer section %s accepted", extra < 0 ? "cut by a float" : "with a trailing byte");
        if (!err) checkpoint_free(&ck);
        free(e);
    }
    free(d);
    unlink(path);
    unlink(bad);
}

int main(void) {
    char dir[] = "/tmp/ctrain_ckpt_XXXXXX";
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    test_checkpoint(dir);
    test_checkpoint_ema(dir);
    test_checkpoint_named(dir);
    test_schedule();
    rmdir(dir);
    return test_summary("test_checkpoint");
}
