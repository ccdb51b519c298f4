/*
llmc/opencl/classifier.cl: softmax + cross-entropy of the OpenCL trainer, fp32, OpenCL C 1.2, no extensions.
logits and probs are (BT,Vp); only the first V columns are the vocabulary (the padded ones get
probability 0). The softmax sum over V ~ 50k terms is compensated (Kahan) in float, so the loss stays
within a few float ulps without needing cl_khr_fp64.

    crossentropy_forward    one work item per row: probs, losses (BT)
    crossentropy_backward   one work item per (row, column < V): dlogits += (probs - onehot) * dlosses
*/

__kernel void crossentropy_forward(__global float* losses, ulong losses_off, __global float* probs, ulong probs_off,
                                   __global const float* logits, ulong logits_off, __global const int* targets,
                                   int BT, int V, int Vp) {
    int bt = (int)get_global_id(0);
    if (bt >= BT) { return; }
    __global const float* x = logits + logits_off + (size_t)bt * Vp;
    __global float* p = probs + probs_off + (size_t)bt * Vp;
    float maxval = -INFINITY;
    for (int i = 0; i < V; i++) { maxval = x[i] > maxval ? x[i] : maxval; }
    float sum = 0.0f, comp = 0.0f; // Kahan summation
    for (int i = 0; i < V; i++) {
        float e = exp(x[i] - maxval);
        p[i] = e;
        float y = e - comp;
        float s = sum + y;
        comp = (s - sum) - y;
        sum = s;
    }
    float inv = 1.0f / sum;
    for (int i = 0; i < V; i++) { p[i] *= inv; }
    for (int i = V; i < Vp; i++) { p[i] = 0.0f; }
    losses[losses_off + bt] = log(sum) - (x[targets[bt]] - maxval);
}

__kernel void crossentropy_backward(__global float* dlogits, ulong dlogits_off, __global const float* dlosses, ulong dlosses_off,
                                    __global const float* probs, ulong probs_off, __global const int* targets,
                                    int BT, int V, int Vp) {
    size_t g = get_global_id(0);
    if (g >= (size_t)BT * V) { return; }
    int bt = (int)(g / V), i = (int)(g % V);
    size_t idx = (size_t)bt * Vp + i;
    float indicator = i == targets[bt] ? 1.0f : 0.0f;
    dlogits[dlogits_off + idx] += (probs[probs_off + idx] - indicator) * dlosses[dlosses_off + bt];
}
