"""What every ContainerRuntime promises, as one test class to subclass.

A subclass provides a ``runtime`` fixture (a ready ContainerRuntime with ``fgpu/busybox``);
the contract does the rest, and removes every container a test started. Each test works
under its own label value and name prefix, so tests can share one engine.

The commands are small shell scripts that busybox runs for real and DummyRuntime simulates.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator

import anyio
import pytest

from services.domain.container_spec import ContainerSpec
from services.ports import ContainerError, ContainerRuntime, ImageNotFound, RuntimeUnavailable

__all__ = ["TEST_IMAGE", "TEST_LABEL", "ContainerRuntimeContract"]

TEST_IMAGE = "fgpu/busybox:latest"
TEST_LABEL = "fgpu.test"
LONG = ("sleep", "60")  # runs until removed, as far as a test is concerned
DEADLINE_S = 20.0  # a bound on any one wait; a healthy engine answers in well under a second


class ContainerRuntimeContract:
    """Subclass as ``Test...`` and define a ``runtime`` fixture."""

    @pytest.fixture
    def anyio_backend(self) -> str:
        return "asyncio"  # aiodocker is asyncio-only

    @pytest.fixture
    def tag(self) -> str:
        return secrets.token_hex(4)

    @pytest.fixture
    async def rt(self, runtime: ContainerRuntime, tag: str) -> AsyncIterator[ContainerRuntime]:
        yield runtime
        with anyio.fail_after(DEADLINE_S):
            for info in await runtime.list({TEST_LABEL: tag}):
                await runtime.remove(info.id, stop_timeout_s=0)

    @staticmethod
    def spec(
        tag: str,
        name: str,
        command: tuple[str, ...] = LONG,
        *,
        image: str = TEST_IMAGE,
        labels: dict[str, str] | None = None,
        env: dict[str, str] | None = None,
        tty: bool = False,
    ) -> ContainerSpec:
        return ContainerSpec(
            name=f"fgpu-test-{tag}-{name}",
            image=image,
            command=command,
            labels={TEST_LABEL: tag, **(labels or {})},
            env=env or {},
            tty=tty,
        )

    @staticmethod
    async def wait(rt: ContainerRuntime, container_id: str) -> int:
        with anyio.fail_after(DEADLINE_S):
            return await rt.wait(container_id)

    # ---- images and run ---------------------------------------------------------------

    @pytest.mark.anyio
    async def test_images_include_the_test_image(self, rt: ContainerRuntime) -> None:
        assert TEST_IMAGE in await rt.images()

    @pytest.mark.anyio
    async def test_image_details_give_each_tag_its_id_and_size(self, rt: ContainerRuntime) -> None:
        details = {i.ref: i for i in await rt.image_details()}
        assert set(details) == set(await rt.images())
        made = details[TEST_IMAGE]
        # Made on this host, never pushed nor pulled: no registry digest.
        assert made.id.startswith("sha256:") and made.size > 0 and made.digest is None

    @pytest.mark.anyio
    async def test_run_starts_the_container(self, rt: ContainerRuntime, tag: str) -> None:
        spec = self.spec(tag, "a", labels={"fgpu.session": "s1"})
        info = await rt.run(spec)
        assert info.name == spec.name
        assert info.running
        assert info.exit_code is None
        assert info.labels.items() >= spec.labels.items()

    @pytest.mark.anyio
    async def test_run_is_idempotent_by_name(self, rt: ContainerRuntime, tag: str) -> None:
        spec = self.spec(tag, "a")
        first = await rt.run(spec)
        second = await rt.run(spec)
        assert second.id == first.id
        assert [i.id for i in await rt.list({TEST_LABEL: tag})] == [first.id]

    @pytest.mark.anyio
    async def test_run_returns_an_exited_container_as_it_is(
        self, rt: ContainerRuntime, tag: str
    ) -> None:
        spec = self.spec(tag, "a", ("sh", "-c", "exit 3"))
        first = await rt.run(spec)
        assert await self.wait(rt, first.id) == 3
        again = await rt.run(spec)
        assert (again.id, again.running, again.exit_code) == (first.id, False, 3)

    @pytest.mark.anyio
    async def test_unknown_image_raises_image_not_found(
        self, rt: ContainerRuntime, tag: str
    ) -> None:
        with pytest.raises(ImageNotFound):
            await rt.run(self.spec(tag, "a", image="fgpu/no-such-image:never"))
        assert await rt.list({TEST_LABEL: tag}) == []

    # ---- list -------------------------------------------------------------------------

    @pytest.mark.anyio
    async def test_list_selects_by_all_labels(self, rt: ContainerRuntime, tag: str) -> None:
        a = await rt.run(self.spec(tag, "a", labels={"fgpu.role": "x"}))
        b = await rt.run(self.spec(tag, "b", labels={"fgpu.role": "y"}))
        both = await rt.list({TEST_LABEL: tag})
        assert sorted(i.id for i in both) == sorted([a.id, b.id])
        only_b = await rt.list({TEST_LABEL: tag, "fgpu.role": "y"})
        assert [i.id for i in only_b] == [b.id]
        assert await rt.list({TEST_LABEL: tag, "fgpu.role": "z"}) == []

    @pytest.mark.anyio
    async def test_list_shows_exited_containers(self, rt: ContainerRuntime, tag: str) -> None:
        info = await rt.run(self.spec(tag, "a", ("sh", "-c", "exit 3")))
        await self.wait(rt, info.id)
        [listed] = await rt.list({TEST_LABEL: tag})
        assert (listed.id, listed.running, listed.exit_code) == (info.id, False, 3)

    # ---- wait -------------------------------------------------------------------------

    @pytest.mark.anyio
    async def test_wait_returns_the_exit_code(self, rt: ContainerRuntime, tag: str) -> None:
        info = await rt.run(self.spec(tag, "a", ("sh", "-c", "exit 3")))
        assert await self.wait(rt, info.id) == 3

    @pytest.mark.anyio
    async def test_wait_after_exit_returns_at_once(self, rt: ContainerRuntime, tag: str) -> None:
        info = await rt.run(self.spec(tag, "a", ("sh", "-c", "exit 3")))
        assert await self.wait(rt, info.id) == 3
        assert await self.wait(rt, info.id) == 3

    @pytest.mark.anyio
    async def test_wait_on_an_unknown_container_raises(self, rt: ContainerRuntime) -> None:
        with pytest.raises(ContainerError) as caught:
            await rt.wait("fgpu-test-no-such-container")
        assert not isinstance(caught.value, RuntimeUnavailable)

    # ---- remove -----------------------------------------------------------------------

    @pytest.mark.anyio
    async def test_remove_stops_a_running_container(self, rt: ContainerRuntime, tag: str) -> None:
        info = await rt.run(self.spec(tag, "a"))
        with anyio.fail_after(DEADLINE_S):
            await rt.remove(info.id, stop_timeout_s=5)
        assert await rt.list({TEST_LABEL: tag}) == []
        with pytest.raises(ContainerError):
            await rt.wait(info.id)

    @pytest.mark.anyio
    async def test_remove_frees_the_name(self, rt: ContainerRuntime, tag: str) -> None:
        spec = self.spec(tag, "a")
        first = await rt.run(spec)
        await rt.remove(first.id, stop_timeout_s=0)
        second = await rt.run(spec)
        assert second.id != first.id
        assert second.running

    @pytest.mark.anyio
    async def test_remove_of_an_unknown_container_is_fine(
        self, rt: ContainerRuntime, tag: str
    ) -> None:
        """No error, and nothing else touched: the containers there are stay as they were."""
        info = await rt.run(self.spec(tag, "a"))
        with anyio.fail_after(DEADLINE_S):
            await rt.remove(f"fgpu-test-{tag}-no-such-container")
        [listed] = await rt.list({TEST_LABEL: tag})
        assert (listed.id, listed.running) == (info.id, True)

    @pytest.mark.anyio
    async def test_remove_twice_is_fine(self, rt: ContainerRuntime, tag: str) -> None:
        """The second removal finds it gone, says nothing, and it stays gone."""
        info = await rt.run(self.spec(tag, "a", ("sh", "-c", "exit 0")))
        await self.wait(rt, info.id)
        for _ in range(2):
            with anyio.fail_after(DEADLINE_S):
                await rt.remove(info.id, stop_timeout_s=0)
            assert await rt.list({TEST_LABEL: tag}) == []
            with pytest.raises(ContainerError) as caught:
                await rt.wait(info.id)
            assert not isinstance(caught.value, RuntimeUnavailable)

    # ---- logs -------------------------------------------------------------------------

    @pytest.mark.anyio
    async def test_logs_return_what_the_command_printed(
        self, rt: ContainerRuntime, tag: str
    ) -> None:
        info = await rt.run(self.spec(tag, "a", ("sh", "-c", "echo hello; echo world")))
        assert await self.wait(rt, info.id) == 0
        assert await rt.logs(info.id) == "hello\nworld\n"
        assert await rt.logs(info.id, tail=1) == "world\n"

    @pytest.mark.anyio
    async def test_env_reaches_the_command(self, rt: ContainerRuntime, tag: str) -> None:
        spec = self.spec(tag, "a", ("sh", "-c", 'echo "$GREETING"'), env={"GREETING": "hi there"})
        info = await rt.run(spec)
        await self.wait(rt, info.id)
        assert await rt.logs(info.id) == "hi there\n"

    @pytest.mark.anyio
    async def test_with_a_terminal_and_no_command_the_image_s_shell_stays_up(
        self, rt: ContainerRuntime, tag: str
    ) -> None:
        """An interactive session's container: its shell waits on the terminal."""
        info = await rt.run(self.spec(tag, "tty", command=(), tty=True))
        with anyio.fail_after(DEADLINE_S):
            ran = await rt.exec(info.id, ["true"])
        assert ran.exit_code == 0
        [listed] = await rt.list({TEST_LABEL: tag})
        assert listed.running

    @pytest.mark.anyio
    async def test_cpu_time_is_known_while_it_runs_and_none_for_an_unknown_one(
        self, rt: ContainerRuntime, tag: str
    ) -> None:
        info = await rt.run(self.spec(tag, "cpu"))
        used = await rt.cpu_ns(info.id)
        assert used is not None and used >= 0
        assert await rt.cpu_ns("no-such-container-" + tag) is None

    @pytest.mark.anyio
    async def test_logs_of_an_unknown_container_raise(self, rt: ContainerRuntime) -> None:
        with pytest.raises(ContainerError):
            await rt.logs("fgpu-test-no-such-container")

    @staticmethod
    async def followed(rt: ContainerRuntime, container_id: str, tail: int = 200) -> str:
        """All a follow of the container's output read, until its reads ended."""
        shown = b""
        with anyio.fail_after(DEADLINE_S):
            async with rt.follow_logs(container_id, tail=tail) as output:
                while (data := await output.read()) is not None:
                    shown += data
        return shown.decode()

    @pytest.mark.anyio
    async def test_a_follow_gives_the_output_as_it_comes_and_ends_with_the_container(
        self, rt: ContainerRuntime, tag: str
    ) -> None:
        """Opened while the first line alone is written: the second comes when it is
        written, and the reads end once the container exits."""
        script = "echo one; sleep 1; echo two; exit 3"
        info = await rt.run(self.spec(tag, "follow", ("sh", "-c", script)))
        assert await self.followed(rt, info.id) == "one\ntwo\n"
        assert await self.wait(rt, info.id) == 3

    @pytest.mark.anyio
    async def test_a_follow_starts_from_the_last_tail_lines(
        self, rt: ContainerRuntime, tag: str
    ) -> None:
        info = await rt.run(self.spec(tag, "follow-tail", ("sh", "-c", "echo a; echo b; echo c")))
        await self.wait(rt, info.id)
        assert await self.followed(rt, info.id, tail=2) == "b\nc\n"
        assert await self.followed(rt, info.id, tail=0) == ""

    @pytest.mark.anyio
    async def test_a_follow_ends_when_the_container_is_removed(
        self, rt: ContainerRuntime, tag: str
    ) -> None:
        info = await rt.run(self.spec(tag, "follow-rm", ("sh", "-c", "echo up; sleep 60")))
        with anyio.fail_after(DEADLINE_S):
            async with rt.follow_logs(info.id) as output:
                assert await output.read() == b"up\n"
                await rt.remove(info.id, stop_timeout_s=0)
                while await output.read() is not None:
                    pass

    @pytest.mark.anyio
    async def test_a_follow_of_an_unknown_container_raises(self, rt: ContainerRuntime) -> None:
        with pytest.raises(ContainerError):
            async with rt.follow_logs("fgpu-test-no-such-container"):
                pass

    # ---- exec -------------------------------------------------------------------------

    @pytest.mark.anyio
    async def test_exec_returns_each_stream_and_the_exit_code(
        self, rt: ContainerRuntime, tag: str
    ) -> None:
        info = await rt.run(self.spec(tag, "a"))
        with anyio.fail_after(DEADLINE_S):
            done = await rt.exec(info.id, ("sh", "-c", "echo out; echo err >&2; exit 3"))
        assert (done.exit_code, done.stdout, done.stderr) == (3, b"out\n", b"err\n")
        assert (done.stdout_bytes, done.stderr_bytes, done.truncated) == (4, 4, False)
        [listed] = await rt.list({TEST_LABEL: tag})
        assert listed.running  # the container goes on

    @pytest.mark.anyio
    async def test_exec_runs_argv_with_no_shell(self, rt: ContainerRuntime, tag: str) -> None:
        info = await rt.run(self.spec(tag, "a"))
        with anyio.fail_after(DEADLINE_S):
            done = await rt.exec(info.id, ("echo", "a  b", "$HOME;", "exit 4"))
        assert (done.exit_code, done.stdout) == (0, b"a  b $HOME; exit 4\n")

    @pytest.mark.anyio
    async def test_exec_sees_the_containers_environment(
        self, rt: ContainerRuntime, tag: str
    ) -> None:
        info = await rt.run(self.spec(tag, "a", env={"GREETING": "hi there"}))
        with anyio.fail_after(DEADLINE_S):
            done = await rt.exec(info.id, ("sh", "-c", 'echo "$GREETING"'))
        assert done.stdout == b"hi there\n"

    @pytest.mark.anyio
    async def test_exec_keeps_the_first_bytes_and_counts_all(
        self, rt: ContainerRuntime, tag: str
    ) -> None:
        info = await rt.run(self.spec(tag, "a"))
        with anyio.fail_after(DEADLINE_S):
            done = await rt.exec(info.id, ("sh", "-c", "echo hello; echo oops >&2"), keep=3)
        assert (done.stdout, done.stdout_bytes, done.stderr, done.stderr_bytes) == (
            b"hel",
            6,
            b"oop",
            5,
        )
        assert done.truncated

    @pytest.mark.anyio
    async def test_exec_of_a_missing_command_is_an_exit_code(
        self, rt: ContainerRuntime, tag: str
    ) -> None:
        info = await rt.run(self.spec(tag, "a"))
        with anyio.fail_after(DEADLINE_S):
            done = await rt.exec(info.id, ("fgpu-no-such-command",))
        assert done.exit_code in (126, 127)

    @pytest.mark.anyio
    async def test_exec_in_a_container_not_running_raises(
        self, rt: ContainerRuntime, tag: str
    ) -> None:
        info = await rt.run(self.spec(tag, "a", ("sh", "-c", "exit 0")))
        await self.wait(rt, info.id)
        with pytest.raises(ContainerError) as caught:
            await rt.exec(info.id, ("true",))
        assert not isinstance(caught.value, RuntimeUnavailable)
        with pytest.raises(ContainerError):
            await rt.exec("fgpu-test-no-such-container", ("true",))
