# crossrail's image: `crossrail serve` and `crossrail agent` (docs/kubernetes.md#running-crossrail-on-kubernetes).
# Build from the repository root and pass the result to `crossrail deploy render --image`:
#   docker build -t registry.example.com/crossrail:0.1.0 .
# Every Python package is installed at the version constraints.txt pins (the set the test suite runs against),
# with the extras the control plane uses: api (serve, /metrics), k8s (the Kubernetes executor), postgres (the
# shared store), gcs and s3 (reports and checkpoints on object storage), reports (the dashboard's figures, scaling
# fits and the max-min fairness policies: matplotlib and scipy). No framework (torch, jax) is installed: training
# runs in the experiments' own images, which need neither matplotlib nor scipy (crossrail.runtime imports neither).

# python:3.11-slim-bookworm (the Python the pins were resolved for), pinned by digest; to move it on, read the
# current digest with `docker buildx imagetools inspect python:3.11-slim-bookworm` and replace it here.
FROM python:3.11-slim-bookworm@sha256:a36c24f9cbdf4fd0f52d67f0823eeac19c2028c637cecc392d97f980d4fec56b

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/crossrail/bin:$PATH

COPY constraints.txt pyproject.toml README.md /build/
COPY src /build/src
# hatchling is the build backend pyproject.toml names; it is pinned here since constraints.txt pins what runs
RUN python -m venv /opt/crossrail \
 && pip install 'hatchling==1.27.0' \
 && pip install --no-build-isolation -c /build/constraints.txt '/build[api,k8s,postgres,gcs,s3,reports]' \
 && rm -rf /build

# UID and GID 10001: the numbers crossrail.control.ops.deploy.UID gives runAsUser, so runAsNonRoot can verify them
RUN groupadd --gid 10001 crossrail \
 && useradd --uid 10001 --gid 10001 --home-dir /var/lib/crossrail --create-home --shell /usr/sbin/nologin crossrail
USER 10001:10001
ENV CROSSRAIL_HOME=/var/lib/crossrail/.crossrail
WORKDIR /var/lib/crossrail

EXPOSE 8470 9464
ENTRYPOINT ["crossrail"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8470"]
