# facestudio: the web UI, probes, /metrics and the jobs API on port 7860, on an NVIDIA GPU (or the CPU).
#
#   docker build -t facestudio .                                  # add --build-arg EXTRAS=ray for Ray workers
#   docker run --gpus all -p 7860:7860 -v facestudio-models:/data/models -v facestudio-cache:/data/cache \
#       facestudio ui --host 0.0.0.0 --auth me:a-long-password
#
# CUDA 13 with cuDNN 9: what the onnxruntime-gpu (≥ 1.20, CUDA 13 builds on PyPI) and torch (+cu130) wheels that
# pyproject.toml pulls (the default install profile: requirements/gpu.txt, requirements/torch.txt) are built for.
# The wheels bring their own CUDA/cuDNN libraries too; the base image keeps the system copies of the same major
# versions, so either is found. Only the driver comes from the host.
FROM nvidia/cuda:13.0.1-cudnn-runtime-ubuntu24.04

# compute: CUDA; utility: nvidia-smi (the app's GPU detection); video: NVENC/NVDEC for ffmpeg.
ENV NVIDIA_DRIVER_CAPABILITIES=compute,utility,video \
    DEBIAN_FRONTEND=noninteractive \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PATH=/opt/venv/bin:$PATH \
    FACESTUDIO_MODELS=/data/models \
    FACESTUDIO_CACHE=/data/cache \
    FACESTUDIO_HOME=/data/home \
    TMPDIR=/data/work

# Ubuntu 24.04: Python 3.12 and FFmpeg 6.1 (the engine needs 5.1 or newer).
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv ffmpeg \
    && rm -rf /var/lib/apt/lists/*

RUN useradd --create-home --uid 10001 --user-group facestudio \
    && mkdir -p /data/models /data/cache /data/home /data/work \
    && chown -R facestudio:facestudio /data

WORKDIR /app
# Dependencies first (pyproject.toml installs no packages of its own), so code changes reuse this layer.
ARG EXTRAS=""
COPY pyproject.toml README.md ./
COPY requirements ./requirements
RUN python3 -m venv /opt/venv \
    && pip install --upgrade pip \
    && pip install ".${EXTRAS:+[$EXTRAS]}"
COPY --chown=facestudio:facestudio . .

USER facestudio
# Models (downloads) and the engine cache (converted ONNX graphs, TensorRT engines) outlive the container.
# /data/work holds uploads, outputs and job folders (TMPDIR): mount a volume there for long videos.
VOLUME ["/data/models", "/data/cache"]
EXPOSE 7860
HEALTHCHECK --interval=30s --timeout=5s --start-period=120s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:7860/healthz', timeout=4)"]
ENTRYPOINT ["python", "launch.py"]
CMD ["ui", "--host", "0.0.0.0", "--port", "7860"]
