// Training curves as a PNG, drawn by ctrain itself (libpng for the file, a small rasteriser and a
// 5x7 bitmap font for lines, axes and labels): no plotting library, no Python needed to see a run.
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const char *label;
    const double *x, *y;  // n points; non-finite y values are skipped (a gap in the line)
    int n;
} PlotSeries;

typedef struct {
    const char *title;
    const char *xlabel;
    const PlotSeries *series;
    int n_series;
    int logy;  // 1: a log10 y axis when every value is > 0 (losses spanning decades)
} PlotPanel;

// Draws the panels in a grid (two columns), each with its legend to the right of its plot area, and
// writes path atomically. Dies naming path on failure.
void plot_png(const char *path, const PlotPanel *panels, int n_panels);

#ifdef __cplusplus
}
#endif
