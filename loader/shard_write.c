// Shard writer: appends payloads in order under a temporary name; the header (zeroed until then)
// and the index are written by shard_writer_finish, which fsyncs and renames. Output bytes depend
// only on the records given, in the order given (packdata relies on that for thread-count-independent
// files).
#include <lz4.h>
#include <lz4hc.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "loader/image.h"
#include "loader/shard.h"
#include "util/common.h"
#include "util/crc32c.h"

struct ShardWriter {
    AtomicFile af;
    uint32_t channels, codec, n_classes;
    uint64_t class_size;
    uint8_t *class_table;  // kept for the header checksum
    uint64_t data_offset;
    uint64_t pos;  // bytes written so far (= current file offset)
    ShardRecord *recs;
    uint64_t n, cap;
    uint64_t max_raw;
    uint32_t max_h, max_w;
    int slot;
};

// Temporary paths of open writers, for the signal handler: a fixed table of pointers that the
// handler only reads (unlink is async-signal-safe).
#define MAX_OPEN_WRITERS 16
static char *volatile open_tmp_paths[MAX_OPEN_WRITERS];

void shard_writer_cleanup_on_signal(void) {
    for (int i = 0; i < MAX_OPEN_WRITERS; i++) {
        char *p = open_tmp_paths[i];
        if (p) unlink(p);
    }
}

static void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

static void write_bytes(ShardWriter *w, const void *data, size_t n) {
    ct_atomic_write(&w->af, data, n);
    w->pos += n;
}

static void pad_to_align(ShardWriter *w) {
    static const uint8_t zeros[SHARD_ALIGN];
    size_t rem = (size_t)(w->pos % SHARD_ALIGN);
    if (rem) write_bytes(w, zeros, SHARD_ALIGN - rem);
}

ShardWriter *shard_writer_open(const char *path, uint32_t channels, uint32_t codec, uint32_t n_classes,
                               const char *const *class_names) {
    if (channels != 1 && channels != 3) ct_die("%s: channel count %u (must be 1 or 3)", path, channels);
    if (codec > SHARD_CODEC_JPEG) ct_die("%s: unknown codec %u", path, codec);
    if (n_classes == 0 || n_classes > SHARD_MAX_CLASSES)
        ct_die("%s: class count %u out of range 1..%u", path, n_classes, SHARD_MAX_CLASSES);
    for (uint32_t c = 0; c < n_classes; c++) {
        size_t len = strlen(class_names[c]);
        if (len == 0 || len > SHARD_MAX_CLASS_NAME) ct_die("%s: class %u: name empty or too long", path, c);
        for (uint32_t d = 0; d < c; d++)
            if (strcmp(class_names[c], class_names[d]) == 0)
                ct_die("%s: class name '%s' given twice", path, class_names[c]);
    }
    ShardWriter *w = ct_zalloc(sizeof *w);
    w->channels = channels;
    w->codec = codec;
    w->n_classes = n_classes;
    w->af = ct_atomic_open(path);
    w->slot = -1;
    for (int i = 0; i < MAX_OPEN_WRITERS; i++)
        if (!open_tmp_paths[i]) {
            open_tmp_paths[i] = w->af.tmp_path;
            w->slot = i;
            break;
        }
    // Zeroed header: the file does not open as a shard until finish writes the real one.
    uint8_t header[SHARD_HEADER_SIZE] = {0};
    write_bytes(w, header, sizeof header);
    size_t total = 0;
    for (uint32_t c = 0; c < n_classes; c++) total += 4 + strlen(class_names[c]);
    w->class_table = ct_alloc(total);
    w->class_size = total;
    uint8_t *p = w->class_table;
    for (uint32_t c = 0; c < n_classes; c++) {
        uint32_t len = (uint32_t)strlen(class_names[c]);
        put32(p, len);
        memcpy(p + 4, class_names[c], len);
        p += 4 + len;
    }
    write_bytes(w, w->class_table, total);
    pad_to_align(w);
    w->data_offset = w->pos;
    return w;
}

void shard_writer_add(ShardWriter *w, const void *payload, uint32_t stored_size, uint32_t height, uint32_t width,
                      uint32_t label) {
    const char *path = w->af.path;
    if (label >= w->n_classes) ct_die("%s: record %llu: label %u >= class count %u", path, (unsigned long long)w->n,
                                      label, w->n_classes);
    if (height == 0 || width == 0 || height > SHARD_MAX_DIM || width > SHARD_MAX_DIM)
        ct_die("%s: record %llu: image size %ux%u outside 1..%u", path, (unsigned long long)w->n, width, height,
               SHARD_MAX_DIM);
    uint64_t raw = (uint64_t)height * width * w->channels;
    if (raw > LZ4_MAX_INPUT_SIZE) ct_die("%s: record %llu: image of %llu bytes is too large", path,
                                         (unsigned long long)w->n, (unsigned long long)raw);
    if (stored_size == 0) ct_die("%s: record %llu: empty payload", path, (unsigned long long)w->n);
    if (w->codec == SHARD_CODEC_RAW && stored_size != raw)
        ct_die("%s: record %llu: raw payload of %u bytes for a %llu-byte image", path, (unsigned long long)w->n,
               stored_size, (unsigned long long)raw);
    if (w->n == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 1024;
        w->recs = ct_realloc(w->recs, w->cap * sizeof(ShardRecord));
    }
    pad_to_align(w);
    ShardRecord *r = &w->recs[w->n++];
    r->offset = w->pos;
    r->stored_size = stored_size;
    r->raw_size = (uint32_t)raw;
    r->height = height;
    r->width = width;
    r->label = label;
    r->crc = crc32c(0, payload, stored_size);
    write_bytes(w, payload, stored_size);
    if (raw > w->max_raw) w->max_raw = raw;
    if (height > w->max_h) w->max_h = height;
    if (width > w->max_w) w->max_w = width;
}

uint64_t shard_writer_count(const ShardWriter *w) { return w->n; }

static void release_slot(ShardWriter *w) {
    if (w->slot >= 0) open_tmp_paths[w->slot] = NULL;
    w->slot = -1;
}

void shard_writer_finish(ShardWriter *w) {
    uint64_t data_size = w->pos - w->data_offset;
    pad_to_align(w);
    uint64_t index_offset = w->pos;
    uint64_t index_size = w->n * sizeof(ShardRecord);
    write_bytes(w, w->recs, index_size);

    uint8_t h[SHARD_HEADER_SIZE] = {0};
    memcpy(h, SHARD_MAGIC, 8);
    put32(h + 8, SHARD_VERSION);
    put32(h + 12, SHARD_HEADER_SIZE);
    put64(h + 16, w->n);
    put32(h + 24, w->n_classes);
    put32(h + 28, w->channels);
    put32(h + 32, w->codec);
    put32(h + 36, 0);
    put64(h + 40, SHARD_HEADER_SIZE);
    put64(h + 48, w->class_size);
    put64(h + 56, w->data_offset);
    put64(h + 64, data_size);
    put64(h + 72, index_offset);
    put64(h + 80, index_size);
    put64(h + 88, w->max_raw);
    put32(h + 96, w->max_h);
    put32(h + 100, w->max_w);
    uint32_t crc = crc32c(0, h, 124);
    crc = crc32c(crc, w->class_table, w->class_size);
    crc = crc32c(crc, w->recs, index_size);
    put32(h + 124, crc);
    if (fseek(w->af.f, 0, SEEK_SET) != 0) ct_die_errno("%s: seeking to the header", w->af.tmp_path);
    ct_atomic_write(&w->af, h, sizeof h);
    release_slot(w);
    ct_atomic_commit(&w->af);
    free(w->class_table);
    free(w->recs);
    free(w);
}

void shard_writer_abort(ShardWriter *w) {
    release_slot(w);
    ct_atomic_abort(&w->af);
    free(w->class_table);
    free(w->recs);
    free(w);
}

uint8_t *shard_encode(uint32_t codec, int level, const uint8_t *pixels, uint32_t height, uint32_t width,
                      uint32_t channels, size_t *out_size) {
    uint64_t raw = (uint64_t)height * width * channels;
    if (raw == 0 || raw > LZ4_MAX_INPUT_SIZE) ct_die("shard_encode: image %ux%ux%u has a bad size", width, height, channels);
    switch (codec) {
    case SHARD_CODEC_RAW: {
        uint8_t *out = ct_alloc(raw);
        memcpy(out, pixels, raw);
        *out_size = raw;
        return out;
    }
    case SHARD_CODEC_LZ4: {
        int bound = LZ4_compressBound((int)raw);
        uint8_t *out = ct_alloc((size_t)bound);
        int n = level > 0 ? LZ4_compress_HC((const char *)pixels, (char *)out, (int)raw, bound, level)
                          : LZ4_compress_default((const char *)pixels, (char *)out, (int)raw, bound);
        if (n <= 0) ct_die("LZ4 compression failed for a %ux%ux%u image", width, height, channels);
        *out_size = (size_t)n;
        return out;
    }
    case SHARD_CODEC_JPEG: {
        char err[256];
        uint8_t *out = image_encode_jpeg(pixels, height, width, channels, level, out_size, err, sizeof err);
        if (!out) ct_die("JPEG encoding failed: %s", err);
        return out;
    }
    }
    ct_die("shard_encode: unknown codec %u", codec);
}
