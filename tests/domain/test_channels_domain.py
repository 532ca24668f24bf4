"""What ``services.domain.channels`` decides: services declared by labels, what an app
target names, the frames' encoding; and its Python relay, run here against a local server
(images without ``nc`` use it)."""

import socket
import subprocess
import sys
import threading

import pytest

from services.domain.channels import (
    Ack,
    Data,
    End,
    Resize,
    Service,
    app_program,
    app_target,
    decode_frame,
    encode_frame,
    relay_argv,
    services_of,
)

LABELS = {
    "fgpu.service.jupyter": "http:8888",
    "fgpu.service.tb": "http:6006",
    "fgpu.service.broken": "http:99999",
    "fgpu.service.noport": "http",
    "org.opencontainers.image.title": "x",
}


def test_services_are_read_from_labels_and_bad_ones_declare_none() -> None:
    assert services_of(LABELS) == {
        "jupyter": Service("jupyter", "http", 8888),
        "tb": Service("tb", "http", 6006),
    }


def test_a_target_is_a_service_by_name_a_port_or_nothing_with_the_reason() -> None:
    assert app_target(LABELS, "jupyter") == Service("jupyter", "http", 8888)
    assert app_target(LABELS, "6006") == Service("tb", "http", 6006)  # named, if declared
    assert app_target(LABELS, "9000") == Service("", "tcp", 9000)
    for wrong in ("nope", "0", "70000", "-1"):
        assert app_target(LABELS, wrong) == (
            f"no service {wrong!r} in the session's image (it declares: jupyter, tb)"
        )
    program = app_program(Service("", "tcp", 9000))
    assert (program.kind, program.target, program.service, program.tty) == (
        "app",
        "9000",
        None,
        None,
    )


@pytest.mark.parametrize(
    "frame", [Data(b"\x00\xff bytes"), Ack(42), Resize(40, 120), End(3, "exited"), End()]
)
def test_frames_round_trip(frame: Data | Ack | Resize | End) -> None:
    assert decode_frame(encode_frame(frame)) == frame


def test_a_frame_of_no_known_form_is_none() -> None:
    assert decode_frame(b"\x93garbage") is None


def test_the_python_relay_carries_a_connection_both_ways() -> None:
    """What ``relay_argv`` runs where there is no nc, against an echo server here."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]

        def echo() -> None:
            conn, _ = server.accept()
            with conn:
                while data := conn.recv(4096):
                    conn.sendall(data.upper())

        threading.Thread(target=echo, daemon=True).start()
        python_relay = relay_argv(port)[-1]
        relayed = subprocess.run(
            [sys.executable, "-c", python_relay, str(port)],
            input=b"hello through the relay\n",
            capture_output=True,
            timeout=20,
            check=True,
        )
    assert relayed.stdout == b"HELLO THROUGH THE RELAY\n"
