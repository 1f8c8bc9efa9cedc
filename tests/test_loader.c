// test: tsan (the worker pool and the ring are pthread code)
// The worker pool + prefetch ring over real shard files (written with the shard writer):
//  - every sample equals the independent path (full shard_decode + augment_plan/apply), so the
//    partial LZ4 decode and the ring bookkeeping change nothing; labels and indices match the sampler;
//  - identical bytes for 1, 2 and 3 workers and different prefetch depths, over two epochs, and
//    when resuming straight at epoch 1; the same images packed raw give the same batches as LZ4;
//  - eval: R simulated ranks cover every record exactly once (N not divisible by R x B);
//    train: each rank gets its exact share, disjoint across ranks;
//  - a corrupt payload ends the epoch with a message naming the file and the record, not a hang;
//  - Mixup/CutMix: a mixed batch is mix_apply of the plain batch, for any worker count and start;
//  - the per-sample policies (TrivialAugmentWide, timm's RandAugment, RandomErasing): the same
//    bytes for 1 and 3 workers and when starting at epoch 1; training batches change, evaluation's
//    do not (the same bytes as a loader without them);
//  - clean shutdown mid-epoch, abandoning epochs, batches released out of order, the alloc hook.
#include <string.h>
#include <unistd.h>

#include "loader/augment.h"
#include "loader/loader.h"
#include "loader/mix.h"
#include "loader/sampler.h"
#include "tests/test.h"
#include "util/common.h"

enum { N = 53, NCLS = 5 };
static const char *const CLASSES[NCLS] = {"a", "b", "c", "d", "e"};

static void make_image(uint8_t *img, int w, int h, int C, uint64_t seed) {
    Rng r = rng_make(seed, 8, 9);
    for (size_t i = 0; i < (size_t)w * h * C; i++) {
        size_t p = i / C;
        img[i] = (uint8_t)((p % w) * 3 + (p / w) * 5 + (i % C) * 60 + rng_below(&r, 40));
    }
}

static void write_shard_n(const char *path, uint32_t codec, int C, int n) {
    ShardWriter *w = shard_writer_open(path, C, codec, NCLS, CLASSES);
    for (int i = 0; i < n; i++) {
        int h = 20 + (i * 7) % 41, wd = 18 + (i * 13) % 47;
        uint8_t *img = ct_alloc((size_t)h * wd * C);
        make_image(img, wd, h, C, i);
        size_t sz = 0;
        uint8_t *p = shard_encode(codec, codec == SHARD_CODEC_JPEG ? 90 : 0, img, h, wd, C, &sz);
        shard_writer_add(w, p, (uint32_t)sz, h, wd, i % NCLS);
        free(p);
        free(img);
    }
    shard_writer_finish(w);
}
static void write_shard(const char *path, uint32_t codec, int C) { write_shard_n(path, codec, C, N); }

static LoaderConfig base_cfg(int train, int workers) {
    LoaderConfig c = {0};
    c.batch_size = 6;
    c.crop = 16;
    c.train = train;
    c.workers = workers;
    c.seed = 1234;
    c.rank = 0;
    c.world = 1;
    return c;
}

// All batches of one epoch concatenated: images, then (label, index) pairs.
typedef struct {
    uint8_t *img;
    size_t img_n;
    uint64_t *idx;
    int32_t *lab;
    int n;
    int nbatch;
} Epoch;

static Epoch run_epoch_n(Loader *l, int64_t epoch, size_t bytes_per_img, int cap) {
    Epoch e = {0};
    e.img = ct_alloc((size_t)(cap + 1) * bytes_per_img);
    e.idx = ct_alloc(sizeof(uint64_t) * (cap + 1));
    e.lab = ct_alloc(sizeof(int32_t) * (cap + 1));
    loader_start_epoch(l, epoch);
    LoaderBatch b;
    while (loader_next(l, &b)) {
        CHECK(b.batch == e.nbatch, "batch %lld out of order (want %d)", (long long)b.batch, e.nbatch);
        CHECK(e.n + b.count <= cap, "more samples than records");
        if (e.n + b.count > cap) break;
        memcpy(e.img + (size_t)e.n * bytes_per_img, b.images, (size_t)b.count * bytes_per_img);
        memcpy(e.idx + e.n, b.indices, sizeof(uint64_t) * b.count);
        memcpy(e.lab + e.n, b.labels, sizeof(int32_t) * b.count);
        e.n += b.count;
        e.nbatch++;
        loader_release(l, &b);
    }
    e.img_n = (size_t)e.n * bytes_per_img;
    return e;
}
static Epoch run_epoch(Loader *l, int64_t epoch, size_t bytes_per_img) { return run_epoch_n(l, epoch, bytes_per_img, N); }
static void epoch_free(Epoch *e) {
    free(e->img);
    free(e->idx);
    free(e->lab);
}
static int epoch_same(const Epoch *a, const Epoch *b) {
    return a->n == b->n && a->nbatch == b->nbatch && memcmp(a->img, b->img, a->img_n) == 0 &&
           memcmp(a->idx, b->idx, sizeof(uint64_t) * a->n) == 0 && memcmp(a->lab, b->lab, sizeof(int32_t) * a->n) == 0;
}

// The independent path: full decode, then the augmentation functions directly.
static int check_against_direct(const Shard *s, const LoaderConfig *cfg, const Epoch *e, int64_t epoch) {
    AugmentConfig a = {.crop = cfg->crop, .train = cfg->train, .resize = cfg->val_resize, .flip = !cfg->no_flip,
                       .seed = cfg->seed};
    augment_config_defaults(&a);
    size_t bytes = (size_t)cfg->crop * cfg->crop * s->channels;
    uint8_t *dec = ct_alloc(s->max_raw_size), *out = ct_alloc(bytes);
    Sampler sm;
    sampler_init(&sm, s->n_records, cfg->batch_size, cfg->rank, cfg->world, cfg->train, cfg->seed);
    if (cfg->train && cfg->ra_repeats > 1) sampler_set_repeats(&sm, cfg->ra_repeats);
    sampler_set_epoch(&sm, epoch);
    uint64_t *idx = ct_alloc(sizeof(uint64_t) * cfg->batch_size), *key = ct_alloc(sizeof(uint64_t) * cfg->batch_size);
    int ok = 1, k = 0;
    for (int64_t b = 0; b < sampler_num_batches(&sm); b++) {
        int c = sampler_batch_keys(&sm, b, idx, key);
        for (int i = 0; i < c; i++, k++) {
            if (k >= e->n) return 0;
            const ShardRecord *r = &s->records[idx[i]];
            memset(dec, 0xA5, s->max_raw_size);
            shard_decode(s, idx[i], dec, s->max_raw_size);
            AugmentPlan p;
            augment_plan(&a, r->height, r->width, epoch, key[i], &p);
            augment_apply(&a, &p, dec, r->width, s->channels, out, NULL);
            ok &= e->idx[k] == idx[i] && e->lab[k] == (int32_t)r->label &&
                  memcmp(out, e->img + (size_t)k * bytes, bytes) == 0;
        }
    }
    ok &= k == e->n;
    sampler_free(&sm);
    free(idx);
    free(key);
    free(dec);
    free(out);
    return ok;
}

static int alloc_calls, free_calls;
static void *hook_alloc(size_t n, void *ctx) {
    (*(int *)ctx)++;
    alloc_calls++;
    return ct_alloc(n);
}
static void hook_free(void *p, void *ctx) {
    free_calls++;
    free(p);
}

int main(void) {
    char dir[] = "/tmp/ct_test_loader_XXXXXX";
    if (!mkdtemp(dir)) ct_die_errno("mkdtemp");
    char lz4[512], raw[512], gray[512], bad[512], jpg[512];
    snprintf(lz4, sizeof lz4, "%s/lz4.shard", dir);
    snprintf(raw, sizeof raw, "%s/raw.shard", dir);
    snprintf(gray, sizeof gray, "%s/gray.shard", dir);
    snprintf(bad, sizeof bad, "%s/bad.shard", dir);
    snprintf(jpg, sizeof jpg, "%s/jpeg.shard", dir);
    write_shard(lz4, SHARD_CODEC_LZ4, 3);
    write_shard(raw, SHARD_CODEC_RAW, 3);
    write_shard(gray, SHARD_CODEC_LZ4, 1);
    write_shard(jpg, SHARD_CODEC_JPEG, 3);
    Shard s, sr, sg;
    shard_open(&s, lz4);
    shard_open(&sr, raw);
    shard_open(&sg, gray);

    // Repeated augmentation: the copies of a record sit next to each other in a batch and the worker
    // decodes the record once for them (whole, or reuses a prefix long enough); every copy still
    // equals the direct path (full decode of that record, the copy's own key), with 1 and 2 workers.
    // Groups of 3 straddle the items of 8 samples, so a copy can find a shorter prefix of its record.
    {
        char rap[512];
        snprintf(rap, sizeof rap, "%s/ra.shard", dir);
        write_shard_n(rap, SHARD_CODEC_LZ4, 3, 300);
        Shard sa;
        shard_open(&sa, rap);
        for (int wk = 1; wk <= 2; wk++) {
            LoaderConfig c = base_cfg(1, wk);
            c.ra_repeats = 3;
            c.batch_size = 16;
            Loader *l = loader_create(&sa, &c);
            for (int64_t ep = 0; ep < 2; ep++) {
                Epoch e = run_epoch_n(l, ep, (size_t)c.crop * c.crop * 3, 300);
                CHECK(e.n == 256 && check_against_direct(&sa, &c, &e, ep),
                      "ra-repeats 3, workers %d, epoch %lld: %d samples, or differs from the direct path", wk,
                      (long long)ep, e.n);
                epoch_free(&e);
            }
            loader_destroy(l);
        }
        shard_close(&sa);
        unlink(rap);
    }
    // Determinism across worker counts and prefetch depths, two epochs, train and eval.
    for (int train = 1; train >= 0; train--) {
        LoaderConfig c1 = base_cfg(train, 1);
        size_t bpi = (size_t)c1.crop * c1.crop * 3;
        Loader *l1 = loader_create(&s, &c1);
        Epoch ref0 = run_epoch(l1, 0, bpi), ref1 = run_epoch(l1, 1, bpi);
        CHECK(ref0.n == (train ? (N / 6) * 6 : N), "train=%d: %d samples", train, ref0.n);
        CHECK(check_against_direct(&s, &c1, &ref0, 0), "train=%d epoch 0 differs from the direct path", train);
        CHECK(check_against_direct(&s, &c1, &ref1, 1), "train=%d epoch 1 differs from the direct path", train);
        if (train) CHECK(!epoch_same(&ref0, &ref1), "epochs 0 and 1 identical: no reshuffle");
        CHECK(loader_wait_seconds(l1) >= 0, "wait seconds");
        CHECK(loader_memory_bytes(l1) >= 3 * loader_batch_bytes(l1), "memory %zu", loader_memory_bytes(l1));
        loader_destroy(l1);
        int wk[] = {2, 3, 3}, pf[] = {0, 2, 7};
        for (int t = 0; t < 3; t++) {
            LoaderConfig c = base_cfg(train, wk[t]);
            c.prefetch = pf[t];
            Loader *l = loader_create(&s, &c);
            Epoch e1 = run_epoch(l, 1, bpi);  // resume straight at epoch 1
            Epoch e0 = run_epoch(l, 0, bpi);
            CHECK(epoch_same(&e0, &ref0) && epoch_same(&e1, &ref1), "train=%d workers=%d prefetch=%d: bytes differ",
                  train, wk[t], pf[t]);
            epoch_free(&e0);
            epoch_free(&e1);
            loader_destroy(l);
        }
        // Progressive resizing: a loader made for crops up to 24 gives, at each crop it is set to,
        // the bytes of the direct path at that crop (and of a loader made for it), and back.
        {
            LoaderConfig c = base_cfg(train, 2);
            c.max_crop = 24;
            Loader *l = loader_create(&s, &c);
            Epoch e1 = run_epoch(l, 1, bpi);
            CHECK(epoch_same(&e1, &ref1), "train=%d: a loader with room for 24 px differs at 16", train);
            loader_set_crop(l, 24);
            LoaderConfig c24 = base_cfg(train, 1);
            c24.crop = 24;
            Epoch big = run_epoch(l, 0, (size_t)24 * 24 * 3);
            CHECK(big.n == ref0.n && check_against_direct(&s, &c24, &big, 0), "train=%d: epoch 0 at 24 px differs from the direct path", train);
            loader_start_epoch(l, 0);
            LoaderBatch b;
            CHECK(loader_next(l, &b) == 1 && b.hw == 24, "train=%d: batch says %d px, not 24", train, b.hw);
            loader_release(l, &b);
            CHECK(loader_batch_bytes(l) == (size_t)6 * 24 * 24 * 3, "batch bytes at 24 px: %zu", loader_batch_bytes(l));
            CHECK(loader_memory_bytes(l) >= (size_t)4 * 6 * 24 * 24 * 3, "ring not sized for 24 px: %zu", loader_memory_bytes(l));
            loader_set_crop(l, 16);
            Epoch back = run_epoch(l, 1, bpi);
            CHECK(epoch_same(&back, &ref1), "train=%d: back at 16 px, epoch 1 differs", train);
            epoch_free(&e1);
            epoch_free(&big);
            epoch_free(&back);
            loader_destroy(l);
        }
        // Resume mid-epoch: starting epoch 1 at batch 3 gives the tail of the full epoch.
        {
            LoaderConfig c = base_cfg(train, 2);
            Loader *l = loader_create(&s, &c);
            loader_start_epoch_at(l, 1, 3);
            LoaderBatch b;
            int k = 3 * 6, ok = 1, nb = 0;
            while (loader_next(l, &b)) {
                ok &= b.batch == 3 + nb && k + b.count <= ref1.n &&
                      memcmp(b.images, ref1.img + (size_t)k * bpi, (size_t)b.count * bpi) == 0 &&
                      memcmp(b.indices, ref1.idx + k, sizeof(uint64_t) * b.count) == 0;
                k += b.count;
                nb++;
                loader_release(l, &b);
            }
            CHECK(ok && k == ref1.n, "train=%d: resume at batch 3 differs from the full epoch's tail", train);
            loader_start_epoch_at(l, 0, loader_batches_per_epoch(l));  // at the very end: nothing left
            CHECK(loader_next(l, &b) == 0, "start at the end produced a batch");
            loader_destroy(l);
        }
        // Raw codec: same pixels, same batches.
        Loader *lr = loader_create(&sr, &c1);
        Epoch er = run_epoch(lr, 0, bpi);
        CHECK(epoch_same(&er, &ref0), "train=%d: raw shard gives different batches from LZ4", train);
        epoch_free(&er);
        loader_destroy(lr);
        epoch_free(&ref0);
        epoch_free(&ref1);
    }
    // Grayscale, bigger crop than some images (upscale), eval with an explicit resize.
    {
        LoaderConfig c = base_cfg(0, 2);
        c.crop = 40;
        c.val_resize = 48;
        Loader *l = loader_create(&sg, &c);
        CHECK(loader_channels(l) == 1, "channels");
        Epoch e = run_epoch(l, 0, 40 * 40);
        CHECK(check_against_direct(&sg, &c, &e, 0), "grayscale eval differs from the direct path");
        epoch_free(&e);
        loader_destroy(l);
        c.train = 1;
        l = loader_create(&sg, &c);
        e = run_epoch(l, 3, 40 * 40);
        CHECK(check_against_direct(&sg, &c, &e, 3), "grayscale train differs from the direct path");
        epoch_free(&e);
        loader_destroy(l);
    }

    // JPEG payloads (decoded whole by libjpeg-turbo in the worker): same as the direct path, any worker count.
    {
        Shard sj;
        shard_open(&sj, jpg);
        LoaderConfig c = base_cfg(1, 1);
        Loader *l = loader_create(&sj, &c);
        Epoch e = run_epoch(l, 4, 16 * 16 * 3);
        CHECK(e.n == (N / 6) * 6 && check_against_direct(&sj, &c, &e, 4), "JPEG shard differs from the direct path");
        loader_destroy(l);
        c.workers = 3;
        l = loader_create(&sj, &c);
        Epoch e3 = run_epoch(l, 4, 16 * 16 * 3);
        CHECK(epoch_same(&e, &e3), "JPEG shard: 1 and 3 workers differ");
        loader_destroy(l);
        epoch_free(&e);
        epoch_free(&e3);
        shard_close(&sj);
    }

    // Simulated ranks: eval exact coverage (53 = not a multiple of 3 x 4), train exact shares.
    {
        int R = 3;
        int hits[N] = {0}, ok = 1;
        for (int r = 0; r < R; r++) {
            LoaderConfig c = base_cfg(0, 2);
            c.batch_size = 4;
            c.rank = r;
            c.world = R;
            Loader *l = loader_create(&s, &c);
            loader_start_epoch(l, 0);
            LoaderBatch b;
            int64_t nb = 0;
            while (loader_next(l, &b)) {
                ok &= b.count >= 1 && b.count <= 4 && (b.count == 4 || b.batch == loader_batches_per_epoch(l) - 1);
                for (int i = 0; i < b.count; i++) hits[b.indices[i]]++;
                nb++;
                loader_release(l, &b);
            }
            ok &= nb == loader_batches_per_epoch(l);
            loader_destroy(l);
        }
        for (int i = 0; i < N; i++) ok &= hits[i] == 1;
        CHECK(ok, "eval over %d ranks does not cover every record exactly once", R);

        int seen[N] = {0};
        ok = 1;
        R = 2;
        for (int r = 0; r < R; r++) {
            LoaderConfig c = base_cfg(1, 1 + r);
            c.batch_size = 5;
            c.rank = r;
            c.world = R;
            Loader *l = loader_create(&s, &c);
            loader_start_epoch(l, 2);
            LoaderBatch b;
            int nb = 0;
            while (loader_next(l, &b)) {
                ok &= b.count == 5;
                for (int i = 0; i < b.count; i++) seen[b.indices[i]]++;
                nb++;
                loader_release(l, &b);
            }
            ok &= nb == N / (5 * R);
            loader_destroy(l);
        }
        int total = 0;
        for (int i = 0; i < N; i++) {
            ok &= seen[i] <= 1;
            total += seen[i];
        }
        CHECK(ok && total == (N / 10) * 10, "train shares over 2 ranks wrong (total %d)", total);
    }

    // Out-of-order release, holding two batches, the alloc hook, destroy mid-epoch, abandoned epochs.
    {
        int ctx = 0;
        LoaderConfig c = base_cfg(1, 3);
        c.alloc = hook_alloc;
        c.free = hook_free;
        c.alloc_ctx = &ctx;
        c.prefetch = 3;
        Loader *l = loader_create(&s, &c);
        CHECK(ctx == 3 && alloc_calls == 3, "alloc hook called %d times for 3 buffers", ctx);
        loader_start_epoch(l, 0);
        LoaderBatch a, b;
        CHECK(loader_memory_bytes(l) > 0 && loader_wait_seconds(l) >= 0, "stats while the workers run");
        CHECK(loader_next(l, &a) == 1 && loader_next(l, &b) == 1, "two batches");
        CHECK(a.images != b.images, "two held batches share a buffer");
        loader_release(l, &b);
        loader_release(l, &a);
        CHECK(loader_next(l, &a) == 1 && a.batch == 2, "third batch");
        loader_release(l, &a);
        loader_start_epoch(l, 1);  // abandon epoch 0 with work in flight
        loader_start_epoch(l, 2);
        CHECK(loader_next(l, &a) == 1 && a.batch == 0, "first batch of a restarted epoch");
        loader_release(l, &a);
        loader_destroy(l);  // workers busy filling ahead
        CHECK(free_calls == 3, "free hook called %d times", free_calls);
        l = loader_create(&s, &c);  // destroy without ever starting
        loader_destroy(l);
    }

    // Corrupt payload: checksum error naming the file and record; with checks off, the LZ4 error.
    {
        size_t n = 0;
        char *bytes = ct_read_file(lz4, &n);
        uint64_t victim = 17;
        memset(bytes + s.records[victim].offset, 0xff, s.records[victim].stored_size);
        FILE *f = fopen(bad, "wb");
        if (!f || fwrite(bytes, 1, n, f) != n) ct_die_errno("%s", bad);
        fclose(f);
        free(bytes);
        Shard sb;
        shard_open(&sb, bad);
        for (int skip = 0; skip <= 1; skip++) {
            LoaderConfig c = base_cfg(0, 2);
            c.skip_crc = skip;
            Loader *l = loader_create(&sb, &c);
            loader_start_epoch(l, 0);
            LoaderBatch b;
            char err[1024] = "";
            int rc, got = 0;
            while ((rc = loader_next_err(l, &b, err, sizeof err)) == 1) {
                got += b.count;
                loader_release(l, &b);
            }
            printf("corrupt record, skip_crc=%d: rc %d after %d samples: %s\n", skip, rc, got, err);
            CHECK(rc == -1, "skip_crc=%d: corrupt record not reported (rc %d)", skip, rc);
            CHECK(strstr(err, bad) && strstr(err, "record 17"), "message does not name file and record: %s", err);
            CHECK(got == 12, "samples before the failing batch: %d", got);  // record 17 is in eval batch 2
            CHECK(loader_next_err(l, &b, err, sizeof err) == -1, "loader continued after an error");
            loader_start_epoch(l, 1);  // restarting after an error works and fails again at the same place
            got = 0;
            while ((rc = loader_next_err(l, &b, err, sizeof err)) == 1) {
                got += b.count;
                loader_release(l, &b);
            }
            CHECK(rc == -1 && got == 12, "second epoch after error: rc %d got %d", rc, got);
            loader_destroy(l);
        }
        shard_close(&sb);
    }

    // Test-time flip: pixel (n, y, x) of the mirror is pixel (n, y, W-1-x), all channels with it.
    {
        enum { FN = 2, FH = 3, FW = 5, FC = 3 };
        uint8_t src[FN * FH * FW * FC], dst[sizeof src], back[sizeof src];
        for (size_t i = 0; i < sizeof src; i++) src[i] = (uint8_t)(i * 7 + 3);
        augment_flip_batch(dst, src, FN, FH, FW, FC);
        int ok = 1;
        for (int n = 0; n < FN; n++)
            for (int y = 0; y < FH; y++)
                for (int x = 0; x < FW; x++)
                    for (int c = 0; c < FC; c++)
                        ok &= dst[((n * FH + y) * FW + x) * FC + c] == src[((n * FH + y) * FW + (FW - 1 - x)) * FC + c];
        augment_flip_batch(back, dst, FN, FH, FW, FC);
        CHECK(ok && !memcmp(back, src, sizeof src), "augment_flip_batch is not a left-right mirror");
    }
    // Mixup/CutMix in the loader: every mixed batch is mix_apply(mix_draw(seed, epoch, batch key))
    // of the unmixed batch, whatever the worker count, including a mid-epoch start; eval never mixes.
    for (int ranks = 1; ranks <= 2; ranks++) {
        LoaderConfig plain = base_cfg(1, 2);
        plain.rank = ranks - 1;
        plain.world = ranks;
        size_t bpi = (size_t)plain.crop * plain.crop * 3;
        Loader *lp = loader_create(&s, &plain);
        Epoch ref = run_epoch(lp, 2, bpi);
        loader_destroy(lp);
        for (int w = 1; w <= 3; w += 2) {
            LoaderConfig c = plain;
            c.workers = w;
            c.mixup_alpha = 0.4f;
            c.cutmix_alpha = 1.0f;
            c.mix_prob = 0.8f;
            c.mix_switch_prob = 0.5f;
            MixConfig mc = {c.mixup_alpha, c.cutmix_alpha, c.mix_prob, c.mix_switch_prob, c.seed};
            Loader *l = loader_create(&s, &c);
            loader_start_epoch_at(l, 2, w == 3 ? 2 : 0);
            LoaderBatch b;
            int ok = 1, nb = 0, mixed = 0;
            uint8_t *want = ct_alloc(6 * bpi);
            int32_t lb[6];
            while (loader_next(l, &b)) {
                int k = (int)b.batch * 6;
                MixDraw d;
                mix_draw(&mc, 2, (uint64_t)b.batch * c.world + c.rank, c.crop, c.crop, &d);
                memcpy(want, ref.img + (size_t)k * bpi, (size_t)b.count * bpi);
                mix_apply(&d, want, ref.lab + k, lb, b.count, c.crop, c.crop, 3);
                ok &= memcmp(b.images, want, (size_t)b.count * bpi) == 0 && b.mix_lam == d.lam &&
                      memcmp(b.labels, ref.lab + k, 4 * b.count) == 0 && memcmp(b.labels_b, lb, 4 * b.count) == 0;
                mixed += b.mix_lam < 1;
                nb++;
                loader_release(l, &b);
            }
            CHECK(ok && nb > 0 && mixed > 0, "ranks %d workers %d: mixed batches differ from mixing the plain ones "
                  "(%d batches, %d mixed)", ranks, w, nb, mixed);
            free(want);
            loader_destroy(l);
        }
        epoch_free(&ref);
    }
    {
        LoaderConfig c = base_cfg(0, 2);
        c.mixup_alpha = 1.0f;
        c.mix_prob = 1.0f;
        Loader *l = loader_create(&s, &c);
        loader_start_epoch(l, 0);
        LoaderBatch b;
        int unmixed = 1;
        while (loader_next(l, &b)) {
            unmixed &= b.mix_lam == 1.0f && memcmp(b.labels, b.labels_b, 4 * b.count) == 0;
            loader_release(l, &b);
        }
        CHECK(unmixed, "eval batches are never mixed");
        loader_destroy(l);
    }

    // Per-sample policies: deterministic across worker counts and starts, training only.
    for (int train = 1; train >= 0; train--) {
        // Each element alone must change training batches: a policy without erasing, erasing without a policy.
        const char *specs[] = {"ta_wide", "rand-m9-mstd0.5-inc1", "none"};
        const float erase_p[] = {0.f, 0.5f, 0.5f};
        for (int sp = 0; sp < 3; sp++) {
            LoaderConfig plain = base_cfg(train, 2);
            size_t bpi = (size_t)plain.crop * plain.crop * 3;
            Loader *lp = loader_create(&s, &plain);
            Epoch ref = run_epoch(lp, 1, bpi);
            loader_destroy(lp);
            Epoch got[2];
            for (int t = 0; t < 2; t++) {
                LoaderConfig c = base_cfg(train, t ? 3 : 1);
                char err[200];
                CHECK(aa_parse(specs[sp], 9, &c.autoaug, err, sizeof err) == 0, "%s", err);
                c.erase.p = erase_p[sp];
                c.erase.random = sp == 1;
                for (int k = 0; k < 3; k++) c.erase.mean[k] = 0.45f, c.erase.std[k] = 0.225f;
                Loader *l = loader_create(&s, &c);
                if (t) {
                    Epoch e0 = run_epoch(l, 0, bpi);  // an epoch before, then epoch 1 again
                    epoch_free(&e0);
                }
                got[t] = run_epoch(l, 1, bpi);
                loader_destroy(l);
            }
            CHECK(epoch_same(&got[0], &got[1]), "%s train=%d: workers 1 and 3 (after another epoch) differ", specs[sp],
                  train);
            int same_as_plain = epoch_same(&got[0], &ref);
            CHECK(train ? !same_as_plain : same_as_plain, "%s train=%d: %s", specs[sp], train,
                  train ? "training batches untouched by the policies" : "evaluation batches changed by the policies");
            CHECK(got[0].n == ref.n && !memcmp(got[0].idx, ref.idx, sizeof(uint64_t) * ref.n),
                  "%s: the policies changed which records are drawn", specs[sp]);
            epoch_free(&ref);
            epoch_free(&got[0]);
            epoch_free(&got[1]);
        }
    }

    shard_close(&s);
    shard_close(&sr);
    shard_close(&sg);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) ct_warn("could not remove %s", dir);
    return test_summary("test_loader");
}
