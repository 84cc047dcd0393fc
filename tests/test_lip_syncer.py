"""The lip syncer on a generated clip: two faces a frame, silence but for a 440 Hz tone burst at a known time, and a
stand-in Wav2Lip graph (the catalogue's signature) whose mouth brightens with the mel window it is given. The
mouths change in the frames whose window holds the burst and nowhere else; trimmed, the burst stays at its time
(not its frame index); a given audio file drives it likewise; both backends; the mel features as MODELS.md §11
gives them; the typed errors and the offline error."""

from __future__ import annotations

import json
import os
import wave
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
import tiny_graphs
from test_face_swapper_models import two_faces, write_clip

import cli
from engine import media as video
from engine.faces.embedded import EmbeddedAnalyser
from engine.media import speech
from engine.models.manifest import Manifest

FPS, SECONDS = 10, 2.0
BURST = (0.8, 1.2)  # seconds of 440 Hz tone in the target's audio
# Frames (by time) whose 0.2 s window holds the burst well inside, and those whose window is clear of it by more
# than the STFT window's half width (25 ms); the two frames at the edges are not judged.
IN_BURST = [0.7, 0.8, 0.9, 1.0, 1.1]
SILENT = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8, 1.9]


def write_wav(path: Path, seconds: float, burst: tuple[float, float], rate: int = 48_000) -> Path:
    t = np.arange(int(seconds * rate)) / rate
    tone = np.where((t >= burst[0]) & (t < burst[1]), 0.6 * np.sin(2 * np.pi * 440 * t), 0.0)
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes((tone * 32767).astype("<i2").tobytes())
    return path


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("lipsync")
    graph = root / "mirror" / "wav2lip_gan_96.onnx"
    tiny_graphs.wav2lip(graph)
    frames = [two_faces() for _ in range(int(SECONDS * FPS))]
    return {
        "root": root,
        "manifest": tiny_graphs.write_manifest(root / "manifest.toml", {"wav2lip_gan_96": graph, "wav2lip_96": graph}),
        "clip": write_clip(root / "burst.mp4", frames, FPS, audio=write_wav(root / "burst.wav", SECONDS, BURST)),
        "mute": write_clip(root / "mute.mp4", frames, FPS),
        "speech": write_wav(root / "speech.wav", SECONDS, (0.3, 0.6)),
    }


@pytest.fixture(scope="module")
def mouths() -> list[tuple[slice, slice]]:
    """The mouth box (rows, columns) of each of the two faces (iBUG points 48–67, grown by 3 px)."""
    boxes = []
    for face in EmbeddedAnalyser("hog").detect(two_faces()):
        assert face.landmarks68 is not None
        (x1, y1), (x2, y2) = face.landmarks68[48:68].min(axis=0) - 3, face.landmarks68[48:68].max(axis=0) + 3
        boxes.append((slice(int(y1), int(y2)), slice(int(x1), int(x2))))
    assert len(boxes) == 2
    return sorted(boxes, key=lambda b: b[1].start)


def sync(media: dict[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], name: str,
         *extra: str, target: str = "clip", suffix: str = ".mp4") -> tuple[int, Path, str]:  # fmt: skip
    monkeypatch.setenv("FACESTUDIO_MANIFEST", str(media["manifest"]))
    monkeypatch.setenv("FACESTUDIO_MODELS", str(media["root"] / "models"))
    monkeypatch.setenv("FACESTUDIO_CACHE", str(media["root"] / "cache"))
    out = media["root"] / f"{name}{suffix}"
    code = cli.main([
        "run", "--target", str(media[target]), "--output", str(out), "--processors", "lip_syncer",
        "--set", "faces.selector=many", "--set", "runtime.batch=4", "--set", "video.crf=0", *extra, "--yes",
    ])  # fmt: skip
    return code, out, capsys.readouterr().err


def mouth_change(before: npt.NDArray, after: npt.NDArray, box: tuple[slice, slice]) -> float:
    return float(np.abs(after[box].astype(int) - before[box]).mean())


def changed_times(media: dict[str, Path], out: Path, mouths: list, start: float = 0.0) -> dict[float, list[float]]:
    """Per output frame's time in the target: the mean change of each mouth against the target's frame."""
    with video.FrameReader(media["clip"]) as reader:
        source = list(reader)
    with video.FrameReader(out) as reader:
        result = list(reader)
    first = round(start * FPS)
    return {
        round(start + i / FPS, 2): [mouth_change(source[first + i], f, box) for box in mouths]
        for i, f in enumerate(result)
    }


def assert_burst_at(times: dict[float, list[float]], burst_frames: list[float], silent: list[float]) -> None:
    for t in burst_frames:
        assert min(times[t]) > 25, f"t={t}: a mouth did not move with the tone ({times[t]})"
    for t in silent:
        assert max(times[t]) < 4, f"t={t}: a mouth changed in silence ({times[t]})"


@pytest.mark.parametrize("backend", ["onnx", "torch"])
def test_mouths_change_in_the_frames_of_the_burst_only(
    backend: str,
    media: dict[str, Path],
    mouths: list,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = sync(media, monkeypatch, capsys, f"own-{backend}", "--backend", backend)
    assert code == 0, err
    sidecar = json.loads(out.with_name(out.name + ".job.json").read_text())
    described = sidecar["processors"]["lip_syncer"]
    assert described["model"] == "wav2lip_gan_96" and described["backend"] == backend
    assert described["audio"] == str(media["clip"])
    assert sidecar["faces"]["processed"] == 2 * SECONDS * FPS and sidecar["output"]["audio"] is True
    assert_burst_at(changed_times(media, out, mouths), IN_BURST, SILENT)


def test_a_trimmed_target_keeps_the_burst_at_its_time_not_its_frame_index(
    media: dict[str, Path], mouths: list, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = sync(media, monkeypatch, capsys, "trimmed", "--set", "video.trim_start=0.5", "--backend", "onnx")
    assert code == 0, err
    times = changed_times(media, out, mouths, start=0.5)
    assert min(times) == 0.5 and len(times) == 15
    # Aligned by index, output frame i would take the audio at i/fps: the burst would land 0.5 s late.
    assert_burst_at(times, IN_BURST, [t for t in SILENT if t >= 0.5])


def test_a_given_audio_file_drives_the_mouths(
    media: dict[str, Path], mouths: list, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The target has no audio at all; speech.wav's burst is at 0.3–0.6 s.
    code, out, err = sync(media, monkeypatch, capsys, "given", "--set", f"lip_syncer.audio={media['speech']}",
                          "--set", "lip_syncer.model=wav2lip_96", "--backend", "onnx", target="mute")  # fmt: skip
    assert code == 0, err
    assert_burst_at(changed_times(media, out, mouths), [0.2, 0.3, 0.4, 0.5], [0.0, 0.8, 0.9, 1.0, 1.5, 1.9])


def test_missing_audio_and_still_images_are_typed_errors(
    media: dict[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, _, err = sync(media, monkeypatch, capsys, "no-audio", "--backend", "onnx", target="mute")
    assert code == 2 and "mute.mp4 has no audio track to sync the lips to; give one with --set lip_syncer.audio" in err
    image = tmp_path / "still.png"
    video.write_image(image, two_faces())
    media["still"] = image
    code, _, err = sync(media, monkeypatch, capsys, "from-still", "--backend", "onnx", target="still", suffix=".png")
    assert code == 2 and "lip_syncer needs a video target" in err
    code, _, err = sync(media, monkeypatch, capsys, "buffalo", "--set", "faces.analyser=buffalo_l")
    assert code == 2 and "68-point landmarks" in err


def test_mel_features_as_the_facts_give_them() -> None:
    # 80 triangular filters on the 401 bins of an 800-point FFT, from 55 Hz to 7600 Hz (HTK mel).
    bank = speech.mel_filters()
    assert bank.shape == (80, 401) and bank.max() <= 1.0
    mel = lambda f: 2595 * np.log10(1 + f / 700)  # noqa: E731
    edges = 700 * (10 ** (np.linspace(mel(55), mel(7600), 82) / 2595) - 1)
    bins = np.floor(801 * edges / 16000).astype(int)  # each of the 82 points taken to its FFT bin
    for k in range(80):  # filter k: a triangle over the bins from point k to point k + 1
        assert np.flatnonzero(bank[k]).tolist() == list(range(bins[k], bins[k + 1])), k
    # A 16 kHz tone of 1 kHz peaks in the filters around 1 kHz; columns advance 80 per second.
    rate = 16_000
    t = np.arange(rate) / rate
    spec = speech.spectrogram(speech.prepare(np.sin(2 * np.pi * 1000 * t)[:, None], rate=rate))
    assert spec.shape == (80, 81)
    peak = int(spec[:, 40].argmax())
    assert edges[peak] <= 1000 <= edges[peak + 2]
    # The window at t: 16 columns from floor(80·t), log10(max(x, 1e-5))·1.6 + 3.2 clipped to [−4, 4]; silence −4.
    w = speech.window(spec, 0.5)
    assert w.shape == (1, 1, 80, 16) and w.dtype == np.float32
    expected = np.clip(np.log10(np.maximum(spec[:, 40:56], 1e-5)) * 1.6 + 3.2, -4, 4)
    np.testing.assert_allclose(w[0, 0], expected, rtol=1e-6)
    assert (speech.window(spec, 5.0) == -4).all() and (speech.window(spec, 0.96)[0, 0, :, 11:] == -4).all()
    # 48 kHz stereo → 16 kHz mono (resampled, channels averaged, peak 1, pre-emphasis y[n] = x[n] − 0.97·x[n−1]).
    stereo = np.stack([np.full(4800, 1000), np.full(4800, 3000)], axis=1).astype(np.int16)
    mono = speech.prepare(stereo)
    assert len(mono) == 1600 and mono[0] == pytest.approx(1.0) and mono[800] == pytest.approx(0.03, abs=1e-6)


@pytest.mark.parametrize("model_id", ["wav2lip_96", "wav2lip_gan_96"])
def test_offline_exits_3_naming_file_url_licence_and_folder(
    model_id: str, media: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert "FACESTUDIO_MANIFEST" not in os.environ
    code = cli.main(["run", "--offline", "--processors", "lip_syncer", "--set", f"lip_syncer.model={model_id}",
                     "--target", str(media["clip"]), "--output", str(tmp_path / "o.mp4"), "--yes"])  # fmt: skip
    err = capsys.readouterr().err
    spec = Manifest.load().get(model_id)
    assert code == 3 and err.count("\n") == 1
    assert spec.files[0].filename in err and str(spec.files[0].url) in err and "Wav2Lip: personal, research" in err
    assert "no published sha256" in err and os.environ["FACESTUDIO_MODELS"] in err and "NON-COMMERCIAL" in err


def test_the_wav2lip_tensor_follows_the_facts(media: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """MODELS.md §11: the mouth box (the 68 landmarks' bounds in the ffhq_512 crop) at 96×96, BGR/255: channels 0–2
    the box with rows 48–95 zeroed, 3–5 the whole box; `source` the 1×1×80×16 mel window; the output read as BGR."""
    from engine.job.processor import FrameContext
    from engine.job.settings import RuntimeSettings
    from engine.models.runtime import LoadedModel, Runtime
    from processors.lip_syncer import LipSyncer, LipSyncerOptions

    monkeypatch.setenv("FACESTUDIO_MANIFEST", str(media["manifest"]))
    monkeypatch.setenv("FACESTUDIO_MODELS", str(media["root"] / "models"))
    processor = LipSyncer(LipSyncerOptions(backend="onnx", mask_blur=0.0), Runtime(RuntimeSettings(device="cpu")))
    seen: list[dict] = []

    class Spy:
        def __init__(self, inner: object) -> None:
            self.inner = inner

        def run(self, inputs: dict) -> list:
            seen.append({k: np.array(v) for k, v in inputs.items()})
            return self.inner.run(inputs)  # type: ignore[attr-defined]

    processor.loaded = LoadedModel(processor.loaded.spec, processor.loaded.file, Spy(processor.loaded.session))  # type: ignore[arg-type]
    processor._mel = np.zeros((80, 400), np.float32)  # silence: the stand-in hands back its reference half
    (face,) = [f for f in EmbeddedAnalyser("hog").detect(two_faces()) if f.box[0] < 200]
    background = np.array([200, 60, 20])  # RGB
    frame = np.empty((200, 400, 3), np.uint8)
    frame[:] = background
    (out,) = processor.process([frame], [FrameContext(index=0, faces=(face,), time=1.0)])
    (call,) = seen
    target, source = call["target"], call["source"]
    assert target.shape == (1, 6, 96, 96) and source.shape == (1, 1, 80, 16)
    bgr = background[::-1] / 255
    np.testing.assert_allclose(target[0, 3:].reshape(3, -1).mean(axis=1), bgr, atol=2e-3)  # whole box, BGR/255
    np.testing.assert_allclose(target[0, :3, :48].reshape(3, -1).mean(axis=1), bgr, atol=2e-3)  # upper half kept
    assert (target[0, :3, 48:] == 0).all()  # lower half blanked
    assert (source == -4).all()  # silence, log-scaled and clipped
    # The stand-in returns channels 3–5 unchanged; read back as BGR the mouth keeps its colours (RGB would swap them).
    mouth = out[
        int(face.landmarks68[51, 1]) : int(face.landmarks68[57, 1]),
        int(face.landmarks68[48, 0]) : int(face.landmarks68[54, 0]),
    ]
    assert np.abs(mouth.astype(int) - background).max() <= 2
