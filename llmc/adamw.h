/*
llmc/adamw.h: the AdamW rule, one element at a time, shared by the CPU trainer (gpt2_update), the
GPU kernel (llmc/cuda/adamw.cuh) and pyllmc, so every trainer takes the same step. Its constants
(betas, eps) are the reference's, in llmc/trainer.h.

Every function is HD (llmc/host_device.h): plain C on the CPU, __host__ __device__ under nvcc.
*/
#ifndef LLMC_ADAMW_H
#define LLMC_ADAMW_H

#include <math.h>

#include "host_device.h"

// AdamW, PyTorch semantics (torch.optim.AdamW, single-tensor path):
//   p -= lr * wd * p
//   m  = m + (1 - beta1) * (g - m)
//   v  = beta2 * v + (1 - beta2) * g * g
//   p -= (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// The per-step scalars come from adamw_step_scalars (computed once per step in double,
// like Python floats); adamw_update_one then updates one element. Returns the new param.

typedef struct {
    float lr;              // learning rate of this step
    float beta1, beta2;
    float eps;
    float step_size;       // lr / (1 - beta1^t)
    float bc2_sqrt;        // sqrt(1 - beta2^t)
} AdamWScalars;

static inline HD AdamWScalars adamw_step_scalars(float lr, float beta1, float beta2, float eps, int t) {
    AdamWScalars s;
    double bc1 = 1.0 - pow((double)beta1, (double)t);
    double bc2 = 1.0 - pow((double)beta2, (double)t);
    s.lr = lr;
    s.beta1 = beta1;
    s.beta2 = beta2;
    s.eps = eps;
    s.step_size = (float)((double)lr / bc1);
    s.bc2_sqrt = (float)sqrt(bc2);
    return s;
}

static inline HD float adamw_update_one(float param, float grad, float* m, float* v,
                                        float weight_decay, AdamWScalars s) {
    param = param * (1.0f - s.lr * weight_decay);
    float mt = *m + (1.0f - s.beta1) * (grad - *m);
    float vt = s.beta2 * *v + (1.0f - s.beta2) * grad * grad;
    *m = mt;
    *v = vt;
    float denom = sqrtf(vt) / s.bc2_sqrt + s.eps;
    return param - s.step_size * (mt / denom);
}

#endif // LLMC_ADAMW_H
