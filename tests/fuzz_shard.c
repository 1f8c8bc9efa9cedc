// libFuzzer target: the non-exiting shard reader and record decoder over arbitrary bytes.
// Each input is tried twice: as is (the header checksum stops almost everything), and with the
// header+tables checksum recomputed so mutations reach the section, class-table and index checks
// and the LZ4/JPEG decoders. Decoding runs with and without payload checksum verification, so the
// decoders see corrupt payloads too. Nothing may crash, leak or read outside the input.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "loader/shard.h"
#include "util/crc32c.h"

static void exercise(const uint8_t *buf, size_t size) {
    Shard s;
    char err[SHARD_ERR_LEN];
    if (shard_open_mem_err(&s, buf, size, "fuzz.shard", err, sizeof err) != 0) return;
    uint64_t n = s.n_records < 64 ? s.n_records : 64;
    for (uint64_t i = 0; i < n; i++) {
        uint32_t raw = s.records[i].raw_size;
        if (raw > (4u << 20)) continue;  // a claimed 64k x 64k image: skip, the index check already ran
        uint8_t *dst = malloc(raw ? raw : 1);
        if (!dst) continue;
        shard_decode_err(&s, i, dst, raw, 1, err, sizeof err);
        shard_decode_err(&s, i, dst, raw, 0, err, sizeof err);
        free(dst);
    }
    shard_close(&s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    // The reader needs 8-byte alignment (records are read in place); malloc gives at least that.
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    exercise(buf, size);
    if (size >= SHARD_HEADER_SIZE) {
        uint64_t co, cs, io, is;
        memcpy(&co, buf + 40, 8);
        memcpy(&cs, buf + 48, 8);
        memcpy(&io, buf + 72, 8);
        memcpy(&is, buf + 80, 8);
        if (co <= size && cs <= size - co && io <= size && is <= size - io) {
            uint32_t c = crc32c(0, buf, 124);
            c = crc32c(c, buf + co, cs);
            c = crc32c(c, buf + io, is);
            memcpy(buf + 124, &c, 4);
            exercise(buf, size);
        }
    }
    free(buf);
    return 0;
}
