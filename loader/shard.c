// Shard reader: map, validate everything against the file size before trusting it, decode records.
// The byte layout is specified in docs/SHARD_FORMAT.md; the writer is loader/shard_write.c.
#include "loader/shard.h"

#include <errno.h>
#include <fcntl.h>
#include <lz4.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "loader/image.h"
#include "util/common.h"
#include "util/crc32c.h"

_Static_assert(sizeof(ShardRecord) == 32, "ShardRecord must match the 32-byte index entry");

const char *shard_codec_name(uint32_t codec) {
    switch (codec) {
    case SHARD_CODEC_RAW: return "raw";
    case SHARD_CODEC_LZ4: return "lz4";
    case SHARD_CODEC_JPEG: return "jpeg";
    default: return "unknown";
    }
}

static uint32_t rd32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
static uint64_t rd64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

uint64_t shard_class_table_hash(const char *const *names, uint32_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    const uint64_t prime = 0x100000001b3ull;
#define FNV_BYTE(b) (h = (h ^ (uint8_t)(b)) * prime)
    for (int k = 0; k < 4; k++) FNV_BYTE(n >> (8 * k));
    for (uint32_t i = 0; i < n; i++) {
        uint32_t len = (uint32_t)strlen(names[i]);
        for (int k = 0; k < 4; k++) FNV_BYTE(len >> (8 * k));
        for (uint32_t j = 0; j < len; j++) FNV_BYTE(names[i][j]);
    }
#undef FNV_BYTE
    return h;
}

static void free_names(char **names, uint32_t n) {
    if (!names) return;
    for (uint32_t i = 0; i < n; i++) free(names[i]);
    free(names);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

// Validation of the whole file. Every offset is checked with overflow-safe arithmetic against size
// before anything at that offset is read.
static int validate(Shard *s, const char *name, char *err, size_t errlen) {
    const uint8_t *b = s->base;
    size_t size = s->size;
    if (size < SHARD_HEADER_SIZE)
        return ct_fail(err, errlen, "%s: %zu bytes, too short for a shard header (%u bytes): truncated or not a shard",
                       name, size, SHARD_HEADER_SIZE);
    if (memcmp(b, SHARD_MAGIC, 8) != 0) {
        static const uint8_t zero[8];
        if (memcmp(b, zero, 8) == 0)
            return ct_fail(err, errlen, "%s: header is zeroed: an unfinished packdata output, not a shard", name);
        return ct_fail(err, errlen, "%s: bad magic: not a ctrain shard", name);
    }
    uint32_t version = rd32(b + 8);
    if (version != SHARD_VERSION)
        return ct_fail(err, errlen, "%s: shard format version %u, this reader knows version %u", name, version,
                       SHARD_VERSION);
    if (rd32(b + 12) != SHARD_HEADER_SIZE)
        return ct_fail(err, errlen, "%s: header size %u, expected %u", name, rd32(b + 12), SHARD_HEADER_SIZE);
    uint64_t n_records = rd64(b + 16);
    uint32_t n_classes = rd32(b + 24), channels = rd32(b + 28), codec = rd32(b + 32), flags = rd32(b + 36);
    uint64_t class_off = rd64(b + 40), class_size = rd64(b + 48);
    uint64_t data_off = rd64(b + 56), data_size = rd64(b + 64);
    uint64_t index_off = rd64(b + 72), index_size = rd64(b + 80);
    uint64_t max_raw = rd64(b + 88);
    uint32_t max_h = rd32(b + 96), max_w = rd32(b + 100);
    for (int i = 104; i < 124; i++)
        if (b[i]) return ct_fail(err, errlen, "%s: reserved header byte %d is not zero", name, i);
    if (flags) return ct_fail(err, errlen, "%s: unknown header flags 0x%x", name, flags);
    if (channels != 1 && channels != 3) return ct_fail(err, errlen, "%s: channel count %u (must be 1 or 3)", name, channels);
    if (codec > SHARD_CODEC_JPEG) return ct_fail(err, errlen, "%s: unknown codec %u", name, codec);
    if (n_classes == 0 || n_classes > SHARD_MAX_CLASSES)
        return ct_fail(err, errlen, "%s: class count %u out of range 1..%u", name, n_classes, SHARD_MAX_CLASSES);
    // Sections: header | class table | data | index, index ending exactly at the end of the file.
    if (class_off != SHARD_HEADER_SIZE)
        return ct_fail(err, errlen, "%s: class table offset %llu, expected %u", name, (unsigned long long)class_off,
                       SHARD_HEADER_SIZE);
    if (class_size > size - class_off)
        return ct_fail(err, errlen, "%s: class table (%llu bytes at %llu) runs past the end of the file (%zu bytes): truncated?",
                       name, (unsigned long long)class_size, (unsigned long long)class_off, size);
    if (class_size < 4ull * n_classes)
        return ct_fail(err, errlen, "%s: class table of %llu bytes cannot hold %u classes", name,
                       (unsigned long long)class_size, n_classes);
    if (data_off < class_off + class_size || data_off % SHARD_ALIGN)
        return ct_fail(err, errlen, "%s: data offset %llu overlaps the class table or is not %u-aligned", name,
                       (unsigned long long)data_off, SHARD_ALIGN);
    if (data_off > size || data_size > size - data_off)
        return ct_fail(err, errlen, "%s: data section (%llu bytes at %llu) runs past the end of the file (%zu bytes): truncated?",
                       name, (unsigned long long)data_size, (unsigned long long)data_off, size);
    if (n_records > size / sizeof(ShardRecord))
        return ct_fail(err, errlen, "%s: record count %llu cannot fit in a file of %zu bytes: truncated?", name,
                       (unsigned long long)n_records, size);
    if (index_size != n_records * sizeof(ShardRecord))
        return ct_fail(err, errlen, "%s: index table is %llu bytes, %llu records need %llu", name,
                       (unsigned long long)index_size, (unsigned long long)n_records,
                       (unsigned long long)(n_records * sizeof(ShardRecord)));
    if (index_off < data_off + data_size || index_off % SHARD_ALIGN)
        return ct_fail(err, errlen, "%s: index offset %llu overlaps the data or is not %u-aligned", name,
                       (unsigned long long)index_off, SHARD_ALIGN);
    if (index_off > size || index_size != size - index_off)
        return ct_fail(err, errlen, "%s: file is %zu bytes but the header says it ends at %llu: %s", name, size,
                       (unsigned long long)(index_off + index_size),
                       index_off + index_size > size ? "truncated" : "trailing bytes");
    // Checksum of header (less its crc field), class table and index table.
    uint32_t crc = crc32c(0, b, 124);
    crc = crc32c(crc, b + class_off, class_size);
    crc = crc32c(crc, b + index_off, index_size);
    if (crc != rd32(b + 124))
        return ct_fail(err, errlen, "%s: header/table checksum mismatch (stored %08x, computed %08x): corrupt file", name,
                       rd32(b + 124), crc);

    // Class table: per class u32 length + bytes; names non-empty, no NUL, distinct.
    char **names = calloc(n_classes, sizeof(char *));
    if (!names) return ct_fail(err, errlen, "%s: out of memory for %u class names", name, n_classes);
    const uint8_t *p = b + class_off, *end = p + class_size;
    for (uint32_t c = 0; c < n_classes; c++) {
        if (end - p < 4) {
            free_names(names, c);
            return ct_fail(err, errlen, "%s: class table ends inside class %u", name, c);
        }
        uint32_t len = rd32(p);
        p += 4;
        if (len == 0 || len > SHARD_MAX_CLASS_NAME || (uint64_t)(end - p) < len || memchr(p, 0, len)) {
            free_names(names, c);
            return ct_fail(err, errlen, "%s: class %u: bad name (length %u)", name, c, len);
        }
        names[c] = malloc(len + 1);
        if (!names[c]) {
            free_names(names, c);
            return ct_fail(err, errlen, "%s: out of memory", name);
        }
        memcpy(names[c], p, len);
        names[c][len] = 0;
        p += len;
    }
    if (p != end) {
        free_names(names, n_classes);
        return ct_fail(err, errlen, "%s: %zu stray bytes after the class table", name, (size_t)(end - p));
    }
    char **sorted = malloc(n_classes * sizeof(char *));
    if (!sorted) {
        free_names(names, n_classes);
        return ct_fail(err, errlen, "%s: out of memory", name);
    }
    memcpy(sorted, names, n_classes * sizeof(char *));
    qsort(sorted, n_classes, sizeof(char *), cmp_str);
    for (uint32_t c = 1; c < n_classes; c++)
        if (strcmp(sorted[c - 1], sorted[c]) == 0) {
            ct_fail(err, errlen, "%s: class name '%s' appears twice in the class table", name, sorted[c]);
            free(sorted);
            free_names(names, n_classes);
            return -1;
        }
    free(sorted);

    // Index entries: in range, in order, sizes consistent with the codec.
    const ShardRecord *recs = (const ShardRecord *)(b + index_off);
    uint64_t prev_end = data_off, data_end = data_off + data_size, seen_max_raw = 0;
    uint32_t seen_max_h = 0, seen_max_w = 0;
    uint64_t total_raw = 0, total_stored = 0;
    for (uint64_t i = 0; i < n_records; i++) {
        ShardRecord r;
        memcpy(&r, &recs[i], sizeof r);
        const char *why = NULL;
        char buf[160];
        if (r.label >= n_classes) {
            snprintf(buf, sizeof buf, "label %u out of range (class count %u)", r.label, n_classes);
            why = buf;
        } else if (r.height == 0 || r.width == 0 || r.height > SHARD_MAX_DIM || r.width > SHARD_MAX_DIM) {
            snprintf(buf, sizeof buf, "bad image size %ux%u", r.width, r.height);
            why = buf;
        } else if ((uint64_t)r.height * r.width * channels != r.raw_size) {
            snprintf(buf, sizeof buf, "raw size %u != %ux%ux%u", r.raw_size, r.height, r.width, channels);
            why = buf;
        } else if (r.stored_size == 0) {
            why = "empty payload";
        } else if (r.offset % SHARD_ALIGN || r.offset < prev_end || r.offset > data_end ||
                   r.stored_size > data_end - r.offset) {
            snprintf(buf, sizeof buf, "payload (%u bytes at %llu) outside the data section [%llu, %llu) or out of order",
                     r.stored_size, (unsigned long long)r.offset, (unsigned long long)prev_end,
                     (unsigned long long)data_end);
            why = buf;
        } else if (codec == SHARD_CODEC_RAW && r.stored_size != r.raw_size) {
            why = "raw payload size differs from the image size";
        } else if (codec == SHARD_CODEC_LZ4 && (r.raw_size > LZ4_MAX_INPUT_SIZE ||
                                                r.stored_size > (uint32_t)LZ4_compressBound((int)r.raw_size))) {
            why = "LZ4 payload larger than LZ4 allows for its raw size";
        }
        if (why) {
            free_names(names, n_classes);
            return ct_fail(err, errlen, "%s: record %llu: %s", name, (unsigned long long)i, why);
        }
        prev_end = r.offset + r.stored_size;
        if (r.raw_size > seen_max_raw) seen_max_raw = r.raw_size;
        if (r.height > seen_max_h) seen_max_h = r.height;
        if (r.width > seen_max_w) seen_max_w = r.width;
        total_raw += r.raw_size;
        total_stored += r.stored_size;
    }
    if (seen_max_raw != max_raw || seen_max_h != max_h || seen_max_w != max_w) {
        free_names(names, n_classes);
        return ct_fail(err, errlen, "%s: header maxima (%llu bytes, %ux%u) disagree with the index (%llu bytes, %ux%u)",
                       name, (unsigned long long)max_raw, max_w, max_h, (unsigned long long)seen_max_raw, seen_max_w,
                       seen_max_h);
    }
    s->version = version;
    s->channels = channels;
    s->codec = codec;
    s->n_classes = n_classes;
    s->n_records = n_records;
    s->class_names = names;
    s->class_hash = shard_class_table_hash((const char *const *)names, n_classes);
    s->records = recs;
    s->data_offset = data_off;
    s->data_size = data_size;
    s->max_raw_size = max_raw;
    s->max_height = max_h;
    s->max_width = max_w;
    s->total_raw = total_raw;
    s->total_stored = total_stored;
    return 0;
}

int shard_open_mem_err(Shard *s, const void *data, size_t size, const char *name, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    // The index table is read in place as ShardRecord structs: the base must be 8-byte aligned.
    if ((uintptr_t)data % 8) return ct_fail(err, errlen, "%s: shard bytes in memory must be 8-byte aligned", name);
    s->base = data;
    s->size = size;
    if (validate(s, name, err, errlen) != 0) {
        memset(s, 0, sizeof *s);
        return -1;
    }
    s->path = ct_strdup(name);
    return 0;
}

int shard_open_err(Shard *s, const char *path, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ct_fail(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return ct_fail(err, errlen, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return ct_fail(err, errlen, "%s: not a regular file", path);
    }
    size_t size = (size_t)st.st_size;
    if (size < SHARD_HEADER_SIZE) {
        close(fd);
        return ct_fail(err, errlen, "%s: %zu bytes, too short for a shard header (%u bytes): truncated or not a shard",
                       path, size, SHARD_HEADER_SIZE);
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    int e = errno;
    close(fd);
    if (map == MAP_FAILED) return ct_fail(err, errlen, "%s: cannot map %zu bytes: %s", path, size, strerror(e));
    s->base = map;
    s->size = size;
    if (validate(s, path, err, errlen) != 0) {
        munmap(map, size);
        memset(s, 0, sizeof *s);
        return -1;
    }
    s->owns_mapping = 1;
    s->path = ct_strdup(path);
    return 0;
}

void shard_open(Shard *s, const char *path) {
    char err[SHARD_ERR_LEN];
    if (shard_open_err(s, path, err, sizeof err) != 0) ct_die("%s", err);
}

void shard_close(Shard *s) {
    if (s->owns_mapping && s->base) munmap((void *)s->base, s->size);
    free_names(s->class_names, s->n_classes);
    free(s->path);
    memset(s, 0, sizeof *s);
}

int shard_check_crc_err(const Shard *s, uint64_t i, char *err, size_t errlen) {
    if (i >= s->n_records)
        return ct_fail(err, errlen, "%s: record %llu out of range (%llu records)", s->path, (unsigned long long)i,
                       (unsigned long long)s->n_records);
    const ShardRecord *r = &s->records[i];
    uint32_t crc = crc32c(0, s->base + r->offset, r->stored_size);
    if (crc != r->crc)
        return ct_fail(err, errlen, "%s: record %llu: payload checksum mismatch (stored %08x, computed %08x): corrupt data",
                       s->path, (unsigned long long)i, r->crc, crc);
    return 0;
}

int shard_decode_err(const Shard *s, uint64_t i, uint8_t *dst, size_t dst_size, int verify_crc, char *err,
                     size_t errlen) {
    if (i >= s->n_records)
        return ct_fail(err, errlen, "%s: record %llu out of range (%llu records)", s->path, (unsigned long long)i,
                       (unsigned long long)s->n_records);
    const ShardRecord *r = &s->records[i];
    if (dst_size < r->raw_size)
        return ct_fail(err, errlen, "%s: record %llu: decode buffer of %zu bytes, record needs %u", s->path,
                       (unsigned long long)i, dst_size, r->raw_size);
    if (verify_crc && shard_check_crc_err(s, i, err, errlen) != 0) return -1;
    const uint8_t *src = s->base + r->offset;
    switch (s->codec) {
    case SHARD_CODEC_RAW: memcpy(dst, src, r->raw_size); return 0;
    case SHARD_CODEC_LZ4: {
        int got = LZ4_decompress_safe((const char *)src, (char *)dst, (int)r->stored_size, (int)r->raw_size);
        if (got != (int)r->raw_size)
            return ct_fail(err, errlen, "%s: record %llu: LZ4 payload %s (got %d of %u bytes)", s->path,
                           (unsigned long long)i, got < 0 ? "is corrupt" : "decodes to the wrong size", got, r->raw_size);
        return 0;
    }
    case SHARD_CODEC_JPEG: {
        char why[256];
        if (image_decode_jpeg_into(src, r->stored_size, s->channels, dst, r->height, r->width, why, sizeof why) != 0)
            return ct_fail(err, errlen, "%s: record %llu: %s", s->path, (unsigned long long)i, why);
        return 0;
    }
    }
    return ct_fail(err, errlen, "%s: unknown codec %u", s->path, s->codec);
}

void shard_decode(const Shard *s, uint64_t i, uint8_t *dst, size_t dst_size) {
    char err[SHARD_ERR_LEN];
    if (shard_decode_err(s, i, dst, dst_size, 1, err, sizeof err) != 0) ct_die("%s", err);
}

int shard_same_classes_err(const Shard *a, const Shard *b, char *err, size_t errlen) {
    if (a->class_hash == b->class_hash && a->n_classes == b->n_classes) {
        uint32_t c = 0;
        while (c < a->n_classes && strcmp(a->class_names[c], b->class_names[c]) == 0) c++;
        if (c == a->n_classes) return 0;
    }
    if (a->n_classes != b->n_classes)
        return ct_fail(err, errlen, "%s has %u classes but %s has %u: pack both splits with one packdata run", a->path,
                       a->n_classes, b->path, b->n_classes);
    for (uint32_t c = 0; c < a->n_classes; c++)
        if (strcmp(a->class_names[c], b->class_names[c]) != 0)
            return ct_fail(err, errlen, "class %u is '%s' in %s but '%s' in %s: the class tables differ", c,
                           a->class_names[c], a->path, b->class_names[c], b->path);
    return ct_fail(err, errlen, "class tables of %s and %s differ", a->path, b->path);
}
