"""`preflight inspect topology` reads every recorded environment as it did before the env reader's
batch paths (issue 32 item 3).

tests/golden/topology_equivalence.json holds, per file under tests/data/topology, tests/data/env
and tests/samples/env and per form of it (the forms and chunk sizes of
tests/test_parsers_env_equivalence.py: plain, CRLF, srun `-l`, mpirun `--tag-output` one and two
ranks, ISO timestamp; whole and in 61-character chunks), the digest of inspect_topology's result
(or its ParseError) as main at 781bf42 gave it, and the node count, so that a changed result names
its file. Regenerate only when a reading is meant to change (say why in the commit):
`.venv/bin/python -m tests.test_parsers_topology_equivalence --write`.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

from harness.parsers import ParseError
from harness.parsers.reader import Input
from harness.parsers.topology import inspect_topology
from tests.test_parsers_env_equivalence import _readings as _env_readings
from tests.test_parsers_env_equivalence import _write

TESTS = Path(__file__).parent
GOLDEN = TESTS / "golden" / "topology_equivalence.json"
FOLDERS = ("data/topology", "data/env", "samples/env")


def _files() -> list[Path]:
    return [p for folder in FOLDERS for p in sorted((TESTS / folder).iterdir())
            if p.is_file() and p.suffix != ".md" and not p.name.endswith(".expect.json")]


def _reading(text: str, chunk: int | None) -> str:
    """`digest:num_nodes` of inspect_topology's result (`error`: refused)."""
    try:
        record: object = inspect_topology(Input(text, chunk=chunk), profile=None)
        nodes = str(record.get("num_nodes"))  # type: ignore[union-attr]
    except ParseError as exc:
        record, nodes = ["error", str(exc)], "error"
    blob = json.dumps(record, ensure_ascii=True, sort_keys=True).encode()
    return f"{hashlib.sha256(blob).hexdigest()[:16]}:{nodes}"


def test_every_recorded_environment_gives_the_same_topology() -> None:
    golden = json.loads(GOLDEN.read_text(encoding="utf-8"))
    files = {p.relative_to(TESTS).as_posix(): p for p in _files()}
    assert set(golden) == set(files), sorted(set(golden) ^ set(files))[:5]
    changed = [f"{name} {form}" for name, recorded in golden.items()
               for form, reading in _env_readings(files[name], _reading).items() if recorded[form] != reading]
    assert not changed, f"{len(changed)} reading(s) changed, e.g. {changed[:5]}"
    # the multi-node samples are among them, read as multi-node (not all refused or single)
    assert sum(r.endswith((":2", ":4")) for v in golden.values() for r in v.values()) >= 40


def test_the_digest_sees_a_changed_node() -> None:
    text = "SLURM_NNODES=2\nSLURM_NODEID=0\nSLURM_PROCID=0\nSLURM_LOCALID=0\n" \
           "SLURM_NODELIST=node[1-2]\nSLURM_TASKS_PER_NODE=1(x2)\n"
    assert _reading(text, None) != _reading(text.replace("NODEID=0", "NODEID=1"), None)


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    _write(GOLDEN, _files, _reading)
elif __name__ == "__main__":
    pytest.main([__file__, "-q"])
