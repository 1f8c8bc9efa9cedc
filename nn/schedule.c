#include "nn/schedule.h"

#include <math.h>
#include <string.h>

double lr_at(const LrSchedule *s, int64_t t) {
    int64_t spe = s->steps_per_epoch > 0 ? s->steps_per_epoch : 1;
    int64_t total = (int64_t)s->epochs * spe;
    // Warmup length in steps; rounded so that fractional epochs mean what they say.
    int64_t warm = (int64_t)llround(s->warmup_epochs * (double)spe);
    if (warm > total) warm = total;
    if (t < warm) return s->base_lr * (double)(t + 1) / (double)warm;
    int64_t span = total - warm;
    switch (s->kind) {
    case LR_COSINE: {
        if (span <= 0) return s->base_lr;
        double frac = (double)(t - warm) / (double)span;
        if (frac > 1.0) frac = 1.0;
        return s->base_lr * 0.5 * (1.0 + cos(M_PI * frac));
    }
    case LR_LINEAR: {
        if (span <= 0) return s->base_lr;
        // Steps past the end (none in a run; a caller asking anyway) stay at 0, never negative.
        double left = (double)(total - t) / (double)span;
        return s->base_lr * (left > 0 ? left : 0);
    }
    case LR_POLY: {
        double frac = (double)(t + 1 - warm) / (double)(span + 1);
        if (frac > 1.0) frac = 1.0;
        return (s->base_lr - s->end_lr) * pow(1.0 - frac, s->power) + s->end_lr;
    }
    case LR_STEP: break;
    }
    int64_t epoch = t / spe;
    int size = s->step_size > 0 ? s->step_size : 1;
    return s->base_lr * pow(s->gamma, (double)(epoch / size));
}

static const char *const NAMES[] = {"step", "cosine", "linear", "poly"};

int lr_kind_parse(const char *name, LrKind *out) {
    for (int k = 0; k < 4; k++)
        if (!strcmp(name, NAMES[k])) { *out = (LrKind)k; return 1; }
    return 0;
}

const char *lr_kind_name(LrKind k) { return (unsigned)k < 4 ? NAMES[k] : "step"; }
