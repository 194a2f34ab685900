"""The shared input reader and the bounds every parser keeps: line ends across chunks, long
lines cut and said, pipes read twice, encodings; and the inputs that used to raise a traceback
out of `preflight inspect` (a result or exit 2 with a JSON error now)."""

from __future__ import annotations

import io
import json
import os
import tracemalloc
from pathlib import Path

import pytest

from harness import cli
from harness.commands import EXIT_USAGE
from harness.parsers import ParseError, inspect_kinds, reader
from harness.parsers.reader import Input
from harness.profiles.table import get_profile

DATA = Path(__file__).parent / "data"


# --- the reader -------------------------------------------------------------------------------

@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 4096])
@pytest.mark.parametrize("text", ["a\r\nb\rc\nd", "a\r\n\r\nb", "\r", "x\r", "", "abc\n",
                                  "\r\n\r\n", "one\n\ntwo\r\n"])
def test_line_ends_are_the_same_whatever_the_chunk_boundaries(text, chunk):
    expected = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if expected[-1] == "":
        expected.pop()
    assert list(Input(io.StringIO(text), chunk=chunk).lines()) == expected


@pytest.mark.parametrize("shift", [-2, -1, 0, 1])
def test_pieces_decoded_apart_hand_out_the_same_lines_in_batches_of_a_chunk(shift):
    """The reader decodes DECODE_CHARS at a time (bytes and str) and hands out the lines of
    about `chunk` characters a batch: a `\r\n` or a 3-byte character across a piece's end, a
    line over several pieces and a long one cut read as the whole text split, in one batch per
    `chunk` characters (not one per piece)."""
    piece = reader.DECODE_CHARS
    line = "A=\u2014" + "x" * 40
    text = "\n".join([line] * 12_000)
    edge = piece + shift - len(line) % piece
    text = text[:edge] + "\r\n\u2014" + text[edge:] + "\n" + "y" * (3 * piece) + "\r\nend"
    expected = text.replace("\r\n", "\n").split("\n")
    for source in (io.BytesIO(text.encode()), text):
        read = Input(source, chunk=4 * piece, max_line=2 * piece + 5)
        batches = list(read.batches())
        assert [x for b in batches for x in b] == [x[:2 * piece + 5] for x in expected]
        assert len(batches) <= len(text) // (4 * piece) + 2 < len(text) // piece
        assert read.stats.cut_lines == 1 and read.stats.lines == len(expected)


def test_a_long_line_is_cut_counted_and_said():
    source = Input("abcdefghij\nxy\n" + "z" * 50, max_line=4, chunk=3)
    assert list(source.lines()) == ["abcd", "xy", "zzzz"]
    assert (source.stats.cut_lines, source.stats.longest) == (2, 50)
    assert "2 line(s) longer than 4 characters (the longest 50) were cut" in source.notes()[0]


def test_a_pipe_is_read_again_from_its_spool(tmp_path):
    r, w = os.pipe()
    os.write(w, b"one\ntwo\nthree\n")
    os.close(w)
    with open(r, encoding="utf-8", errors="replace", newline="") as stream:
        source = Input(stream, chunk=4)
        assert source.head(5) == "one\nt"  # a first pass that stops early
        assert list(source.lines()) == ["one", "two", "three"]
        assert list(source.lines()) == ["one", "two", "three"]


def test_bytes_are_decoded_with_replacement_and_byte_order_marks():
    assert list(Input(io.BytesIO(b"ok\n\xff\xfe bad\xc3(\n")).lines())[1] == "\ufffd\ufffd bad\ufffd("
    assert list(Input(io.BytesIO("x\ny".encode("utf-16"))).lines()) == ["x", "y"]
    assert list(Input(io.BytesIO(b"\xef\xbb\xbfNCCL_DEBUG=INFO")).lines()) == ["NCCL_DEBUG=INFO"]


def test_records_split_at_a_separator_keep_their_line_ends():
    assert list(Input("A=1\nx\0B=2\r\0", chunk=2).lines(sep="\0")) == ["A=1\nx", "B=2\r"]


def test_a_document_past_its_bound_is_not_read_whole():
    assert Input("{}\r\n").document() == "{}\n"
    assert Input("x" * 101).document(limit=100) is None


class _Flood(io.RawIOBase):
    """`size` bytes of one line without a newline, generated (never held); seekable."""

    def __init__(self, size: int, byte: bytes = b"x") -> None:
        self.size, self.pos, self.block = size, 0, byte * (1 << 20)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, pos: int, whence: int = 0) -> int:
        self.pos = pos
        return pos

    def readinto(self, buf) -> int:  # type: ignore[no-untyped-def]
        n = min(len(buf), self.size - self.pos, len(self.block))
        buf[:n] = self.block[:n]
        self.pos += n
        return n


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", sorted(inspect_kinds()))
def test_a_100_mb_line_without_a_newline_is_read_in_bounded_memory(kind):
    """Every kind reads it (cut to its first MiB), in a few MB, and answers with a result that
    says so or a ParseError that says so; never a traceback, never the whole line in memory."""
    stream = io.BufferedReader(_Flood(100 << 20), buffer_size=1 << 16)
    tracemalloc.start()
    try:
        out = inspect_kinds()[kind](stream, profile=get_profile("p5.48xlarge"))
    except ParseError as exc:
        out = {"error": str(exc)}
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert peak < 48 << 20, f"{kind} held {peak >> 20} MB"
    said = json.dumps(out)
    assert "1 line(s) longer than" in said or "bytes were judged by their first" in said, said[:500]


# --- flat memory: what a parser holds does not grow with its input ---------------------------

def _big(kind: str, size: int) -> str:
    samples = {"env": "env/real_sbatch_nccl_tests_container_2024.sh",
               "fi-info": "fi_info/composed_p5_efa_direct_32.txt",
               "nccl-tests": "nccl_tests/current_2node_h100.txt",
               "kernel-log": "kernel_log/real_dmesg-xid79-nvswitch-sxid-20034.txt",
               "nvidia-smi": "nvidia_smi/real_q-565-h100-sxm.txt",
               "dcgm": "dcgm/dcgmi-text-3.3.9-targeted-power-fail.txt",
               "nccl-log": "nccl_log/composed_ofi_1.16_efa_direct_p5_srun.log",
               "train-step": "train_step/oom_torch25_fsdp.txt",
               "topology": "topology/real_slurm_srun_N2_n4_node1_task1.env"}
    text = (DATA / samples[kind]).read_text().rstrip("\n") + "\n"
    return text * (size // len(text) + 1)


def _peak(kind: str, text: bytes) -> int:
    stream = io.TextIOWrapper(io.BytesIO(text), encoding="utf-8", newline="")
    tracemalloc.start()
    try:
        inspect_kinds()[kind](stream, profile=get_profile("p5.48xlarge"))
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return peak


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", ["env", "fi-info", "nccl-tests", "kernel-log", "nvidia-smi",
                                  "dcgm", "nccl-log", "train-step", "topology"])
def test_memory_stays_flat_in_the_size_of_the_input(kind, monkeypatch):
    """With 8 KiB chunks (the kernel log keeping 100 events in full, env scripts' memos small),
    what a parser holds reading a log four times as long (a sample repeated, as long logs are)
    is about the same; before, each held the whole input and more."""
    from harness.parsers import env_script_lines, env_shape, kernel_log, nccl_log

    monkeypatch.setattr(reader, "CHUNK_CHARS", 1 << 13)
    # the env reader's memos of lines and segments read before fill up to their bounds (4,096
    # lines, 4 MiB) and then hold flat; made small here, as the kernel log's events are
    monkeypatch.setattr(env_script_lines, "MEMO_LINES", 64)
    monkeypatch.setattr(env_script_lines, "_MEMO_SEGMENT_CHARS", 1 << 14)
    monkeypatch.setattr(env_shape, "_MEMO_LINES", 64)
    monkeypatch.setattr(nccl_log, "_CHUNK_BYTES", 1 << 13)
    monkeypatch.setattr(kernel_log, "MAX_EVENTS", 100)
    monkeypatch.setattr(kernel_log, "MAX_KINDS", 200)
    _peak(kind, _big(kind, 20_000).encode())  # imports and compiled patterns out of the way
    small, large = (_peak(kind, _big(kind, size).encode()) for size in (100_000, 400_000))
    assert large < 1.5 * small + (32 << 10), f"{kind}: {small:,} -> {large:,} bytes held"


# --- inputs that used to raise out of `preflight inspect` -------------------------------------

_ROWS = ("#       size         count      type   redop    root     time   algbw   busbw #wrong"
         "     time   algbw   busbw #wrong\n")
_ROW = "     1048576        262144     float     sum      -1   {t}   {a}   {b}  {w}   {t}   {a}   {b}  {w}\n"


@pytest.mark.parametrize(("kind", "text"), [
    ("nccl-tests", _ROWS + _ROW.format(t="60.1", a="17.44", b="32.70", w="inf")),
    ("nccl-tests", _ROWS + _ROW.format(t="60.1", a="17.44", b="32.70", w="nan")),
    ("nccl-tests", _ROWS + _ROW.format(t="60.1", a="1e999", b="32.70", w="0")),
    ("nccl-tests", _ROWS + _ROW.format(t="60.1", a="1e308", b="1e-400", w="0")),
    ("nccl-tests", _ROWS + _ROW.replace("-1", "--0").format(t="60.1", a="17.44", b="32.70", w="0")),
    ("nccl-tests", _ROWS + _ROW.replace("1048576", "1048576²").format(t="6", a="1", b="2", w="0")),
    ("nccl-tests", '{"results": [{"size": "x", "out_of_place": {"nwrong": Infinity, "alg_bw": NaN}},'
                   ' 7, {"size": 1e400}], "config": {"ngpus": "²", "devices": [1]}}'),
    ("nccl-tests", "[" * 50_000),
    ("dcgm", '{"DCGM Diagnostic": {"test_categories": [{"tests": [{"name": "Memory", "results": '
             '[{"gpu_id": "²", "status": "Fail"}, {"gpu_id": "١", "status": "Pass"}]}]}]}}'),
    ("dcgm", '{"DCGM Diagnostic": {"test_categories": 5, "tests": [{"results": 3, "name": 1}]},'
             ' "errors": 7}'),
    ("dcgm", "| Memory | Fail - GPU: ٣ |\n| Warning | GPU " + "9" * 5000 + " failed |\n"),
    ("nvidia-smi", "index, name\n0, " + "x" * 140_000 + "\n"),
    ("nvidia-smi", "x" * 140_000 + "\n"),
    ("nvidia-smi", "|   ٠  NVIDIA H100   On  |   00000000:53:00.0 Off |   ²   |\n"),
    ("nvidia-smi", "GPU 00000000:53:00.0\n    Temperature\n        GPU Current Temp : " + "9" * 5000
     + " C\n    Attached GPUs : ²\n"),
    ("kernel-log", "[ 1.0] NVRM: Xid (PCI:0000:53:00): " + "9" * 5000 + ", pid=1, name=x, y\n"
     "6,1," + "9" * 5000 + ",-;nvidia-nvswitch١: SXid (PCI:0000:06:00.0): 2, Fatal, z\n"),
    ("kernel-log", "[ 1.0] NVRM: Xid (PCI:0000:53:00): 45, pid=1, name=x, Ch 1, caused by previous "
     "Xid " + "9" * 5000 + "\n"),
    ("nvidia-smi", "| 0  NVIDIA H100  On  | 00000000:53:00.0 Off | 0 |\n| 0%  29C  P²  23W / 300W | "
     "1MiB / 81559MiB | 0% Default |\n"),
    ("env", "{" * 50_000),
    ("env", "A=$A$A\n" * 40),
    ("topology", '{"hosts": ["a", "b"], "current_host": "a"' + "[" * 50_000),
    ("fi-info", "fi_getinfo: -" + "9" * 5000 + "\n"),
    ("nccl-log", "NCCL INFO comm 0x1 rank 0 nranks " + "9" * 5000 + " cudaDev 0\n"
     "NCCL INFO NET/OFI Selected provider is efa, fabric is efa (found " + "9" * 5000 + " nics)\n"),
    ("train-step", "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1) ran for "
     + "9" * 5000 + " milliseconds\n"),
])
def test_inspect_answers_garbage_with_a_result_or_a_json_error(kind, text, tmp_path, capsys):
    path = tmp_path / "input.txt"
    path.write_text(text, encoding="utf-8")
    code = cli.main(["inspect", kind, str(path), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert (code, set(out) >= {"error"}) in ((0, False), (EXIT_USAGE, True)), out


def test_a_wrong_cell_that_is_not_a_count_is_never_zero_wrong():
    from harness.parsers.nccl_tests import parse_nccl_tests

    result = parse_nccl_tests(_ROWS + _ROW.format(t="60.1", a="17.44", b="32.70", w="inf")
                              + "# Avg bus bandwidth    : 32.70\n")
    assert result.num_wrong is None and result.truncated_rows == 1 and result.rows == ()


def test_unicode_digits_are_not_gpu_ids():
    from harness.parsers.dcgm import parse_dcgm_diag

    doc = ('{"DCGM Diagnostic": {"test_categories": [{"tests": [{"name": "Memory", "results": '
           '[{"gpu_id": "١", "status": "Fail"}]}]}]}}')
    assert [(r.gpu, r.status) for r in parse_dcgm_diag(doc).results] == [(None, "fail")]


def test_a_parse_error_that_quotes_the_input_is_redacted(tmp_path, capsys):
    path = tmp_path / "smi.csv"
    path.write_text("index, name\n0, x, HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123456789\n")
    assert cli.main(["inspect", "nvidia-smi", str(path), "--json"]) == EXIT_USAGE
    out = capsys.readouterr().out
    assert "CSV row has 3 values" in out and "hf_abcdefghijklmnopqrstuvwxyz" not in out


@pytest.mark.parametrize(("parse", "sample", "records"), [
    ("harness.parsers.dcgm:parse_dcgm_diag", "dcgm/dcgmi-text-3.3.9-targeted-power-fail.txt",
     "results"),
    ("harness.parsers.dcgm:parse_dcgm_diag", "dcgm/dcgmi-text-deployment-error.txt", "results"),
    ("harness.parsers.nvidia_smi_query:parse_smi_query", "nvidia_smi/real_q-565-h100-sxm.txt", "gpus"),
    ("harness.parsers.nvidia_smi_table:parse_smi_table", "nvidia_smi/table-470-v100-old-layout.txt",
     "gpus"),
    ("harness.parsers.fi_info:parse_fi_info", "fi_info/composed_p5_efa_direct_32.txt", "entries"),
])
def test_a_sample_printed_again_is_read_once(parse, sample, records):
    """A log that holds the same output many times (`nvidia-smi -q -l`, a dcgmi or fi_info run
    per attempt) keeps one copy of each record (the latest GPU sample): memory stays flat and a
    GPU is not counted once per sample."""
    import importlib

    module, name = parse.split(":")
    fn = getattr(importlib.import_module(module), name)
    text = (DATA / sample).read_text()
    once, thrice = fn(text), fn(text * 3)
    assert getattr(thrice, records) == getattr(once, records) and getattr(once, records)
