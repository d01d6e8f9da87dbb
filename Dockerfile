# The project's image for the docker-compose worker and producer services.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY streams ./streams
COPY schemas ./schemas
RUN pip install --no-cache-dir .
ENTRYPOINT ["streams"]
