// Epoch sampling (see sampler.h). Pure functions of (seed, epoch, rank, world, batch): every rank
// computes the same permutation independently, so no communication is needed to agree on it.
#include "loader/sampler.h"

#include "util/common.h"
#include "util/rng.h"

#define PERM_KEY 0x7065726d75746531ull  // "permute1": keeps the permutation stream apart from augmentation

void sampler_permutation(uint32_t *perm, uint64_t n, uint64_t seed, int64_t epoch) {
    for (uint64_t i = 0; i < n; i++) perm[i] = (uint32_t)i;
    Rng r = rng_make(seed, PERM_KEY, (uint64_t)epoch);
    for (uint64_t i = n; i > 1; i--) {  // Fisher-Yates: position i-1 takes a uniform pick of [0, i)
        uint32_t j = rng_below(&r, (uint32_t)i);
        uint32_t t = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = t;
    }
}

void sampler_init(Sampler *s, uint64_t n_records, int batch, int rank, int world, int train, uint64_t seed) {
    if (world <= 0) world = 1;
    if (batch < 1) ct_die("sampler: --batch-size must be >= 1 (got %d)", batch);
    if (rank < 0 || rank >= world) ct_die("sampler: rank %d outside world size %d", rank, world);
    if (n_records >= (1ull << 32)) ct_die("sampler: %llu records: at most 2^32-1 per shard", (unsigned long long)n_records);
    s->n = n_records;
    s->batch = batch;
    s->rank = rank;
    s->world = world;
    s->train = train;
    s->seed = seed;
    s->epoch = -1;
    s->repeats = 1;
    s->perm = train ? ct_alloc((n_records ? n_records : 1) * sizeof(uint32_t)) : NULL;
}

void sampler_set_epoch(Sampler *s, int64_t epoch) {
    if (s->train && s->epoch != epoch) sampler_permutation(s->perm, s->n, s->seed, epoch);
    s->epoch = epoch;
}

void sampler_set_repeats(Sampler *s, int k) {
    if (k < 1) ct_die("--ra-repeats: must be >= 1 (got %d)", k);
    if (k > 1 && !s->train) ct_die("internal: repeated augmentation on an evaluation sampler");
    s->repeats = k;
    if (k > 1 && sampler_num_batches(s) == 0)
        ct_die("--ra-repeats %d: %llu records give no batch of %d per rank (the peers' epoch is floor(n / 256) * 256 / "
               "ranks = %llu samples per rank); use more records or a smaller --batch-size",
               k, (unsigned long long)s->n, s->batch, (unsigned long long)((s->n / 256 * 256) / s->world));
}

uint64_t sampler_num_samples(const Sampler *s) {
    if (s->train && s->repeats > 1) {
        uint64_t selected = (s->n / 256 * 256) / s->world;  // RASampler's num_selected_samples
        return selected / s->batch * s->batch;
    }
    if (s->train) return (s->n / ((uint64_t)s->batch * s->world)) * s->batch;
    return s->n > (uint64_t)s->rank ? (s->n - s->rank + s->world - 1) / s->world : 0;
}

int64_t sampler_num_batches(const Sampler *s) {
    uint64_t m = sampler_num_samples(s);
    return (int64_t)((m + s->batch - 1) / s->batch);
}

int sampler_batch(const Sampler *s, int64_t b, uint64_t *idx) { return sampler_batch_keys(s, b, idx, NULL); }

int sampler_batch_keys(const Sampler *s, int64_t b, uint64_t *idx, uint64_t *keys) {
    if (s->epoch < 0) ct_die("sampler_batch before sampler_set_epoch");
    uint64_t m = sampler_num_samples(s);
    if (b < 0 || (uint64_t)b * s->batch >= m) return 0;
    uint64_t first = (uint64_t)b * s->batch;
    int count = (int)CT_MIN((uint64_t)s->batch, m - first);
    if (s->train && s->repeats > 1) {
        // The peers' list: L[q] = perm[q / k] for q < n k, then L[n k + q] = L[q] (padding); rank r
        // takes L[r], L[r + R], ...
        const uint64_t k = (uint64_t)s->repeats, nk = s->n * k;
        for (int i = 0; i < count; i++) {
            uint64_t g = (first + i) * s->world + s->rank, q = g % nk;
            idx[i] = s->perm[q / k];
            if (keys) keys[i] = idx[i] + s->n * (q % k + k * (g / nk));
        }
        return count;
    }
    if (s->train) {
        uint64_t base = (uint64_t)b * s->batch * s->world + (uint64_t)s->rank * s->batch;
        for (int i = 0; i < count; i++) idx[i] = s->perm[base + i];
    } else {
        for (int i = 0; i < count; i++) idx[i] = (first + i) * s->world + s->rank;
    }
    if (keys)
        for (int i = 0; i < count; i++) keys[i] = idx[i];
    return count;
}

void sampler_free(Sampler *s) {
    free(s->perm);
    s->perm = NULL;
}
