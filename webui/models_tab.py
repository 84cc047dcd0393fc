"""The studio's Models tab: every model of the catalogue, grouped by what it does and searchable, each with its
size, whether it is here, whether commercial use is allowed and its whole licence; Download (sha256-checked,
resumable, with progress in its row) and a check of the downloaded files.

A model licensed for non-commercial use only downloads once its row's "non-commercial use only" box is ticked. A
download that cannot reach the network says so ("no network"), naming the host, rather than a generic failure.
Nothing here runs unless asked: the app makes no network call of its own."""

from __future__ import annotations

import logging
import urllib.error
import urllib.parse
from collections.abc import Sequence
from typing import Any

import gradio as gr

from engine.models.licences import licence_texts
from engine.models.licences import summary as licence_summary
from engine.serve.catalogue import ModelStatus
from engine.serve.service import Service
from webui.studio import user_message

log = logging.getLogger(__name__)

# How the tasks are called and listed (the catalogue's other tasks follow, by name).
TASKS = {
    "face_swapper": "Face swappers",
    "face_enhancer": "Face enhancers (restorers)",
    "frame_enhancer": "Frame enhancers (upscalers)",
    "lip_syncer": "Lip syncers",
    "expression_restorer": "Expression restorers",
    "face_analyser": "Face analysers",
    "face_detector": "Face detectors",
    "face_recogniser": "Face recognisers",
    "face_occluder": "Occlusion masks",
    "face_parser": "Face parsers (region masks)",
    "embedding_converter": "Embedding converters",
    "content_check": "Content checks",
}


def matches(status: ModelStatus, query: str) -> bool:
    """Whether a model matches the search: every word in its id, title, task or licence (case ignored)."""
    text = " ".join((status.id, status.title, status.task, TASKS.get(status.task, ""), status.licence)).lower()
    return all(word in text for word in query.lower().split())


def grouped(statuses: Sequence[ModelStatus], query: str = "") -> list[tuple[str, list[ModelStatus]]]:
    """The models matching `query`, by task (TASKS' order first), each group's title with its count."""
    order = [*TASKS, *sorted({s.task for s in statuses} - set(TASKS))]
    out = []
    for task in order:
        found = [s for s in statuses if s.task == task and matches(s, query)]
        if found:
            out.append((TASKS.get(task, task.replace("_", " ")), found))
    return out


def download_failure(exc: BaseException) -> str:
    """What a failed download says: "no network" with the host when it could not connect at all, else why."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, urllib.error.URLError) and not isinstance(cause, urllib.error.HTTPError):
            reason = cause.reason
            url = str(getattr(exc, "url", "") or _url_in(str(exc)))
            host = urllib.parse.urlsplit(url).hostname or "the download server"
            return (
                f"no network: {host} cannot be reached ({reason}) — connect this machine to the internet and "
                "press Download again (a partial download resumes)"
            )
        if isinstance(cause, ConnectionError | TimeoutError):
            return f"the connection broke ({cause}) — press Download again: the download resumes where it stopped"
        cause = cause.__cause__ or cause.__context__
    return f"download failed: {user_message(exc, {})}"


def _url_in(text: str) -> str:
    return next((w for w in text.split() if w.startswith(("http://", "https://"))), "")


class ModelsTab:
    """Builds the Models tab's rows (when the tab is opened, and for each search) and downloads and verifies
    models."""

    def __init__(self, service: Service) -> None:
        self.service = service

    def build(self, tab: gr.Tab) -> None:
        self.version = gr.State(0)
        with gr.Row(equal_height=True):
            self.search = gr.Textbox(
                placeholder="search: name, task or licence (e.g. swapper, codeformer, mit)", show_label=False,
                elem_id="models-search", scale=4, container=False,
            )  # fmt: skip
            self.verify = gr.Button("Verify downloaded files", size="sm", scale=1, min_width=180)
        gr.Markdown("Every model in the catalogue, by what it does. Downloads are sha256-checked and resumable; "
                    "nothing is downloaded unless you press Download.", min_height=0)  # fmt: skip
        self.status = gr.Markdown(elem_id="models-status", min_height=0)

        @gr.render(
            inputs=[self.version, self.search],
            triggers=[tab.select, self.version.change, self.search.change],
            concurrency_limit=1,
            concurrency_id="model-rows",
        )
        def show(version: int, query: str) -> None:
            self._rows(query or "")

    def wire(self) -> None:
        self.verify.click(self.on_verify, None, [self.status], concurrency_id="download")

    def _rows(self, query: str) -> None:
        groups = grouped(self.service.catalogue.statuses(), query)
        if not groups:
            gr.Markdown(f"*No model matches “{query}”.*", elem_id="models-none")
        for title, statuses in groups:
            gr.Markdown(f"### {title} ({len(statuses)})", elem_classes="fs-model-group")
            for status in statuses:
                self._row(status)

    def _row(self, status: ModelStatus) -> None:
        megabytes = None if status.size is None else f"{status.size / 1e6:,.0f} MB"
        if status.availability == "embedded":
            size = "embedded" + (f" (original {megabytes})" if megabytes else "")
        else:
            size = megabytes or "size unknown"
        use = "commercial use OK" if status.commercial_use else "**non-commercial**"
        with gr.Row(equal_height=False, elem_classes="fs-model", elem_id=f"model-row-{status.id}"):
            with gr.Column(scale=5):
                gr.Markdown(f"**{status.id}** — {status.title} · {size} · {use}", elem_id=f"model-{status.id}")
                with gr.Accordion(f"licence: {status.licence}", open=False, elem_classes="fs-licence"):
                    texts = licence_texts(status.licence, status.homepage)
                    body = "\n\n---\n\n".join(f"### {t.title}\n\n```text\n{t.text}\n```" for t in texts)
                    gr.Markdown(f"{licence_summary(status.licence, status.homepage)}\n\n{body}")
            with gr.Column(scale=2, min_width=200):
                row_status = gr.Markdown(status.availability, elem_id=f"model-status-{status.id}")
                if not status.downloadable:
                    return
                accepted = gr.State(True)
                if not status.commercial_use:
                    accepted = gr.Checkbox(
                        label="non-commercial use only: I accept its licence", value=False,
                        elem_id=f"model-accept-{status.id}",
                    )  # fmt: skip
                label = "Download original" if status.availability == "embedded" else "Download"
                button = gr.Button(label, size="sm", elem_id=f"model-download-{status.id}")
                button.click(
                    self.download(status.id), [accepted], [row_status], concurrency_id="download",
                    concurrency_limit=2, show_progress="full",
                )  # fmt: skip

    def download(self, model_id: str) -> Any:
        """The handler of a model's Download button: refuses a non-commercial model until its licence is accepted
        (`accepted`), then fetches it with a progress bar in its row; says there how it went."""

        def download(accepted: bool = True, progress: gr.Progress = gr.Progress()) -> str:
            if not accepted:
                status = self.service.catalogue.status(model_id)
                return (
                    f"<span class='fs-warn'>{status.title} is licensed for non-commercial use only "
                    f"({status.licence}): tick the box above to accept that, then Download</span>"
                )

            def bar(item: Any) -> Any:
                return lambda done, total: progress((done, total), desc=item.filename, unit="B")

            try:
                paths = self.service.catalogue.fetch([model_id], progress=bar, say=log.info)
            except Exception as exc:
                log.info("download of %s failed: %s", model_id, exc)
                return f"<span class='fs-warn'>{download_failure(exc)}</span>"
            return f"downloaded: {', '.join(p.name for p in paths) or 'nothing to download'}"

        return download

    def on_verify(self) -> str:
        rows = [r for r in self.service.catalogue.verify() if r.status != "missing"]
        if not rows:
            return "no model files here to check"
        return "\n".join(
            f"- {'ok' if r.status == 'ok' else '**' + r.status + '**'}: {r.model} ({r.path.name})" for r in rows
        )
