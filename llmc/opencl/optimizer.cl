/*
llmc/opencl/optimizer.cl: AdamW and the gradient norm of the OpenCL trainer, fp32, OpenCL C 1.2, no extensions.

    adamw_update        one work item per parameter; llmc/adamw.h's rule (PyTorch AdamW), the per-step
                        scalars computed on the host (adamw_step_scalars)
    sum_squares_chunks  one work item per chunk of `chunk` gradients: its sum of squares (Kahan, float);
                        the host adds the chunks in double, in order, so the norm does not depend on
                        how the device schedules work items
*/

__kernel void adamw_update(__global float* params, __global const float* grads, __global float* m, __global float* v,
                           ulong off, ulong n, float lr, float beta1, float beta2, float eps, float step_size,
                           float bc2_sqrt, float weight_decay, float grad_scale) {
    size_t g = get_global_id(0);
    if (g >= n) { return; }
    size_t i = off + g;
    float grad = grads[i] * grad_scale;
    float param = params[i] * (1.0f - lr * weight_decay);
    float mt = m[i] + (1.0f - beta1) * (grad - m[i]);
    float vt = beta2 * v[i] + (1.0f - beta2) * grad * grad;
    m[i] = mt;
    v[i] = vt;
    float denom = sqrt(vt) / bc2_sqrt + eps;
    params[i] = param - step_size * (mt / denom);
}

__kernel void sum_squares_chunks(__global float* partial, __global const float* x, ulong n, ulong chunk) {
    size_t k = get_global_id(0);
    size_t lo = k * chunk;
    if (lo >= n) { return; }
    size_t hi = lo + chunk < n ? lo + chunk : n;
    float sum = 0.0f, comp = 0.0f;
    for (size_t i = lo; i < hi; i++) {
        float y = x[i] * x[i] - comp;
        float s = sum + y;
        comp = (s - sum) - y;
        sum = s;
    }
    partial[k] = sum;
}
