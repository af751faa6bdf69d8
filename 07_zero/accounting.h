// Communication and memory accounting for the handout's §2.4 problem (communication_accounting):
// an FFN-only Transformer (num_blocks × [W1: d_model→d_ff, W2: d_ff→d_model], no biases, no
// activation function), trained with fp32 master weights, fp32 accumulated gradients and fp32 AdamW
// moments, with bf16 activations saved for the backward and bf16 weights/activations on the wire.
// Pure functions, no I/O: the program accounting_main.c prints them, test_accounting.c checks them,
// ACCOUNTING.md derives every formula.
//
// Letters as in the scaling book (Austin et al., "How to Scale Your Model", part 5):
//   D d_model, F d_ff, L num_blocks, P parameters = 2·L·D·F,
//   B tokens in the (global) batch, N chips, X FSDP degree, Y TP degree (N = X·Y),
//   M_X, M_Y mesh axes the FSDP and TP collectives run over, C FLOP/s per chip,
//   W_ici bidirectional bandwidth of one mesh axis (bytes/s), alpha = C / W_ici (FLOPs per byte).
// Byte counts are doubles: every count here is an integer below 2^53, so it is exact, and a
// user's outsized flags give a large number instead of a wrapped one.
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ACCT_FP32_BYTES 4.0  // master weights, accumulated gradients, AdamW moments
#define ACCT_BF16_BYTES 2.0  // saved activations; weights and activations sent over the network
#define ACCT_GB 1e9          // "GB" everywhere in this problem is decimal, as in "H100 80GB"

typedef struct {
    int64_t d_model;     // D
    int64_t d_ff;        // F
    int64_t num_blocks;  // L
} acct_model_t;

// Single-device memory, part (a).
typedef struct {
    double params;                   // P = 2·L·D·F (W1 and W2 of every block)
    double master_weight_bytes;      // 4P
    double grad_bytes;               // 4P: accumulated fp32 gradients
    double optimizer_bytes;          // 8P: AdamW's first and second moments
    double state_bytes;              // 16P: the three above together
    double activation_bytes_per_token;  // 2·L·(D + F): bf16 inputs of W1 and W2 in every block
} acct_memory_t;

// Per-layer forward-pass times for FSDP (X) × TP (Y), part (c), in seconds.
typedef struct {
    double flops_per_s;      // C
    double ici_bytes_per_s;  // W_ici, bidirectional, per mesh axis
    int mesh_axes_x;         // M_X
    int mesh_axes_y;         // M_Y
    int x;                   // FSDP degree
    int y;                   // TP degree
} acct_mesh_t;

typedef struct {
    double math_s;  // 2·2·B·D·F / (N·C): the two matmuls of one block, split over N chips
    double fsdp_s;  // 2·2·D·F / (Y·W·M_X): all-gather of W1 and W2 shards (bf16) along X
    double tp_s;    // 2·2·B·D / (X·W·M_Y): all-gather In and reduce-scatter Out (bf16) along Y
} acct_layer_times_t;

// When the FSDP × TP forward pass is compute-bound, part (c).
typedef struct {
    double alpha;                  // C / W_ici, FLOPs per byte of one ICI axis
    int tp_ok;                     // 1 if F > alpha·Y/M_Y: the TP collectives hide at any batch
    double tp_max_degree;          // M_Y·F/alpha: the largest Y whose TP collectives still hide
    // Book's model (X and Y collectives overlap each other and the math): max(T_fsdp, T_tp) <
    // T_math, i.e. B/N > alpha/(Y·M_X) when tp_ok. INFINITY when !tp_ok (no batch is enough).
    double min_tokens_per_device;  // threshold on B/N (strictly above it is compute-bound)
    double min_tokens_total;       // N times that
    // Stricter model: the X and Y collectives do not overlap each other, T_fsdp + T_tp < T_math:
    // B/N > (F/(Y·M_X)) / (F/alpha − Y/M_Y). INFINITY when the denominator is not positive.
    double min_tokens_per_device_serial;
    // The floor with the best split of the same N chips (X = X_opt): B/N > alpha²/(M_X·M_Y·F).
    double min_tokens_per_device_best_split;
} acct_bound_t;

// 0 if the sizes are usable, else -1 with one line naming the offending value in err.
int acct_model_check(const acct_model_t* m, char* err, size_t errlen);
int acct_mesh_check(const acct_mesh_t* mesh, char* err, size_t errlen);

acct_memory_t acct_memory(const acct_model_t* m);
// Bytes saved for the backward when one device holds `tokens` tokens (batch · context).
double acct_activation_bytes(const acct_model_t* m, double tokens);
// How many devices of `device_bytes` the bytes fill, as a fraction (ceil it for whole devices).
double acct_devices_needed(double bytes, double device_bytes);
// Whole devices: the smallest integer n with n·device_bytes >= bytes.
int64_t acct_devices_whole(double bytes, double device_bytes);

// Part (b): state and half the activations sharded over n_fsdp devices, the other half kept whole:
//   (state + act/2) / n_fsdp + act/2.
double acct_fsdp_bytes_per_device(double state_bytes, double act_bytes, int64_t n_fsdp);
// The smallest n_fsdp whose per-device bytes are strictly below budget_bytes; -1 if none is
// (the unsharded half of the activations alone reaches the budget) or it exceeds 1e15.
int64_t acct_fsdp_min_degree(double state_bytes, double act_bytes, double budget_bytes);

// Part (c). tokens_total is B, the global batch in tokens.
acct_layer_times_t acct_layer_times(const acct_model_t* m, const acct_mesh_t* mesh, double tokens_total);
acct_bound_t acct_compute_bound(const acct_model_t* m, const acct_mesh_t* mesh);
// The FSDP degree that balances the two collectives for B tokens on n chips:
//   X_opt = sqrt(B/F · M_X/M_Y · n).
double acct_x_opt(double tokens_total, int64_t d_ff, int mesh_axes_x, int mesh_axes_y, int64_t n_chips);
// The smallest whole number strictly above a threshold (320 for 319.44; 5 for 4; 0 below 0);
// -1 for an infinite threshold (no batch is enough).
int64_t acct_smallest_above(double threshold);

// ---- The 2026 handout's §8 cost calculations: one FFN layer x1 = x·W1, x2 = x·W2, z = f(x1)*x2,
// y = z·W3 (W1, W2 [D, F], W3 [F, D]), B rows of input, every weight and activation fp16 (2 bytes),
// N devices each with egress bandwidth W bytes/s and C FLOP/s; only matmuls count as FLOPs.
// Ring collectives on a tensor of S bytes (each device sends N-1 chunks of S/N per pass).
#define ACCT_FP16_BYTES 2.0

typedef struct {
    double d_model;      // D
    double d_ff;         // F
    double tokens;       // B, rows of the (global) batch
    double flops_per_s;  // C
    double egress_bytes_per_s;  // W, what one device can send per second
} acct_ffn_t;

// 0 if every field is positive and finite, else -1 naming the flag in err.
int acct_ffn_check(const acct_ffn_t* f, char* err, size_t errlen);

double acct_ring_all_gather_s(double bytes, int64_t n, double w);      // (N-1)/N · S/W
double acct_ring_reduce_scatter_s(double bytes, int64_t n, double w);  // (N-1)/N · S/W
double acct_ring_all_reduce_s(double bytes, int64_t n, double w);      // 2(N-1)/N · S/W
// alternate_ring_all_reduce: every step each device forwards one whole S-byte tensor to its
// right neighbour, N-1 steps: (N-1) · S/W, N/2 times the reduce-scatter + all-gather ring.
double acct_alt_ring_all_reduce_s(double bytes, int64_t n, double w);

// One strategy of degree n (data_parallel_calcs, fsdp_calcs, tp_calcs): per-device numbers.
typedef struct {
    double fwd_flops, bwd_flops;        // matmul FLOPs of one device
    double fwd_compute_s, bwd_compute_s;  // those over C
    double fwd_comm_s, bwd_comm_s;      // ring collectives of one device over W
    double max_n_fwd, max_n_bwd;        // largest degree with comm <= compute (INFINITY: never bound)
} acct_par_t;

acct_par_t acct_dp(const acct_ffn_t* f, int64_t n_dp);      // all-reduce of the 3 weight gradients
acct_par_t acct_fsdp(const acct_ffn_t* f, int64_t n_fsdp);  // all-gathers + reduce-scatters of weights
acct_par_t acct_tp(const acct_ffn_t* f, int64_t n_tp);      // all-reduce of y (fwd) and dx (bwd)

// fsdp_tp_calcs: forward pass on an n_fsdp × n_tp grid.
typedef struct {
    double fwd_flops, fwd_compute_s;
    double fsdp_comm_s;    // all-gather of the three [D/N_FSDP, F/N_TP] shards along FSDP
    double tp_comm_s;      // all-reduce of y, [B/N_FSDP, D], along TP
    double overlap_comm_s; // max of the two: the axes overlap (part b)
    double serial_comm_s;  // their sum: the axes share the network (part d)
    // (c) overlapped: N_FSDP <= 1 + BW/C and N_TP <= 1 + 3FW/(2C) separately, so
    //     N <= (1 + BW/C)(1 + 3FW/(2C)); large-N form 3·B·F·W²/(2C²).
    double max_n_overlap, max_n_overlap_large;
    // (d) serial: 3F(N_FSDP-1) + 2B(N_TP-1) <= 3BFW/C; the best split gives
    //     N <= (3BFW/C + 3F + 2B)² / (24·B·F) while that split has both degrees >= 1 (else the
    //     degree below 1 becomes 1 and the other axis takes the whole budget); large-N form 3·B·F·W²/(8C²).
    double max_n_serial, max_n_serial_large;
    double serial_best_fsdp, serial_best_tp;  // the split that reaches max_n_serial
} acct_2d_t;

acct_2d_t acct_fsdp_tp(const acct_ffn_t* f, int64_t n_fsdp, int64_t n_tp);

// ---- The Transformer LM's training step (common/model.h), bf16 ZeRO-3 over n ranks ---------
// Memory of one rank, in bytes, for the GPU model (common/model_gpu.c) in bf16: the state
// sharded (ZeRO-3: bf16 parameters, fp32 masters, fp32 gradients, fp32 AdamW m and v, each
// 1/n), two parameter (bf16) and two gradient (fp32) working buffers of the largest unit (the
// embedding or the head, V·C: zero3.h), and this rank's activations for its share of the batch
// (B/n sequences of T): model_gpu_acts_bytes's formula, exactly, with the attention plug-in's
// logsumexp (flash) or the naive scores, activation checkpointing K and the chunked head; the
// backward scratch of mg_alloc_backward and the (rows, V) or (N, V) logits.
typedef struct {
    int64_t vocab, d_model, d_ff, n_layers, n_heads;  // V, C, F, L, NH (model_config_t's)
    int64_t batch, context;  // B sequences of the GLOBAL batch, T tokens each
    int64_t ranks;           // n: the batch splits over them (B/n each), the state shards
    int flash;               // 1: flash attention (logsumexp per head and row), 0: naive (T x T scores)
    int ckpt;                // activation checkpointing K (model_cpu.h: 0 none, 1 block, K every-K)
    int64_t head_chunk;      // the chunked LM head's rows (0: the whole logits)
    double act_bytes;        // bytes of an activation element: 2 (bf16) or 4 (fp32)
} acct_lm_cfg_t;

typedef struct {
    double params;            // P: trainable elements (the layout without padding)
    double rows;              // N = B/n · T rows on a rank
    double bf16_params;       // 2P/n
    double masters;           // 4P/n
    double grads;             // 4P/n
    double moments;           // 8P/n
    double state;             // 18P/n, the four above
    double working;           // 2 x 2·V·C + 2 x 4·V·C: ZeRO-3's unit working buffers
    double acts_per_layer;    // one block's saved activations, all of them (no checkpointing)
    double acts_blocks;       // every block's saved activations under K (the head's excluded)
    double acts_head;         // the final norm's output and statistics, lse and losses (no logits)
    double logits;            // N·V·es (whole) or min(R, N)·V·es (chunked): the head's logits buffer
    double logits_fp32_pair;  // 8·N·V: fp32 logits and fp32 dlogits held at once (an autograd framework's upcast)
    double scratch;           // the backward's (N, ·) scratch and the forward's SwiGLU output
    double total;             // state + working + acts_blocks + acts_head + logits + scratch
} acct_lm_t;

// 0 if usable (sizes >= 1, the batch divisible by the ranks, K >= 0, chunk >= 0, act_bytes 2 or
// 4), else -1 naming the field.
int acct_lm_check(const acct_lm_cfg_t* c, char* err, size_t errlen);
acct_lm_t acct_lm(const acct_lm_cfg_t* c);
// The acts-tagged bytes of the GPU model for B x T on one device (model_gpu_acts_bytes; a GPU
// test checks the two agree): acts_blocks + acts_head + the logits when they are whole.
double acct_lm_model_acts_bytes(const acct_lm_cfg_t* c);

#ifdef __cplusplus
}
#endif
