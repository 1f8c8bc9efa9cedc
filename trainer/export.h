// `train export`: a model file to an ONNX graph for inference elsewhere (nn/onnx.h writes it).
#pragma once

// argv[0] is the program, argv[1] "export". Returns the exit status (dies on bad flags or files).
int export_main(int argc, char **argv);
