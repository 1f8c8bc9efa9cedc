// MNIST-format IDX import: {train,t10k}-images-idx3-ubyte and -labels-idx1-ubyte, gzipped or not
// (zlib's gzread passes plain files through), packed into train.shard and val.shard.
// IDX: big-endian u32 magic 0x00000803 (u8 images, 3 dims) or 0x00000801 (u8 labels, 1 dim), then
// the dimension sizes as big-endian u32, then the data.
#include <string.h>
#include <zlib.h>

#include "loader/shard.h"
#include "util/common.h"

const char *const shard_fashion_mnist_classes[10] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                      "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};

// Read a whole IDX file: dims checked against the magic, data size against the dims.
static uint8_t *read_idx(const char *path, uint32_t want_magic, uint32_t *dims, int ndims) {
    gzFile f = gzopen(path, "rb");
    if (!f) ct_die_errno("cannot open %s", path);
    uint8_t head[16];
    int hn = 4 + 4 * ndims;
    if (gzread(f, head, (unsigned)hn) != hn) ct_die("%s: truncated IDX header", path);
    uint32_t magic = (uint32_t)head[0] << 24 | (uint32_t)head[1] << 16 | (uint32_t)head[2] << 8 | head[3];
    if (magic != want_magic)
        ct_die("%s: IDX magic 0x%08x, expected 0x%08x (%s)", path, magic, want_magic,
               ndims == 3 ? "u8 images, 3 dimensions" : "u8 labels, 1 dimension");
    uint64_t total = 1;
    for (int d = 0; d < ndims; d++) {
        const uint8_t *p = head + 4 + 4 * d;
        dims[d] = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
        total *= dims[d];
        if (dims[d] == 0 || total > (1ull << 34)) ct_die("%s: bad IDX dimension %u", path, dims[d]);
    }
    if (ndims == 3 && (dims[1] > SHARD_MAX_DIM || dims[2] > SHARD_MAX_DIM))
        ct_die("%s: images of %ux%u are too large", path, dims[2], dims[1]);
    uint8_t *data = ct_alloc(total);
    uint64_t got = 0;
    while (got < total) {
        unsigned chunk = (unsigned)CT_MIN(total - got, (uint64_t)1 << 30);
        int n = gzread(f, data + got, chunk);
        if (n <= 0) ct_die("%s: truncated IDX data (%llu of %llu bytes)", path, (unsigned long long)got,
                           (unsigned long long)total);
        got += (uint64_t)n;
    }
    uint8_t extra;
    if (gzread(f, &extra, 1) != 0) ct_die("%s: trailing bytes after the IDX data", path);
    gzclose(f);
    return data;
}

// Prefer NAME.gz, fall back to NAME.
static char *find_idx(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 8;
    char *p = ct_alloc(n);
    snprintf(p, n, "%s/%s.gz", dir, name);
    if (ct_file_exists(p)) return p;
    snprintf(p, n, "%s/%s", dir, name);
    if (ct_file_exists(p)) return p;
    ct_die("%s: no %s(.gz) here (expected MNIST-format IDX files)", dir, name);
}

typedef struct {
    char *img_path, *lab_path;
    uint8_t *images, *labels;
    uint32_t n, h, w;
} IdxSplit;

static IdxSplit load_split(const char *idx_dir, const char *prefix, uint32_t n_classes) {
    IdxSplit s;
    char name[64];
    snprintf(name, sizeof name, "%s-images-idx3-ubyte", prefix);
    s.img_path = find_idx(idx_dir, name);
    snprintf(name, sizeof name, "%s-labels-idx1-ubyte", prefix);
    s.lab_path = find_idx(idx_dir, name);
    uint32_t idims[3], ldims[1];
    s.images = read_idx(s.img_path, 0x00000803u, idims, 3);
    s.labels = read_idx(s.lab_path, 0x00000801u, ldims, 1);
    if (idims[0] != ldims[0])
        ct_die("%s has %u images but %s has %u labels", s.img_path, idims[0], s.lab_path, ldims[0]);
    for (uint32_t i = 0; i < ldims[0]; i++)
        if (s.labels[i] >= n_classes)
            ct_die("%s: label %u of item %u is out of range (%u classes)", s.lab_path, s.labels[i], i, n_classes);
    s.n = idims[0];
    s.h = idims[1];
    s.w = idims[2];
    return s;
}

static void write_split(const IdxSplit *s, const char *out_path, const char *const *class_names,
                        uint32_t n_classes) {
    size_t img_bytes = (size_t)s->h * s->w;
    ShardWriter *wr = shard_writer_open(out_path, 1, SHARD_CODEC_LZ4, n_classes, class_names);
    for (uint32_t i = 0; i < s->n; i++) {
        size_t n;
        uint8_t *payload = shard_encode(SHARD_CODEC_LZ4, 0, s->images + img_bytes * i, s->h, s->w, 1, &n);
        shard_writer_add(wr, payload, (uint32_t)n, s->h, s->w, s->labels[i]);
        free(payload);
    }
    shard_writer_finish(wr);
}

static void free_split(IdxSplit *s) {
    free(s->images);
    free(s->labels);
    free(s->img_path);
    free(s->lab_path);
}

void idx_pack_dir(const char *idx_dir, const char *dst_dir, const char *const *class_names, uint32_t n_classes) {
    if (!class_names) {
        class_names = shard_fashion_mnist_classes;
        n_classes = 10;
    }
    // Read and check all four files before writing anything, so bad input leaves no shard behind.
    IdxSplit train = load_split(idx_dir, "train", n_classes);
    IdxSplit val = load_split(idx_dir, "t10k", n_classes);
    ct_mkdir_p(dst_dir);
    size_t n = strlen(dst_dir) + 32;
    char *out = ct_alloc(n);
    // val first: a caller that checks for train.shard (written last) sees both or neither complete.
    snprintf(out, n, "%s/val.shard", dst_dir);
    write_split(&val, out, class_names, n_classes);
    snprintf(out, n, "%s/train.shard", dst_dir);
    write_split(&train, out, class_names, n_classes);
    free(out);
    free_split(&train);
    free_split(&val);
}
