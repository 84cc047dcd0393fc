"""Files as the user named them: output names from the user's own file names, and no server path in anything a
user sees (messages, results, downloaded sidecars)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# An absolute POSIX path of two or more parts, or a Windows drive path: what a message may leak of the server.
_PATH = re.compile(r"(?<![\w.:/])(?:/[\w.@+~-]+){2,}/?|\b[A-Za-z]:\\(?:[\w.@+~ -]+\\)*[\w.@+~-]*")
_UNSAFE = re.compile(r"[^\w.+-]+")


def plain_name(name: str, fallback: str = "file") -> str:
    """A file name safe on every file system, made from a user's: letters (any script), digits, `.`, `+`, `-`,
    `_`; runs of anything else become `_`; at most 80 characters before the suffix."""
    path = Path(name)
    stem = _UNSAFE.sub("_", path.stem).strip("._") or fallback
    suffix = _UNSAFE.sub("", path.suffix)[:10]
    return stem[:80] + suffix


def output_name(target_name: str, suffix: str, taken: set[str]) -> str:
    """`<target stem>-facestudio<suffix>`, numbered `-2`, `-3` … past the names in `taken`."""
    stem = Path(plain_name(target_name)).stem
    name, n = f"{stem}-facestudio{suffix}", 1
    while name in taken:
        n += 1
        name = f"{stem}-facestudio-{n}{suffix}"
    return name


def scrub(text: str, names: Mapping[str, str]) -> str:
    """`text` with every server path replaced: the paths in `names` (server path → the name the user knows) by
    those names, longest first, then any other absolute path by its last part."""
    for path in sorted(names, key=len, reverse=True):
        text = text.replace(path, names[path])
    return _PATH.sub(lambda m: Path(m.group(0).rstrip("/\\").replace("\\", "/")).name, text)


def scrub_json(value: Any, names: Mapping[str, str]) -> Any:
    """A JSON value with `scrub` applied to every string in it."""
    if isinstance(value, str):
        return scrub(value, names)
    if isinstance(value, list):
        return [scrub_json(v, names) for v in value]
    if isinstance(value, dict):
        return {k: scrub_json(v, names) for k, v in value.items()}
    return value


def scrub_file(path: Path, names: Mapping[str, str]) -> None:
    """Rewrite a JSON file (a job sidecar) with every server path in it replaced (see `scrub`)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(json.dumps(scrub_json(data, names), indent=2) + "\n", encoding="utf-8")
