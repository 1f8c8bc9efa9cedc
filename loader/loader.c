// Worker pool + prefetch ring (see loader.h).
//
// Work is cut into items of up to CHUNK samples of one batch. Items are claimed in order (batch 0's
// chunks, then batch 1's, ...); batch b lives in ring slot b % nslots, and a worker may start on it
// only once the consumer has released the batch that used the slot before. Whoever touches a slot
// first for batch b fills in its record indices from the sampler. Each sample's bytes are a pure
// function of (seed, epoch, record index), so neither the claim order nor the worker count changes
// any batch. One mutex guards all shared state; items take milliseconds, so it is never contended.
#include "loader/loader.h"

#include <lz4.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "loader/augment.h"
#include "loader/mix.h"
#include "loader/sampler.h"
#include "util/common.h"

#define CHUNK 8
// Streams of the per-sample policies, apart from the crop's (augment.c) so that turning them on
// leaves the crops as they were.
#define AA_KEY 0x6175746f61756731ull     // "autoaug1"
#define ERASE_KEY 0x6572617365723031ull  // "eraser01"

// A slot's progress once its batch is taken: samples being filled, the finished batch being mixed
// (Mixup/CutMix), ready for the consumer.
enum { SLOT_FILLING = 0, SLOT_MIXING = 1, SLOT_READY = 2 };

typedef struct {
    uint8_t *images;
    int32_t *labels, *labels_b;
    uint64_t *indices;
    uint64_t *keys;  // each sample's draw key (sampler_batch_keys)
    float mix_lam;
    int64_t batch;  // batch this slot holds or is being filled with; -1: free
    int count;      // samples in that batch
    int done;       // samples finished
    int ready;      // SLOT_*: the consumer takes the slot at SLOT_READY (done, and mixed)
    int held;       // handed to the consumer, not yet released
    int failed;
    int bad;        // samples replaced because their record failed (LoaderConfig.skip_bad)
    char err[SHARD_ERR_LEN + 128];
} Slot;

typedef struct {
    struct Loader *l;
    uint8_t *decode;  // max_raw_size bytes (not used for raw shards)
    // What decode holds: the first decoded_bytes bytes of record decoded_idx (0 bytes: nothing).
    // Repeated augmentation puts the copies of a record next to each other in a batch; they decode once.
    uint64_t decoded_idx;
    size_t decoded_bytes;
    ResampleScratch scratch;
    uint8_t *aa_tmp;  // max_crop^2 * C: the policies' second image
    pthread_t thread;
} Worker;

struct Loader {
    const Shard *shard;
    LoaderConfig cfg;
    AugmentConfig aug;
    MixConfig mix;
    Sampler sampler;
    int C;
    size_t img_bytes;  // crop * crop * C of the epoch being produced
    int next_crop;     // loader_set_crop's, applied by the next start_epoch
    int nslots;
    Slot *slots;
    int nworkers;
    Worker *workers;
    uint8_t *verified;  // per record: payload checksum already checked (benign races: both see a good crc)
    uint8_t *bad;       // per record: failed and reported (skip_bad); the first worker to fail it says so
    uint64_t n_bad;     // distinct bad records met (atomic)

    pthread_mutex_t mu;
    pthread_cond_t work_cv;   // workers: an item became claimable, or stop
    pthread_cond_t ready_cv;  // consumer and start_epoch: a slot completed, or in-flight work drained
    int stop;
    int active;               // an epoch is being produced
    int64_t epoch;
    int64_t nbatches;
    int chunks_per_batch;
    int64_t next_item, total_items;
    int inflight;
    int64_t next_batch;       // consumer's next batch
    double wait_s;
    size_t fixed_bytes;
};

static void *default_alloc(size_t bytes, void *ctx) { return ct_alloc(bytes); }
static void default_free(void *p, void *ctx) { free(p); }

// Decode (a prefix of) record idx into the worker's buffer, or point into the mapping for raw shards.
// whole: decode every row (the next sample is a copy of the same record, which then decodes nothing).
// Returns the pixels, or NULL with err set (naming the file and the record).
static const uint8_t *fetch_record(struct Loader *l, Worker *w, uint64_t idx, int rows, int whole, char *err,
                                   size_t errlen) {
    const Shard *s = l->shard;
    const ShardRecord *r = &s->records[idx];
    if (!l->cfg.skip_crc && !__atomic_load_n(&l->verified[idx], __ATOMIC_RELAXED)) {
        if (shard_check_crc_err(s, idx, err, errlen) != 0) return NULL;
        __atomic_store_n(&l->verified[idx], 1, __ATOMIC_RELAXED);
    }
    size_t need = (size_t)rows * r->width * s->channels;
    if (need > r->raw_size) need = r->raw_size;
    switch (s->codec) {
    case SHARD_CODEC_RAW:
        return s->base + r->offset;
    case SHARD_CODEC_LZ4: {
        if (w->decoded_bytes >= need && w->decoded_idx == idx) return w->decode;
        // Only the rows the crop reads: LZ4 blocks decode front to back, so stopping early is free.
        if (whole) need = r->raw_size;
        w->decoded_bytes = 0;
        int got = LZ4_decompress_safe_partial((const char *)(s->base + r->offset), (char *)w->decode,
                                              (int)r->stored_size, (int)need, (int)r->raw_size);
        if (got < 0) {
            snprintf(err, errlen, "%s: record %llu: corrupt LZ4 payload (malformed at byte %d of %u)", s->path,
                     (unsigned long long)idx, -got, r->stored_size);
            return NULL;
        }
        if ((size_t)got < need) {
            snprintf(err, errlen, "%s: record %llu: LZ4 payload decodes to %d bytes, %zu needed", s->path,
                     (unsigned long long)idx, got, need);
            return NULL;
        }
        w->decoded_idx = idx;
        w->decoded_bytes = need;
        return w->decode;
    }
    default:
        if (w->decoded_bytes && w->decoded_idx == idx) return w->decode;
        w->decoded_bytes = 0;
        if (shard_decode_err(s, idx, w->decode, s->max_raw_size, 0, err, errlen) != 0) return NULL;
        w->decoded_idx = idx;
        w->decoded_bytes = r->raw_size;
        return w->decode;
    }
}

static void mix_batch(struct Loader *l, Slot *slot, int64_t b, int64_t epoch) {
    MixDraw d;
    mix_draw(&l->mix, epoch, (uint64_t)b * l->cfg.world + l->cfg.rank, l->aug.crop, l->aug.crop, &d);
    mix_apply(&d, slot->images, slot->labels, slot->labels_b, slot->count, l->aug.crop, l->aug.crop, l->C);
    slot->mix_lam = d.lam;
}

static void *worker_main(void *arg) {
    Worker *w = arg;
    struct Loader *l = w->l;
    char err[sizeof l->slots[0].err];
    pthread_mutex_lock(&l->mu);
    for (;;) {
        Slot *slot = NULL;
        int64_t b = 0;
        while (!l->stop) {
            if (l->active && l->next_item < l->total_items) {
                b = l->next_item / l->chunks_per_batch;
                slot = &l->slots[b % l->nslots];
                if (slot->batch == b) break;
                if (slot->batch == -1) {  // first worker on batch b: take the slot, ask the sampler
                    slot->batch = b;
                    slot->count = sampler_batch_keys(&l->sampler, b, slot->indices, slot->keys);
                    slot->done = 0;
                    slot->ready = SLOT_FILLING;
                    slot->failed = 0;
                    slot->bad = 0;
                    break;
                }
            }
            slot = NULL;
            pthread_cond_wait(&l->work_cv, &l->mu);
        }
        if (l->stop) break;
        int chunk = (int)(l->next_item % l->chunks_per_batch);
        l->next_item++;
        l->inflight++;
        int s0 = chunk * CHUNK, s1 = CT_MIN(slot->count, s0 + CHUNK);
        int64_t epoch = l->epoch;
        pthread_mutex_unlock(&l->mu);

        int failed = 0, bad = 0;
        for (int i = s0; i < s1 && !failed; i++) {
            uint64_t idx = slot->indices[i], key = slot->keys[i], use = idx;
            const ShardRecord *r = &l->shard->records[idx];
            AugmentPlan plan;
            augment_plan(&l->aug, (int)r->height, (int)r->width, epoch, key, &plan);
            const int again = i + 1 < s1 && slot->indices[i + 1] == idx;
            const uint8_t *img = fetch_record(l, w, idx, plan.rows_needed, again, err, sizeof err);
            // skip_bad: the sample takes the next record of the shard that reads (a function of
            // the data alone, so the batch is the same whichever worker meets it, in any run),
            // cropped by the bad record's draws.
            for (uint64_t k = 1; !img && l->cfg.skip_bad && k < CT_MIN(l->shard->n_records, 1025); k++) {
                if (k == 1) {
                    bad++;
                    if (!__atomic_exchange_n(&l->bad[idx], 1, __ATOMIC_RELAXED)) {
                        __atomic_add_fetch(&l->n_bad, 1, __ATOMIC_RELAXED);
                        if (isatty(2)) fputs("\r\033[K", stderr);  // past a live progress line
                        fprintf(stderr, "%s: warning: %s; skipped: its samples take the next good record's image\n",
                                ct_program(), err);
                    }
                }
                use = (idx + k) % l->shard->n_records;
                r = &l->shard->records[use];
                augment_plan(&l->aug, (int)r->height, (int)r->width, epoch, key, &plan);
                img = fetch_record(l, w, use, plan.rows_needed, 0, err, sizeof err);
            }
            if (!img) {
                failed = 1;
                break;
            }
            uint8_t *dst = slot->images + (size_t)i * l->img_bytes;
            augment_apply(&l->aug, &plan, img, (int)r->width, l->C, dst, &w->scratch);
            if (l->cfg.train && l->cfg.autoaug.policy != AA_POLICY_NONE) {
                Rng ar = rng_make(l->aug.seed ^ AA_KEY, (uint64_t)epoch, key);
                aa_apply(&l->cfg.autoaug, &ar, dst, l->aug.crop, l->aug.crop, l->C, w->aa_tmp);
            }
            if (l->cfg.train && l->cfg.erase.p > 0) {
                Rng er = rng_make(l->aug.seed ^ ERASE_KEY, (uint64_t)epoch, key);
                erase_apply(&l->cfg.erase, &er, dst, l->aug.crop, l->aug.crop, l->C, NULL, NULL, NULL, NULL);
            }
            slot->labels[i] = (int32_t)r->label;
        }
        if (l->cfg.test_delay_us > 0) usleep((useconds_t)l->cfg.test_delay_us);

        pthread_mutex_lock(&l->mu);
        l->inflight--;
        if (failed && !slot->failed) {
            slot->failed = 1;
            memcpy(slot->err, err, sizeof err);
        }
        if (s1 > s0) slot->done += s1 - s0;
        slot->bad += bad;
        if (!slot->failed && slot->done == slot->count && slot->ready == SLOT_FILLING) {
            // This worker finished the batch: mix it (a pure function of the finished batch, so
            // which worker does it changes nothing), still counted in flight. The slot is ready
            // for the consumer only after the mixing: SLOT_MIXING keeps both the consumer and a
            // worker whose chunk was empty (a short last batch) away meanwhile.
            if (l->cfg.train && mix_enabled(&l->mix)) {
                slot->ready = SLOT_MIXING;
                l->inflight++;
                pthread_mutex_unlock(&l->mu);
                mix_batch(l, slot, b, epoch);
                pthread_mutex_lock(&l->mu);
                l->inflight--;
            } else {
                memcpy(slot->labels_b, slot->labels, sizeof(int32_t) * slot->count);
                slot->mix_lam = 1.0f;
            }
            slot->ready = SLOT_READY;
        }
        if (slot->failed || slot->ready == SLOT_READY || l->inflight == 0) pthread_cond_broadcast(&l->ready_cv);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

Loader *loader_create(const Shard *shard, const LoaderConfig *cfg) {
    struct Loader *l = ct_zalloc(sizeof *l);
    l->shard = shard;
    l->cfg = *cfg;
    if (l->cfg.world <= 0) l->cfg.world = 1;
    if (l->cfg.workers < 1) ct_die("loader: --workers must be >= 1 (got %d)", l->cfg.workers);
    if (l->cfg.batch_size < 1) ct_die("loader: --batch-size must be >= 1 (got %d)", l->cfg.batch_size);
    if (l->cfg.prefetch == 0) l->cfg.prefetch = l->cfg.workers + 2;
    if (l->cfg.prefetch < 2) ct_die("loader: prefetch depth must be >= 2 (got %d)", l->cfg.prefetch);
    if (!l->cfg.alloc != !l->cfg.free) ct_die("loader: give both alloc and free hooks, or neither");
    if (!l->cfg.alloc) {
        l->cfg.alloc = default_alloc;
        l->cfg.free = default_free;
    }
    l->aug.crop = cfg->crop;
    l->aug.train = cfg->train;
    l->aug.resize = cfg->val_resize;
    l->aug.scale_min = cfg->scale_min;
    l->aug.scale_max = cfg->scale_max;
    l->aug.ratio_min = cfg->ratio_min;
    l->aug.ratio_max = cfg->ratio_max;
    l->aug.flip = !cfg->no_flip;
    l->aug.seed = cfg->seed;
    augment_config_defaults(&l->aug);
    l->mix.mixup_alpha = cfg->mixup_alpha;
    l->mix.cutmix_alpha = cfg->cutmix_alpha;
    l->mix.prob = cfg->mix_prob;
    l->mix.switch_prob = cfg->mix_switch_prob;
    l->mix.seed = cfg->seed;
    mix_config_check(&l->mix);
    sampler_init(&l->sampler, shard->n_records, l->cfg.batch_size, l->cfg.rank, l->cfg.world, cfg->train, cfg->seed);
    if (!cfg->train) {  // evaluation visits every record once, untouched
        l->cfg.autoaug.policy = AA_POLICY_NONE;
        l->cfg.erase.p = 0;
        l->cfg.ra_repeats = 0;
    }
    if (l->cfg.ra_repeats > 1) sampler_set_repeats(&l->sampler, l->cfg.ra_repeats);
    if (!(l->cfg.erase.p >= 0 && l->cfg.erase.p <= 1))
        ct_die("loader: --random-erase %g: a probability in [0, 1]", l->cfg.erase.p);
    if ((l->cfg.autoaug.policy != AA_POLICY_NONE || l->cfg.erase.p > 0) && shard->channels != 1 && shard->channels != 3)
        ct_die("%s: %u channels: --auto-augment and --random-erase need 1 or 3", shard->path, shard->channels);
    l->C = (int)shard->channels;
    if (l->cfg.max_crop == 0) l->cfg.max_crop = cfg->crop;
    if (l->cfg.max_crop < cfg->crop)
        ct_die("loader: crop %d is larger than the largest crop %d the loader was made for", cfg->crop, l->cfg.max_crop);
    l->next_crop = cfg->crop;
    l->img_bytes = (size_t)cfg->crop * cfg->crop * l->C;
    // The ring holds batches of the largest crop; an epoch at a smaller one uses a prefix of each buffer.
    size_t max_img_bytes = (size_t)l->cfg.max_crop * l->cfg.max_crop * l->C;
    l->chunks_per_batch = (l->cfg.batch_size + CHUNK - 1) / CHUNK;

    l->nslots = l->cfg.prefetch;
    l->slots = ct_zalloc(sizeof(Slot) * l->nslots);
    size_t B = (size_t)l->cfg.batch_size;
    for (int i = 0; i < l->nslots; i++) {
        Slot *s = &l->slots[i];
        s->images = l->cfg.alloc(B * max_img_bytes, l->cfg.alloc_ctx);
        if (!s->images) ct_die("loader: batch buffer allocation of %zu bytes failed", B * max_img_bytes);
        s->labels = ct_alloc(B * sizeof(int32_t));
        s->labels_b = ct_alloc(B * sizeof(int32_t));
        s->indices = ct_alloc(B * sizeof(uint64_t));
        s->keys = ct_alloc(B * sizeof(uint64_t));
        s->batch = -1;
    }
    l->verified = ct_zalloc(shard->n_records ? shard->n_records : 1);
    l->bad = ct_zalloc(shard->n_records ? shard->n_records : 1);
    l->nworkers = l->cfg.workers;
    l->workers = ct_zalloc(sizeof(Worker) * l->nworkers);
    size_t decode = shard->codec == SHARD_CODEC_RAW ? 0 : shard->max_raw_size;
    l->fixed_bytes = sizeof *l + sizeof(Slot) * l->nslots + l->nslots * B * (max_img_bytes + 16) +
                     shard->n_records * (cfg->train ? 5 : 1) + l->nworkers * (sizeof(Worker) + decode);
    size_t aa_tmp = l->cfg.autoaug.policy != AA_POLICY_NONE ? max_img_bytes : 0;
    l->fixed_bytes += l->nworkers * aa_tmp + l->nslots * B * sizeof(uint64_t);
    l->epoch = -1;
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->work_cv, NULL);
    pthread_cond_init(&l->ready_cv, NULL);
    for (int i = 0; i < l->nworkers; i++) {
        Worker *w = &l->workers[i];
        w->l = l;
        w->decode = decode ? ct_alloc(decode) : NULL;
        w->aa_tmp = aa_tmp ? ct_alloc(aa_tmp) : NULL;
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0) ct_die("loader: cannot start worker thread %d", i);
        char name[16];
        snprintf(name, sizeof name, "ct-load%d-%d", l->cfg.rank % 100, i % 1000);
        pthread_setname_np(w->thread, name);  // visible in top -H and gdb; failure is harmless
    }
    return l;
}

void loader_start_epoch(Loader *l, int64_t epoch) { loader_start_epoch_at(l, epoch, 0); }

void loader_set_crop(Loader *l, int crop) {
    if (crop < 1 || crop > l->cfg.max_crop)
        ct_die("loader: crop %d is outside 1..%d, the largest crop the loader was made for", crop, l->cfg.max_crop);
    pthread_mutex_lock(&l->mu);
    l->next_crop = crop;
    pthread_mutex_unlock(&l->mu);
}

void loader_start_epoch_at(Loader *l, int64_t epoch, int64_t first_batch) {
    if (epoch < 0) ct_die("loader: epoch %lld < 0", (long long)epoch);
    pthread_mutex_lock(&l->mu);
    for (int i = 0; i < l->nslots; i++)
        if (l->slots[i].held) ct_die("loader_start_epoch: batch %lld of the previous epoch was not released",
                                     (long long)l->slots[i].batch);
    // Stop claims for the old epoch and let in-flight items finish before the slots are reused.
    l->active = 0;
    while (l->inflight > 0) pthread_cond_wait(&l->ready_cv, &l->mu);
    for (int i = 0; i < l->nslots; i++) {
        l->slots[i].batch = -1;
        l->slots[i].failed = 0;
    }
    // No worker is between claims now, and the next claim is made under the mutex: the new
    // geometry is what every sample of this epoch sees.
    if (l->next_crop != l->aug.crop) {
        l->aug.crop = l->next_crop;
        l->aug.resize = l->cfg.train ? 0 : l->cfg.val_resize;
        augment_config_defaults(&l->aug);
        l->img_bytes = (size_t)l->aug.crop * l->aug.crop * l->C;
    }
    sampler_set_epoch(&l->sampler, epoch);
    l->epoch = epoch;
    l->nbatches = sampler_num_batches(&l->sampler);
    if (first_batch < 0 || first_batch > l->nbatches)
        ct_die("loader: cannot start epoch %lld at batch %lld: it has %lld batches", (long long)epoch,
               (long long)first_batch, (long long)l->nbatches);
    l->total_items = l->nbatches * l->chunks_per_batch;
    l->next_item = first_batch * l->chunks_per_batch;  // batch b still lives in slot b % nslots
    l->next_batch = first_batch;
    l->active = 1;
    pthread_cond_broadcast(&l->work_cv);
    pthread_mutex_unlock(&l->mu);
}

int loader_next_err(Loader *l, LoaderBatch *out, char *err, size_t errlen) {
    pthread_mutex_lock(&l->mu);
    if (l->epoch < 0) ct_die("loader_next before loader_start_epoch");
    if (!l->active || l->next_batch >= l->nbatches) {
        int stopped = !l->active;
        pthread_mutex_unlock(&l->mu);
        if (stopped) {
            snprintf(err, errlen, "%s: loader stopped after an error in epoch %lld", l->shard->path,
                     (long long)l->epoch);
            return -1;
        }
        return 0;
    }
    int64_t b = l->next_batch;
    Slot *s = &l->slots[b % l->nslots];
    if (s->held)
        ct_die("loader_next: all %d batch buffers are held by the consumer; release one first (prefetch depth)",
               l->nslots);
    int waited = 0;
    double t0 = 0;
    while (!(s->batch == b && (s->failed || s->ready == SLOT_READY))) {
        if (!waited) t0 = ct_now();
        waited = 1;
        pthread_cond_wait(&l->ready_cv, &l->mu);
    }
    if (waited) l->wait_s += ct_now() - t0;
    if (s->failed) {
        snprintf(err, errlen, "%s", s->err);
        l->active = 0;  // nobody claims more of this epoch; start_epoch drains and resets
        pthread_mutex_unlock(&l->mu);
        return -1;
    }
    s->held = 1;
    l->next_batch++;
    out->images = s->images;
    out->labels = s->labels;
    out->labels_b = s->labels_b;
    out->mix_lam = s->mix_lam;
    out->indices = s->indices;
    out->count = s->count;
    out->bad = s->bad;
    out->hw = l->aug.crop;
    out->batch = b;
    out->slot = (int)(s - l->slots);
    pthread_mutex_unlock(&l->mu);
    return 1;
}

int loader_next(Loader *l, LoaderBatch *b) {
    char err[SHARD_ERR_LEN + 128];
    int rc = loader_next_err(l, b, err, sizeof err);
    if (rc < 0) ct_die("%s", err);
    return rc;
}

void loader_release(Loader *l, LoaderBatch *b) {
    pthread_mutex_lock(&l->mu);
    if (b->slot < 0 || b->slot >= l->nslots || !l->slots[b->slot].held || l->slots[b->slot].batch != b->batch)
        ct_die("loader_release: batch %lld is not held", (long long)b->batch);
    Slot *s = &l->slots[b->slot];
    s->held = 0;
    s->batch = -1;
    pthread_cond_broadcast(&l->work_cv);
    pthread_mutex_unlock(&l->mu);
    b->slot = -1;
}

int64_t loader_batches_per_epoch(const Loader *l) { return sampler_num_batches(&l->sampler); }
uint64_t loader_samples_per_epoch(const Loader *l) { return sampler_num_samples(&l->sampler); }
int loader_channels(const Loader *l) { return l->C; }
size_t loader_batch_bytes(const Loader *l) { return (size_t)l->cfg.batch_size * l->img_bytes; }

size_t loader_memory_bytes(const Loader *l) {
    size_t m = l->fixed_bytes;
    for (int i = 0; i < l->nworkers; i++) m += __atomic_load_n(&l->workers[i].scratch.cap, __ATOMIC_RELAXED);
    return m;
}

uint64_t loader_bad_records(const Loader *l) { return __atomic_load_n(&l->n_bad, __ATOMIC_RELAXED); }

double loader_wait_seconds(const Loader *l) {
    pthread_mutex_lock((pthread_mutex_t *)&l->mu);
    double w = l->wait_s;
    pthread_mutex_unlock((pthread_mutex_t *)&l->mu);
    return w;
}

void loader_destroy(Loader *l) {
    if (!l) return;
    pthread_mutex_lock(&l->mu);
    l->stop = 1;
    pthread_cond_broadcast(&l->work_cv);
    pthread_mutex_unlock(&l->mu);
    for (int i = 0; i < l->nworkers; i++) {
        pthread_join(l->workers[i].thread, NULL);
        free(l->workers[i].decode);
        free(l->workers[i].aa_tmp);
        resample_scratch_free(&l->workers[i].scratch);
    }
    for (int i = 0; i < l->nslots; i++) {
        l->cfg.free(l->slots[i].images, l->cfg.alloc_ctx);
        free(l->slots[i].labels);
        free(l->slots[i].labels_b);
        free(l->slots[i].indices);
        free(l->slots[i].keys);
    }
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->work_cv);
    pthread_cond_destroy(&l->ready_cv);
    sampler_free(&l->sampler);
    free(l->verified);
    free(l->bad);
    free(l->workers);
    free(l->slots);
    free(l);
}
