import pytest

from memledger.errors import UnitError
from memledger.units import format_bytes, parse_bytes


@pytest.mark.parametrize("text,expected", [
    ("512MiB", 512 * 2**20),
    ("1.5GiB", 3 * 2**29),          # 1.5 × 2^30
    ("2GB", 2_000_000_000),         # decimal: 2 × 10^9, never 2 × 2^30
    ("2 GiB", 2 * 2**30),
    ("800 MB", 800_000_000),
    ("0B", 0),
    ("1KIB", 1024),                 # the prefix's case does not matter; the B's does
    (4096, 4096),                   # ints are bytes already
])
def test_parse_bytes(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text,needle", [
    ("800", "no unit"),
    ("-1GiB", "negative"),
    ("1.5XB", "unknown unit"),
    ("lots", "cannot read"),
    ("1Gb", "a lower-case b is a bit; memledger counts bytes: write 1GB"),
    ("1gib", "write 1GiB"),
])
def test_parse_bytes_refuses(text, needle):
    with pytest.raises(UnitError, match=needle):
        parse_bytes(text)


def test_format_bytes():
    assert format_bytes(512) == "512 B"
    assert format_bytes(1536) == "1.5 KiB"
    assert format_bytes(3 * 2**29) == "1.5 GiB"
    assert format_bytes(-2 * 2**20) == "-2.0 MiB"
