// Hopper warpgroup MMA (wgmma, sm_90a), used by stage 03's wgmma forwards (wgmma, wgmma-ov, fa3)
// and stage 04's backward (versions 16-20): shared-memory matrix descriptors for the no-swizzle
// ("interleaved") layout, the instruction shapes the kernels use, and the fences that order them.
// The 128-byte-swizzled descriptors of the TMA-fed fa3 forward are in common/tma.cuh. CUDA C++ only.
//
// The layout. wgmma reads a shared-memory operand as 8 x 8 "core matrices" of 16-bit elements,
// each 128 contiguous bytes (8 rows of 16 bytes). Every tile here is stored as a grid of core
// matrices, row block rb and 16-byte column chunk cb of a [R][64] tile at byte
//     ((rb * 8) + cb) * 128 + (r % 8) * 16 + (c % 8) * 2            (core_off below)
// so a row's 8 chunks are 8 adjacent core matrices and the next 8 rows start 1024 bytes on.
// The descriptor gives two strides between core matrices: LBO along the product's K dimension
// and SBO along M (operand A) or N (operand B). One stored tile serves both ways round:
//   K-major use (K = the tile's columns, e.g. Q as B of S^T = K Q^T, K = d):   LBO 128, SBO 1024
//     (kDescKMajor);
//     the k-step of 16 advances the start by 2 chunks (256 bytes);
//   MN-major use (K = the tile's rows, e.g. Q as B of dK = dS^T Q, K = query): LBO 1024, SBO 128
//     (kDescMNMajor), with the instruction's transpose flag set; the k-step advances 2 row blocks (2048 bytes).
// A core matrix is the same 128 bytes either way: 8 rows, 8 contiguous elements each.
#pragma once
#include <stdint.h>
#include "common/mma_sync.cuh"  // pack_bf16

// byte offset of element (r, c) of a [R][64] bf16 tile stored as core matrices (c % 8 == 0 for
// the 16-byte chunk that starts there)
__device__ __forceinline__ uint32_t core_off(int r, int c) {
    return (uint32_t)((((r >> 3) << 3) + (c >> 3)) * 128 + (r & 7) * 16 + (c & 7) * 2);
}

// Shared-memory matrix descriptor, no swizzle: bits 0-13 start address >> 4, 16-29 LBO >> 4,
// 32-45 SBO >> 4 (swizzle mode and base offset 0). The two strides are fixed per use, so the
// descriptor is a constant plus the address: a k-step moves it by adding (bytes >> 4), which
// stays inside the 14-bit field for any shared-memory address (< 256 KB).
__host__ __device__ constexpr uint64_t wg_desc_strides(uint32_t lbo, uint32_t sbo) {
    return ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(sbo >> 4) << 32);
}
constexpr uint64_t kDescKMajor = wg_desc_strides(128, 1024);   // K = the tile's columns
constexpr uint64_t kDescMNMajor = wg_desc_strides(1024, 128);  // K = the tile's rows
__device__ __forceinline__ uint64_t wg_desc(uint64_t strides, uint32_t saddr) { return strides | (saddr >> 4); }
// The same in two halves: the low word (address and LBO) moves with the k-steps, the high word
// (SBO) is a constant. Adding to the low word in 32 bits lets the compiler keep the high word an
// immediate instead of redoing a 64-bit add and two register moves per instruction.
__device__ __forceinline__ uint32_t wg_desc_lo(uint64_t strides, uint32_t saddr) { return (uint32_t)strides | (saddr >> 4); }
__device__ __forceinline__ uint64_t wg_desc_join(uint64_t strides, uint32_t lo) {
    return (strides & 0xFFFFFFFF00000000ull) | lo;
}

// A warpgroup's 64 x 64 fp32 accumulator (acc[4n + e]: row row0 + 8 (e / 2), column
// 8n + 2t + e % 2, with row0 = this thread's first row in the tile and t = lane % 4) stored as
// bf16 into a core-matrix tile at `tile`: stage 04's dS^T, which the next step's dQ product reads.
__device__ __forceinline__ void wg_store_core_bf16(unsigned char* tile, const float (&acc)[32], int row0, int t) {
#pragma unroll
    for (int n = 0; n < 8; n++)
#pragma unroll
        for (int h = 0; h < 2; h++)
            *(uint32_t*)(tile + core_off(row0 + 8 * h, n * 8 + 2 * t)) = pack_bf16(acc[4 * n + 2 * h], acc[4 * n + 2 * h + 1]);
}

// True where the code was built for sm_90a, so that wgmma kernels exist (common/wgmma_check.cu).
bool wgmma_built();

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wg_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Generic-proxy writes to shared memory (st.shared, cp.async) become visible to wgmma's
// operand reads (the async proxy) only through this fence, before the barrier.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// Keeps the compiler from moving reads of accumulator registers across a wait (and writes
// across an issue): wgmma writes them asynchronously, which the compiler does not know.
template <int N> __device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(r[i])::"memory");
}

// A warpgroup's 64 x 64 fp32 accumulator (32 per thread: s[4n + e] is row 8 (e / 2) + lane / 4
// of the warp's 16, column 8n + 2 (lane % 4) + e % 2) as the bf16 A operand of a wgmma that takes
// A from registers: k-step kq = columns 16kq..16kq+15; two 8-column n-tiles make one
// mma.m16n8k16-style A fragment. Stage 03 packs P~ for O += P~ V this way, stage 04 P^T and
// dS^T for dV += P^T dO, dK += dS^T Q.
__device__ __forceinline__ void wg_pack_p(const float (&s)[32], uint32_t (&pa)[4][4]) {
#pragma unroll
    for (int kq = 0; kq < 4; kq++)
#pragma unroll
        for (int x = 0; x < 4; x++) pa[kq][x] = pack_bf16(s[8 * kq + 2 * x], s[8 * kq + 2 * x + 1]);
}

#define WG_ACC32                                                                                     \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),  \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),         \
    "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),       \
    "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),       \
    "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define WG_D32                                                                                       \
    "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25," \
    "%26,%27,%28,%29,%30,%31}"

// D (64 x 64, fp32; 32 per thread) = (acc ? D : 0) + A (64 x 16) B (16 x 64); A and B from
// shared memory. TA / TB: 0 K-major, 1 MN-major (transposed).
template <int TA, int TB>
__device__ __forceinline__ void wg_m64n64_ss(float (&d)[32], uint64_t da, uint64_t db, int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " WG_D32 ", %32, %33, p, 1, 1, %35, %36;\n}\n"
        : WG_ACC32
        : "l"(da), "l"(db), "r"(acc), "n"(TA), "n"(TB));
}
// The same with A (64 x 16) from registers: the mma.m16n8k16 A fragment of each warp's 16 rows.
template <int TB>
__device__ __forceinline__ void wg_m64n64_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t db, int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " WG_D32 ", {%32,%33,%34,%35}, %36, p, 1, 1, %38;\n}\n"
        : WG_ACC32
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc), "n"(TB));
}
// D (64 x 32, fp32; 16 per thread), A and B from shared memory.
template <int TA, int TB>
__device__ __forceinline__ void wg_m64n32_ss(float (&d)[16], uint64_t da, uint64_t db, int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, %16, %17, p, 1, 1, %19, %20;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "l"(da), "l"(db), "r"(acc), "n"(TA), "n"(TB));
}
#undef WG_ACC32
#undef WG_D32
