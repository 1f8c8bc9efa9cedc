// Cost accounting's C API (kernels/kernels.h): the emulator counts (kernels/emu/cost.cpp); a
// real GPU has no such counters here, so there these report nothing and cost nothing.
#include "kernels/common.cuh"
#include "kernels/kernels.h"

#if CT_EMU
extern "C" {
void ct_emu_cost_enable(int on);
void ct_emu_cost_tag(int op, int part);
size_t ct_emu_cost_count(void);
int ct_emu_cost_get(size_t i, CtCostLaunch *out);

int ct_cost_available(void) { return 1; }
void ct_cost_enable(int on) { ct_emu_cost_enable(on); }
void ct_cost_tag(int op, int part) { ct_emu_cost_tag(op, part); }
size_t ct_cost_count(void) { return ct_emu_cost_count(); }
int ct_cost_get(size_t i, CtCostLaunch *out) { return ct_emu_cost_get(i, out); }
}
#else
extern "C" {
int ct_cost_available(void) { return 0; }
void ct_cost_enable(int on) { (void)on; }
void ct_cost_tag(int op, int part) { (void)op, (void)part; }
size_t ct_cost_count(void) { return 0; }
int ct_cost_get(size_t i, CtCostLaunch *out) { (void)i, (void)out; return 0; }
}
#endif
