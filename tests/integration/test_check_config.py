"""check-config on a valid config checks every path it names, as the service would open them."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from support.configs import check
from support.tools import missing, yaml_text


def test_every_path_a_valid_config_names_is_checked(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    if os.geteuid() != 0:
        missing("root (for a read-only mount as the state directory)")
    ro = tmp_path / "ro"
    ro.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(ro)], check=True)
    try:
        path = tmp_path / "paths.yaml"
        path.write_text(
            yaml_text(
                f"state_dir: {ro}",
                "nodes:",
                f"  - {{name: a, source: file, path: {tmp_path}/no-dump.json}}",
                f"  - {{name: b, source: journal, directory: {tmp_path}/no-journals}}",
                "  - name: c",
                "    source: ssh",
                "    host: c.example",
                f"    known_hosts: {tmp_path}/no-known-hosts",
                f"    client_keys: [{tmp_path}/no-key]",
                f"    password_file: {tmp_path}/no-password",
                f"  - {{name: d, source: file, path: {tmp_path}}}",
            )
        )
        code, errors = check(caplog, "--config", str(path))
    finally:
        subprocess.run(["umount", str(ro)], check=False)
    assert code == 1
    assert errors[0] == f"{path}: 6 problem(s):"
    # (the dump not there yet is a warning: the daemon waits for it; a path that may be a
    # secret pasted there is not shown)
    assert errors[1:] == [
        f"{path}:1: state_dir: state directory {ro} cannot hold checkpoints (Read-only file "
        "system): set state_dir to a writable directory",
        f"{path}:4: nodes[1].directory: {tmp_path}/no-journals does not exist",
        f"{path}:8: nodes[2].known_hosts: {tmp_path}/no-known-hosts does not exist",
        f"{path}:9: nodes[2].client_keys[0]: the path given does not exist (the path is not "
        "shown: it may be a secret)",
        f"{path}:10: nodes[2].password_file: the path given does not exist (the path is not "
        "shown: it may be a secret)",
        f"{path}:11: nodes[3].path: {tmp_path} is a directory",
    ]
