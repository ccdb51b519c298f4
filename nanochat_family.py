"""The old name of pyllmc.families.nanochat (pyllmc/families/nanochat.py): `import nanochat_family` gives that very module."""

import sys

import pyllmc.families.nanochat

sys.modules[__name__] = pyllmc.families.nanochat
