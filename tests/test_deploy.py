"""The Dockerfile, the Kubernetes manifests, the Prometheus scrape config and the Grafana dashboard agree with the
app: commands the CLI accepts, probe paths the app serves, ports that line up, volumes that exist, and metric
names the app exports. (The image itself is not built here: no Docker daemon.)"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi import FastAPI

import cli
from engine.core.metrics import PROCESS_METRICS
from engine.models import derived
from engine.models.runtime import Folders
from engine.serve.health import Readiness
from processors import REGISTRY
from webui import server
from webui.app import Studio, api_jobs

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
KINDS = {
    "PersistentVolumeClaim": "v1",
    "Deployment": "apps/v1",
    "Service": "v1",
    "Ingress": "networking.k8s.io/v1",
    "RayCluster": "ray.io/v1",
    "ServiceMonitor": "monitoring.coreos.com/v1",
}


def manifests() -> list[dict[str, Any]]:
    docs = []
    for path in sorted(DEPLOY.rglob("*.yaml")):
        docs += [dict(d, _file=path.name) for d in yaml.safe_load_all(path.read_text()) if d is not None]
    return docs


def resources() -> list[dict[str, Any]]:
    return [d for d in manifests() if "kind" in d]


def of_kind(kind: str) -> list[dict[str, Any]]:
    return [d for d in resources() if d["kind"] == kind]


def pod_specs() -> Iterator[tuple[str, dict[str, Any]]]:
    for doc in resources():
        if doc["kind"] == "Deployment":
            yield doc["metadata"]["name"], doc["spec"]["template"]["spec"]
        elif doc["kind"] == "RayCluster":
            yield "ray-head", doc["spec"]["headGroupSpec"]["template"]["spec"]
            for group in doc["spec"]["workerGroupSpecs"]:
                yield f"ray-{group['groupName']}", group["template"]["spec"]


def app_paths(tmp_path: Path) -> set[str]:
    studio = Studio(work_dir=tmp_path / "work")
    routes = server.routes(api_jobs(studio, tmp_path / "jobs", 1), Readiness(REGISTRY), auth=None, max_upload=1)
    return {route.path for route in FastAPI(routes=routes).routes}  # type: ignore[attr-defined]


def launch_args(argv: list[str]) -> list[str]:
    """The arguments after `launch.py`, with Kubernetes `$(VAR)` references filled with a sample value."""
    assert argv[:2] == ["python", "launch.py"], argv
    return [re.sub(r"\$\([A-Z_]+\)", "user:secret", a) for a in argv[2:]]


def exported_names() -> set[str]:
    """Every sample name /metrics can serve (counters as *_total, histograms as *_bucket/_sum/_count)."""
    names = set()
    for family in PROCESS_METRICS.registry.collect():
        suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"]}.get(family.type, [""])
        names |= {family.name + s for s in suffixes}
    return names


def test_every_manifest_has_a_known_kind_and_its_required_fields() -> None:
    found = resources()
    assert {d["kind"] for d in found} == set(KINDS)
    for doc in found:
        assert doc["apiVersion"] == KINDS[doc["kind"]], doc["_file"]
        assert doc["metadata"]["name"] and doc["spec"], doc["_file"]
    for claim in of_kind("PersistentVolumeClaim"):
        assert claim["spec"]["accessModes"] and claim["spec"]["resources"]["requests"]["storage"]


def test_containers_run_commands_the_cli_accepts(tmp_path: Path) -> None:
    parser = cli.build_parser()
    (deployment,) = of_kind("Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    args = parser.parse_args(launch_args(container["command"] + container["args"]))
    settings = cli.ui.ui_settings(args)
    assert (args.command, settings.host) == ("ui", "0.0.0.0")
    # The login comes from a secret that the container's environment names.
    env = {e["name"]: e for e in container["env"]}
    assert "$(FACESTUDIO_LOGIN)" in container["args"] and "secretKeyRef" in env["FACESTUDIO_LOGIN"]["valueFrom"]
    # Ports line up: the app's --port, the container port, the probes' named port, the Service's target.
    (port,) = container["ports"]
    assert port["containerPort"] == settings.port
    paths = app_paths(tmp_path)
    for probe, path in (("startupProbe", "/healthz"), ("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = container[probe]["httpGet"]
        assert (get["path"], get["port"]) == (path, port["name"]) and path in paths
    (service,) = of_kind("Service")
    assert service["spec"]["ports"][0]["targetPort"] == port["name"]
    assert service["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    assert service["spec"]["sessionAffinity"] == "ClientIP"
    (ingress,) = of_kind("Ingress")
    assert ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/affinity"] == "cookie"
    backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert (backend["name"], backend["port"]["name"]) == (service["metadata"]["name"], "http")


def test_volumes_exist_and_mount_where_the_engine_looks() -> None:
    claims = {c["metadata"]["name"] for c in of_kind("PersistentVolumeClaim")}
    folders = Folders(models=Path("/data/models"), cache=Path("/data/cache"))
    for name, spec in pod_specs():
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for volume in volumes.values():
            assert "secret" in volume or volume["persistentVolumeClaim"]["claimName"] in claims, name
        for container in spec["containers"]:
            mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}
            assert set(mounts.values()) <= set(volumes), name
            if mounts:
                assert {str(folders.models), str(folders.cache)} <= set(mounts), name
        assert spec["securityContext"]["runAsNonRoot"] is True, name


def test_every_pod_sharing_the_cache_reads_one_integrity_key_from_a_read_only_secret() -> None:
    # Derived models (conversions, exports, quantised graphs) in the shared volumes are signed with the
    # installation's key: a pod with a key of its own would redo or refuse what another pod made.
    sharing = []
    for name, spec in pod_specs():
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for container in spec["containers"]:
            mounts = {m["mountPath"]: m for m in container.get("volumeMounts", [])}
            if "/data/cache" not in mounts:
                continue
            env = {e["name"]: e for e in container.get("env", [])}
            key = Path(env[derived.KEY_ENV]["value"])
            mount = mounts[str(key.parent)]
            assert mount.get("readOnly") is True, name
            secret = volumes[mount["name"]]["secret"]
            assert secret["defaultMode"] & 0o227 == 0, name  # nobody writes it, others cannot read it
            sharing.append((secret["secretName"], key.name))
    assert len(sharing) == 2 and len(set(sharing)) == 1, sharing
    # The manifest's header tells how to make that secret, under the file name the engine is pointed at.
    text = (DEPLOY / "facestudio.yaml").read_text()
    assert f"kubectl create secret generic {sharing[0][0]} --from-literal={sharing[0][1]}=" in text


def test_ray_workers_ask_for_one_gpu_each_from_the_same_image() -> None:
    (cluster,) = of_kind("RayCluster")
    images = set()
    for name, spec in pod_specs():
        if not name.startswith("ray-"):
            continue
        (container,) = spec["containers"]
        images.add(container["image"])
        # KubeRay starts Ray itself; a command here would replace its `ray start`.
        assert "command" not in container and "args" not in container, name
    assert len(images) == 1
    (group,) = cluster["spec"]["workerGroupSpecs"]
    (worker,) = group["template"]["spec"]["containers"]
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == 1
    env = {e["name"]: e["value"] for e in worker["env"]}
    assert {env["FACESTUDIO_MODELS"], env["FACESTUDIO_CACHE"]} == {"/data/models", "/data/cache"}
    assert cluster["spec"]["headGroupSpec"]["rayStartParams"]["num-gpus"] == "0"
    assert "MIG strategy `single`" in (DEPLOY / "raycluster.yaml").read_text()


def test_prometheus_scrapes_the_metrics_path_on_the_services_port(tmp_path: Path) -> None:
    (monitor,) = of_kind("ServiceMonitor")
    (service,) = of_kind("Service")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert endpoint["path"] == "/metrics" and endpoint["path"] in app_paths(tmp_path)
    (scrape,) = yaml.safe_load((DEPLOY / "prometheus" / "scrape.yaml").read_text())["scrape_configs"]
    assert scrape["metrics_path"] == "/metrics"
    kept = {r["regex"] for r in scrape["relabel_configs"] if r.get("action") == "keep"}
    assert kept == {"facestudio", "http"}


def test_grafana_panels_query_only_metrics_the_app_exports() -> None:
    dashboard = json.loads((DEPLOY / "grafana" / "facestudio.json").read_text())
    exported = exported_names()
    queried = set()
    for panel in dashboard["panels"]:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            names = set(re.findall(r"\b((?:facestudio|process)_[a-z_]+)\b", target["expr"]))
            assert names and names <= exported, (panel["title"], names - exported)
            queried |= names
    # Every facestudio family is on the dashboard.
    assert {family(n) for n in exported if n.startswith("facestudio_")} <= {family(n) for n in queried}


def family(name: str) -> str:
    return re.sub(r"_(total|bucket|sum|count)$", "", name)


def dockerfile() -> list[tuple[str, str]]:
    """(instruction, rest) per instruction of the Dockerfile, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n\s*", " ", (ROOT / "Dockerfile").read_text())
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def instruction(name: str) -> list[str]:
    return [rest for kind, rest in dockerfile() if kind == name]


def test_dockerfile_serves_the_ui_with_its_healthcheck_and_volumes(tmp_path: Path) -> None:
    (base,) = instruction("FROM")
    assert re.fullmatch(r"nvidia/cuda:13\.\d+\.\d+-cudnn-runtime-ubuntu24\.04", base)
    # The CUDA major of the base image is the one the installed GPU wheels were built for.
    torch = pytest.importorskip("torch")
    if torch.version.cuda:
        assert base.split(":")[1].split(".")[0] == torch.version.cuda.split(".")[0]
    (entrypoint,) = instruction("ENTRYPOINT")
    (command,) = instruction("CMD")
    args = cli.build_parser().parse_args(launch_args(json.loads(entrypoint) + json.loads(command)))
    settings = cli.ui.ui_settings(args)
    assert (args.command, settings.host) == ("ui", "0.0.0.0")
    (exposed,) = instruction("EXPOSE")
    assert int(exposed) == settings.port
    (healthcheck,) = instruction("HEALTHCHECK")
    url = re.search(r"http://127\.0\.0\.1:(\d+)(/\w+)", healthcheck)
    assert url and int(url[1]) == settings.port and url[2] == "/healthz" and url[2] in app_paths(tmp_path)
    env = dict(re.findall(r"(\w+)=(\S+)", " ".join(instruction("ENV"))))
    assert set(env["NVIDIA_DRIVER_CAPABILITIES"].split(",")) == {"compute", "utility", "video"}
    # The folders the engine reads from the environment are the image's volumes.
    (volumes,) = instruction("VOLUME")
    assert sorted(json.loads(volumes)) == sorted([env["FACESTUDIO_MODELS"], env["FACESTUDIO_CACHE"]])
    (user,) = instruction("USER")
    assert user not in {"root", "0"}
    assert shlex.split(instruction("RUN")[0])[0] == "apt-get" and "ffmpeg" in instruction("RUN")[0]


def test_dockerignore_keeps_local_state_out_of_the_image() -> None:
    ignored = set((ROOT / ".dockerignore").read_text().split())
    assert {".git", ".venv", "models", ".cache", "outputs"} <= ignored
