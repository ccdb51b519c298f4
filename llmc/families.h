/*
llmc/families.h: the model families, listed once. Every program and build that serves more than one family reads
this list: make (mk/families.mk: each family's programs, CUDA builds, CPU-target builds and reference files, from one
template), llmc/args.h (the programs named in its error lines), generate.c (the families it tells apart by their
model files' magic). A new family is its own files and one row here.

    LLMC_FAMILIES(X)   one row per family: X(name, DESCRIPTION, GPU, "refs", "refs_dir")
        name           the family's prefix, the one its files and programs are named by: llmc/<name>.h (its
                       description), <name>_generate (generate's hooks, below), train_<name>.py (its
                       reference), train_<name>.c / test_<name>.c (./train_<name>, ./test_<name>), train_<name>.cu /
                       test_<name>.cu (./train_<name>cu, ./test_<name>cu, train_<name>cu_cudnn, and the CPU execution
                       target's build/cuda_cpu/{train,test}_<name>cu_{fp32,bf16})
        DESCRIPTION    its ModelFamily (llmc/model_family.h), defined in llmc/<name>.h
        GPU            1 when it has the GPU trainer train_<name>.cu (make's CUDA_FAMILIES, the GPU trainers named in
                       llmc/args.h's error lines), 0 while it has the CPU programs alone
        "refs"         the command (run by make's $(PY)) that writes the reference files its test programs read,
                       "" for none of its own (the shared d2 and d12 references of the Makefile); make adds
                       --out_dir "refs_dir"
        "refs_dir"     where they go (git-ignored): make <name>-debug-states writes them

The rows are read by make with sed: keep each on one line, in this shape, with no '"' inside a string.
LLMC_WITH_FAMILY_INFERENCE, defined before including this file, also includes every family's description and CPU
inference, and defines each row's <name>_generate (llmc/cpu/generator.h) for generate.c: a pre-norm decoder's
(llmc/decoder.h) is DECODER_GENERATE of its description (llmc/cpu/decoder_inference.h), another family's comes
from its own llmc/cpu/<name>_inference.h.
*/
#ifndef LLMC_FAMILIES_H
#define LLMC_FAMILIES_H

#define LLMC_FAMILIES(X) \
    X(gpt2, GPT2_FAMILY, 1, "", "") \
    X(llama3, LLAMA3_FAMILY, 1, "dev/llama3_refs.py --muon", "build/llama3") \
    X(nanochat, NANOCHAT_FAMILY, 1, "dev/nanochat_refs.py", "build/nanochat") \
    X(qwen3, QWEN3_FAMILY, 1, "dev/qwen3_refs.py --muon", "build/qwen3")

#endif // LLMC_FAMILIES_H

#ifdef LLMC_WITH_FAMILY_INFERENCE
#ifndef LLMC_FAMILIES_INFERENCE_H
#define LLMC_FAMILIES_INFERENCE_H
// one line per row above: its description (llmc/<name>.h) and its generate hooks, <name>_generate
#include "cpu/decoder_inference.h"
#include "cpu/gpt2_inference.h"
#include "llama3.h"
#include "nanochat.h"
#include "qwen3.h"
static const GenerateFamily llama3_generate = DECODER_GENERATE(LLAMA3_FAMILY);
static const GenerateFamily nanochat_generate = DECODER_GENERATE(NANOCHAT_FAMILY);
static const GenerateFamily qwen3_generate = DECODER_GENERATE(QWEN3_FAMILY);
#endif // LLMC_FAMILIES_INFERENCE_H
#endif // LLMC_WITH_FAMILY_INFERENCE
