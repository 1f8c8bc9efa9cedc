// The epoch loop of one rank, and the signals that stop it cleanly. Every rank runs the loop (rank
// 0 on the main thread); rank 0 writes the progress line, metrics, events and checkpoints.
#pragma once
#include "trainer/run.h"
#include "trainer/step.h"

// The first SIGINT/SIGTERM asks the loop to finish the current step, checkpoint and exit; a
// second one exits at once (the checkpoints on disk are always complete: atomic writes).
void loop_install_signals(void);
// The signal that asked the run to stop, or 0.
int loop_stop_signal(void);

// Trains from r->pos to --epochs, evaluating after every epoch. Returns 0, or 128 + the signal
// when a SIGINT/SIGTERM stopped the run after a checkpoint. *final_eval: the last evaluation.
int loop_train(Run *r, EvalResult *final_eval);
