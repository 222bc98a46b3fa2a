"""A command run as user nobody, in a forked child (for start-up and check-config as a user
that owns nothing)."""

from __future__ import annotations

import logging
import os
import pwd
import sys

# imported before a fork drops to nobody, who may not read the checkout (a clone in a 0700
# directory, as `mktemp -d` makes): the CLI, and the commands it imports only when they run
from exporter import cli
from exporter.commands import check_config, run  # noqa: F401
from exporter.daemon import daemon  # noqa: F401

from support.tools import missing


def as_nobody(argv: list[str]) -> tuple[int, str]:
    """`sm-llm-exporter ARGV` in a forked child that has dropped to user and group nobody
    (the interpreter here lives under /root, which nobody cannot read: what the command needs
    is imported before the fork). Its exit code and standard error."""
    if os.geteuid() != 0:
        missing("root (to drop to another user)")
    nobody = pwd.getpwnam("nobody")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # (the child: never returns into pytest)
        code = 70
        try:
            os.dup2(w, 2)
            os.setgroups([])
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
            logging.getLogger().handlers.clear()  # (pytest's capture: the command's own)
            sys.stderr = os.fdopen(2, "w", buffering=1)
            code = cli.main(argv)
            sys.stderr.flush()
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r, encoding="utf-8", errors="replace") as f:
        err = f.read()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), err
