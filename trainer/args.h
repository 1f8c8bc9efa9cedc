// The command line to a run's settings, in the order of precedence trainer/config.h states: the
// defaults, argv, --config FILE, the execution options' old variables, the --demo recipe,
// --resume's recorded settings, --evaluate's model, --gpus, the launchers' environment, then
// validation and the autos resolved. Above config, config_file and settings, which know nothing
// of each other's callers (no include circle).
#pragma once
#include "trainer/config.h"

// Exits 0 after --help; dies with a message naming the flag, file line or variable at fault.
// argv's strings are kept, not copied.
void config_from_args(Config *c, ConfigGiven *given, int argc, char **argv);
