// Emulation of the PTX instructions behind kernels/ptx.cuh: warp-collective mma.sync and ldmatrix
// computed by the last lane to arrive from every lane's registers, following the PTX ISA's
// fragment layouts (see the table at the top of kernels/ptx.cuh).
#include "kernels/emu/internal.h"

namespace emu {

static bool fma_hw() {
    __builtin_cpu_init();  // this may run before libgcc's own constructor
    return __builtin_cpu_supports("fma");  // libgcc requires the OS to enable AVX state too
}
bool g_fma_hw = fma_hw();

static inline float bf16_lo(uint32_t r) { return ct_bf16_to_f32((uint16_t)(r & 0xffffu)); }
static inline float bf16_hi(uint32_t r) { return ct_bf16_to_f32((uint16_t)(r >> 16)); }

// Payload: u[0..1] = a[0..3], u[2] = b[0..1], u[3..4] = c[0..3] (as float bits); out u[0..1] = d.
static void mma_fn(const WarpPayload *in, WarpPayload *out, uint32_t group, void *) {
    if (group != 0xffffffffu) {
        fprintf(stderr, "emu: mma.sync with lanes 0x%08x: all 32 lanes of the warp must execute it\n", group);
        abort();
    }
    // Here, once per warp instruction (the last lane to arrive computes for all 32).
    if (g_cost_on) cost_mma();
    float A[16][16], B[16][8], C[16][8];
    for (int l = 0; l < 32; l++) {
        int g = l >> 2, t = l & 3;
        uint32_t a[4] = {(uint32_t)in[l].u[0], (uint32_t)(in[l].u[0] >> 32), (uint32_t)in[l].u[1],
                         (uint32_t)(in[l].u[1] >> 32)};
        uint32_t b[2] = {(uint32_t)in[l].u[2], (uint32_t)(in[l].u[2] >> 32)};
        for (int r = 0; r < 4; r++) {
            int row = g + 8 * (r & 1), col = 2 * t + 8 * (r >> 1);
            A[row][col] = bf16_lo(a[r]);
            A[row][col + 1] = bf16_hi(a[r]);
        }
        for (int r = 0; r < 2; r++) {
            int k = 2 * t + 8 * r;
            B[k][g] = bf16_lo(b[r]);
            B[k + 1][g] = bf16_hi(b[r]);
        }
        for (int i = 0; i < 4; i++) {
            uint32_t bits = (uint32_t)(in[l].u[3 + (i >> 1)] >> (32 * (i & 1)));
            float v;
            memcpy(&v, &bits, 4);
            C[g + 8 * (i >> 1)][2 * t + (i & 1)] = v;
        }
    }
    // D = C + A B, each output's 16 products added in k order with separate multiply and add.
    // The k loop outside the column loop lets the compiler use SIMD across the 8 columns (emu_model
    // spent 16% of its CPU in the scalar form) without changing any output's roundings. Only a NaN
    // payload could differ (x86 keeps the first operand's payload when both are NaN and the
    // compiler orders commutative operands as it likes), so inputs holding a NaN take the scalar
    // form as before; without NaN inputs every NaN made here is the one default NaN.
    bool nan_in = false;
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++) nan_in |= A[r][c] != A[r][c];
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 8; c++) nan_in |= (B[r][c] != B[r][c]) | (C[r][c] != C[r][c]);
    float D[16][8];
    if (nan_in) {
        for (int row = 0; row < 16; row++)
            for (int col = 0; col < 8; col++) {
                float acc = C[row][col];
                for (int k = 0; k < 16; k++) acc += A[row][k] * B[k][col];
                D[row][col] = acc;
            }
    } else {
        for (int row = 0; row < 16; row++) {
            float acc[8];
            for (int col = 0; col < 8; col++) acc[col] = C[row][col];
            for (int k = 0; k < 16; k++) {
                float a = A[row][k];
                for (int col = 0; col < 8; col++) acc[col] += a * B[k][col];
            }
            for (int col = 0; col < 8; col++) D[row][col] = acc[col];
        }
    }
    for (int l = 0; l < 32; l++) {
        int g = l >> 2, t = l & 3;
        uint32_t d[4];
        for (int i = 0; i < 4; i++) memcpy(&d[i], &D[g + 8 * (i >> 1)][2 * t + (i & 1)], 4);
        out[l].u[0] = d[0] | (uint64_t)d[1] << 32;
        out[l].u[1] = d[2] | (uint64_t)d[3] << 32;
    }
}

void mma_m16n8k16_bf16(float *d, const uint32_t *a, const uint32_t *b, const float *c) {
    WarpPayload in{}, out{};
    in.u[0] = a[0] | (uint64_t)a[1] << 32;
    in.u[1] = a[2] | (uint64_t)a[3] << 32;
    in.u[2] = b[0] | (uint64_t)b[1] << 32;
    uint32_t cb[4];
    memcpy(cb, c, 16);
    in.u[3] = cb[0] | (uint64_t)cb[1] << 32;
    in.u[4] = cb[2] | (uint64_t)cb[3] << 32;
    warp_collective("mma.sync.m16n8k16", 0xffffffffu, in, out, mma_fn, nullptr);
    uint32_t db[4] = {(uint32_t)out.u[0], (uint32_t)(out.u[0] >> 32), (uint32_t)out.u[1],
                      (uint32_t)(out.u[1] >> 32)};
    memcpy(d, db, 16);
}

// Payload: u[0] = row address, u[1] = number of matrices, u[2] = transposed; out u[i] = r[i].
static void ldmatrix_fn(const WarpPayload *in, WarpPayload *out, uint32_t group, void *) {
    if (group != 0xffffffffu) {
        fprintf(stderr, "emu: ldmatrix with lanes 0x%08x: all 32 lanes of the warp must execute it\n", group);
        abort();
    }
    int num = (int)in[0].u[1];
    bool trans = in[0].u[2] != 0;
    for (int l = 0; l < 8 * num; l++)
        if (in[l].u[0] % 16 != 0) {
            fprintf(stderr, "emu: ldmatrix: lane %d's row address %p is not 16-byte aligned\n", l,
                    (void *)(uintptr_t)in[l].u[0]);
            abort();
        }
    for (int l = 0; l < 32; l++) {
        int g = l >> 2, t = l & 3;
        for (int i = 0; i < num; i++) {
            uint16_t lo, hi;
            if (!trans) {
                const uint16_t *row = reinterpret_cast<const uint16_t *>(in[8 * i + g].u[0]);
                lo = row[2 * t];
                hi = row[2 * t + 1];
            } else {
                const uint16_t *r0 = reinterpret_cast<const uint16_t *>(in[8 * i + 2 * t].u[0]);
                const uint16_t *r1 = reinterpret_cast<const uint16_t *>(in[8 * i + 2 * t + 1].u[0]);
                lo = r0[g];
                hi = r1[g];
            }
            out[l].u[i] = lo | (uint32_t)hi << 16;
        }
    }
}

void ldmatrix(uint32_t *r, int num, bool trans, const void *row) {
    WarpPayload in{}, out{};
    in.u[0] = (uint64_t)(uintptr_t)row;
    in.u[1] = (uint64_t)num;
    in.u[2] = trans;
    warp_collective(trans ? "ldmatrix.trans" : "ldmatrix", 0xffffffffu, in, out, ldmatrix_fn, nullptr);
    for (int i = 0; i < num; i++) r[i] = (uint32_t)out.u[i];
}

}  // namespace emu
