"""The env reader's fast paths read exactly what the reader before them read (issue 32, item 3).

tests/golden/env_equivalence.json holds, per recorded file under tests/data and tests/samples and per
form of it (plain, CRLF, under each wrapper the env reader takes off: srun `-l`, mpirun
`--tag-output` for one rank and for two ranks interleaved, a leading ISO timestamp; read whole
and in 61-character chunks, so that every batch boundary falls somewhere), a digest of what the
reader returned before the fast paths existed (format, variables in order, skipped, dropped; or
the ParseError's message), and the variable count, so that a changed result names its file.
Regenerate (only when a reading is meant to change, and say why in the commit):
`.venv/bin/python -m tests.test_parsers_env_equivalence --write`.
"""

from __future__ import annotations

import hashlib
import io
import json
import random
import re
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.parsers import ParseError, env_script_lines, env_shape
from harness.parsers.env import parse_env_dump
from harness.parsers.env_shape import _is_script_line
from harness.parsers.env_yaml import INLINE_ENV
from harness.parsers.reader import Input

TESTS = Path(__file__).parent
GOLDEN = TESTS / "golden" / "env_equivalence.json"
MAX_FILE = 1 << 20


def python_path(mp: pytest.MonkeyPatch) -> None:
    """The env reader without its C scans (harness/parsers/_env_lines.c), as a build without a
    C compiler or PREFLIGHT_ENV_NO_C=1 reads."""
    for module, name in ((env_script_lines, "ENV_RUN"), (env_script_lines, "ENV_JOIN"),
                         (env_script_lines, "ENV_WORDS"), (env_script_lines, "ENV_READING"),
                         (env_shape, "SHAPE_RUN")):
        mp.setattr(module, name, None)


def _ranks(text: str) -> str:
    return "".join(f"[1,{i % 2}]<stdout>:{line}" for i, line in enumerate(text.splitlines(True)))


#: The forms each file is read in: name -> rewrite of its text.
FORMS: dict[str, Callable[[str], str]] = {
    "plain": lambda t: t,
    "crlf": lambda t: t.replace("\n", "\r\n"),
    "srun": lambda t: "".join(f"0: {line}" for line in t.splitlines(True)),
    "mpirun": lambda t: "".join(f"[1,0]<stdout>:{line}" for line in t.splitlines(True)),
    "mpirun-2-ranks": _ranks,
    "timestamp": lambda t: "".join(f"2024-06-25T18:45:27.123Z {line}"
                                   for line in t.splitlines(True)),
}
CHUNKS = (None, 61)


def _files() -> list[Path]:
    out = []
    for root in (TESTS / "data", TESTS / "samples"):
        for path in sorted(root.rglob("*")):
            if (path.is_file() and path != GOLDEN and path.suffix not in (".md",)
                    and not path.name.endswith(".expect.json") and path.stat().st_size <= MAX_FILE):
                out.append(path)
    return out


def _reading(text: str, chunk: int | None) -> str:
    """`digest:variable count` of what parse_env_dump makes of `text` (count -1: refused)."""
    try:
        dump = parse_env_dump(Input(text, chunk=chunk))
        record: object = [dump.format, list(dump.variables.items()), dump.skipped, dump.dropped]
        count = len(dump.variables)
    except ParseError as exc:
        record, count = ["error", str(exc)], -1
    blob = json.dumps(record, ensure_ascii=True).encode()
    return f"{hashlib.sha256(blob).hexdigest()[:16]}:{count}"


def _readings(path: Path, reading: Callable[[str, int | None], str] = _reading) -> dict[str, str]:
    """`form/chunk` -> reading of every form of one file (by default parse_env_dump's)."""
    text = path.read_text(encoding="utf-8", errors="replace")
    return {f"{form}/{chunk or 'default'}": reading(rewrite(text), chunk)
            for form, rewrite in FORMS.items() for chunk in CHUNKS}


@pytest.mark.parametrize("path", ["c", "python"])
def test_every_recorded_file_reads_as_before(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """On the C path (where it is built) and on the pure-Python path."""
    if path == "python":
        python_path(monkeypatch)
    elif env_script_lines.ENV_RUN is None or not env_script_lines.c_scans():
        pytest.skip("the C scans are not built (or PREFLIGHT_ENV_NO_C is set)")
    golden = json.loads(GOLDEN.read_text(encoding="utf-8"))
    files = {p.relative_to(TESTS).as_posix(): p for p in _files()}
    # every file recorded is still read (a file removed would silently drop its cases)
    assert set(golden) <= set(files), sorted(set(golden) - set(files))[:5]
    assert len(golden) >= 300
    changed = [f"{name} {form}" for name, recorded in golden.items()
               for form, reading in _readings(files[name]).items() if recorded[form] != reading]
    assert not changed, f"{len(changed)} reading(s) changed, e.g. {changed[:5]}"


#: The bench's env-script inputs (bench/bench_line_kinds.py), smaller, as read at ee2947e (before
#: the C scans): `.venv/bin/python -m tests.test_parsers_env_equivalence --write-generated` with
#: that revision's harness first on sys.path (its worktree's path in PREFLIGHT_BASE).
GENERATED = TESTS / "golden" / "env_generated.json"
#: The six scripts the golden was made from, by name: a sample added later changes the bench's
#: input (it cycles every `*.sh`), not this golden's.
GENERATED_FROM = ("real_mpirun_ofi67_p4d_efa_not_enabled.sh", "real_sbatch_fsdp_2023_comments.sh",
                  "real_sbatch_fsdp_llama2_2025.sh", "real_sbatch_nccl_tests_2023.sh",
                  "real_sbatch_nccl_tests_container_2024.sh",
                  "real_serve_sh_defaults_expansion_p5en.sh")
_PLAIN_VALUE = re.compile(r"(?<=[A-Za-z0-9_]=)([A-Za-z0-9_./:-]+)")


def _generated() -> dict[str, str]:
    """The six recorded scripts cycled 600 times: as they are (`repeated`, "env (scripts)"), and
    with the copy's number after each plain value, so that no command line repeats
    (`distinct`, "env (distinct scripts)": the memos of lines read before gain nothing)."""
    scripts = [(TESTS / "data/env" / name).read_text(encoding="utf-8") for name in GENERATED_FROM]
    copies = range(600)
    return {"repeated": "".join(scripts[i % 6].rstrip("\n") + "\n" for i in copies),
            "distinct": "".join(_PLAIN_VALUE.sub(lambda m, i=i: f"{m[1]}{i}", scripts[i % 6])
                                .rstrip("\n") + "\n" for i in copies)}


def _generated_readings() -> dict[str, str]:
    return {f"{name}/{form}/{chunk or 'default'}": _reading(FORMS[form](text), chunk)
            for name, text in _generated().items() for form in ("plain", "srun", "timestamp")
            for chunk in (None, 4096)}


@pytest.mark.parametrize("path", ["c", "python"])
def test_the_bench_inputs_read_as_before(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The repeated and the distinct script inputs, bare, under `srun -l` and timestamps, in
    one batch and in 4 KiB chunks, read as ee2947e read them, on both paths."""
    if path == "python":
        python_path(monkeypatch)
    elif env_script_lines.ENV_RUN is None or not env_script_lines.c_scans():
        pytest.skip("the C scans are not built (or PREFLIGHT_ENV_NO_C is set)")
    golden = json.loads(GENERATED.read_text(encoding="utf-8"))
    assert len(golden) == 12
    assert _generated_readings() == golden


@pytest.mark.parametrize("name", ["repeated", "distinct"])
def test_inspect_env_gives_the_same_json_on_both_paths(name: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """`preflight inspect env --json`'s result on the bench inputs (the rules' findings, the
    redacted relevant values, the counts) is the same with and without the C scans."""
    from harness.parsers.env import inspect_env
    from harness.profiles.table import get_profile

    text = _generated()[name]
    profile = get_profile("p5.48xlarge")
    with_c = json.dumps(inspect_env(io.StringIO(text), profile=profile), sort_keys=True)
    python_path(monkeypatch)
    assert json.dumps(inspect_env(io.StringIO(text), profile=profile), sort_keys=True) == with_c
    assert '"num_variables": 41' in with_c


def test_the_digest_sees_a_changed_variable() -> None:
    """The comparison above can fail: a value changed by one character changes the digest."""
    text = "NCCL_DEBUG=INFO\nFI_PROVIDER=efa\n"
    assert _reading(text, None) != _reading(text.replace("efa", "efb"), None)
    assert _reading(text, None) != _reading(text + "# note\nstray words\n", None)  # skipped


#: The two patterns as they were before their literal comes first (the reference).
_OLD_INLINE_ENV = re.compile(
    r"(?:\b|[\"'])(?:environment|env|env_vars|envVars|environment_variables)[\"']?\s*[=:]\s*"
    r"\{(?P<body>[^{}]*)\}")
_OLD_SCRIPT_LINE = re.compile(
    r"^\s*(?:#|\$ |(?:export|declare|typeset|readonly|ENV|ARG|RUN|FROM)\s)"
    r"|\\$|(?:^|\s)(?:(?:-x|-e|--env)\s+|--env=|--export=[\"']?(?:[^\s,]*,)*)"
    r"[A-Za-z_][A-Za-z0-9_]*=")
_EDGES = [
    "env={A: 1}", "x env: {A: 1}", "'env': {A: 1}", '"environment"={"A": "b"}', "myenv={A: 1}",
    "env_vars : {A: 2}", "envVars:{}", "environment_variables={A: 3}", "environment_x={A: 1}",
    "ENV={A: 1}", "é env={A: 1}", "éenv={A: 1}", "_env={A: 1}", "env={A: {B}}", "env",
    "-x A=1", " -x A=1", "a-x A=1", "mpirun -x  NCCL_DEBUG=INFO", "docker run -e A=1 img",
    "--env=A=1", "x --env A=1", "srun --export=ALL,A=1", "srun --export='ALL,B=2' x",
    "\t-e\tA=1", "a --export=A=1", "-x 1A=1", "x\\", "  # c", "$ env", "export A=1",
    "RUN a=1", "echo -- A=1", "--x A=1", "\u3000-x A=1",
]


def test_fast_patterns_match_as_the_reference() -> None:
    """_INLINE_ENV finds the same body and _is_script_line says the same as the patterns they
    replace, on the edges of each branch and on random lines made of their pieces."""
    rng = random.Random(32)
    pieces = ["env", "environment", "_vars", "Vars", "-x", "-e", "--env", "--export=", "=",
              "A", "é", " ", "\t", "'", '"', ":", "{", "}", ",", "B=1", "#", "$ ", "\\", "x"]
    lines = _EDGES + ["".join(rng.choices(pieces, k=rng.randint(1, 12))) for _ in range(20000)]
    for line in lines:
        old, new = _OLD_INLINE_ENV.search(line), INLINE_ENV.search(line)
        assert (old and old["body"]) == (new and new["body"]), line
        assert bool(_OLD_SCRIPT_LINE.search(line)) == _is_script_line(line), line


def _write(target: Path = GOLDEN, files: Callable[[], list[Path]] = _files,
           reading: Callable[[str, int | None], str] = _reading) -> None:
    """Record `reading` of every form of each of `files()` in `target` (also the topology's)."""
    golden = {p.relative_to(TESTS).as_posix(): _readings(p, reading) for p in files()}
    target.write_text(json.dumps(golden, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"{len(golden)} files' readings written to {target}")


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    _write()
elif __name__ == "__main__" and sys.argv[1:] == ["--write-generated"]:
    GENERATED.write_text(json.dumps(_generated_readings(), indent=1, sort_keys=True) + "\n",
                         encoding="utf-8")
elif __name__ == "__main__":
    pytest.main([__file__, "-q"])
