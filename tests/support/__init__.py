"""Helpers the tests share, one module per kind of helper; each module's docstring says which.

Imported as `support` (tests/ is on pytest's import path). No test imports another test.
"""
