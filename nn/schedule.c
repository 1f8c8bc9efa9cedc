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
    if (s->kind == LR_COSINE) {
        int64_t span = total - warm;
        if (span <= 0) return s->base_lr;
        double frac = (double)(t - warm) / (double)span;
        if (frac > 1.0) frac = 1.0;
        return s->base_lr * 0.5 * (1.0 + cos(M_PI * frac));
    }
    int64_t epoch = t / spe;
    int size = s->step_size > 0 ? s->step_size : 1;
    return s->base_lr * pow(s->gamma, (double)(epoch / size));
}

int lr_kind_parse(const char *name, LrKind *out) {
    if (!strcmp(name, "step")) { *out = LR_STEP; return 1; }
    if (!strcmp(name, "cosine")) { *out = LR_COSINE; return 1; }
    return 0;
}

const char *lr_kind_name(LrKind k) { return k == LR_COSINE ? "cosine" : "step"; }
