"""Issue 32: `preflight inspect KIND` never says "no problem" for a fact it did not read. For
every kind, each fact its matching check judges is taken out of a real sample (tests/data/*/
SOURCES.md names each), and inspect must name what is missing: `--fail-on problem` exits 1 with
a line that says so, or (where the check itself only warns) the kind's verdict is no longer a
pass and says what is unknown. Each sample is first read clean for that fact, so the case can
fail. nvidia-smi's facts are swept in tests/test_inspect_unread_gpu.py (one case per GPU fact)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

import pytest

from harness.cli import main
from harness.commands.inspect_gate import problems
from harness.parsers import ParseError, inspect_kinds
from harness.parsers.reader import Input
from harness.profiles.table import get_profile

DATA = Path(__file__).parent / "data"
SAMPLES = Path(__file__).parent / "samples"

NCCL_LOG = DATA / "nccl_log/real_sagemaker_ofi_1.11_p4d_ts_lines.log"  # passes all 6 on p4d
GB200 = DATA / "nccl_tests/real_gb200_nvl72_trimmed_ranks.txt"
DMESG = DATA / "kernel_log/real_dmesg-T-clean-boot-banner-kvm.txt"
DCGM_JSON = DATA / "dcgm/real_dcgm-json-r3-t4-single-gpu-pass.json"
DCGM_TEXT = SAMPLES / "dcgm/real_pod_banner_dcgmi_text_4.2.3_4_gpus_software_rows_cut_at_hardware.txt"
FI_INFO = DATA / "host/real_p4de_fi_info_domains_excerpt.txt"
ENV = DATA / "env/real_sbatch_fsdp_llama2_2025.sh"
TRAIN = DATA / "train_step/result_cpu_gloo.txt"  # recorded from this project's worker


class Case(NamedTuple):
    kind: str
    sample: Path
    profile: str
    fact: str
    """What the check judges, in words."""
    cut: str
    """A regex (MULTILINE) whose matches are removed: the fact taken out."""
    named: str
    """Words the gate line (or the verdict) that names the missing fact holds."""
    check: str | None = None
    """The verdict that must leave `pass` (None: the gate line alone proves it)."""
    repl: str = ""
    """What each match becomes ("": removed)."""


CASES = [
    # nccl-log: the network checks (harness.judges.network, PF-NET-006..011)
    Case("nccl-log", NCCL_LOG, "p4d.24xlarge", "aws-ofi-nccl version (PF-NET-006: a warning)",
         r"^.*Initializing aws-ofi-nccl.*\n", "aws-ofi-nccl version unknown", "PF-NET-006"),
    Case("nccl-log", NCCL_LOG, "p4d.24xlarge", "the provider NCCL used (PF-NET-007)",
         r"^.*Selected Provider is.*\n", "PF-NET-007 fail: provider NCCL used none", "PF-NET-007"),
    Case("nccl-log", NCCL_LOG, "p4d.24xlarge", "the network NCCL used (PF-NET-008)",
         r"^.*(Using network|via NET/).*\n", "PF-NET-008 fail: NCCL selected no network",
         "PF-NET-008"),
    Case("nccl-log", NCCL_LOG, "p4d.24xlarge", "GPUDirect on the NET channels (PF-NET-009)",
         r"^.*via NET/.*\n", "PF-NET-009 unknown", "PF-NET-009"),
    Case("nccl-log", NCCL_LOG, "p4d.24xlarge", "the NIC count (PF-NET-010)",
         r" \(found \d+ nics\)", "PF-NET-010 fail: the NCCL log states no NIC count", "PF-NET-010"),
    # fi-info: EFA devices (PF-NET-003)
    Case("fi-info", FI_INFO, "p4de.24xlarge", "the EFA devices' names (PF-NET-003)",
         r"^\s*domain: .*\n", "PF-NET-003 unknown", "PF-NET-003"),
    # nccl-tests: the bandwidth and data checks (PF-BW-001, 003, 004, 005)
    Case("nccl-tests", GB200, "p4d.24xlarge", "busbw at the gate's size (PF-BW-001)",
         r"^\s+8589934592 .*\n", "PF-BW-001 unknown: no row at 8 GiB", "PF-BW-001"),
    Case("nccl-tests", GB200, "p4d.24xlarge", "which hosts ran it (PF-BW-001 or 002)",
         r"^#\s+Rank .*\n", "the output names no host", "PF-BW-001"),
    Case("nccl-tests", GB200, "p4d.24xlarge", "the out-of-bounds count (PF-BW-004)",
         r"^# Out of bounds.*\n", "not known (PF-BW-004): no `# Out of bounds values` line"),
    Case("nccl-tests", GB200, "p4d.24xlarge", "the wrong-element counts (PF-BW-003)",
         r"^(\s+(?:\S+\s+){7}\S+)\s+\S+((?:\s+\S+){3})\s+\S+$|\s+#wrong",
         "PF-BW-001 unknown", "PF-BW-001", r"\1\2"),  # the rows no longer read as rows
    Case("nccl-tests", GB200, "p4d.24xlarge", "that the sweep finished (PF-BW-005)",
         r"^# Avg bus bandwidth.*\n", "the sweep did not finish"),
    # dcgm: PF-GPU-012, every test's result on every GPU DCGM detected
    Case("dcgm", DCGM_JSON, "p5.48xlarge", "a test's result (PF-GPU-012)",
         r'^\t+"status" : "Pass"\n(?=\t+\}\n\t+\]\n\t+\},\n\t+\{\n\t+"name" : "NVML Library")',
         "Denylist: no status read"),
    Case("dcgm", DCGM_TEXT, "p5.48xlarge", "that every detected GPU was tested (PF-GPU-012)",
         r"^\|\s+\| GPU3: Pass\s+\|\n", "not known: GPU 3 has no result"),
    # train-step: PF-TRAIN-001..008 read rank 0's result (the worker's own recorded output)
    Case("train-step", TRAIN, "local-cpu", "the loss gap to the reference (PF-TRAIN-005)",
         r'"loss_max_rel_diff": [^,]*, ', "not known: the result has no loss_max_rel_diff"),
    Case("train-step", TRAIN, "local-cpu", "the losses (PF-TRAIN-004)",
         r'"losses": \[[^]]*\], ', "not known: the result has no losses"),
    Case("train-step", TRAIN, "local-cpu", "a rank's report (PF-TRAIN-001)",
         r', \{"local_losses": \[5\.765.*?"device": "cpu"\}',
         "not known: the result has no ranks: 1 of 2 reported"),
    Case("train-step", TRAIN, "local-cpu", "a rank's checksum (PF-TRAIN-007)",
         r'"checksum": "[^"]*", (?=[^{]*"rank": 1)', "not known: the result has no ranks[1].checksum"),
    # kernel-log: PF-GPU-006 / 018, a log read whole
    Case("kernel-log", DMESG, "p5.48xlarge", "the log's last line, whole (PF-GPU-006/018)",
         r"\n\Z", "not known: the log ends mid-line"),
]


def _read(kind: str, text: str, profile: str) -> dict:
    return inspect_kinds()[kind](Input(text), profile=get_profile(profile))


def _verdict(result: dict, check: str) -> dict:
    return next(v for v in result["verdicts"] if v["check"] == check)


@pytest.mark.parametrize("case", CASES, ids=[f"{c.kind}:{c.fact}" for c in CASES])
def test_a_fact_taken_out_of_a_real_sample_is_named(tmp_path: Path, capsys, case: Case):
    text = case.sample.read_text(encoding="utf-8", errors="replace")
    cut, n = re.subn(case.cut, case.repl, text, flags=re.M)
    assert n, f"the mutation did not bite: {case.cut!r}"
    before = _read(case.kind, text, case.profile)
    assert not any(case.named in p for p in problems(case.kind, before))
    if case.check:
        assert _verdict(before, case.check)["status"] == "pass"
    after = _read(case.kind, cut, case.profile)
    if case.check and _verdict(after, case.check)["status"] == "warn":
        # The check itself warns (the plugin is loaded; its version is unknown): named there.
        assert case.named in _verdict(after, case.check)["message"]
        return
    path = tmp_path / case.sample.name
    path.write_text(cut, encoding="utf-8")
    capsys.readouterr()
    assert main(["inspect", case.kind, str(path), "--json", "--profile", case.profile,
                 "--fail-on", "problem"]) == 1
    assert any(case.named in line for line in capsys.readouterr().err.splitlines()), case.named


def test_an_old_table_without_wrong_counts_is_named_as_the_check_names_it(capsys):
    """nccl-tests before `#wrong` (an `error` column): PF-BW-003 errors, `reduced data not
    checked: ... no #wrong values in the output` (harness.judges.bandwidth's words)."""
    path = DATA / "nccl_tests/real_p4d_efa_old_error_info_in_table.txt"
    assert main(["inspect", "nccl-tests", str(path), "--json", "--fail-on", "problem"]) == 1
    assert ("not known (PF-BW-003): reduced data not checked: no #wrong values in the output"
            in capsys.readouterr().err)


def test_a_log_with_no_nccl_line_left_is_refused_not_passed():
    """PF-NET-011 (no WARN lines) reads the log's NCCL lines: with none left, nothing was read."""
    cut = re.sub(r"^.*NCCL (INFO|WARN).*\n", "", NCCL_LOG.read_text(encoding="utf-8"), flags=re.M)
    result = _read("nccl-log", cut, "p4d.24xlarge")
    assert _verdict(result, "PF-NET-011")["status"] != "pass" or problems("nccl-log", result)


def test_a_train_step_log_without_its_result_is_refused_not_passed():
    """PF-TRAIN-001 reads rank 0's result line: without it (and no failure), nothing was read."""
    text = (DATA / "train_step/result_cpu_gloo.txt").read_text(encoding="utf-8")
    with pytest.raises(ParseError, match="no train_step result"):
        _read("train-step", re.sub(r'^\{"schema".*\n', "", text, flags=re.M), "local-cpu")


def test_an_env_file_without_the_recommended_debug_setting_names_it():
    """The env rules are the env check's own (harness.judges.env): a recommended variable taken
    out is named (a warning there, and here)."""
    text = ENV.read_text(encoding="utf-8")
    assert _read("env", text, "p5.48xlarge")["recommended"] == []
    cut = re.sub(r"^export NCCL_DEBUG=.*\n", "", text, flags=re.M)
    assert [f["name"] for f in _read("env", cut, "p5.48xlarge")["recommended"]] == ["NCCL_DEBUG"]


@pytest.mark.parametrize(("text", "end"), [
    ("a\nb", "b"), ("a\nb\n", None), ("a\r", None), ("a\r\nb\r\n", None), ("", None),
    ("x" * 300, "x" * 300),
])
def test_the_reader_says_when_the_last_line_has_no_end(text: str, end: str | None):
    source = Input(text, chunk=2)
    for _ in source.batches():
        pass
    assert source.stats.open_end == end
