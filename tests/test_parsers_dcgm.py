"""dcgmi diag parser over recorded outputs (tests/data/dcgm, see SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.parsers import ParseError
from harness.parsers.dcgm import parse_dcgm_diag
from tests import expect_parsed

DATA = Path(__file__).parent / "data" / "dcgm"


# Each file's outcome, failures and messages as `inspect dcgm` shows them are in its X.expect.json
# (tests/test_parsers_samples.py); `expect_parsed` holds what inspect does not show.
@pytest.mark.parametrize(("name", "want"), expect_parsed.cases(DATA))
def test_parsed_facts(name: str, want: dict):
    """`expect_parsed`: {driver_version, gpu_results: {test: [[gpu, status], ...]}} (an old
    NVVS's `"version" : "440.37"` is the driver's version, not DCGM's)."""
    diag = parse_dcgm_diag((DATA / name).read_text())
    if "driver_version" in want:
        assert diag.driver_version == want["driver_version"]
    for test, results in want.get("gpu_results", {}).items():
        assert [[r.gpu, r.status] for r in diag.results if r.test == test] == results, test


def test_parsed_facts_are_read():
    assert len(expect_parsed.cases(DATA)) >= 8


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


def test_every_error_line_dcgmi_printed_is_named():
    """DCGM 4.4 without its CUDA 12 plugins (NVIDIA/DCGM#254) prints what failed, then why: the
    refusal names both lines (it kept the first only), at most three, each once."""
    text = ("Error: Unable to complete diagnostic for entities 0,1,2,3. Return: (-30) : DCGM GPU "
            "Diagnostic returned an error\nError: Cannot load plugins. Unable to change to the "
            "plugin dir '/usr/libexec/datacenter-gpu-manager-4/plugins/cuda12/': 'No such file or "
            "directory'\n")
    with pytest.raises(ParseError, match=r"returned an error Error: Cannot load plugins\. "):
        parse_dcgm_diag(text)
    many = "".join(f"Error: e{i}\nError: e{i}\n" for i in range(5))
    with pytest.raises(ParseError, match=r"results: Error: e0 Error: e1 Error: e2$"):
        parse_dcgm_diag(many)
