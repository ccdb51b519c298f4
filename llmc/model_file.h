/*
llmc/model_file.h: the model files of every family, opened, validated, read and written by one code path.

A model file is an int32 header[256] (header[0] the family's magic, header[1] the version: 3 = fp32
parameters, 5 = bf16, widened to fp32 on read; we write fp32), for some families a float32
header[256] after it, then the parameters in the family's tensor order.

A family describes its file as data, a ModelFileFormat: the magic, whether a float header follows,
the names its error lines use and its header fields: where each member of its config struct stands
(an int or a float header slot), the range an int field may take, and what is written only for llm.c
(a float's truncated copy in an int slot, a constant), and what only it knows: its own checks of the
config and its parameter count. Its reader (llmc/gpt2.h for GPT-2, llmc/llama3.h for Llama 3)
then reads in two steps:
    model_file_open         the headers, checked against the real file size, magic, version and the
                            ranges of the fields, the config filled from them, the family's checks, and
                            the size its parameter count implies against the file's; the open file
                            stands at the first parameter
    model_file_read_params  the parameters into fp32
and writes the config and the parameters with model_file_write (atomically: temporary file, then
rename). Every error is one line naming the file.
*/
#ifndef LLMC_MODEL_FILE_H
#define LLMC_MODEL_FILE_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "utils.h"
#include "rand.h"

#define MODEL_FILE_VERSION_FP32 3
#define MODEL_FILE_VERSION_BF16 5

enum {
    MODEL_FIELD_INT,             // int header[index] <-> an int member of the config
    MODEL_FIELD_FLOAT,           // float header[index] <-> a float member
    MODEL_FIELD_INT_OF_FLOAT,    // int header[index] = (int) a float member: written for llm.c, not read
    MODEL_FIELD_CONST,           // int header[index] = lo: written; read and checked only when named
};

// one header field: its name in error lines (NULL: not checked), what it holds, its index, the values it
// may take when named (an int field, or a constant: lo = hi) and its config member's offset
typedef struct {
    const char* name;
    int kind;
    int index;
    int lo, hi;
    size_t offset;
} ModelHeaderField;

typedef struct {
    const char* what;            // the file in error lines: "model checkpoint", "Llama 3 model"
    const char* too_short;       // the error line of a file shorter than the headers (path, its bytes)
    int magic;
    int float_header;            // 1: a float32 header[256] follows the int32 one
    const ModelHeaderField* fields;
    int num_fields;
    size_t config_size;          // the family's config struct
    // what only the family knows, called once the fields are read and in range: its own checks of the config
    // (one llmc_die line naming path), then its parameter count, with the shape the size error line names
    // ("L=2 C=128 ...") written into shape
    void (*check)(const char* path, const void* config);
    size_t (*num_parameters)(const void* config, char* shape, size_t shape_size);
} ModelFileFormat;

// a family's ModelFileFormat, its fields an array of ModelHeaderField
#define MODEL_FILE_FORMAT(what, too_short, magic, float_header, fields, Config, check, num_parameters) \
    {what, too_short, magic, float_header, fields, (int)(sizeof(fields) / sizeof((fields)[0])), sizeof(Config), \
     check, num_parameters}

// A header field of a member of Config: an int one, with the range it may take (checked when named), and a float one
// (kind MODEL_FIELD_FLOAT, or MODEL_FIELD_INT_OF_FLOAT: llm.c's truncated copy in an int slot)
#define MODEL_INT_FIELD(Config, name, index, lo, hi, member) {name, MODEL_FIELD_INT, index, lo, hi, offsetof(Config, member)}
#define MODEL_FLOAT_FIELD(Config, kind, index, member) {NULL, kind, index, 0, 0, offsetof(Config, member)}

// int header[2..7] as the pre-norm decoders' files (Llama 3, nanochat, Qwen3) hold them: block size, V, L, NH, NKV, C
#define MODEL_DECODER_SHAPE_FIELDS(Config) \
    MODEL_INT_FIELD(Config, "block size (header[2])", 2, 1, 1 << 20, max_seq_len), \
    MODEL_INT_FIELD(Config, "vocab size V (header[3])", 3, 1, 1 << 24, vocab_size), \
    MODEL_INT_FIELD(Config, "layers L (header[4])", 4, 1, 4096, num_layers), \
    MODEL_INT_FIELD(Config, "heads NH (header[5])", 5, 1, 1 << 16, num_heads), \
    MODEL_INT_FIELD(Config, "kv heads NKV (header[6])", 6, 1, 1 << 16, num_kv_heads), \
    MODEL_INT_FIELD(Config, "channels C (header[7])", 7, 1, 1 << 17, channels)

typedef struct {
    int ints[256];
    float floats[256];           // all zero where the family has no float header
    int version;                 // MODEL_FILE_VERSION_FP32 or _BF16
    size_t file_size;
} ModelFileHeader;

static inline size_t model_file_header_bytes(const ModelFileFormat* fmt) {
    return 256 * sizeof(int) + (fmt->float_header ? 256 * sizeof(float) : 0);
}

// Opens path, reads and checks its headers into *h, fills the config (zeroed first) from them and returns
// the file at the first parameter.
static inline FILE* model_file_read_header(const char* path, const ModelFileFormat* fmt, ModelFileHeader* h, void* config) {
    FILE* f = fopenCheck(path, "rb");
    memset(h, 0, sizeof(*h));
    h->file_size = file_size_check(f, path);
    if (h->file_size < model_file_header_bytes(fmt)) { llmc_die(fmt->too_short, path, h->file_size); }
    read_header_check(f, path, h->ints, fmt->magic, MODEL_FILE_VERSION_FP32, MODEL_FILE_VERSION_BF16, fmt->what);
    if (h->ints[1] == 4) { llmc_die("%s: unsupported %s version 4 (expected 3 = fp32 or 5 = bf16)", path, fmt->what); }
    h->version = h->ints[1];
    if (fmt->float_header) { freadCheck(h->floats, sizeof(float), 256, f, path); }
    memset(config, 0, fmt->config_size);
    for (int i = 0; i < fmt->num_fields; i++) {
        const ModelHeaderField* field = &fmt->fields[i];
        char* member = (char*)config + field->offset;
        int v = h->ints[field->index];
        if (field->name != NULL && field->kind != MODEL_FIELD_FLOAT && (v < field->lo || v > field->hi)) {
            llmc_die("%s: bad %s header: %s = %d is outside [%d, %d]", path, fmt->what, field->name, v, field->lo, field->hi);
        }
        if (field->kind == MODEL_FIELD_INT) { memcpy(member, &v, sizeof(int)); }
        if (field->kind == MODEL_FIELD_FLOAT) { memcpy(member, &h->floats[field->index], sizeof(float)); }
    }
    return f;
}

// The file must hold the headers and num_parameters parameters; `shape` (e.g. "L=2 C=128") names what
// the header says in the error line.
static inline void model_file_check_size(const char* path, const ModelFileFormat* fmt, const ModelFileHeader* h,
                                         size_t num_parameters, const char* shape) {
    size_t elem_bytes = h->version == MODEL_FILE_VERSION_FP32 ? 4 : 2;
    size_t expected = model_file_header_bytes(fmt) + num_parameters * elem_bytes;
    if (h->file_size != expected) {
        llmc_die("%s: %s size mismatch: the header (%s, %s) needs %zu bytes, the file has %zu%s", path, fmt->what, shape,
                 elem_bytes == 4 ? "fp32" : "bf16", expected, h->file_size, h->file_size < expected ? " (truncated?)" : "");
    }
}

// Opens path, reads and checks its headers, fills the config (zeroed first) from them, runs the family's checks
// and checks the file's size; returns the file at the first parameter, *version 3 (fp32) or 5 (bf16).
static inline FILE* model_file_open(const char* path, const ModelFileFormat* fmt, void* config, int* version) {
    ModelFileHeader h;
    FILE* f = model_file_read_header(path, fmt, &h, config);
    *version = h.version;
    fmt->check(path, config);
    char shape[160];
    size_t num_parameters = fmt->num_parameters(config, shape, sizeof(shape));
    model_file_check_size(path, fmt, &h, num_parameters, shape);
    return f;
}

// the n parameters after the headers into params (fp32); bf16 is the upper half of an fp32
static inline void model_file_read_params(FILE* f, const char* path, int version, float* params, size_t n) {
    if (version == MODEL_FILE_VERSION_FP32) {
        freadCheck(params, sizeof(float), n, f, path);
        return;
    }
    const size_t chunk = 1 << 20;
    uint16_t* buf = (uint16_t*)mallocCheck(chunk * sizeof(uint16_t));
    for (size_t done = 0; done < n; done += chunk) {
        size_t k = n - done < chunk ? n - done : chunk;
        freadCheck(buf, sizeof(uint16_t), k, f, path);
        for (size_t i = 0; i < k; i++) {
            uint32_t bits = (uint32_t)buf[i] << 16;
            memcpy(&params[done + i], &bits, sizeof(float));
        }
    }
    free(buf);
}

// Writes the headers (the magic, fp32, the config's fields; the rest zero) and n fp32 parameters atomically.
static inline void model_file_write(const char* path, const ModelFileFormat* fmt, const void* config, const float* params,
                                    size_t n) {
    ModelFileHeader h;
    memset(&h, 0, sizeof(h));
    h.ints[0] = fmt->magic;
    h.ints[1] = MODEL_FILE_VERSION_FP32;
    for (int i = 0; i < fmt->num_fields; i++) {
        const ModelHeaderField* field = &fmt->fields[i];
        const char* member = (const char*)config + field->offset;
        if (field->kind == MODEL_FIELD_INT) {
            memcpy(&h.ints[field->index], member, sizeof(int));
        } else if (field->kind == MODEL_FIELD_FLOAT) {
            memcpy(&h.floats[field->index], member, sizeof(float));
        } else if (field->kind == MODEL_FIELD_INT_OF_FLOAT) {
            float x;
            memcpy(&x, member, sizeof(float));
            h.ints[field->index] = (int)x;
        } else {
            h.ints[field->index] = field->lo;
        }
    }
    AtomicFile af;
    atomic_file_open(&af, path);
    atomic_file_write(&af, h.ints, sizeof(int), 256);
    if (fmt->float_header) { atomic_file_write(&af, h.floats, sizeof(float), 256); }
    atomic_file_write(&af, params, sizeof(float), n);
    atomic_file_commit(&af);
}

// ----------------------------------------------------------------------------
// the tensor table: the parameters in file order, one row per tensor, X(D, name, per_layer, rows, cols,
// is_matrix). A tensor is one (rows, cols) slice, or with per_layer L slices stacked (layer l's starts at
// l * rows * cols); vectors have cols = 1; is_matrix marks the 2-D weights. Every family's table
// (llmc/gpt2.h, llmc/llama3.h) is expanded with these; D is what the expansion passes:
//   TENSOR_INDEX     with D a prefix: the enum entry D##name
//   TENSOR_NAME, TENSOR_IS_MATRIX, TENSOR_PER_LAYER   array initialisers
//   TENSOR_DIMS      {slices, rows, cols}, written in the family's dimension names and L
//   TENSOR_FIELD     with D an element type: the struct member D* name
#define TENSOR_INDEX(D, name, per_layer, rows, cols, is_matrix) D##name,
#define TENSOR_NAME(D, name, per_layer, rows, cols, is_matrix) #name,
#define TENSOR_IS_MATRIX(D, name, per_layer, rows, cols, is_matrix) is_matrix,
#define TENSOR_PER_LAYER(D, name, per_layer, rows, cols, is_matrix) per_layer,
#define TENSOR_DIMS(D, name, per_layer, rows, cols, is_matrix) {per_layer ? L : 1, rows, cols},
#define TENSOR_FIELD(D, name, per_layer, rows, cols, is_matrix) D* name;

// A family's tensor table at a config: (slices, rows, cols) of each tensor into dims, file order (slices is L for the
// per-layer ones; llmc/gpt2.h's gpt2_parameter_dims)
typedef void (*TensorDimsFn)(size_t (*dims)[3], const void* config);
#define TENSOR_TABLE_MAX 64

// the elements of each of the n tensors into sizes (when not NULL); returns their sum, the parameter count
static inline size_t tensor_table_sizes(TensorDimsFn table, const void* config, int n, size_t* sizes) {
    size_t dims[TENSOR_TABLE_MAX][3], total = 0;
    table(dims, config);
    for (int k = 0; k < n; k++) {
        size_t size = dims[k][0] * dims[k][1] * dims[k][2];
        if (sizes != NULL) { sizes[k] = size; }
        total += size;
    }
    return total;
}

// Points the n tensor pointers of a struct of named pointers (one Elem* per tensor in table order and nothing else:
// a family's Params) into one flat buffer of elements of elem_bytes, back to back. The struct is written a pointer at
// a time through memcpy, so any element type serves (float on the CPU, floatX on the GPU).
static inline void tensor_table_point(TensorDimsFn table, const void* config, int n, void* pointers, void* memory,
                                      size_t elem_bytes) {
    size_t dims[TENSOR_TABLE_MAX][3];
    table(dims, config);
    char* at = (char*)memory;
    for (int k = 0; k < n; k++) {
        memcpy((char*)pointers + (size_t)k * sizeof(void*), &at, sizeof(void*));
        at += dims[k][0] * dims[k][1] * dims[k][2] * elem_bytes;
    }
}

// Layer l's view of the per-layer tensors first .. first+count-1 of a struct of named pointers (params): into layer
// (a struct of count pointers of the same element type), each pointer moved to its tensor's layer-l slice
static inline void tensor_table_layer(TensorDimsFn table, const void* config, int first, int count, void* layer,
                                      const void* params, size_t elem_bytes, int l) {
    size_t dims[TENSOR_TABLE_MAX][3];
    table(dims, config);
    for (int k = 0; k < count; k++) {
        char* at;
        memcpy(&at, (const char*)params + (size_t)(first + k) * sizeof(void*), sizeof(void*));
        at += (size_t)l * dims[first + k][1] * dims[first + k][2] * elem_bytes;
        memcpy((char*)layer + (size_t)k * sizeof(void*), &at, sizeof(void*));
    }
}

// The init from scratch of the references that follow GPT-2's (train_llama3.py, train_qwen3.py), over a family's n
// tensors at a config (sizes from table), bit for bit at this seed (llmc/rand.h reproduces torch's generator): one
// normal draw per 2-D tensor (is_matrix) in file order, over the whole tensor stacked across layers, std 0.02, the
// residual projections (tensors residual_a and residual_b) 0.02/sqrt(2L); every other tensor (the norms' weights) 1
static inline void tensor_table_init_normal(float* params, TensorDimsFn table, const void* config, int n,
                                            const int* is_matrix, int residual_a, int residual_b, int L,
                                            unsigned int seed) {
    size_t sizes[TENSOR_TABLE_MAX];
    tensor_table_sizes(table, config, n, sizes);
    mt19937_state rng;
    manual_seed(&rng, seed);
    double std = 0.02, proj_std = 0.02 / sqrt(2.0 * L);
    float* t = params;
    for (int k = 0; k < n; k++) {
        if (is_matrix[k] && sizes[k] > 0) {
            normal_d(t, sizes[k], 0.0, k == residual_a || k == residual_b ? proj_std : std, &rng);
        } else if (!is_matrix[k]) {
            for (size_t i = 0; i < sizes[k]; i++) { t[i] = 1.0f; }
        }
        t += sizes[k];
    }
}

// What every family declares from its tensor table, written once. TENSOR_TABLE_INDEX(TABLE, PREFIX, first, last):
// the enum PREFIX_PARAM_<name> (file order) and its count PREFIX_NUM_PARAMETER_TENSORS, the per-layer tensors first ..
// last as PREFIX_NUM_LAYER_TENSORS, and the arrays PREFIX_PARAMETER_NAMES, PREFIX_PARAMETER_IS_MATRIX and
// PREFIX_PARAMETER_PER_LAYER (the description's). Then, once the family's prefix_parameter_dims is written in its
// dimension names, TENSOR_TABLE_VIEWS(TABLE, LAYER_TABLE, prefix, PREFIX, first, Config, Params, LayerParams): the
// structs of named fp32 pointers (all tensors, and one layer's), prefix_parameter_sizes(sizes, cfg) (each tensor's
// elements into sizes when not NULL; returns the parameter count), prefix_num_parameters(cfg),
// prefix_point_parameters(p, memory, cfg) (p's tensors into one flat buffer, file order) and
// prefix_layer_params(p, cfg, l) (layer l's view of p, weights or gradients alike).
#define TENSOR_TABLE_INDEX(TABLE, PREFIX, first, last) \
    enum { TABLE(TENSOR_INDEX, PREFIX##_PARAM_) PREFIX##_NUM_PARAMETER_TENSORS }; \
    enum { PREFIX##_NUM_LAYER_TENSORS = PREFIX##_PARAM_##last - PREFIX##_PARAM_##first + 1 }; \
    static const char* const PREFIX##_PARAMETER_NAMES[PREFIX##_NUM_PARAMETER_TENSORS] = {TABLE(TENSOR_NAME, _)}; \
    static const int PREFIX##_PARAMETER_IS_MATRIX[PREFIX##_NUM_PARAMETER_TENSORS] = {TABLE(TENSOR_IS_MATRIX, _)}; \
    static const int PREFIX##_PARAMETER_PER_LAYER[PREFIX##_NUM_PARAMETER_TENSORS] = {TABLE(TENSOR_PER_LAYER, _)};

#define TENSOR_TABLE_VIEWS(TABLE, LAYER_TABLE, prefix, PREFIX, first, Config, Params, LayerParams) \
    typedef struct { TABLE(TENSOR_FIELD, float) } Params; \
    typedef struct { LAYER_TABLE(TENSOR_FIELD, float) } LayerParams; \
    static inline size_t prefix##_parameter_sizes(size_t* sizes, const Config* cfg) { \
        return tensor_table_sizes(prefix##_parameter_dims, cfg, PREFIX##_NUM_PARAMETER_TENSORS, sizes); \
    } \
    static inline size_t prefix##_num_parameters(const Config* cfg) { return prefix##_parameter_sizes(NULL, cfg); } \
    static inline void prefix##_point_parameters(Params* p, float* memory, const Config* cfg) { \
        tensor_table_point(prefix##_parameter_dims, cfg, PREFIX##_NUM_PARAMETER_TENSORS, p, memory, sizeof(float)); \
    } \
    static inline LayerParams prefix##_layer_params(const Params* p, const Config* cfg, int l) { \
        LayerParams w; \
        tensor_table_layer(prefix##_parameter_dims, cfg, PREFIX##_PARAM_##first, PREFIX##_NUM_LAYER_TENSORS, &w, p, \
                           sizeof(float), l); \
        return w; \
    }

// the magic of a model file (GPT-2 20240326, Llama 3 20240803), or -1 if it has none
static inline int llmc_model_file_magic(const char* path) {
    FILE* f = fopen(path, "rb");
    if (f == NULL) { return -1; }
    int magic = -1;
    if (fread(&magic, sizeof(int), 1, f) != 1) { magic = -1; }
    fclose(f);
    return magic;
}

#endif // LLMC_MODEL_FILE_H
