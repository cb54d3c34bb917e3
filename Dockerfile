FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PALIMPSEST_DATA_DIR=/var/lib/palimpsest

# Unprivileged user; it owns the data directory used when no external database is configured
# (the embedded PostgreSQL refuses to run as root).
RUN groupadd --system --gid 10001 palimpsest \
 && useradd --system --uid 10001 --gid palimpsest --home-dir /home/palimpsest --create-home \
        --shell /usr/sbin/nologin palimpsest \
 && install -d -o palimpsest -g palimpsest "$PALIMPSEST_DATA_DIR"

WORKDIR /src
COPY . .
RUN pip install --no-cache-dir ./clients/python .

USER 10001:10001
WORKDIR /home/palimpsest

ENTRYPOINT ["palimpsest"]
CMD ["--help"]
