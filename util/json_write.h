// JSON documents out (config.json, run records): jansson builds the document and escapes its
// strings; every real comes out as the shortest text that reads back to the same double (0.7,
// not jansson 2.14's "%.17g" 0.69999999999999996).
//
//   json_t *doc = json_pack("{s:s, s:f, s:i}", "arch", "resnet50", "lr", 0.1, "epochs", 90);
//   json_object_set_new(doc, "mean", json_real(ct_json_float(0.485f)));   // 0.485, not 0.48500001430511475
//   ct_json_write_file("runs/x/config.json", doc);
//   json_decref(doc);
#pragma once
#include <jansson.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

// Room for the longest text ct_json_real_text writes ("-2.2250738585072014e-308" and the like).
#define CT_JSON_REAL_MAX 32

// The shortest decimal text of a finite v that strtod reads back as exactly v, with a '.' or an
// exponent so that JSON readers keep it a real: 0.7 -> "0.7", 2.0 -> "2.0", -0.0 -> "-0.0",
// 1e-5 -> "1e-5", 5e-324 -> "5e-324", 1e300 -> "1e300". Laid out like Python's repr (plain
// digits from 1e-4 up to 1e16, an exponent outside), exponents without '+' or leading zeros.
// NaN and infinities have no JSON text (jansson's json_real refuses them too): "null".
// Returns the length written to out.
size_t ct_json_real_text(double v, char out[CT_JSON_REAL_MAX]);

// The double nearest to the shortest decimal that reads back as f: a float parameter stored in a
// document as json_real(ct_json_float(f)) is written as 0.485 rather than the float's exact
// binary value 0.48500001430511475. strtof of the written text gives f back exactly.
double ct_json_float(float f);

// doc (any JSON value) as text, indented by 2, keys in insertion order, no final newline; the
// caller free()s it. Dies if jansson cannot encode it (out of memory).
char *ct_json_dumps(const json_t *doc);
// The same with jansson's dump flags (JSON_COMPACT for one line of a .jsonl, JSON_SORT_KEYS, ...);
// any JSON_REAL_PRECISION in flags is ignored: reals are always the shortest round trip.
char *ct_json_dumps_flags(const json_t *doc, size_t flags);
// ct_json_dumps(doc) and a newline, written atomically (ct_atomic_open/commit): a crash never
// leaves a half-written file. Dies naming the path.
void ct_json_write_file(const char *path, const json_t *doc);

#ifdef __cplusplus
}
#endif
