import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numasim.units import format_duration, parse_duration, parse_size


@pytest.mark.parametrize(
    ("text", "ns"),
    [("500ms", 500_000_000), ("2s", 2_000_000_000), ("1.5min", 90_000_000_000), ("250us", 250_000), ("7ns", 7), ("0", 0)],
)
def test_parse_duration(text, ns):
    assert parse_duration(text if text != "0" else 0) == ns


@pytest.mark.parametrize(
    ("text", "nbytes"),
    [("42GB", 42 * 10**9), ("42GiB", 42 * 2**30), ("42Gi", 42 * 2**30), ("512Mi", 512 * 2**20), ("1.5KB", 1500)],
)
def test_parse_size(text, nbytes):
    assert parse_size(text) == nbytes


@pytest.mark.parametrize("bad", ["42", 42, "42 parsecs", "-3GB", "GB", True, None, [1]])
def test_parse_size_rejects(bad):
    with pytest.raises(ValueError, match="size with a unit"):
        parse_size(bad)


@pytest.mark.parametrize("bad", [5, "5", "5 fortnights", "ms", False])
def test_parse_duration_rejects(bad):
    with pytest.raises(ValueError, match="duration with a unit"):
        parse_duration(bad)


@given(st.integers(min_value=1, max_value=10**13))
def test_duration_round_trip(ns):
    assert parse_duration(format_duration(ns)) == pytest.approx(ns, rel=1e-6, abs=1)


def test_cpu_quantities_as_kubernetes_writes_them():
    from numasim.units import parse_cpu

    assert parse_cpu("500m") == 0.5 and parse_cpu("1.5") == 1.5 and parse_cpu(" 2 ") == 2.0 and parse_cpu(3) == 3
    assert parse_cpu("1e3m") == 1.0 and parse_cpu("2e0") == 2.0  # YAML reads 1e3 without a dot as text
    for bad in ("5x", "-500m", "mm", "m", ""):
        with pytest.raises(ValueError):
            parse_cpu(bad)


# The number pattern before it was rewritten not to backtrack: it tried every split of a run of digits.
_OLD_NUMBER_UNIT = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-zµ]+)\s*$")


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet="0123456789.eE+- msµGiB", max_size=14))
def test_the_number_pattern_matches_what_the_backtracking_one_did(text):
    from numasim.units import _NUMBER_UNIT

    old, new = _OLD_NUMBER_UNIT.match(text), _NUMBER_UNIT.match(text)
    assert (old is None) == (new is None)
    if old:
        assert old.groups() == new.groups()


def test_a_long_quantity_is_refused_before_any_pattern_runs_and_shown_cut():
    # 200,000 digits then text that can't match: the old pattern took minutes (quadratic); this is
    # refused at once, and the message shows the start of the value, not all of it.
    for parse in (parse_duration, parse_size):
        with pytest.raises(ValueError) as e:
            parse("1" * 200_000 + "s!")
        assert "200,002 characters" in str(e.value) and len(str(e.value)) < 400
    with pytest.raises(ValueError, match="cannot be negative"):
        parse_size("-" + "1" * 100_000)
