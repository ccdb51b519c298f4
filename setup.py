"""Builds pyllmc's cffi extension (pyllmc/_build.py); the package metadata is in pyproject.toml.

With PYLLMC_NO_EXTENSION set (what `make setup` does) nothing is compiled: the editable install makes the
Python modules importable, and `make pyllmc` compiles the extension in place, where that install finds it.
"""

import os

from setuptools import setup

setup(cffi_modules=[] if os.environ.get("PYLLMC_NO_EXTENSION") else ["pyllmc/_build.py:ffibuilder"])
