/*
llmc/model_file.h: the model files of every family, opened, validated, read and written by one code path.

A model file is an int32 header[256] (header[0] the family's magic, header[1] the version: 3 = fp32
parameters, 5 = bf16, widened to fp32 on read; we write fp32), for some families a float32
header[256] after it, then the parameters in the family's tensor order.

A family describes its file as data, a ModelFileFormat: the magic, whether a float header follows,
the names its error lines use and its int header fields with their allowed ranges. Its reader
(llmc/checkpoint.h for GPT-2, llmc/llama3_config.h for Llama 3) then reads in four steps:
    model_file_open         the headers, checked against the real file size, magic, version and the
                            ranges of the fields; the open file stands at the first parameter
    (the family)            fills its config from the header and checks what only it knows
    model_file_check_size   the size its parameter count implies against the file's
    model_file_read_params  the parameters into fp32
and writes with model_file_write (atomically: temporary file, then rename). Every error is one line
naming the file.
*/
#ifndef LLMC_MODEL_FILE_H
#define LLMC_MODEL_FILE_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "utils.h"

#define MODEL_FILE_VERSION_FP32 3
#define MODEL_FILE_VERSION_BF16 5

// one int header field: its name in error lines, its index and the values it may take
typedef struct {
    const char* name;
    int index;
    int lo, hi;
} ModelHeaderField;

typedef struct {
    const char* what;            // the file in error lines: "model checkpoint", "Llama 3 model"
    const char* too_short;       // the error line of a file shorter than the headers (path, its bytes)
    int magic;
    int float_header;            // 1: a float32 header[256] follows the int32 one
    const ModelHeaderField* fields;
    int num_fields;
} ModelFileFormat;

typedef struct {
    int ints[256];
    float floats[256];           // all zero where the family has no float header
    int version;                 // MODEL_FILE_VERSION_FP32 or _BF16
    size_t file_size;
} ModelFileHeader;

static inline size_t model_file_header_bytes(const ModelFileFormat* fmt) {
    return 256 * sizeof(int) + (fmt->float_header ? 256 * sizeof(float) : 0);
}

// Opens path, reads and checks its headers into *h and returns the file at the first parameter.
static inline FILE* model_file_open(const char* path, const ModelFileFormat* fmt, ModelFileHeader* h) {
    FILE* f = fopenCheck(path, "rb");
    memset(h, 0, sizeof(*h));
    h->file_size = file_size_check(f, path);
    if (h->file_size < model_file_header_bytes(fmt)) { llmc_die(fmt->too_short, path, h->file_size); }
    read_header_check(f, path, h->ints, fmt->magic, MODEL_FILE_VERSION_FP32, MODEL_FILE_VERSION_BF16, fmt->what);
    if (h->ints[1] == 4) { llmc_die("%s: unsupported %s version 4 (expected 3 = fp32 or 5 = bf16)", path, fmt->what); }
    h->version = h->ints[1];
    if (fmt->float_header) { freadCheck(h->floats, sizeof(float), 256, f, path); }
    for (int i = 0; i < fmt->num_fields; i++) {
        const ModelHeaderField* field = &fmt->fields[i];
        int v = h->ints[field->index];
        if (v < field->lo || v > field->hi) {
            llmc_die("%s: bad %s header: %s = %d is outside [%d, %d]", path, fmt->what, field->name, v, field->lo, field->hi);
        }
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

// Writes the headers of h (ints[0] and [1] set here: the magic, fp32) and n fp32 parameters atomically.
static inline void model_file_write(const char* path, const ModelFileFormat* fmt, ModelFileHeader* h,
                                    const float* params, size_t n) {
    h->ints[0] = fmt->magic;
    h->ints[1] = MODEL_FILE_VERSION_FP32;
    AtomicFile af;
    atomic_file_open(&af, path);
    atomic_file_write(&af, h->ints, sizeof(int), 256);
    if (fmt->float_header) { atomic_file_write(&af, h->floats, sizeof(float), 256); }
    atomic_file_write(&af, params, sizeof(float), n);
    atomic_file_commit(&af);
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
