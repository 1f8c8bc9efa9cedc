// Shard writer/reader: round trips for every codec, and every kind of bad file rejected with an
// error that names the file (and the record, for record-level damage), never a crash.
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <jpeglib.h>

#include "loader/image.h"
#include "loader/shard.h"
#include "tests/test.h"
#include "util/common.h"
#include "util/crc32c.h"
#include "util/rng.h"

static char dir[64];

typedef struct {
    uint8_t *px;
    uint32_t h, w, label;
} Img;

#define NIMG 6
static Img imgs[NIMG];
static const char *names[3] = {"alpha", "beta", "gamma"};

// Smooth images with a little noise: compressible like photos, so LZ4 and JPEG have work to do.
static void make_images(uint32_t C) {
    Rng r = rng_make(7, C, 0);
    for (int i = 0; i < NIMG; i++) {
        Img *im = &imgs[i];
        im->h = 5 + rng_below(&r, 40);
        im->w = 5 + rng_below(&r, 40);
        im->label = (uint32_t)i % 3;
        free(im->px);
        im->px = ct_alloc((size_t)im->h * im->w * C);
        for (uint32_t y = 0; y < im->h; y++)
            for (uint32_t x = 0; x < im->w; x++)
                for (uint32_t c = 0; c < C; c++)
                    im->px[(y * im->w + x) * C + c] = (uint8_t)((x * 5 + y * 3 + c * 40 + i * 11) + rng_below(&r, 4));
    }
}

static void path_for(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", dir, name); }

static void write_shard(const char *path, uint32_t C, uint32_t codec, int level) {
    ShardWriter *w = shard_writer_open(path, C, codec, 3, names);
    for (int i = 0; i < NIMG; i++) {
        size_t n;
        uint8_t *p = shard_encode(codec, level, imgs[i].px, imgs[i].h, imgs[i].w, C, &n);
        shard_writer_add(w, p, (uint32_t)n, imgs[i].h, imgs[i].w, imgs[i].label);
        free(p);
    }
    shard_writer_finish(w);
}

static uint8_t *slurp(const char *path, size_t *n) { return (uint8_t *)ct_read_file(path, n); }
static uint32_t g32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
static uint64_t g64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}
static void s32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void s64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

// Recompute the header+tables checksum after a deliberate edit, so the damage reaches the deeper
// checks instead of stopping at the checksum.
static void fix_crc(uint8_t *b) {
    uint64_t co = g64(b + 40), cs = g64(b + 48), io = g64(b + 72), is = g64(b + 80);
    uint32_t c = crc32c(0, b, 124);
    c = crc32c(c, b + co, cs);
    c = crc32c(c, b + io, is);
    s32(b + 124, c);
}
static uint8_t *rec(uint8_t *b, int i) { return b + g64(b + 72) + 32 * (size_t)i; }

// Writes the damaged bytes to a file named after the case and expects open (or, with decode_rec
// >= 0, decode of that record) to fail with the file name and `needle` in the message.
static void expect_bad(const char *name, const uint8_t *bytes, size_t n, int decode_rec, const char *needle) {
    char path[256], err[SHARD_ERR_LEN];
    path_for(path, sizeof path, name);
    test_write_file(path, bytes, n);
    Shard s;
    int rc = shard_open_err(&s, path, err, sizeof err);
    if (decode_rec >= 0) {
        CHECK(rc == 0, "%s: open should succeed, got: %s", name, err);
        if (rc != 0) return;
        uint8_t *buf = ct_alloc(s.max_raw_size);
        rc = shard_decode_err(&s, (uint64_t)decode_rec, buf, s.max_raw_size, 1, err, sizeof err);
        free(buf);
        shard_close(&s);
    }
    CHECK(rc == -1, "%s: accepted", name);
    if (rc == 0) {
        if (decode_rec < 0) shard_close(&s);
        return;
    }
    CHECK(strstr(err, path) != NULL, "%s: error does not name the file: %s", name, err);
    CHECK(strstr(err, needle) != NULL, "%s: error lacks '%s': %s", name, needle, err);
}

static void test_round_trip(uint32_t C, uint32_t codec, int level) {
    make_images(C);
    char path[256];
    path_for(path, sizeof path, "rt.shard");
    write_shard(path, C, codec, level);
    Shard s;
    char err[SHARD_ERR_LEN];
    int rc = shard_open_err(&s, path, err, sizeof err);
    CHECK(rc == 0, "open: %s", err);
    if (rc) return;
    CHECK(s.n_records == NIMG && s.n_classes == 3 && s.channels == C && s.codec == codec, "header fields");
    CHECK(strcmp(s.class_names[1], "beta") == 0, "class name");
    CHECK(s.class_hash == shard_class_table_hash(names, 3), "class hash");
    CHECK(((uintptr_t)s.base % 4096) == 0 && s.size > 0, "mapping exposed");
    uint8_t *buf = ct_alloc(s.max_raw_size);
    for (int i = 0; i < NIMG; i++) {
        const ShardRecord *r = &s.records[i];
        CHECK(r->height == imgs[i].h && r->width == imgs[i].w && r->label == imgs[i].label, "record %d fields", i);
        CHECK(r->offset % SHARD_ALIGN == 0, "record %d alignment", i);
        rc = shard_decode_err(&s, i, buf, s.max_raw_size, 1, err, sizeof err);
        CHECK(rc == 0, "decode %d: %s", i, err);
        size_t n = r->raw_size;
        int worst = 0;
        double sum = 0;
        for (size_t k = 0; k < n; k++) {
            int d = abs((int)buf[k] - (int)imgs[i].px[k]);
            worst = d > worst ? d : worst;
            sum += d;
        }
        if (codec == SHARD_CODEC_JPEG)
            CHECK(sum / n < 10, "jpeg record %d mean error %.2f", i, sum / n);
        else
            CHECK(worst == 0, "%s record %d differs by %d", shard_codec_name(codec), i, worst);
    }
    rc = shard_decode_err(&s, NIMG, buf, s.max_raw_size, 1, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "out of range"), "record index out of range: %s", err);
    rc = shard_decode_err(&s, 0, buf, 1, 1, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "buffer"), "small buffer refused: %s", err);
    free(buf);
    shard_close(&s);
}

static void test_bad_files(void) {
    make_images(3);
    char path[256];
    path_for(path, sizeof path, "good.shard");
    write_shard(path, 3, SHARD_CODEC_LZ4, 0);
    size_t n;
    uint8_t *good = slurp(path, &n);
    uint8_t *b = ct_alloc(n + 64);
#define RESET() memcpy(b, good, n)

    RESET(); b[0] ^= 1;                         expect_bad("magic.shard", b, n, -1, "bad magic");
    RESET(); s32(b + 8, 2); fix_crc(b);         expect_bad("version.shard", b, n, -1, "version 2");
    RESET(); memset(b, 0, 128);                 expect_bad("zeroed.shard", b, n, -1, "unfinished");
    expect_bad("empty.shard", b, 0, -1, "too short");
    RESET();                                    expect_bad("short.shard", b, 100, -1, "too short");
    RESET();                                    expect_bad("trunc1.shard", b, n - 1, -1, "truncated");
    RESET();                                    expect_bad("trunc2.shard", b, n / 2, -1, "truncated");
    RESET();                                    expect_bad("trunc3.shard", b, 130, -1, "truncated");
    RESET(); b[n] = 0;                          expect_bad("trailing.shard", b, n + 1, -1, "trailing");
    RESET(); b[130] ^= 0x20;                    expect_bad("crc.shard", b, n, -1, "checksum");
    RESET(); rec(b, 4)[0] ^= 0x40;              expect_bad("crc2.shard", b, n, -1, "checksum");
    RESET(); s32(b + 28, 2); fix_crc(b);        expect_bad("chan.shard", b, n, -1, "channel count 2");
    RESET(); s32(b + 32, 9); fix_crc(b);        expect_bad("codec.shard", b, n, -1, "codec 9");
    RESET(); s32(b + 24, 0); fix_crc(b);        expect_bad("ncls0.shard", b, n, -1, "class count 0");
    RESET(); s32(b + 24, 4); fix_crc(b);        expect_bad("ncls4.shard", b, n, -1, "class");
    RESET(); s32(b + 128, 200); fix_crc(b);     expect_bad("clsname.shard", b, n, -1, "class 0");
    {
        RESET();
        // Rename class 2 "gamma" to "alpha" (same length): duplicate names.
        memcpy(b + 128 + (4 + 5) + (4 + 4) + 4, "alpha", 5);
        fix_crc(b);
        expect_bad("dupname.shard", b, n, -1, "twice");
    }
    RESET(); s64(b + 16, g64(b + 16) + 1); fix_crc(b); expect_bad("count.shard", b, n, -1, "index table");
    RESET(); s64(b + 16, UINT64_MAX / 2); fix_crc(b);  expect_bad("count2.shard", b, n, -1, "record count");
    RESET(); s64(b + 72, g64(b + 72) + 8); fix_crc(b); expect_bad("ioff.shard", b, n, -1, "index offset");
    RESET(); s64(b + 64, n); fix_crc(b);               expect_bad("dsize.shard", b, n, -1, "data section");
    RESET(); s64(b + 56, 64); fix_crc(b);              expect_bad("doff.shard", b, n, -1, "data offset");
    RESET(); s64(b + 40, 64); fix_crc(b);              expect_bad("coff.shard", b, n, -1, "class table offset");
    RESET(); b[110] = 1; fix_crc(b);                   expect_bad("reserved.shard", b, n, -1, "reserved");
    RESET(); s32(b + 36, 1); fix_crc(b);               expect_bad("flags.shard", b, n, -1, "flags");
    RESET(); s64(b + 88, g64(b + 88) + 1); fix_crc(b); expect_bad("maxraw.shard", b, n, -1, "maxima");
    // Record-level damage: every message names the record.
    RESET(); s32(rec(b, 2) + 24, 3); fix_crc(b);       expect_bad("label.shard", b, n, -1, "record 2: label 3");
    RESET(); s32(rec(b, 1) + 24, 0xFFFFFFFFu); fix_crc(b); expect_bad("label2.shard", b, n, -1, "record 1: label");
    RESET(); s32(rec(b, 3) + 16, 0); fix_crc(b);       expect_bad("height.shard", b, n, -1, "record 3: bad image size");
    RESET(); s32(rec(b, 3) + 20, 70000); fix_crc(b);   expect_bad("width.shard", b, n, -1, "record 3: bad image size");
    RESET(); s32(rec(b, 0) + 12, g32(rec(b, 0) + 12) + 1); fix_crc(b); expect_bad("raw.shard", b, n, -1, "record 0: raw size");
    RESET(); s32(rec(b, 5) + 8, 0); fix_crc(b);        expect_bad("stored0.shard", b, n, -1, "record 5: empty");
    RESET(); s64(rec(b, 4), g64(rec(b, 4)) + 8); fix_crc(b); expect_bad("align.shard", b, n, -1, "record 4: payload");
    RESET(); s64(rec(b, 4), n * 4); fix_crc(b);        expect_bad("offbig.shard", b, n, -1, "record 4: payload");
    RESET(); s64(rec(b, 4), g64(rec(b, 2))); fix_crc(b); expect_bad("order.shard", b, n, -1, "record 4: payload");
    RESET(); s32(rec(b, 5) + 8, 0x7FFFFFFF); fix_crc(b); expect_bad("stored.shard", b, n, -1, "record 5");
    {
        // Payload past the end of the data section (stored size grown into the index).
        RESET();
        uint8_t *r5 = rec(b, 5);
        s32(r5 + 8, (uint32_t)(g64(b + 56) + g64(b + 64) - g64(r5) + 1));
        fix_crc(b);
        expect_bad("pastdata.shard", b, n, -1, "record 5");
    }
    // Payload damage is caught at decode time, naming the record.
    RESET(); b[g64(rec(b, 3)) + 2] ^= 0x01;            expect_bad("payload.shard", b, n, 3, "record 3: payload checksum");
    {
        // Corrupt LZ4 with a matching checksum: the decoder must refuse it, not overrun.
        RESET();
        uint8_t *r = rec(b, 1);
        uint8_t *p = b + g64(r);
        uint32_t st = g32(r + 8);
        memset(p, 0xF0, st);  // literal-length runs that claim far more than the block holds
        s32(r + 28, crc32c(0, p, st));
        fix_crc(b);
        expect_bad("lz4.shard", b, n, 1, "record 1: LZ4");
    }
    {
        // A payload that decodes to fewer bytes than raw_size.
        RESET();
        uint8_t *r = rec(b, 0);
        uint8_t *p = b + g64(r);
        p[0] = 0x10;  // one literal, end of block
        p[1] = 0x55;
        s32(r + 8, 2);
        s32(r + 28, crc32c(0, p, 2));
        fix_crc(b);
        expect_bad("lz4short.shard", b, n, 0, "record 0: LZ4");
    }
    free(good);
    free(b);
#undef RESET
}

static void test_jpeg_payload_checks(void) {
    make_images(3);
    char path[256];
    path_for(path, sizeof path, "jpg.shard");
    write_shard(path, 3, SHARD_CODEC_JPEG, 90);
    size_t n;
    uint8_t *b = slurp(path, &n);
    // Claim a different size than the JPEG has (raw size kept consistent): decode must refuse.
    uint8_t *r = rec(b, 2);
    uint32_t h = g32(r + 16);
    s32(r + 16, h + 1);
    s32(r + 12, (h + 1) * g32(r + 20) * 3);
    uint64_t maxraw = 0;
    uint32_t mh = 0;
    for (int i = 0; i < NIMG; i++) {
        maxraw = CT_MAX(maxraw, g32(rec(b, i) + 12));
        mh = CT_MAX(mh, g32(rec(b, i) + 16));
    }
    s64(b + 88, maxraw);
    s32(b + 96, mh);
    fix_crc(b);
    expect_bad("jpgdim.shard", b, n, 2, "record 2: JPEG decode failed: JPEG is 44x22");
    free(b);
    b = slurp(path, &n);
    r = rec(b, 4);
    uint8_t *p = b + g64(r);
    uint32_t st = g32(r + 8);
    memset(p + st / 3, 0x00, st / 3);
    s32(r + 28, crc32c(0, p, st));
    fix_crc(b);
    char p2[256], err[SHARD_ERR_LEN];
    path_for(p2, sizeof p2, "jpgbad.shard");
    test_write_file(p2, b, n);
    Shard s;
    CHECK(shard_open_err(&s, p2, err, sizeof err) == 0, "open %s", err);
    uint8_t *buf = ct_alloc(s.max_raw_size);
    int rc = shard_decode_err(&s, 4, buf, s.max_raw_size, 1, err, sizeof err);
    // Zeroed entropy data may still decode (to gray); what matters is no crash and, if it fails,
    // a message naming the record.
    CHECK(rc == 0 || strstr(err, "record 4"), "corrupt jpeg: %s", err);
    free(buf);
    shard_close(&s);
    free(b);
}

static void test_classes_and_memory(void) {
    make_images(1);
    char pa[256], pb[256], err[SHARD_ERR_LEN];
    path_for(pa, sizeof pa, "a.shard");
    path_for(pb, sizeof pb, "b.shard");
    write_shard(pa, 1, SHARD_CODEC_RAW, 0);
    const char *other[3] = {"alpha", "beta", "delta"};
    ShardWriter *w = shard_writer_open(pb, 1, SHARD_CODEC_RAW, 3, other);
    shard_writer_add(w, imgs[0].px, imgs[0].h * imgs[0].w, imgs[0].h, imgs[0].w, 2);
    shard_writer_finish(w);
    Shard a, b, a2;
    shard_open(&a, pa);
    shard_open(&b, pb);
    shard_open(&a2, pa);
    CHECK(shard_same_classes_err(&a, &a2, err, sizeof err) == 0, "same tables");
    CHECK(shard_same_classes_err(&a, &b, err, sizeof err) == -1 && strstr(err, "gamma") && strstr(err, "delta") &&
              strstr(err, pa) && strstr(err, pb),
          "different tables named: %s", err);
    CHECK(a.class_hash != b.class_hash, "hashes differ");
    const char *swapped[3] = {"beta", "alpha", "gamma"};
    CHECK(shard_class_table_hash(swapped, 3) != a.class_hash, "order matters in the hash");
    CHECK(shard_class_table_hash(names, 2) != a.class_hash, "count matters in the hash");
    // In-memory open (the fuzzer's path) sees the same file.
    Shard m;
    CHECK(shard_open_mem_err(&m, a.base, a.size, "mem", err, sizeof err) == 0, "open_mem: %s", err);
    CHECK(m.n_records == a.n_records && m.class_hash == a.class_hash && !m.owns_mapping, "open_mem fields");
    shard_close(&m);
    CHECK(shard_open_mem_err(&m, a.base + 1, a.size - 1, "odd", err, sizeof err) == -1 && strstr(err, "aligned"),
          "unaligned memory refused: %s", err);
    shard_close(&a);
    shard_close(&a2);
    shard_close(&b);
    CHECK(shard_open_err(&a, "/nonexistent/x.shard", err, sizeof err) == -1 && strstr(err, "/nonexistent/x.shard"),
          "missing file named: %s", err);
    CHECK(shard_open_err(&a, dir, err, sizeof err) == -1 && strstr(err, "regular"), "directory refused: %s", err);
}

static void test_unfinished_writer(void) {
    make_images(3);
    char path[256], err[SHARD_ERR_LEN];
    path_for(path, sizeof path, "half.shard");
    ShardWriter *w = shard_writer_open(path, 3, SHARD_CODEC_LZ4, 3, names);
    for (int i = 0; i < 3; i++) {
        size_t n;
        uint8_t *p = shard_encode(SHARD_CODEC_LZ4, 0, imgs[i].px, imgs[i].h, imgs[i].w, 3, &n);
        shard_writer_add(w, p, (uint32_t)n, imgs[i].h, imgs[i].w, imgs[i].label);
        free(p);
    }
    CHECK(!ct_file_exists(path), "no file under the final name before finish");
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    CHECK(ct_file_exists(tmp), "temporary exists");
    fflush(NULL);  // what a killed process would have left on disk at best
    Shard s;
    CHECK(shard_open_err(&s, tmp, err, sizeof err) == -1 && strstr(err, "not a shard"), "temporary does not open: %s",
          err);
    shard_writer_abort(w);
    CHECK(!ct_file_exists(tmp) && !ct_file_exists(path), "abort removes the temporary");
    // An empty shard (zero records) is a valid file.
    w = shard_writer_open(path, 3, SHARD_CODEC_LZ4, 3, names);
    shard_writer_finish(w);
    CHECK(shard_open_err(&s, path, err, sizeof err) == 0 && s.n_records == 0, "empty shard: %s", err);
    if (s.base) shard_close(&s);
}

static void test_image_codec(void) {
    // image_decode on our own JPEG and on junk; never a crash.
    make_images(3);
    char err[256];
    size_t n;
    uint8_t *j = image_encode_jpeg(imgs[0].px, imgs[0].h, imgs[0].w, 3, 95, &n, err, sizeof err);
    CHECK(j && image_kind(j, n) == IMAGE_JPEG, "jpeg encode: %s", err);
    uint8_t *px;
    uint32_t h, w;
    CHECK(image_decode(j, n, 3, &px, &h, &w, err, sizeof err) == 0 && h == imgs[0].h && w == imgs[0].w,
          "jpeg decode: %s", err);
    free(px);
    CHECK(image_decode(j, n, 1, &px, &h, &w, err, sizeof err) == 0, "jpeg decode to gray: %s", err);
    free(px);
    CHECK(image_decode(j, n / 2, 3, &px, &h, &w, err, sizeof err) == -1 && strstr(err, "truncated"),
          "truncated jpeg: %s", err);
    CHECK(image_decode(j, 3, 3, &px, &h, &w, err, sizeof err) == -1, "3-byte jpeg");
    CHECK(image_decode((const uint8_t *)"hello", 5, 3, &px, &h, &w, err, sizeof err) == -1 && strstr(err, "not a JPEG"),
          "junk: %s", err);
    CHECK(image_decode(j, 0, 3, &px, &h, &w, err, sizeof err) == -1 && strstr(err, "empty"), "empty: %s", err);
    free(j);
}

// CMYK and YCCK JPEGs (PIL cannot write YCCK, so libjpeg writes them here): image_decode must give
// R = (255-C)(255-K)/255 on the ink values, with Photoshop's inverted storage when the Adobe marker
// is present (libjpeg writes one for CMYK/YCCK unless told not to).
static void test_cmyk_ycck(void) {
    const int W = 24, H = 16;
    uint8_t cmyk[16 * 24 * 4];
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            uint8_t *p = cmyk + (y * W + x) * 4;
            p[0] = (uint8_t)(40 + x * 6), p[1] = (uint8_t)(30 + y * 8), p[2] = (uint8_t)(200 - x * 3), p[3] = (uint8_t)(60 + y * 4);
        }
    for (int mode = 0; mode < 3; mode++) {  // 0: CMYK + Adobe, 1: YCCK + Adobe, 2: CMYK without Adobe
        struct jpeg_compress_struct c;
        struct jpeg_error_mgr je;
        c.err = jpeg_std_error(&je);
        jpeg_create_compress(&c);
        unsigned char *mem = NULL;
        unsigned long n = 0;
        jpeg_mem_dest(&c, &mem, &n);
        c.image_width = W, c.image_height = H, c.input_components = 4, c.in_color_space = JCS_CMYK;
        jpeg_set_defaults(&c);
        jpeg_set_quality(&c, 100, TRUE);
        jpeg_set_colorspace(&c, mode == 1 ? JCS_YCCK : JCS_CMYK);
        for (int i = 0; i < c.num_components; i++) c.comp_info[i].h_samp_factor = c.comp_info[i].v_samp_factor = 1;
        if (mode == 2) c.write_Adobe_marker = FALSE;
        jpeg_start_compress(&c, TRUE);
        while (c.next_scanline < c.image_height) {
            JSAMPROW row = cmyk + c.next_scanline * W * 4;
            jpeg_write_scanlines(&c, &row, 1);
        }
        jpeg_finish_compress(&c);
        jpeg_destroy_compress(&c);
        uint8_t *px;
        uint32_t h, w;
        char err[256];
        int rc = image_decode(mem, n, 3, &px, &h, &w, err, sizeof err);
        CHECK(rc == 0 && h == (uint32_t)H && w == (uint32_t)W, "mode %d decode: %s", mode, err);
        if (rc == 0) {
            int worst = 0;
            for (int i = 0; i < W * H; i++)
                for (int ch = 0; ch < 3; ch++) {
                    int ink = cmyk[i * 4 + ch], k = cmyk[i * 4 + 3];
                    if (mode == 2) ink = 255 - ink, k = 255 - k;  // plain CMYK: stored values are ink amounts
                    int want = (ink * k + 127) / 255;
                    int d = abs((int)px[i * 3 + ch] - want);
                    worst = d > worst ? d : worst;
                }
            CHECK(worst <= 3, "mode %d: CMYK->RGB differs by %d", mode, worst);
            free(px);
        }
        free(mem);
    }
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/test_shard.XXXXXX");
    if (!mkdtemp(dir)) ct_die_errno("mkdtemp");
    test_round_trip(3, SHARD_CODEC_LZ4, 0);
    test_round_trip(3, SHARD_CODEC_LZ4, 9);
    test_round_trip(1, SHARD_CODEC_LZ4, 0);
    test_round_trip(3, SHARD_CODEC_RAW, 0);
    test_round_trip(1, SHARD_CODEC_RAW, 0);
    test_round_trip(3, SHARD_CODEC_JPEG, 95);
    test_round_trip(1, SHARD_CODEC_JPEG, 95);
    test_bad_files();
    test_jpeg_payload_checks();
    test_classes_and_memory();
    test_unfinished_writer();
    test_image_codec();
    test_cmyk_ycck();
    for (int i = 0; i < NIMG; i++) free(imgs[i].px);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return test_summary("test_shard");
}
