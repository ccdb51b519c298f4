"""The model families' descriptions, one module each (data only; pyllmc/family.py says what each field holds):
pyllmc.families.gpt2 (GPT2), pyllmc.families.llama3 (LLAMA3), pyllmc.families.nanochat (NANOCHAT),
pyllmc.families.qwen3 (QWEN3; its model file too: Qwen3Config, qwen3_header_bytes, read_qwen3)."""
