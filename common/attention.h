// The attention plug-in interface. The model (common/model*) has its own naive attention
// (materialised scores); a stage that implements attention faster (03 forward, 04 backward)
// fills an attention_impl_t and the program that wants both passes it to the model.
// common/ never includes a stage: the stage includes this header.
//
// Shapes: B batch, H heads, Nq queries, Nk keys, d head dim. Every q/k/v/o-like operand is a
// [B, H, N, d] view given by a base pointer and three strides in elements (batch, head, row);
// the last dimension is contiguous. The model's fused QKV buffer (B, T, 3, H, d) is such a
// view with strides (T*3*H*d, d, 3*H*d), so no transpose copies are needed.
// Causal: query i attends to keys j <= i (top-left aligned, as in the course's tests).
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>
#include "common/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int B, H, Nq, Nk, d;
    dtype_t dtype;  // DT_F32 or DT_BF16, for q, k, v, o, dout, dq, dk, dv alike
    int causal;
    float scale;    // softmax scale, normally 1/sqrt(d)

    const void *q, *k, *v;
    int64_t sq[3], sk[3], sv[3];  // (batch, head, row) strides, elements
    void* o;                      // forward: written; backward: read
    int64_t so[3];
    float* lse;                   // [B, H, Nq] contiguous fp32 logsumexp: forward writes, backward reads

    // backward only
    const void* dout;
    int64_t sdo[3];
    void *dq, *dk, *dv;           // written (not accumulated into)
    int64_t sdq[3], sdk[3], sdv[3];
    void* workspace;              // device scratch of at least bwd_workspace_bytes(args)
} attn_args_t;

typedef struct {
    const char* name;
    // Returns 0, or -1 with a reason in err (unsupported head dim, dtype, strides, ...).
    // Called before any buffer exists: it looks at shapes, dtype and strides, never pointers.
    int (*supports)(const attn_args_t* a, char* err, size_t errlen);
    void (*forward)(const attn_args_t* a, cudaStream_t stream);
    void (*backward)(const attn_args_t* a, cudaStream_t stream);  // NULL: forward-only
    size_t (*bwd_workspace_bytes)(const attn_args_t* a);
} attention_impl_t;

// Fills the strides for a contiguous [B, H, N, d] tensor.
static inline void attn_contiguous_strides(int64_t s[3], int H, int N, int d) {
    s[0] = (int64_t)H * N * d;
    s[1] = (int64_t)N * d;
    s[2] = d;
}

#ifdef __cplusplus
}
#endif
