"""The old name of pyllmc.families.llama3 (pyllmc/families/llama3.py): `import llama3_family` gives that very module."""

import sys

import pyllmc.families.llama3

sys.modules[__name__] = pyllmc.families.llama3
