"""The PyTorch references' framework: what train_gpt2.py, train_llama3.py, train_nanochat.py and train_qwen3.py
share, so that each of them holds only its family's model, its Hugging Face import and its writers.

    common            UserError (one `error:` line), config_checker, is_depth_name, print0, huggingface_reachable
    causal_lm         causal_attention, CausalLM (the head's logits and loss, sampling)
    decoder           RMSNorm, RoPE, grouped-query attention (QK-norm optional), SwiGLU, the pre-norm block and
                      StackedDecoder (tensor table, init, forward): Llama 3's and Qwen3's models
    optimizers        AdamW, Muon on the blocks' matrices (MuonNS: the debug state's precision), ZeRO-1
    file_tensors      a model's tensors in its model file's order and back; ModelFiles (a reference's model file,
                      debug state and --model names), hf_tensor_taker
    tokenizer_files   GPT-2's tiktoken encoding and its tokenizer file; the BPE families' tokenizer file
    debug_state       the debug state: one batch's tensors, the reference steps, their float32 noise
    data_loader       token shards split across ranks as the C loader splits them; chat shards' targets (-1 where
                      the loss mask supervises nothing)
    flags             the trainers' command line (trainer_parser), without torch: a script parses its flags
                      before it imports torch
    cli               the settings the flags give the optimizers and the debug state; run_main
    training          train_loop: DDP, ZeRO-1, accumulation, clipping, schedule, validation, samples, main.log;
                      on chat shards the step's loss over its supervised positions (N_step)

Torch is imported by these modules (flags aside), not by `import pyllmc`.
"""
