"""dcgmi diag parser over recorded outputs (tests/data/dcgm, see SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.parsers import ParseError
from harness.parsers.dcgm import parse_dcgm_diag

DATA = Path(__file__).parent / "data" / "dcgm"


@pytest.mark.parametrize(("name", "passed", "version", "driver", "failed"), [
    ("dcgm4-gb10-r1-software-fail.json", False, "4.2.3", "580.82.09", [("software", 0)]),
    ("dcgm4-r3-diagnostic-pass-excerpt.json", True, "4.1.1", None, []),
    ("dcgm3-t400-r3-skips.json", None, None, None, []),
    ("dcgm3-r2-memory-fail-constructed.json", False, "3.3.9", None, [("GPU Memory", 2)]),
    ("dcgmi-text-3.3.9-targeted-power-fail.txt", False, "3.3.9", "570.195.03",
     [("Targeted Power", 1)]),
    ("dcgmi-text-4.2.3-pcie-fail.txt", False, "4.2.3", "570.148.08", [("pcie", None)]),
    ("dcgmi-text-deployment-error.txt", False, None, None, [("Deployment", 3)]),
    ("dcgmi-text-gpu-memory-fail-gpu0.txt", False, None, None, [("GPU Memory", 0)]),
    ("real_dcgmi-text-2.4.6-pcie-fail-all-nvlink-down-cut.txt", False, None, None, [("PCIe", None)]),
    ("real_dcgmi-text-3.3.1-gpu-memory-fail-gpu0-busy.txt", False, None, None, [("GPU Memory", 0)]),
    ("real_dcgm-json-r3-t4-single-gpu-pass.json", True, None, None, []),
    # Old NVVS: `"version" : "440.37"` is the driver's version, not DCGM's.
    ("real_nvvs-2.x-runtime-error.json", False, None, "440.37", []),
])
def test_diag_outcomes(name, passed, version, driver, failed):
    diag = parse_dcgm_diag((DATA / name).read_text())
    assert (diag.passed, diag.dcgm_version, diag.driver_version) == (passed, version, driver)
    assert [(r.test, r.gpu) for r in diag.failed] == failed


def test_text_fail_all_is_a_node_result_with_the_cut_warning_joined():
    diag = parse_dcgm_diag((DATA / "real_dcgmi-text-2.4.6-pcie-fail-all-nvlink-down-cut.txt")
                           .read_text())
    (r,) = diag.results
    assert (r.test, r.gpu, r.status) == ("PCIe", None, "fail")
    assert r.message.startswith("GPU 0GPU 0's NvLink link 0 is currently down Run a field "
                                "diagnostic on the GPU., GPU 0GPU 0's NvLink link 1 is currently")
    assert r.message.endswith("link 4 is currently down Run a field diagnostic on the GPU.,")


def test_text_pass_with_singular_gpu_and_info_rows_before_the_test():
    diag = parse_dcgm_diag((DATA / "real_dcgmi-text-3.3.1-gpu-memory-fail-gpu0-busy.txt")
                           .read_text())
    assert [(r.test, r.gpu, r.status) for r in diag.results] == [
        ("GPU Memory", 1, "pass"), ("GPU Memory", 0, "fail")]
    assert diag.failed[0].message == (
        "GPU 0 Error using CUDA API cuCtxCreate Check DCGM and system logs for errors. Reset "
        "GPU. Restart DCGM. Rerun diagnostics. Unable to create CUDA context: 'CUDA-capable "
        "device(s) is/are busy or unavailable'.")


def test_nvvs_runtime_error_is_never_a_pass():
    diag = parse_dcgm_diag((DATA / "real_nvvs-2.x-runtime-error.json").read_text())
    assert diag.passed is False and diag.results == ()
    assert diag.errors == ("Unable to get the driver version: Host engine connection "
                           "invalid/disconnected. Couldn't succeed despite 0 retries.",)


def test_hostengine_not_running_is_a_parse_error():
    text = (DATA / "real_dcgmi-hostengine-connection-error.txt").read_text()
    with pytest.raises(ParseError, match="dcgmi reported an error and no results: Error: unable "
                       "to establish a connection to the specified host: localhost"):
        parse_dcgm_diag(text)


def test_v4_warning_objects_become_the_message():
    diag = parse_dcgm_diag((DATA / "dcgm4-gb10-r1-software-fail.json").read_text())
    assert diag.failed[0].message.startswith("Persistence Mode: Persistence mode for GPU 0 is "
                                             "disabled.")


def test_v3_per_gpu_results_and_warn_status():
    diag = parse_dcgm_diag((DATA / "dcgm3-r2-memory-fail-constructed.json").read_text())
    memory = [(r.gpu, r.status) for r in diag.results if r.test == "GPU Memory"]
    assert memory == [(0, "pass"), (1, "pass"), (2, "fail"), (3, "warn")]
    # "gpu_ids": "0,1,2,3" is one node-level deployment result.
    assert [(r.test, r.gpu) for r in diag.results[:2]] == [("Denylist", None),
                                                           ("Page Retirement/Row Remap", None)]
    assert diag.warnings == ["GPU Memory on GPU 3: warn: GPU 3 has 1 pending retired page"]


def test_all_skipped_is_neither_pass_nor_fail():
    diag = parse_dcgm_diag((DATA / "dcgm3-t400-r3-skips.json").read_text())
    assert diag.passed is None
    assert diag.warnings == ["skipped: Diagnostic, GPU Memory, PCIe"]


def test_only_the_deployment_checks_ran_is_not_a_pass():
    # NVIDIA/DCGM issue #55: DCGM 3.0.4, `dcgmi diag -r 3` on a SKU without plugin allowances
    # ran the deployment checks and skipped the rest (rows past Deployment written as 3.0.4
    # prints them; the paste stops at PCIe).
    text = (
        "|-----  Deployment  --------+------------------------------------------------|\n"
        "| Denylist                  | Pass                                           |\n"
        "| NVML Library              | Pass                                           |\n"
        "+-----  Integration  -------+------------------------------------------------+\n"
        "| PCIe                      | Skip - All                                     |\n"
        "+-----  Hardware  ----------+------------------------------------------------+\n"
        "| GPU Memory                | Skip - All                                     |\n"
        "+-----  Stress  ------------+------------------------------------------------+\n"
        "| Targeted Stress           | Skip - All                                     |\n")
    diag = parse_dcgm_diag(text)
    assert diag.passed is None
    assert diag.warnings == ["skipped: GPU Memory, PCIe, Targeted Stress"]
    # The same run at -r 1 (deployment checks only) is a pass.
    assert parse_dcgm_diag(text.split("+-----  Integration")[0]).passed is True


def test_unknown_status_is_a_failure():
    doc = ('{"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [{"name": '
           '"memory", "results": [{"entity_group": "GPU", "entity_id": 0, "status": "Pass"}, '
           '{"entity_group": "GPU", "entity_id": 1, "status": "Error"}]}]}]}}')
    diag = parse_dcgm_diag(doc)
    assert diag.passed is False
    assert [(r.test, r.gpu, r.status) for r in diag.failed] == [("memory", 1, "error")]


def test_text_table_rejoins_wrapped_warnings():
    diag = parse_dcgm_diag((DATA / "dcgmi-text-3.3.9-targeted-power-fail.txt").read_text())
    assert diag.failed[0].message == (
        "GPU 1 Max power of 224.1 did not reach desired power minimum target_power_min_ratio "
        "of 224.2 for GPU 1 Verify that the clock speeds and GPU utilization are high.")
    assert ("Targeted Power", 0, "pass") in [(r.test, r.gpu, r.status) for r in diag.results]
    assert diag.warnings == ["skipped: EUD Test"]


def test_text_table_v4_per_gpu_lines():
    diag = parse_dcgm_diag((DATA / "dcgmi-text-4.2.3-pcie-fail.txt").read_text())
    memory = [(r.gpu, r.status) for r in diag.results if r.test == "memory"]
    assert memory == [(0, "pass"), (1, "pass"), (2, "pass"), (3, "pass")]
    assert diag.failed[0].message.startswith(
        "There was an internal error during the test: 'A child process (152) exited with "
        "non-zero status 1'")


def test_text_table_wrapped_message_cut_mid_table():
    diag = parse_dcgm_diag((DATA / "dcgmi-text-gpu-memory-fail-gpu0.txt").read_text())
    assert diag.failed[0].message.endswith("fans, and any other components.")
    assert sorted(r.gpu for r in diag.results if r.status == "pass") == [1, 2, 3, 4, 5, 6, 7]


def test_text_error_rows_explain_the_deployment_test_above_them():
    # CONSTRUCTED in dcgmi 3.x's layout (dcgmi/Diag.cpp: a deployment test's row, then its
    # messages as `Error` rows); the message is the one in dcgmi-text-deployment-error.txt.
    text = (
        "|-----  Deployment  --------+------------------------------------------------|\n"
        "| Denylist                  | Pass                                           |\n"
        "| Page Retirement/Row Remap | Fail                                           |\n"
        "| Error                     | GPU 3 has uncorrectable memory errors and row  |\n"
        "|                           |  remappings are pending                        |\n"
        "| Graphics Processes        | Pass                                           |\n")
    diag = parse_dcgm_diag(text)
    assert [(r.test, r.gpu, r.message) for r in diag.failed] == [
        ("Page Retirement/Row Remap", 3,
         "GPU 3 has uncorrectable memory errors and row remappings are pending")]


def test_text_error_row_under_a_passed_test_is_still_a_failure():
    text = ("|-----  Deployment  --------+------------------------------------------------|\n"
            "| Inforom                   | Pass                                           |\n"
            "| Error                     | GPU 1 has uncorrectable memory errors and row  |\n"
            "|                           |  remappings are pending                        |\n")
    diag = parse_dcgm_diag(text)
    assert diag.passed is False
    assert [(r.test, r.gpu) for r in diag.failed] == [("Deployment", 1)]


def test_v4_test_summary_fail_with_passing_gpus():
    doc = {"DCGM Diagnostic": {"test_categories": [{"category": "Integration", "tests": [{
        "name": "pcie",
        "results": [{"entity_group": "GPU", "entity_id": 0, "status": "Pass"}],
        "test_summary": {"status": "Fail", "warnings": [
            {"warning": "There was an internal error during the test"}]}}]}]}}
    import json

    diag = parse_dcgm_diag(json.dumps(doc))
    assert [(r.test, r.gpu, r.message) for r in diag.failed] == [
        ("pcie", None, "There was an internal error during the test")]


def test_v3_deployment_warning_entries_nest_the_text_under_warnings():
    # The shape dcgmi 3.x writes for a failed deployment test (dcgmi/Diag.cpp,
    # HelperJsonAddBasicTests): "gpu_id" an int, each entry's text under "warnings" again.
    doc = {"DCGM GPU Diagnostic": {"test_categories": [{"category": "Deployment", "tests": [{
        "name": "Page Retirement/Row Remap", "results": [{"gpu_id": 3, "status": "Fail",
            "warnings": [{"warnings": "GPU 3 has uncorrectable memory errors and row remappings "
                                      "are pending", "error_id": 95, "error_category": 3,
                          "error_severity": 2}]}]}]}], "version": "3.3.9"}}
    import json

    diag = parse_dcgm_diag(json.dumps(doc))
    assert [(r.test, r.gpu, r.message) for r in diag.failed] == [
        ("Page Retirement/Row Remap", 3,
         "GPU 3 has uncorrectable memory errors and row remappings are pending")]


def test_top_level_errors_list():
    diag = parse_dcgm_diag('{"DCGM Diagnostic": {"test_categories": []}, '
                           '"errors": [{"error": "NVVS exited unexpectedly"}]}')
    assert diag.passed is False and diag.errors == ("NVVS exited unexpectedly",)


def test_runtime_error_document_fails():
    diag = parse_dcgm_diag('{"DCGM GPU Diagnostic": {"runtime_error": "NVVS failed to start"}}')
    assert diag.passed is False and diag.errors == ("NVVS failed to start",)


@pytest.mark.parametrize(("text", "message"), [
    ("", "empty input"),
    ("Error: Unable to complete diagnostic for group 0. Return: (-35) The specified group is "
     "empty", "dcgmi reported an error and no results: Error: Unable to complete diagnostic"),
    ('{"foo": 1}', "JSON without `DCGM Diagnostic`"),
    ('{"DCGM Diagnostic": {"test_categories": []}}', "holds no test results"),
    ('{"DCGM Diagnostic": {"test_categ', "neither a result table nor valid JSON"),
    ("random words\nmore words\n", "no dcgmi diag result table rows"),
])
def test_garbage(text: str, message: str):
    with pytest.raises(ParseError, match=message):
        parse_dcgm_diag(text)


def test_a_markdown_table_is_not_a_dcgm_table():
    text = "| file | what | source |\n|---|---|---|\n| a.json | DCGM 4 JSON | NVIDIA/DCGM |\n"
    with pytest.raises(ParseError, match="no dcgmi diag result table rows"):
        parse_dcgm_diag(text)


def test_random_pipe_text_is_not_a_failed_test():
    # `|name|` rows with no value are not results: garbage must not read as a DCGM failure.
    garbage = "|e dd:d#ei b-e|\n| a:=b |\n|-- |  |\n"
    with pytest.raises(ParseError):
        parse_dcgm_diag(garbage)


def test_text_table_cut_at_a_category_header_has_no_verdict():
    """NVIDIA/DCGM#55 (DCGM 3.0.4, `dcgmi diag -r 3`): the paste ends at the Integration header,
    after nine passing Deployment rows: not a pass (issue 13), and it says where it was cut."""
    rows = "".join(f"| {name:<25} | Pass{' ' * 43}|\n" for name in (
        "Denylist", "NVML Library", "CUDA Main Library", "Permissions and OS Blocks"))
    text = ("+---------------------------+------------------------------------------------+\n"
            "| Diagnostic                | Result                                         |\n"
            "+===========================+================================================+\n"
            "|-----  Deployment  --------+------------------------------------------------|\n"
            + rows +
            "+-----  Integration  -------+------------------------------------------------+\n")
    diag = parse_dcgm_diag(text)
    assert diag.passed is None and diag.cut_at == "Integration"
    whole = text + "| PCIe                      | Pass                                           |\n"
    assert parse_dcgm_diag(whole).passed is True
