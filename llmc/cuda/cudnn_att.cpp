/*
llmc/cuda/cudnn_att.cpp: causal self-attention through cuDNN's fused flash-attention graphs (USE_CUDNN=1).
The interface and the layouts are in llmc/cuda/cudnn_att.h; this file is the cuDNN frontend side.

Each call looks up its graph by (B, T, NH, NKV, HS, is_inference); a miss builds it: describe q, k, v
(strided views into the qkv matmul output; k and v with NKV heads, which cuDNN shares among NH / NKV query
heads and whose gradients it sums over them), declare the SDPA node (causal, scale 1/sqrt(HS)), then
validate, lower to a backend operation graph, ask the heuristics for engine configs, keep the
supported ones and build their plans. The workspace is one device buffer that grows to the largest
graph's need. Every tensor gets a fixed uid, so a call binds its pointers by uid.

Compiled as host C++ (nvcc -c, no device code) into one object: the frontend headers are large.
BF16 in and out; softmax statistics and accumulation in fp32. The backward asks for cuDNN's
deterministic algorithm, so two runs with the same seed give the same bits.
*/
#ifndef ENABLE_CUDNN
#error "llmc/cuda/cudnn_att.cpp is built only with USE_CUDNN=1 (-DENABLE_CUDNN)"
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <cuda_runtime.h>
#include <cudnn.h>
#include <cudnn_frontend.h>

#include "../utils.h"
#include "cudnn_att.h"

namespace fe = cudnn_frontend;
typedef std::shared_ptr<fe::graph::Graph> GraphPtr;
typedef std::shared_ptr<fe::graph::Tensor_attributes> TensorPtr;

// ----------------------------------------------------------------------------
// error checking: one line naming the step and the call site

static void cudnn_att_check_cuda(cudaError_t err, const char* what, const char* file, int line) {
    if (err != cudaSuccess) {
        llmc_die("cuDNN attention: %s failed: %s (%s:%d)", what, cudaGetErrorString(err), file, line);
    }
}
static void cudnn_att_check_status(cudnnStatus_t status, const char* what, const char* file, int line) {
    if (status != CUDNN_STATUS_SUCCESS) {
        llmc_die("cuDNN attention: %s failed: %s (%s:%d)", what, cudnnGetErrorString(status), file, line);
    }
}
static void cudnn_att_check_fe(const fe::error_t& err, const char* what, uint64_t key, const char* file, int line) {
    if (err.is_bad()) {
        int B, T, NH, NKV, HS, is_inference;
        cudnn_att_key_unpack(key, &B, &T, &NH, &NKV, &HS, &is_inference);
        llmc_die("cuDNN attention: %s failed for B=%d T=%d NH=%d NKV=%d HS=%d%s: %s (%s:%d)", what, B, T, NH, NKV, HS,
                 is_inference ? " (inference)" : "", err.err_msg.c_str(), file, line);
    }
}
#define cudaAttCheck(call) cudnn_att_check_cuda((call), #call, __FILE__, __LINE__)
#define cudnnAttCheck(call) cudnn_att_check_status((call), #call, __FILE__, __LINE__)
#define feCheck(call, what, key) cudnn_att_check_fe((call), (what), (key), __FILE__, __LINE__)

// ----------------------------------------------------------------------------
// the context

// fixed uids of the graph tensors: execute() binds device pointers by them
enum : int64_t { UID_Q = 1, UID_K, UID_V, UID_O, UID_STATS, UID_DO, UID_DQ, UID_DK, UID_DV };

struct CudnnAttention {
    cudnnHandle_t handle;
    cudaStream_t stream;
    void* workspace;
    size_t workspace_size;
    std::unordered_map<uint64_t, GraphPtr> forward_graphs;   // key: cudnn_att_key(..., is_inference)
    std::unordered_map<uint64_t, GraphPtr> backward_graphs;  // key: cudnn_att_key(..., 0)
};

CudnnAttention* cudnn_attention_create(cudaStream_t stream) {
    CudnnAttention* att = new CudnnAttention();
    att->stream = stream;
    att->workspace = NULL;
    att->workspace_size = 0;
    cudnnAttCheck(cudnnCreate(&att->handle));
    cudnnAttCheck(cudnnSetStream(att->handle, stream));
    return att;
}

void cudnn_attention_free(CudnnAttention* att) {
    if (att == NULL) { return; }
    att->forward_graphs.clear();
    att->backward_graphs.clear();
    if (att->workspace != NULL) { cudaAttCheck(cudaFree(att->workspace)); }
    cudnnAttCheck(cudnnDestroy(att->handle));
    delete att;
}

size_t cudnn_attention_workspace_bytes(const CudnnAttention* att) {
    return att->workspace_size;
}

// ----------------------------------------------------------------------------
// graph building

static std::vector<int64_t> layout_dims(const CudnnAttLayout& l) { return std::vector<int64_t>(l.dim, l.dim + 4); }
static std::vector<int64_t> layout_strides(const CudnnAttLayout& l) { return std::vector<int64_t>(l.stride, l.stride + 4); }
// bf16 operands, fp32 statistics; stated on every tensor so the frontend checks the operands' 16-byte
// stride alignment while validating (and their pointers' alignment at every execute)
static fe::DataType_t layout_type(int which) { return which == CUDNN_ATT_STATS ? fe::DataType_t::FLOAT : fe::DataType_t::BFLOAT16; }

// sm_version 0: the frontend asks the current GPU; else the compute capability to validate for (no GPU
// needed). It must be set before the nodes are added: each node copies the graph's context.
static GraphPtr new_graph(int sm_version) {
    GraphPtr graph = std::make_shared<fe::graph::Graph>();
    graph->set_io_data_type(fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    if (sm_version > 0) { graph->set_sm_version(sm_version); }
    return graph;
}

// a graph input with one of the layouts of cudnn_att.h
static TensorPtr graph_input(const GraphPtr& graph, const char* name, int64_t uid, int which, int B, int T, int NH, int NKV, int HS) {
    CudnnAttLayout l = cudnn_att_layout(which, B, T, NH, NKV, HS);
    fe::graph::Tensor_attributes attrs;
    attrs.set_name(name).set_uid(uid).set_dim(layout_dims(l)).set_stride(layout_strides(l)).set_data_type(layout_type(which));
    return graph->tensor(attrs);
}

// marks a node output as a graph output with one of the layouts of cudnn_att.h
static void graph_output(const TensorPtr& t, const char* name, int64_t uid, int which, int B, int T, int NH, int NKV, int HS) {
    CudnnAttLayout l = cudnn_att_layout(which, B, T, NH, NKV, HS);
    t->set_output(true).set_name(name).set_uid(uid).set_dim(layout_dims(l)).set_stride(layout_strides(l)).set_data_type(layout_type(which));
}

// the build steps, each checked on its own so a failure names the step; then the workspace grows if needed
static void graph_finish(CudnnAttention* att, const GraphPtr& graph, uint64_t key) {
    feCheck(graph->validate(), "graph validation", key);
    feCheck(graph->build_operation_graph(att->handle), "building the operation graph", key);
    feCheck(graph->create_execution_plans({fe::HeurMode_t::A}), "querying the engine heuristics", key);
    feCheck(graph->check_support(att->handle), "finding a supported engine", key);
    feCheck(graph->build_plans(fe::BuildPlanPolicy_t::HEURISTICS_CHOICE), "building the execution plan", key);
    int64_t need = 0;
    feCheck(graph->get_workspace_size(need), "querying the workspace size", key);
    if (need > 0 && (size_t)need > att->workspace_size) {
        // kernels of graphs built earlier may still use the old buffer on the stream: let them finish
        cudaAttCheck(cudaStreamSynchronize(att->stream));
        if (att->workspace != NULL) { cudaAttCheck(cudaFree(att->workspace)); }
        cudaAttCheck(cudaMalloc(&att->workspace, (size_t)need));
        att->workspace_size = (size_t)need;
    }
}

static void shape_check(int B, int T, int NH, int NKV, int HS) {
    const char* why = cudnn_att_shape_error(B, T, NH, NKV, HS);
    if (why != NULL) { llmc_die("cuDNN attention: B=%d T=%d NH=%d NKV=%d HS=%d: %s", B, T, NH, NKV, HS, why); }
}

// the forward graph's description: q, k, v in -> out (+ stats when training)
static GraphPtr describe_forward(int B, int T, int NH, int NKV, int HS, int is_inference, int sm_version) {
    GraphPtr graph = new_graph(sm_version);
    TensorPtr q = graph_input(graph, "q", UID_Q, CUDNN_ATT_Q, B, T, NH, NKV, HS);
    TensorPtr k = graph_input(graph, "k", UID_K, CUDNN_ATT_K, B, T, NH, NKV, HS);
    TensorPtr v = graph_input(graph, "v", UID_V, CUDNN_ATT_V, B, T, NH, NKV, HS);
    fe::graph::SDPA_attributes opts;
    opts.set_name("attention_forward")
        .set_generate_stats(is_inference == 0)
        .set_causal_mask(true)
        .set_attn_scale(1.0f / sqrtf((float)HS));
    auto outputs = graph->sdpa(q, k, v, opts);  // {O, Stats}
    graph_output(outputs[0], "out", UID_O, CUDNN_ATT_O, B, T, NH, NKV, HS);
    if (!is_inference) { graph_output(outputs[1], "stats", UID_STATS, CUDNN_ATT_STATS, B, T, NH, NKV, HS); }
    return graph;
}

// the backward graph's description: q, k, v, out, dout, stats in -> dq, dk, dv
static GraphPtr describe_backward(int B, int T, int NH, int NKV, int HS, int sm_version) {
    GraphPtr graph = new_graph(sm_version);
    TensorPtr q = graph_input(graph, "q", UID_Q, CUDNN_ATT_Q, B, T, NH, NKV, HS);
    TensorPtr k = graph_input(graph, "k", UID_K, CUDNN_ATT_K, B, T, NH, NKV, HS);
    TensorPtr v = graph_input(graph, "v", UID_V, CUDNN_ATT_V, B, T, NH, NKV, HS);
    TensorPtr o = graph_input(graph, "out", UID_O, CUDNN_ATT_O, B, T, NH, NKV, HS);
    TensorPtr dout = graph_input(graph, "dout", UID_DO, CUDNN_ATT_O, B, T, NH, NKV, HS);
    TensorPtr stats = graph_input(graph, "stats", UID_STATS, CUDNN_ATT_STATS, B, T, NH, NKV, HS);
    fe::graph::SDPA_backward_attributes opts;
    // deterministic: llmc promises bit-identical runs and resumes; cuDNN then keeps dP = dO V^T in the
    // workspace, a transient (B, NH, T, T) bf16 buffer shared by every layer
    opts.set_name("attention_backward")
        .set_causal_mask(true)
        .set_attn_scale(1.0f / sqrtf((float)HS))
        .set_deterministic_algorithm(true);
    auto grads = graph->sdpa_backward(q, k, v, o, dout, stats, opts);  // {dQ, dK, dV}
    graph_output(grads[0], "dq", UID_DQ, CUDNN_ATT_Q, B, T, NH, NKV, HS);
    graph_output(grads[1], "dk", UID_DK, CUDNN_ATT_K, B, T, NH, NKV, HS);
    graph_output(grads[2], "dv", UID_DV, CUDNN_ATT_V, B, T, NH, NKV, HS);
    return graph;
}

static const fe::graph::Graph& forward_graph(CudnnAttention* att, int B, int T, int NH, int NKV, int HS, int is_inference) {
    uint64_t key = cudnn_att_key(B, T, NH, NKV, HS, is_inference);
    auto it = att->forward_graphs.find(key);
    if (it != att->forward_graphs.end()) { return *it->second; }
    shape_check(B, T, NH, NKV, HS);
    GraphPtr graph = describe_forward(B, T, NH, NKV, HS, is_inference, 0);
    graph_finish(att, graph, key);
    att->forward_graphs.emplace(key, graph);
    return *graph;
}

static const fe::graph::Graph& backward_graph(CudnnAttention* att, int B, int T, int NH, int NKV, int HS) {
    uint64_t key = cudnn_att_key(B, T, NH, NKV, HS, 0);
    auto it = att->backward_graphs.find(key);
    if (it != att->backward_graphs.end()) { return *it->second; }
    shape_check(B, T, NH, NKV, HS);
    GraphPtr graph = describe_backward(B, T, NH, NKV, HS, 0);
    graph_finish(att, graph, key);
    att->backward_graphs.emplace(key, graph);
    return *graph;
}

void cudnn_attention_prepare(CudnnAttention* att, int B, int T, int NH, int NKV, int HS) {
    forward_graph(att, B, T, NH, NKV, HS, 0);
    forward_graph(att, B, T, NH, NKV, HS, 1);
    backward_graph(att, B, T, NH, NKV, HS);
}

int cudnn_attention_check_graphs(int B, int T, int NH, int NKV, int HS, int sm_version, char* why, size_t why_size) {
    const char* names[3] = {"forward (training)", "forward (inference)", "backward"};
    for (int i = 0; i < 3; i++) {
        GraphPtr graph = i < 2 ? describe_forward(B, T, NH, NKV, HS, i, sm_version) : describe_backward(B, T, NH, NKV, HS, sm_version);
        fe::error_t err = graph->validate();
        if (err.is_bad()) {
            snprintf(why, why_size, "%s graph: %s", names[i], err.err_msg.c_str());
            return 0;
        }
    }
    if (why_size > 0) { why[0] = '\0'; }
    return 1;
}

// ----------------------------------------------------------------------------
// the calls

// pointer to a layout's first element inside a bf16 buffer
static void* at_layout(const __nv_bfloat16* base, int which, int B, int T, int NH, int NKV, int HS) {
    return (void*)(base + cudnn_att_layout(which, B, T, NH, NKV, HS).offset);
}

void cudnn_attention_forward(CudnnAttention* att, __nv_bfloat16* out, float* stats, const __nv_bfloat16* qkv,
                             int B, int T, int NH, int NKV, int HS, int is_inference) {
    const fe::graph::Graph& graph = forward_graph(att, B, T, NH, NKV, HS, is_inference);
    std::unordered_map<int64_t, void*> pack = {
        {UID_Q, at_layout(qkv, CUDNN_ATT_Q, B, T, NH, NKV, HS)},
        {UID_K, at_layout(qkv, CUDNN_ATT_K, B, T, NH, NKV, HS)},
        {UID_V, at_layout(qkv, CUDNN_ATT_V, B, T, NH, NKV, HS)},
        {UID_O, (void*)out},
    };
    if (!is_inference) { pack[UID_STATS] = (void*)stats; }
    feCheck(graph.execute(att->handle, pack, att->workspace), "running the forward graph",
            cudnn_att_key(B, T, NH, NKV, HS, is_inference));
}

void cudnn_attention_backward(CudnnAttention* att, __nv_bfloat16* dqkv, const __nv_bfloat16* dout,
                              const __nv_bfloat16* qkv, const __nv_bfloat16* out, const float* stats,
                              int B, int T, int NH, int NKV, int HS) {
    const fe::graph::Graph& graph = backward_graph(att, B, T, NH, NKV, HS);
    std::unordered_map<int64_t, void*> pack = {
        {UID_Q, at_layout(qkv, CUDNN_ATT_Q, B, T, NH, NKV, HS)},
        {UID_K, at_layout(qkv, CUDNN_ATT_K, B, T, NH, NKV, HS)},
        {UID_V, at_layout(qkv, CUDNN_ATT_V, B, T, NH, NKV, HS)},
        {UID_O, (void*)out},
        {UID_DO, (void*)dout},
        {UID_STATS, (void*)stats},
        {UID_DQ, at_layout(dqkv, CUDNN_ATT_Q, B, T, NH, NKV, HS)},
        {UID_DK, at_layout(dqkv, CUDNN_ATT_K, B, T, NH, NKV, HS)},
        {UID_DV, at_layout(dqkv, CUDNN_ATT_V, B, T, NH, NKV, HS)},
    };
    feCheck(graph.execute(att->handle, pack, att->workspace), "running the backward graph", cudnn_att_key(B, T, NH, NKV, HS, 0));
}
