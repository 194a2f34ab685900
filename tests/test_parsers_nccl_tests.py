"""nccl-tests output parser: a table over recorded real outputs (tests/data/nccl_tests/)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from harness.parsers import ParseError
from harness.parsers.nccl_tests import bus_factor, inspect_nccl_tests, parse_nccl_tests

DATA = Path(__file__).parent / "data" / "nccl_tests"
GIB = 1024**3

# file -> (collective, nranks, num rows, avg, out_of_bounds, num_wrong, completed, n errors,
#          largest size)
CASES = {
    "current_2node_h100.txt": ("all_reduce", 16, 31, 70.742, 0, 0, True, 0, 8 * GIB),
    "srun_labeled_constructed.txt": ("all_reduce", 16, 4, 70.742, 0, 0, True, 0, 8 * GIB),
    "json_constructed.json": ("all_reduce", 16, 4, 321.36, 0, 0, True, 0, 8 * GIB),
    "json_cut_short_constructed.json": ("all_reduce", 16, 3, None, None, 0, False, 0, 4 * GIB),
    "newest_complete_constructed.txt": ("all_reduce", 2, 4, 0.65375, 0, 0, True, 0, 65536),
    "newest_banner_truncated.txt": ("all_reduce", 2, 4, None, None, 0, False, 0, 65536),
    "old_error_column_truncated.txt": ("all_reduce", None, 3, None, None, None, False, 0, 4194304),
    "old_no_redop_no_header.txt": (None, None, 12, 6.6972, 0, None, True, 0, 134217728),
    "oob_failed_old_allgather.txt": (None, None, 1, 128.942, 2, None, True, 0, 4 * GIB),
    "alltoall_na_in_place.txt": (None, 1, 1, 0.0, 0, 0, True, 0, 33554432),
    # `sum -1`, no banner, no rank count, 0 GB/s rows: all_reduce, reduce_scatter or sendrecv
    # alike (issue 13: a guessed all_reduce is not a fact).
    "mpirun_tagged_p5_truncated.txt": (None, None, 3, None, None, 0, False, 0, 32),
    "mpirun_tagged_alltoall_na.txt": (None, None, 9, None, None, 0, False, 0, 524288),
    "nccl_info_interleaved_gb200.txt": ("all_reduce", None, 1, None, None, 0, False, 0, 134217728),
    "crash_mid_table_host_prefixed.txt": ("all_reduce", None, 5, None, None, 0, False, 4,
                                          16 * GIB),
    # 0 GB/s rows of `sum -1`: the ratio cannot tell all_reduce from reduce_scatter/sendrecv.
    "unpadded_rows_nccl_failure.txt": (None, 3, 3, None, None, 0, False, 2, 32),
    "died_before_table_mpirun.txt": (None, 4, 0, None, None, None, False, 2, None),
    "cuda_failure_only.txt": (None, None, 0, None, None, None, False, 1, None),
    "non_mpi_binary_under_mpirun.txt": (None, 1, 0, None, None, None, False, 1, None),
    # real_*: values read by hand from the published text (see SOURCES.md)
    "real_rccl_alltoall_tail_next_test.txt": ("alltoall", None, 10, 2.38156, 0, 0, True, 0,
                                              134217728),
    "real_rccl_broadcast_root0_tail.txt": ("broadcast", None, 10, 3.41227, 0, 0, True, 0,
                                           134217728),
    "real_thor_single_rank_wide_algbw.txt": ("all_reduce", 1, 1, 0.0, 0, 0, True, 0, 33554432),
    "real_g5_no_hash_markers_cut.txt": (None, 1, 0, None, None, None, False, 0, None),
    "real_broadcast_old_root_column_c0.txt": ("broadcast", 2, 1, None, None, None, False, 0, 8),
    "real_sendrecv_na_in_place_2node.txt": (None, 2, 5, None, None, 0, False, 0, 4096),
    "real_sendrecv_old_error_deviation.txt": (None, None, 1, None, None, None, False, 0, 37748744),
    "real_srun_label_rccl_allgather_cut.txt": (None, None, 6, None, None, 0, False, 0, 2097152),
    "real_srun_label_p5_2node.txt": ("all_reduce", None, 32, None, None, 0, False, 0, 16 * GIB),
    "real_eks_mpirun_indented_elided.txt": ("all_reduce", None, 7, 52.9753, 0, 0, True, 0, 2 * GIB),
    "real_gb200_nvl72_trimmed_ranks.txt": ("all_reduce", 72, 5, 745.53, 0, 0, True, 0, 8 * GIB),
    "real_p4d_efa_old_error_info_in_table.txt": ("all_reduce", 16, 7, None, None, None, False, 0,
                                                 46137344),
    "real_rank_tag_per_write_chunk.txt": ("all_reduce", None, 10, None, None, 0, False, 0, 536870912),
    "real_empty_hostname_rank_lines.txt": (None, 8, 0, None, None, None, False, 0, None),
    "real_wrong_counts_oob_failed_then_next_run.txt": (None, 2, 27, 3.02663, 108, 1073741424, True, 0,
                                                       536870912),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_recorded_outputs(name):
    (collective, nranks, nrows, avg, oob, wrong, completed, nerrors, largest) = CASES[name]
    r = parse_nccl_tests((DATA / name).read_text())
    assert (r.collective, r.nranks, len(r.rows)) == (collective, nranks, nrows)
    assert (r.avg_busbw_gb_s, r.out_of_bounds, r.num_wrong) == (avg, oob, wrong)
    assert (r.completed, len(r.errors)) == (completed, nerrors)
    assert (r.largest.size_bytes if r.largest else None) == largest
    assert r.busbw_mismatches == ()


def test_every_recorded_file_is_in_the_table():
    # (A file with its X.expect.json beside it is judged by tests/test_parsers_samples.py.)
    files = {p.name for p in DATA.iterdir() if p.name != "SOURCES.md"
             and not p.name.endswith(".expect.json")
             and not p.with_name(p.name + ".expect.json").is_file()}
    assert files == set(CASES)
    sources = (DATA / "SOURCES.md").read_text()
    assert all(f"`{name}`" in sources for name in files)


def test_current_format_values_and_hosts():
    r = parse_nccl_tests((DATA / "current_2node_h100.txt").read_text())
    row = r.at_size(GIB)
    assert (row.count, row.dtype, row.redop, row.root) == (268435456, "float", "sum", -1)
    assert (row.oop.time_us, row.oop.algbw_gb_s, row.oop.busbw_gb_s, row.oop.wrong) == (
        6759.0, 158.86, 297.86, 0)
    assert row.ip.busbw_gb_s == 298.82 and row.busbw_gb_s == pytest.approx(298.34)
    assert r.hosts == ("ztan-mig-235z", "ztan-mig-gq73") and r.num_nodes == 2
    assert r.devices[0] == "NVIDIA H100 80GB HBM3" and r.checked is True


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


def test_row_cut_after_out_of_place_keeps_that_half():
    r = parse_nccl_tests((DATA / "nccl_info_interleaved_gb200.txt").read_text())
    (row,) = r.rows
    assert row.oop.busbw_gb_s == 607.37 and row.ip is None and r.truncated_rows == 1


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
                                  "{\"not\": \"nccl-tests\"}", "\x00\x01garbage 12 34\n"])
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


def test_collective_named_by_the_concluded_line_when_the_banner_is_cut():
    r = parse_nccl_tests(_read("real_rccl_alltoall_tail_next_test.txt"))
    assert r.collective == "alltoall" and r.rows[-1].ip.wrong is None
    assert r.rows[-1].oop.busbw_gb_s == 6.34 and r.rows[-1].ip.busbw_gb_s == 6.34


def test_nranks_from_the_highest_rank_printed():
    """A copy trimmed to the last rank line: rank 71 means 72 ranks, not 1 (no false mismatches)."""
    r = parse_nccl_tests(_read("real_gb200_nvl72_trimmed_ranks.txt"))
    assert r.nranks == 72 and r.busbw_mismatches == ()
    assert r.devices == ("NVIDIA Graphics Device",)


def test_sendrecv_on_two_ranks_is_not_guessed_as_all_reduce():
    r = parse_nccl_tests(_read("real_sendrecv_na_in_place_2node.txt"))
    assert r.collective is None and r.hosts == ("gpu23", "gpu24")
    assert [row.ip.wrong for row in r.rows] == [None] * 5 and r.num_wrong == 0
    assert parse_nccl_tests(_read("real_sendrecv_na_in_place_2node.txt"),
                            collective="sendrecv").busbw_mismatches == ()


def test_aws_samples_p5_gate_sizes():
    """awsome-distributed-training's 2 x p5.48xlarge reference run, srun --label prefixes."""
    r = parse_nccl_tests(_read("real_srun_label_p5_2node.txt"))
    assert r.at_size(GIB).busbw_gb_s == pytest.approx((436.95 + 440.96) / 2)
    assert r.at_size(2 * GIB).oop.busbw_gb_s == 443.72 and r.at_size(16 * GIB).ip.busbw_gb_s == 487.26
    assert r.avg_busbw_gb_s is None and not r.completed


def test_elision_line_in_an_eks_log_is_skipped():
    r = parse_nccl_tests(_read("real_eks_mpirun_indented_elided.txt"))
    assert [row.size_bytes for row in r.rows][:2] == [0, 67108864] and r.truncated_rows == 0
    assert r.at_size(2 * GIB).oop.busbw_gb_s == 437.79


def test_srun_label_with_leading_space_and_row_cut_before_the_last_wrong():
    r = parse_nccl_tests(_read("real_srun_label_rccl_allgather_cut.txt"))
    last = r.rows[-1]
    assert (last.size_bytes, last.oop.time_us, last.oop.busbw_gb_s, last.ip) == (
        2097152, 70248.0, 0.03, None)
    assert r.truncated_rows == 1


def test_old_table_keeps_the_error_deviation():
    (row,) = parse_nccl_tests(_read("real_sendrecv_old_error_deviation.txt")).rows
    assert (row.dtype, row.oop.max_error, row.ip.max_error, row.ip.wrong) == ("uint8", 0.0, 300.0, None)


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


def test_concatenated_runs_are_not_merged():
    """A log of two runs: the second banner starts a new table (was: 30 rows, sizes repeated, and
    the repeated rank lines misread as a binary built without MPI)."""
    r = parse_nccl_tests(_read("real_wrong_counts_oob_failed_then_next_run.txt"))
    assert r.errors == () and r.at_size(8).oop.wrong == 4 and r.at_size(8).ip.wrong == 4
    assert r.at_size(536870912).oop.wrong == 268435000 and r.out_of_bounds == 108
    assert any("2 runs" in w for w in r.warnings)


def test_nranks_from_nccl_init_lines_when_no_rank_lines():
    """2 x p4d over EFA (aws-ofi-nccl 1.1.x): only NCCL's `comm ... rank 7 nranks 16 ... Init
    COMPLETE` counts the ranks, which lets the busbw arithmetic be checked (1.875 x algbw)."""
    r = parse_nccl_tests(_read("real_p4d_efa_old_error_info_in_table.txt"))
    assert r.nranks == 16 and r.busbw_mismatches == () and r.truncated_rows == 1
    row = r.at_size(33554432)
    assert (row.oop.algbw_gb_s, row.oop.busbw_gb_s, row.oop.max_error) == (17.08, 32.02, 5e-07)
    assert len(parse_nccl_tests(_read("real_p4d_efa_old_error_info_in_table.txt").replace(
        "32.02  5e-07", "30.00  5e-07")).busbw_mismatches) == 1


def test_rank_tags_inside_rows_are_removed():
    """`[0]` before each of nccl-tests' three writes per row (was: every row dropped)."""
    r = parse_nccl_tests(_read("real_rank_tag_per_write_chunk.txt"))
    row = r.at_size(1048576)
    assert (row.root, row.oop.time_us, row.oop.busbw_gb_s, row.ip.time_us, row.ip.busbw_gb_s) == (
        -1, 1626.5, 1.24, 2302.3, 0.87)
    assert r.at_size(536870912).ip.busbw_gb_s == 5.33 and r.truncated_rows == 1


def test_rank_lines_with_an_empty_hostname():
    r = parse_nccl_tests(_read("real_empty_hostname_rank_lines.txt"))
    assert r.nranks == 8 and r.hosts == () and r.devices[7] == "NVIDIA A100 80GB PCIe"
