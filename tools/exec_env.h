// The execution options of a benchmark or test program that has no flags for them: the defaults,
// changed by the old environment variables (CTRAIN_CONV_ENGINE=wgmma, CTRAIN_FUSE_BN_ADD=0, ...;
// nn/exec_options.h lists them). `train` takes flags instead (trainer/config). This is the
// program's top level reading its environment; what it gets is passed down explicitly.
#pragma once
#include <stdlib.h>

#include "nn/exec_options.h"
#include "util/common.h"

static inline ExecOptions tool_exec_options(void) {
    ExecOptions o = exec_options_default();
    const char *err = exec_options_from_env(&o, getenv);
    if (err) ct_die("%s", err);
    return o;
}
