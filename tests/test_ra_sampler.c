// Repeated augmentation (loader/sampler.c, sampler_set_repeats) against the peers' index math:
// timm's RepeatAugSampler and torchvision's references' RASampler, re-implemented line by line in
// Python (neither ships in Debian's python3-torchvision) and run by TORCH_PY without shuffling;
// ctrain's lists are mapped back through the inverse of its permutation, so both describe
// positions in the shuffled order. Per configuration (records, ranks, copies, batch) every rank's
// samples of the epoch must be the peers' list cut to whole batches (timm's drop_last). Then,
// without Python: each (record, copy) has a draw key of its own and all keys of an epoch are
// distinct; the copies of a record go to different ranks when ranks >= copies; without repeats
// the keys are the record indices (the crops of runs without --ra-repeats keep their bits).
#include <string.h>
#include <unistd.h>

#include "loader/sampler.h"
#include "tests/test.h"
#include "util/common.h"

static const char *PY =
    "import sys, math\n"
    "def timm_rep(n, R, r, k, selected_round=256, selected_ratio=0):\n"
    "    num_samples = int(math.ceil(n * k / R)); total = num_samples * R\n"
    "    ratio = selected_ratio or R\n"
    "    sel = int(math.floor(n // selected_round * selected_round / ratio)) if selected_round else int(math.ceil(n / ratio))\n"
    "    idx = [i for i in range(n) for _ in range(k)]\n"
    "    pad = total - len(idx)\n"
    "    if pad > 0: idx += idx[:pad]\n"
    "    idx = idx[r:total:R]\n"
    "    return idx[:sel]\n"
    "def tv_ra(n, R, r, k):\n"
    "    num_samples = int(math.ceil(n * float(k) / R)); total = num_samples * R\n"
    "    sel = int(math.floor(n // 256 * 256 / R))\n"
    "    idx = [e for e in range(n) for i in range(k)]\n"
    "    idx += idx[:(total - len(idx))]\n"
    "    idx = idx[r:total:R]\n"
    "    return idx[:sel]\n"
    "out = open(sys.argv[2], 'w')\n"
    "for line in open(sys.argv[1]):\n"
    "    n, R, k, B = map(int, line.split())\n"
    "    for r in range(R):\n"
    "        a, b = timm_rep(n, R, r, k), tv_ra(n, R, r, k)\n"
    "        assert a == b, 'timm and torchvision disagree'\n"
    "        a = a[:len(a) // B * B]\n"
    "        out.write('%d %d %d %d %d %s\\n' % (n, R, k, B, r, ' '.join(map(str, a))))\n";

typedef struct {
    uint64_t n;
    int R, k, B;
} Conf;

int main(void) {
    test_rng = rng_make(27, 1, 1);
    const Conf confs[] = {{256, 1, 3, 32}, {1000, 2, 3, 16}, {777, 3, 4, 10}, {513, 4, 3, 7}, {600, 5, 2, 9},
                          {1030, 8, 3, 8}};
    char dir[] = "/tmp/ct_rasampler_XXXXXX";
    if (!mkdtemp(dir)) ct_die_errno("mkdtemp");
    char in[300], outp[300];
    snprintf(in, sizeof in, "%s/confs.txt", dir);
    snprintf(outp, sizeof outp, "%s/lists.txt", dir);
    FILE *f = fopen(in, "w");
    if (!f) ct_die_errno("%s", in);
    for (size_t i = 0; i < CT_ARRAY_LEN(confs); i++)
        fprintf(f, "%llu %d %d %d\n", (unsigned long long)confs[i].n, confs[i].R, confs[i].k, confs[i].B);
    fclose(f);
    char py[300];
    snprintf(py, sizeof py, "%s/ref.py", dir);
    test_write_file(py, PY, strlen(PY));
    const char *torch_py = getenv("TORCH_PY") ? getenv("TORCH_PY") : "/usr/bin/python3";
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "%s %s %s %s", torch_py, py, in, outp);
    int rc = system(cmd);
    CHECK(rc == 0, "reference script failed: %s", cmd);
    FILE *lf = rc == 0 ? fopen(outp, "r") : NULL;
    int lists = 0;
    for (size_t ci = 0; ci < CT_ARRAY_LEN(confs); ci++) {
        const Conf *c = &confs[ci];
        const int64_t epoch = 5;
        uint32_t *inv = ct_alloc(c->n * sizeof(uint32_t));
        uint64_t *allkeys = ct_alloc(c->n * c->k * sizeof(uint64_t) + 8);
        uint8_t *seen_key = ct_zalloc(c->n * (c->k + 1));
        uint64_t nkeys = 0;
        for (int r = 0; r < c->R; r++) {
            Sampler s;
            sampler_init(&s, c->n, c->B, r, c->R, 1, 77);
            sampler_set_repeats(&s, c->k);
            sampler_set_epoch(&s, epoch);
            for (uint64_t i = 0; i < c->n; i++) inv[s.perm[i]] = (uint32_t)i;
            int64_t nb = sampler_num_batches(&s);
            uint64_t *idx = ct_alloc(sizeof(uint64_t) * c->B), *keys = ct_alloc(sizeof(uint64_t) * c->B);
            // The Python list of this rank.
            uint64_t *ref = NULL;
            size_t nref = 0;
            if (lf) {
                char *line = NULL;
                size_t cap = 0;
                if (getline(&line, &cap, lf) > 0) {
                    char *p = line;
                    for (int t = 0; t < 5; t++) strtoull(p, &p, 10);
                    ref = ct_alloc(sizeof(uint64_t) * (c->n * c->k + 1));
                    for (;;) {
                        char *e;
                        unsigned long long v = strtoull(p, &e, 10);
                        if (e == p) break;
                        ref[nref++] = v;
                        p = e;
                    }
                }
                free(line);
                lists++;
            }
            size_t pos = 0;
            int mism = 0;
            for (int64_t b = 0; b < nb; b++) {
                int cnt = sampler_batch_keys(&s, b, idx, keys);
                CHECK(cnt == c->B, "n %llu R %d k %d: batch %lld has %d samples", (unsigned long long)c->n, c->R, c->k,
                      (long long)b, cnt);
                uint64_t plain[64];
                CHECK(sampler_batch(&s, b, plain) == cnt && !memcmp(plain, idx, sizeof(uint64_t) * cnt),
                      "sampler_batch and sampler_batch_keys disagree");
                for (int i = 0; i < cnt; i++, pos++) {
                    if (ref && (pos >= nref || ref[pos] != inv[idx[i]])) mism++;
                    CHECK(keys[i] % c->n == idx[i], "key %llu is not of record %llu", (unsigned long long)keys[i],
                          (unsigned long long)idx[i]);
                    uint64_t kk = keys[i] / c->n;
                    CHECK(kk <= (uint64_t)c->k, "copy number %llu", (unsigned long long)kk);
                    if (kk <= (uint64_t)c->k) {
                        CHECK(!seen_key[keys[i]], "draw key %llu used twice in an epoch", (unsigned long long)keys[i]);
                        seen_key[keys[i]] = 1;
                    }
                    nkeys++;
                }
            }
            CHECK(sampler_batch_keys(&s, nb, idx, keys) == 0, "batch past the end not empty");
            if (ref)
                CHECK(pos == nref && mism == 0, "n %llu R %d k %d B %d rank %d: %zu samples, peers %zu, %d differ",
                      (unsigned long long)c->n, c->R, c->k, c->B, r, pos, nref, mism);
            free(ref);
            free(idx);
            free(keys);
            sampler_free(&s);
        }
        // Copies of a record on different ranks: with R >= k, each run of k consecutive copies
        // is dealt to k different ranks (checked on rank-0 / rank-1 of the first global batch).
        if (c->R >= c->k && c->k > 1) {
            Sampler s0, s1;
            sampler_init(&s0, c->n, c->B, 0, c->R, 1, 77);
            sampler_init(&s1, c->n, c->B, 1, c->R, 1, 77);
            sampler_set_repeats(&s0, c->k);
            sampler_set_repeats(&s1, c->k);
            sampler_set_epoch(&s0, epoch);
            sampler_set_epoch(&s1, epoch);
            uint64_t a[64], b[64];
            sampler_batch(&s0, 0, a);
            sampler_batch(&s1, 0, b);
            CHECK(a[0] == b[0], "R %d k %d: the first record's second copy is not on rank 1", c->R, c->k);
            sampler_free(&s0);
            sampler_free(&s1);
        }
        (void)nkeys;
        free(inv);
        free(allkeys);
        free(seen_key);
    }
    if (lf) fclose(lf);
    {  // Without repeats the key is the record index.
        Sampler s;
        sampler_init(&s, 300, 8, 1, 2, 1, 77);
        sampler_set_epoch(&s, 3);
        uint64_t idx[8], keys[8];
        for (int64_t b = 0; b < sampler_num_batches(&s); b++) {
            int cnt = sampler_batch_keys(&s, b, idx, keys);
            CHECK(cnt == 8 && !memcmp(idx, keys, sizeof idx), "without repeats the keys must be the records");
        }
        sampler_free(&s);
    }
    CHECK(rc != 0 || lists > 0, "no list compared");
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) ct_warn("could not remove %s", dir);
    return test_summary("test_ra_sampler");
}
