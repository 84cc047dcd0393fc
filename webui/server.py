"""HTTP routes served beside the Gradio UI on the same port: probes, metrics and the jobs API.

    GET  /healthz                 200 while the process answers (liveness)
    GET  /readyz                  200 {"ready": true, "reasons": []} or 503 with the reasons (readiness)
    GET  /metrics                 Prometheus text format (engine.core.metrics)
    POST /api/jobs                multipart: target, sources (repeatable), preset (TOML or JSON text), consent=true,
                                  and a file for each file setting the preset uses, under the setting's name
                                  (`lip_syncer.audio`, `faces.reference_image`) → 202 {"id": …, "token": …}
    GET  /api/jobs/{id}           {"id", "status", "progress": {"done", "total"}, "error"}
    POST /api/jobs/{id}/cancel    the job's status after the request
    GET  /api/jobs/{id}/result    the output file; ?sidecar=1: the job sidecar (JSON)

Every /api/jobs/{id} route needs the job's token in the `X-Job-Token` header: a job's status and result reach
the client that submitted it alone (another client, with or without the login, gets 404 as for an unknown id).
A job reads the files uploaded with it and nothing else: a preset naming a path for a file setting, or setting
one of the server's settings (`runtime.device` …), is refused (400) as in the studio (engine/serve/service.py).
One client (the login, else its address) may have `--jobs-per-user` jobs waiting or running (429 beyond).

Errors are {"detail": "<one line>"}. With `--auth USER:PASS` the /api routes take the same login as HTTP basic
auth; the probes and /metrics stay open (probes and scrapers do not log in; metrics carry no paths or ids).
The routes are handed to Gradio's own FastAPI app (`launch(app_kwargs={"routes": …})`), ahead of Gradio's routes,
so `--share` and Gradio's login keep working as they are.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Depends, File, Form, Header, HTTPException, Request, UploadFile
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.routing import APIRoute
from fastapi.security import HTTPBasic, HTTPBasicCredentials
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.datastructures import UploadFile as StarletteUpload

from engine.core.errors import InvalidInput
from engine.core.metrics import PROCESS_METRICS
from engine.serve.health import Readiness
from webui.jobs import (
    JobQueue,
    JobRecord,
    QueueFull,
    Saved,
    TooManyJobs,
    UploadTooLarge,
    copy_upload,
    parse_preset_text,
)
from webui.names import plain_name, scrub

log = logging.getLogger(__name__)

_basic = HTTPBasic(auto_error=False)


# A job's own secret, given once by the submit answer (a module-level alias: FastAPI resolves annotations here).
Token = Annotated[str | None, Header(alias="X-Job-Token", description="the token the submit answer gave")]
# Source photos a job may bring: with the per-file limit this bounds a request's whole body.
MAX_SOURCES = 8


def routes(
    jobs: JobQueue,
    readiness: Readiness,
    *,
    auth: tuple[str, str] | None,
    max_upload: int,
    file_settings: Sequence[str] = (),
) -> list[APIRoute]:
    """The probe, metrics and jobs routes. `max_upload`: the largest file accepted, in bytes; `file_settings`: the
    settings that take a file ("lip_syncer.audio" …), each an optional upload field of the submit form."""

    def login(request: Request, credentials: Annotated[HTTPBasicCredentials | None, Depends(_basic)]) -> None:
        """401 without the right login (when the server has one); the login's user name is kept for the route."""
        if auth is None:
            return
        ok = credentials is not None and all(
            secrets.compare_digest(given.encode(), wanted.encode())
            for given, wanted in zip((credentials.username, credentials.password), auth, strict=True)
        )
        if not ok:
            raise HTTPException(401, "log in with the server's --auth user and password", {"WWW-Authenticate": "Basic"})
        request.state.api_user = credentials.username if credentials is not None else None

    probes = APIRouter()

    @probes.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @probes.get("/readyz")
    def readyz() -> JSONResponse:
        # Open to anyone (probes do not log in): the reasons name files by their names only; the operator's log has
        # the whole lines, paths included.
        reasons = readiness.reasons()
        for reason in reasons:
            log.warning("not ready: %s", reason)
        shown = [scrub(reason, {}) for reason in reasons]
        return JSONResponse({"ready": not reasons, "reasons": shown}, status_code=503 if reasons else 200)

    @probes.get("/metrics")
    def metrics() -> Response:
        return Response(PROCESS_METRICS.exposition(), media_type=CONTENT_TYPE_LATEST)

    api = APIRouter(prefix="/api", dependencies=[Depends(login)])

    def found(job_id: str, token: str | None) -> JobRecord:
        record = jobs.get(job_id, token)
        if record is None:
            raise HTTPException(
                404,
                f"no job {job_id!r} for this token (send the token the submit answer gave as X-Job-Token; finished "
                "jobs are kept for a while, then forgotten)",
            )
        return record

    # The body is bounded before it is read (FastAPI stops reading past it with 413): it is parsed before the login
    # and the per-file checks run, so without a bound any client could fill the temp disk.
    uploads = 1 + MAX_SOURCES + len(file_settings)

    @api.post("/jobs", status_code=202, max_body_size=max_upload * uploads + (1 << 16))
    async def submit(
        request: Request,
        target: Annotated[UploadFile, File(description="target image or video")],
        sources: Annotated[list[UploadFile] | None, File(description="source face images")] = None,
        preset: Annotated[str, Form(description="preset as TOML or JSON text; empty: the default")] = "",
        consent: Annotated[bool, Form(description="acknowledges the responsible-use notice; must be true")] = False,
    ) -> dict[str, str]:
        if not consent:
            raise HTTPException(403, "consent must be true: acknowledge the responsible-use notice")
        if len(sources or []) > MAX_SOURCES:
            raise HTTPException(400, f"{len(sources or [])} source images; a job takes at most {MAX_SOURCES}")
        form = await request.form()  # FastAPI's parse of this request, kept: the file settings' fields
        given = {s: form[s] for s in file_settings if isinstance(form.get(s), StarletteUpload)}
        files = [("target", target), *((f"source {i}", s) for i, s in enumerate(sources or [], 1)), *given.items()]
        # Refused from its declared length when it cannot fit (64 kB spare for the form fields and multipart
        # framing); each file is also checked as it is stored.
        length = request.headers.get("content-length", "")
        if length.isdigit() and int(length) > max_upload * len(files) + (1 << 16):
            raise HTTPException(413, f"the upload is over the server's upload limit of {max_upload} bytes a file")

        def save(folder: Path) -> Saved:
            # Each upload in a folder of its own under the name the client gave (made safe): the output and its
            # sidecar are named after it, and two sources may share a name.
            names: dict[str, str] = {}
            saved: list[Path] = []
            for i, (what, upload) in enumerate(files):
                name = plain_name(upload.filename or "", fallback=what.replace(" ", "-").replace(".", "-"))
                (folder / "inputs" / str(i)).mkdir(parents=True)
                path = copy_upload(upload.file, folder / "inputs" / str(i) / name, max_upload, what)
                names[str(path)] = name
                saved.append(path)
            count = 1 + len(sources or [])
            return saved[0], saved[1:count], names, dict(zip(given, saved[count:], strict=True))

        user = getattr(request.state, "api_user", None)
        client = f"user:{user}" if user else f"address:{request.client.host if request.client else ''}"
        try:
            record = await run_in_threadpool(jobs.submit, parse_preset_text(preset), save, client)
        except UploadTooLarge as exc:
            raise HTTPException(413, str(exc)) from None
        except QueueFull as exc:
            raise HTTPException(503, str(exc), {"Retry-After": "30"}) from None
        except TooManyJobs as exc:
            raise HTTPException(429, str(exc), {"Retry-After": "30"}) from None
        except InvalidInput as exc:
            raise HTTPException(400, str(exc)) from None
        return {"id": record.id, "token": record.token}

    @api.get("/jobs/{job_id}")
    def status(job_id: str, token: Token = None) -> dict[str, object]:
        return found(job_id, token).as_json()

    @api.post("/jobs/{job_id}/cancel")
    def cancel(job_id: str, token: Token = None) -> dict[str, object]:
        return (jobs.cancel(job_id, token) or found(job_id, token)).as_json()

    @api.get("/jobs/{job_id}/result")
    def result(job_id: str, sidecar: bool = False, token: Token = None) -> FileResponse:
        record = found(job_id, token)
        path = record.sidecar if sidecar else record.output
        if record.status != "done" or path is None:
            raise HTTPException(409, f"job {job_id} is {record.status}; its result is served once it is done")
        media = "application/json" if sidecar else None
        return FileResponse(path, media_type=media, filename=path.name)

    return [r for router in (probes, api) for r in router.routes if isinstance(r, APIRoute)]
