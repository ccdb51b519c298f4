/*
llmc/opencl/attention.cl: causal self-attention of the OpenCL trainer, fp32, OpenCL C 1.2, no extensions.
qkv (B,T,3C) holds Q, K, V side by side, heads of HS = C / NH channels each. The forward keeps the
attention weights att (B,NH,T,T) for the backward. One work item per (b, t, h) for the forward and the
query side of the backward, one per (b, t2, h) for the key/value side: every output element is written
by one work item summing in a fixed order (no atomics), so results are the same bits run to run.

    attention_forward          out (B,T,C), att (B,NH,T,T) from qkv
    attention_backward_query   dpre (B,NH,T,T) (scratch) and dq += from dout, att, qkv
    attention_backward_kv      dk, dv += from dpre, att, dout, qkv
*/

// the attention head of a work item: (b, t, h) with h fastest, HS = C / NH channels, the scores' scale
// 1 / sqrt(HS), and base, head h's first column in batch b's rows of qkv (B,T,3C): row t starts at
// base + t * 3C (q there, k at + C, v at + 2C)
typedef struct {
    int b, t, h, HS;
    float scale;
    __global const float* base;
} AttHead;

// fills hd for this work item; 0 for a work item past the B * T * NH heads
int att_head(AttHead* hd, __global const float* qkv, int B, int T, int C, int NH) {
    size_t i = get_global_id(0);
    if (i >= (size_t)B * T * NH) { return 0; }
    hd->h = (int)(i % NH);
    hd->t = (int)((i / NH) % T);
    hd->b = (int)(i / ((size_t)NH * T));
    hd->HS = C / NH;
    hd->scale = 1.0f / sqrt((float)hd->HS);
    hd->base = qkv + (size_t)hd->b * T * 3 * C + hd->h * hd->HS;
    return 1;
}

__kernel void attention_forward(__global float* out, ulong out_off, __global float* att, ulong att_off,
                                __global const float* qkv, ulong qkv_off, int B, int T, int C, int NH) {
    AttHead hd;
    if (!att_head(&hd, qkv + qkv_off, B, T, C, NH)) { return; }
    int b = hd.b, t = hd.t, h = hd.h, C3 = 3 * C, HS = hd.HS;
    __global const float* q = hd.base + (size_t)t * C3;
    __global float* row = att + att_off + (((size_t)b * NH + h) * T + t) * T;
    float maxval = -INFINITY;
    for (int t2 = 0; t2 <= t; t2++) {
        __global const float* k = hd.base + (size_t)t2 * C3 + C;
        float s = 0.0f;
        for (int j = 0; j < HS; j++) { s += q[j] * k[j]; }
        s *= hd.scale;
        row[t2] = s;
        maxval = s > maxval ? s : maxval;
    }
    float sum = 0.0f;
    for (int t2 = 0; t2 <= t; t2++) {
        float e = exp(row[t2] - maxval);
        row[t2] = e;
        sum += e;
    }
    float inv = 1.0f / sum;
    for (int t2 = 0; t2 < T; t2++) { row[t2] = t2 <= t ? row[t2] * inv : 0.0f; }
    __global float* o = out + out_off + ((size_t)b * T + t) * C + h * HS;
    for (int j = 0; j < HS; j++) {
        float acc = 0.0f;
        for (int t2 = 0; t2 <= t; t2++) { acc += row[t2] * hd.base[(size_t)t2 * C3 + 2 * C + j]; }
        o[j] = acc;
    }
}

// per (b, t, h): datt[t2] = dout[t] . v[t2]; dpre[t2] = scale * att[t2] * (datt[t2] - sum att * datt);
// dq[t] += sum_t2 dpre[t2] * k[t2]
__kernel void attention_backward_query(__global float* dqkv, ulong dqkv_off, __global float* dpre, ulong dpre_off,
                                       __global const float* dout, ulong dout_off, __global const float* att, ulong att_off,
                                       __global const float* qkv, ulong qkv_off, int B, int T, int C, int NH) {
    AttHead hd;
    if (!att_head(&hd, qkv + qkv_off, B, T, C, NH)) { return; }
    int b = hd.b, t = hd.t, h = hd.h, C3 = 3 * C, HS = hd.HS;
    __global const float* d = dout + dout_off + ((size_t)b * T + t) * C + h * HS;
    size_t row_off = (((size_t)b * NH + h) * T + t) * T;
    __global const float* a = att + att_off + row_off;
    __global float* g = dpre + dpre_off + row_off;
    float dot = 0.0f;
    for (int t2 = 0; t2 <= t; t2++) {
        __global const float* v = hd.base + (size_t)t2 * C3 + 2 * C;
        float s = 0.0f;
        for (int j = 0; j < HS; j++) { s += d[j] * v[j]; }
        g[t2] = s;
        dot += a[t2] * s;
    }
    for (int t2 = 0; t2 < T; t2++) { g[t2] = t2 <= t ? hd.scale * a[t2] * (g[t2] - dot) : 0.0f; }
    __global float* dq = dqkv + dqkv_off + ((size_t)b * T + t) * C3 + h * HS;
    for (int j = 0; j < HS; j++) {
        float acc = 0.0f;
        for (int t2 = 0; t2 <= t; t2++) { acc += g[t2] * hd.base[(size_t)t2 * C3 + C + j]; }
        dq[j] += acc;
    }
}

// per (b, t2, h): dk[t2] += sum_{t >= t2} dpre[t][t2] * q[t]; dv[t2] += sum_{t >= t2} att[t][t2] * dout[t]
__kernel void attention_backward_kv(__global float* dqkv, ulong dqkv_off, __global const float* dpre, ulong dpre_off,
                                    __global const float* dout, ulong dout_off, __global const float* att, ulong att_off,
                                    __global const float* qkv, ulong qkv_off, int B, int T, int C, int NH) {
    AttHead hd;
    if (!att_head(&hd, qkv + qkv_off, B, T, C, NH)) { return; }
    int b = hd.b, t2 = hd.t, h = hd.h, C3 = 3 * C, HS = hd.HS;
    __global const float* dbase = dout + dout_off + (size_t)b * T * C + h * HS;
    size_t head_off = ((size_t)b * NH + h) * T * T;
    __global const float* g = dpre + dpre_off + head_off;
    __global const float* a = att + att_off + head_off;
    __global float* dk = dqkv + dqkv_off + ((size_t)b * T + t2) * C3 + h * HS + C;
    __global float* dv = dk + C;
    for (int j = 0; j < HS; j++) {
        float acck = 0.0f, accv = 0.0f;
        for (int t = t2; t < T; t++) {
            acck += g[(size_t)t * T + t2] * hd.base[(size_t)t * C3 + j];
            accv += a[(size_t)t * T + t2] * dbase[(size_t)t * C + j];
        }
        dk[j] += acck;
        dv[j] += accv;
    }
}
