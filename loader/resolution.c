// Progressive resizing's schedule (see resolution.h).
#include "loader/resolution.h"

#include <math.h>

int res_schedule_at(const ResSchedule *s, int epoch) {
    if (s->start == s->end || epoch <= s->ramp_start) return s->start;
    if (epoch >= s->ramp_end) return s->end;
    double t = (double)(epoch - s->ramp_start) / (double)(s->ramp_end - s->ramp_start);
    double res = s->start + t * (s->end - s->start);
    // numpy's round, as FFCV's int(np.round(res / 32)) * 32: half to even (the default rounding mode).
    return (int)nearbyint(res / s->step) * s->step;
}

int res_schedule_max(const ResSchedule *s) { return s->start > s->end ? s->start : s->end; }
