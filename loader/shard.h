// Shard files: one dataset split (train or val) packed by packdata into a single file that is
// mapped once and read in place. Format version 1, little-endian; the full spec with byte offsets
// is docs/SHARD_FORMAT.md. Layout:
//
//   header (128 bytes) | class table | data (one payload per record, 64-byte aligned) | index table
//
// The reader validates the header, the tables and every index entry against the file size (and
// the header+tables checksum) at open, so afterwards every record's bytes are known to lie inside
// the mapping; payload checksums are checked when a record is decoded.
//
// Two flavours of every reader entry point: the *_err ones never exit and return 0 or -1 with a
// message (naming the file and the record) in err, for the fuzzer and tests; the plain ones
// ct_die with that message.
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "shard files are little-endian and read in place: big-endian hosts are not supported"
#endif

#define SHARD_MAGIC "CTSHARD\x1a"  // 8 bytes at offset 0
#define SHARD_VERSION 1u
#define SHARD_HEADER_SIZE 128u
#define SHARD_ALIGN 64u                // every payload (and the index table) starts on this boundary
#define SHARD_MAX_CLASSES 1000000u
#define SHARD_MAX_CLASS_NAME 4096u     // bytes, without terminator
#define SHARD_MAX_DIM 65535u           // height and width limit of one record
#define SHARD_ERR_LEN 512              // enough room for any reader error message

// Payload codecs (header field; one codec per shard).
enum {
    SHARD_CODEC_RAW = 0,   // HWC uint8 as is
    SHARD_CODEC_LZ4 = 1,   // one LZ4 block (LZ4_compress_default / HC) of HWC uint8
    SHARD_CODEC_JPEG = 2,  // one baseline JPEG (grayscale when channels == 1, else YCbCr -> RGB)
};
const char *shard_codec_name(uint32_t codec);  // "raw", "lz4", "jpeg", "unknown"

// One index entry, exactly as stored (32 bytes, little-endian). raw_size == height*width*channels.
typedef struct {
    uint64_t offset;       // absolute file offset of the payload, multiple of SHARD_ALIGN
    uint32_t stored_size;  // payload bytes in the file
    uint32_t raw_size;     // decoded bytes (HWC uint8)
    uint32_t height;
    uint32_t width;
    uint32_t label;        // index into the class table
    uint32_t crc;          // crc32c of the stored payload bytes
} ShardRecord;

typedef struct {
    char *path;                 // as given to open (or the name given to shard_open_mem_err)
    const uint8_t *base;        // the whole file, mapped read-only: pin [base, base+size) for DMA
    size_t size;
    int owns_mapping;           // 1 when base came from mmap (unmapped by shard_close)
    uint32_t version;
    uint32_t channels;          // 1 or 3
    uint32_t codec;             // SHARD_CODEC_*
    uint32_t n_classes;
    uint64_t n_records;
    char **class_names;         // n_classes NUL-terminated strings (owned)
    uint64_t class_hash;        // shard_class_table_hash of the table
    const ShardRecord *records; // n_records entries, in the mapping
    uint64_t data_offset, data_size;
    uint64_t max_raw_size;      // largest raw_size of any record: size of a decode buffer
    uint32_t max_height, max_width;
    uint64_t total_raw, total_stored;  // sums over records (for --info and benchmarks)
} Shard;

// Open and validate. On failure: -1, err holds "FILE: reason" (or "FILE: record N: reason"), and
// *s is left closed (nothing to free).
int shard_open_err(Shard *s, const char *path, char *err, size_t errlen);
// Same over bytes already in memory (not copied; must outlive the Shard). For the fuzzer and tests.
int shard_open_mem_err(Shard *s, const void *data, size_t size, const char *name, char *err, size_t errlen);
void shard_open(Shard *s, const char *path);  // dies with the message
void shard_close(Shard *s);

// Decode record i into dst (at least records[i].raw_size bytes): HWC uint8, channels = s->channels.
// verify_crc: check the payload checksum first (always do this outside the fuzzer).
int shard_decode_err(const Shard *s, uint64_t i, uint8_t *dst, size_t dst_size, int verify_crc, char *err,
                     size_t errlen);
void shard_decode(const Shard *s, uint64_t i, uint8_t *dst, size_t dst_size);  // verifies, dies on error
// Check only the payload checksum of record i (no decode).
int shard_check_crc_err(const Shard *s, uint64_t i, char *err, size_t errlen);

// Class tables. The hash is 64-bit FNV-1a over (u32 count, then per class u32 length + bytes), all
// little-endian: train refuses a train/val pair whose hashes differ; checkpoints record it.
uint64_t shard_class_table_hash(const char *const *names, uint32_t n);
// 0 when a and b carry the same class table; else -1 with a message naming both files and the
// first class that differs.
int shard_same_classes_err(const Shard *a, const Shard *b, char *err, size_t errlen);

// ---------------------------------------------------------------------------------------------
// Writer (loader/shard_write.c). Records are appended in order; the file is written under a
// temporary name with a zeroed header, and only shard_writer_finish writes the real header and
// renames it into place, so an interrupted writer never leaves a file that opens.
typedef struct ShardWriter ShardWriter;
ShardWriter *shard_writer_open(const char *path, uint32_t channels, uint32_t codec, uint32_t n_classes,
                               const char *const *class_names);  // dies naming the path
// Append one already-encoded payload (see shard_encode). Dies on bad arguments.
void shard_writer_add(ShardWriter *w, const void *payload, uint32_t stored_size, uint32_t height, uint32_t width,
                      uint32_t label);
uint64_t shard_writer_count(const ShardWriter *w);
void shard_writer_finish(ShardWriter *w);  // writes index and header, fsyncs, renames; frees w
void shard_writer_abort(ShardWriter *w);   // removes the temporary; frees w
// Remove every writer's temporary file; async-signal-safe (for packdata's SIGINT/SIGTERM handler).
void shard_writer_cleanup_on_signal(void);

// Encode HWC uint8 pixels as a payload of the given codec. level: LZ4 -> 0 fast, >0 LZ4-HC level;
// JPEG -> quality 1..100. Returns a malloc'd buffer and its size in *out_size; dies on failure.
uint8_t *shard_encode(uint32_t codec, int level, const uint8_t *pixels, uint32_t height, uint32_t width,
                      uint32_t channels, size_t *out_size);

// ---------------------------------------------------------------------------------------------
// MNIST-format IDX import (loader/idx.c): reads {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]
// from idx_dir and writes dst_dir/val.shard (t10k) then dst_dir/train.shard, 1 channel, LZ4, with
// the given class names (NULL: the 10 Fashion-MNIST names). Dies naming the file on bad input.
// Every input is read and checked before anything is written, and train.shard is written last:
// its presence means both are complete. `train --demo` calls it to pack
// /usr/share/datasets/fashion-mnist into shards/fashion-mnist/.
extern const char *const shard_fashion_mnist_classes[10];
void idx_pack_dir(const char *idx_dir, const char *dst_dir, const char *const *class_names, uint32_t n_classes);

#ifdef __cplusplus
}
#endif
