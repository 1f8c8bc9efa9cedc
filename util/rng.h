// Counter-based randomness: every random number is a pure function of (seed, stream keys, counter),
// never of thread timing or call order elsewhere, so results do not depend on worker counts.
// Keys are mixed with splitmix64; a generator is a key plus a counter.
#pragma once
#include <math.h>
#include <stdint.h>

static inline uint64_t ct_mix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// A stream keyed on up to three values, e.g. (seed, epoch, sample index).
typedef struct {
    uint64_t key;
    uint64_t counter;
} Rng;

static inline Rng rng_make(uint64_t seed, uint64_t a, uint64_t b) {
    Rng r;
    r.key = ct_mix64(ct_mix64(ct_mix64(seed) ^ a) ^ b);
    r.counter = 0;
    return r;
}
static inline uint64_t rng_u64(Rng *r) { return ct_mix64(r->key + 0xD1B54A32D192ED03ull * (++r->counter)); }
static inline uint32_t rng_u32(Rng *r) { return (uint32_t)(rng_u64(r) >> 32); }
// Uniform in [0, 1), 24 random bits (exactly representable in float).
static inline float rng_uniform(Rng *r) { return (float)(rng_u64(r) >> 40) * (1.0f / 16777216.0f); }
// Uniform integer in [0, n), n > 0, without modulo bias worth caring about (64-bit multiply-shift).
static inline uint32_t rng_below(Rng *r, uint32_t n) {
    return (uint32_t)(((unsigned __int128)rng_u64(r) * n) >> 64);
}
// Standard normal by Box-Muller (double inside for accuracy of the tails).
static inline float rng_normal(Rng *r) {
    double u1 = ((rng_u64(r) >> 11) + 1.0) * (1.0 / 9007199254740993.0);
    double u2 = (rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}
