// nn/safetensors.c (jansson parses the header): round trips, and every malformed input gets an
// error naming the tensor, key or byte offset (never a crash: this also runs under ASan+UBSan).
// Truncations at every length and random byte corruptions of a real file are swept.
#include <string.h>
#include <unistd.h>

#include "nn/resnet.h"
#include "nn/safetensors.h"
#include "tests/test.h"
#include "util/common.h"
#include "util/rng.h"

// A file image: 8-byte length, header text, then `data_bytes` bytes of data (value i & 0xff).
static uint8_t *image(const char *header, size_t data_bytes, size_t *size) {
    size_t h = strlen(header);
    *size = 8 + h + data_bytes;
    uint8_t *b = ct_alloc(*size + 1);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)h >> (8 * i));
    memcpy(b + 8, header, h);
    for (size_t i = 0; i < data_bytes; i++) b[8 + h + i] = (uint8_t)i;
    return b;
}

// Expects st_parse to fail with a message containing `needle`.
static void expect_error(const char *what, const uint8_t *buf, size_t size, const char *needle) {
    StFile f;
    char *err = st_parse(buf, size, &f);
    CHECK(err != NULL, "%s: accepted", what);
    if (!err) {
        st_close(&f);
        return;
    }
    CHECK(strstr(err, needle) != NULL, "%s: error '%s' does not mention '%s'", what, err, needle);
    free(err);
}

static void expect_header_error(const char *what, const char *header, size_t data_bytes, const char *needle) {
    size_t size;
    uint8_t *b = image(header, data_bytes, &size);
    expect_error(what, b, size, needle);
    free(b);
}

#define W4(name, b, e) "\"" name "\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [" #b ", " #e "]}"

// What jansson's strict parse adds over a plain one: duplicates, padding, types, ranges, tiling.
static void test_strict(void) {
    // Duplicate keys, at the top (a tensor named twice) and inside an entry, each named.
    expect_header_error("duplicate tensor", "{" W4("layer1.0.conv1.weight", 0, 4) ", " W4("layer1.0.conv1.weight", 4, 8) "}",
                        8, "duplicate key \"layer1.0.conv1.weight\"");
    expect_header_error("duplicate field", "{\"w\": {\"dtype\": \"F32\", \"dtype\": \"F64\", \"shape\": [1], \"data_offsets\": [0, 4]}}",
                        4, "tensor 'w': duplicate key \"dtype\"");
    expect_header_error("duplicate metadata", "{\"__metadata__\": {\"k\": \"1\", \"k\": \"2\"}}", 0,
                        "__metadata__: duplicate key \"k\"");
    // Padding: spaces only, as the reference writer emits; any other byte after the object is refused.
    {
        size_t size;
        uint8_t *b = image("{" W4("w", 0, 4) "}     ", 4, &size);
        StFile f;
        char *err = st_parse(b, size, &f);
        CHECK(err == NULL && f.n == 1, "space padding refused: %s", err ? err : "");
        if (!err) st_close(&f);
        free(err);
        free(b);
    }
    expect_header_error("trailing garbage", "{" W4("w", 0, 4) "}  x", 4, "byte 71 (0x78) follows the header's JSON object");
    expect_header_error("trailing newline", "{" W4("w", 0, 4) "}\n", 4, "(0x0a) follows the header's JSON object");
    {
        size_t size;
        uint8_t *b = image("{" W4("w", 0, 4) "}  ", 4, &size);
        b[size - 4 - 1] = 0;  // the last padding byte a NUL
        expect_error("NUL padding", b, size, "(0x00) follows the header's JSON object");
        free(b);
    }
    expect_header_error("second object", "{" W4("w", 0, 4) "}{}", 4, "follows the header's JSON object");
    expect_header_error("leading space", " {" W4("w", 0, 4) "}", 4, "must start with '{'");
    expect_header_error("empty header", "", 0, "must start with '{'");
    // Syntax errors carry the byte and the entry they are in.
    expect_header_error("syntax in entry", "{" W4("a", 0, 4) ", \"b\": {\"dtype\": F32}}", 4,
                        "malformed JSON header at byte 86 (in tensor 'b')");
    expect_header_error("int64 overflow", "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 9223372036854775808]}}",
                        4, "(in tensor 'w'): too big integer");
    // Wrong JSON types.
    expect_header_error("dtype not string", "{\"w\": {\"dtype\": 5, \"shape\": [1], \"data_offsets\": [0, 4]}}", 4,
                        "tensor 'w': dtype is an integer, not a string");
    expect_header_error("shape not array", "{\"w\": {\"dtype\": \"F32\", \"shape\": 1, \"data_offsets\": [0, 4]}}", 4,
                        "tensor 'w': shape must be an array");
    expect_header_error("shape entry string", "{\"w\": {\"dtype\": \"F32\", \"shape\": [\"1\"], \"data_offsets\": [0, 4]}}", 4,
                        "tensor 'w': shape entry 0");
    expect_header_error("shape entry 1.0", "{\"w\": {\"dtype\": \"F32\", \"shape\": [1.0], \"data_offsets\": [0, 4]}}", 4,
                        "tensor 'w': shape entry 0");
    expect_header_error("offsets not array", "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": {\"a\": 0}}}", 4,
                        "tensor 'w': data_offsets must be [begin, end]");
    // Bad offsets.
    expect_header_error("negative begin", "{\"w\": {\"dtype\": \"F32\", \"shape\": [0], \"data_offsets\": [-4, 0]}}", 4,
                        "tensor 'w': data_offsets must be [begin, end], two non-negative integers");
    expect_header_error("real offset", "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4.0]}}", 4,
                        "tensor 'w': data_offsets must be");
    expect_header_error("begin > end", "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [8, 4]}}", 8,
                        "tensor 'w': data_offsets [8, 4] must be [begin, end] with 0 <= begin <= end");
    expect_header_error("huge end", "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 9223372036854775807]}}", 4,
                        "tensor 'w': data_offsets [0, 9223372036854775807] run past the data section");
    // Tiling: holes and unclaimed bytes after the last tensor, as the reference reader refuses them.
    expect_header_error("hole at start", "{" W4("w", 4, 8) "}", 8, "bytes [0, 4) belong to no tensor (hole before tensor 'w')");
    expect_header_error("hole between", "{" W4("a", 0, 4) ", " W4("b", 8, 12) "}", 12, "bytes [4, 8) belong to no tensor (hole before tensor 'b')");
    expect_header_error("bytes after", "{" W4("a", 0, 4) "}", 8, "bytes [4, 8) belong to no tensor (after tensor 'a'");
    expect_header_error("data, no tensors", "{}", 8, "8 bytes of data but no tensors");
    // __metadata__ must be an object of string -> string.
    expect_header_error("metadata string", "{\"__metadata__\": \"pt\"}", 0, "__metadata__ is a string, not an object");
    expect_header_error("metadata number", "{\"__metadata__\": {\"format\": \"pt\", \"epoch\": 12}}", 0,
                        "__metadata__ value of \"epoch\" is an integer, not a string");
    expect_header_error("metadata nested", "{\"__metadata__\": {\"cfg\": {\"lr\": \"1\"}}}", 0,
                        "__metadata__ value of \"cfg\" is an object, not a string");
    expect_header_error("metadata null", "{\"__metadata__\": {\"x\": null}}", 0, "value of \"x\" is null");
    // Keys and strings must be UTF-8 (jansson checks); zero-size tensors may share an offset.
    expect_header_error("bad utf-8", "{\"\xff\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4, "malformed JSON header at byte");
    {
        size_t size;
        uint8_t *b = image("{\"e\": {\"dtype\": \"F32\", \"shape\": [0, 3], \"data_offsets\": [0, 0]}, " W4("w", 0, 4) ", "
                           "\"z\": {\"dtype\": \"I8\", \"shape\": [0], \"data_offsets\": [4, 4]}}", 4, &size);
        StFile f;
        char *err = st_parse(b, size, &f);
        CHECK(err == NULL && f.n == 3 && strcmp(f.t[0].name, "e") == 0 && strcmp(f.t[2].name, "z") == 0,
              "empty tensors / file order: %s", err ? err : "");
        if (!err) st_close(&f);
        free(err);
        free(b);
    }
}

static void test_parse_errors(void) {
    uint8_t small[4] = {1, 2, 3, 4};
    expect_error("4-byte file", small, 4, "shorter than the 8-byte header");
    {
        size_t size;
        uint8_t *b = image("{}", 0, &size);
        b[0] = 200;  // header length 200 > file
        expect_error("header length too big", b, size, "runs past the end");
        StFile f;
        b[0] = 2;
        char *err = st_parse(b, size, &f);
        CHECK(err == NULL && f.n == 0, "empty header accepted: %s", err ? err : "");
        free(err);
        if (!err) st_close(&f);
        free(b);
    }
    expect_header_error("malformed json", "{\"w\": {\"dtype\": \"F32\",", 0, "malformed JSON header at byte 30");
    expect_header_error("not object", "[1,2]", 0, "not a JSON object");
    expect_header_error("entry not object", "{\"w\": 3}", 0, "tensor 'w'");
    expect_header_error("missing dtype", "{\"w\": {\"shape\": [1], \"data_offsets\": [0, 4]}}", 4, "tensor 'w': missing \"dtype\"");
    expect_header_error("missing shape", "{\"w\": {\"dtype\": \"F32\", \"data_offsets\": [0, 4]}}", 4, "missing \"shape\"");
    expect_header_error("missing offsets", "{\"w\": {\"dtype\": \"F32\", \"shape\": [1]}}", 4, "missing \"data_offsets\"");
    expect_header_error("bad dtype", "{\"w\": {\"dtype\": \"F33\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4, "unsupported dtype F33");
    expect_header_error("negative dim", "{\"w\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 4]}}", 4, "shape entry 0");
    expect_header_error("float dim", "{\"w\": {\"dtype\": \"F32\", \"shape\": [1.5], \"data_offsets\": [0, 4]}}", 4, "shape entry 0");
    expect_header_error("9 dims", "{\"w\": {\"dtype\": \"F32\", \"shape\": [1,1,1,1,1,1,1,1,1], \"data_offsets\": [0, 4]}}", 4, "at most 8");
    expect_header_error("offsets reversed", "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 0]}}", 4, "begin <= end");
    expect_header_error("offsets 3", "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4, 8]}}", 4, "data_offsets must be");
    expect_header_error("past end (truncated)", "{\"w\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]}}", 12, "run past the data section");
    expect_header_error("size mismatch", "{\"w\": {\"dtype\": \"F32\", \"shape\": [2, 3], \"data_offsets\": [0, 20]}}", 24, "shape [2, 3] of F32 needs 24");
    expect_header_error("overflowing shape", "{\"w\": {\"dtype\": \"F64\", \"shape\": [4294967296, 4294967296, 4294967296], \"data_offsets\": [0, 8]}}", 8, "needs");
    expect_header_error("overlap", "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}, \"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}", 12, "'a' and 'b' overlap");
    expect_header_error("duplicate name", "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}, \"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}", 8, "duplicate key \"a\"");
    expect_header_error("metadata not object", "{\"__metadata__\": [1]}", 0, "__metadata__");
    expect_header_error("metadata value", "{\"__metadata__\": {\"k\": 1}}", 0, "value of \"k\"");
    expect_header_error("NUL in metadata", "{\"__metadata__\": {\"k\": \"a\\u0000\"}}", 0, "in __metadata__");
    expect_header_error("NUL in name", "{\"a\\u0000b\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4, "NUL");
    test_strict();
    // A valid one with metadata and a scalar.
    size_t size;
    uint8_t *b = image("{\"__metadata__\": {\"format\": \"pt\"}, \"s\": {\"dtype\": \"I64\", \"shape\": [], \"data_offsets\": [0, 8]}, "
                       "\"h\": {\"dtype\": \"F16\", \"shape\": [1], \"data_offsets\": [8, 10]}}", 10, &size);
    // F16 1.5 = 0x3E00, little-endian.
    b[size - 2] = 0x00;
    b[size - 1] = 0x3E;
    StFile f;
    char *err = st_parse(b, size, &f);
    CHECK(err == NULL, "valid file rejected: %s", err ? err : "");
    if (!err) {
        const StTensor *s = st_find(&f, "s"), *h = st_find(&f, "h");
        CHECK(s && s->ndim == 0 && s->count == 1 && s->dtype == ST_I64, "scalar");
        const char *fmt = st_meta(&f, "format");
        CHECK(fmt && strcmp(fmt, "pt") == 0, "metadata");
        float v = 0;
        CHECK(h && st_to_f32(h, &v, 1) == NULL && v == 1.5f, "f16 -> f32: %g", v);
        char *e2 = st_to_f32(s, &v, 1);
        CHECK(e2 && strstr(e2, "'s'"), "I64 to f32 refused");
        free(e2);
        st_close(&f);
    }
    free(err);
    free(b);
}

// Round trip of a model through a file, strict loading errors, and sweeps over a damaged file.
static void test_resnet_files(void) {
    char path[256];
    snprintf(path, sizeof path, "/tmp/ctrain_test_st_%d.safetensors", (int)getpid());
    ResNet *m = resnet_create("resnet20", 3, 10);
    resnet_init(m, 7, 0);
    for (size_t i = 0; i < m->n_bufs; i++) m->bufs[i] = 0.01f * (float)(i % 97);
    for (size_t i = 0; i < m->n_counts; i++) m->counts[i] = 1000 + (int64_t)i;
    float extra_data[3] = {1, 2, 3};
    StWrite extra = {"optim.momentum.test", ST_F32, 1, {3}, extra_data};
    const char *mk[1] = {"epoch"}, *mv[1] = {"12"};
    st_save_resnet(path, m, &extra, 1, mk, mv, 1);

    ResNet *m2 = resnet_create("resnet20", 3, 10);
    StFile f;
    char *err = st_open(path, &f);
    CHECK(err == NULL, "open: %s", err ? err : "");
    if (err) return;
    CHECK(st_meta(&f, "epoch") && strcmp(st_meta(&f, "epoch"), "12") == 0, "user metadata");
    CHECK(st_meta(&f, "format") && strcmp(st_meta(&f, "format"), "pt") == 0, "format pt");
    // File layout is torch's: OIHW. conv1.weight[k=1, c=2, r=0, s=1] == KRSC[1,0,1,2].
    const StTensor *c1 = st_find(&f, "conv1.weight");
    float v;
    memcpy(&v, c1->data + 4 * (((1 * 3 + 2) * 3 + 0) * 3 + 1), 4);
    int e1 = resnet_find_entry(m, "conv1.weight");
    CHECK(v == m->params[m->entries[e1].offset + ((1 * 3 + 0) * 3 + 1) * 3 + 2], "OIHW in the file");
    err = st_load_resnet_from(&f, m2, NULL);
    CHECK(err && strstr(err, "unexpected tensor 'optim.momentum.test'"), "extra tensor refused: %s", err ? err : "(accepted)");
    free(err);
    err = st_load_resnet_from(&f, m2, "optim.");
    CHECK(err == NULL, "load with allowed prefix: %s", err ? err : "");
    free(err);
    CHECK(memcmp(m->params, m2->params, m->n_params * 4) == 0, "params round trip");
    CHECK(memcmp(m->bufs, m2->bufs, m->n_bufs * 4) == 0, "buffers round trip");
    CHECK(memcmp(m->counts, m2->counts, m->n_counts * 8) == 0, "counts round trip");
    // Wrong model: shape mismatch names the tensor; m3 untouched.
    ResNet *m3 = resnet_create("resnet20", 1, 10);
    err = st_load_resnet_from(&f, m3, "optim.");
    CHECK(err && strstr(err, "'conv1.weight' has shape [16, 3, 3, 3]") && strstr(err, "[16, 1, 3, 3]"), "shape error: %s", err ? err : "");
    free(err);
    int untouched = 1;
    for (size_t i = 0; i < m3->n_params; i++) untouched &= m3->params[i] == 0.0f;
    CHECK(untouched, "failed load modified the model");
    resnet_free(m3);
    m3 = resnet_create("resnet32", 3, 10);
    err = st_load_resnet_from(&f, m3, "optim.");
    CHECK(err && strstr(err, "missing tensor 'layer1.3.conv1.weight'"), "missing: %s", err ? err : "");
    free(err);
    resnet_free(m3);
    st_close(&f);

    // Fine-tuning: a 5-class model keeps its own fc ("fc." kept) and takes everything else; the
    // file's 10-class fc is neither loaded nor an error. Without the exception it is one.
    ResNet *m5 = resnet_create("resnet20", 3, 5);
    resnet_init(m5, 3, 0);
    int fw = resnet_find_entry(m5, "fc.weight");
    float *fc_before = malloc(m5->entries[fw].count * 4);
    memcpy(fc_before, m5->params + m5->entries[fw].offset, m5->entries[fw].count * 4);
    CHECK(st_open(path, &f) == NULL, "reopen");
    err = st_load_resnet_from(&f, m5, "optim.");
    CHECK(err && strstr(err, "'fc.weight' has shape [10, 64]"), "fc of 10 classes into 5: %s", err ? err : "(accepted)");
    free(err);
    err = st_load_resnet_except(&f, m5, "optim.", "fc.");
    CHECK(err == NULL, "load all but fc: %s", err ? err : "");
    free(err);
    int c1e = resnet_find_entry(m5, "conv1.weight");
    CHECK(!memcmp(m5->params + m5->entries[c1e].offset, m->params + m->entries[c1e].offset, m5->entries[c1e].count * 4),
          "conv1 loaded next to a kept fc");
    CHECK(!memcmp(m5->params + m5->entries[fw].offset, fc_before, m5->entries[fw].count * 4), "fc kept its own values");
    CHECK(!memcmp(m5->counts, m->counts, m->n_counts * 8), "counts loaded");
    free(fc_before);
    resnet_free(m5);
    st_close(&f);

    // A state_dict without num_batches_tracked (older torchvision weights) loads like torch's
    // load_state_dict does: every counter starts at 0.
    {
        StWrite *ws = calloc((size_t)m->n_entries, sizeof *ws);
        int nw = 0;
        StFile g;
        CHECK(st_open(path, &g) == NULL, "reopen");
        for (int i = 0; i < g.n; i++) {
            if (strstr(g.t[i].name, "num_batches_tracked") || !strncmp(g.t[i].name, "optim.", 6)) continue;
            ws[nw] = (StWrite){g.t[i].name, g.t[i].dtype, g.t[i].ndim, {0}, g.t[i].data};
            memcpy(ws[nw].shape, g.t[i].shape, sizeof ws[nw].shape);
            nw++;
        }
        char p2[512];
        snprintf(p2, sizeof p2, "%s.nocounts", path);
        st_write(p2, ws, nw, NULL, NULL, 0);
        st_close(&g);
        free(ws);
        ResNet *m6 = resnet_create("resnet20", 3, 10);
        for (size_t i = 0; i < m6->n_counts; i++) m6->counts[i] = 5;
        CHECK(st_open(p2, &g) == NULL, "open without counts");
        err = st_load_resnet_from(&g, m6, NULL);
        CHECK(err == NULL, "a state_dict without num_batches_tracked: %s", err ? err : "");
        free(err);
        int zero = 1;
        for (size_t i = 0; i < m6->n_counts; i++) zero &= m6->counts[i] == 0;
        CHECK(zero, "missing num_batches_tracked loads as 0");
        CHECK(!memcmp(m6->params, m->params, m->n_params * 4), "params still load");
        st_close(&g);
        resnet_free(m6);
        remove(p2);
    }

    // Wrong dtype for a param and for num_batches_tracked, built by the generic writer.
    float w = 0;
    StWrite bad1 = {"conv1.weight", ST_F64, 4, {16, 3, 3, 3}, NULL};
    double *dbuf = ct_zalloc(16 * 27 * 8);
    bad1.data = dbuf;
    st_write(path, &bad1, 1, NULL, NULL, 0);
    err = st_open(path, &f);
    CHECK(!err, "open f64");
    if (!err) {
        char *e2 = st_load_resnet_from(&f, m2, NULL);
        CHECK(e2 && strstr(e2, "'conv1.weight' has dtype F64, expected F32"), "dtype: %s", e2 ? e2 : "");
        free(e2);
        st_close(&f);
    }
    free(err);
    free(dbuf);
    // A complete state whose bn1.num_batches_tracked is F32 instead of I64.
    StWrite *all = ct_zalloc(m->n_entries * sizeof(StWrite));
    for (int i = 0; i < m->n_entries; i++) {
        const StateEntry *e = &m->entries[i];
        all[i].name = e->name;
        all[i].ndim = e->ndim;
        for (int d = 0; d < e->ndim; d++) all[i].shape[d] = e->shape[d];
        all[i].dtype = e->kind == ENTRY_COUNT ? ST_I64 : ST_F32;
        all[i].data = e->kind == ENTRY_PARAM ? (const void *)(m->params + e->offset)
                      : e->kind == ENTRY_BUF ? (const void *)(m->bufs + e->offset)
                                             : (const void *)(m->counts + e->offset);
        if (strcmp(e->name, "bn1.num_batches_tracked") == 0) {
            all[i].dtype = ST_F32;
            all[i].data = &w;
        }
    }
    st_write(path, all, m->n_entries, NULL, NULL, 0);
    free(all);
    err = st_open(path, &f);
    CHECK(!err, "open scalar");
    if (!err) {
        const StTensor *t = st_find(&f, "bn1.num_batches_tracked");
        CHECK(t && t->ndim == 0 && t->count == 1, "scalar written");
        char *e2 = st_load_resnet_from(&f, m2, NULL);
        CHECK(e2 && strstr(e2, "'bn1.num_batches_tracked' has dtype F32, expected I64"), "count dtype: %s", e2 ? e2 : "");
        free(e2);
        st_close(&f);
    }
    free(err);

    // The real file again; every truncation must fail cleanly; random corruption must never crash.
    st_save_resnet(path, m, NULL, 0, NULL, NULL, 0);
    size_t size;
    uint8_t *img = (uint8_t *)ct_read_file(path, &size);
    err = st_open("/nonexistent/dir/x.safetensors", &f);
    CHECK(err && strstr(err, "/nonexistent/dir/x.safetensors: cannot open"), "missing file: %s", err ? err : "");
    free(err);
    int crashes_would_show = 0, accepted_trunc = 0;
    size_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = (hl << 8) | img[i];
    // All header truncations, and a spread of data-section truncations.
    for (size_t n = 0; n < size; n += (n < 8 + hl + 64 ? 1 : 997)) {
        StFile g;
        char *e2 = st_parse(img, n, &g);
        if (!e2) {
            accepted_trunc++;
            st_close(&g);
        }
        free(e2);
    }
    CHECK(accepted_trunc == 0, "%d truncated images accepted", accepted_trunc);
    Rng r = rng_make(1, 2, 3);
    uint8_t *copy = ct_alloc(size);
    for (int trial = 0; trial < 300; trial++) {
        memcpy(copy, img, size);
        int flips = 1 + (int)rng_below(&r, 4);
        for (int k = 0; k < flips; k++) {
            // Mostly in the header, where the structure is.
            size_t at = rng_below(&r, 4) ? rng_below(&r, (uint32_t)(8 + hl)) : rng_below(&r, (uint32_t)size);
            copy[at] = (uint8_t)rng_u32(&r);
        }
        StFile g;
        char *e2 = st_parse(copy, size, &g);
        if (!e2) {
            ResNet *m4 = resnet_create("resnet20", 3, 10);
            char *e3 = st_load_resnet_from(&g, m4, NULL);
            free(e3);
            resnet_free(m4);
            st_close(&g);
        }
        free(e2);
        crashes_would_show++;
    }
    CHECK(crashes_would_show == 300, "corruption sweep");
    free(copy);
    free(img);
    unlink(path);
    resnet_free(m2);
    resnet_free(m);
}

int main(void) {
    test_parse_errors();
    test_resnet_files();
    return test_summary("test_safetensors");
}
