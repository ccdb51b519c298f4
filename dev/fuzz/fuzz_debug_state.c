/*
dev/fuzz/fuzz_debug_state.c: libFuzzer harness for the debug-state reader of llmc/debug_state.h
(debug_state_read, used by test_gpt2.c and test_gpt2.cu), checked against a tiny model: maxT 8,
V 5 (Vp 128), L 1, NH 2, C 8 -- the model dev/fuzz/make_corpus.py writes its debug-state seeds
for with train_gpt2.py's writer.
The input is the whole file. A state that loads must have its ids inside the vocabulary (targets may be -1
in a masked state, header[18] = 1, which has at least one target inside it) and, with the noise section, only
finite non-negative loss noises; its optimizer fields are AdamW (0) or Muon (1) with settings in range.
*/
#include "harness.h"
#include "../../llmc/gpt2.h"

static DebugState dstate;

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const char* path = fuzz_write_file(data, size);
    GPT2Config cfg;
    cfg.max_seq_len = 8;
    cfg.vocab_size = 5;
    cfg.padded_vocab_size = 128;
    cfg.num_layers = 1;
    cfg.num_heads = 2;
    cfg.channels = 8;
    size_t num_parameters = gpt2_num_parameters(&cfg);
    FUZZ_BEGIN
        gpt2_debug_state_read(&dstate, path, &cfg, num_parameters);
        if (dstate.B < 1 || dstate.T < 1 || dstate.T > cfg.max_seq_len || dstate.nsteps < 0) { abort(); }
        if (dstate.masked != 0 && dstate.masked != 1) { abort(); }
        int y_min = dstate.masked ? -1 : 0, supervised = 0;
        for (int i = 0; i < dstate.B * dstate.T; i++) {
            if (dstate.x[i] < 0 || dstate.x[i] >= cfg.vocab_size || dstate.y[i] < y_min || dstate.y[i] >= cfg.vocab_size) { abort(); }
            supervised += dstate.y[i] >= 0;
        }
        if (supervised == 0) { abort(); }
        for (int i = 0; i < dstate.nsteps; i++) {
            if (!isfinite(dstate.loss_noise[i]) || dstate.loss_noise[i] < 0.0f) { abort(); }
            if (!dstate.has_loss_noise && dstate.loss_noise[i] != 0.0f) { abort(); }
        }
        if (dstate.optimizer != 0 && dstate.optimizer != 1) { abort(); }
        if (dstate.optimizer == 1 && (!(dstate.muon_momentum >= 0.0f && dstate.muon_momentum <= 1.0f) ||
                                      dstate.muon_ns_steps < 1 || dstate.muon_ns_steps > 99 ||
                                      (dstate.muon_adjust_lr != 0 && dstate.muon_adjust_lr != 1))) { abort(); }
        volatile float last = dstate.grads[num_parameters - 1];
        (void)last;
        debug_state_free(&dstate);
    FUZZ_END
    return 0;
}
