// The course's two ToyModels (CS336 assignment 2, tests/common.py) in plain C, fp32, CPU:
// small enough to check data parallelism element by element against single-process training
// and against PyTorch (tests/fixtures/toymodel/). Stage 06 tests DDP with them; stage 07 its
// sharded optimizer.
//
//   ToyModel (TOY_MODEL)            x -> fc1 (10->10, no bias) -> ReLU
//                                     -> fc2.fc (10->50, bias FROZEN) -> ReLU
//                                     -> fc3 (50->5, no bias)
//                                   plus no_grad_fixed_param = [2, 2], FROZEN and never used by
//                                   the forward (requires_grad=False in the course)
//   ToyModelWithTiedWeights (TOY_TIED)
//                                   x -> fc1 (10->10) -> ReLU -> fc2 (10->50) -> ReLU
//                                     -> fc3 (50->10) -> ReLU -> fc4 (10->50) -> ReLU
//                                     -> fc5 (50->5); no biases; fc4.weight IS fc2.weight
//
// Parameters live in one flat buffer (gradients in a second, same layout), in the order of
// PyTorch's model.parameters() (a module's own parameters before its children's), with no
// padding. The tied weight is ONE table entry ("fc2.weight"): its gradient is the sum of both
// uses, and its hook fires once, when both are in. Weights are [d_out, d_in] (y = x Wᵀ + b).
//
//   toy_model_t m;
//   toy_create(&m, TOY_MODEL, max_B);  toy_init_params(&m, seed);   // or toy_load_params
//   float loss = toy_forward(&m, x, y, B);         // x (B, 10), y (B, 5): mean squared error
//   toy_backward(&m, 1.0f, hook, ctx);             // grads of the used trainable parameters
//   toy_sgd_step(&m, 0.1f);                        // trainable parameters only
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "common/model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { TOY_MODEL = 0, TOY_TIED = 1 } toy_kind_t;
#define TOY_KIND_CHOICES "toy|tied"
const char* toy_kind_name(toy_kind_t k);            // "toy", "tied"
int toy_kind_parse(const char* s, toy_kind_t* out);  // 0, or -1

#define TOY_D_IN 10
#define TOY_D_OUT 5
#define TOY_D_HIDDEN 50  // the widest layer: activation buffers are sized for it
#define TOY_MAX_PARAMS 5
#define TOY_MAX_LINEARS 5

typedef struct {
    char name[32];         // PyTorch's parameter name: "fc2.fc.bias", "no_grad_fixed_param"
    int rank;              // 2: a weight [shape0, shape1]; 1: a vector [shape0]
    int shape[2];
    size_t offset, numel;  // elements in the flat buffers
    int trainable;         // 0: frozen: no gradient is computed, toy_sgd_step skips it
} toy_param_t;

// One linear layer of the forward: y = x Wᵀ (+ b), then ReLU if `relu`.
typedef struct {
    int w, b;        // parameter indices of the weight [d_out, d_in] and bias [d_out] (b: -1, none)
    int d_in, d_out;
    int relu;
} toy_linear_t;

typedef struct {
    toy_kind_t kind;
    int n_params;
    toy_param_t p[TOY_MAX_PARAMS];
    int n_linears;
    toy_linear_t lin[TOY_MAX_LINEARS];
    int uses[TOY_MAX_PARAMS];  // how many linears read each parameter (2: tied; 0: unused)
    size_t total;              // flat buffer length in elements
    float* params;             // (total)
    float* grads;              // (total): the backward writes the used trainable parameters'
                               // slots; frozen and unused slots are left as they are
    int max_B;                 // batch capacity
    int cur_B;                 // rows of the last forward
    float* act[TOY_MAX_LINEARS + 1];  // act[0] (B, 10) input; act[l+1] (B, d_out of l) output
                                      // of linear l after its ReLU (the model output at the end)
    float* target;             // (B, 5) copy of the last forward's targets
    float* dy;                 // (B, 50) backward scratch: gradient w.r.t. a layer's output
    float* dx;                 // (B, 50) and w.r.t. its input
} toy_model_t;

// Allocates a model for batches of up to max_B rows. Parameters are zero until
// toy_init_params or toy_load_params; gradients are zero.
void toy_create(toy_model_t* m, toy_kind_t kind, int max_B);
void toy_destroy(toy_model_t* m);

// nn.Linear's default init, deterministic in `seed` (common/rng.h, not torch's generator):
// weight and bias uniform in [-1/sqrt(d_in), 1/sqrt(d_in)); no_grad_fixed_param = [2, 2].
void toy_init_params(toy_model_t* m, uint64_t seed);

// Reads <dir>/<name>.npy (float32) for every parameter into dst (m->total floats). step < 0:
// each file has the parameter's shape. step >= 0: each has a leading step axis [S, shape...]
// and slice `step` is read. 0, or -1 with a reason that names the file.
int toy_load_params(const toy_model_t* m, const char* dir, int step, float* dst, char* err,
                    size_t errlen);

// Forward on B rows: x (B, 10), target (B, 5) or NULL. Returns the mean squared error over the
// B·5 outputs (nn.MSELoss()), or NAN without targets. The output is m->act[m->n_linears].
float toy_forward(toy_model_t* m, const float* x, const float* target, int B);

// Backward of loss_scale · (the last forward's mean squared error). Writes (does not add) the
// gradient of every trainable parameter the forward used; `hook` (may be NULL) is called once
// per such parameter, as soon as its gradient is final: in reverse layer order, the tied
// weight after its second (earlier-layer) use. loss_scale: 1 for the mean; B·5 gives the
// gradient of the SUM of squares (stage 07's loss); data parallelism with uneven shards uses
// it to weight each rank's mean by its share of the rows.
void toy_backward(toy_model_t* m, float loss_scale, grad_ready_fn hook, void* ctx);

// p -= lr · g over the trainable parameters (torch.optim.SGD without momentum or decay).
void toy_sgd_step(toy_model_t* m, float lr);
// Every gradient slot to 0 (optimizer.zero_grad with set_to_none=False).
void toy_zero_grads(toy_model_t* m);

// Checks of flat buffers in a toy's layout, parameter by parameter, for the programs that
// replay the course's tests (ddp_toy, zero_toy). Each failing parameter is one line on stderr
// naming the rank, the run, the step and the parameter, and counts in `bad`.
typedef struct {
    int rank;
    const char* run;  // names the run in failure lines ("toy bucketed 0.0016 MiB")
    int bad;          // failed checks so far
} toy_checker_t;
// |got - want| <= atol + rtol·|want| (NaN fails); returns the largest |got - want| (NaN if any).
double toy_check_close(toy_checker_t* k, const toy_model_t* m, const float* got, const float* want,
                       double rtol, double atol, const char* what, int step);
// The parameters selected by `which` (0 frozen, 1 trainable, -1 all) bitwise equal.
void toy_check_bitwise(toy_checker_t* k, const toy_model_t* m, const float* got, const float* want,
                       int which, const char* what, int step);

#ifdef __cplusplus
}
#endif
