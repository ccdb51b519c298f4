/*
llmc/model_family.h: what a model family is to the programs around it, its data and its behaviour. Each family fills
one ModelFamily in its own header, by field name (llmc/gpt2.h: GPT2_FAMILY, llmc/llama3.h: LLAMA3_FAMILY, ...; the
registry llmc/families.h lists them), and every program reads the family from there: the trainers' core
(llmc/trainer.h: the shards, the tokenizer), the CPU and GPU trainers' mains (-e, -t, the model's line), the model
files (llmc/model_file.h), the test programs (the debug state, the reference's files) and generate (which family a
file is, by its magic). Nothing outside a family's header tests which family it is.

    ModelFamily               the description (below): data, and the behaviour every backend shares (the config of
                              a descriptor, the parameters from scratch, the config's line)
    model_family_config(family, load, from_file, config)   -e's rule, once for every program: a descriptor's config
                              (returns 1: from scratch), else a model file that exists (returns 0), else one error line
    model_family_describe(family, config, line, size)      the config's line ("L=12 NH=12 C=768 ...")
    model_family_by_magic(families, n, magic)   the family whose model files start with magic, or NULL

The tensor tables themselves stay X-macros in the family's header (one row per tensor): they declare the
family's structs of named pointers; the description carries what the table gives at run time (names, the 2-D
and per-layer flags, the dimensions of a config).
*/
#ifndef LLMC_MODEL_FAMILY_H
#define LLMC_MODEL_FAMILY_H

#include <stddef.h>
#include "utils.h"
#include "model_file.h"
#include "dataloader.h"
#include "debug_state.h"

struct DecoderConfig; // llmc/decoder.h

typedef struct {
    const char* name;                     // "gpt2", "llama3": the prefix of the family's functions and programs
    const ModelFileFormat* model_file;    // its model file: magic, versions, header fields, config size (llmc/model_file.h)
    ShardFormat shard_format;             // the token shards its trainers read (llmc/dataloader.h)
    const char* tokenizer_path;           // the tokenizer file that decodes its samples
    int tokenizer_pattern;                // how its tokenizer splits text before BPE (llmc/tokenizer.h's BPE_PATTERN_*:
                                          // generate's text prompts, llmc/bpe.h)
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
    // its behaviour, the same on every backend (config: the family's config struct, model_file->config_size bytes)
    // -e desc: 1 with config filled when desc is one of its descriptors (dN ...), 0 when it is not (a model file's
    // path), -1 when it looks like one but is not valid (*why says why); a descriptor that needs a file it cannot
    // read (a tokenizer) dies with that file's line
    int (*config_from_descriptor)(const char* desc, void* config, const char** why);
    // the parameters from scratch, bit for bit the reference's init at this seed: the model's floats, file order
    void (*init_params)(float* params, const void* config, unsigned int seed);
    // the config's line, as every program prints it after the model's path ("L=12 NH=12 C=768 maxT=1024 ...")
    void (*describe_config)(const void* config, char* line, size_t size);
    // a pre-norm decoder family (Llama 3, nanochat, Qwen3: llmc/decoder.h) fills the decoder's shapes and switches
    // from its config; NULL for the others (GPT-2)
    void (*decoder_config)(const void* config, struct DecoderConfig* decoder);
} ModelFamily;

// -e: a descriptor into config (returns 1: from scratch), else the model file load, which must exist (returns 0: the
// caller opens it with model_file_open(load, family->model_file, ...), which fills config). from_file: load is a
// model file whatever its name (a resumed checkpoint). Every other case is one error line.
static inline int model_family_config(const ModelFamily* family, const char* load, int from_file, void* config) {
    if (from_file) { return 0; }
    const char* why = "";
    int kind = family->config_from_descriptor(load, config, &why);
    if (kind < 0) { llmc_die("-e %s: bad model descriptor: %s", load, why); }
    if (kind == 0 && !file_exists(load)) { llmc_die(family->missing_model, load); }
    return kind;
}

// the config's line into line (size bytes)
static inline void model_family_describe(const ModelFamily* family, const void* config, char* line, size_t size) {
    family->describe_config(config, line, size);
}

// the family of families[0..n) whose model files have this magic, or NULL
static inline const ModelFamily* model_family_by_magic(const ModelFamily* const* families, int n, int magic) {
    for (int i = 0; i < n; i++) {
        if (families[i]->model_file->magic == magic) { return families[i]; }
    }
    return NULL;
}

#endif // LLMC_MODEL_FAMILY_H
