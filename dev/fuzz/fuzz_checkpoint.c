/*
dev/fuzz/fuzz_checkpoint.c: libFuzzer harness for the model checkpoint reader of llmc/checkpoint.h
(fp32 version 3 and bf16 version 5), called the way gpt2_build_from_checkpoint calls it:
gpt2_model_open, allocate the parameters the header implies, model_file_read_params.
The input is the whole file. A file that loads must hold exactly the parameters its header says.
*/
#include "harness.h"
#include "../../llmc/gpt2.h"
#include "../../llmc/checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const char* path = fuzz_write_file(data, size);
    FUZZ_BEGIN
        GPT2Config cfg;
        int version = 0;
        FILE* f = gpt2_model_open(path, &cfg, &version);
        if (version != MODEL_FILE_VERSION_FP32 && version != MODEL_FILE_VERSION_BF16) { abort(); }
        if (cfg.vocab_size > cfg.padded_vocab_size || cfg.num_heads < 1 || cfg.channels % cfg.num_heads != 0) { abort(); }
        size_t n = gpt2_num_parameters(&cfg);
        size_t elem = version == MODEL_FILE_VERSION_FP32 ? 4 : 2;
        if (n == 0 || 1024 + n * elem != size) { abort(); }  // the header may only claim what the file holds
        float* params = (float*)mallocCheck(n * sizeof(float));
        model_file_read_params(f, path, version, params, n);
        fcloseCheck(f, path);
        volatile float last = params[n - 1];
        (void)last;
        free(params);
    FUZZ_END
    return 0;
}
