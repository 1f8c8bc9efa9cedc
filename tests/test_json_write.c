// util/json_write.c: reals as the shortest text that reads back exactly (and stays a real), float
// parameters with their float's shortest decimal, strings escaped by jansson (checked by parsing
// the output back with jansson), and the atomic file writer.
#include <float.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "tests/test.h"
#include "util/common.h"
#include "util/json_write.h"
#include "util/rng.h"

static void expect_text(double v, const char *want) {
    char buf[CT_JSON_REAL_MAX];
    size_t n = ct_json_real_text(v, buf);
    CHECK(strcmp(buf, want) == 0 && n == strlen(want), "%.17g -> '%s', expected '%s'", v, buf, want);
}

// Text of one real through the whole path (jansson dump + rewrite), compact.
static char *dump_real(double v) {
    json_t *r = json_real(v);
    char *s = ct_json_dumps_flags(r, JSON_COMPACT);
    json_decref(r);
    return s;
}

// Reads text back with jansson: it must be a real (not an integer) equal to v bit for bit.
static int reads_back_as_real(const char *text, double v) {
    json_error_t e;
    json_t *j = json_loads(text, JSON_DECODE_ANY, &e);
    int ok = j && json_is_real(j) && memcmp(&(double){json_real_value(j)}, &v, sizeof v) == 0;
    json_decref(j);
    return ok;
}

// Fewest significant digits any decimal reading back as v can have (brute force with %.*g).
static int min_digits(double v) {
    for (int p = 1; p <= 17; p++) {
        char s[40];
        snprintf(s, sizeof s, "%.*g", p, v);
        if (strtod(s, NULL) == v) return p;
    }
    return 17;
}

static int sig_digits(const char *s) {
    int n = 0, started = 0, trailing = 0;
    for (; *s && *s != 'e'; s++) {
        if (*s < '0' || *s > '9') continue;
        if (*s != '0') started = 1;
        if (!started) continue;
        n++;
        trailing = *s == '0' ? trailing + 1 : 0;
    }
    return n - trailing;
}

static void test_reals(void) {
    expect_text(0.7, "0.7");
    expect_text(0.1 + 0.2, "0.30000000000000004");
    expect_text(1e-4, "0.0001");
    expect_text(1e-5, "1e-5");
    expect_text(1e300, "1e300");
    expect_text(-0.0, "-0.0");
    expect_text(0.0, "0.0");
    expect_text(5e-324, "5e-324");
    expect_text(2.0, "2.0");
    expect_text(-3.0, "-3.0");
    expect_text(100.0, "100.0");
    expect_text(123.456, "123.456");
    expect_text(1e15, "1000000000000000.0");
    expect_text(1e16, "1e16");
    expect_text(1.5e-7, "1.5e-7");
    expect_text(DBL_MAX, "1.7976931348623157e308");
    expect_text(DBL_MIN, "2.2250738585072014e-308");
    expect_text(0.1, "0.1");
    expect_text(NAN, "null");

    // Through jansson's dump: integer-valued reals stay reals, -0.0 keeps its sign.
    const double cases[] = {0.7, 0.1 + 0.2, 1e-4, 1e300, -0.0, 5e-324, 2.0, 1e16, -1e-300, DBL_MAX};
    for (size_t i = 0; i < CT_ARRAY_LEN(cases); i++) {
        char *s = dump_real(cases[i]);
        CHECK(reads_back_as_real(s, cases[i]), "%.17g dumped as '%s' does not read back as the same real", cases[i], s);
        free(s);
    }
    char *s = dump_real(0.7);
    CHECK(strcmp(s, "0.7") == 0, "0.7 dumped as '%s'", s);
    free(s);

    // Random doubles (random bit patterns over all exponents, and some in everyday ranges): exact
    // round trip through strtod and through jansson, and no shorter digit string exists.
    Rng r = rng_make(17, 0, 0);
    int bad_trip = 0, not_shortest = 0;
    for (int i = 0; i < 100000; i++) {
        double v;
        if (i % 2) {
            uint64_t bits = (uint64_t)rng_u32(&r) << 32 | rng_u32(&r);
            memcpy(&v, &bits, 8);
            if (!isfinite(v)) continue;
        } else v = (rng_uniform(&r) - 0.5) * pow(10.0, (double)(int)rng_below(&r, 20) - 10);
        char buf[CT_JSON_REAL_MAX];
        ct_json_real_text(v, buf);
        double back = strtod(buf, NULL);
        if (memcmp(&back, &v, 8) != 0 && bad_trip++ < 5) CHECK(0, "%.17g -> '%s' reads back as %.17g", v, buf, back);
        if (v != 0 && sig_digits(buf) > min_digits(v) && not_shortest++ < 5)
            CHECK(0, "%.17g -> '%s': %d digits, %d would do", v, buf, sig_digits(buf), min_digits(v));
        if (i % 50 == 0) {
            char *d = dump_real(v);
            if (!reads_back_as_real(d, v) && bad_trip++ < 5) CHECK(0, "%.17g dumped as '%s'", v, d);
            free(d);
        }
    }
    CHECK(bad_trip == 0, "%d doubles did not round-trip", bad_trip);
    CHECK(not_shortest == 0, "%d doubles not in their shortest form", not_shortest);
}

static void test_floats(void) {
    const float fs[] = {0.485f, 0.456f, 0.406f, 0.229f, 0.1f, 1e-4f, 3.4028235e38f, 1e-45f, -2.5f, 0.3f};
    const char *want[] = {"0.485", "0.456", "0.406", "0.229", "0.1", "0.0001", "3.4028235e38", "1e-45", "-2.5", "0.3"};
    for (size_t i = 0; i < CT_ARRAY_LEN(fs); i++) {
        char buf[CT_JSON_REAL_MAX];
        ct_json_real_text(ct_json_float(fs[i]), buf);
        CHECK(strcmp(buf, want[i]) == 0, "float %.9g -> '%s', expected '%s'", fs[i], buf, want[i]);
    }
    Rng r = rng_make(18, 0, 0);
    int bad = 0;
    for (int i = 0; i < 100000; i++) {
        uint32_t bits = rng_u32(&r);
        float f;
        memcpy(&f, &bits, 4);
        if (!isfinite(f)) continue;
        char buf[CT_JSON_REAL_MAX];
        ct_json_real_text(ct_json_float(f), buf);
        float back = strtof(buf, NULL);
        if ((memcmp(&back, &f, 4) != 0 || sig_digits(buf) > 9) && bad++ < 5)
            CHECK(0, "float %.9g -> '%s' reads back as %.9g", f, buf, back);
    }
    CHECK(bad == 0, "%d floats did not round-trip", bad);
}

static void test_strings_and_doc(void) {
    const char *strs[] = {"plain", "quote \" and backslash \\", "new\nline\ttab\r", "ctrl \x01\x1f\x7f",
                          "utf-8: \xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", "", "looks like a number: -1.5e3, 0.69999999999999996",
                          "\"0.30000000000000004\""};
    json_t *doc = json_object();
    json_t *arr = json_array();
    for (size_t i = 0; i < CT_ARRAY_LEN(strs); i++) json_array_append_new(arr, json_string(strs[i]));
    json_object_set_new(doc, "strings", arr);
    json_object_set_new(doc, "key \"with\" quotes\n", json_real(0.7));
    json_object_set_new(doc, "lr", json_real(0.1));
    json_object_set_new(doc, "epochs", json_integer(90));
    json_object_set_new(doc, "big", json_integer(INT64_MAX));
    json_object_set_new(doc, "neg", json_integer(-12));
    json_object_set_new(doc, "one", json_real(1.0));
    json_object_set_new(doc, "mean", json_pack("[f, f, f]", ct_json_float(0.485f), ct_json_float(0.456f), ct_json_float(0.406f)));
    json_object_set_new(doc, "flags", json_pack("{s:b, s:b, s:n}", "yes", 1, "no", 0, "none"));

    char *text = ct_json_dumps(doc);
    CHECK(strstr(text, "\"lr\": 0.1,") != NULL, "lr not shortest: %s", text);
    CHECK(strstr(text, "\"one\": 1.0,") != NULL, "1.0 not kept a real: %s", text);
    CHECK(strstr(text, "0.485,") && strstr(text, "0.456,") && strstr(text, "0.406\n"), "float mean: %s", text);
    CHECK(strstr(text, "9223372036854775807") != NULL, "int64: %s", text);
    CHECK(strstr(text, "0.69999999999999996") != NULL, "a number inside a string was rewritten: %s", text);
    CHECK(strstr(text, "\n  \"strings\": [") == text + 1, "indent 2, insertion order: %s", text);
    json_error_t e;
    json_t *back = json_loads(text, JSON_REJECT_DUPLICATES, &e);
    CHECK(back != NULL, "output does not parse: %s\n%s", e.text, text);
    CHECK(back && json_equal(doc, back), "output parses to a different document:\n%s", text);
    if (back) {
        json_t *a = json_object_get(back, "strings");
        for (size_t i = 0; i < CT_ARRAY_LEN(strs); i++) {
            const char *got = json_string_value(json_array_get(a, i));
            CHECK(got && strcmp(got, strs[i]) == 0, "string %zu comes back as '%s'", i, got ? got : "(none)");
        }
        CHECK(json_is_real(json_object_get(back, "one")), "1.0 read back as an integer");
        CHECK(json_is_integer(json_object_get(back, "epochs")), "90 read back as a real");
    }
    json_decref(back);
    free(text);

    // Compact (one .jsonl line) and the file writer.
    text = ct_json_dumps_flags(doc, JSON_COMPACT);
    CHECK(!strchr(text, '\n') && strstr(text, "\"lr\":0.1,"), "compact: %s", text);
    free(text);
    char path[256];
    snprintf(path, sizeof path, "/tmp/ctrain_test_json_%d.json", (int)getpid());
    ct_json_write_file(path, doc);
    size_t size;
    char *file = ct_read_file(path, &size);
    text = ct_json_dumps(doc);
    CHECK(size == strlen(text) + 1 && memcmp(file, text, size - 1) == 0 && file[size - 1] == '\n',
          "file is the dump and a newline");
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    CHECK(!ct_file_exists(tmp), "temporary left behind");
    free(text);
    free(file);
    unlink(path);
    json_decref(doc);
}

int main(void) {
    test_reals();
    test_floats();
    test_strings_and_doc();
    return test_summary("test_json_write");
}
