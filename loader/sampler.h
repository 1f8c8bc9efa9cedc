// Which records form each batch of each rank in an epoch.
//   train: a permutation of all records from (seed, epoch), identical on every rank. Global batch g
//          is perm[g*B*R, (g+1)*B*R); rank r takes the r-th B of it. Only the last partial global
//          batch is dropped, so every rank sees exactly floor(N / (B*R)) batches of B.
//   eval:  no shuffle; rank r takes records r, r+R, r+2R, ... in B-sized batches, the last one
//          partial. Every record is visited exactly once across ranks, with no padding; ranks may
//          differ by one batch and one record.
//   train with repeated augmentation (sampler_set_repeats k > 1; timm's RepeatAugSampler and
//          torchvision's RASampler): the permutation with each record repeated k times in a row,
//          padded by its own head to a multiple of R, dealt round-robin to the ranks (consecutive
//          copies of a record land on different ranks); each rank keeps the first
//          floor((n // 256 * 256) / R) of its share, the peers' epoch length (about n / R, so
//          about n / k distinct records per epoch), in B-sized batches, the last partial one
//          dropped. Every copy has a draw key of its own (sampler_batch_keys), so the copies are
//          cropped and augmented differently.
#pragma once
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    uint64_t n;        // records in the shard
    int batch;         // per-rank batch size
    int rank, world;
    int train;
    uint64_t seed;
    int64_t epoch;     // -1 before sampler_set_epoch
    int repeats;       // train: repeated augmentation, copies of each record per epoch (<= 1: off)
    uint32_t *perm;    // train: n entries for the current epoch
} Sampler;

// Dies naming the problem (n >= 2^32, bad rank/world/batch).
void sampler_init(Sampler *s, uint64_t n_records, int batch, int rank, int world, int train, uint64_t seed);
void sampler_set_epoch(Sampler *s, int64_t epoch);
// Repeated augmentation (train only; k >= 1). Dies when the epoch would hold no batch.
void sampler_set_repeats(Sampler *s, int k);
int64_t sampler_num_batches(const Sampler *s);  // this rank
uint64_t sampler_num_samples(const Sampler *s); // this rank
// Record indices of this rank's batch b into idx (capacity batch); returns the count (0 past the end).
int sampler_batch(const Sampler *s, int64_t b, uint64_t *idx);
// Same, plus each sample's draw key (keys may be NULL): the key of the augmentation draws, the
// record index itself except for repeated copies, whose copy j > 0 of record i has key i + j * n.
int sampler_batch_keys(const Sampler *s, int64_t b, uint64_t *idx, uint64_t *keys);
void sampler_free(Sampler *s);

// The permutation itself (Fisher-Yates driven by rng_make(seed, PERM key, epoch)); exposed for tests.
void sampler_permutation(uint32_t *perm, uint64_t n, uint64_t seed, int64_t epoch);

#ifdef __cplusplus
}
#endif
