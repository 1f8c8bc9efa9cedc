#!/usr/bin/env bash
# The only build entry of ctrain.
#   ./build.sh          release build: ./train and ./packdata (CUDA backend too when nvcc is found)
#   ./build.sh test     build, then run every test that needs no GPU; ends with 'N passed, N failed'
#   ./build.sh demo     build, then ./train --demo
#   ./build.sh clean    remove build outputs
#   ./build.sh gpu-tests  build tests/emu_*.c against the real CUDA kernels into build/gpu-tests/
# Environment: CC, CXX, NVCC (override compilers), CTRAIN_NO_CUDA=1 (CPU backend only),
#   TEST_FILTER=regex (run only matching tests), FUZZ_SECONDS (per fuzz target, default 30),
#   JOBS (parallel compile jobs), TEST_JOBS (tests run at once, default: the number of CPUs).
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$PWD
MODE=${1:-release}
JOBS=${JOBS:-$(nproc)}
CC=${CC:-gcc}
CXX=${CXX:-g++}

say() { printf '[build] %s\n' "$*"; }

# ---------------------------------------------------------------------------
# Dependencies. Debian packages only; installed when root, else the command is printed.
need_pkgs=()
[ -f /usr/include/jpeglib.h ] || need_pkgs+=(libjpeg62-turbo-dev)
[ -f /usr/include/lz4.h ] || need_pkgs+=(liblz4-dev)
[ -f /usr/include/png.h ] || need_pkgs+=(libpng-dev)
[ -f /usr/include/zlib.h ] || need_pkgs+=(zlib1g-dev)
[ -f /usr/include/jansson.h ] || need_pkgs+=(libjansson-dev)
command -v "$CC" >/dev/null || need_pkgs+=(gcc)
command -v "$CXX" >/dev/null || need_pkgs+=(g++)
command -v make >/dev/null || need_pkgs+=(make)
if [ "$MODE" = test ]; then
  [ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import torch, torchvision, numpy' 2>/dev/null \
    || need_pkgs+=(python3-torch python3-torchvision python3-numpy)
  [ -d /usr/share/datasets/fashion-mnist ] || need_pkgs+=(dataset-fashion-mnist)
  command -v clang >/dev/null || need_pkgs+=(clang)
  ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 || need_pkgs+=(libclang-rt-14-dev)
  [ -f /usr/lib/llvm-14/lib/libomp.so ] || [ -n "$(ls /usr/lib/llvm-*/lib/libomp.so 2>/dev/null)" ] || need_pkgs+=(libomp-dev)
fi
if [ ${#need_pkgs[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing Debian packages: ${need_pkgs[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null
  else
    echo "ctrain needs these Debian packages; run:" >&2
    echo "  sudo apt-get install -y ${need_pkgs[*]}" >&2
    exit 1
  fi
fi
if [ "$MODE" = test ]; then
  # Independent readers for ctrain's files: PyPI's safetensors, TensorBoard, and onnx/onnxruntime
  # (exported graphs), on the pip Python.
  PIPPY=${PIPPY:-python3}
  if ! "$PIPPY" -c 'import safetensors, tensorboard, numpy, onnx, onnxruntime' 2>/dev/null; then
    say "installing PyPI packages for the test readers: safetensors tensorboard numpy onnx onnxruntime"
    "$PIPPY" -m pip install -q safetensors tensorboard numpy onnx onnxruntime || { echo "pip install failed: run '$PIPPY -m pip install safetensors tensorboard numpy onnx onnxruntime'" >&2; exit 1; }
  fi
fi

# ---------------------------------------------------------------------------
# CUDA toolchain (optional).
NVCC=${NVCC:-}
if [ -z "$NVCC" ] && [ -z "${CTRAIN_NO_CUDA:-}" ]; then
  if command -v nvcc >/dev/null; then NVCC=$(command -v nvcc)
  elif [ -x /usr/local/cuda/bin/nvcc ]; then NVCC=/usr/local/cuda/bin/nvcc; fi
fi
CUDA_LIB=""
if [ -n "$NVCC" ]; then
  CUDA_HOME=$(cd "$(dirname "$NVCC")/.." && pwd)
  for d in "$CUDA_HOME/lib64" "$CUDA_HOME/lib" "$CUDA_HOME/targets/x86_64-linux/lib"; do
    [ -f "$d/libcudart_static.a" ] && CUDA_LIB=$d && break
  done
  [ -n "$CUDA_LIB" ] || { say "nvcc found at $NVCC but no libcudart_static.a: building the CPU backend only"; NVCC=""; }
fi

staticlib() { # the static archive of a library, so ./train carries it inside
  for d in /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib /usr/local/lib; do
    [ -f "$d/lib$1.a" ] && { echo "$d/lib$1.a"; return; }
  done
  echo "-l$1"
}
STATIC_LIBS="$(staticlib jpeg) $(staticlib lz4) $(staticlib png16) $(staticlib z) $(staticlib jansson)"

if [ "$MODE" = clean ]; then rm -rf "${BUILD_DIR:-build}" train packdata; say "clean"; exit 0; fi

# ---------------------------------------------------------------------------
# The rules. Sources are discovered, so adding a file never means editing this script:
#   util/ nn/ loader/ dist/ *.c      -> build/libctrain.a (host library)
#   trainer/*.c                       -> build/libtrainer.a, and build/libtrainer_cuda.a with -DCTRAIN_CUDA
#   kernels/*.cu nn/*.cu dist/*.cu    -> nvcc (real GPU) and g++ against kernels/emu (emulated GPU):
#                                        the kernels, and the GPU twins beside their CPU twins
#                                        (nn/model_cuda.cu, dist/gradsync_cuda.cu)
#   kernels/emu/*.cpp                 -> the emulator runtime
#   main.c -> ./train, tools/packdata.c -> ./packdata, tools/bench_*.c -> build/tools/*
#   tools/bench_gpu_*.c               -> build/tools/* on the CUDA kernels (nvcc) and build/emu-tools/* (emulated)
#   tests/test_*.c                    -> unit tests (also built with ASan+UBSan unless marked 'test: no-asan',
#                                        and with TSan when marked 'test: tsan': pthread code, no OpenMP)
#   tests/emu_*.c|cpp                 -> tests linked with the emulated CUDA kernels
#   tests/fuzz_*.c                    -> libFuzzer targets, run for a bounded time
#   tests/test_*.sh                   -> script tests (end-to-end, PyTorch parity)
HAVE_CUDA=0; [ -n "$NVCC" ] && HAVE_CUDA=1
B=${BUILD_DIR:-build}
mkdir -p "$B/gen"
# ctrain's own commit, fixed at build time (config.json's git_commit), whatever directory the
# binary later runs in. The header is rewritten only when the commit changes, so make rebuilds
# exactly what includes it.
commit=$(git -C "$ROOT" describe --always --dirty --abbrev=12 2>/dev/null || echo unknown)
printf '#define CTRAIN_GIT_COMMIT "%s"\n' "$commit" > "$B/gen/ctrain_commit.h.new"
if cmp -s "$B/gen/ctrain_commit.h.new" "$B/gen/ctrain_commit.h"; then rm "$B/gen/ctrain_commit.h.new"
else mv "$B/gen/ctrain_commit.h.new" "$B/gen/ctrain_commit.h"; fi
if [ "$B" = build ]; then BIN=.; else BIN=$B; fi
cat > "$B/rules.mk.new" <<EOF
B := $B
BIN := $BIN
ROOT := $ROOT
CC := $CC
CXX := $CXX
NVCC := $NVCC
HAVE_CUDA := $HAVE_CUDA
CUDA_LIB := $CUDA_LIB
STATIC_LIBS := $STATIC_LIBS
EOF
cat >> "$B/rules.mk.new" <<'EOF'
WARN := -Wall -Wextra -Wno-unused-parameter -Wno-sign-compare
CFLAGS := -std=c11 -O3 -g -fopenmp -D_GNU_SOURCE -I. -I$(B)/gen $(WARN) -MMD -MP
# ThreadSanitizer builds of the pthread code (tests marked 'test: tsan'): no OpenMP, whose runtime
# TSan cannot see into (the pragmas are ignored, so OpenMP loops run serially there).
TSANFLAGS := -std=c11 -O1 -g -D_GNU_SOURCE -I. $(WARN) -Wno-unknown-pragmas -MMD -MP -fsanitize=thread
ASANFLAGS := -std=c11 -O1 -g -fopenmp -D_GNU_SOURCE -I. -I$(B)/gen $(WARN) -MMD -MP -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
EMUFLAGS := -std=c++17 -O2 -g -pthread -D_GNU_SOURCE -DCTRAIN_EMU -I. -Wall -Wno-unused-parameter -Wno-sign-compare -Wno-unused-variable -Wno-unused-function -MMD -MP
# Images: sm_80 and sm_90 machine code, plus compute_80 PTX, which the driver JIT-compiles on
# GPUs newer than the images (compute 10.x/12.x: Blackwell), where no cubin loads: without it
# ctrain has no kernel image there at all. The mma.sync engines (generic, v1, v2) run from it.
NVFLAGS := -std=c++17 -O3 -lineinfo -I. -DCTRAIN_CUDA -gencode arch=compute_80,code=sm_80 -gencode arch=compute_80,code=compute_80 -gencode arch=compute_90,code=sm_90 -Xcompiler -Wall,-Wno-unused-parameter
# The Hopper path (kernels/ptx_wgmma.cuh: wgmma, mbarrier try_wait, cp.async.bulk) exists only on
# sm_90a: the files using it build for sm_80 (+ compute_80 PTX) and sm_90a instead (their sm_80
# code traps; the host side launches it only on compute 9.0: kernels/devcaps.cu), the rest stays
# portable. sm_90a code is not forward compatible, so it carries no PTX.
NVFLAGS_90A := $(subst code=sm_90,code=sm_90a,$(subst arch=compute_90,arch=compute_90a,$(NVFLAGS)))
$(B)/cuda/kernels/ptx_check.o $(B)/cuda/kernels/conv_wgmma.o: NVFLAGS := $(NVFLAGS_90A)
LDLIBS := $(STATIC_LIBS) -lm -ldl -lpthread
CUDALIBS := $(CUDA_LIB)/libcudart_static.a -lrt -ldl -lpthread -lstdc++
# The programs that travel (./train, ./packdata, build/tools/*, build/gpu-tests/*) carry the C++
# runtime (cudart needs it) and OpenMP's inside: only glibc stays dynamic (NCCL is dlopen'ed), so
# nothing else can differ on the machine they are carried to. `-fopenmp` at link time would add a
# shared -lgomp, so they link libgomp's archive by path instead; tests/test_linkage.sh checks ldd.
GOMP_A := $(shell $(CC) -print-file-name=libgomp.a)
STDCXX_A := $(shell $(CXX) -print-file-name=libstdc++.a)
SHIP_LD := -pthread -static-libgcc
SHIP_LIBS := $(STATIC_LIBS) $(GOMP_A) -lm -ldl -lpthread
SHIP_CUDALIBS := $(CUDA_LIB)/libcudart_static.a $(STDCXX_A) -lrt -ldl -lpthread

LIB_SRC := $(sort $(wildcard util/*.c nn/*.c loader/*.c dist/*.c))
LIB_OBJ := $(LIB_SRC:%.c=$(B)/obj/%.o)
# The trainer twice: for a train without the CUDA backend, and with it (-DCTRAIN_CUDA, which only
# trainer/backend.c reads). Unit tests link the first and the sanitizer build.
TRAINER_SRC := $(sort $(wildcard trainer/*.c))
TRAINER_OBJ := $(TRAINER_SRC:%.c=$(B)/obj/%.o)
TRAINER_CUDA_OBJ := $(TRAINER_SRC:%.c=$(B)/cuda/%.o)
ASAN_OBJ := $(LIB_SRC:%.c=$(B)/asan/%.o) $(TRAINER_SRC:%.c=$(B)/asan/%.o)
CU_SRC := $(sort $(wildcard kernels/*.cu nn/*.cu dist/*.cu))
CU_OBJ := $(CU_SRC:%.cu=$(B)/cuda/%.o)
EMU_RT_SRC := $(sort $(wildcard kernels/emu/*.cpp))
EMU_OBJ := $(CU_SRC:%.cu=$(B)/emu/%.o) $(EMU_RT_SRC:%.cpp=$(B)/emu/%.o)
TOOLS := $(patsubst tools/%.c,$(B)/tools/%,$(filter-out tools/bench_gpu_%.c,$(wildcard tools/bench_*.c tools/plot*.c tools/dump*.c)))
# Host tools driving the GPU executor: linked like ./train, and like train-emu for the tests.
GPU_TOOL_SRC := $(wildcard tools/bench_gpu_*.c)
EMU_TOOLS := $(GPU_TOOL_SRC:tools/%.c=$(B)/emu-tools/%)
UNIT := $(patsubst tests/%.c,$(B)/tests/%,$(wildcard tests/test_*.c))
TSAN_SRC := $(sort $(wildcard util/*.c loader/*.c dist/*.c))
TSAN_OBJ := $(TSAN_SRC:%.c=$(B)/tsan/%.o)
TSAN_UNIT := $(patsubst tests/%.c,$(B)/tsan/tests/%,$(shell grep -l 'test: tsan' /dev/null $(wildcard tests/test_*.c)))
ASAN_UNIT := $(patsubst tests/%.c,$(B)/asan/tests/%,$(shell grep -L 'test: no-asan' /dev/null $(wildcard tests/test_*.c)))
EMU_TESTS := $(patsubst tests/%.c,$(B)/tests/%,$(wildcard tests/emu_*.c)) $(patsubst tests/%.cpp,$(B)/tests/%,$(wildcard tests/emu_*.cpp))
TEST_HELPERS := $(patsubst tests/%.c,$(B)/tests/%,$(wildcard tests/helper_*.c))

ifeq ($(HAVE_CUDA),1)
TRAIN_DEPS := $(B)/obj/main.o $(B)/libtrainer_cuda.a $(B)/libctrain.a $(B)/libctrain_cuda.a $(B)/rules.mk
TRAIN_LINK = $(CC) $(SHIP_LD) -o $@ $(B)/obj/main.o $(B)/libtrainer_cuda.a $(B)/libctrain_cuda.a $(B)/libctrain.a $(SHIP_CUDALIBS) $(SHIP_LIBS)
CUDA_TOOLS := $(GPU_TOOL_SRC:tools/%.c=$(B)/tools/%)
else
CUDA_TOOLS :=
TRAIN_DEPS := $(B)/obj/main.o $(B)/libtrainer.a $(B)/libctrain.a $(B)/rules.mk
TRAIN_LINK = $(CC) $(SHIP_LD) -o $@ $(B)/obj/main.o $(B)/libtrainer.a $(B)/libctrain.a $(SHIP_LIBS)
endif

.PHONY: release tests
release: $(BIN)/train $(BIN)/packdata $(TOOLS) $(CUDA_TOOLS)
tests: release $(UNIT) $(ASAN_UNIT) $(TSAN_UNIT) $(EMU_TESTS) $(TEST_HELPERS) $(B)/train-emu $(B)/libnccl_emu.so $(EMU_TOOLS)

$(B)/obj/%.o: %.c
	@mkdir -p $(dir $@); echo "  CC    $<"; $(CC) $(CFLAGS) -c $< -o $@
$(B)/asan/%.o: %.c
	@mkdir -p $(dir $@); echo "  ASAN  $<"; $(CC) $(ASANFLAGS) -c $< -o $@
$(B)/tsan/%.o: %.c
	@mkdir -p $(dir $@); echo "  TSAN  $<"; $(CC) $(TSANFLAGS) -c $< -o $@
$(B)/cuda/%.o: %.cu
	@mkdir -p $(dir $@); echo "  NVCC  $<"; $(NVCC) $(NVFLAGS) -MMD -MP -c $< -o $@
$(B)/cuda/trainer/%.o: trainer/%.c
	@mkdir -p $(dir $@); echo "  CC    $< (cuda)"; $(CC) $(CFLAGS) -DCTRAIN_CUDA -c $< -o $@
$(B)/emu/%.o: %.cu
	@mkdir -p $(dir $@); echo "  EMU   $<"; $(CXX) $(EMUFLAGS) -x c++ -include kernels/emu/emu.h -c $< -o $@
$(B)/emu/%.o: %.cpp
	@mkdir -p $(dir $@); echo "  CXX   $<"; $(CXX) $(EMUFLAGS) -c $< -o $@

$(B)/libctrain.a: $(LIB_OBJ)
	@rm -f $@; ar rcs $@ $^
$(B)/libtrainer.a: $(TRAINER_OBJ)
	@rm -f $@; ar rcs $@ $^
$(B)/libtrainer_cuda.a: $(TRAINER_CUDA_OBJ)
	@rm -f $@; ar rcs $@ $^
$(B)/libctrain_asan.a: $(ASAN_OBJ)
	@rm -f $@; ar rcs $@ $^
$(B)/libctrain_tsan.a: $(TSAN_OBJ)
	@rm -f $@; ar rcs $@ $^
$(B)/libctrain_cuda.a: $(CU_OBJ)
	@rm -f $@; ar rcs $@ $^
$(B)/libctrain_emu.a: $(EMU_OBJ)
	@rm -f $@; ar rcs $@ $^

$(BIN)/train: $(TRAIN_DEPS)
	@echo "  LD    $@"; $(TRAIN_LINK)
$(BIN)/packdata: $(B)/obj/tools/packdata.o $(B)/libctrain.a $(B)/rules.mk
	@echo "  LD    $@"; $(CC) $(SHIP_LD) -o $@ $(filter-out %.mk,$^) $(SHIP_LIBS)
$(B)/tools/%: $(B)/obj/tools/%.o $(B)/libctrain.a $(B)/rules.mk
	@mkdir -p $(dir $@); echo "  LD    $@"; $(CC) $(SHIP_LD) -o $@ $(filter-out %.mk,$^) $(SHIP_LIBS)
$(B)/tools/bench_gpu_%: $(B)/obj/tools/bench_gpu_%.o $(B)/libctrain_cuda.a $(B)/libctrain.a $(B)/rules.mk
	@mkdir -p $(dir $@); echo "  LD    $@"; $(CC) $(SHIP_LD) -o $@ $(filter-out %.mk,$^) $(SHIP_CUDALIBS) $(SHIP_LIBS)
# -rdynamic: the emulator's cost counters name a launched kernel by its symbol (dladdr).
$(B)/emu-tools/bench_gpu_%: $(B)/obj/tools/bench_gpu_%.o $(B)/libctrain_emu.a $(B)/libctrain.a
	@mkdir -p $(dir $@); echo "  LD    $@ (emulated GPU)"; $(CXX) -fopenmp -pthread -rdynamic -o $@ $^ $(LDLIBS)
# The stand-in NCCL for the emulated GPU ranks (NCCL_LIBRARY=build/libnccl_emu.so).
$(B)/libnccl_emu.so: dist/emu/nccl_emu.c
	@echo "  CC    $< (shared)"; $(CC) -std=c11 -O2 -g -shared -fPIC -pthread -D_GNU_SOURCE $(WARN) -o $@ $<
# The emulator's cuda* entry points exported: the stand-in NCCL (libnccl_emu.so) queues its work on
# the emulated streams and checks devices through them.
$(B)/train-emu: $(B)/obj/main.o $(B)/libtrainer_cuda.a $(B)/libctrain_emu.a $(B)/libctrain.a
	@echo "  LD    $@ (emulated GPU)"; $(CXX) -fopenmp -pthread -Wl,--export-dynamic-symbol='cuda*' -o $@ $^ $(LDLIBS)

$(B)/tests/test_%: $(B)/obj/tests/test_%.o $(B)/libtrainer.a $(B)/libctrain.a
	@mkdir -p $(dir $@); $(CC) -fopenmp -o $@ $^ $(LDLIBS)
$(B)/tests/helper_%: $(B)/obj/tests/helper_%.o $(B)/libctrain.a
	@mkdir -p $(dir $@); $(CC) -fopenmp -o $@ $^ $(LDLIBS)
$(B)/asan/tests/test_%: $(B)/asan/tests/test_%.o $(B)/libctrain_asan.a
	@mkdir -p $(dir $@); $(CC) -fopenmp -fsanitize=address,undefined -o $@ $^ $(LDLIBS)
$(B)/tsan/tests/test_%: $(B)/tsan/tests/test_%.o $(B)/libctrain_tsan.a
	@mkdir -p $(dir $@); $(CC) -fsanitize=thread -o $@ $^ $(STATIC_LIBS) -lm -ldl -lpthread
$(B)/tests/emu_%: $(B)/emu/tests/emu_%.o $(B)/libctrain_emu.a $(B)/libctrain.a
	@mkdir -p $(dir $@); $(CXX) -fopenmp -pthread -o $@ $^ $(LDLIBS)
$(B)/emu/tests/emu_%.o: tests/emu_%.c
	@mkdir -p $(dir $@); echo "  EMU   $<"; $(CXX) $(EMUFLAGS) -x c++ -include kernels/emu/emu.h -c $< -o $@

# The emulator tests compiled for the real GPU (./build.sh gpu-tests; run by tests/gpu.sh).
GPU_TESTS := $(patsubst tests/%.c,$(B)/gpu-tests/%,$(wildcard tests/emu_*.c))
.PHONY: gpu-tests
gpu-tests: release $(GPU_TESTS)
$(B)/gpu-tests/emu_%.o: tests/emu_%.c
	@mkdir -p $(dir $@); echo "  NVCC  $< (gpu test)"; $(NVCC) $(NVFLAGS) -MMD -MP -x cu -c $< -o $@
$(B)/gpu-tests/emu_%: $(B)/gpu-tests/emu_%.o $(B)/libctrain_cuda.a $(B)/libctrain.a $(B)/rules.mk
	@echo "  LD    $@"; $(CXX) $(SHIP_LD) -static-libstdc++ -o $@ $(filter-out %.mk,$^) $(SHIP_CUDALIBS) $(SHIP_LIBS)

-include $(shell find build -name '*.d' 2>/dev/null)
EOF

# rules.mk is replaced only when it changed, and the linked programs depend on it: a change of
# link flags (static runtimes, say) relinks them, an unchanged build relinks nothing.
if cmp -s "$B/rules.mk.new" "$B/rules.mk"; then rm "$B/rules.mk.new"; else mv "$B/rules.mk.new" "$B/rules.mk"; fi

# Make runs with -r (no built-in rules) so that 'train' is never mistaken for a C program of main.c.
if [ "$MODE" = test ]; then target=tests; else target=release; fi
if [ "$MODE" = gpu-tests ]; then
  [ "$HAVE_CUDA" = 1 ] || { echo "./build.sh gpu-tests needs nvcc and libcudart_static.a" >&2; exit 1; }
  target=gpu-tests
fi
if [ ! -f main.c ]; then say "main.c missing"; exit 1; fi
make -r -s -j"$JOBS" -f "$B/rules.mk" "$target"
if [ "$HAVE_CUDA" = 1 ]; then say "built ./train (backends: cpu, cuda via $NVCC) and ./packdata"
else say "built ./train (backend: cpu only; no nvcc found) and ./packdata"; fi

case "$MODE" in
  release) exit 0 ;;
  gpu-tests) say "built $B/gpu-tests/ (run them with tests/gpu.sh on a machine with a GPU)"; exit 0 ;;
  demo) exec ./train --demo ;;
  test) ;;
  *) echo "usage: ./build.sh [release|test|demo|clean]" >&2; exit 2 ;;
esac

# ---------------------------------------------------------------------------
# Tests. Each program or script is one test: exit status 0 passes. Logs in $B/test-logs/.
export CTRAIN_BIN=$ROOT/$BIN CTRAIN_ROOT=$ROOT CTRAIN_BUILD=$ROOT/$B TORCH_PY=/usr/bin/python3 PIPPY=${PIPPY:-python3}
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
mkdir -p $B/test-logs
# Tests run TEST_JOBS at a time (default: the number of CPUs), longest first: most tests are
# single-threaded Python or shell pipelines, and the long ones started last would leave a core
# idle at the end. The order comes from tests/test_seconds.txt (a hint committed from a full run;
# a stale hint only changes the order) and then from this machine's last run ($B/test-seconds).
# Each test has its own log and temporary directory; results are printed as tests finish.
TEST_JOBS=${TEST_JOBS:-$(nproc)}
# OpenMP threads that spin while they wait take the core a neighbouring test (or the same test's
# loader, rank threads or Python peer) needs: with two tests on two cores, test_train_dp and
# test_train_torch took 258 s together spinning and 78 s passive. Scheduling only: no bit changes.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
pass=0; fail=0; failed=()
t_names=(); t_limits=(); t_cmds=()
queue() { # name, timeout seconds, command...
  local name=$1 limit=$2; shift 2
  if [ -n "${TEST_FILTER:-}" ] && ! [[ $name =~ $TEST_FILTER ]]; then return; fi
  t_names+=("$name"); t_limits+=("$limit"); t_cmds+=("$(printf '%q ' "$@")")
}
for t in $B/tests/test_*; do [ -x "$t" ] && [[ $t != *.* ]] && queue "$(basename "$t")" 900 "$t"; done
for t in $B/asan/tests/test_*; do [ -x "$t" ] && [[ $t != *.* ]] && queue "asan/$(basename "$t")" 900 "$t"; done
for t in $B/tsan/tests/test_*; do [ -x "$t" ] && [[ $t != *.* ]] && queue "tsan/$(basename "$t")" 900 "$t"; done
for t in $B/tests/emu_*; do [ -x "$t" ] && [[ $t != *.* ]] && queue "$(basename "$t")" 900 "$t"; done
# Fuzz targets: clang + libFuzzer, the host library compiled in with ASan+UBSan. A target may
# #include sources from nn/ (they are not compiled here), so nn/ changes rebuild it too.
for f in tests/fuzz_*.c; do
  [ -f "$f" ] || continue
  name=$(basename "$f" .c); bin=$B/fuzz/$name
  if [ -n "${TEST_FILTER:-}" ] && ! [[ $name =~ $TEST_FILTER ]]; then continue; fi
  mkdir -p $B/fuzz $B/fuzz/corpus-$name
  srcs=$(ls util/*.c loader/*.c 2>/dev/null)
  if [ ! -x "$bin" ] || [ -n "$(find "$f" $srcs util loader nn -newer "$bin" 2>/dev/null | head -1)" ]; then
    clang -std=c11 -O1 -g -fopenmp -D_GNU_SOURCE -I. -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
      -o "$bin" "$f" $srcs $STATIC_LIBS -lm -lpthread 2>$B/test-logs/$name.build.log \
      || { fail=$((fail+1)); failed+=("$name"); echo "FAIL  $name (build: $B/test-logs/$name.build.log)"; continue; }
  fi
  seeds=$B/fuzz/corpus-$name; [ -d "tests/corpus/$name" ] && seeds="$seeds tests/corpus/$name"
  queue "$name" $(( ${FUZZ_SECONDS:-30} + 60 )) "$bin" -max_total_time="${FUZZ_SECONDS:-30}" -rss_limit_mb=2048 -timeout=10 -artifact_prefix=$B/fuzz/ $seeds
done
# A script marked "# ctrain-test: alone" measures time against a load it makes itself (a starved
# loader, a step cap): it runs after the others, by itself.
t_alone=()
for t in tests/test_*.sh; do
  [ -f "$t" ] || continue
  queue "$(basename "$t")" 1200 bash "$t"
  grep -q '^# ctrain-test: alone' "$t" && t_alone+=("$(basename "$t")")
done

# Longest first: each test's expected seconds (the last local run wins over the committed hint).
declare -A secs=()
for f in tests/test_seconds.txt $B/test-seconds; do
  [ -f "$f" ] || continue
  while read -r n s; do [[ $n != \#* && -n $s ]] && secs[$n]=$s; done <"$f"
done
is_alone() { local a; for a in "${t_alone[@]}"; do [ "$a" = "$1" ] && return 0; done; return 1; }
order=$(for i in "${!t_names[@]}"; do is_alone "${t_names[$i]}" || echo "${secs[${t_names[$i]}]:-30} $i"; done \
  | sort -k1,1nr -k2,2n | cut -d' ' -f2)
order_alone=$(for i in "${!t_names[@]}"; do is_alone "${t_names[$i]}" && echo "$i"; done || true)

res=$B/test-logs/.results; rm -rf "$res"; mkdir -p "$res"
run_one() { # index: runs the test, writes "rc seconds" to $res/index
  local i=$1 name=${t_names[$1]} log=$B/test-logs/${t_names[$1]//\//_}.log t0=$SECONDS rc=0
  eval "timeout --kill-after=10 ${t_limits[$i]} ${t_cmds[$i]}" >"$log" 2>&1 </dev/null || rc=$?
  [ $rc = 124 ] && echo "timed out after ${t_limits[$i]}s" >>"$log"
  echo "$rc $((SECONDS-t0))" >"$res/$i.tmp" && mv "$res/$i.tmp" "$res/$i"
}
report() { # prints and counts the results that have arrived
  local f i rc s log
  for f in "$res"/*; do
    [ -f "$f" ] && [[ $f != *.tmp ]] || continue
    i=${f##*/}; read -r rc s <"$f"; rm -f "$f"
    log=$B/test-logs/${t_names[$i]//\//_}.log
    echo "${t_names[$i]} $s" >>"$B/test-seconds.new"
    if [ "$rc" = 0 ]; then pass=$((pass+1)); printf 'PASS  %-40s %4ds\n' "${t_names[$i]}" "$s"
    else
      fail=$((fail+1)); failed+=("${t_names[$i]}")
      printf 'FAIL  %-40s %4ds (exit %d, log %s)\n' "${t_names[$i]}" "$s" "$rc" "$log"
      tail -n 15 "$log" | sed 's/^/      /'
    fi
  done
}
: >"$B/test-seconds.new"
suite_t0=$SECONDS; running=0
for i in $order; do
  while [ $running -ge "$TEST_JOBS" ]; do wait -n || true; running=$((running-1)); report; done
  run_one "$i" & running=$((running+1))
done
while [ $running -gt 0 ]; do wait -n || true; running=$((running-1)); report; done
report
for i in $order_alone; do run_one "$i"; report; done
# Keep the times of tests this run did not include (a filtered run updates only its own).
[ -f "$B/test-seconds" ] && awk 'NR==FNR { seen[$1]=1; next } !($1 in seen)' "$B/test-seconds.new" "$B/test-seconds" >>"$B/test-seconds.new"
mv "$B/test-seconds.new" "$B/test-seconds"
echo "tests: $((SECONDS-suite_t0)) s wall, $TEST_JOBS at a time"

[ ${#failed[@]} -gt 0 ] && echo "failed: ${failed[*]}"
echo "$pass passed, $fail failed"
[ $fail = 0 ]
