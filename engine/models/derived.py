"""Records of derived model files: what a conversion or an export was made from, that only this installation can
write.

A derived file (an ONNX graph converted into the cache from verified ncnn or PyTorch weights; an ONNX export in
the models folder) has no sha256 in the manifest to be checked against. Its record, `<file>.record.json`, holds
the content key of the verified source it was made from (its sha256), the converter version, the derived file's
own sha256, and an HMAC-SHA256 of those under this installation's key. The key lives away from both folders:
`$FACESTUDIO_INTEGRITY_KEY` when set (a read-only secret every pod of a deployment mounts), else
`integrity.key` in facestudio's home (`$FACESTUDIO_HOME`, default ~/.config/facestudio), made on first use with
mode 0600.

What it protects against: a derived file changed after it was made, by a flipped bit or by anyone who can write
the cache or models folder but not read the key: rewriting the file and its record to match no longer passes,
since the record cannot be signed without the key. A record this key did not sign (forged, made elsewhere or by
an older facestudio) is not trusted: a cached conversion is then made again from its verified source (a cache is
always safe to rebuild); an export is refused until it is exported again here. What it does not protect against:
someone who can read the key (the user's own account), who could as well change the code.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from pathlib import Path
from typing import Literal

from engine.core.home import home
from engine.models.fetch import sha256_file

KEY_ENV = "FACESTUDIO_INTEGRITY_KEY"
RECORD_SUFFIX = ".record.json"
_KEY_BYTES = 32

# ok: the file is what its record says it was made as; tampered: a record this installation signed, for other
# bytes (the file changed after it was made); unrecorded: no record this key signed for this source and converter.
Status = Literal["ok", "tampered", "unrecorded"]


def key_path() -> Path:
    """Where this installation's key is (see the module docstring)."""
    override = os.environ.get(KEY_ENV)
    if override:
        return Path(override).expanduser()
    return home() / "integrity.key"


def record_path(derived: Path) -> Path:
    return derived.with_name(derived.name + RECORD_SUFFIX)


def record(derived: Path, source: str, converter: int, digest: str | None = None) -> None:
    """Sign and write the record of `derived`, made from the file with content key `source` by converter version
    `converter` (`digest`: its sha256 when the caller has it). Written atomically beside it."""
    digest = digest or sha256_file(derived)
    fields = {"source": source, "converter": converter, "sha256": digest}
    data = {**fields, "mac": _mac(derived.name, fields, _key(create=True))}
    path = record_path(derived)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.part")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="ascii")
    os.replace(tmp, path)


def check(derived: Path, source: str, converter: int | None) -> tuple[Status, str]:
    """Whether `derived` is what this installation made from `source` (`converter`: the version it must have been
    made with; None: any, for an export). Returns the status and, for `tampered`, the file's actual sha256."""
    key = _key(create=False)
    try:
        data = json.loads(record_path(derived).read_text(encoding="ascii"))
        fields = {"source": str(data["source"]), "converter": int(data["converter"]), "sha256": str(data["sha256"])}
        mac = str(data["mac"])
    except (OSError, ValueError, KeyError, TypeError):
        return "unrecorded", ""
    if key is None or not hmac.compare_digest(mac, _mac(derived.name, fields, key)):
        return "unrecorded", ""
    if fields["source"] != source or (converter is not None and fields["converter"] != converter):
        return "unrecorded", ""
    actual = sha256_file(derived)
    return ("ok", actual) if hmac.compare_digest(actual, fields["sha256"]) else ("tampered", actual)


def expected_sha256(derived: Path) -> str:
    """The sha256 the record of `derived` holds ("" without a readable record)."""
    try:
        return str(json.loads(record_path(derived).read_text(encoding="ascii"))["sha256"])
    except (OSError, ValueError, KeyError, TypeError):
        return ""


def _mac(name: str, fields: dict[str, object], key: bytes) -> str:
    message = json.dumps([name, fields["source"], fields["converter"], fields["sha256"]]).encode("utf-8")
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def _key(create: bool) -> bytes | None:
    """This installation's key; made (32 random bytes, owner-only) when `create` and there is none yet."""
    path = key_path()
    try:
        key = path.read_bytes()
        if len(key) >= _KEY_BYTES:
            return key
    except OSError:
        pass
    if not create:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # made by another process meanwhile
        return path.read_bytes()
    with os.fdopen(fd, "wb") as f:
        f.write(secrets.token_bytes(_KEY_BYTES))
    return path.read_bytes()
