/*
llmc/opencl/layers.cl: the element- and row-wise layers of the OpenCL trainer (train_gpt2cl.c), fp32.
OpenCL C 1.2, no extensions. Every tensor argument is a buffer and an element offset into it (the
trainer keeps parameters, gradients and activations in one buffer each). Every kernel guards its
global id, so the host may round the global size up to a multiple of the work-group size.
Backward kernels accumulate (+=) into their gradients. No atomics: each output element is written by
one work item, which sums its terms in a fixed order, so results are the same bits run to run.

    encoder_forward, encoder_backward_wte, encoder_backward_wpe
    layernorm_forward, layernorm_backward_dinp, layernorm_backward_dparams
    residual_forward, residual_backward, add_bias, bias_backward
    gelu_forward, gelu_backward

Shapes: B batch, T time, C channels, BT = B*T rows, OC output channels.
*/

// one work item per (bt, c): out (BT,C) = wte[inp[bt]] + wpe[t]
__kernel void encoder_forward(__global float* out, ulong out_off, __global const int* inp,
                              __global const float* wte, ulong wte_off, __global const float* wpe, ulong wpe_off,
                              int BT, int T, int C) {
    size_t i = get_global_id(0);
    if (i >= (size_t)BT * C) { return; }
    out += out_off; wte += wte_off; wpe += wpe_off;
    int bt = (int)(i / C), c = (int)(i % C), t = bt % T;
    out[i] = wte[(size_t)inp[bt] * C + c] + wpe[(size_t)t * C + c];
}

// one work item per channel c: dwte (Vp,C) rows of the batch's tokens += dout (BT,C), rows in order
// (a token that appears twice is summed by the same work item: no race, a fixed order)
__kernel void encoder_backward_wte(__global float* dwte, ulong dwte_off, __global const float* dout, ulong dout_off,
                                   __global const int* inp, int BT, int C) {
    int c = (int)get_global_id(0);
    if (c >= C) { return; }
    dwte += dwte_off; dout += dout_off;
    for (int bt = 0; bt < BT; bt++) { dwte[(size_t)inp[bt] * C + c] += dout[(size_t)bt * C + c]; }
}

// one work item per (t, c): dwpe (maxT,C) row t += sum over b of dout (B,T,C) [b,t]
__kernel void encoder_backward_wpe(__global float* dwpe, ulong dwpe_off, __global const float* dout, ulong dout_off,
                                   int B, int T, int C) {
    size_t i = get_global_id(0);
    if (i >= (size_t)T * C) { return; }
    dwpe += dwpe_off; dout += dout_off;
    float sum = 0.0f;
    for (int b = 0; b < B; b++) { sum += dout[(size_t)b * T * C + i]; }
    dwpe[i] += sum;
}

// one work item per row: out (BT,C) = (inp - mean) * rstd * weight + bias; mean, rstd (BT) kept.
// Two passes (mean, then squared deviations), biased variance, eps 1e-5: llmc/layer_math.h's rule.
__kernel void layernorm_forward(__global float* out, ulong out_off, __global float* mean, ulong mean_off,
                                __global float* rstd, ulong rstd_off, __global const float* inp, ulong inp_off,
                                __global const float* weight, ulong weight_off, __global const float* bias, ulong bias_off,
                                int BT, int C) {
    int bt = (int)get_global_id(0);
    if (bt >= BT) { return; }
    out += out_off + (size_t)bt * C; inp += inp_off + (size_t)bt * C;
    weight += weight_off; bias += bias_off;
    float sum = 0.0f;
    for (int i = 0; i < C; i++) { sum += inp[i]; }
    float m = sum / (float)C;
    float var = 0.0f;
    for (int i = 0; i < C; i++) {
        float d = inp[i] - m;
        var += d * d;
    }
    float s = 1.0f / sqrt(var / (float)C + 1e-5f);
    for (int i = 0; i < C; i++) { out[i] = (inp[i] - m) * s * weight[i] + bias[i]; }
    mean[mean_off + bt] = m;
    rstd[rstd_off + bt] = s;
}

// one work item per row: dinp (BT,C) += the input gradient of layernorm_forward for dout (BT,C)
__kernel void layernorm_backward_dinp(__global float* dinp, ulong dinp_off, __global const float* dout, ulong dout_off,
                                      __global const float* inp, ulong inp_off, __global const float* weight, ulong weight_off,
                                      __global const float* mean, ulong mean_off, __global const float* rstd, ulong rstd_off,
                                      int BT, int C) {
    int bt = (int)get_global_id(0);
    if (bt >= BT) { return; }
    dinp += dinp_off + (size_t)bt * C; dout += dout_off + (size_t)bt * C; inp += inp_off + (size_t)bt * C;
    weight += weight_off;
    float m = mean[mean_off + bt], s = rstd[rstd_off + bt];
    float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
    for (int i = 0; i < C; i++) {
        float norm = (inp[i] - m) * s;
        float dnorm = weight[i] * dout[i];
        dnorm_mean += dnorm;
        dnorm_norm_mean += dnorm * norm;
    }
    dnorm_mean /= (float)C;
    dnorm_norm_mean /= (float)C;
    for (int i = 0; i < C; i++) {
        float norm = (inp[i] - m) * s;
        float dnorm = weight[i] * dout[i];
        dinp[i] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
    }
}

// one work item per channel: dweight, dbias (C) += sums over the rows, in row order
__kernel void layernorm_backward_dparams(__global float* dweight, ulong dweight_off, __global float* dbias, ulong dbias_off,
                                         __global const float* dout, ulong dout_off, __global const float* inp, ulong inp_off,
                                         __global const float* mean, ulong mean_off, __global const float* rstd, ulong rstd_off,
                                         int BT, int C) {
    int c = (int)get_global_id(0);
    if (c >= C) { return; }
    dout += dout_off; inp += inp_off; mean += mean_off; rstd += rstd_off;
    float dw = 0.0f, db = 0.0f;
    for (int bt = 0; bt < BT; bt++) {
        float d = dout[(size_t)bt * C + c];
        dw += (inp[(size_t)bt * C + c] - mean[bt]) * rstd[bt] * d;
        db += d;
    }
    dweight[dweight_off + c] += dw;
    dbias[dbias_off + c] += db;
}

// out (N) = a + b
__kernel void residual_forward(__global float* out, ulong out_off, __global const float* a, ulong a_off,
                               __global const float* b, ulong b_off, ulong N) {
    size_t i = get_global_id(0);
    if (i >= N) { return; }
    out[out_off + i] = a[a_off + i] + b[b_off + i];
}

// da, db (N) += dout
__kernel void residual_backward(__global float* da, ulong da_off, __global float* db, ulong db_off,
                                __global const float* dout, ulong dout_off, ulong N) {
    size_t i = get_global_id(0);
    if (i >= N) { return; }
    float d = dout[dout_off + i];
    da[da_off + i] += d;
    db[db_off + i] += d;
}

// out (BT,OC) += bias (OC) on every row
__kernel void add_bias(__global float* out, ulong out_off, __global const float* bias, ulong bias_off, int BT, int OC) {
    size_t i = get_global_id(0);
    if (i >= (size_t)BT * OC) { return; }
    out[out_off + i] += bias[bias_off + i % OC];
}

// one work item per output channel: dbias (OC) += sum over rows of dout (BT,OC), in row order
__kernel void bias_backward(__global float* dbias, ulong dbias_off, __global const float* dout, ulong dout_off,
                            int BT, int OC) {
    int o = (int)get_global_id(0);
    if (o >= OC) { return; }
    dout += dout_off;
    float sum = 0.0f;
    for (int r = 0; r < BT; r++) { sum += dout[(size_t)r * OC + o]; }
    dbias[dbias_off + o] += sum;
}

// GELU, tanh approximation (GPT-2's gelu_new), as llmc/layer_math.h
#define GELU_SCALING_FACTOR 0.7978845608028654f
#define GELU_CUBE_COEFF 0.044715f

__kernel void gelu_forward(__global float* out, ulong out_off, __global const float* inp, ulong inp_off, ulong N) {
    size_t i = get_global_id(0);
    if (i >= N) { return; }
    float x = inp[inp_off + i];
    float cube = GELU_CUBE_COEFF * x * x * x;
    out[out_off + i] = 0.5f * x * (1.0f + tanh(GELU_SCALING_FACTOR * (x + cube)));
}

// dinp (N) += gelu'(inp) * dout
__kernel void gelu_backward(__global float* dinp, ulong dinp_off, __global const float* inp, ulong inp_off,
                            __global const float* dout, ulong dout_off, ulong N) {
    size_t i = get_global_id(0);
    if (i >= N) { return; }
    float x = inp[inp_off + i];
    float cube = GELU_CUBE_COEFF * x * x * x;
    float u = GELU_SCALING_FACTOR * (x + cube);
    float th = tanh(u);
    float sech2 = 1.0f - th * th;
    float du_dx = GELU_SCALING_FACTOR * (1.0f + 3.0f * GELU_CUBE_COEFF * x * x);
    float grad = 0.5f * (1.0f + th) + 0.5f * x * sech2 * du_dx;
    dinp[dinp_off + i] += grad * dout[dout_off + i];
}
