"""Headless Chromium for tests of the pages: the DOM it builds of a page, and a screenshot.

`chromium()` is Debian's `chromium` (tools.require_tool: missing, it fails the test in CI and
skips it elsewhere). Each run gets a fresh profile in a temporary directory, no requests of its
own (no first-run page, no background networking), and SUBPROCESS_TIMEOUT_S to finish. Screenshots
go to `screenshot_dir()`: $SMLLM_SCREENSHOTS if set, else <repo>/.test-output/screenshots; they
are kept, and the tests print their paths.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from support.tools import REPO, require_tool

SUBPROCESS_TIMEOUT_S = 60
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
)


class BrowserError(Exception):
    """Chromium failed, or gave nothing."""


def chromium() -> str:
    """The path of the Chromium binary."""
    return require_tool("chromium")


def screenshot_dir() -> Path:
    """Where screenshots are kept (created)."""
    env = os.environ.get("SMLLM_SCREENSHOTS")
    path = Path(env) if env else REPO / ".test-output" / "screenshots"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _url(url_or_path: str | Path) -> str:
    if isinstance(url_or_path, Path):
        return url_or_path.resolve().as_uri()
    return url_or_path


def _run(args: list[str], what: str) -> subprocess.CompletedProcess[bytes]:
    binary = chromium()
    with tempfile.TemporaryDirectory(prefix="smllm-chromium-") as profile:
        argv = [binary, *FLAGS, f"--user-data-dir={profile}", *args]
        try:
            proc = subprocess.run(
                argv, capture_output=True, timeout=SUBPROCESS_TIMEOUT_S, check=False
            )
        except subprocess.TimeoutExpired as e:
            raise BrowserError(
                f"chromium {what}: still running after {SUBPROCESS_TIMEOUT_S} s: {argv}"
            ) from e
    if proc.returncode != 0:
        err = proc.stderr.decode(errors="replace")[-2000:]
        raise BrowserError(f"chromium {what} exited with {proc.returncode}: {argv}\n{err}")
    return proc


def dump_dom(url_or_path: str | Path, console: list[str] | None = None) -> str:
    """The page's DOM after loading, serialised (`--dump-dom`). Given `console`, the page's
    console messages are appended to it, among them what its Content-Security-Policy blocked
    (Chromium logs them there, through --enable-logging=stderr)."""
    logging = ["--enable-logging=stderr", "--v=0"] if console is not None else []
    proc = _run([*logging, "--dump-dom", _url(url_or_path)], "--dump-dom")
    if console is not None:
        lines = proc.stderr.decode(errors="replace").splitlines()
        console += [line for line in lines if ":CONSOLE" in line]
    dom = proc.stdout.decode("utf-8", errors="replace")
    if "<html" not in dom:
        err = proc.stderr.decode(errors="replace")[-2000:]
        raise BrowserError(f"chromium --dump-dom of {url_or_path} gave no document:\n{err}")
    return dom


def screenshot(url_or_path: str | Path, out: Path, size: tuple[int, int] = (1280, 900)) -> Path:
    """A PNG of the page's first `size` pixels (width, height), written to `out`."""
    out = out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    width, height = size
    args = [f"--screenshot={out}", f"--window-size={width},{height}", "--hide-scrollbars"]
    proc = _run([*args, _url(url_or_path)], "--screenshot")
    if not out.is_file() or out.stat().st_size == 0:
        err = proc.stderr.decode(errors="replace")[-2000:]
        raise BrowserError(f"chromium --screenshot wrote no {out}:\n{err}")
    return out
