# syntax=docker/dockerfile:1
#
# Hulk's images. TWO images from one Dockerfile, because the probe's must stay small:
#
#   docker build --target operator -t hulk:0.1.0 .        # `hulk operator` (+ plan, train)
#   docker build --target probe    -t hulk-probe:0.1.0 .  # `hulk probe`
#
# The operator plans with the GNN planner, so it carries CPU-only torch (about 200 MB of
# wheels; the default PyPI torch wheel would pull several GB of CUDA libraries that a
# planner never uses). The probe runs on every node of the cluster (a DaemonSet), imports
# neither torch nor numpy nor the planner (hulk_probe's rule), and so is built from the
# same Hulk wheel with only kubernetes and prometheus-client beside it: a fraction of the
# operator's size, pulled fast onto every new node, with a smaller attack surface.
# Both run as the non-root user hulk (UID/GID 10001, the chart's runAsUser) with `hulk` as
# the entry point, and work with a read-only root filesystem (caches go to /tmp).
#
# Building needs the internet: PyPI, and download.pytorch.org for torch's CPU wheels (the
# PyTorch project's own index for them; pass --build-arg TORCH_INDEX_URL=... to use a
# mirror). Pins follow requirements/dev.txt. Every package from PyPI, transitive ones,
# torch's own requirements and the wheel's build backend included, comes from
# docker/requirements-*.lock, pinned and hashed (pip --require-hashes: a file that differs
# from the one locked fails the build); docker/lock.sh writes them from
# docker/requirements-*.txt, for the Python of PYTHON_IMAGE (3.11: lock again after
# changing it). torch itself is pinned by version (TORCH_VERSION), not by hash: its CPU
# index is not PyPI; pass a mirror that you trust. For reproducible builds pin the base
# image by digest too (python:3.11-slim-bookworm@sha256:...).

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---- Hulk's own wheel (pure Python) -------------------------------------------------------
FROM ${PYTHON_IMAGE} AS wheel
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
# the build backend, hashed; the wheel is built with it alone (--no-build-isolation)
COPY docker/requirements-build.lock /tmp/requirements-build.lock
RUN pip install --no-cache-dir --require-hashes -r /tmp/requirements-build.lock
COPY pyproject.toml README.md ./
COPY hulk/ hulk/
COPY hulk_planner/ hulk_planner/
COPY hulk_operator/ hulk_operator/
COPY hulk_probe/ hulk_probe/
COPY hulk_sandbox/ hulk_sandbox/
RUN pip wheel --no-cache-dir --no-deps --no-build-isolation --wheel-dir /wheels .

# ---- the probe's virtual environment -------------------------------------------------------
FROM ${PYTHON_IMAGE} AS probe-venv
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
COPY docker/requirements-probe.lock /tmp/requirements.lock
RUN python -m venv /opt/hulk \
    && /opt/hulk/bin/pip install --no-cache-dir --require-hashes -r /tmp/requirements.lock
COPY --from=wheel /wheels /wheels
# --no-deps: Hulk's wheel declares numpy, matplotlib, networkx for the planner; the probe
# needs none of them.
RUN /opt/hulk/bin/pip install --no-cache-dir --no-deps /wheels/*.whl

# ---- the operator's virtual environment ----------------------------------------------------
FROM ${PYTHON_IMAGE} AS operator-venv
ARG TORCH_VERSION=2.15.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
# The lock first, torch's own requirements in it (docker/requirements-torch.txt), then
# torch alone (--no-deps): nothing comes unhashed from its index but torch itself.
COPY docker/requirements-operator.lock /tmp/requirements.lock
RUN python -m venv /opt/hulk \
    && /opt/hulk/bin/pip install --no-cache-dir --require-hashes -r /tmp/requirements.lock \
    && /opt/hulk/bin/pip install --no-cache-dir --no-deps --index-url "${TORCH_INDEX_URL}" \
        "torch==${TORCH_VERSION}"
COPY --from=wheel /wheels /wheels
# pip check: every requirement of torch and of Hulk's wheel is met by the lock
RUN /opt/hulk/bin/pip install --no-cache-dir --no-deps /wheels/*.whl \
    && /opt/hulk/bin/pip check

# ---- common runtime base: non-root user, caches under /tmp ---------------------------------
FROM ${PYTHON_IMAGE} AS runtime
RUN groupadd --system --gid 10001 hulk \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /tmp \
        --shell /usr/sbin/nologin hulk
ENV PATH=/opt/hulk/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    XDG_CACHE_HOME=/tmp/.cache \
    MPLCONFIGDIR=/tmp/matplotlib
WORKDIR /tmp
ENTRYPOINT ["hulk"]

# ---- the probe image -----------------------------------------------------------------------
FROM runtime AS probe
COPY --from=probe-venv /opt/hulk /opt/hulk
USER 10001:10001
# Echo server and /metrics + /healthz (hulk_probe/config.py's defaults).
EXPOSE 7471 7472
CMD ["probe"]

# ---- the operator image (the default target) -----------------------------------------------
FROM runtime AS operator
COPY --from=operator-venv /opt/hulk /opt/hulk
USER 10001:10001
# kopf's liveness endpoint and the Prometheus metrics (the chart's defaults).
EXPOSE 8080 9090
CMD ["operator"]
