"""pyllmc's build; the package metadata is in pyproject.toml.

A plain install (`pip install -e .`, the line in requirements.txt) compiles nothing: the pure Python modules import
at once, and the bindings' names load the extension when first used. `make pyllmc` compiles the extension in place
(pyllmc/_build.py), where an editable install finds it; PYLLMC_EXTENSION=1 asks pip to compile it with cffi
(cffi_modules) as part of the install instead.
"""

import os

from setuptools import setup

WANT_EXTENSION = os.environ.get("PYLLMC_EXTENSION", "") not in ("", "0")

setup(**({"cffi_modules": ["pyllmc/_build.py:ffibuilder"]} if WANT_EXTENSION else {}))
