# One image for every muster service; compose.yaml picks the service by command.
FROM python:3.11-slim
WORKDIR /app
COPY requirements.lock pyproject.toml README.md ./
RUN pip install --no-cache-dir -r requirements.lock
COPY contracts ./contracts
COPY services ./services
COPY muster ./muster
RUN pip install --no-cache-dir --no-deps .
USER nobody
ENTRYPOINT ["muster"]
