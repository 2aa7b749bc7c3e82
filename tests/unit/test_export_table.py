"""CSV and Parquet of the tensor table."""

import json

import pandas as pd
import pytest

from memledger.cli import main
from memledger.ledger.model import Ledger
from memledger.report.table import parquet_available, write_csv, write_parquet
from test_report_html import tiny_records  # tests/unit is on sys.path (rootdir-less dir)


def test_csv_round_trips_the_tensor_table(tmp_path):
    led = Ledger.from_records(tiny_records())
    df = pd.read_csv(write_csv(led, tmp_path / "t.csv"), keep_default_na=False)
    assert list(df.columns) == list(led.storages.columns)
    assert df[["sid", "bytes", "category", "created", "freed"]].values.tolist() == [
        [0, 400, "parameter", 0, 4], [1, 400, "activation", 1, 3]]


@pytest.mark.skipif(not parquet_available(), reason="pyarrow not installed (extra: parquet)")
def test_parquet_round_trips_the_tensor_table(tmp_path):
    led = Ledger.from_records(tiny_records())
    df = pd.read_parquet(write_parquet(led, tmp_path / "t.parquet"))
    assert df["bytes"].tolist() == [400, 400] and df["shape"].tolist() == ["10x10", "4x25"]


def test_parquet_without_pyarrow_says_what_to_install(tmp_path, monkeypatch):
    import memledger.report.table as table

    monkeypatch.setattr(table, "parquet_available", lambda: False)
    ledger = tmp_path / "t.ledger"
    ledger.write_text("\n".join(json.dumps(r) for r in tiny_records()) + "\n")
    assert main(["export", str(ledger), "-f", "parquet", "-o", str(tmp_path / "x.pq")]) == 2
    assert not (tmp_path / "x.pq").exists()
