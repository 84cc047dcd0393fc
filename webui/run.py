"""The studio's run: Run / Cancel / Preview, the progress (`RunState`: a bar with frames, fps, ETA and stage; the
place in line only when there is a line), the result with its summary and downloads, and the same run as one named
API endpoint for scripts (gradio_client). The consent it needs is the page's one (in its header).

What the status says is true now: a failure from an earlier run goes when the inputs change (`idle_status`),
Cancel with nothing running says so, a target that cannot be read is said once (under it), a model the chain
needs that is not here is named with its size and licence, not downloaded."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gradio as gr

from engine.core.errors import Cancelled, FacestudioError
from webui import uploads
from webui.jobs import parse_preset_text
from webui.parts import Page
from webui.schedule import Place
from webui.settings_column import missing_line
from webui.studio import Session, user_message
from webui.summary import report_json, summary

log = logging.getLogger(__name__)

# What the pipeline's progress stages are called on the page.
_STAGES = {"frames": "rendering"}


def _ordinal(n: int) -> str:
    return f"{n}{'tsnrhtdd'[(n // 10 % 10 != 1) * (n % 10 < 4) * n % 10 :: 4]}"


def _seconds(value: float) -> str:
    value = max(value, 0.0)
    return f"{value:.0f} s" if value < 90 else f"{value / 60:.0f} min"


class RunState:
    """What a running job shows: its place in line while it waits, then its stage, frames, fps and ETA
    (`engine.core.progress.Progress`; raises Cancelled between batches once the session's cancel flag is set).
    `clock`: seconds, what the fps and ETA are measured with (`time.monotonic`)."""

    def __init__(self, cancel: threading.Event, clock: Callable[[], float] = time.monotonic) -> None:
        self.cancel = cancel
        self.clock = clock
        self.place: Place | None = None
        self.stage_name = ""
        self.total: int | None = None
        self.done = 0
        self.started: float | None = None
        self._lock = threading.Lock()

    def queued(self, place: Place) -> None:
        self.place = place

    def stage(self, name: str, total: int | None = None, unit: str = "frame") -> None:
        with self._lock:
            self.place = None
            self.stage_name, self.total, self.done, self.started = name, total, 0, self.clock()

    def advance(self, n: int = 1) -> None:
        if self.cancel.is_set():
            raise Cancelled("cancelled from the UI; nothing was written")
        with self._lock:
            self.done += n

    def close(self) -> None:
        pass

    def fraction(self) -> float | None:
        """How much of the current stage is done, 0–1 (None while waiting or preparing, or with no known total)."""
        with self._lock:
            if self.place is not None or not self.stage_name or not self.total:
                return None
            return min(self.done / self.total, 1.0)

    def html(self) -> str:
        """The status panel: a progress bar (once the frames are counted) over the `text` line."""
        fraction = self.fraction()
        bar = "" if fraction is None else f"<progress value='{fraction * 1000:.0f}' max='1000'></progress>"
        return f"{bar}<span class='fs-progress-text'>{self.text()}</span>"

    def text(self) -> str:
        """One line of Markdown for the status panel: the place in line only while jobs are ahead."""
        with self._lock:
            place, stage, total, done, started = self.place, self.stage_name, self.total, self.done, self.started
        if self.cancel.is_set():
            return "cancelling…"
        if place is not None and place.ahead > 0:
            wait = "wait unknown until a job here has run" if place.wait is None else f"about {_seconds(place.wait)}"
            return f"waiting: {_ordinal(place.ahead)} in line — {wait}"
        if not stage:
            return "preparing: checking the inputs, loading models, analysing the source face"
        if total and done >= total:
            return f"finishing: {done} of {total} frames done — writing the output, audio and sidecar"
        elapsed = self.clock() - (started or self.clock())
        fps = done / elapsed if elapsed > 0 and done else 0.0
        counts = f"{done} of {total}" if total else f"{done}"
        eta = f", about {_seconds((total - done) / fps)} left" if fps and total else ""
        return f"{_STAGES.get(stage, stage)}: {counts} frames, {fps:.2f} fps{eta}"


class RunPanel:
    """Builds the buttons, the progress and the result into the page's right column, under the preview; runs a
    job for the session and shows what it made."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.studio = page.studio
        self._running: set[str] = set()  # owners with a run of this page going (for Cancel and `idle_status`)
        self._lock = threading.Lock()

    def build(self) -> None:
        with gr.Row(elem_classes="fs-run-row"):
            self.run = gr.Button("Run", variant="primary", elem_id="run", scale=2)
            self.cancel = gr.Button("Cancel", variant="stop", elem_id="cancel", scale=1)
            self.preview_btn = gr.Button("Preview", elem_id="preview-btn", scale=1)
        # Several targets in one upload: each a job of its own, in turn, each into the history.
        self.batch = uploads.UploadButton(
            "Run on several targets…", file_count="multiple", file_types=["image", "video"], elem_id="run-batch",
            size="sm",
        )  # fmt: skip
        self.status = gr.Markdown(elem_id="status", elem_classes="fs-status", min_height=0)
        with gr.Row(equal_height=False, elem_classes="fs-result-row"):
            self.result_image = gr.Image(
                label="result", type="filepath", interactive=False, visible=False, elem_id="result-image", height=200,
                scale=3,
            )  # fmt: skip
            self.result_video = gr.Video(
                label="result", interactive=False, visible=False, elem_id="result-video", height=200, scale=3
            )
            with gr.Column(scale=2, min_width=170, elem_id="downloads"):
                self.download_output = gr.DownloadButton(
                    "output", visible=False, size="sm", variant="primary", elem_id="download-output"
                )
                self.download_sidecar = gr.DownloadButton(
                    "job sidecar", visible=False, size="sm", elem_id="download-sidecar"
                )
                self.result_summary = gr.Markdown(elem_id="summary", min_height=0)

    def wire(self) -> None:
        page, inputs = self.page, self.page.inputs
        run_out = [
            self.status, self.result_image, self.result_video, self.result_summary, self.download_output,
            self.download_sidecar, page.preview.compare, page.history.version,
        ]  # fmt: skip
        self.run.click(
            self.on_run,
            [page.consent, inputs.target, inputs.sources, inputs.frame_index, page.history.version,
             inputs.target_problem, *page.settings.components],
            run_out, concurrency_limit=None, show_progress="hidden",
        )  # fmt: skip
        self.cancel.click(self.on_cancel, None, [self.status], queue=False)
        self.batch.upload(
            self.on_batch,
            [page.consent, self.batch, inputs.sources, page.history.version, *page.settings.components],
            [self.status, self.result_summary, page.history.version], concurrency_limit=None, show_progress="hidden",
        )  # fmt: skip

    def running(self, session: Session) -> bool:
        with self._lock:
            return session.owner.id in self._running

    def idle_status(self, session: Session) -> Any:
        """The status for an input change: cleared (what it said was about other inputs) unless a run is going."""
        return gr.skip() if self.running(session) else ""

    def on_run(
        self,
        agreed: bool,
        target: str | None,
        sources: list[str] | None,
        index: float,
        version: int,
        problem: str,
        request: gr.Request,
        *values: Any,
    ) -> Iterator[tuple[Any, ...]]:
        keep = (gr.update(),) * 7
        if not agreed:
            yield ("tick the responsible-use notice (at the top of the page) before running", *keep)
            return
        if problem:
            yield (
                "<span class='fs-warn'>**failed** — the target cannot be read (see under it): replace it</span>",
                *keep,
            )
            return
        session = self.page.session(request)
        raw = self.page.raw(values)
        try:
            missing = self.page.settings_column.missing(self.studio.service.preset(raw))
        except FacestudioError:
            missing = {}  # the run says what is wrong with the settings
        if missing:
            lines = "; ".join(missing_line(s) for statuses in missing.values() for s in statuses)
            yield (f"**not run** — {lines}", *keep)
            return
        state = RunState(session.cancel)
        result: dict[str, Any] = {}

        def work() -> None:
            try:
                job_raw, job_sources = self.page.people.apply(session, raw, target, sources or [])
                report, entry = self.studio.run_for(session, job_raw, target or "", job_sources, state, state.queued)
                session.history.keep_inputs(entry, Path(target or ""), [Path(s) for s in sources or []],
                                            session.names)  # fmt: skip
                result["done"] = report
            except BaseException as exc:  # reported by the generator below, in the status panel
                result["error"] = exc

        hidden = gr.update(value=None, visible=False)
        started = (hidden, hidden, "", hidden, hidden, gr.update(), gr.update())
        for tick in self._in_background(session, "facestudio-ui-run", work):
            yield (state.html(), *(started if tick == 0 else keep))
        error = result.get("error")
        if isinstance(error, Cancelled):
            yield ("**cancelled** — nothing was written", *keep)
            return
        if error is not None:
            if not isinstance(error, FacestudioError):
                log.error("run failed", exc_info=error)
            message = user_message(error, session.names)
            yield (f"<span class='fs-warn'>**failed** — {message}</span>", *keep)
            return
        report = result["done"]
        is_image = report.kind == "image"
        output = self.studio.share(session, report.output)
        player = None if is_image else self.studio.playable(session, report.output)
        compare = gr.update()
        try:
            compare = gr.update(value=self.studio.compare_after_run(session, target or "", report, int(index)),
                                elem_classes=[])  # fmt: skip
        except FacestudioError as exc:
            log.info("no before/after after the run: %s", exc)
        done = f"done in {report.seconds:.1f} s"
        if not is_image and player is None:
            done += " — its codec does not play in browsers: download it to watch"
        yield (
            done,
            gr.update(value=output if is_image else None, visible=is_image),
            gr.update(value=player, visible=player is not None),
            summary(report),
            gr.update(value=output, label=f"⬇ {Path(output).name}", visible=True),
            gr.update(value=self.studio.share(session, report.sidecar), label="⬇ job sidecar (.json)", visible=True),
            compare,
            version + 1,
        )

    def on_batch(
        self,
        agreed: bool,
        targets: list[str] | None,
        sources: list[str] | None,
        version: int,
        request: gr.Request,
        *values: Any,
    ) -> Iterator[tuple[Any, ...]]:
        """Several targets of one upload run as jobs in turn with the current settings (`Studio.run_batch`), each
        into the history; the status follows the job running, the summary says what each did."""
        if not agreed:
            yield "tick the responsible-use notice (at the top of the page) before running", gr.update(), gr.update()
            return
        session = self.page.session(request)
        files = list(targets or [])
        self.studio.note_upload(session, "batch", files)
        raw = self.page.raw(values)
        states: list[tuple[int, str, RunState]] = []
        result: dict[str, Any] = {}

        def progress(n: int, name: str) -> RunState:
            states.append((n, name, RunState(session.cancel)))
            return states[-1][2]

        def work() -> None:
            try:
                result["done"] = self.studio.run_batch(
                    session, files, lambda t: self.page.people.apply(session, raw, t, sources or []), progress
                )
            except BaseException as exc:  # reported below, in the status panel
                result["error"] = exc

        for _ in self._in_background(session, "facestudio-ui-batch", work):
            if states:
                n, name, state = states[-1]
                yield f"job {n} of {len(files)} ({name}): {state.html()}", gr.update(), gr.update()
        error = result.get("error")
        if error is not None:
            message = "cancelled" if isinstance(error, Cancelled) else user_message(error, session.names)
            yield f"<span class='fs-warn'>**stopped** — {message}</span>", gr.update(), version + 1
            return
        lines = []
        for target, outcome in result["done"]:
            name = self.studio.name(session, target)
            if isinstance(outcome, FacestudioError):
                lines.append(f"- {name}: **failed** — {user_message(outcome, session.names)}")
            else:
                report = outcome[0]
                lines.append(f"- {name}: done in {report.seconds:.1f} s → {self.studio.name(session, report.output)}")
        failed = sum(isinstance(o, FacestudioError) for _, o in result["done"])
        head = f"{len(files) - failed} of {len(files)} targets done" + (f", {failed} failed" if failed else "")
        yield f"**{head}** — each is in the History tab", "\n".join(lines), version + 1

    def _in_background(self, session: Session, name: str, work: Callable[[], None]) -> Iterator[int]:
        """Run `work` on a thread of its own as the session's run (a Cancel from before it cleared first), yielding
        0 once it has started, then 1, 2 … every half second while it goes on; the session is no longer running
        when it ends or the caller stops iterating."""
        session.cancel.clear()
        with self._lock:
            self._running.add(session.owner.id)
        try:
            worker = threading.Thread(target=work, name=name, daemon=True)
            worker.start()
            tick = 0
            yield tick
            while worker.is_alive():
                worker.join(0.5)
                tick += 1
                yield tick
        finally:
            with self._lock:
                self._running.discard(session.owner.id)

    def on_cancel(self, request: gr.Request) -> str:
        session = self.page.session(request)
        if not self.running(session):
            return "nothing is running: Cancel stops a run once it has started"
        session.cancel.set()
        return "cancelling…"

    # -- the API: one named endpoint for scripts (gradio_client) ------------------------------------------------
    def api(self) -> None:
        """The `run` endpoint (built last in the page's Blocks, hidden)."""
        api_target = uploads.File(label="target", visible=False)
        api_sources = uploads.File(label="sources", file_count="multiple", visible=False)
        api_settings = gr.Textbox(label="preset", visible=False)
        api_agreed = gr.Checkbox(label="consent", visible=False)
        api_output = gr.File(label="output", visible=False)
        api_sidecar = gr.File(label="sidecar", visible=False)
        api_report = gr.JSON(label="report", visible=False)

        def api_run(
            target: str | None, sources: list[str] | None, preset_text: str, agreed: bool, request: gr.Request
        ) -> tuple[str, str, dict[str, Any]]:
            """Run a job: target file, source files, the preset as TOML or JSON text (empty: default), and
            consent (must be true). Returns the output, its job sidecar and the run report."""
            if not agreed:
                raise gr.Error("consent must be true: acknowledge the responsible-use notice", print_exception=False)
            session = self.page.session(request)
            try:
                report, _ = self.studio.run_for(
                    session, parse_preset_text(preset_text), target or "", sources or [], RunState(session.cancel)
                )
            except Exception as exc:
                if not isinstance(exc, FacestudioError):
                    log.error("API run failed", exc_info=exc)
                raise gr.Error(user_message(exc, session.names), print_exception=False) from None
            return (
                self.studio.share(session, report.output),
                self.studio.share(session, report.sidecar),
                report_json(report),
            )

        gr.Button(visible=False).click(
            api_run,
            [api_target, api_sources, api_settings, api_agreed],
            [api_output, api_sidecar, api_report],
            api_name="run",
            concurrency_limit=None,
        )
