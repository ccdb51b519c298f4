"""The old name of pyllmc.model_file (pyllmc/model_file.py): `import model_file` gives that very module."""

import sys

import pyllmc.model_file

sys.modules[__name__] = pyllmc.model_file
