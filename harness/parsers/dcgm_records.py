"""The records of a `dcgmi diag` run (harness.parsers.dcgm is the entry; its JSON and text
readers are harness.parsers.dcgm_json and dcgm_text) and what they judge: passed, failed,
warnings."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

#: What dcgmi says when another diagnostic holds the GPUs: the dcgmErrorString of
#: DCGM_ST_IN_USE (-34: "The requested operation could not be completed because the affected
#: resource is in use"; the diag manager's resource reservation, held by a running `dcgmi diag` or
#: `dcgmi mndiag`) and of DCGM_ST_DIAG_ALREADY_RUNNING (-39: "A diag instance is already running,
#: cannot run a new diag until the current one finishes"; an nvvs process still running).
#: NVIDIA/DCGM 4.6.0 (commit 72fa3fe) dcgmlib/src/dcgm_errors.c lines 265-276,
#: modules/diag/DcgmDiagManager.cpp lines 1762-1766 and 1871-1884; dcgmi prints them as
#: `Error: Unable to complete diagnostic for entities *,cpu:*. Return: (-34) : <text>`
#: (dcgmi/Diag.cpp lines 443-459), under `runtime_error` with `-j` (lines 635-643). Matched on
#: these words, lower-cased: the numbers alone are not DCGM's to keep.
CONTENTION_WORDS = ("affected resource is in use", "a diag instance is already running")

STATUS_WORDS = {"pass": "pass", "fail": "fail", "warn": "warn", "warning": "warn", "skip": "skip",
           "skipped": "skip", "not run": "skip", "not_run": "skip"}


@dataclass(frozen=True, slots=True)
class DcgmResult:
    """One test's outcome on one GPU (gpu None: the test reports for the whole node)."""

    test: str
    gpu: int | None
    status: str
    """pass, fail, warn, skip (an unknown word is kept as it was, and counts as a failure)."""
    message: str = ""
    category: str = ""
    """`Deployment` (software checks), `Hardware`, `Integration`, `Stress`; "" when unknown."""
    host: int | None = None
    """The host's index in a multi-node run (`dcgmi mndiag`); None on one node."""

    @property
    def reason(self) -> str:
        """What a failed result says: DCGM's message; else that no status was read (a result
        without one is not a pass), the word DCGM gave, or `failed`."""
        if self.message:
            return self.message
        if self.status == "unknown":
            return "no status read (a result without one is not a pass)"
        return "failed" if self.status == "fail" else f"status {self.status!r}"


@dataclass(frozen=True, slots=True)
class DcgmDiag:
    """A whole diagnostic run."""

    dcgm_version: str | None
    driver_version: str | None
    results: tuple[DcgmResult, ...]
    errors: tuple[str, ...] = ()
    """Node-level errors dcgmi reported instead of (or besides) test results."""
    omitted: int = 0
    """Test rows past MAX_RESULTS, not read (a flood): then a run without failures is unknown."""
    cut_at: str | None = None
    """A text table that ends in a category header with no row under it (`Integration`): the
    paste or the run was cut there, so the categories after it are absent."""
    fragment: bool = False
    """Test objects pasted without the document around them (a DCGM 4 `tests[]` element): the
    tests seen are judged, the run as a whole is not (`passed` is never true)."""
    gpus_detected: int | None = None
    """How many GPUs DCGM says it detected (the text table's `GPU Device IDs Detected` row, one
    device ID per GPU); None where the output does not say."""

    def untested(self, gpus: Iterable[int]) -> list[int]:
        """Of `gpus` (indices), those without any result while other GPUs have some: DCGM did
        not test them (not in its group, or not visible to nv-hostengine). Unknown is not a
        pass: PF-GPU-012 errors on them, `inspect dcgm` names them."""
        tested = {r.gpu for r in self.results if r.gpu is not None}
        return [g for g in gpus if tested and g not in tested]

    @property
    def failed(self) -> list[DcgmResult]:
        """Failed results, and results whose status is a word this parser does not know."""
        return [r for r in self.results if r.status not in ("pass", "warn", "skip")]

    @property
    def passed(self) -> bool | None:
        """False: a test failed or dcgmi reported an error; True: something ran and nothing
        failed; None: no test ran (all skipped), or only the deployment (software) checks did
        while every GPU test past them was skipped (DCGM skips plugins a SKU does not allow)."""
        if self.failed or self.errors:
            return False
        if self.omitted or self.cut_at or self.fragment:
            return None  # rows that were not read (or not printed) may hold a failure
        ran = [r for r in self.results if r.status in ("pass", "warn")]
        gpu_tests = [r for r in self.results if r.category.lower() != "deployment"]
        if gpu_tests and not any(r.status in ("pass", "warn") for r in gpu_tests):
            return None
        return True if ran else None

    @property
    def contended(self) -> str | None:
        """dcgmi's own words when it ran no test because another diagnostic holds the GPUs
        (DCGM_ST_IN_USE, DCGM_ST_DIAG_ALREADY_RUNNING): not a result of these GPUs."""
        if self.results:
            return None
        return next((c for c in map(contention, self.errors) if c), None)

    @property
    def warnings(self) -> list[str]:
        out = []
        for r in self.results:
            if r.status == "warn" or (r.status not in ("pass", "fail", "skip")):
                where = f" on GPU {r.gpu}" if r.gpu is not None else ""
                where += f" of host {r.host}" if r.host is not None else ""
                out.append(f"{r.test}{where}: {r.status}" + (f": {r.message}" if r.message else ""))
        skipped = sorted({r.test for r in self.results if r.status == "skip"})
        if skipped:
            out.append("skipped: " + ", ".join(skipped))
        return out

def contention(text: str) -> str | None:
    """The first line of `text` that says another DCGM diagnostic holds the GPUs, or None."""
    for line in text.splitlines():
        if any(w in line.lower() for w in CONTENTION_WORDS):
            return line.strip()
    return None


def status_of(raw: object) -> str:
    text = str(raw or "").strip().lower()
    return STATUS_WORDS.get(text, text or "unknown")


#: Bounds on what is kept (memory stays flat): a level-4 run on 8 GPUs has ~150 results.
MAX_RESULTS = 20_000
MAX_MESSAGES = 200


#: The tests each `dcgmi diag -r N` level runs in DCGM 4.6 (NVIDIA/DCGM 4.6.0,
#: nvvs/src/NvidiaValidationSuite.cpp FillTestVectors; names from nvvs/include/PluginStrings.h):
#: each level runs the tests of the levels below it too. `eud` and `cpu_eud` run only as root,
#: `rist` only where DCGM_RIST_BIN_PATH names its binary: OPTIONAL_TESTS, never missed.
DCGM_LEVEL_TESTS: dict[int, tuple[str, ...]] = {
    1: ("software",),
    2: ("memory", "pcie"),
    3: ("diagnostic", "eud", "cpu_eud", "nvbandwidth", "nccl_tests", "rist", "memory_bandwidth",
        "targeted_stress", "targeted_power"),
    4: ("memtest", "pulse_test"),
}
OPTIONAL_TESTS = frozenset(("eud", "cpu_eud", "rist"))


def level_of(tests: list[str]) -> int | None:
    """The lowest DCGM 4.6 level that runs every test in `tests` (names as DCGM 4 prints them),
    None when none of them is a DCGM 4 test name (DCGM 3's `GPU Memory`, a fragment)."""
    names = {t.lower() for t in tests}
    levels = [n for n, own in DCGM_LEVEL_TESTS.items() if names & set(own)]
    return max(levels) if levels else None


def tests_not_seen(tests: list[str], level: int) -> list[str]:
    """The tests a DCGM 4.6 level-`level` run prints that `tests` lacks (optional ones aside)."""
    names = {t.lower() for t in tests}
    return [t for n in range(1, level + 1) for t in DCGM_LEVEL_TESTS[n]
            if t not in names and t not in OPTIONAL_TESTS]

