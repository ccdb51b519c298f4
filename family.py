"""The old name of pyllmc.family (pyllmc/family.py): `import family` gives that very module."""

import sys

import pyllmc.family

sys.modules[__name__] = pyllmc.family
