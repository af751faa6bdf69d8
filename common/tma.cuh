// Hopper's asynchronous data movement and warp specialisation (sm_90a), for the FlashAttention-3
// style forward (03_flashattn_fwd/flash_fwd_bf16_fa3.cu): the tensor memory accelerator (TMA)
// copies a tile from global to shared memory on one thread's request, an mbarrier counts the
// bytes in, `setmaxnreg` moves registers between warpgroups, and named barriers let two
// consumer warpgroups take turns. CUDA C++ only; the host half (the tensor maps) is common/tma.h.
//
// The shared-memory layout TMA writes here is the 128-byte swizzle: a [rows][64] bf16 box (128 B
// per row) with the 16-byte chunk c of row r stored at chunk c ^ (r % 8) of that row. wgmma reads
// it with the swizzle mode 1 in its descriptor; both swizzle on the address bits (bits 4-6 XOR
// bits 7-9), so a box must start on a 1024-byte boundary and a descriptor's start may move within
// a row (the k-steps) without changing the pattern. The canonical layouts (PTX ISA, "Matrix
// Descriptor"; CUTLASS's make_gmma_desc names the same strides):
//   K-major (K = the box's columns, e.g. Q and K in S = Q K^T):   8-row groups SBO = 1024 apart,
//     LBO unused (set to 1); the k-step of 16 moves the start by 32 bytes within the 128-byte row.
//   MN-major (K = the box's rows, e.g. V in O += P V, transpose flag set): 8-row groups along K
//     SBO = 1024 apart, the next 64 columns (N) LBO bytes on (the next box); the k-step of 16 rows
//     moves the start by 2048 bytes.
#pragma once
#include <cuda.h>
#include <stdint.h>

// ---------------------------------------------------------------- descriptors (128-byte swizzle)
__host__ __device__ constexpr uint64_t wg_desc_sw128(uint32_t lbo, uint32_t sbo) {
    return (1ull << 62) | ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(sbo >> 4) << 32);
}
constexpr uint64_t kDescSw128KMajor = wg_desc_sw128(16, 1024);  // LBO 16 bytes: the field's 1, unused
__device__ __forceinline__ uint64_t wg_desc_sw(uint64_t strides, uint32_t saddr) { return strides | (saddr >> 4); }

// ---------------------------------------------------------------- mbarrier
// A 64-bit shared-memory barrier that completes a phase when `count` arrivals and the expected
// transaction bytes (TMA's writes) are both in. Phases alternate parity 0, 1, 0, ...
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Makes the initialisations visible to the other threads and to the async proxy (TMA); follow
// it with a block-wide barrier.
__device__ __forceinline__ void mbar_fence_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
// One arrival that also announces `bytes` more to come by TMA (the producer's, per load).
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// The same where cond holds, as one predicated instruction rather than a branch around it (a
// consumer releases a slot while its next products are in flight; keeping control flow out of
// that window keeps ptxas's placement of the waits predictable).
__device__ __forceinline__ void mbar_arrive_if(uint32_t bar, bool cond) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.u32 p, %1, 0;\n@p mbarrier.arrive.shared::cta.b64 _, [%0];\n}\n" ::"r"(bar),
        "r"((uint32_t)cond)
        : "memory");
}
__device__ __forceinline__ bool mbar_try_wait(uint32_t bar, uint32_t parity) {
    uint32_t done;
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
    return done != 0;
}
__device__ __forceinline__ uint64_t globaltimer_ns() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
    return t;
}
// A wait that has not completed after this long is a bug (a phase nobody will complete: a lost
// arrival, a wrong parity, a byte count TMA never reaches): the kernel traps, and the launch
// reports "unspecified launch failure" instead of hanging the process. 20 s leaves room for
// compute-sanitizer's racecheck, which slows a kernel a hundredfold.
constexpr uint64_t kMbarDeadlineNs = 20ull * 1000 * 1000 * 1000;
// Waits until the phase of parity `parity` has completed. A fresh barrier is in phase 0, so a
// wait for parity 1 returns at once: that is how a producer's first pass over its empty slots
// goes through.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    if (mbar_try_wait(bar, parity)) return;
    const uint64_t t0 = globaltimer_ns();
    while (!mbar_try_wait(bar, parity))
        if (globaltimer_ns() - t0 > kMbarDeadlineNs) {
            // trap, then a break the compiler sees: with __trap() (noreturn) as the loop's only
            // other exit, ptxas spilled and serialised the d-128 kernel's wgmma (C7512).
            asm volatile("trap;" ::: "memory");
            break;
        }
}

// ---------------------------------------------------------------- TMA
// One box of a 4-D tensor map (coordinates innermost first, in elements) into shared memory at
// dst; the bytes are counted on the mbarrier bar. Elements outside the tensor arrive as zeros.
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1,
                                            int c2, int c3) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
        "[%6];\n" ::"r"(dst),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
        : "memory");
}
// The same for a 2-D map (common/tma.h's tma_map_f32_rows: columns c0.., row c1).
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
            dst),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
        : "memory");
}
// shared[src] (a box in the layout the map's swizzle gives) added into the global tensor at
// coordinates (c0, c1, c2) as fp32 by TMA (the map's element type); elements outside the tensor
// are skipped. Asynchronous: a bulk group of the issuing thread (tma_bulk_commit / _wait below).
// The threads that wrote the box fence their generic writes first (fence.proxy.async), then a
// barrier, then one thread issues.
__device__ __forceinline__ void tma_reduce_add_3d(const CUtensorMap* map, uint32_t src, int c0, int c1, int c2) {
    asm volatile(
        "cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group [%0, {%1, %2, %3}], [%4];\n" ::"l"(
            reinterpret_cast<uint64_t>(map)),
        "r"(c0), "r"(c1), "r"(c2), "r"(src)
        : "memory");
}
__device__ __forceinline__ void tma_bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// At most N of this thread's bulk groups still reading their shared-memory source (which may
// then be overwritten) / still writing global memory.
template <int N> __device__ __forceinline__ void tma_bulk_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
template <int N> __device__ __forceinline__ void tma_bulk_wait() {
    asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void tma_prefetch_map(const CUtensorMap* map) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// ---------------------------------------------------------------- warp specialisation
// Every warp of a warpgroup must run the same one: the producer gives registers back, the
// consumers take them (the per-thread count, a multiple of 8 in [24, 256]).
template <int N> __device__ __forceinline__ void regs_dealloc() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N)); }
template <int N> __device__ __forceinline__ void regs_alloc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N)); }

// Named barriers (ids 1-15; 0 is __syncthreads'): `threads` counts both the waiting and the
// arriving threads.
__device__ __forceinline__ void named_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int threads) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
