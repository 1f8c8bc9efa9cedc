// The emulated devices: what cudaGetDeviceProperties, cudaDeviceGetAttribute and the launch and
// cudaFuncSetAttribute checks (kernels/emu/runtime.cpp) say about each device, and which PTX it
// runs (the wgmma path only on compute 9.0, as the nvcc build's sm_90a image).
//
// Why a table: ctrain runs on GPUs it has never met, and their limits differ where kernels care:
// opt-in shared memory per block is 227 KiB on sm_90 but 163 KiB on sm_80 and 99 KiB on
// sm_86/89/120, and wgmma exists only on sm_90a. An emulator that is always an H100 hides every
// kernel that assumes an H100 (a cudaFuncSetAttribute beyond an A100's limit aborts a run there).
//
// CTRAIN_EMU_DEVICE=NAME[,NAME...] picks the descriptions (default h100): device i takes the i-th
// name, the last one repeats for the rest (CTRAIN_EMU_DEVICES sets the count). Unknown names stop
// the program with the list of known ones. Read once, at the first call that needs it.
#include <mutex>
#include <string>
#include <vector>

#include "kernels/emu/internal.h"

namespace emu {

// Figures from NVIDIA's data sheets and the CUDA programming guide's table of compute capabilities
// (shared memory per SM and the opt-in maximum per block: 228/227 KiB on 9.0 and 10.0, 164/163 KiB
// on 8.0, 100/99 KiB on 8.6, 8.9 and 12.0).
static const DeviceDesc kDevices[] = {
    {"h100", "NVIDIA H100 80GB HBM3 (ctrain emulator)", 9, 0, 132, 232448, 233472, 65536, 65536, 2048, 32,
     50u << 20, 1980000, 2619000, 5120},
    {"h200", "NVIDIA H200 (ctrain emulator)", 9, 0, 132, 232448, 233472, 65536, 65536, 2048, 32, 50u << 20,
     1980000, 3201000, 6144},
    {"a100", "NVIDIA A100-SXM4-80GB (ctrain emulator)", 8, 0, 108, 166912, 167936, 65536, 65536, 2048, 32,
     40u << 20, 1410000, 1593000, 5120},
    {"l4", "NVIDIA L4 (ctrain emulator)", 8, 9, 58, 101376, 102400, 65536, 65536, 1536, 24, 48u << 20, 2040000,
     6251000, 192},
    {"l40s", "NVIDIA L40S (ctrain emulator)", 8, 9, 142, 101376, 102400, 65536, 65536, 1536, 24, 96u << 20,
     2520000, 9001000, 384},
    {"b200", "NVIDIA B200 (ctrain emulator)", 10, 0, 148, 232448, 233472, 65536, 65536, 2048, 32, 126u << 20,
     1965000, 3996000, 8192},
    {"rtx5090", "NVIDIA GeForce RTX 5090 (ctrain emulator)", 12, 0, 170, 101376, 102400, 65536, 65536, 1536, 32,
     96u << 20, 2407000, 14001000, 512},
};
// Aliases by architecture.
static const struct {
    const char *alias, *name;
} kAliases[] = {{"sm_90", "h100"}, {"sm90", "h100"}, {"sm_80", "a100"}, {"sm80", "a100"}, {"sm_89", "l4"},
                {"sm89", "l4"},    {"sm_100", "b200"}, {"sm100", "b200"}, {"sm_120", "rtx5090"}, {"sm120", "rtx5090"}};

static std::once_flag g_once;
static std::vector<const DeviceDesc *> g_chosen;

static const DeviceDesc *find_desc(const std::string &key) {
    std::string k = key;
    for (auto &a : kAliases)
        if (k == a.alias) k = a.name;
    for (const DeviceDesc &d : kDevices)
        if (k == d.key) return &d;
    return nullptr;
}

static void choose() {
    const char *v = getenv("CTRAIN_EMU_DEVICE");
    std::string s = v && *v ? v : "h100";
    size_t at = 0;
    for (;;) {
        size_t comma = s.find(',', at);
        std::string key = s.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
        for (char &c : key) c = (char)tolower((unsigned char)c);
        const DeviceDesc *d = find_desc(key);
        if (!d) {
            fprintf(stderr, "emu: CTRAIN_EMU_DEVICE=%s: no emulated device '%s'; known:", s.c_str(), key.c_str());
            for (const DeviceDesc &e : kDevices) fprintf(stderr, " %s (sm_%d%d)", e.key, e.major, e.minor);
            fprintf(stderr, ", or sm_80, sm_89, sm_90, sm_100, sm_120\n");
            exit(2);
        }
        g_chosen.push_back(d);
        if (comma == std::string::npos) break;
        at = comma + 1;
    }
}

const DeviceDesc &device_desc(int device) {
    std::call_once(g_once, choose);
    if (device < 0) device = 0;
    return *g_chosen[(size_t)device < g_chosen.size() ? (size_t)device : g_chosen.size() - 1];
}

bool device_has_wgmma(int device) {
    const DeviceDesc &d = device_desc(device);
    return d.major == 9 && d.minor == 0;
}

}  // namespace emu
