# syntax=docker/dockerfile:1
# Placer's image: `docker build -t placer:0.1.0 .` (linux/amd64 and linux/arm64).
# Stage 1 installs Placer and its dependencies into a virtual environment; only that environment is copied
# into the final image, which has no compiler, no pip and no package manager cache.

FROM python:3.11-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN python -m venv /opt/placer
COPY pyproject.toml README.md constraints.txt ./
COPY webhook ./webhook
RUN /opt/placer/bin/pip install --only-binary=:all: --no-compile -c constraints.txt . \
 && /opt/placer/bin/pip uninstall --yes pip setuptools \
 && /opt/placer/bin/python -m compileall -q -j 0 /opt/placer/lib

FROM python:3.11-slim-bookworm
RUN rm -rf /usr/local/lib/python3.11/site-packages/pip /usr/local/bin/pip* \
 && mkdir -p /app
COPY --from=build /opt/placer /opt/placer
ENV PATH=/opt/placer/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PLACER_BIND=0.0.0.0:8443 \
    PLACER_TLS_CERT=/etc/placer/tls/tls.crt \
    PLACER_TLS_KEY=/etc/placer/tls/tls.key
WORKDIR /app
# A numeric user, so `runAsNonRoot` can be verified by the kubelet. The root filesystem may be read-only:
# Placer writes only under /tmp (mount an emptyDir there).
USER 65532:65532
EXPOSE 8443
# Certificates are read from the mounted Secret at /etc/placer/tls and re-read when the Secret is updated.
ENTRYPOINT ["placer", "serve"]
