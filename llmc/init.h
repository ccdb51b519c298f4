/*
llmc/init.h: GPT-2 parameters from scratch, shared by the CPU and GPU trainers (`-e dN`), bit
for bit what train_gpt2.py does: one torch-compatible generator seeded with `seed`, normal_
draws in the order wte (V unpadded rows), wpe, then for each layer qkvw, attprojw, fcw, fcprojw.
std 0.02, residual projections (attprojw, fcprojw) 0.02/sqrt(2L), both Python doubles (normal_d).
Biases 0, layernorm weights 1 and biases 0, wte pad rows (V..Vp-1) 0.
*/
#ifndef LLMC_INIT_H
#define LLMC_INIT_H

#include <math.h>
#include <stddef.h>
#include <string.h>
#include "model_config.h"
#include "rand.h"

// params: gpt2_num_parameters(cfg) floats, the 16 tensors in checkpoint order
static inline void gpt2_init_params_from_scratch(float* params, const GPT2Config* cfg, unsigned int seed) {
    size_t sizes[GPT2_NUM_PARAMETER_TENSORS];
    float* t[GPT2_NUM_PARAMETER_TENSORS];  // start of each tensor
    gpt2_parameter_sizes(sizes, cfg);
    size_t total = 0;
    for (int k = 0; k < GPT2_NUM_PARAMETER_TENSORS; k++) {
        t[k] = params + total;
        total += sizes[k];
    }
    memset(params, 0, total * sizeof(float));
    int L = cfg->num_layers;
    size_t C = (size_t)cfg->channels;
    mt19937_state rng;
    manual_seed(&rng, seed);
    double std = 0.02;
    double proj_std = 0.02 / sqrt(2.0 * L);
    normal_d(t[GPT2_PARAM_wte], (size_t)cfg->vocab_size * C, 0.0, std, &rng);   // (V, C), pad rows stay 0
    normal_d(t[GPT2_PARAM_wpe], (size_t)cfg->max_seq_len * C, 0.0, std, &rng);  // (maxT, C)
    for (int l = 0; l < L; l++) {
        normal_d(t[GPT2_PARAM_qkvw] + (size_t)l * 3 * C * C, 3 * C * C, 0.0, std, &rng);           // (3C, C)
        normal_d(t[GPT2_PARAM_attprojw] + (size_t)l * C * C, C * C, 0.0, proj_std, &rng);         // (C, C)
        normal_d(t[GPT2_PARAM_fcw] + (size_t)l * 4 * C * C, 4 * C * C, 0.0, std, &rng);           // (4C, C)
        normal_d(t[GPT2_PARAM_fcprojw] + (size_t)l * 4 * C * C, 4 * C * C, 0.0, proj_std, &rng);  // (C, 4C)
    }
    for (size_t i = 0; i < (size_t)L * C; i++) {
        t[GPT2_PARAM_ln1w][i] = 1.0f;
        t[GPT2_PARAM_ln2w][i] = 1.0f;
    }
    for (size_t i = 0; i < C; i++) { t[GPT2_PARAM_lnfw][i] = 1.0f; }
}

#endif // LLMC_INIT_H
