// --config FILE: a recipe file of flags over the settings (trainer/config.c's flag table).
#pragma once
#include "trainer/config.h"

// --config FILE over c: sets the flags the file names, except those given (the command line's),
// and marks them given with their line. Dies naming FILE:LINE on an unknown flag or a bad value;
// config_from_args names the line of a flag whose value the validator refuses.
void config_read_file(Config *c, ConfigGiven *given, const char *path);
// After config_read_file: errors until ct_set_error_context(NULL) name the FILE:LINE of the flag
// they are about.
void config_file_blame(const ConfigGiven *given);
