"""Speech features for the lip syncer: a file's audio as 16 kHz mono, and Wav2Lip's mel windows, by time.

Computed as FaceFusion 3.8.1 feeds its Wav2Lip exports (MODELS.md §11; `facefusion/audio.py`,
`lip_syncer/core.py` L245-255):
1. the first audio stream decoded by ffmpeg at 48 kHz, 2 channels, signed 16 bit;
2. resampled to 16 kHz with `scipy.signal.resample` (FFT), channels averaged, peak-normalised to 1, and
   pre-emphasised with `lfilter([1, -0.97], [1])`;
3. `scipy.signal.stft(nperseg=800, nfft=800, noverlap=600)` (Hann window, hop 200 samples: 80 columns per
   second, column c centred on c/80 s), magnitude, through 80 triangular mel filters (HTK mel scale
   2595·log10(1 + f/700), 55–7600 Hz) on its 401 frequency bins;
4. per window: log10(max(x, 1e-5))·1.6 + 3.2, clipped to [-4, 4] (then ×2·weight, weight 0.5: ×1).
A video frame shown at t seconds takes the 16 columns from floor(80·t) on — the window Wav2Lip trains on (its
`int(80·t)` start; FaceFusion reaches the same columns by dropping the first 16·fps/80 windows); columns past the
end of the audio are silence (0 before the log, −4 after). FaceFusion's optional voice separation (a separate
non-commercial model, kim_vocal_2, with no published sha256) is not run: the whole mix is used.
"""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

import numpy as np
import numpy.typing as npt

from engine.core.errors import InvalidInput, MediaError
from engine.media import find_ffmpeg

DECODE_RATE = 48_000
SAMPLE_RATE = 16_000
WINDOW = 800
HOP = 200
MEL_BINS = 80
MEL_LOW, MEL_HIGH = 55.0, 7600.0
COLUMNS_PER_SECOND = SAMPLE_RATE // HOP  # 80
STEP = 16  # mel columns per video frame's window (0.2 s)

Mel = npt.NDArray[np.float32]


def decode(path: Path) -> npt.NDArray[np.int16]:
    """The first audio stream of `path` (any file ffmpeg reads) as N×2 int16 samples at 48 kHz.

    Raises InvalidInput naming the file when it has no audio stream or cannot be read."""
    source = Path(path).resolve()  # absolute: never read by ffmpeg as an option
    args = [find_ffmpeg(), "-v", "error", "-nostdin", "-i", str(source), "-map", "0:a:0", "-vn",
            "-ac", "2", "-ar", str(DECODE_RATE), "-f", "s16le", "-acodec", "pcm_s16le", "-"]  # fmt: skip
    try:
        done = subprocess.run(args, capture_output=True, check=False)
    except OSError as exc:
        raise MediaError(f"cannot run ffmpeg to read the audio of {source.name}: {exc}") from exc
    if done.returncode != 0:
        text = done.stderr.decode("utf-8", "replace")
        if "matches no streams" in text:
            raise InvalidInput(
                f"{source.name} has no audio track to sync the lips to; give one with --set lip_syncer.audio=FILE"
            )
        lines = text.strip().splitlines()
        raise InvalidInput(f"cannot read the audio of {source.name}: {lines[-1] if lines else 'ffmpeg failed'}")
    return np.frombuffer(done.stdout, dtype=np.int16).reshape(-1, 2)


def prepare(samples: npt.NDArray[np.integer], rate: int = DECODE_RATE) -> npt.NDArray[np.float64]:
    """N×C samples at `rate` Hz → mono float64 at 16 kHz: resampled, channels averaged, peak-normalised (silence
    stays 0), pre-emphasised."""
    from scipy import signal

    audio = np.asarray(samples, np.float64)
    if rate != SAMPLE_RATE and len(audio):
        audio = signal.resample(audio, round(len(audio) * SAMPLE_RATE / rate))
    if audio.ndim > 1:
        audio = audio.mean(axis=1)
    peak = np.abs(audio).max() if len(audio) else 0.0
    if peak > 0:
        audio = audio / peak
    return np.asarray(signal.lfilter([1.0, -0.97], [1.0], audio), np.float64)


def mel_filters() -> npt.NDArray[np.float64]:
    """The 80×401 filter bank: filter k is a triangle (scipy.signal.windows.triang) over the FFT bins from the
    k-th to the (k+1)-th of 82 points evenly spaced on the mel scale between 55 and 7600 Hz, each point taken to
    bin floor((800 + 1)·f / 16000)."""
    from scipy import signal

    def to_mel(hz: npt.ArrayLike) -> npt.NDArray[np.float64]:
        return 2595.0 * np.log10(1.0 + np.asarray(hz, np.float64) / 700.0)

    points = np.linspace(to_mel(MEL_LOW), to_mel(MEL_HIGH), MEL_BINS + 2)
    hz = 700.0 * (10.0 ** (points / 2595.0) - 1.0)
    bins = np.floor((WINDOW + 1) * hz / SAMPLE_RATE).astype(int)
    bank = np.zeros((MEL_BINS, WINDOW // 2 + 1))
    for k in range(MEL_BINS):
        bank[k, bins[k] : bins[k + 1]] = signal.windows.triang(bins[k + 1] - bins[k])
    return bank


def spectrogram(audio: npt.NDArray[np.float64]) -> Mel:
    """80×C linear mel spectrogram of 16 kHz mono audio (column c at c/80 s)."""
    from scipy import signal

    if len(audio) == 0:
        return np.zeros((MEL_BINS, 0), np.float32)
    _, _, stft = signal.stft(audio, nperseg=WINDOW, nfft=WINDOW, noverlap=WINDOW - HOP)
    return (mel_filters() @ np.abs(stft)).astype(np.float32)


def load(path: Path) -> Mel:
    """The linear mel spectrogram of `path`'s audio (decode → prepare → spectrogram)."""
    return spectrogram(prepare(decode(path)))


def window(mel: Mel, time: float) -> Mel:
    """The model's `source` input for a frame shown at `time` seconds: 1×1×80×16 float32, the 16 columns from
    floor(80·time) on, log-scaled and clipped to [-4, 4]; columns past either end of the audio are silence."""
    start = math.floor(time * COLUMNS_PER_SECOND + 1e-6)
    out = np.zeros((MEL_BINS, STEP), np.float32)
    lo, hi = max(start, 0), min(start + STEP, mel.shape[1])
    if hi > lo:
        out[:, lo - start : hi - start] = mel[:, lo:hi]
    scaled = np.clip(np.log10(np.maximum(out, 1e-5)) * 1.6 + 3.2, -4.0, 4.0)
    return scaled.astype(np.float32)[None, None]
