"""The shipped unit on a bare machine: `systemd-analyze verify` of the unit as the documented
install (deploy/README.md) leaves it, in an empty `--root` (nothing of /opt/sm-llm-exporter or
/etc/sm-llm-exporter needed on this host), and the unit's `Documentation=` there: the man pages
the install puts where `man` looks.

The install's `install` lines run as they are written, their absolute paths moved under the
root; the venv and `pip install` are stood in for by the directory and an executable at
ExecStart's path (what verify checks). The root holds a copy of the system's units
(sysinit.target and the rest the unit's default dependencies name) and an empty
/etc/systemd/system, as every systemd host has. verify runs this host's `man` for each `man:`
page the unit names: pointed (MANPATH) at the root's /usr/local/share/man, a directory of
man's default path.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from support.tools import IN_CI, REPO, require_tool

UNIT = REPO / "deploy" / "sm-llm-exporter.service"
GUIDE = REPO / "deploy" / "README.md"
SYSTEM_UNITS = Path("/usr/lib/systemd/system")
INSTALLED = Path("/opt/sm-llm-exporter")
MAN_DIR = Path("/usr/local/share/man")  # (where the install puts the man pages)
MAN_PAGE = re.compile(r"man:([\w.-]+)\((\d)\)")


def install_steps() -> list[str]:
    """The commands of deploy/README.md's `## Install` section (its indented blocks, in
    order)."""
    section = GUIDE.read_text().split("\n## Install\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"(?:^    \S.*\n)+", section, re.MULTILINE)
    assert blocks, "no command block under ## Install"
    return [line.strip() for block in blocks for line in block.splitlines()]


def unit_value(key: str) -> str:
    found = re.findall(rf"^{key}=(.*)$", UNIT.read_text(), re.MULTILINE)
    assert len(found) == 1, f"{key}= set {found!r}"
    return str(found[0])


def man_pages() -> list[tuple[str, str]]:
    """The unit's `Documentation=` pages: (name, section)."""
    return [(str(n), str(s)) for n, s in MAN_PAGE.findall(unit_value("Documentation"))]


def rooted(root: Path, arg: str) -> str:
    return str(root / arg.lstrip("/")) if arg.startswith("/") else arg


def run_install(root: Path) -> list[str]:
    """The documented install into `root` (see the module docstring); the steps it ran."""
    program = unit_value("ExecStart").split()[0]
    done = []
    for step in install_steps():
        argv = shlex.split(step.split("  #", 1)[0])
        if argv[:3] == ["python3", "-m", "venv"]:
            (Path(rooted(root, argv[3])) / "bin").mkdir(parents=True)
        elif argv[0].endswith("/bin/pip") and argv[1] == "install":
            assert Path(argv[0]).parent == Path(program).parent, (step, program)
            stand_in = Path(rooted(root, program))
            stand_in.write_text("#!/bin/sh\n")
            stand_in.chmod(0o755)
        elif argv[0] == "install":
            subprocess.run([rooted(root, a) for a in argv], cwd=REPO, check=True)
        else:
            continue  # apt-get, check-config, systemctl, curl: nothing the root needs
        done.append(step)
    return done


@pytest.fixture
def installed_root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    units = root / SYSTEM_UNITS.relative_to("/")
    shutil.copytree(SYSTEM_UNITS, units, symlinks=True)
    (root / "lib").symlink_to("usr/lib")  # Debian's merged /usr: their links name /lib/...
    (root / "etc/systemd/system").mkdir(parents=True)  # (as on every systemd host)
    # the system's own tool ExecReload= runs (kill(1): on every Debian host)
    tool = Path(unit_value("ExecReload").split()[0])
    (root / tool.relative_to("/")).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(tool, root / tool.relative_to("/"))
    steps = run_install(root)
    assert any(UNIT.name in s for s in steps), steps
    return root


def verify(root: Path) -> tuple[int, str]:
    analyze = require_tool("systemd-analyze")
    require_tool("man")  # (verify runs it for the unit's man: pages)
    r = subprocess.run(
        [analyze, "verify", f"--root={root}", UNIT.name],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "MANPATH": str(root / MAN_DIR.relative_to("/"))},
    )
    return r.returncode, r.stdout + r.stderr


def test_verify_passes_as_the_documented_install_leaves_the_unit(installed_root: Path) -> None:
    installed = installed_root / "etc/systemd/system" / UNIT.name
    assert installed.read_bytes() == UNIT.read_bytes()  # the shipped unit, unchanged
    rc, out = verify(installed_root)
    assert rc == 0 and not out.strip(), out


def test_verify_in_the_root_fails_without_the_program(installed_root: Path) -> None:
    """The control: the root is what verify looks at, not this host's /opt."""
    program = unit_value("ExecStart").split()[0]
    Path(rooted(installed_root, program)).unlink()
    rc, out = verify(installed_root)
    assert rc != 0 and f"Command {program} is not executable" in out, out


def test_the_documentation_is_the_man_pages_the_install_puts_where_man_looks(
    installed_root: Path,
) -> None:
    """`systemctl help` shows `man:` pages only: the unit names the generated pages of man/,
    and the install copies them into man's default path."""
    urls = unit_value("Documentation").split()
    assert urls
    for url in urls:
        page = MAN_PAGE.fullmatch(url)
        assert page, f"{url}: not a man: page"
        name, section = page[1], page[2]
        copy = installed_root / MAN_DIR.relative_to("/") / f"man{section}" / f"{name}.{section}"
        assert copy.is_file(), f"{url}: not installed by the install steps of {GUIDE}"
        assert copy.read_bytes() == (REPO / "man" / f"{name}.{section}").read_bytes(), url
    searched = subprocess.run(
        [require_tool("manpath"), "-g"], capture_output=True, text=True, check=True, env={}
    )
    assert str(MAN_DIR) in searched.stdout.strip().split(":"), searched.stdout


def test_verify_in_the_root_fails_without_the_man_pages(installed_root: Path) -> None:
    """The control: verify looks for the pages (and in the root: MANPATH)."""
    shutil.rmtree(installed_root / MAN_DIR.relative_to("/"))
    rc, out = verify(installed_root)
    assert rc != 0 and "Command 'man sm-llm-exporter(1)' failed" in out, out


def test_the_install_makes_every_configuration_directory_as_root(installed_root: Path) -> None:
    """A `ConfigurationDirectory=` the install leaves out is made by systemd at the first start,
    owned by the service's dynamic user: a folder meant for root-only secrets (ssh/, tls/, the
    sources of `LoadCredential=`) would belong to a uid no one holds once the service stops."""
    wanted = unit_value("ConfigurationDirectory").split()
    sources = [
        line.split(":", 1)[1]
        for line in re.findall(r"^LoadCredential=(.*)$", UNIT.read_text(), re.MULTILINE)
    ]
    assert {f"/etc/{d}" for d in wanted} >= set(sources)  # (every credential's folder is one)
    for directory in wanted:
        made = installed_root / "etc" / directory
        assert made.is_dir(), f"/etc/{directory}: not made by the install steps of {GUIDE}"
        assert made.stat().st_uid == 0 and made.stat().st_mode & 0o022 == 0, directory


def test_verify_on_this_bare_host_names_only_the_program_and_pages_not_installed() -> None:
    """`systemd-analyze verify deploy/sm-llm-exporter.service` before the install: its
    complaints are ExecStart's program and the man pages (deploy/README.md says so)."""
    installed = [INSTALLED, *(MAN_DIR / f"man{s}" / f"{n}.{s}" for n, s in man_pages())]
    if any(p.exists() for p in installed):  # (a CI machine is a fresh one: there this fails)
        (pytest.fail if IN_CI else pytest.skip)(f"{installed} exist here: not a bare host")
    analyze = require_tool("systemd-analyze")
    require_tool("man")
    r = subprocess.run([analyze, "verify", str(UNIT)], capture_output=True, text=True, check=False)
    complaints = [line for line in (r.stdout + r.stderr).splitlines() if line.strip()]
    program = unit_value("ExecStart").split()[0]
    assert complaints == [
        f"{UNIT.name}: Command {program} is not executable: No such file or directory",
        *(f"{UNIT.name}: Command 'man {n}({s})' failed with code 16" for n, s in man_pages()),
    ], complaints
