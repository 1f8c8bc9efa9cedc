// Mutation testing of the cross-stream waits and host synchronisations (tests/test_emu_schedules.sh):
// in the emulated build, `CT_MUTABLE("name") statement;` skips the statement when the environment
// says CTRAIN_EMU_MUTANT=name, so a test can show that deleting it fails under some stream schedule
// (docs/EMULATION.md). In the CUDA build it is nothing: the statement always runs.
#pragma once
#if defined(CTRAIN_EMU)
namespace emu {
bool mutant(const char *name);
}
#define CT_MUTABLE(name) if (!::emu::mutant(name))
#else
#define CT_MUTABLE(name)
#endif
