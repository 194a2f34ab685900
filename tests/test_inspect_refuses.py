"""`preflight inspect KIND` says "fine" only on input in which it recognised something of its
kind: random bytes, base64 of them, random printable text, an empty or blank file and another
kind's sample are refused with exit 2 by every kind (generated over `inspect_kinds()`, so a new
kind is checked too), while an input of the kind with nothing wrong in it is still read (exit
0). Runs through `main()` as the CLI does, on files opened as the CLI opens them."""

from __future__ import annotations

import base64
import json
import random
import string
from pathlib import Path

import pytest

from harness.cli import main
from harness.parsers import inspect_kinds

DATA = Path(__file__).parent / "data"
KINDS = sorted(inspect_kinds())
SEED = 20261206

#: One sample of each kind that holds nothing of another kind (tests/data).
SAMPLES = {
    "env": ["env/real_k8s_pytorchjob_llama3_fsdp.yaml", "env/real_mpirun_ofi67_p4d_efa_not_enabled.sh"],
    "topology": ["topology/real_sagemaker_containers_readme_resourceconfig.json",
                 "topology/real_ompi_rank2_of_4_second_node.env"],
    "fi-info": ["fi_info/composed_p5_efa_direct_32.txt"],
    "nccl-tests": ["nccl_tests/current_2node_h100.txt"],
    "kernel-log": ["kernel_log/journal-short-iso-p5-faults-constructed.txt"],
    "nvidia-smi": ["nvidia_smi/l4-555-query-xml.xml", "nvidia_smi/query-gpu-nounits.csv"],
    "dcgm": ["dcgm/dcgm4-r3-diagnostic-pass-excerpt.json", "dcgm/dcgmi-text-4.2.3-pcie-fail.txt"],
    "nccl-log": ["nccl_log/composed_ofi_1.16_efa_direct_p5_srun.log"],
    "train-step": ["train_step/result_cpu_gloo.txt"],
}
#: (reader, sample kind) pairs whose inputs overlap, where either answer is right: topology
#: reads a launcher's saved environment, and most topology samples are environments (not its
#: resourceconfig.json ones).
SAME_INPUT = {("topology", "env"), ("env", "topology")}
#: Inputs of a kind that hold nothing wrong (or nothing at all of what could be wrong): read.
EMPTY_BUT_VALID = {
    "env": "PATH=/usr/bin\nHOME=/root\n",
    "topology": "PATH=/usr/bin\nHOME=/root\n",
    "kernel-log": ("[    0.000000] Linux version 6.8.0-1015-aws (buildd@lcy02-amd64-047)\n"
                   "[    1.204312] EXT4-fs (nvme0n1p1): mounted filesystem with ordered data mode\n"),
    "nccl-log": "ip-10-0-0-1:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n",
    "nccl-tests": ("# nThread 1 nGpus 1 minBytes 8 maxBytes 8 step: 2(factor) warmup iters: 5 "
                   "iters: 20 agg iters: 1 validation: 1 graph: 0\n"),
    "fi-info": "fi_getinfo: -61 (No data available)\n",
}


def _garbage() -> dict[str, bytes]:
    rng = random.Random(SEED)
    found = {"empty": b"", "blank": b"\n \n\t\n"}
    for size in (16, 300, 4096, 65536):
        for n in range(3):
            data = rng.randbytes(size)
            found[f"random-{size}-{n}"] = data
            found[f"random-{size}-{n}-no-nul"] = data.replace(b"\0", b"\1")
    found["base64-4096"] = base64.encodebytes(rng.randbytes(4096))
    found["printable-2000"] = "".join(rng.choice(string.printable) for _ in range(2000)).encode()
    return found


GARBAGE = _garbage()


def _inspect(tmp_path: Path, kind: str, data: bytes, capsys) -> tuple[int, str]:
    path = tmp_path / "input"
    path.write_bytes(data)
    rc = main(["inspect", kind, str(path), "--json"])
    return rc, capsys.readouterr().out


@pytest.mark.parametrize("garbage", sorted(GARBAGE))
@pytest.mark.parametrize("kind", KINDS)
def test_no_kind_reads_garbage(kind, garbage, tmp_path, capsys):
    rc, out = _inspect(tmp_path, kind, GARBAGE[garbage], capsys)
    assert rc == 2, f"inspect {kind} said fine on {garbage}: {out[:600]}"
    assert "error" in json.loads(out)


def test_every_kind_has_samples():
    assert sorted(SAMPLES) == KINDS


@pytest.mark.parametrize("kind", KINDS)
def test_a_kind_reads_its_own_samples_and_no_other_kinds(kind, tmp_path, capsys):
    for sample_kind, paths in SAMPLES.items():
        for name in paths:
            rc, out = _inspect(tmp_path, kind, (DATA / name).read_bytes(), capsys)
            if sample_kind == kind:
                assert rc == 0, f"inspect {kind} refused its own kind's {name}: {out[:600]}"
            elif (kind, sample_kind) not in SAME_INPUT:
                assert rc == 2, f"inspect {kind} said fine on {sample_kind}'s {name}: {out[:600]}"


@pytest.mark.parametrize("kind", sorted(EMPTY_BUT_VALID))
def test_an_input_of_the_kind_with_nothing_in_it_is_still_read(kind, tmp_path, capsys):
    rc, out = _inspect(tmp_path, kind, EMPTY_BUT_VALID[kind].encode(), capsys)
    assert rc == 0, out[:600]


def test_a_single_node_environment_says_so(tmp_path, capsys):
    """Read, with nothing multi-node in it: every key null, and the note says why."""
    rc, out = _inspect(tmp_path, "topology", EMPTY_BUT_VALID["topology"].encode(), capsys)
    result = json.loads(out)
    assert rc == 0 and result["num_nodes"] is None
    assert any("a single-node job" in note for note in result["notes"])


def test_a_json_object_that_is_not_a_resourceconfig_is_not_a_topology(tmp_path, capsys):
    rc, out = _inspect(tmp_path, "topology", b'{"DCGM GPU Diagnostic": {}}', capsys)
    assert rc == 2 and "not a SageMaker resourceconfig.json" in json.loads(out)["error"]
    rc, out = _inspect(tmp_path, "topology", b'{"current_host": "algo-1", "hosts": ["algo-1"]}',
                       capsys)
    assert rc == 0 and "names a single host" in json.loads(out)["notes"][0]
