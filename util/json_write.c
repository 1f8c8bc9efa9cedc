// JSON writing through jansson with shortest round-trip reals.
//
// Why a pass over jansson's output: jansson 2.14 prints every real with "%.*g" at one precision
// for the whole dump (JSON_REAL_PRECISION, 17 by default), so there is no per-value setting that
// gives 0.7 for 0.7 and 17 digits where they are needed. The alternatives are worse: walking the
// tree ourselves would re-implement jansson's layout (indentation, separators, key order, flags)
// and drift from it; string placeholders for reals can collide with real strings. At precision
// 17 every real's text reads back to the exact double, and in valid JSON a token outside a
// string that starts with '-' or a digit is a number, which is a real exactly when it has a '.'
// or an exponent. So each real token is re-read and rewritten in its shortest form: exact, and
// every other byte (structure, escaping, key order) is jansson's own.
#include "util/json_write.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "util/common.h"

// A decimal M * 10^(E - P + 1) with P significant digits in M (leading digit at 10^E).
typedef struct {
    uint64_t m;
    int p, e;
} Decimal;

static double reads_back(const Decimal *d, int as_float) {
    char s[48];
    snprintf(s, sizeof s, "%llue%d", (unsigned long long)d->m, d->e - d->p + 1);
    return as_float ? (double)strtof(s, NULL) : strtod(s, NULL);
}

static uint64_t pow10u(int n) {
    uint64_t r = 1;
    while (n-- > 0) r *= 10;
    return r;
}

// The shortest decimal that reads back (as a double, or as a float when as_float) to a, a finite
// positive value. For each digit count P, the P-digit decimals nearest to a are the correctly
// rounded one (printf's %.*e) and its neighbour one unit in the last digit away on the other side
// of a. Anything that reads back as a lies in a's rounding interval, an interval around a, so if
// any P-digit decimal does, one of those two does: trying both at each P finds the fewest digits.
static Decimal shortest(double a, int as_float) {
    int max_p = as_float ? 9 : 17;  // enough digits to round-trip any float / double
    Decimal d = {0, 1, 0};
    for (int p = 1; p <= max_p; p++) {
        char s[48];
        snprintf(s, sizeof s, "%.*e", p - 1, a);
        char digits[24];
        int nd = 0;
        const char *c = s;
        for (; *c && *c != 'e'; c++)
            if (*c >= '0' && *c <= '9') digits[nd++] = *c;
        digits[nd] = 0;
        d.m = strtoull(digits, NULL, 10);
        d.p = p;
        d.e = atoi(c + 1);
        double r = reads_back(&d, as_float);
        if (r == a) return d;
        Decimal o = d;
        if (r > a) {  // the neighbour below; 100 -> 99 loses a digit: 999 one decade lower
            if (--o.m < pow10u(p - 1)) {
                o.m = pow10u(p) - 1;
                o.e--;
            }
        } else if (++o.m == pow10u(p)) {  // the neighbour above; 999 -> 1000: 100 one decade up
            o.m = pow10u(p - 1);
            o.e++;
        }
        if (reads_back(&o, as_float) == a) return o;
    }
    return d;  // not reached: max_p digits always round-trip
}

size_t ct_json_real_text(double v, char out[CT_JSON_REAL_MAX]) {
    if (!isfinite(v)) return (size_t)snprintf(out, CT_JSON_REAL_MAX, "null");
    char *o = out;
    if (signbit(v)) *o++ = '-';
    double a = fabs(v);
    if (a == 0) return (size_t)(o - out) + (size_t)snprintf(o, CT_JSON_REAL_MAX - 1, "0.0");
    Decimal d = shortest(a, 0);
    char dig[24];
    snprintf(dig, sizeof dig, "%llu", (unsigned long long)d.m);
    int p = d.p, e = d.e;
    if (e >= -4 && e < 16) {
        if (e < 0) {  // 0.000ddd
            o += sprintf(o, "0.");
            for (int i = 0; i < -e - 1; i++) *o++ = '0';
            o += sprintf(o, "%s", dig);
        } else if (e >= p - 1) {  // ddd000.0
            o += sprintf(o, "%s", dig);
            for (int i = 0; i < e - p + 1; i++) *o++ = '0';
            o += sprintf(o, ".0");
        } else o += sprintf(o, "%.*s.%s", e + 1, dig, dig + e + 1);
    } else {
        o += sprintf(o, "%c", dig[0]);
        if (p > 1) o += sprintf(o, ".%s", dig + 1);
        o += sprintf(o, "e%d", e);
    }
    return (size_t)(o - out);
}

double ct_json_float(float f) {
    if (!isfinite(f) || f == 0) return (double)f;
    Decimal d = shortest(fabs((double)f), 1);
    char s[48];
    snprintf(s, sizeof s, "%s%llue%d", signbit(f) ? "-" : "", (unsigned long long)d.m, d.e - d.p + 1);
    return strtod(s, NULL);
}

char *ct_json_dumps_flags(const json_t *doc, size_t flags) {
    flags &= ~(size_t)JSON_REAL_PRECISION(0x1F);
    char *text = json_dumps(doc, flags | JSON_REAL_PRECISION(17) | JSON_ENCODE_ANY);
    if (!text) ct_die("jansson could not encode a JSON document (out of memory?)");
    size_t n = strlen(text), cap = n + 64, len = 0;
    char *out = ct_alloc(cap);
    int in_str = 0;
    for (size_t i = 0; i < n;) {
        if (len + CT_JSON_REAL_MAX + 2 > cap) out = ct_realloc(out, cap *= 2);
        char c = text[i];
        if (in_str) {
            out[len++] = text[i++];
            if (c == '\\') out[len++] = text[i++];  // an escaped char, '"' included, stays in the string
            else if (c == '"') in_str = 0;
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            size_t j = i;
            int real = 0;
            while (j < n && strchr("0123456789+-.eE", text[j])) real |= strchr(".eE", text[j++]) != NULL;
            if (real && j - i < 64) {
                char tok[64];
                snprintf(tok, sizeof tok, "%.*s", (int)(j - i), text + i);
                len += ct_json_real_text(strtod(tok, NULL), out + len);
                i = j;
            } else
                while (i < j) {  // an integer: jansson's text as it is
                    if (len + 2 > cap) out = ct_realloc(out, cap *= 2);
                    out[len++] = text[i++];
                }
        } else {
            in_str = c == '"';
            out[len++] = text[i++];
        }
    }
    out[len] = 0;
    free(text);
    return out;
}

char *ct_json_dumps(const json_t *doc) { return ct_json_dumps_flags(doc, JSON_INDENT(2)); }

void ct_json_write_file(const char *path, const json_t *doc) {
    char *text = ct_json_dumps(doc);
    AtomicFile af = ct_atomic_open(path);
    ct_atomic_write(&af, text, strlen(text));
    ct_atomic_write(&af, "\n", 1);
    ct_atomic_commit(&af);
    free(text);
}
