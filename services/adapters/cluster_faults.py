"""Faults done to a cluster of nats-servers (``nats_server.nats_cluster``), for the tests
and benches of elections: the server leading the stream killed, or one that follows it
(SIGKILL: nothing is handed over, as when a machine is lost), and the first of those
still down brought back on its store."""

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

from services.adapters import nats_server
from services.adapters.jetstream import JetStreamLog
from services.ports import LogError

__all__ = ["Fault", "Faults"]

Fault = Literal["kill-leader", "kill-follower", "restart"]


@dataclass
class Faults:
    """Does faults to ``servers``, finding the stream's leader through ``log``."""

    servers: dict[str, nats_server.NatsServer]
    log: JetStreamLog
    down: list[str] = field(default_factory=list)  # the killed ones not back, first first
    done: list[tuple[datetime, Fault, str]] = field(default_factory=list)  # when, what, whom

    async def do(self, fault: Fault) -> str:
        """Do ``fault``; the name of the server it was done to. Raises LogError if the
        stream has no leader to kill, or no follower is up; NatsServerError if a server
        does not come back."""
        if fault == "restart":
            name = self.down.pop(0)
            nats_server.restart(self.servers[name])
        else:
            leader = (await self.log.stream_info()).leader
            up = [n for n in self.servers if n not in self.down]
            chosen = [n for n in up if (n == leader) == (fault == "kill-leader")]
            if not leader or not chosen:
                raise LogError(f"{fault}: no such server up (leader {leader!r}, up {up})")
            name = chosen[0]
            process = self.servers[name].process
            process.kill()
            process.wait()
            self.down.append(name)
        self.done.append((datetime.now(UTC), fault, name))
        return name
