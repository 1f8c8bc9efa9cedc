#include "util/plot.h"

#include <ctype.h>
#include <math.h>
#include <png.h>
#include <string.h>

#include "util/common.h"

// The left margin holds 8 characters of tick label ("-2.0E+07"), the right one the legend (16).
enum { PANEL_W = 820, PANEL_H = 380, COLS = 2, SCALE = 2 /* font pixel size */ };
enum { MARGIN_L = 112, MARGIN_R = 212, MARGIN_T = 40, MARGIN_B = 60 };

typedef struct {
    uint8_t *px;  // RGB
    int w, h;
} Image;

static const uint8_t palette[][3] = {{31, 119, 180}, {255, 127, 14}, {44, 160, 44}, {214, 39, 40},
                                     {148, 103, 189}, {140, 86, 75}, {227, 119, 194}, {127, 127, 127}};

static void set_px(Image *im, int x, int y, const uint8_t c[3]) {
    if (x < 0 || y < 0 || x >= im->w || y >= im->h) return;
    memcpy(im->px + ((size_t)y * im->w + x) * 3, c, 3);
}

static void fill_rect(Image *im, int x0, int y0, int w, int h, const uint8_t c[3]) {
    for (int y = y0; y < y0 + h; y++)
        for (int x = x0; x < x0 + w; x++) set_px(im, x, y, c);
}

static void line(Image *im, int x0, int y0, int x1, int y1, const uint8_t c[3], int thick) {
    int dx = abs(x1 - x0), sx = x0 < x1 ? 1 : -1, dy = -abs(y1 - y0), sy = y0 < y1 ? 1 : -1;
    int err = dx + dy;
    for (;;) {
        fill_rect(im, x0 - thick / 2, y0 - thick / 2, thick, thick, c);
        if (x0 == x1 && y0 == y1) break;
        int e2 = 2 * err;
        if (e2 >= dy) { err += dy; x0 += sx; }
        if (e2 <= dx) { err += dx; y0 += sy; }
    }
}

// 5x7 glyphs, one byte per row, bit 4 = leftmost column. Letters render as capitals.
static const char glyph_chars[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ.-+:/_%()=";
static const uint8_t glyphs[][7] = {
    {0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E}, {0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E},
    {0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F}, {0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E},
    {0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02}, {0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E},
    {0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E}, {0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08},
    {0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E}, {0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C},
    {0x0E, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11}, {0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E},
    {0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E}, {0x1C, 0x12, 0x11, 0x11, 0x11, 0x12, 0x1C},
    {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F}, {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10},
    {0x0E, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0F}, {0x11, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11},
    {0x0E, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E}, {0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C},
    {0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11}, {0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1F},
    {0x11, 0x1B, 0x15, 0x15, 0x11, 0x11, 0x11}, {0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11},
    {0x0E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E}, {0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10},
    {0x0E, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0D}, {0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11},
    {0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E}, {0x1F, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04},
    {0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E}, {0x11, 0x11, 0x11, 0x11, 0x11, 0x0A, 0x04},
    {0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0A}, {0x11, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x11},
    {0x11, 0x11, 0x11, 0x0A, 0x04, 0x04, 0x04}, {0x1F, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1F},
    {0x00, 0x00, 0x00, 0x00, 0x00, 0x0C, 0x0C}, {0x00, 0x00, 0x00, 0x1F, 0x00, 0x00, 0x00},
    {0x00, 0x04, 0x04, 0x1F, 0x04, 0x04, 0x00}, {0x00, 0x0C, 0x0C, 0x00, 0x0C, 0x0C, 0x00},
    {0x00, 0x01, 0x02, 0x04, 0x08, 0x10, 0x00}, {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x1F},
    {0x18, 0x19, 0x02, 0x04, 0x08, 0x13, 0x03}, {0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02},
    {0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08}, {0x00, 0x00, 0x1F, 0x00, 0x1F, 0x00, 0x00},
};

static int text_width(const char *s) { return (int)strlen(s) * 6 * SCALE; }

static void text(Image *im, int x, int y, const char *s, const uint8_t c[3]) {
    for (; *s; s++, x += 6 * SCALE) {
        const char *g = strchr(glyph_chars, toupper((unsigned char)*s));
        if (!g || !*s) continue;  // space and unknown characters: blank cell
        const uint8_t *rows = glyphs[g - glyph_chars];
        for (int r = 0; r < 7; r++)
            for (int col = 0; col < 5; col++)
                if (rows[r] & (0x10 >> col)) fill_rect(im, x + col * SCALE, y + r * SCALE, SCALE, SCALE, c);
    }
}

static void fmt_tick(char *buf, size_t n, double v, double step) {
    if (v == 0) { snprintf(buf, n, "0"); return; }
    double a = fabs(v);
    if (a >= 1e5 || a < 1e-3) snprintf(buf, n, step == v ? "%.0e" : "%.1e", v);  // a log axis: 1E+07
    else {
        int decimals = step >= 1 ? 0 : (int)ceil(-log10(step));
        if (decimals > 4) decimals = 4;
        snprintf(buf, n, "%.*f", decimals, v);
    }
}

// "Nice" tick spacing: 1, 2 or 5 times a power of ten, about five ticks over the range.
static double nice_step(double range) {
    if (!(range > 0)) return 1;
    double raw = range / 5, p = pow(10, floor(log10(raw))), f = raw / p;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * p;
}

// A y value as plotted: its log10 on a log axis.
static double ymap(double y, int logy) { return logy ? (y > 0 ? log10(y) : NAN) : y; }

static void draw_panel(Image *im, int ox, int oy, const PlotPanel *pn) {
    static const uint8_t black[3] = {0, 0, 0}, grid[3] = {225, 225, 225}, grey[3] = {90, 90, 90};
    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
    int logy = pn->logy;
    for (int s = 0; s < pn->n_series; s++)
        for (int i = 0; i < pn->series[s].n; i++)
            if (isfinite(pn->series[s].y[i]) && !(pn->series[s].y[i] > 0)) logy = 0;  // a log axis needs y > 0
    for (int s = 0; s < pn->n_series; s++)
        for (int i = 0; i < pn->series[s].n; i++) {
            double x = pn->series[s].x[i], y = ymap(pn->series[s].y[i], logy);
            if (!isfinite(x) || !isfinite(y)) continue;
            xmin = fmin(xmin, x); xmax = fmax(xmax, x);
            ymin = fmin(ymin, y); ymax = fmax(ymax, y);
        }
    if (logy && ymax - ymin < 1) logy = 0;  // less than a decade: the linear axis reads better
    if (!logy && pn->logy) {  // recompute on the linear scale
        ymin = INFINITY, ymax = -INFINITY;
        for (int s = 0; s < pn->n_series; s++)
            for (int i = 0; i < pn->series[s].n; i++) {
                double x = pn->series[s].x[i], y = pn->series[s].y[i];
                if (!isfinite(x) || !isfinite(y)) continue;
                ymin = fmin(ymin, y); ymax = fmax(ymax, y);
            }
    }
    text(im, ox + (PANEL_W - text_width(pn->title)) / 2, oy + 10, pn->title, black);
    int px0 = ox + MARGIN_L, py0 = oy + MARGIN_T, pw = PANEL_W - MARGIN_L - MARGIN_R, ph = PANEL_H - MARGIN_T - MARGIN_B;
    if (!(xmin <= xmax)) {  // nothing finite to draw
        text(im, px0 + 20, py0 + ph / 2, "no data", grey);
        return;
    }
    if (xmax == xmin) { xmin -= 1; xmax += 1; }
    if (ymax == ymin) { double d = fabs(ymin) > 0 ? fabs(ymin) * 0.1 : 1; ymin -= d; ymax += d; }
    double pad = (ymax - ymin) * 0.05;
    ymin -= pad; ymax += pad;
    // Whole-number x values (epochs, steps): no ticks between them (1.2 epochs is no record).
    int xint = 1;
    for (int s = 0; s < pn->n_series; s++)
        for (int i = 0; i < pn->series[s].n; i++)
            if (isfinite(pn->series[s].x[i]) && pn->series[s].x[i] != floor(pn->series[s].x[i])) xint = 0;
    double xs = nice_step(xmax - xmin), ys = logy ? CT_MAX(1, nice_step(ymax - ymin)) : nice_step(ymax - ymin);
    if (logy) ys = ceil(ys);  // whole decades
    if (xint && xs < 1) xs = 1;
    char buf[32];
    for (double t = ceil(ymin / ys) * ys; t <= ymax + 1e-12 * fabs(ymax); t += ys) {
        int y = py0 + ph - (int)lround((t - ymin) / (ymax - ymin) * ph);
        line(im, px0, y, px0 + pw, y, grid, 1);
        if (logy) fmt_tick(buf, sizeof buf, pow(10, round(t)), pow(10, round(t)));
        else fmt_tick(buf, sizeof buf, fabs(t) < ys * 1e-9 ? 0 : t, ys);
        text(im, px0 - 8 - text_width(buf), y - 7, buf, grey);
    }
    if (logy) {  // said in the title
        char t[300];
        snprintf(t, sizeof t, "%s (log scale)", pn->title);
        fill_rect(im, ox, oy + 8, PANEL_W, 7 * SCALE + 4, (const uint8_t[3]){255, 255, 255});
        text(im, ox + (PANEL_W - text_width(t)) / 2, oy + 10, t, black);
    }
    for (double t = ceil(xmin / xs) * xs; t <= xmax + 1e-12 * fabs(xmax); t += xs) {
        int x = px0 + (int)lround((t - xmin) / (xmax - xmin) * pw);
        line(im, x, py0, x, py0 + ph, grid, 1);
        fmt_tick(buf, sizeof buf, fabs(t) < xs * 1e-9 ? 0 : t, xs);
        text(im, x - text_width(buf) / 2, py0 + ph + 8, buf, grey);
    }
    line(im, px0, py0, px0, py0 + ph, black, 1);
    line(im, px0, py0 + ph, px0 + pw, py0 + ph, black, 1);
    if (pn->xlabel) text(im, px0 + (pw - text_width(pn->xlabel)) / 2, py0 + ph + 32, pn->xlabel, grey);
    for (int s = 0; s < pn->n_series; s++) {
        const PlotSeries *sr = &pn->series[s];
        const uint8_t *c = palette[s % CT_ARRAY_LEN(palette)];
        int have_prev = 0, lx = 0, ly = 0;
        for (int i = 0; i < sr->n; i++) {
            if (!isfinite(sr->x[i]) || !isfinite(ymap(sr->y[i], logy))) { have_prev = 0; continue; }
            int x = px0 + (int)lround((sr->x[i] - xmin) / (xmax - xmin) * pw);
            int y = py0 + ph - (int)lround((ymap(sr->y[i], logy) - ymin) / (ymax - ymin) * ph);
            if (have_prev) line(im, lx, ly, x, y, c, 2);
            else fill_rect(im, x - 2, y - 2, 4, 4, c);
            lx = x; ly = y; have_prev = 1;
        }
        // Legend, right of the plot area (never over a curve).
        int ly0 = py0 + 8 + s * 20, lx0 = px0 + pw + 40;
        fill_rect(im, lx0 - 26, ly0 + 5, 18, 4, c);
        if (sr->label) text(im, lx0, ly0, sr->label, black);
    }
}

void plot_png(const char *path, const PlotPanel *panels, int n_panels) {
    int cols = n_panels < COLS ? (n_panels > 0 ? n_panels : 1) : COLS;
    int rows = (n_panels + cols - 1) / cols;
    if (rows < 1) rows = 1;
    Image im = {NULL, cols * PANEL_W, rows * PANEL_H};
    im.px = ct_alloc((size_t)im.w * im.h * 3);
    memset(im.px, 255, (size_t)im.w * im.h * 3);
    for (int i = 0; i < n_panels; i++) draw_panel(&im, (i % cols) * PANEL_W, (i / cols) * PANEL_H, &panels[i]);

    AtomicFile af = ct_atomic_open(path);
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!png || !info) ct_die("libpng could not start writing %s", path);
    if (setjmp(png_jmpbuf(png))) {
        ct_atomic_abort(&af);
        ct_die("libpng failed writing %s", path);
    }
    png_init_io(png, af.f);
    png_set_IHDR(png, info, im.w, im.h, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    for (int y = 0; y < im.h; y++) png_write_row(png, im.px + (size_t)y * im.w * 3);
    png_write_end(png, info);
    png_destroy_write_struct(&png, &info);
    ct_atomic_commit(&af);
    free(im.px);
}
