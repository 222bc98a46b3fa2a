"""deploy/journal-remote/ works as its README says: the certificates, the units and drop-ins,
and the whole deployment under a real systemd.

- `make-certs.sh` run into a temporary folder: `openssl verify` accepts the collector's
  certificate as a server for its name and each node's as a client, and refuses them for
  another name or the other use. A second run keeps the CA and adds nodes.
- `systemd-analyze verify` of every unit the README installs, with its drop-ins, in an empty
  `--root` filled by the README's own `install` lines (and real certificates from the script).
- The README's config is one the checker reads as `journal-remote` nodes.
- Slow: systemd 252 booted in a container (`support.nspawn`, its own network, so port 19532 is
  its own), one machine as both the collector and a node. The README's steps run there as
  written, with two stand-ins: `scp` is a copy, and `collector.example` is 127.0.0.1 in
  /etc/hosts. An entry logged there reaches /var/log/journal/remote. The exporter's unit with
  the drop-in reads it, and cannot without it: a test drop-in swaps the exporter's program for
  `journalctl`, run with the unit's user, groups and sandbox. The uploader outlasts a collector
  that is away (and gives up without the drop-in) and refuses a collector of another CA. The
  vacuum removes old archives only.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from exporter.sources.remote import RemoteNode

from support import markdown
from support.configs import good
from support.nspawn import MAN_DIR, Container, usable
from support.tools import REPO, require_tool, wait_for

HERE = REPO / "deploy" / "journal-remote"
GUIDE = HERE / "README.md"
SCRIPT = HERE / "make-certs.sh"
EXPORTER_UNIT = REPO / "deploy" / "sm-llm-exporter.service"
SYSTEM_UNITS = Path("/usr/lib/systemd/system")
COLLECTOR = "collector.example"  # the README's collector (and the node drop-in's URL=)
NODES = ("gpu-a", "gpu-b")  # the README's nodes
REMOTE = "/var/log/journal/remote"
UNITS = (
    "systemd-journal-remote.socket",
    "systemd-journal-remote.service",
    "systemd-journal-upload.service",
    "sm-llm-exporter.service",
    "journal-remote-vacuum.service",
    "journal-remote-vacuum.timer",
)
# what verify runs or checks in the root: the units' programs
PROGRAMS = (
    "/usr/lib/systemd/systemd-journal-remote",
    "/usr/lib/systemd/systemd-journal-upload",
    "/usr/bin/journalctl",
    "/usr/bin/kill",
)
DEADLINE_S = 60.0


# -- the README's steps -------------------------------------------------------------------------


def steps(number: int) -> list[str]:
    """The commands of the README's section `## {number}. ...`: its indented blocks, in order
    (a fenced block's indented lines are YAML, not commands)."""
    sections = re.split(r"^## ", GUIDE.read_text(), flags=re.MULTILINE)
    found = [s for s in sections if s.startswith(f"{number}. ")]
    assert len(found) == 1, f"no single section ## {number}. in {GUIDE}"
    unfenced = re.sub(r"^```.*?^```$", "", found[0], flags=re.MULTILINE | re.DOTALL)
    blocks = re.findall(r"(?:^    \S.*\n)+", unfenced, re.MULTILINE)
    assert blocks, f"no command block under ## {number}."
    return [line.strip() for block in blocks for line in block.splitlines()]


def run_steps(run: Callable[[str], object], number: int) -> list[str]:
    """Run section `number`'s commands but `apt-get` with `run(command)`; the commands run."""
    done = []
    for step in steps(number):
        if step.startswith("apt-get "):
            continue  # (the package is installed here, and /usr is the host's)
        run(step)
        done.append(step)
    return done


# -- the certificates ---------------------------------------------------------------------------


def make_certs(into: Path, *names: str) -> None:
    r = subprocess.run(
        ["sh", str(SCRIPT), str(into), *names], capture_output=True, text=True, check=False
    )
    assert r.returncode == 0, r.stdout + r.stderr


def openssl_verify(ca: Path, cert: Path, *checks: str) -> tuple[bool, str]:
    r = subprocess.run(
        [require_tool("openssl"), "verify", "-CAfile", str(ca), *checks, str(cert)],
        capture_output=True,
        text=True,
        check=False,
    )
    return r.returncode == 0, r.stdout + r.stderr


def subject(cert: Path) -> str:
    r = subprocess.run(
        [require_tool("openssl"), "x509", "-noout", "-subject", "-nameopt", "RFC2253", "-in", cert],
        capture_output=True,
        text=True,
        check=True,
    )
    return r.stdout.strip()


def mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_the_script_makes_certificates_that_openssl_verifies(tmp_path: Path) -> None:
    require_tool("openssl")
    make_certs(tmp_path, COLLECTOR, *NODES)
    ca = tmp_path / "journal-ca.crt"
    server = tmp_path / COLLECTOR / "journal-remote.crt"
    ok, out = openssl_verify(ca, server, "-purpose", "sslserver", "-verify_hostname", COLLECTOR)
    assert ok, out
    assert subject(server) == f"subject=CN={COLLECTOR}"
    for node in NODES:
        client = tmp_path / node / "journal-upload.crt"
        ok, out = openssl_verify(ca, client, "-purpose", "sslclient")
        assert ok, out
        assert subject(client) == f"subject=CN={node}"
        # the control: a client certificate is no server's
        ok, out = openssl_verify(ca, client, "-purpose", "sslserver")
        assert not ok, out
    # the control: the collector's certificate names the collector only
    ok, out = openssl_verify(ca, server, "-purpose", "sslserver", "-verify_hostname", "other.x")
    assert not ok, out
    # the control: a CA of another run signed none of them
    make_certs(tmp_path / "other", COLLECTOR)
    ok, out = openssl_verify(tmp_path / "other" / "journal-ca.crt", server)
    assert not ok, out


def test_keys_are_their_owners_alone_and_every_host_gets_the_ca(tmp_path: Path) -> None:
    make_certs(tmp_path, COLLECTOR, *NODES)
    assert mode(tmp_path / "ca.key") == 0o600
    assert mode(tmp_path / COLLECTOR / "journal-remote.key") == 0o600
    for node in NODES:
        assert mode(tmp_path / node / "journal-upload.key") == 0o600
        assert mode(tmp_path / node / "journal-upload.crt") == 0o644
    for host in (COLLECTOR, *NODES):
        copy = tmp_path / host / "journal-ca.crt"
        assert copy.read_bytes() == (tmp_path / "journal-ca.crt").read_bytes(), host
        assert not (tmp_path / host / "ca.key").exists()  # (the CA's key stays at the top)
        assert sorted(p.suffix for p in (tmp_path / host).iterdir()) == [".crt", ".crt", ".key"]


def test_a_second_run_keeps_the_ca_and_the_certificates_and_adds_nodes(tmp_path: Path) -> None:
    make_certs(tmp_path, COLLECTOR, "gpu-a")
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    make_certs(tmp_path, COLLECTOR, "gpu-a", "gpu-c")
    assert {p: p.read_bytes() for p in before} == before
    ok, out = openssl_verify(
        tmp_path / "journal-ca.crt",
        tmp_path / "gpu-c" / "journal-upload.crt",
        "-purpose",
        "sslclient",
    )
    assert ok, out


def test_a_collector_named_by_its_address_gets_a_certificate_for_it(tmp_path: Path) -> None:
    make_certs(tmp_path, "10.0.0.1", "gpu-a")
    server = tmp_path / "10.0.0.1" / "journal-remote.crt"
    ok, out = openssl_verify(tmp_path / "journal-ca.crt", server, "-verify_ip", "10.0.0.1")
    assert ok, out
    ok, out = openssl_verify(tmp_path / "journal-ca.crt", server, "-verify_ip", "10.0.0.2")
    assert not ok, out


@pytest.mark.parametrize("name", ["../up", "a/b", "-x", ""])
def test_a_name_that_is_no_host_name_is_refused(tmp_path: Path, name: str) -> None:
    r = subprocess.run(
        ["sh", str(SCRIPT), str(tmp_path / "certs"), COLLECTOR, name],
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 2 and "is not a host name" in r.stderr, r.stderr
    assert not (tmp_path / "certs").exists()  # (refused before anything is written)


def test_the_folder_holds_no_key_or_certificate() -> None:
    """The script makes them; the repository holds none."""
    for path in HERE.rglob("*"):
        if path.is_file():
            text = path.read_text()
            assert "-----BEGIN" not in text, path


# -- systemd-analyze verify ---------------------------------------------------------------------


def rooted(root: Path, arg: str) -> str:
    return str(root / arg.lstrip("/")) if arg.startswith("/") else arg


@pytest.fixture
def verify_root(tmp_path: Path) -> Path:
    """An empty root with the system's units and the programs they run, the exporter installed
    (a stand-in program, its man pages), and the README's `install` lines run into it."""
    root = tmp_path / "root"
    shutil.copytree(SYSTEM_UNITS, root / SYSTEM_UNITS.relative_to("/"), symlinks=True)
    for d in ("lib", "bin"):  # (Debian's merged /usr: the units name /lib/..., /bin/kill)
        (root / d).symlink_to(f"usr/{d}")
    for d in ("etc/systemd/system", "etc/ssl/private", "etc/ssl/certs"):
        (root / d).mkdir(parents=True)
    for program in PROGRAMS:
        Path(rooted(root, program)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(program, rooted(root, program))
    exporter = Path(rooted(root, "/opt/sm-llm-exporter/bin/sm-llm-exporter"))
    exporter.parent.mkdir(parents=True)
    exporter.write_text("#!/bin/sh\n")
    exporter.chmod(0o755)
    shutil.copy2(EXPORTER_UNIT, root / "etc/systemd/system")
    for page in (REPO / "man").iterdir():
        section = root / MAN_DIR.relative_to("/") / f"man{page.suffix[1:]}"
        section.mkdir(parents=True, exist_ok=True)
        shutil.copy2(page, section)
    make_certs(root / "root/journal-certs", COLLECTOR, *NODES)
    for host in (COLLECTOR, NODES[0]):  # (the README's scp: one root is every host)
        shutil.copytree(
            root / "root/journal-certs" / host, root / "root/journal-certs", dirs_exist_ok=True
        )

    def install(step: str) -> None:
        argv = shlex.split(step)
        if argv[0] == "install":
            subprocess.run([rooted(root, a) for a in argv], cwd=HERE, check=True)

    ran = [s for n in (2, 3, 4) for s in run_steps(install, n) if s.startswith("install ")]
    assert len(ran) >= 8, ran
    return root


def verify(root: Path, *units: str) -> tuple[int, str]:
    analyze = require_tool("systemd-analyze")
    require_tool("man")  # (verify runs it for the units' man: pages)
    manpath = f"{root / MAN_DIR.relative_to('/')}:/usr/share/man"
    r = subprocess.run(
        [analyze, "verify", f"--root={root}", *units],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "MANPATH": manpath},
    )
    return r.returncode, r.stdout + r.stderr


def test_every_unit_and_drop_in_passes_systemd_analyze_verify(verify_root: Path) -> None:
    system = verify_root / "etc/systemd/system"
    dropins = sorted(str(p.relative_to(system)) for p in system.glob("*.d/*.conf"))
    assert dropins == [
        "sm-llm-exporter.service.d/50-journal-remote.conf",
        "systemd-journal-remote.service.d/50-sm-llm.conf",
        "systemd-journal-upload.service.d/50-sm-llm.conf",
    ]
    rc, out = verify(verify_root, *UNITS)
    assert rc == 0 and not out.strip(), out


def test_verify_reads_the_drop_ins(verify_root: Path) -> None:
    """The control: a drop-in's mistake is reported, so the pass above covers the drop-ins."""
    system = verify_root / "etc/systemd/system"
    for dropin in system.glob("*.d/*.conf"):
        saved = dropin.read_text()
        dropin.write_text(saved.replace("[Service]\n", "[Service]\nRestartSec=soon\n", 1))
        _, out = verify(verify_root, *UNITS)
        said = [line for line in out.splitlines() if line.startswith(f"{dropin}:")]
        assert said and said[0].endswith(": Failed to parse sec value, ignoring: soon"), out
        dropin.write_text(saved)


def test_the_readmes_config_names_journal_remote_nodes() -> None:
    blocks = [t for _, info, t in markdown.read(GUIDE).fenced if info.split()[:1] == ["yaml"]]
    assert len(blocks) == 1
    nodes = good(blocks[0]).nodes
    assert [(n.name, n.host, str(n.directory)) for n in nodes if isinstance(n, RemoteNode)] == [
        (name, name, REMOTE) for name in NODES
    ]
    assert len(nodes) == len(NODES)


# -- under a real systemd -----------------------------------------------------------------------

TAG = "smllm-remote-test"
READER_OUT = "/run/reader.out"
# The exporter's unit as installed, its program swapped for a reader of the collector's files:
# journalctl runs with the unit's user, groups and sandbox.
READER_DROPIN = f"""\
[Service]
Type=oneshot
ExecStart=
ExecStart=/usr/bin/journalctl --directory={REMOTE} --identifier={TAG} -o cat --no-pager
ExecReload=
WatchdogSec=0
Restart=no
StandardOutput=truncate:{READER_OUT}
StandardError=inherit
"""
UPLOAD = "systemd-journal-upload.service"
EXPORTER_DROPIN = "/etc/systemd/system/sm-llm-exporter.service.d/50-journal-remote.conf"


class Deployed:
    """The booted container with the README's steps run."""

    def __init__(self, c: Container) -> None:
        self.c = c
        self.logged = 0

    def sh(self, script: str, check: bool = True) -> str:
        return self.c.sh(script, check=check, timeout=DEADLINE_S)

    def show(self, unit: str, prop: str) -> str:
        return self.sh(f"systemctl show -p {prop} --value {unit}").strip()

    def log(self) -> str:
        """A new message logged with the test's tag."""
        self.logged += 1
        message = f"message {self.logged} at {time.time_ns()}"
        self.sh(f"logger -t {TAG} {shlex.quote(message)}")
        return message

    def collected(self) -> str:
        """The test's messages in the collector's files, as root reads them."""
        return self.sh(f"journalctl --directory={REMOTE} --identifier={TAG} -o cat --no-pager")

    def arrives(self, message: str) -> None:
        wait_for(lambda: message in self.collected(), DEADLINE_S, f"{message!r} collected")

    def read_as_the_exporter(self) -> tuple[bool, str]:
        """The reader run as the exporter's unit: whether it ended well, and what it printed."""
        started = self.c.run("systemctl", "start", "sm-llm-exporter", check=False)
        return started.returncode == 0, self.sh(f"cat {READER_OUT}")


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployed]:
    usable()
    base = tmp_path_factory.mktemp("journal-remote")
    c = Container(base / "root", "smllm-journal-remote", ["--private-network"])
    try:
        c.boot()
        # the stand-ins: the collector's name, and the exporter's program
        c.sh(
            f"""
            echo '127.0.0.1 {COLLECTOR}' >> /etc/hosts
            install -m 0644 /src/deploy/sm-llm-exporter.service /etc/systemd/system/
            install -d -m 0755 /etc/sm-llm-exporter /etc/sm-llm-exporter/ssh /etc/sm-llm-exporter/tls
            mkdir -p /etc/systemd/system/sm-llm-exporter.service.d
            """
        )
        c.path("/etc/systemd/system/sm-llm-exporter.service.d/99-reader.conf").write_text(
            READER_DROPIN
        )
        for step in steps(1):
            argv = shlex.split(step)
            if argv[0] == "scp":  # scp -r journal-certs/HOST root@HOST:journal-certs
                if argv[2].split("/")[-1] in (COLLECTOR, NODES[0]):
                    c.sh(
                        f"mkdir -p /root/journal-certs && cp -r /root/{argv[2]}/. /root/journal-certs/"
                    )
            else:
                c.sh(f"cd /root && /src/{step}")
        d = Deployed(c)
        for number in (2, 3, 4):
            run_steps(lambda step: c.sh(f"cd /src/deploy/journal-remote && {step}"), number)
        yield d
    finally:
        c.close()


@pytest.mark.slow
def test_an_entry_logged_on_a_node_reaches_the_collector(deployed: Deployed) -> None:
    message = deployed.log()
    deployed.arrives(message)
    # one file per client address, written by the collector's user, for its group alone
    files = deployed.sh(f"stat -c '%n %a %U %G' {REMOTE}/*.journal").splitlines()
    assert files == [
        f"{REMOTE}/remote-127.0.0.1.journal 640 systemd-journal-remote systemd-journal-remote"
    ]
    # the keys stay root's; the services have them as credentials
    keys = deployed.sh("stat -c '%n %a %U' /etc/ssl/private/journal-*.key").splitlines()
    assert keys == [
        "/etc/ssl/private/journal-remote.key 600 root",
        "/etc/ssl/private/journal-upload.key 600 root",
    ]
    # what the README says of Debian's build
    log = deployed.sh("journalctl -u systemd-journal-remote.service -o cat --no-pager")
    assert "Certificate checking disabled" in log
    assert deployed.show("journal-remote-vacuum.timer", "UnitFileState") == "enabled"


@pytest.mark.slow
def test_the_exporters_unit_reads_the_collectors_files_with_the_drop_in(
    deployed: Deployed,
) -> None:
    message = deployed.log()
    deployed.arrives(message)
    ok, out = deployed.read_as_the_exporter()
    assert ok and message in out, out
    # the control: without the drop-in, the systemd-journal group alone cannot read them
    dropin = deployed.c.path(EXPORTER_DROPIN)
    saved = dropin.read_text()
    dropin.unlink()
    try:
        deployed.sh("systemctl daemon-reload")
        ok, out = deployed.read_as_the_exporter()
        assert not ok and message not in out and "insufficient permissions" in out, out
    finally:
        dropin.write_text(saved)
        deployed.sh("systemctl daemon-reload && systemctl reset-failed sm-llm-exporter")
    ok, out = deployed.read_as_the_exporter()
    assert ok and message in out, out


def collector(deployed: Deployed, action: str) -> None:
    deployed.sh(f"systemctl {action} systemd-journal-remote.socket systemd-journal-remote.service")


@pytest.mark.slow
def test_without_the_drop_in_the_uploader_gives_up_on_a_collector_away(
    deployed: Deployed,
) -> None:
    """The control of the next test: systemd's default RestartSec= (100 ms)."""
    stock = deployed.c.path(f"/etc/systemd/system/{UPLOAD}.d/99-stock.conf")
    stock.write_text("[Service]\nRestartSec=100ms\n")
    collector(deployed, "stop")
    try:
        deployed.sh(f"systemctl daemon-reload && systemctl restart {UPLOAD}")
        wait_for(lambda: deployed.show(UPLOAD, "ActiveState") == "failed", DEADLINE_S, "failed")
        # systemd's start limit (five starts in 10 s): it gives up for good
        log = deployed.sh(f"journalctl -u {UPLOAD} -o cat --no-pager")
        assert f"{UPLOAD}: Start request repeated too quickly." in log
        assert deployed.show(UPLOAD, "NRestarts") == "5"
    finally:
        stock.unlink()
        collector(deployed, "start")
        deployed.sh(f"systemctl daemon-reload && systemctl reset-failed {UPLOAD}")
        deployed.sh(f"systemctl start {UPLOAD}")


@pytest.mark.slow
def test_the_uploader_outlasts_a_collector_that_is_away(deployed: Deployed) -> None:
    deployed.arrives(deployed.log())  # (the uploader is running and caught up)
    before = int(deployed.show(UPLOAD, "NRestarts"))
    collector(deployed, "stop")
    try:
        message = deployed.log()

        def restarted_twice() -> bool:
            assert deployed.show(UPLOAD, "ActiveState") != "failed"
            return int(deployed.show(UPLOAD, "NRestarts")) >= before + 2

        wait_for(restarted_twice, DEADLINE_S, "two restarts of the uploader")
    finally:
        collector(deployed, "start")
    deployed.arrives(message)


@pytest.mark.slow
def test_the_vacuum_removes_archived_files_past_30_days_only(deployed: Deployed) -> None:
    deployed.arrives(deployed.log())
    active = f"{REMOTE}/remote-127.0.0.1.journal"
    seqnum_id = "0" * 31 + "1"
    now_us = time.time_ns() // 1000
    old = f"{REMOTE}/remote-127.0.0.1@{seqnum_id}-0000000000000001-{now_us - 31 * 86400_000_000:016x}.journal"
    recent = f"{REMOTE}/remote-127.0.0.1@{seqnum_id}-0000000000000002-{now_us - 86400_000_000:016x}.journal"
    for archive in (old, recent):
        deployed.sh(f"cp {active} {archive} && chown systemd-journal-remote: {archive}")
    deployed.sh("systemctl start journal-remote-vacuum.service")
    left = set(deployed.sh(f"ls {REMOTE}").split())
    assert Path(old).name not in left
    assert {Path(recent).name, Path(active).name} <= left


@pytest.mark.slow
def test_the_uploader_refuses_a_collector_of_another_ca(deployed: Deployed) -> None:
    """The README's "checks the collector's certificate against journal-ca.crt"."""
    deployed.sh("cd /root && /src/deploy/journal-remote/make-certs.sh other-ca other.example")
    ca = "/etc/ssl/certs/journal-ca.crt"
    deployed.sh(f"cp {ca} /root/journal-ca.saved && cp /root/other-ca/journal-ca.crt {ca}")
    try:
        since = deployed.sh("date +%s").strip()
        deployed.sh(f"systemctl restart {UPLOAD}")

        def refused() -> str:
            log = deployed.sh(f"journalctl -u {UPLOAD} --since=@{since} -o cat --no-pager")
            return log if "SSL certificate problem" in log else ""

        log = wait_for(refused, DEADLINE_S, "the uploader refusing the collector")
        assert "unable to get local issuer certificate" in log, log
    finally:
        deployed.sh(f"cp /root/journal-ca.saved {ca} && systemctl restart {UPLOAD}")
    deployed.arrives(deployed.log())
