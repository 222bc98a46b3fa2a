"""Builds the optional C fast paths (exporter/_speedups.c); everything else is in pyproject.toml.

`optional=True`: without a C compiler the install still succeeds, and the pure-Python code that
is the reference for each fast path does the work (slower; `make test` in CI insists on the
compiled module, see tests/test_speedups.py).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "exporter._speedups",
            ["exporter/_speedups.c"],
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"],
            optional=True,
        )
    ]
)
