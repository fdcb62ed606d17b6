# One image for every muster service; compose.yaml picks the service by command.
FROM python:3.11-slim
WORKDIR /app
COPY requirements.lock pyproject.toml README.md ./
RUN pip install --no-cache-dir -r requirements.lock
COPY contracts ./contracts
COPY services ./services
COPY muster ./muster
RUN pip install --no-cache-dir --no-deps .
# Named volumes take the owner of the folder they are mounted on: the auth service writes
# tokens to /creds, the tls service the CA (/ca) and the certificates (/tls), as nobody.
RUN mkdir -p /creds /ca /tls && chown nobody /creds /ca /tls
USER nobody
ENTRYPOINT ["muster"]
