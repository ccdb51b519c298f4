"""Builds pyllmc's cffi extension (pyllmc/_build.py); the package metadata is in pyproject.toml."""

from setuptools import setup

setup(cffi_modules=["pyllmc/_build.py:ffibuilder"])
