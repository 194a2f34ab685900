"""fabtests and perftest outputs (harness.parsers.rdma_bench) on recorded real transcripts."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.parsers import ParseError
from harness.parsers.rdma_bench import parse_fabtests, parse_perftest

DATA = Path(__file__).parent / "data" / "rdma_bench"


def _read(name: str) -> str:
    return (DATA / name).read_text()


def test_fabtests_c5n_table_with_cut_last_row():
    table = parse_fabtests(_read("real_fi_rdm_tagged_bw_efa_c5n_libfabric_5694.txt"))
    assert [r.size_bytes for r in table.rows] == [64, 256, 1024, 4096, 65536, 1 << 20,
                                                  int(1.5 * (1 << 20)), 2 << 20]
    assert table.rows[0].iterations == 20_000 and table.rows[0].usec_per_xfer == 1.50
    assert table.cut_rows == 1  # the 4m row lost its last columns in the source
    assert round(table.peak_gbit_per_s(), 1) == 55.2  # 6899.89 MB/s
    assert table.latency_us() == 1.50


def test_fabtests_collapsed_whitespace_server_client_reads_the_first_table():
    table = parse_fabtests(_read("real_fi_rma_bw_efa_ci_libfabric_pr5734.txt"))
    assert len(table.rows) == 6 and table.rows[-1].mb_per_s == 3455.23
    assert table.latency_us(65536) == 40.99


@pytest.mark.parametrize("text", ["", "fi_getinfo: -61 (No data available)\n",
                                  "bytes   iters   total       time     MB/sec    usec/xfer   "
                                  "Mxfers/sec\n\x00\x01garbage\n"])
def test_fabtests_errors_and_garbage_raise(text: str):
    with pytest.raises(ParseError):
        parse_fabtests(text)


def test_perftest_gbits_with_duration_has_no_peak():
    result = parse_perftest(_read("real_ib_write_bw_gbits_perftest_273.txt"))
    assert result.unit == "Gb/sec"
    (row,) = result.rows
    assert (row.size_bytes, row.peak_gbit_per_s, row.avg_gbit_per_s) == (8, None, 0.48)


def test_perftest_old_mb_label_is_mebibytes():
    result = parse_perftest(_read("real_ib_send_bw_MBsec_perftest_65.txt"))
    assert result.unit == "MB/sec"
    assert round(result.avg_gbit_per_s(), 2) == round(920.13 * 8 * 2**20 / 1e9, 2)


def test_perftest_cuda_prelude_without_results_raises():
    with pytest.raises(ParseError, match="no perftest results header"):
        parse_perftest(_read("real_ib_write_bw_use_cuda_prelude_TRUNCATED_perftest_241.txt"))
