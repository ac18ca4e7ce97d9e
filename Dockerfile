# The clingate image: every clingate process (workers, consumer groups, provisioning) runs from it.
#
#   make images                                   # builds it on clingate's own Debian base, cached
#   docker run --rm clingate-local/clingate:<tag> --help
#
# By hand: `pip wheel --wheel-dir build/image-wheels .`, then
# `docker build --build-arg BASE=<base image> -t <name> .`. BASE is a Debian bookworm image with
# Python 3 (python3-venv): `make images` builds one from Debian's packages (streams/local/images.py),
# so no registry is needed.
# The entry point is the `clingate` command; the compose file and the Kubernetes manifests pass the
# sub-command (`worker`, `docs worker`, `topics create`, ...). The ACL plan ships at
# /etc/clingate/acls.yaml for `clingate topics acls --plan`. State (RocksDB) lives under
# /var/lib/clingate, a volume: one per worker.
ARG BASE=clingate-local/base:latest
FROM ${BASE}
# The project and its dependencies as wheels built on the host (`make images` puts them in
# build/image-wheels): nothing is fetched from inside the build.
COPY build/image-wheels /wheels
RUN python3 -m venv /opt/clingate \
    && /opt/clingate/bin/pip install --no-cache-dir --quiet --no-index --find-links /wheels clingate \
    && rm -rf /wheels \
    && useradd --uid 10001 --create-home clingate \
    && mkdir -p /var/lib/clingate \
    && chown clingate /var/lib/clingate
COPY deploy/security/acls.yaml /etc/clingate/acls.yaml
USER clingate
ENV PATH=/opt/clingate/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    CLINGATE_HOME=/var/lib/clingate \
    CLINGATE_WORKER_DATADIR=/var/lib/clingate/worker \
    PYTHONUNBUFFERED=1
VOLUME /var/lib/clingate
EXPOSE 6066 6067 6068
ENTRYPOINT ["clingate"]
CMD ["--help"]
