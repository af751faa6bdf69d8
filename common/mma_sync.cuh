// The PTX wrappers of the mma.sync tensor-core path (sm_80 and later), one copy for stage 03's
// forward and stage 04's backward (they had one each, under different names): shared-memory
// addresses, cp.async, ldmatrix, mma.sync m16n8k16 with bf16 inputs and fp32 accumulators, and
// the small PTX helpers those kernels share (ex2.approx, the 16-byte global reduction).
// Hopper's wgmma lives beside it in common/wgmma.cuh. CUDA C++ only.
//
// Every function is __forceinline__ and compiles to the one instruction it names (plus the
// address conversion where it takes a generic pointer); the SASS of every kernel that uses them
// was checked identical before and after the merge (scripts/sass_diff.sh).
//
// Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k16"), lane = threadIdx.x % 32,
// g = lane / 4 (the row group), t = lane % 4 (the thread in its quad):
//   A 16x16 bf16, row-major: 4 registers of 2 bf16, rows g and g+8, columns 2t, 2t+1 (+8);
//   B 16x8  bf16, col-major: 2 registers, rows (k) 2t, 2t+1 (+8), column g;
//   C 16x8  fp32:            4 floats, rows g and g+8, columns 2t, 2t+1.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

// ---------------------------------------------------------------- addresses
// The 32-bit shared-window address of a generic pointer to shared memory (what ldmatrix and
// cp.async take).
__device__ __forceinline__ uint32_t smem_u32(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

// ---------------------------------------------------------------- cp.async (global -> shared)
// 16-byte copy that bypasses registers (.cg: cached in L2 only); with valid == false the 16
// bytes are zero-filled (src-size 0), which is how rows past the end of a sequence become zeros.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
    int n = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
    cp_async16(smem_u32(dst), src, valid);
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// ---------------------------------------------------------------- ldmatrix (shared -> registers)
// Four 8x8 b16 matrices; lanes 8m..8m+7 give the row addresses of matrix m. Thread `lane` gets
// row lane/4, columns 2(lane%4) and +1 of each matrix (.trans: of the transposed matrix).
// Each takes the shared address as a 32-bit shared-window address or as a generic pointer.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) { ldmatrix_x4(r, smem_u32(p)); }
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
    ldmatrix_x4_trans(r, smem_u32(p));
}

// ---------------------------------------------------------------- mma.sync
// C (16x8 fp32) += A (16x16 bf16, row) * B (16x8 bf16, col): a = 4 registers, b = 2.
__device__ __forceinline__ void mma_m16n8k16_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// Two fp32 -> one register of two bf16 (round to nearest): lo in the low half, i.e. the lower
// column of an A fragment; this is how a C fragment (P, dS) becomes the A operand of the next mma.
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x (low 16 bits) = lo
    return *reinterpret_cast<uint32_t*>(&v);
}

// ---------------------------------------------------------------- the kernels' other PTX
// 2^x in one SFU instruction (MUFU.EX2); ex2.approx(-inf) = 0, which is what masked scores need.
__device__ __forceinline__ float ex2_approx(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
// global[0..3] += {a, b, c, d}: one 16-byte reduction (sm_90; no return value: RED, not ATOM).
// dst must be 16-byte aligned.
__device__ __forceinline__ void red_add_v4_f32(float* dst, float a, float b, float c, float d) {
    asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(dst), "f"(a), "f"(b), "f"(c), "f"(d)
                 : "memory");
}
