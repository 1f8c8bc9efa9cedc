// `train predict`: the top-k classes of image files with a trained model, on the CPU, with the
// evaluation's preprocessing (resize the short side, center crop, normalise).
#pragma once

// argv[0] is the program, argv[1] "predict". Returns the exit status: 0, or 1 when any image
// could not be read or decoded (each is reported by name; the others are still classified).
int predict_main(int argc, char **argv);
