// The memory-resident loader: a pool of worker threads decodes records of an opened shard (LZ4 straight
// into a per-worker buffer, or in place for raw shards), augments them (loader/augment.h) and writes
// uint8 NHWC batches into a ring of buffers ahead of the consumer.
//
// Determinism: which records form batch b of rank r, and every byte of it, depend only on
// (seed, epoch, rank, world, batch size, crop settings): never on the worker count or timing
// (each sample's randomness is keyed on (seed, epoch, record index), see loader/sampler.h).
//
// Memory is bounded: `prefetch` batch buffers plus one decode buffer and resample scratch per worker,
// plus the epoch permutation (4 bytes per record); loader_memory_bytes reports the total.
//
// Errors: a bad record (checksum, decode) stops nothing silently: loader_next dies with a message
// naming the shard file and the record (loader_next_err returns it instead).
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "loader/autoaug.h"
#include "loader/shard.h"

#ifdef __cplusplus
extern "C" {
#endif

// Batch buffer allocation hook, so the GPU side can pin the ring (cudaHostAlloc). Default (NULL):
// 64-byte aligned host malloc. Called from loader_create only (and free from loader_destroy).
typedef void *(*LoaderAllocFn)(size_t bytes, void *ctx);
typedef void (*LoaderFreeFn)(void *p, void *ctx);

typedef struct {
    int batch_size;   // per rank
    int crop;         // output is crop x crop x channels (loader_set_crop changes it between epochs)
    int max_crop;     // the largest crop loader_set_crop may ask for (the ring is sized for it); 0: crop
    int train;        // 1: RandomResizedCrop + flip, drop the last partial global batch; 0: eval
    int val_resize;   // eval: resize the short side to this first; 0: floor(crop / 0.875)
    int workers;      // worker threads, >= 1
    int prefetch;     // batch buffers in the ring; 0: workers + 2
    uint64_t seed;
    int rank, world;  // this rank's share of every epoch; world 0 counts as 1
    // RandomResizedCrop ranges; all 0: torchvision's defaults (0.08-1, 3/4-4/3).
    float scale_min, scale_max, ratio_min, ratio_max;
    int no_flip;      // 1: no horizontal flip in training
    int skip_crc;     // 1: do not verify payload checksums (each record is otherwise checked on first use)
    // 1: a record whose checksum or decoding fails is reported once on stderr (file, record,
    // reason) and its samples take the next record of the shard that reads, cropped by the bad
    // one's draws (the same bits whatever the worker count); 0: the batch fails with the error.
    int skip_bad;
    // Mixup/CutMix of training batches (loader/mix.h; all 0: off). prob and switch_prob as timm's
    // mix_prob and switch_prob.
    float mixup_alpha, cutmix_alpha, mix_prob, mix_switch_prob;
    // Per-sample policies on the uint8 crop after the flip, training only (loader/autoaug.h):
    // TrivialAugmentWide / RandAugment (policy AA_POLICY_NONE: off), then RandomErasing (p 0: off).
    AaConfig autoaug;
    EraseConfig erase;
    // Repeated augmentation (loader/sampler.h): copies of each record per epoch, training only;
    // 0 or 1: off.
    int ra_repeats;
    int test_delay_us;  // tests only: each worker sleeps this long after each chunk (a slow loader)
    LoaderAllocFn alloc;
    LoaderFreeFn free;
    void *alloc_ctx;
} LoaderConfig;

typedef struct {
    const uint8_t *images;    // count x crop x crop x channels, uint8 NHWC (capacity batch_size)
    const int32_t *labels;    // count
    const int32_t *labels_b;  // count: each sample's Mixup/CutMix partner's label (= labels when not mixing)
    float mix_lam;            // weight of `labels` in the soft target (1: not mixed)
    const uint64_t *indices;  // count record indices (into the shard)
    int count;                // real samples; < batch_size only in eval's last batch of a rank
    int bad;                  // samples whose record failed and took another's (LoaderConfig.skip_bad)
    int hw;                   // images are hw x hw (the crop of the epoch they belong to)
    int64_t batch;            // batch number within the epoch (0-based, this rank)
    int slot;                 // ring slot (for loader_release)
} LoaderBatch;

typedef struct Loader Loader;

// Starts the workers (idle until loader_start_epoch). Dies naming the flag on a bad config.
// The shard must stay open until loader_destroy.
Loader *loader_create(const Shard *shard, const LoaderConfig *cfg);
// Progressive resizing: epochs started from now on crop at `crop` (1..max_crop) instead. Takes
// effect at the next loader_start_epoch(_at), which drains the old epoch's work first; batches
// carry their own size (LoaderBatch.hw). Dies naming the sizes when crop is out of range.
void loader_set_crop(Loader *l, int crop);
// Begin producing epoch `epoch` (any order of epochs; resuming at epoch e gives the same batches).
// Batches of a previous epoch that were not consumed are discarded; all must have been released.
void loader_start_epoch(Loader *l, int64_t epoch);
// Same, starting at batch first_batch (0 <= first_batch <= batches per epoch) without producing the
// ones before it: resuming mid-epoch gives exactly the batches a full epoch would have given from there.
void loader_start_epoch_at(Loader *l, int64_t epoch, int64_t first_batch);
// Next batch of the current epoch, blocking until it is ready: 1, or 0 at the end of the epoch.
// Dies on a bad record, naming the file and the record.
int loader_next(Loader *l, LoaderBatch *b);
// Same, but -1 with the message in err instead of dying (the loader then stays stopped for this epoch).
int loader_next_err(Loader *l, LoaderBatch *b, char *err, size_t errlen);
// Give the buffer back to the ring. Batches may be released in any order; at most `prefetch`
// can be held at once (a consumer holding all of them would wait forever, so loader_next dies instead).
void loader_release(Loader *l, LoaderBatch *b);

int64_t loader_batches_per_epoch(const Loader *l);  // this rank; in eval ranks may differ by one
uint64_t loader_samples_per_epoch(const Loader *l); // this rank
int loader_channels(const Loader *l);
size_t loader_batch_bytes(const Loader *l);         // images bytes of one full batch at the current crop
size_t loader_memory_bytes(const Loader *l);        // everything the loader allocated
// Seconds the consumer has spent blocked in loader_next since create (diff it for a data-wait share).
double loader_wait_seconds(const Loader *l);
uint64_t loader_bad_records(const Loader *l);       // distinct records found bad so far (skip_bad)
// Stops and joins the workers, frees everything. Safe mid-epoch.
void loader_destroy(Loader *l);

#ifdef __cplusplus
}
#endif
