"""nccl-tests output parser over recorded real outputs (tests/data/nccl_tests/, each with its
X.expect.json) and the behaviours around them."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from harness.parsers import ParseError
from harness.parsers.nccl_tests import inspect_nccl_tests, parse_nccl_tests
from harness.parsers.nccl_tests_model import bus_factor
from tests import expect_parsed

DATA = Path(__file__).parent / "data" / "nccl_tests"
GIB = 1024**3

# Each file's outcome, rows and errors as `inspect nccl-tests` shows them are in its X.expect.json
# (tests/test_parsers_samples.py); `expect_parsed` holds what inspect does not show.
@pytest.mark.parametrize(("name", "want"), expect_parsed.cases(DATA))
def test_parsed_facts(name: str, want: dict):
    """`expect_parsed`: {dotted path into the NcclTestsResult: value} (hosts, devices, a row's
    root or max_error, truncated_rows, warnings...)."""
    r = parse_nccl_tests((DATA / name).read_text())
    assert {path: expect_parsed.get(r, path) for path in want} == want


def test_parsed_facts_are_read():
    assert len(expect_parsed.cases(DATA)) >= 25


def test_prefixes_and_nccl_info_lines_are_ignored():
    plain = (DATA / "current_2node_h100.txt").read_text().splitlines()
    mixed = []
    for i, line in enumerate(plain):
        prefix = ["[1,0]<stdout>:", "0: ", "ip-10-1-2-3: ", "2025-06-01T10:00:00.123Z "][i % 4]
        mixed.append(prefix + line)
        if i % 5 == 0:
            mixed.append(f"ip-10-1-2-3:1234:5678 [{i % 8}] NCCL INFO Channel 00/0 : 0[0] -> "
                         "8[0] [send] via NET/Libfabric/0/GDRDMA")
    r = parse_nccl_tests("\n".join(mixed))
    ref = parse_nccl_tests("\n".join(plain))
    assert r.rows == ref.rows and r.nranks == 16 and r.avg_busbw_gb_s == 70.742


def test_truncated_output_reports_average_as_absent_not_zero():
    text = (DATA / "current_2node_h100.txt").read_text().splitlines()
    cut = "\n".join(text[:-4]) + "\n  4294967296    1073741824     float     sum      -1    24361"
    r = parse_nccl_tests(cut)
    assert r.avg_busbw_gb_s is None and not r.completed and r.out_of_bounds is None
    assert r.largest.size_bytes == 2 * GIB and r.truncated_rows == 1
    assert inspect_nccl_tests(io.StringIO(cut), profile=None)["avg_busbw_gb_s"] is None


def test_busbw_not_matching_algbw_times_factor_is_flagged():
    text = (DATA / "current_2node_h100.txt").read_text().replace(
        "6759.0  158.86  297.86", "6759.0  158.86  250.00")
    r = parse_nccl_tests(text)
    (problem,) = r.busbw_mismatches
    assert "1073741824" in problem and "250" in problem and "297.9" in problem
    assert problem in inspect_nccl_tests(io.StringIO(text), profile=None)["errors"]


@pytest.mark.parametrize(("collective", "n", "factor"), [
    ("all_reduce", 16, 1.875), ("all_gather", 8, 0.875), ("reduce_scatter", 4, 0.75),
    ("alltoall", 2, 0.5), ("broadcast", 8, 1.0), ("reduce", 8, 1.0), ("all_reduce", None, None),
    ("gather", 4, 0.75), ("scatter", 8, 0.875), ("hypercube", 8, 1.0),
    (None, 8, None),
])
def test_bus_factors(collective, n, factor):
    assert bus_factor(collective, n) == factor


def test_reduce_scatter_is_checked_with_its_own_factor():
    rows = ("#  Rank  0 Group  0 Pid 1 on h device  0 [0x01] NVIDIA H100\n"
            "#  Rank  1 Group  0 Pid 1 on h device  1 [0x02] NVIDIA H100\n"
            "  1048576  131072  float  sum  -1  10.0  104.86  52.43  0  10.0  104.86  52.43  0\n")
    assert parse_nccl_tests(rows, collective="reduce_scatter").busbw_mismatches == ()
    assert len(parse_nccl_tests(rows, collective="all_reduce").busbw_mismatches) == 2


def test_wrong_in_scientific_notation_and_na():
    head = "# nThread 1 nGpus 1 minBytes 8 maxBytes 8 step: 2(factor) warmup iters: 5 iters: 20 "
    row = "  8589934592  2147483648  float  sum  -1  47535  180.71  338.82  1.67772e+07  47743  "
    sci = parse_nccl_tests(head + "validation: 1\n" + row + "179.92  337.35  0\n")
    assert sci.rows[0].oop.wrong == 16777200 and sci.num_wrong == 16777200
    na = parse_nccl_tests(head + "validation: 0\n" + row.replace("1.67772e+07", "N/A")
                          + "179.92  337.35  N/A\n")
    assert na.rows[0].oop.wrong is None and na.num_wrong is None and na.checked is False


def test_min_bw_failed_footer():
    text = (DATA / "current_2node_h100.txt").read_text().replace(
        "# Avg bus bandwidth    : 70.742 ", "# Avg bus bandwidth    : 70.742 FAILED")
    r = parse_nccl_tests(text)
    assert r.min_bw_failed and r.avg_busbw_gb_s == 70.742


@pytest.mark.parametrize("text", ["", "hello world\n", "Segmentation fault (core dumped)\n",
                                  "{\"not\": \"nccl-tests\"}", "\x00\x01garbage 12 34\n",
                                  # a row-less document is read only with nccl-tests' own key
                                  "{\"version\": 3, \"config\": {\"ngpus\": 2}}"])
def test_garbage_is_a_parse_error(text):
    with pytest.raises(ParseError):
        parse_nccl_tests(text)


def test_inspect_json_keys_exactly_as_documented():
    out = inspect_nccl_tests(io.StringIO((DATA / "current_2node_h100.txt").read_text()),
                             profile=None)
    assert list(out) == ["collective", "nranks", "dtype", "redop", "rows", "avg_busbw_gb_s",
                         "largest", "num_wrong", "out_of_bounds", "completed", "errors",
                         "commands_seen", "verdicts"]
    assert out["verdicts"] == []  # no profile: nothing to judge against
    assert list(out["rows"][0]) == ["size_bytes", "count", "oop", "ip"]
    assert list(out["rows"][0]["oop"]) == ["time_us", "algbw_gb_s", "busbw_gb_s", "wrong"]
    assert out["largest"] == {"size_bytes": 8589934592, "busbw_gb_s": pytest.approx(338.085)}
    json.dumps(out)


def test_cli_inspect_reads_a_file_and_stdin(tmp_path, capsys, monkeypatch):
    from harness.cli import main

    path = DATA / "crash_mid_table_host_prefixed.txt"
    assert main(["inspect", "nccl-tests", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["completed"] is False and doc["avg_busbw_gb_s"] is None
    assert doc["errors"][0].startswith("HCA-128: Test NCCL failure common.cu:1204")
    monkeypatch.setattr("sys.stdin", io.StringIO(path.read_text()))
    assert main(["inspect", "nccl-tests", "-", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == doc


def test_per_iteration_columns_and_timestamps():
    header = ("#       size         count      type   redop    root     time   algbw   busbw  "
              "#wrong    i_min    i_max    i_p99    i_cv%     time   algbw   busbw  #wrong    "
              "i_min    i_max    i_p99    i_cv%           timestamp\n")
    row = ("  1073741824     268435456     float     sum      -1   6759.0  158.86  297.86       0"
           "   6700.1   6801.2   6800.0     0.40   6737.4  159.37  298.82       0   6700.0   "
           "6790.0   6789.0     0.35  2025-06-01 10:00:00\n")
    r = parse_nccl_tests(header + row, collective="all_reduce")
    (parsed,) = r.rows
    assert (parsed.oop.busbw_gb_s, parsed.ip.busbw_gb_s, parsed.ip.wrong) == (297.86, 298.82, 0)
    assert parsed.ip.time_us == 6737.4


def _read(name: str) -> str:
    return (DATA / name).read_text()


def test_sendrecv_on_two_ranks_read_as_sendrecv_has_no_mismatch():
    # Not guessed as all_reduce (its expectation: collective null); named, its factor is 1.
    assert parse_nccl_tests(_read("real_sendrecv_na_in_place_2node.txt"),
                            collective="sendrecv").busbw_mismatches == ()


def test_rccl_asterisk_marks_an_error_above_tolerance():
    """rccl-tests prints the old error column as `%5.0le%s` with `*` past its tolerance."""
    header = ("#       size         count      type     time   algbw   busbw  error     time   algbw"
              "   busbw  error\n")
    row = ("     1048576        262144     float    151.9    6.90    6.90  0e+00    149.8    7.00"
           "    7.00  3e-01*\n")
    (parsed,) = parse_nccl_tests(header + row).rows
    assert (parsed.oop.wrong, parsed.ip.wrong, parsed.ip.max_error) == (None, 1, 0.3)


def test_nan_cells_keep_the_row():
    row = ("           0             0     float     sum      -1     5.70    -nan    -nan      0"
           "     5.54     nan     nan      0\n")
    (parsed,) = parse_nccl_tests(row).rows
    assert parsed.oop.busbw_gb_s is None and parsed.ip.algbw_gb_s is None and parsed.wrong == 0


def test_crlf_line_ends_with_mpirun_prefixes():
    plain = _read("real_eks_mpirun_indented_elided.txt")
    assert parse_nccl_tests(plain.replace("\n", "\r\n")).rows == parse_nccl_tests(plain).rows


def test_nranks_from_nccl_init_lines_let_the_busbw_be_checked():
    """2 x p4d over EFA (aws-ofi-nccl 1.1.x): only NCCL's `comm ... rank 7 nranks 16 ... Init
    COMPLETE` counts the ranks (16 in the expectation), which lets the busbw arithmetic be
    checked (1.875 x algbw): a busbw edited off it is a mismatch."""
    text = _read("real_p4d_efa_old_error_info_in_table.txt").replace("32.02  5e-07", "30.00  5e-07")
    assert len(parse_nccl_tests(text).busbw_mismatches) == 1


def test_runs_not_reported_are_skimmed_but_still_named_and_chosen():
    """A log of three runs: only the first (or the first of the collective asked for) is read in
    full; the others' rows and failure lines never reach the result, their names still count."""
    first = (DATA / "current_2node_h100.txt").read_text()
    gather = ((DATA / "newest_complete_constructed.txt").read_text()
              .replace("all_reduce", "all_gather")
              + "Test NCCL failure common.cu:1030 'unhandled system error'\n")
    log = first + gather + first
    alone_first, alone_gather = parse_nccl_tests(first), parse_nccl_tests(gather)
    r = parse_nccl_tests(log)
    assert (r.collective, r.rows, r.errors, r.num_runs) == (
        "all_reduce", alone_first.rows, (), 3)
    assert "3 runs (?, all_gather, ?)" in r.warnings[-1]  # (the h100 log has no banner)
    g = parse_nccl_tests(log, collective="all_gather")
    assert g.rows == alone_gather.rows and len(g.rows) == 4
    assert g.errors == ("Test NCCL failure common.cu:1030 'unhandled system error'",)
    assert g.avg_busbw_gb_s == alone_gather.avg_busbw_gb_s


@pytest.mark.parametrize("after", ["\ufffd\ufffd", "\ufffd\n", "[x]"])
def test_a_row_ending_in_a_character_past_ascii_is_read_whole(after):
    """The row-shaped stretch (ASCII, no `[`) can end inside a line; the row scan must not
    take that line's cells as a row ending there (`0\\ufffd` reached int(): ValueError; found
    by tests/test_fuzz_parsers.py, splice + invalid_utf8)."""
    header = ("#       size         count      type   redop    root     time   algbw   busbw #wrong"
              "     time   algbw   busbw #wrong\n")
    row = ("     4194304       1048576     float     sum      -1    154.4   27.16   27.16      0"
           "    153.3   27.37   27.37      0")
    result = parse_nccl_tests(header + row + after + "\n" + row + "\n")
    assert [r.size_bytes for r in result.rows] == [4194304, 4194304]
    assert result.rows[1].oop.busbw_gb_s == 27.16


def test_inspect_redacts_itself_all_but_the_numeric_rows():
    """inspect_nccl_tests redacts its own result (cmd_inspect takes it as it is): a credential in
    the command line is gone, and the rows it leaves out of the pass hold only numbers and None."""
    from harness.base.redact import Redactor
    from harness.base.redact_shapes import REDACTED

    secret = "hf_" + "aB3dE5gH7jK9mN1pQ3sT5vX7zA9cE1gH3"
    sample = Path(__file__).parent / "samples" / "nccl-tests"
    text = (sample / "real_prompt_cmd_alltoall_2080ti_x2_md_fence.txt").read_text()
    text = text.replace("./build/alltoall_perf", f"HF_TOKEN={secret} ./build/alltoall_perf", 1)
    result = inspect_nccl_tests(io.StringIO(text), profile=None)
    assert getattr(inspect_nccl_tests, "redacted", False)
    shown = json.dumps(result)
    assert secret not in shown and REDACTED in shown
    assert result == Redactor().obj(result)  # what cmd_inspect's own pass would have given
    assert result["rows"] and all(
        type(v) in (int, float, type(None))
        for row in result["rows"] for part in (row, row["oop"], row["ip"] or {})
        for v in part.values() if type(v) is not dict)
