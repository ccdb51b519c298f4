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
    model_descriptor_depth(desc)  N of "dN" (1..64), the from-scratch descriptor of the families after GPT-2, else 0
    MODEL_FAMILY_TENSOR_TABLE, MODEL_FAMILY_BEHAVIOUR, MODEL_FAMILY_D2_REFERENCE   a description's fields that follow
                              from its tensor table, its functions' names and (Llama 3, nanochat, Qwen3) its name
    GPT2_CHAT_TOKENIZER_PATH  the chat tokenizer file of the GPT-2 vocabulary's families (generate --chat's -t)

The tensor tables themselves stay X-macros in the family's header (one row per tensor): they declare the
family's structs of named pointers; the description carries what the table gives at run time (names, the 2-D
and per-layer flags, the dimensions of a config).
*/
#ifndef LLMC_MODEL_FAMILY_H
#define LLMC_MODEL_FAMILY_H

#include <stddef.h>
#include <string.h>
#include "utils.h"
#include "model_file.h"
#include "dataloader.h"
#include "debug_state.h"

struct DecoderConfig; // llmc/decoder.h

// GPT-2's tokenizer file with nanochat's four chat tokens after its 50257 (train_gpt2.py writes it beside
// gpt2_tokenizer.bin): generate --chat's default -t for the families of GPT-2's vocabulary (GPT-2, nanochat's GPT)
#define GPT2_CHAT_TOKENIZER_PATH "gpt2_chat_tokenizer.bin"

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
    // its chat format (llmc/chat.h: "nanochat", "llama3", "chatml"; pyllmc's Family.chat_format) and the tokenizer
    // file generate --chat reads by default (NULL: tokenizer_path; the GPT-2 vocabulary's families:
    // GPT2_CHAT_TOKENIZER_PATH, GPT-2's tokens and the four chat tokens after them)
    const char* chat_format;
    const char* chat_tokenizer_path;
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
    // Muon orthogonalises the fused q, k, v projection (qkvw) as three matrices, its q, k and v rows (nanochat's
    // split), not as one; a decoder family's switch (llmc/decoder.h decoder_muon_row_blocks), 0 for the others
    int muon_splits_qkv;
    // chat shards of a vocabulary with chat tokens past the model's V (GPT-2's: nanochat's four, ids 50257..50260,
    // inside Vp): grows the config's V to hold them and initialises their new rows in params (the model's floats,
    // file order), writing into line what it did; returns the new V, or 0 when the model needs no growth (its V
    // holds them already, or another vocabulary). NULL: the family's models never grow (their V is what it is).
    int (*grow_vocab_for_chat)(void* config, float* params, char* line, size_t size);
} ModelFamily;

// The fields of a family's description that its tensor table gives (TENSOR_TABLE_INDEX's arrays and count, its
// prefix_parameter_dims, one layer's tensors from PREFIX_PARAM_first), and its behaviour by its functions' names:
// prefix_family_config_from_descriptor, prefix_family_init_params, prefix_describe_config
#define MODEL_FAMILY_TENSOR_TABLE(PREFIX, prefix, first) \
    .num_tensors = PREFIX##_NUM_PARAMETER_TENSORS, .tensor_names = PREFIX##_PARAMETER_NAMES, \
    .tensor_is_matrix = PREFIX##_PARAMETER_IS_MATRIX, .tensor_per_layer = PREFIX##_PARAMETER_PER_LAYER, \
    .tensor_dims = prefix##_parameter_dims, .first_layer_tensor = PREFIX##_PARAM_##first, \
    .num_layer_tensors = PREFIX##_NUM_LAYER_TENSORS
// The files and programs' defaults of a family whose reference writes <stem>_d2.bin from -e d2 (Llama 3, nanochat,
// Qwen3), the fields in their declared order (C++ builds include the descriptions too): its name (stem), its
// PREFIX_MODEL_FILE, its token shards and PREFIX_TOKENIZER_PATH with its split pattern, -e's default d2 and its help
// line, the missing model's line (what: "Llama 3"), "block size" in -t's error line, its PREFIX_DEBUG_STATE, and the
// reference train_<stem>.py with the model file and debug state it writes at d2
#define MODEL_FAMILY_D2_REFERENCE(PREFIX, stem, what, shards, pattern, help) \
    .name = stem, .model_file = &PREFIX##_MODEL_FILE, .shard_format = shards, \
    .tokenizer_path = PREFIX##_TOKENIZER_PATH, .tokenizer_pattern = pattern, .load_default = "d2", .load_help = help, \
    .missing_model = "%s: no such " what " model file (flag -e; python train_" stem ".py writes one, or use -e d2 to init " \
                     "from scratch)", \
    .max_T_name = "block size", .debug_state = &PREFIX##_DEBUG_STATE, .reference = "train_" stem ".py", \
    .reference_model = stem "_d2.bin", .reference_state = stem "_d2_debug_state.bin"
#define MODEL_FAMILY_BEHAVIOUR(prefix) \
    .config_from_descriptor = prefix##_family_config_from_descriptor, .init_params = prefix##_family_init_params, \
    .describe_config = prefix##_describe_config

// "dN" with N in 1..64, the from-scratch descriptor of the families after GPT-2: N, or 0 when desc is not one (a model
// file's path)
static inline int model_descriptor_depth(const char* desc) {
    if (desc[0] != 'd' || desc[1] == '\0' || strlen(desc) > 3) { return 0; }
    int N = 0;
    for (const char* s = desc + 1; *s != '\0'; s++) {
        if (*s < '0' || *s > '9') { return 0; }
        N = N * 10 + (*s - '0');
    }
    return N >= 1 && N <= 64 ? N : 0;
}

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
