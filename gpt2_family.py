"""The old name of pyllmc.families.gpt2 (pyllmc/families/gpt2.py): `import gpt2_family` gives that very module."""

import sys

import pyllmc.families.gpt2

sys.modules[__name__] = pyllmc.families.gpt2
