"""C2PA Content Credentials on outputs, read back with c2pa-python and by `launch.py verify`.

Outputs are made through `pipeline.run` with an identity processor (runs no model) on generated media, and
through `cli.main` with a real processor where the CLI's own path (flags, `run --job` replay) is under test.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import stat
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import c2pa
import numpy as np
import pytest
from conftest import ROOT
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from PIL import Image

import cli
from engine import media as video
from engine.core.errors import InvalidInput
from engine.core.types import Frame
from engine.job.processor import FrameContext, FrameProcessor, ProcessorOptions
from engine.job.settings import Job
from engine.media import demo
from engine.models.runtime import Runtime
from engine.provenance import credentials, keys, verify
from engine.run import pipeline

TRAINED = "http://cv.iptc.org/newscodes/digitalsourcetype/trainedAlgorithmicMedia"


class Same(FrameProcessor[ProcessorOptions]):
    """Returns its frames unchanged."""

    id = "same"
    title = "Same"
    Options = ProcessorOptions

    def __init__(self) -> None:
        super().__init__(ProcessorOptions(), None)  # type: ignore[arg-type]  # runs no model

    def process(self, frames: Sequence[Frame], ctxs: Sequence[FrameContext]) -> list[Frame]:
        return list(frames)


def picture(path: Path, seed: int = 0, size: tuple[int, int] = (96, 64)) -> Path:
    rng = np.random.default_rng(seed)
    Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)).save(path)
    return path


def run_same(target: Path, output: Path, sources: Sequence[Path] = (), **kwargs: Any) -> pipeline.RunReport:
    raw = {"processors": ["same"], "target": str(target), "output": str(output), "sources": [str(s) for s in sources]}
    job = Job.parse(raw, {"same": Same})
    return pipeline.run(job, [Same()], Runtime(job.runtime), **kwargs)


def active(path: Path) -> tuple[str, dict[str, Any], list[dict[str, Any]]]:
    """The validation state, the active manifest and the validation failures c2pa-python reports for `path`."""
    with c2pa.Reader(str(path)) as reader:
        failures = (reader.get_validation_results() or {}).get("activeManifest", {}).get("failure", [])
        return reader.get_validation_state() or "", reader.get_active_manifest() or {}, failures


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def flip_middle_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return demo.make_clip(tmp_path_factory.mktemp("clip") / "clip.mp4", width=64, height=48, count=12, fps=12)


def test_an_image_output_carries_a_valid_manifest_with_processors_and_ingredient_hashes(tmp_path: Path) -> None:
    target, source = picture(tmp_path / "private-name.png", 1), picture(tmp_path / "someone.jpg", 2)
    output = tmp_path / "out.png"
    run_same(target, output, [source])
    state, manifest, failures = active(output)
    # Valid: signature and hashes hold; the installation's CA is on no trust list c2pa-python knows.
    assert state == "Valid"
    assert [f["code"] for f in failures] == ["signingCredential.untrusted"]
    assert manifest["claim_generator_info"][0]["name"] == "facestudio"
    assert manifest["claim_generator_info"][0]["version"] == pipeline.VERSION
    (actions,) = [a["data"]["actions"] for a in manifest["assertions"] if a["label"] == "c2pa.actions.v2"]
    assert [a["action"] for a in actions] == ["c2pa.opened", "c2pa.edited"]
    assert actions[1]["digitalSourceType"] == TRAINED
    assert actions[1]["parameters"]["processors"] == ["same"]
    assert actions[1]["softwareAgent"] == {"name": "facestudio", "version": pipeline.VERSION}
    ingredients = {i["title"]: i for i in manifest["ingredients"]}
    assert ingredients["target"]["relationship"] == "parentOf"
    assert ingredients["target"]["metadata"]["org.facestudio.sha256"] == sha256(target)
    assert ingredients["source 1"]["relationship"] == "inputTo"
    assert ingredients["source 1"]["metadata"]["org.facestudio.sha256"] == sha256(source)
    (job,) = [a["data"] for a in manifest["assertions"] if a["label"] == credentials.ASSERTION]
    assert job["synthetic"] is True and list(job["processors"]) == ["same"] and job["watermark"] is False
    # Inputs by hash, never by path or name; no thumbnail of the source face travels with the output.
    with c2pa.Reader(str(output)) as reader:
        everything = reader.json()
    assert str(tmp_path) not in everything and "private-name" not in everything and "someone" not in everything
    assert "thumbnail" not in manifest and all("thumbnail" not in i for i in manifest["ingredients"])


@pytest.mark.parametrize("suffix", [".mp4", ".mov", ".jpg", ".webp", ".tif"])
def test_every_format_that_can_carry_credentials_gets_them(clip: Path, tmp_path: Path, suffix: str) -> None:
    # An image output keeps its target's format.
    target = clip if suffix in (".mp4", ".mov") else picture(tmp_path / f"in{suffix}")
    output = tmp_path / f"out{suffix}"
    report = run_same(target, output)
    state, manifest, _ = active(output)
    assert state == "Valid" and manifest["title"] == output.name
    assert report.provenance is not None and report.provenance["credentials"]["signed"] is True
    # The rest of the output is what it was: every frame and the synthetic tags.
    assert video.probe(output).frame_count == (12 if suffix in (".mp4", ".mov") else 1)


def test_the_sidecar_records_what_was_signed(tmp_path: Path) -> None:
    target = picture(tmp_path / "in.png")
    output = tmp_path / "out.png"
    run_same(target, output)
    record = json.loads(pipeline.sidecar_path(output).read_text())["provenance"]
    assert record["credentials"]["signed"] is True
    assert record["credentials"]["key"] == "this installation (self-issued)"
    assert "facestudio signer" in record["credentials"]["signer"]
    assert record["ingredients"] == [{"title": "target", "sha256": sha256(target)}]
    assert record["watermark"] is False and record["content_check"] is None


@pytest.mark.parametrize("kind", ["image", "video"])
def test_a_changed_byte_makes_verify_report_tampered(
    clip: Path, tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / ("out.png" if kind == "image" else "out.mp4")
    run_same(picture(tmp_path / "in.png", 3, (160, 120)) if kind == "image" else clip, output)
    assert cli.main(["verify", str(output)]) == 0
    assert "Content Credentials: valid" in capsys.readouterr().out
    flip_middle_byte(output)
    assert cli.main(["verify", str(output)]) == 2
    out = capsys.readouterr().out
    assert "Content Credentials: INVALID" in out
    assert ("dataHash.mismatch" if kind == "image" else "bmffHash.mismatch") in out


def test_verify_prints_who_what_when_in_one_screen(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = picture(tmp_path / "in.png")
    output = tmp_path / "out.png"
    run_same(target, output, [picture(tmp_path / "face.png", 5)])
    assert cli.main(["verify", str(output)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert len(lines) <= 24
    assert "signed with this installation's own key" in out
    assert any(line.startswith("  who:   facestudio signer, facestudio installation ") for line in lines)
    assert f"  what:  facestudio {pipeline.VERSION}: c2pa.opened, c2pa.edited — AI-generated" in lines
    assert "  with:  same" in lines
    assert f"  from:  target (parentOf) sha256 {sha256(target)}" in lines
    assert any(line.startswith("  when:  20") and "no trusted timestamp" in line for line in lines)
    assert "tags: synthetic=true, generator=facestudio" in out
    assert cli.main(["verify", str(output), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["credentials"] == "valid" and data["mine"] is True and data["processors"] == ["same"]


def test_verify_reads_credentials_made_by_another_tool(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chain, key = user_certificate(tmp_path, "Example Camera Co")
    photo = picture(tmp_path / "photo.jpg", 7)
    definition = {
        "claim_generator_info": [{"name": "examplecam", "version": "2.1"}],
        "title": "photo.jpg",
        "assertions": [
            {
                "label": "c2pa.actions.v2",
                "data": {"actions": [{"action": "c2pa.created", "digitalSourceType": "http://cv.iptc.org/newscodes/digitalsourcetype/digitalCapture"}]},
            }
        ],
    }  # fmt: skip
    signed = tmp_path / "signed.jpg"
    signing = keys.load(chain, key)
    with open(photo, "rb") as source, open(signed, "w+b") as dest:
        credentials._sign_stream(definition, signing, "image/jpeg", source, dest)
    assert cli.main(["verify", str(signed)]) == 0
    out = capsys.readouterr().out
    assert "Content Credentials: valid" in out and "a signer on no trust list known here" in out
    assert "  what:  examplecam 2.1: c2pa.created — captured by a camera" in out
    assert "Example Camera Co" in out


def test_a_file_without_credentials(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["verify", str(picture(tmp_path / "plain.png"))]) == 0
    out = capsys.readouterr().out
    assert "Content Credentials: none" in out and "watermark: not found" in out
    assert cli.main(["verify", str(tmp_path / "missing.png")]) == 2
    assert capsys.readouterr().err == "error: missing.png does not exist\n"


def test_credentials_survive_run_job_replay(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = picture(tmp_path / "in.png", 11, (256, 192))
    first, replay = tmp_path / "first.png", tmp_path / "replay.png"
    common = ["--processors", "frame_enhancer", "--set", "frame_enhancer.scale=1", "--set", "video.watermark=true"]
    assert cli.main(["run", "--target", str(target), "--output", str(first), *common, "--yes"]) == 0
    assert cli.main(["run", "--job", f"{first}.job.json", "--output", str(replay), "--yes"]) == 0
    capsys.readouterr()
    reports = [verify.inspect(path) for path in (first, replay)]
    for report in reports:
        assert report.credentials == "valid" and report.mine
        assert report.processors == ("frame_enhancer",)
        assert report.watermark is not None and report.watermark["found"]
        assert report.ingredients == ({"title": "target", "relationship": "parentOf", "sha256": sha256(target)},)
    assert reports[0].signer == reports[1].signer
    assert json.loads(Path(f"{replay}.job.json").read_text())["job"]["video"]["watermark"] is True


def user_certificate(folder: Path, org: str = "Example Studio", *, ca_as_signer: bool = False) -> tuple[Path, Path]:
    """A user's CA-issued ES256 signing certificate chain and key (PEM files in `folder`)."""
    now = datetime.datetime.now(datetime.UTC)

    def name(cn: str) -> x509.Name:
        return x509.Name(
            [x509.NameAttribute(NameOID.COMMON_NAME, cn), x509.NameAttribute(NameOID.ORGANIZATION_NAME, org)]
        )

    def builder(subject: x509.Name, issuer: x509.Name, public: Any) -> x509.CertificateBuilder:
        return (
            x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=30))
        )  # fmt: skip

    ca_key = ec.generate_private_key(ec.SECP256R1())
    usage = {k: False for k in ("content_commitment", "key_encipherment", "data_encipherment", "key_agreement",
                                "encipher_only", "decipher_only")}  # fmt: skip
    ca = (
        builder(name(f"{org} CA"), name(f"{org} CA"), ca_key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=ca_as_signer, key_cert_sign=True, crl_sign=True, **usage),
                       critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        builder(name(f"{org} signer"), ca.subject, key.public_key())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=False, crl_sign=False, **usage),
                       critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.EMAIL_PROTECTION]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    pem = serialization.Encoding.PEM
    chain_path, key_path = folder / f"{org}.pem", folder / f"{org}.key"
    signer_cert, signer_key = (ca, ca_key) if ca_as_signer else (leaf, key)
    chain_path.write_bytes(signer_cert.public_bytes(pem) + (b"" if ca_as_signer else ca.public_bytes(pem)))
    key_path.write_bytes(signer_key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return chain_path, key_path


def test_a_users_own_key_signs_when_given(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chain, key = user_certificate(tmp_path)
    target, output = picture(tmp_path / "in.png", 4, (48, 32)), tmp_path / "out.png"
    args = ["run", "--target", str(target), "--output", str(output), "--processors", "frame_enhancer",
            "--set", "frame_enhancer.scale=1", "--sign-cert", str(chain), "--sign-key", str(key), "--yes"]  # fmt: skip
    assert cli.main(args) == 0
    capsys.readouterr()
    report = verify.inspect(output)
    assert report.credentials == "valid" and not report.mine
    assert report.signer == "Example Studio signer, Example Studio"
    record = json.loads(Path(f"{output}.job.json").read_text())["provenance"]["credentials"]
    assert record["key"] == "user" and "CN=Example Studio signer" in record["signer"]
    # The installation's own key is never made when the user's signs.
    assert not keys.home().exists()


def test_the_signing_settings_in_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    chain, key = user_certificate(tmp_path, "Server Org")
    monkeypatch.setenv(keys.ENV_CERT, str(chain))
    monkeypatch.setenv(keys.ENV_KEY, str(key))
    output = tmp_path / "out.png"
    run_same(picture(tmp_path / "in.png"), output)
    assert verify.inspect(output).signer == "Server Org signer, Server Org"
    monkeypatch.delenv(keys.ENV_KEY)
    with pytest.raises(InvalidInput, match=f"^{keys.ENV_CERT} and {keys.ENV_KEY} go together"):
        keys.resolve()


@pytest.mark.parametrize(
    "problem, message",
    [
        ("other key", r"^--sign-key Example Studio\.key is not the key of the first certificate in --sign-cert "),
        ("ca signer", r"^the signing certificate .* cannot sign Content Credentials: "),
        ("missing", r"^--sign-key nowhere\.key does not exist$"),
        ("half", r"^--sign-cert and --sign-key go together"),
    ],
)
def test_an_unusable_key_fails_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], problem: str, message: str
) -> None:
    chain, key = user_certificate(tmp_path, ca_as_signer=problem == "ca signer")
    if problem == "other key":
        other = ec.generate_private_key(ec.SECP256R1())
        pem = serialization.Encoding.PEM
        key.write_bytes(other.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    flags = ["--sign-cert", str(chain), "--sign-key", str(key)]
    if problem == "missing":
        flags[-1] = str(tmp_path / "nowhere.key")
    elif problem == "half":
        flags = flags[:2]
    output = tmp_path / "out.png"
    target = picture(tmp_path / "in.png")
    code = cli.main(["run", "--target", str(target), "--output", str(output), "--processors", "frame_enhancer",
                     "--set", "frame_enhancer.scale=1", *flags, "--yes"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("error: ") and len(err.splitlines()) == 1
    import re

    assert re.search(message, err.removeprefix("error: ")), err
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".png") == ["in.png"]


def test_a_failed_signing_is_a_typed_error_and_leaves_nothing(
    tmp_path: Path, clip: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = credentials._sign_stream
    calls = []

    def fail_on_the_output(definition: Any, key: Any, mime: str, source: Any, dest: Any) -> None:
        calls.append(definition["title"])
        if definition["title"] != "key check":
            raise c2pa.C2paError("Signature: the signing device went away")
        real(definition, key, mime, source, dest)

    monkeypatch.setattr(credentials, "_sign_stream", fail_on_the_output)
    for target, output in ((picture(tmp_path / "in.png"), tmp_path / "out.png"), (clip, tmp_path / "out.mp4")):
        with pytest.raises(
            credentials.SigningFailed, match=f"^signing the Content Credentials of {output.name} failed"
        ):
            run_same(target, output)
        assert not output.exists() and not pipeline.sidecar_path(output).exists()
    assert calls == ["key check", "out.png", "key check", "out.mp4"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.png"]  # no partial or signing temp file left


def test_a_format_without_c2pa_is_written_and_says_so(tmp_path: Path, clip: Path) -> None:
    # Matroska has no C2PA binding (a BMP target is written as PNG, which has one).
    for output in (tmp_path / "out.mkv",):
        report = run_same(clip, output)
        assert output.is_file()
        assert report.provenance is not None
        assert report.provenance["credentials"] == {
            "signed": False,
            "reason": f"{output.suffix} files cannot carry C2PA Content Credentials",
        }
        credentials = [note for note in report.notes if note.startswith("credentials:")]
        assert credentials == [
            f"credentials: none: {output.suffix} files cannot carry C2PA Content Credentials "
            "(use .png/.jpg/.webp/.tif or .mp4/.mov)"
        ]
        assert verify.inspect(output).credentials == "none"


def test_processes_that_start_together_sign_with_one_installation_key() -> None:
    """Six runs started at the same moment on a fresh installation: each gets a key, all the same one."""
    start = time.time() + 2.0
    code = (
        "import sys, time; from engine.provenance import keys; time.sleep(max(0.0, float(sys.argv[1]) - time.time()));"
        " print(keys.installation_key().subject)"
    )
    runs = [
        subprocess.Popen([sys.executable, "-c", code, str(start)], cwd=ROOT, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
        for _ in range(6)
    ]  # fmt: skip
    results = [(*run.communicate(timeout=60), run.returncode) for run in runs]
    assert all(code == 0 for _, _, code in results), results
    assert len({out for out, _, _ in results}) == 1
    assert sorted(p.name for p in keys.home().iterdir()) == ["ca.pem", "signer.key", "signer.pem"]
    assert sorted(p.name for p in keys.home().parent.iterdir()) == ["provenance"]


def test_the_installation_key_is_made_once_and_private() -> None:
    assert not keys.home().exists()
    first = keys.installation_key()
    second = keys.installation_key()
    assert first == second and first.origin == "installation" and first.anchor is not None
    mode = stat.S_IMODE(os.stat(keys.home() / "signer.key").st_mode)
    assert mode == 0o600
    assert sorted(p.name for p in keys.home().iterdir()) == ["ca.pem", "signer.key", "signer.pem"]
    leaf = x509.load_pem_x509_certificate(first.chain)
    assert leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
