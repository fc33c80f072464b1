# One image for every `payments` command: API, worker, migrations, fake provider, client.
FROM python:3.11-slim
WORKDIR /srv/payments
COPY pyproject.toml README.md alembic.ini ./
COPY app ./app
COPY worker ./worker
COPY fake_provider ./fake_provider
COPY client ./client
COPY migrations ./migrations
# Editable, so the migrations and alembic.ini stay next to the code that finds them.
RUN pip install --no-cache-dir -e . \
    && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin payments \
    && mkdir /data \
    && chown payments /data
ENV PYTHONUNBUFFERED=1
# Every service runs as this user; /data (the fake provider's ledger) is its own.
USER payments
CMD ["payments", "serve", "--host", "0.0.0.0"]
