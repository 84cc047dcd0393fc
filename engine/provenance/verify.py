"""`launch.py verify FILE`: what a file says about its own origin, checked, in one screen.

Reads and validates the file's C2PA Content Credentials (anyone's: facestudio's, a camera's, an editor's) with
c2pa-python: whether the signature and the hashes of the file's bytes hold (a changed byte breaks them), who signed
(the certificate; this installation's own key is recognised), what was done (actions, AI-generated or not,
processors), from what (ingredients) and when (as the signer claims it, or a trusted timestamp when there is one).
Then the facestudio watermark (engine/provenance/watermark.py) and the synthetic-media tags of the container, and
the job sidecar beside the file (`<file>.job.json`) against the sha256 the signature recorded of it: given the
file or its sidecar, either way round, an edited sidecar is named. An empty file or one that is no media (and
carries no credentials) is refused as such, not reported as tampered with.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import c2pa

from engine import media as video
from engine.core.errors import FacestudioError, InvalidInput
from engine.provenance import keys, watermark
from engine.provenance.credentials import ASSERTION
from engine.provenance.seal import sidecar_digest

SIDECAR = ".job.json"

log = logging.getLogger(__name__)

State = Literal["valid", "invalid", "none"]
# Failure codes that do not mean the file changed: the signer is simply not on a trust list known here.
_UNTRUSTED = frozenset({"signingCredential.untrusted"})
_SOURCE_TYPES = {
    "trainedAlgorithmicMedia": "AI-generated",
    "compositeWithTrainedAlgorithmicMedia": "partly AI-generated",
    "algorithmicMedia": "algorithmically generated",
    "digitalCapture": "captured by a camera",
}


@dataclass(frozen=True)
class Report:
    """What `verify` found. `credentials`: valid (signature and hashes hold), invalid (tampered or damaged:
    `problems` says why) or none. `mine`: the signer chains to this installation's CA (the only trust anchor
    verify knows), i.e. this installation signed it."""

    file: str
    kind: str | None
    credentials: State
    problems: tuple[str, ...] = ()
    mine: bool = False
    signer: str | None = None
    algorithm: str | None = None
    generator: str | None = None
    actions: tuple[str, ...] = ()
    source_type: str | None = None
    processors: tuple[str, ...] = ()
    ingredients: tuple[dict[str, str], ...] = ()
    when: str | None = None
    timestamped: bool = False
    manifests: int = 0
    facestudio: dict[str, Any] | None = None
    watermark: dict[str, Any] | None = None
    tags: dict[str, str] = field(default_factory=dict)
    # The job sidecar beside the file: its name, and `state`: "matches" (the signature recorded its sha256),
    # "edited" (it differs from what was signed), "unrecorded" (the credentials record no sidecar), "unsigned" (the
    # file carries no valid credentials to check it against), "none" (there is no sidecar).
    sidecar: dict[str, str] | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)


def inspect(path: Path) -> Report:
    """Verify `path`, a media file or its job sidecar (`<file>.job.json`: the file beside it is verified, and the
    sidecar checked against it). InvalidInput when it does not exist, is not a file, is empty, is a sidecar
    without its file, or is no media and carries no credentials."""
    path = Path(path)
    if not path.is_file():
        raise InvalidInput(f"{path.name} does not exist" if not path.exists() else f"{path.name} is not a file")
    if path.name.endswith(SIDECAR) and path.name != SIDECAR:
        media = path.with_name(path.name[: -len(SIDECAR)])
        if not media.is_file():
            raise InvalidInput(
                f"{path.name} is a job sidecar, but its file {media.name} is not beside it: nothing to check it "
                f"against (verify {media.name} where it is)"
            )
        path = media
    if path.stat().st_size == 0:
        raise InvalidInput(f"{path.name} is empty (0 bytes): nothing was ever signed in it")
    kind = _kind(path)
    found = _credentials(path)
    if kind is None and found["credentials"] == "none":
        raise InvalidInput(
            f"{path.name} is not a media file (no image or video, and no Content Credentials in it): nothing to verify"
        )
    mark = None
    if kind is not None:
        detection = watermark.detect(path, kind)
        mark = {"found": detection.found, "score": round(detection.z, 2), "threshold": round(detection.threshold, 2),
                "frames": detection.frames}  # fmt: skip
    sidecar = _sidecar(path, found)
    return Report(file=path.name, kind=kind, watermark=mark, tags=_tags(path, kind), sidecar=sidecar, **found)


def _sidecar(path: Path, found: Mapping[str, Any]) -> dict[str, str]:
    """The sidecar beside `path` checked against the sha256 its signed assertion recorded (see `Report.sidecar`)."""
    side = path.with_name(path.name + SIDECAR)
    if not side.is_file():
        return {"file": side.name, "state": "none"}
    if found["credentials"] != "valid":
        return {"file": side.name, "state": "unsigned"}
    recorded = (found.get("facestudio") or {}).get("sidecar_sha256")
    if not recorded:
        return {"file": side.name, "state": "unrecorded"}
    try:
        text = side.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return {"file": side.name, "state": "edited"}
    return {"file": side.name, "state": "matches" if sidecar_digest(text) == recorded else "edited"}


def render(report: Report) -> str:
    """The report as a one-screen text."""
    lines = [f"file: {report.file}" + (f" ({report.kind})" if report.kind else "")]
    if report.credentials == "none":
        lines.append("Content Credentials: none (no C2PA manifest in this file; a re-upload may have stripped it)")
    elif report.credentials == "invalid":
        lines.append("Content Credentials: INVALID — the file was changed after signing, or its manifest is damaged")
        lines += [f"  problem: {p}" for p in report.problems]
    else:
        trust = (
            "this installation's own key (self-issued: proves the file is unchanged since this installation signed"
            " it, not who ran it)"
            if report.mine
            else "a signer on no trust list known here (integrity holds; identity is the certificate's claim)"
        )
        lines.append(f"Content Credentials: valid — signature and content hashes hold; signed with {trust}")
    if report.signer or report.generator:
        algorithm = f", {report.algorithm}" if report.algorithm else ""
        lines.append(f"  who:   {report.signer or 'unknown signer'}{algorithm}")
        what = report.generator or "unknown tool"
        if report.actions:
            what += ": " + ", ".join(report.actions)
        if report.source_type:
            what += f" — {report.source_type}"
        lines.append(f"  what:  {what}")
        if report.processors:
            lines.append(f"  with:  {', '.join(report.processors)}")
        for item in report.ingredients:
            digest = f" sha256 {item['sha256']}" if item.get("sha256") else ""
            lines.append(f"  from:  {item['title']} ({item.get('relationship', 'ingredient')}){digest}")
        if report.when:
            stamp = "trusted timestamp" if report.timestamped else "as the signer states it; no trusted timestamp"
            lines.append(f"  when:  {report.when} ({stamp})")
        if report.manifests > 1:
            lines.append(f"  history: {report.manifests} manifests (earlier tools' credentials, kept as ingredients)")
        checked = (report.facestudio or {}).get("content_check")
        if checked:
            lines.append(
                f"  content check: {checked['mode']}, {len(checked['flagged'])} of {checked['frames_checked']} "
                f"frames flagged by {checked['classifier']['model']} (threshold {checked['threshold']})"
            )
    if report.watermark is not None:
        w = report.watermark
        verdict = "found" if w["found"] else "not found"
        lines.append(
            f"watermark: {verdict} (score {w['score']}, threshold {w['threshold']}, {w['frames']} frame"
            f"{'s' if w['frames'] != 1 else ''} tested)"
        )
    if report.tags:
        lines.append("tags: " + ", ".join(f"{k}={v}" for k, v in report.tags.items()))
    if report.sidecar is not None:
        lines.append(f"sidecar: {report.sidecar['file']} {_SIDECAR_STATES[report.sidecar['state']]}")
    return "\n".join(lines)


_SIDECAR_STATES = {
    "matches": "matches what was signed",
    "edited": "was EDITED after signing (it differs from the sidecar the signature recorded)",
    "unrecorded": "cannot be checked: the credentials record no sidecar (signed by another tool or an older version)",
    "unsigned": "cannot be checked: the file carries no valid Content Credentials",
    "none": "none beside the file",
}


def _kind(path: Path) -> str | None:
    try:
        return video.probe(path).kind
    except FacestudioError as exc:
        log.info("%s is no image or video facestudio reads (%s): no watermark test", path.name, exc)
        return None


def _credentials(path: Path) -> dict[str, Any]:
    anchor = keys.home() / "ca.pem"
    settings: dict[str, Any] = {"verify": {"verify_trust": True}}
    if anchor.is_file():
        settings["trust"] = {"trust_anchors": anchor.read_text(encoding="ascii")}
    try:
        with c2pa.Context.from_dict(settings) as context:
            reader = c2pa.Reader.try_create(str(path), None, None, context)
            if reader is None:
                return {"credentials": "none"}
            with reader:
                state = reader.get_validation_state() or ""
                results = reader.get_validation_results() or {}
                manifest = reader.get_active_manifest() or {}
                count = len(json.loads(reader.json()).get("manifests", {}))
    except c2pa.C2paError as exc:
        text = " ".join(str(exc).split())
        if "NotSupported" in type(exc).__name__ or "not supported" in text.lower():
            return {"credentials": "none"}
        return {"credentials": "invalid", "problems": (f"the manifest cannot be read: {text}",)}
    failures = [f for f in (results.get("activeManifest") or {}).get("failure", []) if f.get("code") not in _UNTRUSTED]
    problems = tuple(f"{f.get('code')}: {f.get('explanation', '')}".rstrip(": ") for f in failures)
    invalid = bool(problems) or state == "Invalid"
    return {
        "credentials": "invalid" if invalid else "valid",
        "problems": problems or (("the manifest does not validate",) if invalid else ()),
        "mine": state == "Trusted",
        "manifests": count,
        **_describe(manifest),
    }


def _describe(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """Who, what, from what and when, from the active manifest."""
    signature = manifest.get("signature_info") or {}
    signer = ", ".join(str(signature[k]) for k in ("common_name", "issuer") if signature.get(k)) or None
    generators = manifest.get("claim_generator_info") or []
    generator = " ".join(str(generators[0].get(k, "")) for k in ("name", "version")).strip() if generators else None
    actions, source_type, processors, when = [], None, (), None
    facestudio = None
    for assertion in manifest.get("assertions") or []:
        label, data = assertion.get("label", ""), assertion.get("data") or {}
        if label.startswith("c2pa.actions"):
            for action in data.get("actions", []):
                actions.append(str(action.get("action", "?")))
                kind = str(action.get("digitalSourceType", "")).rsplit("/", 1)[-1]
                source_type = _SOURCE_TYPES.get(kind, kind or None) if kind else source_type
                when = action.get("when", when)
                processors = tuple((action.get("parameters") or {}).get("processors", processors))
        elif label == ASSERTION:
            facestudio = data
    ingredients = tuple(_ingredient(i) for i in manifest.get("ingredients") or [])
    return {
        "signer": signer,
        "algorithm": str(signature["alg"]).upper() if signature.get("alg") else None,
        "generator": generator or manifest.get("claim_generator"),
        "actions": tuple(actions),
        "source_type": source_type,
        "processors": processors,
        "ingredients": ingredients,
        "when": signature.get("time") or when,
        "timestamped": bool(signature.get("time")),
        "facestudio": facestudio,
    }


def _ingredient(entry: Mapping[str, Any]) -> dict[str, str]:
    out = {"title": str(entry.get("title", "ingredient")), "relationship": str(entry.get("relationship", ""))}
    digest = (entry.get("metadata") or {}).get("org.facestudio.sha256")
    if digest:
        out["sha256"] = str(digest)
    return out


def _tags(path: Path, kind: str | None) -> dict[str, str]:
    """The container's synthetic-media tags (facestudio writes `synthetic` and `generator`)."""
    try:
        found: Mapping[str, str] = (
            video.read_image_metadata(path) if kind == "image" else video.read_video_metadata(path) if kind else {}
        )
    except FacestudioError:
        return {}
    return {k: found[k] for k in ("synthetic", "generator") if k in found}


def exit_code(report: Report) -> int:
    """0 when the credentials hold or there are none, 2 when they are invalid (tampered or damaged) or the sidecar
    beside the file was edited after signing."""
    edited = report.sidecar is not None and report.sidecar["state"] == "edited"
    return 2 if report.credentials == "invalid" or edited else 0
