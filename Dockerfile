FROM python:3.11-slim
WORKDIR /srv/payments
COPY pyproject.toml README.md alembic.ini ./
COPY app ./app
COPY worker ./worker
COPY fake_provider ./fake_provider
COPY migrations ./migrations
RUN pip install --no-cache-dir -e .
ENV PYTHONUNBUFFERED=1
USER nobody
CMD ["payments", "serve", "--host", "0.0.0.0"]
