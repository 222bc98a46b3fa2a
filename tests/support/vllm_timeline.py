"""vllm-omni's init_timeline.py (the seed) run for real: an engine and two worker processes
record a start-up into a run directory, then its files are damaged the way real life does.

`load_seed()` execs the seed's own source (shared/seeds/003_33fe86c00149e4cd.txt, or
$SMLLM_INIT_TIMELINE_SEED; its first line, the file's name, stripped) as a module, with a stub
`vllm.logger` standing in for vLLM. `record_run(tmp)` runs an engine in this process
(`InitTimeline.start(True, run_dir)`, `phase()` blocks, a `mark()`) and two workers as real
subprocesses (`VLLM_OMNI_STAGE_ID` 0 and 1, `worker_phase`/`worker_mark`), synchronised over
their pipes so their phases overlap for certain (no sleep that hopes); then `ingest_workers()`,
`finish()`, `dump()`. After the dump each worker writes one phase more (a worker still running),
and the files get a duplicate line, a blank line, two malformed lines and a truncated last line.
`SeedRun.seed` is the seed's own InitTimeline re-built over the damaged files: the engine's
phases and its t0/t_end, then its own `ingest_workers()` of the run directory.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import subprocess
import sys
import time
import types
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest

from support.tools import missing

SEED_ENV = "SMLLM_INIT_TIMELINE_SEED"
SEED_NAME = "shared/seeds/003_33fe86c00149e4cd.txt"
MODULE = "vllm_omni_init_timeline_seed"
TESTS = Path(__file__).resolve().parents[1]
WORKER_CODE = (
    f"import sys; sys.path.insert(0, {str(TESTS)!r}); "
    "from support.vllm_timeline import worker_main; worker_main()"
)
BAD_START = '{"name": "y", "start": "abc", "end": 1}'
BAD_JSON = '{"name": "x"'
WAIT_S = 30.0  # a worker that says nothing for this long has hung


def seed_path() -> Path:
    raw = os.environ.get(SEED_ENV)
    if raw:
        return Path(raw)
    from support.tools import REPO

    return REPO.parent / SEED_NAME


def require_seed() -> Path:
    """The seed's path; when it is not there, a failure in CI and a skip elsewhere (as every
    missing component: `support.tools.missing`). CI lays it beside the checkout."""
    path = seed_path()
    if not path.is_file():
        missing(f"the seed {path} (CI lays it beside the checkout; {SEED_ENV} names another)")
    return path


# what a test that runs the seed carries (the fixture, in conftest, is `require_seed`)
needs_seed = pytest.mark.usefixtures("seed_file")


def load_seed(path: Path | None = None) -> Any:
    """The seed's module, exec'd from its source with a stub `vllm.logger` (once a process)."""
    if MODULE in sys.modules:
        return sys.modules[MODULE]
    source = (path or seed_path()).read_text(encoding="utf-8").split("\n", 1)[1]
    stubs = {"vllm": types.ModuleType("vllm"), "vllm.logger": types.ModuleType("vllm.logger")}
    stubs["vllm.logger"].init_logger = logging.getLogger  # type: ignore[attr-defined]
    saved = {name: sys.modules.get(name) for name in stubs}
    spec = importlib.util.spec_from_loader(MODULE, loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.update(stubs)
    sys.modules[MODULE] = module  # (dataclasses looks its module up there)
    try:
        exec(compile(source, str(path or seed_path()), "exec"), module.__dict__)
    except BaseException:
        del sys.modules[MODULE]
        raise
    finally:
        for name, old in saved.items():
            if old is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = old
    return module


def worker_main() -> None:
    """A worker process: its phases go to $VLLM_OMNI_INIT_TIMELINE_DIR/worker_<pid>.jsonl. Says
    "loading" inside its first phase and waits for the engine's go (so both stages' phases
    overlap), "ready" when done, then waits for the engine's dump and writes one mark more."""
    seed = load_seed()
    stage = int(os.environ[seed.ENV_STAGE_ID])
    with seed.worker_phase("engine_core_init", rank=stage):
        with seed.worker_phase("load_weights") as info:
            print("loading", flush=True)
            sys.stdin.readline()
            time.sleep(0.02)
            info["shards"] = stage + 1
        with seed.worker_phase("profile_kv_cache_and_compile_the_graphs"):  # (over 28 chars)
            time.sleep(0.01)
    seed.worker_mark("ready", blocks=128)
    print("ready", flush=True)
    sys.stdin.readline()
    seed.worker_mark("late_heartbeat")


@dataclass(frozen=True)
class SeedRun:
    dump: Path
    run_dir: Path
    worker_files: tuple[Path, ...]  # sorted by name, as the seed reads them
    engine_pid: int
    worker_pids: tuple[int, ...]  # stage 0's, stage 1's
    worker_phases: int  # the workers' phases (lines before the damage)
    late: int  # of them, written after the dump
    duplicate: tuple[Path, int]  # the copied line: file, 1-based line number
    blank: tuple[Path, int]
    malformed: tuple[tuple[Path, int], ...]  # the lines any reader must skip
    truncated: tuple[Path, int]
    seed: Any  # the seed's InitTimeline over the damaged files


def _expect(proc: subprocess.Popen[str], word: str) -> None:
    assert proc.stdout is not None
    line = proc.stdout.readline()  # ("" once it exits)
    if line.strip() != word:
        proc.kill()
        _, err = proc.communicate(timeout=WAIT_S)
        raise RuntimeError(f"worker {proc.pid} said {line!r}, not {word!r}; stderr:\n{err}")


def _say(procs: list[subprocess.Popen[str]]) -> None:
    for p in procs:
        stdin: IO[str] | None = p.stdin
        assert stdin is not None
        stdin.write("go\n")
        stdin.flush()


def _append(path: Path, text: str) -> int:
    """Appends `text`; the 1-based number of the line it begins."""
    before = path.read_text(encoding="utf-8")
    with path.open("a", encoding="utf-8") as f:
        f.write(text)
    return before.count("\n") + 1


def record_run(tmp: Path) -> SeedRun:
    seed = load_seed()
    run_dir, dump = tmp / "run", tmp / "timeline.json"
    saved_env = os.environ.get(seed.ENV_DIR)
    procs: list[subprocess.Popen[str]] = []
    try:
        tl = seed.InitTimeline.start(True, run_dir)
        with tl.phase("parse_config") as info:
            time.sleep(0.01)
            info["model"] = "tiny"
        tl.mark("config_ready", stages=2)
        with tl.phase("start_stages", num_stages=2):
            for stage in (0, 1):
                env = dict(os.environ, **{seed.ENV_STAGE_ID: str(stage)})
                env[seed.ENV_DIR], env[SEED_ENV] = str(run_dir), str(seed_path().resolve())
                procs.append(
                    subprocess.Popen(
                        [sys.executable, "-c", WORKER_CODE],
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE,
                        text=True,
                        env=env,
                    )
                )
            for p in procs:
                _expect(p, "loading")
            _say(procs)  # both are inside load_weights now
            for stage, p in enumerate(procs):
                with tl.phase("wait_stage_ready", stage_id=stage):
                    _expect(p, "ready")
        engine_phases = list(tl.phases)
        tl.ingest_workers()
        tl.finish()
        tl.dump(dump)
        _say(procs)  # each writes its late mark now, after the dump
        for p in procs:
            _, err = p.communicate(timeout=WAIT_S)
            if p.returncode != 0:
                raise RuntimeError(f"worker {p.pid} exited {p.returncode}:\n{err}")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
        seed.InitTimeline.reset()
        if saved_env is None:
            os.environ.pop(seed.ENV_DIR, None)
        else:
            os.environ[seed.ENV_DIR] = saved_env
    files = tuple(sorted(run_dir.glob("worker_*.jsonl")))
    assert len(files) == 2, files
    worker_phases = sum(f.read_text(encoding="utf-8").count("\n") for f in files)
    first, second = files
    copied = first.read_text(encoding="utf-8").splitlines()[1]
    duplicate = (first, _append(first, copied + "\n"))
    blank = (first, _append(first, "   \n"))
    bad_start = (first, _append(first, BAD_START + "\n"))
    bad_json = (second, _append(second, BAD_JSON + "\n"))
    half = second.read_text(encoding="utf-8").splitlines()[0]
    truncated = (second, _append(second, half[: len(half) // 2]))
    rebuilt = seed.InitTimeline(enabled=True, run_dir=run_dir, t0=tl.t0)
    rebuilt.t_end = tl.t_end
    rebuilt.phases = engine_phases
    rebuilt.ingest_workers()
    return SeedRun(
        dump=dump,
        run_dir=run_dir,
        worker_files=files,
        engine_pid=os.getpid(),
        worker_pids=tuple(p.pid for p in procs),
        worker_phases=worker_phases,
        late=len(procs),
        duplicate=duplicate,
        blank=blank,
        malformed=(bad_start, bad_json),
        truncated=truncated,
        seed=rebuilt,
    )
