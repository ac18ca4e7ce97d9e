# The clingate image: every clingate process (workers, consumer groups, provisioning) runs from it.
#
#   docker build -t clingate .
#   docker run --rm clingate --help
#
# The entry point is the `clingate` command; the compose file and the Kubernetes manifests pass the
# sub-command (`worker`, `docs worker`, `topics create`, ...). The ACL plan ships at
# /etc/clingate/acls.yaml for `clingate topics acls --plan`. State (RocksDB) lives under
# /var/lib/clingate, a volume: one per worker.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY streams streams
COPY topics topics
COPY processors processors
COPY state state
COPY schemas schemas
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
RUN useradd --uid 10001 --create-home clingate \
    && mkdir -p /var/lib/clingate \
    && chown clingate /var/lib/clingate
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
COPY deploy/security/acls.yaml /etc/clingate/acls.yaml
USER clingate
ENV CLINGATE_HOME=/var/lib/clingate \
    CLINGATE_WORKER_DATADIR=/var/lib/clingate/worker \
    PYTHONUNBUFFERED=1
VOLUME /var/lib/clingate
EXPOSE 6066 6067 6068
ENTRYPOINT ["clingate"]
CMD ["--help"]
