"""What a problem or a shown value may say of a config: secrets never, unprintable text escaped.

A key that may hold a secret (a password pasted by mistake, key material) never has its value
echoed: a problem still names the key, its line and what it must be. A key that names a secret
beyond the names of the keys that may hold one is not shown either (in a flow mapping, a missed
colon makes one key of `{password_file hunter2}`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

# Keys that would put a secret inline: refused, never read.
SECRET_KEYS = frozenset({"password", "passphrase", "secret", "token"})
# Keys whose bad value may be a secret pasted by mistake (a password, key material): never
# echoed in a problem (the problem still names the key, its line and what it must be), nor
# shown inside a value that holds them (`show`).
MAY_HOLD_A_SECRET = frozenset(
    {"password_env", "password_file", "passphrase_env", "passphrase_file", "client_keys"}
)
# Keys of the web config (web/webconfig.py) whose values `show` never shows either: a private
# key's PEM text, the users' bcrypt hashes.
VALUES_NOT_SHOWN = frozenset({"key", "basic_auth_users"})
# The variables systemd sets for a service (systemd.exec(5)): public names, so a problem of a key
# that may hold a secret names them; any other `$NAME` there may be the tail of a password.
SERVICE_VARIABLES = frozenset(
    {
        "CREDENTIALS_DIRECTORY",
        "RUNTIME_DIRECTORY",
        "STATE_DIRECTORY",
        "CACHE_DIRECTORY",
        "LOGS_DIRECTORY",
        "CONFIGURATION_DIRECTORY",
        "HOME",
    }
)
NOT_SHOWN = "<not shown>"


def names_a_secret(key: object) -> bool:
    """Whether `key`'s value may be a secret; `key` may be one too: in a flow mapping, a missed
    colon makes one key of `{password_file hunter2}`."""
    if not isinstance(key, str):
        return False
    low = key.lower()
    return (
        key in MAY_HOLD_A_SECRET
        or low in SECRET_KEYS
        or any(word in low for word in ("password", "passphrase", "secret"))
    )


def key_shown(key: object) -> bool:
    """Whether a problem may show `key` itself: any key but one that mentions a secret beyond
    the names of the keys that may hold one."""
    return not names_a_secret(key) or key in MAY_HOLD_A_SECRET or str(key).lower() in SECRET_KEYS


def printable(text: str) -> str:
    """`text` with its unprintable characters escaped: a key path from the config's keys, a
    path from its values, stays on the problem's one line."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class _Shown(str):
    """A piece of `show`'s text, as opposed to a value still to be shown."""


def show(value: Any, limit: int = 60) -> str:
    """`repr(value)` cut to `limit` characters, but with the values of keys that may hold a secret
    (at any depth) as <not shown>. Built piece by piece, without recursion: a deep or huge value
    costs what is shown."""
    text = ""
    for piece in _repr_pieces(value):
        text += piece
        if len(text) > limit:
            return text[: limit - 3] + "..."
    return text


_DONE = object()


def _repr_pieces(value: Any) -> Iterator[str]:
    todo: list[Iterator[Any]] = [iter([value])]
    while todo:
        item = next(todo[-1], _DONE)
        if item is _DONE:
            todo.pop()
        elif isinstance(item, _Shown):
            yield item
        elif isinstance(item, dict):
            todo.append(_entry_pieces(item))
        elif isinstance(item, list | tuple):
            todo.append(_item_pieces(item))
        else:
            yield repr(item)


def _entry_pieces(d: dict[Any, Any]) -> Iterator[Any]:
    yield _Shown("{")
    for i, (key, value) in enumerate(d.items()):
        shown = repr(key) if key_shown(key) else NOT_SHOWN
        yield _Shown(f"{', ' if i else ''}{shown}: ")
        yield _Shown(NOT_SHOWN) if names_a_secret(key) or key in VALUES_NOT_SHOWN else value
    yield _Shown("}")


def _item_pieces(items: list[Any] | tuple[Any, ...]) -> Iterator[Any]:
    tuple_ = isinstance(items, tuple)
    yield _Shown("(" if tuple_ else "[")
    for i, item in enumerate(items):
        if i:
            yield _Shown(", ")
        yield item
    yield _Shown(",)" if tuple_ and len(items) == 1 else ")" if tuple_ else "]")
