"""A fake camera for the live tests and benchmark: the moving-portrait demo clip (engine/media/demo.py) with a frame
counter drawn into each frame, as a .y4m file for Chromium's fake capture (`--use-file-for-fake-video-capture`)
or an .mp4 for `launch.py live --camera FILE`; and the counter read back from a frame that went through the chain
and two video codecs.

The counter is `BITS` bits in a row of cells at the bottom left, well away from the face: for bit b a white cell
(1) or a black one (0), with its opposite drawn under it, so a reading is checked cell by cell and a frame whose
strip is damaged is rejected rather than misread. `COUNTER_JS` reads it in a page from a <video>.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np

from engine.core.types import Frame
from engine.media import demo, find_ffmpeg

BITS = 10
CELL = 20  # px: each bit's cell is CELL×CELL, its opposite right under it
LEFT = 8  # px from the left edge


def draw_counter(frame: Frame, n: int) -> Frame:
    """`frame` (H×W×3 uint8 RGB, at least 2·CELL high and LEFT + BITS·CELL wide) with `n` mod 2^BITS drawn in."""
    out = frame.copy()
    top = out.shape[0] - 2 * CELL
    for b in range(BITS):
        value = 255 if (n >> b) & 1 else 0
        x = LEFT + b * CELL
        out[top : top + CELL, x : x + CELL] = value
        out[top + CELL : top + 2 * CELL, x : x + CELL] = 255 - value
    return out


def read_counter(frame: Frame) -> int | None:
    """The counter drawn into `frame`, or None where a cell and its opposite do not clearly differ."""
    top = frame.shape[0] - 2 * CELL
    grey = frame.astype(np.float32).mean(axis=2)
    n = 0
    for b in range(BITS):
        x = LEFT + b * CELL + CELL // 2
        upper = grey[top + CELL // 2 - 2 : top + CELL // 2 + 3, x - 2 : x + 3].mean()
        lower = grey[top + CELL + CELL // 2 - 2 : top + CELL + CELL // 2 + 3, x - 2 : x + 3].mean()
        if abs(upper - lower) < 96:
            return None
        n |= int(upper > lower) << b
    return n


def frames(width: int, height: int, count: int) -> list[Frame]:
    """The demo clip's `count` frames at width×height, counted 0, 1, …"""
    return [draw_counter(frame, i) for i, frame in enumerate(demo.frames(width, height, count))]


def write(path: Path, width: int = 640, height: int = 480, fps: int = 30, count: int = 90) -> Path:
    """Write the counted clip to `path`: .y4m (raw 4:2:0, what Chromium's fake camera plays, looping) or any video
    container ffmpeg can write (H.264 at near-lossless quality). Returns `path`."""
    codec = ["-f", "yuv4mpegpipe"] if path.suffix == ".y4m" else ["-c:v", "libx264", "-crf", "12", "-preset", "fast"]
    command = [find_ffmpeg(), "-nostdin", "-v", "error", "-y", "-f", "rawvideo", "-pix_fmt", "rgb24",
               "-s", f"{width}x{height}", "-r", str(fps), "-i", "-", "-pix_fmt", "yuv420p", *codec,
               str(path)]  # fmt: skip
    with subprocess.Popen(command, stdin=subprocess.PIPE, stderr=subprocess.PIPE) as process:
        assert process.stdin is not None and process.stderr is not None
        for frame in frames(width, height, count):
            process.stdin.write(frame.tobytes())
        process.stdin.close()
        error = process.stderr.read().decode(errors="replace").strip()
        if process.wait() != 0:
            raise RuntimeError(f"ffmpeg could not write {path.name}: {error}")
    return path


# In a page: `fsCount(track, seen)` reads every frame of a video MediaStreamTrack as it is delivered
# (MediaStreamTrackProcessor: before the compositor, whatever the page is busy with) and calls `seen(n, time)` with
# its counter (null where the strip is unreadable) and performance.now(). The cells are read from the Y plane.
COUNTER_JS = f"""
window.fsCount = async (track, seen) => {{
  const reader = new MediaStreamTrackProcessor({{ track }}).readable.getReader();
  const width = {LEFT + BITS * CELL + (LEFT + BITS * CELL) % 2};
  for (;;) {{
    const {{ value: frame, done }} = await reader.read();
    if (done) return;
    const time = performance.now();
    try {{
      const rect = {{ x: 0, y: frame.visibleRect.height - {2 * CELL}, width, height: {2 * CELL} }};
      const buffer = new Uint8Array(frame.allocationSize({{ rect }}));
      const [{{ offset, stride }}] = await frame.copyTo(buffer, {{ rect }});
      const luma = (x, y) => {{
        let sum = 0;
        for (let dy = -2; dy <= 2; dy++)
          for (let dx = -2; dx <= 2; dx++) sum += buffer[offset + (y + dy) * stride + x + dx];
        return sum / 25;
      }};
      let n = 0;
      for (let b = 0; b < {BITS}; b++) {{
        const x = {LEFT} + b * {CELL} + {CELL // 2};
        const upper = luma(x, {CELL // 2}), lower = luma(x, {CELL + CELL // 2});
        if (Math.abs(upper - lower) < 96) {{ n = null; break; }}
        if (upper > lower) n |= 1 << b;
      }}
      seen(n, time);
    }} finally {{
      frame.close();
    }}
  }}
}};
"""


# In a page streaming the Live tab (after COUNTER_JS): `fsWatch(loopMs)` reads the counters of both the camera's
# frames and the results as they are delivered, and appends [counter, time, latency ms, the latency the page shows]
# to `window.fsShown` for each result whose counter was seen on the camera within half the clip's loop before it
# (the latest such capture: the clip loops every `loopMs`; an older one is unmatched, not a latency).
LATENCY_JS = """
window.fsWatch = (loopMs) => {
  const live = window.facestudioLive;
  const captured = new Map();
  window.fsShown = [];
  window.fsCount(live.local.getVideoTracks()[0], (n, time) => {
    if (n === null) return;
    const times = captured.get(n) || [];
    times.push(time);
    if (times.length > 4) times.shift();
    captured.set(n, times);
  });
  window.fsCount(live.remote.getVideoTracks()[0], (n, time) => {
    if (n === null) return;
    const at = (captured.get(n) || []).filter(t => t <= time && time - t < loopMs / 2).pop();
    if (at !== undefined) window.fsShown.push([n, time, time - at, live.figures.latency]);
  });
};
"""
