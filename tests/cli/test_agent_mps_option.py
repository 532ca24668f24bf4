"""--mps (and the agent file's ``mps``): which GPUs get an MPS daemon, and where its pipes are."""

from pathlib import Path

import pytest

from events import GpuInfo
from services.cli import agent_setup
from services.cli.agent_setup import agent_config, mps_daemons

GPUS = [GpuInfo(index=i, uuid=f"GPU-{i}", model="H100", mem=1 << 36, sm_count=132) for i in (0, 1)]


@pytest.fixture
def real_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(agent_setup.NvmlProbe, "gpus", lambda self: list(GPUS))


def config(mps: str | None, file: Path | None = None) -> agent_setup.AgentConfig:
    return agent_config("a1", 0, "16g", None, "1", "1g", "dummy", file, mps=mps)


def test_mps_on_the_gpus_named_each_with_its_own_pipes(real_gpus: None) -> None:
    cfg = config("1")
    ((index, pipe),) = cfg.mps_pipes
    assert index == 1 and pipe.endswith("/mps/a1/1/pipe")
    daemons = mps_daemons(cfg)
    assert daemons is not None and daemons.pipe_dirs == {"GPU-1": pipe}
    assert [i for i, _ in config("all").mps_pipes] == [0, 1]


def test_no_mps_by_default(real_gpus: None) -> None:
    cfg = config(None)
    assert cfg.mps_pipes == () and mps_daemons(cfg) is None


def test_the_agent_file_may_ask_for_it(real_gpus: None, tmp_path: Path) -> None:
    file = tmp_path / "agent.toml"
    file.write_text('mps = "0"\n')
    assert [i for i, _ in config(None, file).mps_pipes] == [0]


@pytest.mark.parametrize(
    ("given", "said"),
    [("2", r"GPUs are \[0, 1\]"), ("x", "'all' or GPU indexes"), ("0,,1", "'all' or GPU")],
)
def test_a_gpu_it_lacks_is_refused(real_gpus: None, given: str, said: str) -> None:
    with pytest.raises(ValueError, match=said):
        config(given)


def test_mock_gpus_have_no_mps() -> None:
    with pytest.raises(ValueError, match="real GPUs"):
        agent_config("a1", 1, "16g", None, "1", "1g", "dummy", None, mps="all")
