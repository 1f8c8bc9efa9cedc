// Shards, normalisation, loaders and the demo's data (trainer/data.h).
#include "trainer/data.h"

#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/common.h"

#define DEMO_IDX_DIR "/usr/share/datasets/fashion-mnist"

void dataset_auto_norm(int channels, float *mean, float *std) {
    static const float im_mean[3] = {0.485f, 0.456f, 0.406f}, im_std[3] = {0.229f, 0.224f, 0.225f};
    for (int i = 0; i < channels; i++) {
        mean[i] = channels == 3 ? im_mean[i] : 0.5f;
        std[i] = channels == 3 ? im_std[i] : 0.25f;
    }
}

// Among up to 1000 records spread evenly over the shard (enough to catch a dataset stored smaller
// than the crop, without reading a large index on every start): the smallest short side, and how
// many have a short side below px.
static uint32_t sampled_min_short(const Shard *s, uint32_t px, uint64_t *sampled, uint64_t *smaller) {
    uint64_t n = CT_MIN(s->n_records, 1000);
    uint32_t m = UINT32_MAX;
    *smaller = 0;
    for (uint64_t i = 0; i < n; i++) {
        const ShardRecord *rec = &s->records[i * s->n_records / n];
        uint32_t short_side = CT_MIN(rec->height, rec->width);
        m = CT_MIN(m, short_side);
        *smaller += short_side < px;
    }
    *sampled = n;
    return m;
}

// A crop larger than some stored images upsamples them: legal (RandomResizedCrop upsamples small
// crops anyway), but rarely what was meant, so it is said, with how many are smaller. The largest
// training size counts (progressive resizing's end, usually).
static void warn_small_images(const Shard *s, const Config *c) {
    int big = c->evaluate ? c->val_crop_size : CT_MAX(c->res_start, c->res_end);
    const char *flag = c->evaluate ? (c->val_crop_size == c->crop_size ? "--crop-size" : "--val-crop-size")
                       : c->res_start == c->res_end ? "--crop-size" : c->res_start > c->res_end ? "--res-start" : "--res-end";
    uint64_t n, smaller;
    uint32_t m = sampled_min_short(s, (uint32_t)big, &n, &smaller);
    if (!n || m >= (uint32_t)big) return;
    ct_warn("%s %d is larger than some images stored in %s (%llu of %llu sampled records have a shorter side, the "
            "smallest %u px): their crops are upsampled; lower %s, or repack the images larger (packdata --max-short)",
            flag, big, s->path, (unsigned long long)smaller, (unsigned long long)n, m, flag);
}

// Every val payload's checksum, before any training: a corrupt val record would otherwise surface
// only when the first epoch is evaluated. It reads the whole val shard once, as every evaluation
// does (docs/BENCHMARKS.md: 50,000 records, 13 GB, in 12 s from the page cache on 2 busy cores).
// The loader's own check on first use stays, for the train shard and for a file changed while
// the run goes on. The lowest bad index is reported, so the message does not depend on the
// thread count.
static void verify_val_payloads(const Shard *s) {
    int64_t n = (int64_t)s->n_records, bad = n;
    double t0 = ct_now();
#pragma omp parallel for schedule(dynamic, 256) reduction(min : bad)
    for (int64_t i = 0; i < n; i++) {
        char e[SHARD_ERR_LEN];
        if (i < bad && shard_check_crc_err(s, (uint64_t)i, e, sizeof e) != 0) bad = i;
    }
    if (bad == n) {
        double dt = ct_now() - t0;
        if (dt >= 1.0)  // says what the pause at start is
            fprintf(stderr, "train: checked the payload checksums of %s's %lld records (%.1f GB) in %.1f s\n", s->path,
                    (long long)n, (double)s->size / 1e9, dt);
        return;
    }
    char err[SHARD_ERR_LEN];
    shard_check_crc_err(s, (uint64_t)bad, err, sizeof err);
    ct_die("%s (found checking the val shard before training; repack it with packdata, or check it with "
           "packdata --verify %s)", err, s->path);
}

void dataset_open(Dataset *d, const Config *c) {
    memset(d, 0, sizeof *d);
    char tp[1100], vp[1100], err[SHARD_ERR_LEN];
    struct stat st;
    if (stat(c->shards, &st) != 0 || !S_ISDIR(st.st_mode))
        ct_die("SHARDS: '%s' is not a directory (it should hold train.shard and val.shard made by packdata)", c->shards);
    snprintf(tp, sizeof tp, "%s/train.shard", c->shards);
    snprintf(vp, sizeof vp, "%s/val.shard", c->shards);
    if (!ct_file_exists(vp)) ct_die("%s: missing (SHARDS must hold val.shard%s)", vp, c->evaluate ? "" : " and train.shard");
    if (shard_open_err(&d->val, vp, err, sizeof err) != 0) ct_die("%s", err);
    if (!c->evaluate) {
        if (!ct_file_exists(tp)) ct_die("%s: missing (SHARDS must hold train.shard and val.shard)", tp);
        if (shard_open_err(&d->train, tp, err, sizeof err) != 0) ct_die("%s", err);
        d->have_train = 1;
        if (d->train.channels != d->val.channels)
            ct_die("channel count mismatch: %s has %u channels, %s has %u", tp, d->train.channels, vp, d->val.channels);
        if (shard_same_classes_err(&d->train, &d->val, err, sizeof err) != 0) ct_die("%s", err);
        if (d->train.n_records < (uint64_t)c->batch * c->ranks)
            ct_die("%s: %llu records, fewer than one global batch (--batch-size %d x --ranks %d)", tp,
                   (unsigned long long)d->train.n_records, c->batch, c->ranks);
    }
    if (d->val.n_records == 0) ct_die("%s: no records", vp);
    if (!c->evaluate) verify_val_payloads(&d->val);
    d->channels = (int)d->val.channels;
    d->classes = (int)d->val.n_classes;
    d->class_hash = d->val.class_hash;
    if (d->classes < 2) ct_die("%s: %d class(es); training needs at least 2", vp, d->classes);
    warn_small_images(d->have_train ? &d->train : &d->val, c);

    d->mean = ct_alloc(sizeof(float) * d->channels);
    d->std = ct_alloc(sizeof(float) * d->channels);
    dataset_auto_norm(d->channels, d->mean, d->std);
    if (strcmp(c->mean, "auto")) config_parse_floats("mean", c->mean, d->mean, d->channels);
    if (strcmp(c->std, "auto")) config_parse_floats("std", c->std, d->std, d->channels);
    for (int i = 0; i < d->channels; i++)
        if (!(d->std[i] > 0)) ct_die("--std: channel %d is %g; must be > 0", i, d->std[i]);
}

void dataset_close(Dataset *d) {
    if (d->have_train) shard_close(&d->train);
    shard_close(&d->val);
    free(d->mean);
    free(d->std);
}

void loaders_create(RankLoaders *l, const Dataset *d, const Config *c, BackendKind kind, int rank, int world) {
    memset(l, 0, sizeof *l);
    LoaderConfig lc;
    memset(&lc, 0, sizeof lc);
    lc.batch_size = c->batch;
    ResSchedule rs;
    config_res_schedule(c, &rs);
    lc.crop = res_schedule_at(&rs, 0);  // loop_train sets each epoch's (loader_set_crop)
    lc.max_crop = res_schedule_max(&rs);
    lc.val_resize = c->val_resize;
    lc.workers = c->workers;
    lc.seed = (uint64_t)c->seed;
    lc.rank = rank;
    lc.world = world;
    lc.no_flip = c->no_flip;
    // Test hook: CTRAIN_FAULT_LOADER_DELAY_MS=n slows every loader worker by n ms per chunk.
    const char *slow = getenv("CTRAIN_FAULT_LOADER_DELAY_MS");
    lc.test_delay_us = slow && *slow ? 1000 * ct_parse_int("CTRAIN_FAULT_LOADER_DELAY_MS", slow, 0, 60000) : 0;
    backend_loader_memory(kind, &lc);
    if (d->have_train) {
        lc.train = 1;
        if (c->min_scale != 0.08) {
            lc.scale_min = (float)c->min_scale;
            lc.scale_max = 1.0f;
            lc.ratio_min = 3.0f / 4.0f;
            lc.ratio_max = 4.0f / 3.0f;
        }
        lc.mixup_alpha = (float)c->mixup;
        lc.cutmix_alpha = (float)c->cutmix;
        lc.mix_prob = (float)c->mix_prob;
        lc.mix_switch_prob = (float)c->mix_switch_prob;
        lc.skip_bad = !c->strict_data;
        char err[256];
        if (aa_parse(c->auto_augment, c->ra_magnitude, &lc.autoaug, err, sizeof err) != 0) ct_die("--auto-augment %s", err);
        for (int i = 0; i < 3; i++) {  // timm's fill, img_mean: min(255, round(255 * mean))
            double m = 255.0 * d->mean[i < d->channels ? i : 0];
            lc.autoaug.fill[i] = (uint8_t)(m < 0 ? 0 : m > 255 ? 255 : nearbyint(m));
        }
        lc.erase.p = (float)c->random_erase;
        lc.erase.random = !strcmp(c->random_erase_mode, "pixel");
        for (int i = 0; i < d->channels && i < 3; i++) {
            lc.erase.mean[i] = d->mean[i];
            lc.erase.std[i] = d->std[i];
        }
        lc.ra_repeats = c->ra_repeats;
        l->train = loader_create(&d->train, &lc);
        l->steps_per_epoch = loader_batches_per_epoch(l->train);
    }
    lc.train = 0;
    lc.skip_bad = 0;  // evaluation reads every record exactly once: a bad val record ends the run
    lc.crop = lc.max_crop = c->val_crop_size;
    lc.no_flip = 1;
    lc.mixup_alpha = lc.cutmix_alpha = 0;
    lc.scale_min = lc.scale_max = lc.ratio_min = lc.ratio_max = 0;
    l->val = loader_create(&d->val, &lc);
}

void loaders_destroy(RankLoaders *l) {
    loader_destroy(l->train);
    loader_destroy(l->val);
    l->train = l->val = NULL;
}

void demo_prepare(void) {
    char tp[256], vp[256];
    snprintf(tp, sizeof tp, "%s/train.shard", DEMO_SHARDS);
    snprintf(vp, sizeof vp, "%s/val.shard", DEMO_SHARDS);
    if (ct_file_exists(tp) && ct_file_exists(vp)) return;
    const char *need = DEMO_IDX_DIR "/train-images-idx3-ubyte.gz";
    if (!ct_file_exists(need)) {
        if (geteuid() == 0) {
            fprintf(stderr, "demo: installing Debian's dataset-fashion-mnist\n");
            int rc = system("DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dataset-fashion-mnist >/dev/null "
                            "|| (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dataset-fashion-mnist >/dev/null)");
            if (rc != 0 || !ct_file_exists(need)) ct_die("demo: installing dataset-fashion-mnist failed; run: apt-get install dataset-fashion-mnist");
        } else {
            ct_die("demo: %s not found; install the data with: sudo apt-get install dataset-fashion-mnist", need);
        }
    }
    fprintf(stderr, "demo: packing %s into %s/\n", DEMO_IDX_DIR, DEMO_SHARDS);
    ct_mkdir_p(DEMO_SHARDS);
    idx_pack_dir(DEMO_IDX_DIR, DEMO_SHARDS, NULL, 10);
}
