// util/plot: the PNG decodes (libpng), has the grid's size, and the curves land where the data says:
// a rising line puts series-colour pixels low on the left and high on the right of its panel.
#include <math.h>
#include <png.h>
#include <string.h>
#include <unistd.h>

#include "tests/test.h"
#include "util/common.h"
#include "util/plot.h"

static uint8_t *read_png(const char *path, int *w, int *h) {
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_file(&im, path)) return NULL;
    im.format = PNG_FORMAT_RGB;
    uint8_t *px = ct_alloc(PNG_IMAGE_SIZE(im));
    if (!png_image_finish_read(&im, NULL, px, 0, NULL)) return NULL;
    *w = im.width;
    *h = im.height;
    return px;
}

int main(void) {
    double x[100], up[100], down[100], holes[100];
    for (int i = 0; i < 100; i++) {
        x[i] = i;
        up[i] = i * 0.5;
        down[i] = 100 - i;
        holes[i] = (i % 10 == 3) ? NAN : sin(i * 0.1);
    }
    PlotSeries s1[] = {{"up", x, up, 100}};
    PlotSeries s2[] = {{"down", x, down, 100}, {"holes", x, holes, 100}};
    PlotSeries s3[] = {{"empty", x, holes, 0}};
    PlotPanel panels[] = {{"rising", "step", s1, 1, 0}, {"two", "step", s2, 2, 0}, {"nothing", NULL, s3, 1, 0}};
    char path[] = "/tmp/ctrain_plot_XXXXXX.png";
    int fd = mkstemps(path, 4);
    close(fd);
    plot_png(path, panels, 3);
    int w = 0, h = 0;
    uint8_t *px = read_png(path, &w, &h);
    CHECK(px != NULL, "PNG does not decode");
    if (!px) return test_summary("test_plot");
    CHECK(w == 1640 && h == 760, "size %dx%d, want 1640x760 (2 columns of 820, 2 rows)", w, h);
    // First series colour (31,119,180) in the first panel: its lowest and highest pixel rows should
    // sit left and right respectively.
    long left_y = 0, left_n = 0, right_y = 0, right_n = 0;
    for (int y = 60; y < 320; y++)
        for (int xx = 100; xx < 580; xx++) {
            const uint8_t *p = px + ((size_t)y * w + xx) * 3;
            if (p[0] == 31 && p[1] == 119 && p[2] == 180) {
                if (xx < 200) { left_y += y; left_n++; }
                if (xx > 480 && xx < 560) { right_y += y; right_n++; }
            }
        }
    CHECK(left_n > 0 && right_n > 0, "curve pixels missing (%ld left, %ld right)", left_n, right_n);
    if (left_n && right_n) CHECK(left_y / left_n > right_y / right_n + 100, "rising curve is not rising");
    free(px);
    unlink(path);
    return test_summary("test_plot");
}
