// plot: renders a run's metrics.jsonl into a PNG of curves.
//   build/tools/plot RUN/metrics.jsonl [OUT.png]      (default: curves.png beside the metrics file)
// Each line is a flat JSON object. Records are grouped by their "type" (or "kind") string, e.g.
// "step" and "epoch"; the x axis is "step" for step records and "epoch" for epoch records (else the
// first of step/epoch present, else the line number). Every other numeric field is a curve; fields
// that differ only by a train_/val_/test_ (or train/, val/) prefix share a panel, as do durations
// (*_time); a series that never changes gets none; losses get a log axis when they span decades.
#include <ctype.h>
#include <math.h>
#include <string.h>

#include "util/common.h"
#include "util/plot.h"

typedef struct {
    char *name;   // full field name: the series label
    char *panel;  // group/type + metric without split prefix
    double *x, *y;
    int n, cap;
} Curve;

static Curve *curves;
static int n_curves;

static const char *strip_split(const char *k) {
    static const char *prefixes[] = {"train_", "val_", "test_", "train/", "val/", "test/", "eval_", "eval/"};
    for (size_t i = 0; i < CT_ARRAY_LEN(prefixes); i++) {
        size_t n = strlen(prefixes[i]);
        if (!strncmp(k, prefixes[i], n) && k[n]) return k + n;
    }
    return k;
}

static void add_point(const char *group, const char *key, double x, double y) {
    char panel[256];
    // Durations share one panel ("epoch_time", "eval_time"), titled as what they are.
    size_t kl = strlen(key);
    const char *metric = kl > 5 && !strcmp(key + kl - 5, "_time") ? "time (s)" : strip_split(key);
    snprintf(panel, sizeof panel, "%s%s%s", group, group[0] ? ": " : "", metric);
    Curve *c = NULL;
    for (int i = 0; i < n_curves; i++)
        if (!strcmp(curves[i].name, key) && !strcmp(curves[i].panel, panel)) c = &curves[i];
    if (!c) {
        curves = ct_realloc(curves, (n_curves + 1) * sizeof *curves);
        c = &curves[n_curves++];
        memset(c, 0, sizeof *c);
        c->name = ct_strdup(key);
        c->panel = ct_strdup(panel);
    }
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 256;
        c->x = ct_realloc(c->x, c->cap * sizeof *c->x);
        c->y = ct_realloc(c->y, c->cap * sizeof *c->y);
    }
    c->x[c->n] = x;
    c->y[c->n] = y;
    c->n++;
}

// A flat JSON object scanner: fills keys/values for numeric fields and the "type"/"kind" string.
// Nested objects/arrays are skipped. Returns the number of numeric fields, -1 on a malformed line.
enum { MAXF = 128 };
static int scan_line(const char *s, char keys[MAXF][64], double *vals, char *type, size_t type_cap) {
    int n = 0;
    type[0] = 0;
    while (isspace((unsigned char)*s)) s++;
    if (*s++ != '{') return -1;
    for (;;) {
        while (isspace((unsigned char)*s) || *s == ',') s++;
        if (*s == '}') return n;
        if (*s++ != '"') return -1;
        char key[64];
        size_t kl = 0;
        while (*s && *s != '"') {
            if (*s == '\\' && s[1]) s++;
            if (kl < sizeof key - 1) key[kl++] = *s;
            s++;
        }
        key[kl] = 0;
        if (*s++ != '"') return -1;
        while (isspace((unsigned char)*s)) s++;
        if (*s++ != ':') return -1;
        while (isspace((unsigned char)*s)) s++;
        if (*s == '"') {
            s++;
            char val[64];
            size_t vl = 0;
            while (*s && *s != '"') {
                if (*s == '\\' && s[1]) s++;
                if (vl < sizeof val - 1) val[vl++] = *s;
                s++;
            }
            val[vl] = 0;
            if (*s++ != '"') return -1;
            if (!strcmp(key, "type") || !strcmp(key, "kind")) snprintf(type, type_cap, "%s", val);
        } else if (*s == '{' || *s == '[') {
            int depth = 0, in_str = 0;
            for (; *s; s++) {
                if (in_str) { if (*s == '\\' && s[1]) s++; else if (*s == '"') in_str = 0; continue; }
                if (*s == '"') in_str = 1;
                else if (*s == '{' || *s == '[') depth++;
                else if ((*s == '}' || *s == ']') && --depth == 0) { s++; break; }
            }
            if (depth) return -1;
        } else {
            char *end;
            double v = strtod(s, &end);
            if (end == s) {  // true/false/null/NaN spelled as words
                while (*s && *s != ',' && *s != '}') s++;
                continue;
            }
            s = end;
            if (n < MAXF) {
                snprintf(keys[n], 64, "%s", key);
                vals[n++] = v;
            }
        }
    }
}

int main(int argc, char **argv) {
    if (argc < 2 || argc > 3 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fprintf(stderr, "usage: plot RUN/metrics.jsonl [OUT.png]\n"
                        "Renders every numeric field of the JSON-lines metrics file as curves (PNG).\n");
        return argc < 2 ? 2 : 0;
    }
    const char *in = argv[1];
    char out[4096];
    if (argc == 3) snprintf(out, sizeof out, "%s", argv[2]);
    else {
        const char *slash = strrchr(in, '/');
        snprintf(out, sizeof out, "%.*scurves.png", slash ? (int)(slash - in + 1) : 0, in);
    }
    FILE *f = fopen(in, "r");
    if (!f) ct_die_errno("cannot open %s", in);
    char *line = NULL;
    size_t cap = 0;
    long lineno = 0, bad = 0;
    static char keys[MAXF][64];
    double vals[MAXF];
    char type[64];
    while (getline(&line, &cap, f) > 0) {
        lineno++;
        int n = scan_line(line, keys, vals, type, sizeof type);
        if (n < 0) {
            if (bad++ < 3) ct_warn("%s:%ld: not a flat JSON object, skipped", in, lineno);
            continue;
        }
        const char *xkey = !strcmp(type, "epoch") ? "epoch" : !strcmp(type, "step") ? "step" : NULL;
        double x = NAN;
        for (int i = 0; i < n && !xkey; i++)
            if (!strcmp(keys[i], "step") || !strcmp(keys[i], "epoch")) xkey = keys[i];
        for (int i = 0; i < n; i++)
            if (xkey && !strcmp(keys[i], xkey)) x = vals[i];
        if (!xkey) x = lineno;
        for (int i = 0; i < n; i++) {
            if (!strcmp(keys[i], "step") || !strcmp(keys[i], "epoch")) continue;
            add_point(type, keys[i], x, vals[i]);
        }
    }
    free(line);
    fclose(f);
    if (!n_curves) ct_die("%s holds no numeric metrics to plot", in);

    // A series that never changes (a fixed resolution, zero skipped steps) says nothing as a curve.
    int kept = 0;
    for (int i = 0; i < n_curves; i++) {
        int constant = 1;
        double first = NAN;
        for (int k = 0; k < curves[i].n; k++) {
            double y = curves[i].y[k];
            if (!isfinite(y)) continue;
            if (isnan(first)) first = y;
            else if (y != first) constant = 0;
        }
        if (constant && curves[i].n > 1) continue;
        curves[kept++] = curves[i];
    }
    int dropped = n_curves - kept;
    n_curves = kept;
    if (!n_curves) ct_die("%s: every metric is constant; nothing to plot", in);
    // One panel per distinct panel name, in order of first appearance.
    PlotPanel *panels = ct_zalloc(n_curves * sizeof *panels);
    PlotSeries *series = ct_zalloc(n_curves * sizeof *series);
    int n_panels = 0, used = 0;
    for (int i = 0; i < n_curves; i++) {
        int seen = 0;
        for (int p = 0; p < n_panels; p++) seen |= !strcmp(panels[p].title, curves[i].panel);
        if (seen) continue;
        PlotPanel *pn = &panels[n_panels++];
        pn->title = curves[i].panel;
        pn->series = &series[used];
        const char *grp = curves[i].panel;
        pn->xlabel = !strncmp(grp, "epoch:", 6) ? "epoch" : !strncmp(grp, "step:", 5) ? "step" : NULL;
        pn->logy = strstr(grp, "loss") != NULL;  // a diverged loss beside a falling one: decades apart
        for (int j = i; j < n_curves; j++)
            if (!strcmp(curves[j].panel, curves[i].panel))
                series[used++] = (PlotSeries){curves[j].name, curves[j].x, curves[j].y, curves[j].n};
        pn->n_series = (int)(&series[used] - pn->series);
    }
    plot_png(out, panels, n_panels);
    printf("wrote %s (%d panels, %d curves, %ld lines; %d constant series left out)\n", out, n_panels, n_curves, lineno,
           dropped);
    return 0;
}
