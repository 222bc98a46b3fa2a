"""Builds the optional C fast paths (exporter/compiled/_speedups.c and _accounting.c).

Everything else is in pyproject.toml.

`optional=True`: without a C compiler the install still succeeds, and the pure-Python code that
is the reference for each fast path does the work (slower; `make test` in CI insists on the
compiled modules, see tests/unit/compiled/).
"""

from pathlib import Path

from setuptools import Extension, setup

FLAGS = ["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"]
# the parts each module's file includes (one translation unit): a change to one builds it again
PARTS = {
    name: sorted(str(p) for p in Path(f"exporter/compiled/{folder}").glob("*.c"))
    for name, folder in (("_speedups", "speedups"), ("_accounting", "accounting"))
}

setup(
    ext_modules=[
        Extension(
            f"exporter.compiled.{name}",
            [f"exporter/compiled/{name}.c"],
            depends=PARTS.get(name, []),
            extra_compile_args=FLAGS,
            optional=True,
        )
        for name in ("_speedups", "_accounting")
    ]
)
