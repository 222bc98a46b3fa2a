"""Router mode's own lines: an instance's line re-logged under the router, a spawn, an exit.

A llama-server router (tools/server/server-models.cpp) logs each model instance's line as
`LOG("[%5d] %s", port, line)`, and names its instances in `spawning server instance with
name=%s on port %d` and `instance name=%s exited with status %d` (docs/design.md, "Line
shapes by llama.cpp era"). Each reader here runs in time linear in the line: a request path
may quote these words any number of times.
"""

from __future__ import annotations

import re

MAX_MODEL_NAME = 200  # characters of a model's name kept (it becomes a label value)
# Model names that begin with ":" are the exporter's own: `:PORT` for an instance whose spawn line
# was not read, and OTHER_MODELS for a node's models beyond the accounting's cap. A real name
# never does (see model_name), so none clashes with them.
OTHER_MODELS = ":other"

_ROUTED = re.compile(r"\[ *(\d{1,5})\] (.*)", re.DOTALL)
_SPAWN = "spawning server instance with name="
_INSTANCE_EXIT = " exited with status "


def read_routed(msg: str) -> tuple[int, str] | None:
    """`[ PORT] LINE` -> (PORT, LINE): an instance's line as its router re-logged it."""
    m = _ROUTED.match(msg)
    return None if m is None else (int(m.group(1)), m.group(2))


def model_name(text: str) -> str:
    """A model's name as the router logged it, fit to be a label value (bounded, UTF-8). One
    that begins with ":" after any "_" takes one more "_" in front: names beginning with ":" are
    the exporter's own (and two names stay two)."""
    name = text[:MAX_MODEL_NAME].encode("utf-8", "replace").decode("utf-8")
    return "_" + name if name.lstrip("_").startswith(":") else name


def read_spawn(msg: str) -> tuple[str, int] | None:
    """`... spawning server instance with name=NAME on port PORT` -> (NAME, PORT)."""
    at = msg.find(_SPAWN)
    if at < 0:
        return None
    name, sep, port = msg[at + len(_SPAWN) :].rpartition(" on port ")
    if not sep or not (port.isascii() and port.isdigit()) or len(port) > 5:
        return None
    return model_name(name), int(port)


def read_exit(msg: str) -> tuple[str, str] | None:
    """`... instance name=NAME exited with status N` -> (NAME, N)."""
    head, sep, status = msg.rpartition(_INSTANCE_EXIT)
    at = head.find("instance name=")
    digits = status[1:] if status[:1] == "-" else status
    if not sep or at < 0 or not (digits.isascii() and digits.isdigit()) or len(digits) > 10:
        return None
    return model_name(head[at + len("instance name=") :]), status
