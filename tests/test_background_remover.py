"""The background remover on stand-in matting graphs of the catalogue's signatures (a bright "person" on a dark
ground gives a matte of exactly 1 on the person and 0 around): the frame goes in at the model's size and
normalisation; where the matte keeps the pixel it is returned exactly; transparency is written as a PNG's alpha,
composited on the colour (and said) where the output holds none; strength 0 gives back the frame and loads
nothing; the matte is held steady where it only wavers; the preview shows transparency on a checkerboard; a video
keeps frames, times and audio; a graph of other I/O is refused in one line; the file comes from a local HTTP
server, sha256-checked."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import cv2
import numpy as np
import pytest
import tiny_graphs
import toolbox_kit as kit
from conftest import Server
from mediakit import ffmpeg, sine
from PIL import Image
from test_face_swapper_models import write_clip

from engine import media
from engine.job.processor import FrameContext
from engine.job.settings import RuntimeSettings
from engine.models.manifest import Manifest
from engine.models.runtime import LoadedModel, Runtime
from engine.models.tensor import to_tensor
from processors import REGISTRY
from processors.background_remover import BackgroundRemover, BackgroundRemoverOptions

MODELS = ["modnet", "birefnet_general", "birefnet_portrait", "isnet_general", "rmbg_2_0", "ben_2"]
GREEN = (0, 177, 64)


@pytest.fixture(scope="module")
def graphs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("matting")
    catalogue = Manifest.load()
    made = {}
    for model_id in MODELS:
        spec = catalogue.get(model_id)
        made[model_id] = root / f"{model_id}.onnx"
        tiny_graphs.matting(made[model_id], spec.io, spec.input_size or 0)
    tiny_graphs.wrong(root / "wrong.onnx")
    return made


@pytest.fixture
def env(graphs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    kit.use(monkeypatch, kit.catalogue(tmp_path, graphs), tmp_path / "models")
    return tmp_path


def person(height: int = 240, width: int = 320) -> np.ndarray:
    """A dark ground (40) with a bright disc (a "person", 210 with some texture) in the middle."""
    frame = np.full((height, width, 3), 40, np.uint8)
    cv2.circle(frame, (width // 2, height // 2), height // 3, (210, 200, 190), -1)
    frame[height // 2 - 4 : height // 2 + 4, width // 2 - 30 : width // 2 + 30] = (230, 180, 170)
    return frame


def remover(**options: object) -> BackgroundRemover:
    processor = BackgroundRemover(
        BackgroundRemoverOptions(backend="onnx", **options), Runtime(RuntimeSettings(device="cpu"))
    )  # type: ignore[arg-type]
    return processor


@pytest.mark.parametrize("model_id", MODELS)
def test_the_matte_keeps_the_person_exactly_and_colours_the_ground(model_id: str, env: Path) -> None:
    processor = remover(model=model_id, background="colour", colour="#00b140")
    log = kit.logged(processor, "model")
    frame = person()
    (out,) = processor.process([frame], [FrameContext(index=0)])
    ((_, inputs, _),) = log
    spec = processor.model.spec
    side = spec.input_size
    small = cv2.resize(frame, (side, side), interpolation=cv2.INTER_AREA)
    np.testing.assert_array_equal(inputs[spec.io.input], to_tensor(small[None], spec.io))
    matte = processor.matte(frame, FrameContext(index=0))
    kept, ground = matte >= 1.0, matte <= 0.0
    assert kept.mean() > 0.25 and ground.mean() > 0.3
    np.testing.assert_array_equal(out[kept], frame[kept])  # the person, untouched
    assert (out[ground] == GREEN).all()  # the ground, the colour


def test_a_png_gets_the_matte_as_alpha_and_its_pixels_as_they_were(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target, out = env / "person.png", env / "cut.png"
    media.write_image(target, person())
    code, stdout, err = kit.run(capsys, "--target", str(target), "--output", str(out), "--processors",
                                "background_remover")  # fmt: skip
    assert code == 0, err
    assert "composited" not in stdout
    with Image.open(out) as image:
        assert image.mode == "RGBA"
        rgba = np.asarray(image)
    np.testing.assert_array_equal(rgba[:, :, :3], person())
    alpha = rgba[:, :, 3]
    assert alpha[120, 160] == 255 and alpha[5, 5] == 0 and alpha[120, 300] == 0
    assert ((alpha == 0) | (alpha == 255)).mean() > 0.97  # a hard matte: only its resized edge is in between


def test_a_jpeg_may_be_written_as_a_png_to_hold_the_transparency(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target, out = env / "person.jpg", env / "cut.png"
    media.write_image(target, person())
    code, _, err = kit.run(capsys, "--target", str(target), "--output", str(out), "--processors", "background_remover")
    assert code == 0, err
    frame, alpha = media.read_image(out)
    assert alpha is not None and alpha[120, 160] == 255 and alpha[5, 5] == 0
    # Without transparency to hold, the output keeps the target's format, as before.
    code, _, err = kit.run(capsys, "--target", str(target), "--output", str(env / "other.png"), "--processors",
                           "background_remover", "--set", "background_remover.background=colour")  # fmt: skip
    assert code == 2 and "so the output must be JPEG" in err


def test_where_no_transparency_fits_the_frame_is_composited_and_the_summary_says_so(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target, out = env / "person.jpg", env / "cut.jpg"
    media.write_image(target, person())
    code, stdout, err = kit.run(capsys, "--target", str(target), "--output", str(out), "--processors",
                                "background_remover", "--set", "background_remover.colour=#ff0000")  # fmt: skip
    assert code == 0, err
    assert "background_remover: .jpg holds no transparency, so the background was composited on #ff0000" in stdout
    result, alpha = media.read_image(out)
    assert alpha is None
    assert result[5, 5, 0] > 240 and result[5, 5, 1] < 15 and abs(int(result[90, 160, 0]) - 210) < 8


def test_strength_scales_what_is_removed_and_0_gives_back_the_frame(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    frame = person()
    half = remover(background="colour", colour="#000000", strength=50)
    (out,) = half.process([frame], [FrameContext(index=0)])
    assert abs(int(out[5, 5, 0]) - 20) <= 1  # half of the ground (40) kept over black
    np.testing.assert_array_equal(out[120, 160], frame[120, 160])
    monkeypatch.setenv("FACESTUDIO_MODELS", str(env / "empty"))
    none = remover(strength=0)
    assert BackgroundRemover.model_ids(none.options) == [] and none.model is None
    (out,) = none.process([frame], [FrameContext(index=0)])
    assert out is frame and none.alpha(0) is None


class Planes:
    """A session that gives back the matte planes it is handed, one per call, whatever the input."""

    backend, provider, input_names = "onnx", "CPUExecutionProvider", ("input",)

    def __init__(self, planes: list[np.ndarray]) -> None:
        self.planes = iter(planes)

    def run(self, inputs: dict) -> list[np.ndarray]:
        return [next(self.planes)[None, None]]


def test_a_matte_that_wavers_is_held_steady_and_a_move_passes_at_once(env: Path) -> None:
    processor = remover(background="colour", colour="#000000")
    plain = remover(background="colour", colour="#000000", steady=False)
    side = processor.model.spec.input_size
    wavering = [np.full((side, side), v, np.float32) for v in (0.6, 0.7, 0.6, 0.7, 0.6, 0.7, 0.1)]
    for p in (processor, plain):
        p.model = LoadedModel(p.model.spec, p.model.file, Planes(wavering))  # type: ignore[arg-type]
    frame = np.full((40, 40, 3), 200, np.uint8)
    steady = [processor.process([frame], [FrameContext(index=i, time=i / 25)])[0][20, 20, 0] for i in range(7)]
    raw = [plain.process([frame], [FrameContext(index=i, time=i / 25)])[0][20, 20, 0] for i in range(7)]
    assert np.ptp(raw[:6]) == 20 and np.ptp(steady[1:6]) < 10  # 0.6 ↔ 0.7 of 200, held near its middle
    assert steady[6] == raw[6] == 20  # the person left that pixel: taken at once


def test_the_preview_shows_transparency_on_a_checkerboard(env: Path) -> None:
    from engine.serve.service import Service

    target = env / "person.png"
    media.write_image(target, person())
    rendered = Service(REGISTRY).preview({"processors": ["background_remover"]}, target, [], 0)
    after = rendered.after
    np.testing.assert_array_equal(after[120, 160], person()[120, 160])
    assert set(np.unique(after[:16, :32])) <= {153, 204} and len(np.unique(after[:16, :32])) == 2


def test_a_video_keeps_its_frames_times_and_audio(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target, out = kit.clip(env), env / "cut.mp4"
    code, stdout, err = kit.run(
        capsys, "--target", str(target), "--output", str(out), "--processors", "background_remover",
        "--set", "video.crf=0",
    )  # fmt: skip
    assert code == 0, err
    assert ".mp4 holds no transparency, so the background was composited on #00b140" in stdout
    kit.check_timing(target, out)


def walking_person(folder: Path) -> Path:
    """`person()` walking 12 px a frame, kit.FRAMES frames at kit.FPS, H.264 with a half-second tone."""
    tone = folder / "tone.wav"
    ffmpeg(*sine("0.5"), str(tone))
    frames = [np.roll(person(), 12 * i, axis=1) for i in range(kit.FRAMES)]
    return write_clip(folder / "walking.mp4", frames, kit.FPS, audio=tone)


def ffprobe_video(path: Path) -> dict:
    """ffprobe's description of the first video stream of `path` (codec, pix_fmt, tags)."""
    args = [media.find_ffprobe(), "-v", "error", "-print_format", "json", "-show_streams", "-select_streams", "v:0"]
    done = subprocess.run([*args, str(path)], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)["streams"][0]


def alpha_planes(path: Path, decoder: str | None = None) -> np.ndarray:
    """Every frame's alpha plane as ffmpeg reads it back (`decoder`: libvpx-vp9, which decodes VP9's alpha):
    N×H×W uint8."""
    width, height = 320, 240
    done = subprocess.run([media.find_ffmpeg(), "-nostdin", "-v", "error", *(["-c:v", decoder] if decoder else []),
                           "-i", str(path), "-map", "0:v:0", "-vf", "format=rgba,alphaextract", "-f", "rawvideo",
                           "-pix_fmt", "gray", "-"], capture_output=True, check=True)  # fmt: skip
    return np.frombuffer(done.stdout, np.uint8).reshape(-1, height, width)


def mattes(target: Path) -> np.ndarray:
    """The matte of each frame of `target` as the run decodes it, as an alpha plane: N×H×W uint8 (255 = person)."""
    processor = remover(steady=False)
    with media.FrameReader(target) as reader:
        return np.stack([np.rint(processor.matte(f, FrameContext(index=i)) * 255).astype(np.uint8)
                         for i, f in enumerate(reader)])  # fmt: skip


@pytest.mark.parametrize(
    ("suffix", "codec", "decoder", "tolerance"),
    [(".mov", "prores", None, 1), (".webm", "vp9", "libvpx-vp9", 1), (".mkv", "vp9", "libvpx-vp9", 1)],
)
def test_a_video_gets_the_matte_as_its_alpha_plane_where_the_container_holds_it(
    suffix: str, codec: str, decoder: str | None, tolerance: int, env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target, out = walking_person(env), env / f"cut{suffix}"
    code, stdout, err = kit.run(capsys, "--target", str(target), "--output", str(out), "--processors",
                                "background_remover", "--set", "background_remover.steady=false",
                                "--set", "video.crf=0")  # fmt: skip
    assert code == 0, err
    assert "composited" not in stdout
    assert f"alpha: written ({'ProRes 4444' if codec == 'prores' else 'VP9 with alpha'})" in stdout
    described = ffprobe_video(out)
    assert described["codec_name"] == codec
    if codec == "prores":
        assert described["pix_fmt"].startswith("yuva444p")  # ProRes 4444 with its alpha plane
    else:
        assert {k.lower(): v for k, v in described["tags"].items()}["alpha_mode"] == "1"  # VP9's alpha, as WebM says
    planes, expected = alpha_planes(out, decoder), mattes(target)
    assert planes.shape == expected.shape == (kit.FRAMES, 240, 320)
    assert (expected == 0).mean() > 0.3 and (expected == 255).mean() > 0.25  # a ground and a person to tell apart
    assert np.abs(planes.astype(int) - expected).max() <= tolerance
    # The person's pixels are the target's as they are (the ground is not painted over), at the target's times.
    person_kept = kit.frames(out)[1][expected[1] == 255] - kit.frames(target)[1][expected[1] == 255]
    assert np.abs(person_kept).mean() < 2
    kit.check_timing(target, out)


def test_a_gif_gets_the_matte_as_its_transparent_colour(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target, out = walking_person(env), env / "cut.gif"
    code, stdout, err = kit.run(capsys, "--target", str(target), "--output", str(out), "--processors",
                                "background_remover", "--set", "background_remover.steady=false")  # fmt: skip
    assert code == 0, err
    assert "alpha: written as the GIF's transparent colour" in stdout and "composited" not in stdout
    planes, expected = alpha_planes(out), mattes(target)
    assert planes.shape == expected.shape
    assert ((planes == 0) == (expected < 128)).mean() > 0.999  # GIF: transparent or not, at half the matte


def test_an_mp4_or_an_encoder_without_alpha_gets_the_composite_and_says_so(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = walking_person(env)
    expected = mattes(target)
    for out, more, said in [
        (env / "cut.mp4", [], ".mp4 holds no transparency, so the background was composited on #ff0000 (write .mov "
         "(ProRes 4444), .webm or .mkv (VP9 with alpha) or .gif for an alpha channel)"),
        (env / "cut.mov", ["--set", "video.encoder=libx264"], "libx264 holds no transparency, so the background was "
         "composited on #ff0000 (set video.encoder=auto, which writes ProRes 4444 in .mov for an alpha channel)"),
    ]:  # fmt: skip
        code, stdout, err = kit.run(capsys, "--target", str(target), "--output", str(out), "--processors",
                                    "background_remover", "--set", "background_remover.steady=false", "--set",
                                    "background_remover.colour=#ff0000", "--set", "video.crf=0", *more)  # fmt: skip
        assert code == 0, err
        assert stdout.count(said) == 1 and "alpha: written" not in stdout
        assert ffprobe_video(out)["pix_fmt"] == "yuv420p"
        frames = kit.frames(out)
        ground = frames[2][expected[2] == 0]
        assert np.abs(ground - (255, 0, 0)).mean() < 4  # the ground is the colour
        kit.check_timing(target, out)


def test_a_graph_with_other_io_is_refused_at_load(
    graphs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    kit.check_refused(tmp_path, monkeypatch, capsys, graphs, "modnet", "background_remover")


def test_fetched_from_a_local_server_sha256_checked(
    graphs: dict[str, Path], server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    kit.check_fetched(server, tmp_path, monkeypatch, capsys, "modnet", graphs["modnet"])
