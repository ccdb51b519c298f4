"""The old name of pyllmc.llama3_tokenizer (pyllmc/llama3_tokenizer.py): `import llama3_tokenizer` gives that very module."""

import sys

import pyllmc.llama3_tokenizer

sys.modules[__name__] = pyllmc.llama3_tokenizer
