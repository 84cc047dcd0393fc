"""C2PA Content Credentials: the signed manifest embedded in an output file (c2pa-python).

What is signed: who made the file (facestudio and its version), what was done (`c2pa.opened` the target,
`c2pa.edited` with the processors, digital source type trainedAlgorithmicMedia), from what (the target and the
source images as ingredients, named "target" and "source N" with their sha256: never their paths or file names),
and facestudio's own assertion `org.facestudio.job` (the processors with their models and the models' sha256,
the content check, the watermark). The signature covers the file's bytes too (a data hash for images, a BMFF
hash for MP4/MOV), so any later change of the file breaks it.
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import c2pa

from engine.core.errors import FacestudioError, InvalidInput
from engine.provenance.keys import SigningKey

# Output extensions C2PA can carry inside the file, with their MIME types. Not here: .bmp (no metadata box at all)
# and .mkv (Matroska has no C2PA binding): those outputs are written without credentials (see `supports`).
FORMATS: Mapping[str, str] = {
    ".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".webp": "image/webp", ".tif": "image/tiff",
    ".tiff": "image/tiff", ".mp4": "video/mp4", ".m4v": "video/mp4", ".mov": "video/quicktime",
}  # fmt: skip
TRAINED_ALGORITHMIC_MEDIA = "http://cv.iptc.org/newscodes/digitalsourcetype/trainedAlgorithmicMedia"
ASSERTION = "org.facestudio.job"
_ALGORITHMS: Mapping[str, c2pa.C2paSigningAlg] = {
    "es256": c2pa.C2paSigningAlg.ES256, "es384": c2pa.C2paSigningAlg.ES384, "es512": c2pa.C2paSigningAlg.ES512,
    "ed25519": c2pa.C2paSigningAlg.ED25519, "ps256": c2pa.C2paSigningAlg.PS256,
}  # fmt: skip
# No thumbnails: an ingredient's would put a picture of the source face inside every output.
_SETTINGS = {"builder": {"thumbnail": {"enabled": False}}}


class SigningFailed(FacestudioError):
    """The output could not be signed (exit 1); it was not written."""

    exit_code = 1


@dataclass(frozen=True)
class Ingredient:
    """An input of the job as the manifest names it: `title` ("target", "source 1" …), its MIME type (None when
    C2PA knows none for it), its sha256 (hex) and relationship (`parentOf` the target, `inputTo` a source)."""

    title: str
    format: str | None
    sha256: str
    relationship: str


def supports(path: Path) -> bool:
    """Whether C2PA credentials can be embedded in a file with `path`'s extension."""
    return path.suffix.lower() in FORMATS


def manifest(
    title: str,
    version: str,
    processors: Sequence[str],
    ingredients: Sequence[Ingredient],
    when: str,
    job: Mapping[str, Any],
) -> dict[str, Any]:
    """The manifest definition for an output called `title`: made by facestudio `version` at `when` (ISO 8601,
    UTC) with `processors` (ids, in chain order) from `ingredients` (the target first); `job` is the content of
    facestudio's own assertion. Without a target (no `parentOf` ingredient first: a live camera's recording) the
    file is `c2pa.created` from the sources instead of `c2pa.opened` and `c2pa.edited`."""
    target = ingredients[0] if ingredients and ingredients[0].relationship == "parentOf" else None
    sources = ingredients[1:] if target is not None else ingredients
    entries = [*([] if target is None else [_ingredient(target, "target")]),
               *(_ingredient(s, f"source{i}") for i, s in enumerate(sources, 1))]  # fmt: skip
    edited: dict[str, Any] = {
        "action": "c2pa.edited" if target is not None else "c2pa.created",
        "when": when,
        "digitalSourceType": TRAINED_ALGORITHMIC_MEDIA,
        "softwareAgent": {"name": "facestudio", "version": version},
        "description": f"processed by facestudio with {', '.join(processors)}",
        "parameters": {"processors": list(processors)},
    }
    opened = (
        [] if target is None else [{"action": "c2pa.opened", "when": when, "parameters": {"ingredientIds": ["target"]}}]
    )
    if sources:
        edited["parameters"]["ingredientIds"] = [f"source{i}" for i in range(1, len(sources) + 1)]
    return {
        "claim_generator_info": [{"name": "facestudio", "version": version}],
        "title": title,
        "ingredients": entries,
        "assertions": [
            {
                "label": "c2pa.actions.v2",
                "data": {
                    "actions": [*opened, edited],
                },
            },
            {"label": ASSERTION, "data": dict(job)},
        ],
    }


def _ingredient(item: Ingredient, label: str) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "title": item.title,
        "relationship": item.relationship,
        "label": label,
        "metadata": {"org.facestudio.sha256": item.sha256},
    }
    if item.format is not None:
        entry["format"] = item.format
    return entry


def sign(path: Path, definition: Mapping[str, Any], key: SigningKey) -> None:
    """Embed the signed manifest `definition` in the file at `path` (its extension in FORMATS), in place: the
    signed copy is written beside it and renamed over it, so `path` is either the unsigned or the signed file.
    Raises SigningFailed (nothing signed, the signed copy removed)."""
    signed = path.with_name(f"{path.stem}.signing{path.suffix}")
    name = definition.get("title") or path.name  # the output's name (`path` may be its temp name)
    try:
        with open(path, "rb") as source, open(signed, "w+b") as dest:
            _sign_stream(definition, key, FORMATS[path.suffix.lower()], source, dest)
        os.replace(signed, path)
    except c2pa.C2paError as exc:
        raise SigningFailed(f"signing the Content Credentials of {name} failed: {_reason(exc)}") from exc
    except OSError as exc:
        raise SigningFailed(f"signing the Content Credentials of {name} failed: {exc.strerror}") from exc
    finally:
        signed.unlink(missing_ok=True)


def check_key(key: SigningKey) -> None:
    """Sign a tiny image in memory with `key`: a certificate C2PA refuses (a CA certificate, a missing key usage
    …) fails here, before a job starts, instead of after it rendered. InvalidInput saying why."""
    from PIL import Image

    image = io.BytesIO()
    Image.new("RGB", (8, 8)).save(image, format="PNG")
    image.seek(0)
    created = {"action": "c2pa.created", "digitalSourceType": TRAINED_ALGORITHMIC_MEDIA}
    definition = {
        "claim_generator_info": [{"name": "facestudio"}],
        "title": "key check",
        "assertions": [{"label": "c2pa.actions.v2", "data": {"actions": [created]}}],
    }
    try:
        _sign_stream(definition, key, "image/png", image, io.BytesIO())
    except c2pa.C2paError as exc:
        who = "this installation's key" if key.origin == "installation" else f"the signing certificate {key.subject}"
        raise InvalidInput(f"{who} cannot sign Content Credentials: {_reason(exc)}") from exc


def _sign_stream(definition: Mapping[str, Any], key: SigningKey, mime: str, source: Any, dest: Any) -> None:
    context = c2pa.Context.from_dict(_SETTINGS)
    info = c2pa.C2paSignerInfo(_ALGORITHMS[key.alg], key.chain, key.key, None)
    with c2pa.Signer.from_info(info) as signer, c2pa.Builder(dict(definition), context=context) as builder:
        builder.sign(signer, mime, source, dest)


def _reason(exc: c2pa.C2paError) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
