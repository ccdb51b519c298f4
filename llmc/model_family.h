/*
llmc/model_family.h: what a model family is to the programs around it, as data. Each family fills one
ModelFamily in its own header (llmc/gpt2.h: GPT2_FAMILY, llmc/llama3.h: LLAMA3_FAMILY), and every program
reads the family from there: the trainers' core (llmc/trainer.h: the shards, the tokenizer), the CPU and GPU
trainers' mains (-e, -t), the model files (llmc/model_file.h), the test programs (the debug state) and generate
(which family a file is, by its magic). Nothing outside a family's header tests which family it is.

    ModelFamily               the description (below)
    model_family_by_magic(families, n, magic)   the family whose model files start with magic, or NULL

The tensor tables themselves stay X-macros in the family's header (one row per tensor): they declare the
family's structs of named pointers; the description carries what the table gives at run time (names, the 2-D
and per-layer flags, the dimensions of a config).
*/
#ifndef LLMC_MODEL_FAMILY_H
#define LLMC_MODEL_FAMILY_H

#include <stddef.h>
#include "model_file.h"
#include "dataloader.h"
#include "debug_state.h"

typedef struct {
    const char* name;                     // "gpt2", "llama3": the prefix of the family's functions
    const ModelFileFormat* model_file;    // its model file: magic, versions, header fields (llmc/model_file.h)
    ShardFormat shard_format;             // the token shards its trainers read (llmc/dataloader.h)
    const char* tokenizer_path;           // the tokenizer file that decodes its samples
    const char* load_default;             // -e: the default, and its help line in --help
    const char* load_help;
    const char* missing_model;            // the error line when -e names no file and no descriptor (%s: the path)
    const char* max_T_name;               // its longest sequence, in the error line of -t: "max sequence length"
    const DebugStateFormat* debug_state;  // the reference's debug state of this family (test programs)
    const char* reference;                // the reference script: "train_gpt2.py"
    const char* reference_model;          // the model file and debug state it writes that the test programs read
    const char* reference_state;          // by default: "gpt2_124M.bin", "gpt2_124M_debug_state.bin"
    // the parameter tensors, file order (the family's X-macro table, as arrays)
    int num_tensors;
    const char* const* tensor_names;
    const int* tensor_is_matrix;          // the 2-D weights: AdamW decays them, Muon trains the per-layer ones
    const int* tensor_per_layer;          // L slices, one per layer
    TensorDimsFn tensor_dims;             // (slices, rows, cols) of each, for a config (llmc/model_file.h)
    int first_layer_tensor;               // one layer's tensors: num_layer_tensors rows from this one, back to back
    int num_layer_tensors;
} ModelFamily;

// the family of families[0..n) whose model files have this magic, or NULL
static inline const ModelFamily* model_family_by_magic(const ModelFamily* const* families, int n, int magic) {
    for (int i = 0; i < n; i++) {
        if (families[i]->model_file->magic == magic) { return families[i]; }
    }
    return NULL;
}

#endif // LLMC_MODEL_FAMILY_H
