"""The tiny model server, as a local process (what bench/serve.py runs) and in its image
(``scripts/docker-up --python`` builds ``fgpu/model-server:latest``)."""

import json
import subprocess
from pathlib import Path

import httpx
import pytest

from services.model_server import predict
from tests.support.cli_stack import docker
from tests.support.docker_env import require_docker, skip_or_fail
from tests.support.model_servers import model_servers

IMAGE = "fgpu/model-server:latest"


def test_it_predicts_streams_and_says_its_health() -> None:
    with model_servers(1) as (address,):
        base = f"http://{address[0]}:{address[1]}"
        with httpx.Client(base_url=base, timeout=10) as client:
            posted = client.post("/predict", json={"inputs": [1, 2, 3, 4]}).json()
            assert posted["score"] == predict([1, 2, 3, 4])["score"] and posted["label"] == 1
            assert client.get("/predict?x=-5").json()["label"] == 0
            assert client.post("/predict", content=b"[").status_code == 400
            with client.stream("GET", "/generate?prompt=hi&tokens=3") as response:
                events = [line for line in response.iter_lines() if line]
            assert [json.loads(e.removeprefix("data: "))["index"] for e in events[:3]] == [0, 1, 2]
            assert events[3] == "data: [DONE]"
            assert client.get("/health").status_code == 200


def test_it_is_unhealthy_while_warming_and_while_its_file_exists(tmp_path: Path) -> None:
    flag = tmp_path / "unhealthy"
    with model_servers(1, UNHEALTHY_FILE=str(flag), WARMUP_S="3600") as (warming,):
        assert httpx.get(f"http://{warming[0]}:{warming[1]}/health").status_code == 503
    with model_servers(1, UNHEALTHY_FILE=str(flag)) as (address,):
        url = f"http://{address[0]}:{address[1]}/health"
        assert httpx.get(url).status_code == 200
        flag.touch()
        assert httpx.get(url).status_code == 503


# Runs the server in its container (no network: the private engine has none) and asks it
# from beside it: what a replica's session runs.
_IN_CONTAINER = """
import json, subprocess, time, urllib.request
server = subprocess.Popen(["python3", "/srv/model_server.py"])
for _ in range(200):
    try:
        urllib.request.urlopen("http://127.0.0.1:8080/health", timeout=1)
        break
    except OSError:
        time.sleep(0.05)
ask = urllib.request.Request("http://127.0.0.1:8080/predict", data=b'{"inputs": [1, 2]}')
print(json.dumps(json.load(urllib.request.urlopen(ask, timeout=5))))
server.terminate()
"""


@pytest.mark.docker
def test_the_image_serves_the_model() -> None:
    require_docker()
    try:
        docker("image", "inspect", IMAGE)
    except subprocess.CalledProcessError:
        skip_or_fail(f'no {IMAGE}: eval "$(scripts/docker-up --python)" builds it')
    labels = docker("image", "inspect", IMAGE, "--format", "{{json .Config.Labels}}")
    assert json.loads(labels)["fgpu.service.http"] == "http:8080"
    out = docker("run", "--rm", "--network", "none", IMAGE, "python3", "-c", _IN_CONTAINER)
    said = json.loads(out.strip().splitlines()[-1])
    assert said["score"] == predict([1, 2])["score"] and said["model"] == "tiny-logistic"
