"""The switch hands each compiled module the Python layouts at import, and falls back to the
pure-Python references, with a warning, when a module refuses them.

A layout changed on the Python side (here: two field names swapped, one left out, one added)
stands for a record changed without rebuilding the C code that builds it by position."""

from __future__ import annotations

import sys
from types import ModuleType

import pytest

from exporter.compiled import switch
from exporter.compiled.switch import Layouts, LayoutWarning, layouts_of_speedups, load

from support.tools import require_compiled

require_compiled(switch.speedups, "_speedups")

from exporter.compiled import _speedups  # noqa: E402 (the module the switch loaded)

SPEEDUPS = layouts_of_speedups()


def swapped(layouts: Layouts, name: str, i: int, j: int) -> Layouts:
    names = list(layouts[name])
    names[i], names[j] = names[j], names[i]
    return {**layouts, name: tuple(names)}


def test_the_compiled_speedups_accept_this_codes_layouts() -> None:
    _speedups.check_layouts(SPEEDUPS)  # (no error)
    assert load("_speedups", SPEEDUPS) is _speedups


def test_an_interval_with_start_and_end_swapped_is_refused_and_the_references_run() -> None:
    layouts = swapped(SPEEDUPS, "Interval", 1, 2)
    assert layouts["Interval"][1:3] == ("end_us", "start_us")
    with pytest.raises(ValueError, match=r"Interval: built for \('node', 'start_us', 'end_us'"):
        _speedups.check_layouts(layouts)
    with pytest.warns(LayoutWarning, match="Interval.*pure-Python references"):
        assert load("_speedups", layouts) is None


@pytest.mark.parametrize("name", sorted(SPEEDUPS))
def test_any_layout_with_two_names_swapped_is_refused(name: str) -> None:
    with pytest.warns(LayoutWarning, match=name):
        assert load("_speedups", swapped(SPEEDUPS, name, 0, 1)) is None


@pytest.mark.parametrize("name", sorted(SPEEDUPS))
def test_a_layout_left_out_or_cut_short_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match=f"no {name} layout given"):
        _speedups.check_layouts({k: v for k, v in SPEEDUPS.items() if k != name})
    with pytest.raises(ValueError, match=name):
        _speedups.check_layouts({**SPEEDUPS, name: SPEEDUPS[name][:1]})


def test_a_layout_the_module_does_not_know_or_of_no_names_is_refused() -> None:
    with pytest.raises(ValueError, match="no layout 'Batch' here"):
        _speedups.check_layouts({**SPEEDUPS, "Batch": ("node",)})
    with pytest.raises(ValueError, match="Interval"):
        _speedups.check_layouts({**SPEEDUPS, "Interval": list(SPEEDUPS["Interval"])})  # type: ignore[dict-item]
    with pytest.raises(TypeError):
        _speedups.check_layouts(list(SPEEDUPS.items()))  # type: ignore[arg-type]


def test_more_token_kinds_than_the_compiled_tokenizer_makes_are_no_mismatch() -> None:
    kinds = SPEEDUPS["TokenKind"]
    _speedups.check_layouts({**SPEEDUPS, "TokenKind": (*kinds, "NEW")})  # (no error)
    with pytest.raises(ValueError, match="TokenKind"):
        _speedups.check_layouts({**SPEEDUPS, "TokenKind": kinds[:6]})


def test_a_module_that_takes_no_layouts_is_refused_when_given_some(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A module built before layouts were handed over (a stale build)."""
    monkeypatch.setitem(sys.modules, "exporter.compiled._stale", ModuleType("_stale"))
    with pytest.warns(LayoutWarning, match="takes no layouts"):
        assert load("_stale", SPEEDUPS) is None
    assert load("_stale", {}) is sys.modules["exporter.compiled._stale"]


def test_pure_python_asked_for_loads_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(switch.ENV, "1")
    assert load("_speedups", SPEEDUPS) is None
    monkeypatch.setenv(switch.ENV, "0")
    assert load("_speedups", SPEEDUPS) is _speedups
