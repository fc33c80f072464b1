# One image for every `payments` command: API, worker, migrations, fake provider, client.
FROM python:3.11-slim
WORKDIR /srv/payments
# The exact versions of requirements.lock, each file checked against its hash (pip refuses any
# other), in a layer of their own that only a change of the lock rebuilds.
COPY requirements.lock ./
RUN pip install --no-cache-dir --require-hashes -r requirements.lock
COPY pyproject.toml README.md alembic.ini ./
COPY app ./app
COPY worker ./worker
COPY fake_provider ./fake_provider
COPY client ./client
COPY migrations ./migrations
# Editable, so the migrations and alembic.ini stay next to the code that finds them; without
# dependencies (the lock brought them) and with the lock's setuptools rather than a fresh one.
RUN pip install --no-cache-dir --no-deps --no-build-isolation -e . \
    && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin payments \
    && mkdir /data \
    && chown payments /data
ENV PYTHONUNBUFFERED=1
# Every service runs as this user; /data (the fake provider's ledger) is its own.
USER payments
CMD ["payments", "serve", "--host", "0.0.0.0"]
