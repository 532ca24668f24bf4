"""Parsing and formatting of resource amounts: exact, strict, with messages that say why."""

from collections.abc import Callable
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from events import Slots
from services.domain.resources import (
    InvalidAmount,
    add,
    fits,
    format_cpu,
    format_fgpu,
    format_mem,
    parse_cpu,
    parse_fgpu,
    parse_mem,
    sub,
)

Parse = Callable[[str], int]
GIB = 1 << 30

# ---- accepted input -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "quanta"),
    [
        ("1", 100),
        ("0.5", 50),
        ("0.01", 1),
        ("2.5", 250),
        ("2.50", 250),
        (" 0.25 ", 25),
        ("1e2", 10_000),
        ("3", 300),
    ],
)
def test_parse_fgpu_accepts(text: str, quanta: int) -> None:
    assert parse_fgpu(text) == quanta


def test_an_fgpu_of_zero_is_a_number_where_zero_is_allowed() -> None:
    quanta = [parse_fgpu(t, zero=True) for t in ("0", "0.00", "0.000", "00", "0.5")]
    assert quanta == [0, 0, 0, 0, 50]
    for text, zero in (("0", False), ("-0.01", True), ("0.001", True), ("nan", True)):
        with pytest.raises(InvalidAmount):
            parse_fgpu(text, zero=zero)


def test_point_one_plus_point_two_is_exactly_point_three() -> None:
    assert parse_fgpu("0.1") + parse_fgpu("0.2") == parse_fgpu("0.3") == 30
    assert format_fgpu(parse_fgpu("0.1") + parse_fgpu("0.2")) == "0.3"


@pytest.mark.parametrize(
    ("text", "millis"),
    [("1", 1000), ("0.5", 500), ("250m", 250), ("0.001", 1), ("16", 16_000), ("1m", 1)],
)
def test_parse_cpu_accepts(text: str, millis: int) -> None:
    assert parse_cpu(text) == millis


@pytest.mark.parametrize(
    ("text", "n"),
    [
        ("1048576", 1 << 20),
        ("1g", GIB),
        ("1G", GIB),
        ("512m", 512 << 20),
        ("1.5GiB", 3 * GIB // 2),
        ("2gb", 2 * GIB),
        ("4k", 4096),
        ("1t", 1 << 40),
        ("100b", 100),
        ("0.5m", 1 << 19),
    ],
)
def test_parse_mem_accepts(text: str, n: int) -> None:
    assert parse_mem(text) == n


# ---- refused input ------------------------------------------------------------------------


@pytest.mark.parametrize("parse", [parse_fgpu, parse_cpu, parse_mem])
@pytest.mark.parametrize("text", ["0", "0.0", "-1", "-0.5", "NaN", "nan", "sNaN", "inf", "-inf"])
def test_zero_negative_and_non_finite_are_refused(parse: Parse, text: str) -> None:
    with pytest.raises(InvalidAmount, match=r"got '"):
        parse(text)


@pytest.mark.parametrize("parse", [parse_fgpu, parse_cpu, parse_mem])
@pytest.mark.parametrize("text", ["", " ", "abc", "1,5", "0x10", "1..5", "one", "1 2"])
def test_garbage_is_refused(parse: Parse, text: str) -> None:
    with pytest.raises(InvalidAmount):
        parse(text)


@pytest.mark.parametrize(
    ("parse", "text", "message"),
    [
        (parse_fgpu, "0", "fGPU must be greater than zero, got '0'"),
        (parse_fgpu, "-1", "fGPU must be greater than zero, got '-1'"),
        (parse_fgpu, "NaN", "fGPU must be a finite number, got 'NaN'"),
        (parse_fgpu, "inf", "fGPU must be a finite number, got 'inf'"),
        (parse_fgpu, "abc", "fGPU must be a number, got 'abc'"),
        (parse_fgpu, "0.001", "fGPU must be a multiple of 0.01, got '0.001'"),
        (parse_fgpu, "1.005", "fGPU must be a multiple of 0.01, got '1.005'"),
        (parse_cpu, "0.0001", "cpu must be a multiple of 0.001, got '0.0001'"),
        (parse_cpu, "0.5m", "cpu must be a multiple of 1m, got '0.5m'"),
        (parse_cpu, "0", "cpu must be greater than zero, got '0'"),
        (parse_mem, "0.001", "mem must be a multiple of 1 byte, got '0.001'"),
        (parse_mem, "lots", "mem must look like 512m, 1g or a byte count, got 'lots'"),
        (parse_mem, "0", "mem must be greater than zero, got '0'"),
    ],
)
def test_refusals_say_why(parse: Parse, text: str, message: str) -> None:
    with pytest.raises(InvalidAmount) as caught:
        parse(text)
    assert str(caught.value) == message


def test_invalid_amount_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        parse_fgpu("0.001")


@pytest.mark.parametrize("parse", [parse_fgpu, parse_cpu])
def test_over_precise_input_is_refused_even_with_many_digits(parse: Parse) -> None:
    with pytest.raises(InvalidAmount):
        parse("1.00000000000000000000000000001")


@pytest.mark.parametrize("parse", [parse_fgpu, parse_cpu])
def test_a_huge_exponent_is_refused_with_a_message(parse: Parse) -> None:
    with pytest.raises(InvalidAmount):
        parse("1e999999")


# ---- formatting ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("quanta", "text"), [(1, "0.01"), (50, "0.5"), (100, "1"), (250, "2.5"), (12_345, "123.45")]
)
def test_format_fgpu(quanta: int, text: str) -> None:
    assert format_fgpu(quanta) == text


@pytest.mark.parametrize(
    ("n", "text"), [(1000, "1000B"), (1536, "1.5K"), (GIB, "1G"), (512 << 20, "512M")]
)
def test_format_mem(n: int, text: str) -> None:
    assert format_mem(n) == text


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=1, max_value=10**15))
def test_fgpu_format_round_trips(quanta: int) -> None:
    assert parse_fgpu(format_fgpu(quanta)) == quanta


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=1, max_value=10**15))
def test_cpu_format_round_trips(millis: int) -> None:
    assert parse_cpu(format_cpu(millis)) == millis


@settings(max_examples=200, deadline=None)
@given(
    st.integers(min_value=4, max_value=4095),
    st.sampled_from([1 << 10, 1 << 20, 1 << 30, 1 << 40]),
)
def test_mem_format_round_trips_in_quarter_units(quarters: int, unit: int) -> None:
    # format_mem shows two decimals of the largest unit, so amounts it can show round-trip.
    n = quarters * unit // 4
    assert parse_mem(format_mem(n)) == n


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=1, max_value=1023))
def test_mem_format_round_trips_in_bytes(n: int) -> None:
    assert parse_mem(format_mem(n)) == n


@settings(max_examples=200, deadline=None)
@given(st.decimals(min_value="0.01", max_value="100000", places=2, allow_nan=False))
def test_fgpu_parse_of_any_two_decimal_amount_is_exact(value: Decimal) -> None:
    quanta = parse_fgpu(str(value))
    assert quanta == value * 100
    assert Decimal(format_fgpu(quanta)) == value


@settings(max_examples=200, deadline=None)
@given(
    st.integers(min_value=1, max_value=10**6),
    st.integers(min_value=1, max_value=10**6),
)
def test_fgpu_sums_are_exact(a: int, b: int) -> None:
    assert parse_fgpu(format_fgpu(a)) + parse_fgpu(format_fgpu(b)) == parse_fgpu(format_fgpu(a + b))


# ---- slot arithmetic ----------------------------------------------------------------------

slots = st.builds(
    Slots,
    cpu=st.integers(min_value=0, max_value=10**6),
    mem=st.integers(min_value=0, max_value=1 << 42),
    fgpu=st.integers(min_value=0, max_value=10**5),
)


@settings(max_examples=100, deadline=None)
@given(slots, slots)
def test_add_and_sub_are_inverse_and_fits_is_per_slot(a: Slots, b: Slots) -> None:
    total = add(a, b)
    assert sub(total, b) == a
    assert fits(a, total) and fits(b, total)
    assert fits(a, b) == (a.cpu <= b.cpu and a.mem <= b.mem and a.fgpu <= b.fgpu)
