"""The old name of pyllmc.token_shards (pyllmc/token_shards.py): `import token_shards` gives that very module."""

import sys

import pyllmc.token_shards

sys.modules[__name__] = pyllmc.token_shards
