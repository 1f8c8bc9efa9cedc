// Progressive resizing: the training resolution of each epoch, with FFCV's semantics
// (ffcv-imagenet's get_resolution): `start` up to epoch ramp_start, `end` from epoch ramp_end on,
// and in between the linear interpolation rounded half-to-even to a multiple of `step`. Epochs
// count from 0, as FFCV's start_ramp/end_ramp do. A pure function of the epoch, so a resumed run
// crops each epoch at the size the uninterrupted run did.
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int start, end;             // pixels; start == end: one resolution throughout
    int ramp_start, ramp_end;   // epochs (from 0); ramp_end > ramp_start when start != end
    int step;                   // >= 1; start and end are multiples of it when they differ
} ResSchedule;

int res_schedule_at(const ResSchedule *s, int epoch);
// The largest resolution of any epoch (what the loader's buffers must hold).
int res_schedule_max(const ResSchedule *s);

#ifdef __cplusplus
}
#endif
