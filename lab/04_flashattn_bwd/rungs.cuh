// The rungs' launchers (CUDA C++), in namespace lab04 so that they never meet the lesson's.
// BwdParams and the PTX helpers are the lesson's (04_flashattn_bwd/flash_bwd_internal.cuh).
#pragma once
#include "04_flashattn_bwd/flash_bwd_internal.cuh"

namespace lab04 {
void rung_launch_prepass(const BwdParams& p, dtype_t dt, cudaStream_t s);               // rungs_simt.cu
void rung_launch_simt(const BwdParams& p, dtype_t dt, bool atomic_dq, cudaStream_t s);  // rungs_simt.cu
void rung_launch_dq_convert(const BwdParams& p, dtype_t dt, cudaStream_t s);            // rungs_simt.cu
// Rungs 1-5 (rungs_mma.cu); parts: 3 both kernels, 1 only dK/dV, 2 only dQ.
void rung_launch_mma(const BwdParams& p, bool atomic_dq, int version, int parts, cudaStream_t s);
void rung_launch_dkdv_mt2(const BwdParams& p, cudaStream_t s);  // rung 5's dK/dV, d 16-64
// Rungs 6-19 (rungs_fa2.cu): the kernel, then the cast; 16-19 launch rung_launch_wgmma's kernel
// where it was built (d 64, sm_90a), rung 10's elsewhere.
void rung_launch_fa2(const BwdParams& p, int version, cudaStream_t s);
void rung_launch_dq_convert16(const BwdParams& p, cudaStream_t s);
// Rungs 16-19 at d 64, 20 at d 128 (rungs_wgmma.cu): the kernel alone.
void rung_launch_wgmma(const BwdParams& p, int version, cudaStream_t s);
bool rung_wgmma_available();
}  // namespace lab04
