"""`preflight inspect nvidia-smi|dcgm|kernel-log FILE|- --json`: the documented keys exactly."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from harness.cli import main

DATA = Path(__file__).parent / "data"

SMI_KEYS = {"num_gpus", "driver_version", "cuda_version", "gpus", "problems", "unread", "notes",
            "fragment", "sections_present", "sections_absent", "commands_seen"}
SMI_GPU_KEYS = {"index", "name", "bus_id", "uuid", "serial", "ecc_enabled",
                "ecc_uncorrected_volatile", "ecc_uncorrected_aggregate", "remapped_rows_pending",
                "remapped_rows_failure", "retired_pages_pending", "temperature_c",
                "requires_reset"}


def _inspect(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict]:
    code = main(["inspect", *args, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_nvidia_smi_keys_and_problems(capsys):
    sample = DATA / "nvidia_smi/h100-550-constructed-faults.txt"
    code, out = _inspect(capsys, "nvidia-smi", str(sample), "--profile", "p5.48xlarge")
    assert code == 0
    assert set(out) == SMI_KEYS
    assert all(set(g) == SMI_GPU_KEYS for g in out["gpus"])
    assert (out["num_gpus"], out["driver_version"], out["cuda_version"]) == (
        2, "550.90.07", "12.4")
    assert out["problems"] == [
        {"gpu": 0, "what": "2 uncorrected ECC errors since the driver loaded",
         "action": "reset GPU"},
        {"gpu": 0, "what": "row remapping pending (applied at the next GPU reset)",
         "action": "reset GPU"},
        {"gpu": 0, "what": "temperature 91 C > 85 C", "action": "replace node"},
        {"gpu": 0, "what": "clocks slowed by HW Slowdown, HW Thermal Slowdown",
         "action": "replace node"},
        {"gpu": 0, "what": "PCIe link x8 < x16 (P0)", "action": "reboot"},
        {"gpu": 1, "what": "GPU is lost or requires a reset", "action": "reset GPU"},
    ]
    # The lost GPU's sections print errors where its values were: named, never healthy.
    unread, = out["unread"]
    assert unread.startswith("GPU 1 (bus 00000000:64:00.0") and "ECC mode" in unread
    assert "GPU temperature" in unread and "[Unknown Error]" in unread


def test_nvidia_smi_attached_count_of_an_excerpt(capsys):
    _, out = _inspect(capsys, "nvidia-smi", str(DATA / "nvidia_smi/v100-470-linux-old-ecc.txt"))
    assert out["num_gpus"] == 8 and len(out["gpus"]) == 1
    assert out["problems"] == []


def test_nvidia_smi_csv_from_stdin(capsys, monkeypatch):
    text = (DATA / "nvidia_smi/query-gpu-timeseries.csv").read_text()
    monkeypatch.setattr("sys.stdin", io.StringIO(text))
    _, out = _inspect(capsys, "nvidia-smi", "-")
    assert out["num_gpus"] == 2
    assert out["problems"] == [{"gpu": 1, "what": "1 uncorrected ECC error since the driver "
                                "loaded", "action": "reset GPU"}]


def test_dcgm_keys(capsys):
    sample = DATA / "dcgm/dcgmi-text-3.3.9-targeted-power-fail.txt"
    code, out = _inspect(capsys, "dcgm", str(sample))
    assert code == 0
    assert out == {
        "passed": False,
        "dcgm_version": "3.3.9",
        "contended": None,
        "failed_tests": [{"test": "Targeted Power", "gpu": 1, "message": (
            "GPU 1 Max power of 224.1 did not reach desired power minimum "
            "target_power_min_ratio of 224.2 for GPU 1 Verify that the clock speeds and GPU "
            "utilization are high.")}],
        "warnings": ["skipped: EUD Test"],
        "categories_seen": ["Deployment", "Integration", "Hardware", "Stress"],
        "cut_at": None,
        "fragment": False,
        "tests_seen": ["Denylist", "NVML Library", "CUDA Main Library",
                       "Permissions and OS Blocks", "Persistence Mode", "Environment Variables",
                       "Page Retirement/Row Remap", "Graphics Processes", "Inforom", "PCIe",
                       "GPU Memory", "Diagnostic", "Targeted Stress", "Targeted Power",
                       "Memory Bandwidth", "EUD Test"],
        "untested_gpus": [],  # `GPU Device IDs Detected` names 2 GPUs: both have results
        "notes": [],
    }


def test_kernel_log_keys(capsys):
    code, out = _inspect(capsys, "kernel-log",
                         str(DATA / "kernel_log/journal-short-iso-p5-faults-constructed.txt"))
    assert code == 0
    assert set(out) == {"xid_events", "sxid_events", "init_failures", "num_lines", "first_time",
                        "from_boot", "window", "notes"}
    assert out["init_failures"] == []
    assert out["xid_events"][2] == {"xid": 79, "pci": "0000:64:00", "mig": None, "pid": 41240,
                                    "process": "python", "time": "2024-10-01T09:20:02+0000",
                                    "message": "GPU has fallen off the bus.", "action": "reboot"}
    assert all(set(e) == {"xid", "pci", "mig", "pid", "process", "time", "message", "action"}
               for e in out["xid_events"])


def test_kernel_log_sxid_keys(capsys):
    code, out = _inspect(capsys, "kernel-log",
                         str(DATA / "kernel_log/real_dmesg-xid79-nvswitch-sxid-20034.txt"))
    assert code == 0
    assert out["sxid_events"][0] == {"sxid": 20034, "switch": 1, "pci": "0000:06:00.0",
                                     "fatal": True, "time": "6781753.400584",
                                     "message": "Link 48 LTSSM Fault Up"}


@pytest.mark.parametrize("kind", ["nvidia-smi", "dcgm", "kernel-log"])
@pytest.mark.parametrize("text", ["", "total garbage\n\x00\x01 nothing here\n"])
def test_garbage_is_a_parse_error(capsys, monkeypatch, kind: str, text: str):
    monkeypatch.setattr("sys.stdin", io.StringIO(text))
    code, out = _inspect(capsys, kind, "-")
    assert code == 2
    assert set(out) == {"error", "kind", "file"} and out["kind"] == kind
