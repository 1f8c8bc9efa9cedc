// Loader throughput. Three modes:
//   bench_loader pack DIR OUT.shard        ImageFolder tree of JPEG/PNG (DIR/class/file) -> LZ4 shard
//                                          (classes and files sorted; the bench's own packer, so the
//                                          benchmark does not depend on packdata's flags)
//   bench_loader run SHARD [--crop N] [--workers W] [--batch B] [--seconds S] [--eval] [--val-resize R]
//                      [--mixup A] [--cutmix A]   (every batch mixed; switch probability 0.5 with both)
//                      [--auto-augment POLICY] [--random-erase P] [--ra-repeats K]
//                                          (train's per-image policies, loader/autoaug.h; the v2
//                                          recipe: --auto-augment ta_wide --random-erase 0.1
//                                          --ra-repeats 4 --mixup 0.2 --cutmix 1 --crop 176)
//                                          the real loader (worker pool + ring); prints one table row:
//                                          img/s, img/s per worker thread, memory, consumer wait share.
//                                          Epoch 0 (payload checksums checked on first use) is reported
//                                          apart from the steady state.
//   bench_loader hash SHARD [run's flags] [--epochs E] [--no-simd]
//                                          CRC-32C of every batch the loader hands out over epochs
//                                          0..E-1 (pixels, labels, mixing): compares binaries, worker
//                                          counts and the baseline kernels (--no-simd) byte for byte.
//   bench_loader profile SHARD [--crop N] [--count K]
//                                          one thread, per-stage time per image: crc, partial LZ4 decode,
//                                          resample.
//   bench_loader aaops SHARD [--crop N] [--count K]
//                                          one thread, CPU time of each TrivialAugmentWide op
//                                          (aa_apply_op) on K training crops of the shard, at bins
//                                          3, 10, 17, 24, 30 of 31 with both signs, beside the scalar
//                                          reference (aa_apply_op_ref: the code before the fast paths).
#include <dirent.h>
#include <lz4.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "loader/augment.h"
#include "loader/autoaug.h"
#include "loader/image.h"
#include "loader/loader.h"
#include "loader/mix.h"
#include "loader/resample.h"
#include "loader/shard.h"
#include "util/common.h"
#include "util/crc32c.h"

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static char **list_dir(const char *dir, int want_dirs, int *n) {
    DIR *d = opendir(dir);
    if (!d) ct_die_errno("%s", dir);
    char **v = NULL;
    int cnt = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        DIR *sub = opendir(p);
        int is_dir = sub != NULL;
        if (sub) closedir(sub);
        if (is_dir != want_dirs) continue;
        if (cnt == cap) v = ct_realloc(v, sizeof(char *) * (cap = cap ? 2 * cap : 64));
        v[cnt++] = ct_strdup(e->d_name);
    }
    closedir(d);
    qsort(v, cnt, sizeof(char *), cmp_str);
    *n = cnt;
    return v;
}

static int do_pack(const char *dir, const char *out) {
    int nc = 0;
    char **classes = list_dir(dir, 1, &nc);
    if (nc == 0) ct_die("%s: no class directories", dir);
    ShardWriter *w = shard_writer_open(out, 3, SHARD_CODEC_LZ4, nc, (const char *const *)classes);
    double t0 = ct_now();
    for (int c = 0; c < nc; c++) {
        char cd[4096];
        snprintf(cd, sizeof cd, "%s/%s", dir, classes[c]);
        int nf = 0;
        char **files = list_dir(cd, 0, &nf);
        for (int i = 0; i < nf; i++) {
            char fp[8192], err[512];
            snprintf(fp, sizeof fp, "%s/%s", cd, files[i]);
            size_t n = 0;
            uint8_t *data = (uint8_t *)ct_read_file(fp, &n), *px = NULL;
            uint32_t h = 0, wd = 0;
            if (image_decode(data, n, 3, &px, &h, &wd, err, sizeof err) != 0) ct_die("%s: %s", fp, err);
            size_t sz = 0;
            uint8_t *payload = shard_encode(SHARD_CODEC_LZ4, 0, px, h, wd, 3, &sz);
            shard_writer_add(w, payload, (uint32_t)sz, h, wd, c);
            free(payload);
            free(px);
            free(data);
            free(files[i]);
        }
        free(files);
    }
    uint64_t count = shard_writer_count(w);
    shard_writer_finish(w);
    for (int c = 0; c < nc; c++) free(classes[c]);
    free(classes);
    printf("packed %llu images from %s into %s in %.1fs\n", (unsigned long long)count, dir, out, ct_now() - t0);
    return 0;
}

// CPU seconds: the machine is shared, so rates per CPU-second are the stable figure ("per core").
static double cpu_now(int thread_only) {
    struct timespec ts;
    clock_gettime(thread_only ? CLOCK_THREAD_CPUTIME_ID : CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static double rss_mib(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss / 1024.0;
}

static int do_hash(Loader *l, int epochs, int crop);

static int do_run(const char *path, int crop, int workers, int batch, double seconds, int train, int val_resize,
                  float mixup, float cutmix, const char *aa, float erase, int repeats, int hash_epochs) {
    Shard s;
    shard_open(&s, path);
    LoaderConfig c = {0};
    c.batch_size = batch;
    c.crop = crop;
    c.train = train;
    c.val_resize = val_resize;
    c.workers = workers;
    c.seed = 1;
    c.world = 1;
    c.mixup_alpha = mixup;
    c.cutmix_alpha = cutmix;
    c.mix_prob = 1.0f;
    c.mix_switch_prob = 0.5f;
    char err[256];
    if (aa_parse(aa, 9, &c.autoaug, err, sizeof err) != 0) ct_die("--auto-augment %s", err);
    c.erase.p = erase;
    for (int k = 0; k < 3; k++) c.erase.mean[k] = 0.45f, c.erase.std[k] = 0.225f;
    c.ra_repeats = repeats;
    Loader *l = loader_create(&s, &c);
    if (hash_epochs > 0) {
        do_hash(l, hash_epochs, crop);
        loader_destroy(l);
        shard_close(&s);
        return 0;
    }
    int64_t nb = loader_batches_per_epoch(l);
    if (nb == 0) ct_die("%s: fewer records than one batch of %d", path, batch);
    // Epoch 0 (first touch: page faults on the mapping, checksums), then steady-state epochs.
    double t0 = ct_now(), w0 = loader_wait_seconds(l);
    uint64_t imgs0 = 0, sum = 0;
    loader_start_epoch(l, 0);
    LoaderBatch b;
    while (loader_next(l, &b)) {
        imgs0 += b.count;
        sum += b.images[b.count * 7 % (crop * crop)];  // touch the data like a consumer would
        loader_release(l, &b);
    }
    double first = ct_now() - t0;
    double t1 = ct_now(), w1 = loader_wait_seconds(l), c1 = cpu_now(0);
    uint64_t imgs = 0;
    int64_t epoch = 1;
    while (ct_now() - t1 < seconds) {
        loader_start_epoch(l, epoch++);
        while (loader_next(l, &b)) {
            imgs += b.count;
            sum += b.images[b.count * 7 % (crop * crop)];
            loader_release(l, &b);
        }
    }
    double dt = ct_now() - t1, wait = loader_wait_seconds(l) - w1, cpu = cpu_now(0) - c1;
    double rate = imgs / dt, per_cpu = imgs / cpu;
    printf("%-5s crop %3d from %s (%llu records, max %ux%u): workers %d batch %d | epoch0 %.0f img/s | steady %.0f img/s "
           "= %.0f img/s per worker | %.0f img per CPU-second | consumer waited %.0f%% | loader memory %.1f MiB "
           "(ring %d x %.1f MiB), process max RSS %.0f MiB (includes the mapped shard pages touched) [%llu]\n",
           train ? "train" : "eval", crop, path, (unsigned long long)s.n_records, s.max_height, s.max_width, workers,
           batch, imgs0 / first, rate, rate / workers, per_cpu, 100 * wait / dt, loader_memory_bytes(l) / 1048576.0,
           workers + 2, loader_batch_bytes(l) / 1048576.0, rss_mib(), (unsigned long long)(sum & 1));
    if (mixup > 0 || cutmix > 0) printf("(mixing every batch: --mixup %g --cutmix %g)\n", mixup, cutmix);
    if (c.autoaug.policy != AA_POLICY_NONE || erase > 0 || repeats > 1)
        printf("(per-image: --auto-augment %s --random-erase %g --ra-repeats %d)\n", aa, erase, repeats);
    printf("RESULT ctrain mode=%s crop=%d workers=%d img_s=%.1f img_s_per_worker=%.1f img_per_cpu_s=%.1f "
           "loader_mib=%.1f rss_mib=%.0f wait_share=%.3f\n",
           train ? "train" : "eval", crop, workers, rate, rate / workers, per_cpu, loader_memory_bytes(l) / 1048576.0,
           rss_mib(), wait / dt);
    (void)w0;
    loader_destroy(l);
    shard_close(&s);
    return 0;
}

// CRC-32C of everything the consumer receives over epochs 0..E-1 (pixels, labels, partner labels,
// the mixing weight), one line per epoch and one for all: the loader's bytes, to compare binaries,
// worker counts and SIMD paths (--no-simd) with one command each.
static int do_hash(Loader *l, int epochs, int crop) {
    uint32_t all = 0;
    uint64_t n = 0;
    for (int e = 0; e < epochs; e++) {
        uint32_t h = 0;
        loader_start_epoch(l, e);
        LoaderBatch b;
        while (loader_next(l, &b)) {
            h = crc32c(h, b.images, (size_t)b.count * b.hw * b.hw * 3);
            h = crc32c(h, b.labels, sizeof(int32_t) * b.count);
            h = crc32c(h, b.labels_b, sizeof(int32_t) * b.count);
            h = crc32c(h, &b.mix_lam, sizeof b.mix_lam);
            n += b.count;
            loader_release(l, &b);
        }
        printf("epoch %d crc32c %08x\n", e, h);
        all = crc32c(all, &h, sizeof h);
    }
    printf("RESULT hash crop=%d epochs=%d images=%llu crc32c=%08x\n", crop, epochs, (unsigned long long)n, all);
    return 0;
}

static int do_profile(const char *path, int crop, int count) {
    Shard s;
    shard_open(&s, path);
    if (s.codec != SHARD_CODEC_LZ4) ct_die("%s: profile wants an LZ4 shard", path);
    AugmentConfig a = {.crop = crop, .train = 1, .flip = 1, .seed = 1};
    augment_config_defaults(&a);
    uint8_t *dec = ct_alloc(s.max_raw_size), *out = ct_alloc((size_t)crop * crop * 3);
    ResampleScratch sc = {0};
    double tc = 0, tf = 0, tp = 0, tr = 0;
    uint64_t full_bytes = 0, part_bytes = 0;
    for (int k = 0; k < count; k++) {
        uint64_t i = (uint64_t)k % s.n_records;
        const ShardRecord *r = &s.records[i];
        AugmentPlan p;
        augment_plan(&a, r->height, r->width, k / s.n_records, i, &p);
        double t0 = cpu_now(1);
        volatile uint32_t crc = crc32c(0, s.base + r->offset, r->stored_size);
        (void)crc;
        double t1 = cpu_now(1);
        LZ4_decompress_safe((const char *)s.base + r->offset, (char *)dec, r->stored_size, r->raw_size);
        double t2 = cpu_now(1);
        size_t need = (size_t)p.rows_needed * r->width * 3;
        LZ4_decompress_safe_partial((const char *)s.base + r->offset, (char *)dec, r->stored_size, (int)need,
                                    r->raw_size);
        double t3 = cpu_now(1);
        augment_apply(&a, &p, dec, r->width, 3, out, &sc);
        double t4 = cpu_now(1);
        if (k >= (int)CT_MIN((uint64_t)count / 10, s.n_records)) {  // skip the first-touch pass
            tc += t1 - t0;
            tf += t2 - t1;
            tp += t3 - t2;
            tr += t4 - t3;
            full_bytes += r->raw_size;
            part_bytes += need;
        }
    }
    int m = count - (int)CT_MIN((uint64_t)count / 10, s.n_records);
    printf("profile crop %d (%d images, one thread, CPU time): crc32c %.1f us, full LZ4 %.1f us (%.2f GB/s), partial LZ4 %.1f us "
           "(%.0f%% of the rows), resample %.1f us | loader path (partial + resample) %.1f us = %.0f img/s\n",
           crop, m, 1e6 * tc / m, 1e6 * tf / m, full_bytes / tf / 1e9, 1e6 * tp / m, 100.0 * part_bytes / full_bytes,
           1e6 * tr / m, 1e6 * (tp + tr) / m, m / (tp + tr));
    resample_scratch_free(&sc);
    free(dec);
    free(out);
    shard_close(&s);
    return 0;
}

static int do_aaops(const char *path, int crop, int count) {
    Shard s;
    shard_open(&s, path);
    if (s.codec != SHARD_CODEC_LZ4) ct_die("%s: aaops wants an LZ4 shard", path);
    AugmentConfig a = {.crop = crop, .train = 1, .flip = 1, .seed = 1};
    augment_config_defaults(&a);
    size_t n = (size_t)crop * crop * 3;
    if (count < 1) count = 1;
    uint8_t *dec = ct_alloc(s.max_raw_size), *crops = ct_alloc(n * count), *img = ct_alloc(n), *tmp = ct_alloc(n);
    ResampleScratch sc = {0};
    for (int k = 0; k < count; k++) {
        uint64_t i = (uint64_t)k % s.n_records;
        const ShardRecord *r = &s.records[i];
        AugmentPlan p;
        augment_plan(&a, r->height, r->width, 0, i, &p);
        LZ4_decompress_safe((const char *)s.base + r->offset, (char *)dec, r->stored_size, r->raw_size);
        augment_apply(&a, &p, dec, r->width, 3, crops + n * k, &sc);
    }
    static const char *names[14] = {"Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness",
                                    "Color", "Contrast", "Sharpness", "Posterize", "Solarize", "AutoContrast", "Equalize"};
    static const int bins[5] = {3, 10, 17, 24, 30};
    double total = 0, total_ref = 0;
    printf("aaops crop %d, %d crops x 10 magnitudes, one thread, CPU time per %dx%dx3 image:\n", crop, count, crop, crop);
    uint64_t sum = 0;
    for (int op = 0; op < 14; op++) {
        double t = 0, tr = 0;
        int m = 0;
        for (int b = 0; b < 10; b++) {
            double mag = aa_tv_magnitude(AA_POLICY_TA_WIDE, (AaOp)op, 31, bins[b / 2], crop, crop);
            if (op >= AA_SHEAR_X && op <= AA_SHARPNESS && (b & 1)) mag = -mag;
            if (op == AA_IDENTITY || op == AA_AUTOCONTRAST || op == AA_EQUALIZE) mag = 0;
            for (int k = 0; k < count; k++) {
                memcpy(img, crops + n * k, n);
                double t0 = cpu_now(1);
                aa_apply_op((AaOp)op, mag, NULL, img, crop, crop, 3, tmp);
                t += cpu_now(1) - t0;
                sum += img[(k * 7919) % n];
                memcpy(img, crops + n * k, n);
                t0 = cpu_now(1);
                aa_apply_op_ref((AaOp)op, mag, NULL, img, crop, crop, 3, tmp);
                tr += cpu_now(1) - t0;
                sum += img[(k * 7919) % n];
                m++;
            }
        }
        printf("  %-12s %8.1f us  (scalar reference %8.1f us, %5.1fx)\n", names[op], 1e6 * t / m, 1e6 * tr / m,
               t > 0 ? tr / t : 0.0);
        total += t / m;
        total_ref += tr / m;
    }
    // TrivialAugmentWide draws each op with probability 1/14.
    printf("  mean over the 14 ops (TrivialAugmentWide's expected cost per image): %.1f us (scalar reference %.1f us) [%llu]\n",
           1e6 * total / 14, 1e6 * total_ref / 14, (unsigned long long)(sum & 1));
    printf("RESULT aaops crop=%d ta_wide_mean_us=%.1f ref_mean_us=%.1f\n", crop, 1e6 * total / 14, 1e6 * total_ref / 14);
    resample_scratch_free(&sc);
    free(dec);
    free(crops);
    free(img);
    free(tmp);
    shard_close(&s);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 4 && !strcmp(argv[1], "pack")) return do_pack(argv[2], argv[3]);
    if (argc < 3 || (strcmp(argv[1], "run") && strcmp(argv[1], "hash") && strcmp(argv[1], "profile") &&
                     strcmp(argv[1], "aaops"))) {
        fprintf(stderr,
                "usage: bench_loader pack DIR OUT.shard\n"
                "       bench_loader run SHARD [--crop 224] [--workers 1] [--batch 64] [--seconds 5] [--eval] "
                "[--val-resize R] [--mixup A] [--cutmix A] [--auto-augment POLICY] [--random-erase P] [--ra-repeats K]\n"
                "       bench_loader hash SHARD [run's flags] [--epochs 2] [--no-simd]\n"
                "       bench_loader profile SHARD [--crop 224] [--count 2000]\n"
                "       bench_loader aaops SHARD [--crop 224] [--count 2000]\n");
        return 2;
    }
    int crop = 224, workers = 1, batch = 64, train = 1, val_resize = 0, count = 2000;
    double seconds = 5;
    float mixup = 0, cutmix = 0, erase = 0;
    const char *aa = "none";
    int repeats = 1, epochs = 2;
    for (int i = 3; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "--eval")) { train = 0; continue; }
        if (!strcmp(f, "--no-simd")) {  // the x86-64 baseline kernels everywhere (same bytes by design)
            resample_set_simd(0);
            aa_set_simd(0);
            mix_set_simd(0);
            continue;
        }
        if (i + 1 >= argc) ct_die("flag %s needs a value", f);
        const char *v = argv[++i];
        if (!strcmp(f, "--crop")) crop = atoi(v);
        else if (!strcmp(f, "--workers")) workers = atoi(v);
        else if (!strcmp(f, "--batch")) batch = atoi(v);
        else if (!strcmp(f, "--seconds")) seconds = atof(v);
        else if (!strcmp(f, "--val-resize")) val_resize = atoi(v);
        else if (!strcmp(f, "--count")) count = atoi(v);
        else if (!strcmp(f, "--mixup")) mixup = (float)atof(v);
        else if (!strcmp(f, "--cutmix")) cutmix = (float)atof(v);
        else if (!strcmp(f, "--auto-augment")) aa = v;
        else if (!strcmp(f, "--random-erase")) erase = (float)atof(v);
        else if (!strcmp(f, "--ra-repeats")) repeats = atoi(v);
        else if (!strcmp(f, "--epochs")) epochs = atoi(v);
        else ct_die("unknown flag %s", f);
    }
    if (!strcmp(argv[1], "profile")) return do_profile(argv[2], crop, count);
    if (!strcmp(argv[1], "aaops")) return do_aaops(argv[2], crop, CT_MIN(count, 200));
    return do_run(argv[2], crop, workers, batch, seconds, train, val_resize, mixup, cutmix, aa, erase, repeats,
                  !strcmp(argv[1], "hash") ? CT_MAX(epochs, 1) : 0);
}
