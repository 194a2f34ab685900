"""harness.memory.store: whole objects and appended JSON lines in a folder and under an s3:// prefix
(moto server), with concurrent writers in separate processes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import boto3
import pytest

from harness.memory.store import Store, StoreError

ROOT = Path(__file__).resolve().parent.parent

#: A writer process: appends N lines `{"w": W, "n": i, "pad": ...}` to ledger.jsonl.
WRITER = """
import json, sys
from harness.memory.store import Store
store, w, n = Store.of(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
for i in range(n):
    store.append_line("ledger.jsonl", json.dumps({"w": w, "n": i, "pad": "x" * 3000}),
                      writer=f"host-{w}")
"""


def _writers(where: str, num: int, each: int, env: dict[str, str] | None = None) -> None:
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, where, str(w), str(each)], cwd=ROOT,
                              env=env) for w in range(num)]
    assert [p.wait(timeout=300) for p in procs] == [0] * num


def _check_lines(lines: list[str], num: int, each: int) -> None:
    got = sorted((d["w"], d["n"]) for d in map(json.loads, lines))  # every line whole JSON
    assert got == [(w, i) for w in range(num) for i in range(each)]


def test_folder_put_get_and_missing(tmp_path: Path) -> None:
    store = Store.of(str(tmp_path / "s"))
    assert store.get("certificates/a.json") is None
    store.put("certificates/a.json", b"{}")
    assert store.get("certificates/a.json") == b"{}"
    assert not [p for p in (tmp_path / "s/certificates").iterdir() if p.name.startswith(".")]


def test_folder_concurrent_appends_keep_every_line(tmp_path: Path) -> None:
    """Lines longer than a pipe buffer from 6 processes at once: none lost, none mixed."""
    where = str(tmp_path / "ledger")
    _writers(where, 6, 40)
    _check_lines(Store.of(where).read_lines("ledger.jsonl"), 6, 40)


def test_folder_cut_last_line_is_left_out(tmp_path: Path) -> None:
    (tmp_path / "ledger.jsonl").write_text('{"a": 1}\n{"a": 2}\n{"a": 3')  # writer killed
    assert Store.of(str(tmp_path)).read_lines("ledger.jsonl") == ['{"a": 1}', '{"a": 2}']


def test_folder_unwritable_is_a_store_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a folder")
    store = Store.of(str(tmp_path / "file"))
    with pytest.raises(StoreError, match=r"cannot append to ledger.jsonl in .*file"):
        store.append_line("ledger.jsonl", "{}", writer="h")
    with pytest.raises(StoreError, match="cannot write"):
        store.put("x.json", b"{}")


def test_line_with_newline_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no newline"):
        Store.of(str(tmp_path)).append_line("l.jsonl", "a\nb", writer="h")


def test_s3_put_get_lines_and_concurrent_writers(aws_env: dict[str, str]) -> None:
    boto3.client("s3").create_bucket(Bucket="pf-store")
    store = Store.of("s3://pf-store/fleet/a")
    assert store.get("certificates/n1.json") is None
    store.put("certificates/n1.json", b'{"id": 1}')
    assert store.get("certificates/n1.json") == b'{"id": 1}'
    assert store.read_lines("ledger.jsonl") == []
    _writers("s3://pf-store/fleet/a", 3, 5, env=aws_env)
    _check_lines(store.read_lines("ledger.jsonl"), 3, 5)
    keys = [o["Key"] for o in boto3.client("s3").list_objects_v2(
        Bucket="pf-store", Prefix="fleet/a/ledger.jsonl.d/")["Contents"]]
    assert len(keys) == 15 and any("-host-2-" in k for k in keys)


def test_s3_missing_bucket_is_a_store_error(aws_env: dict[str, str]) -> None:
    store = Store.of("s3://pf-no-such-bucket/x")
    with pytest.raises(StoreError, match="s3://pf-no-such-bucket/x"):
        store.get("certificates/a.json")
    with pytest.raises(StoreError, match="cannot append"):
        store.append_line("ledger.jsonl", "{}", writer="h")
