"""The HTML report and the figures it reads: built from recorded multi-node reports (a folder
tree and an S3 prefix on the moto server), parsed back for content; a screenshot in headless
Chromium when it is installed."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from harness import cli
from harness.commands import EXIT_FAILED, EXIT_USAGE
from harness.report.figures import bandwidth_curves, format_size, gpus_healthy
from harness.report.html.render import ReportSet, ReportSourceError, load_reports, render_html
from harness.report.model import Report
from harness.report.v1 import legacy_size
from harness.report.verdicts import bad_nodes

DATA = Path(__file__).parent / "data" / "reports"
HOSTS = ["algo-1", "algo-2", "algo-3", "algo-4"]


def recorded(host: str) -> dict[str, Any]:
    return json.loads((DATA / host / "report.json").read_text())


def typed(*reports: dict[str, Any]) -> list[Report]:
    """Report dicts read as a report.json is (the writers take the typed report)."""
    return [Report.from_dict(r) for r in reports]


class Page(HTMLParser):
    """The parts of the page the tests look at: text, tags, attributes, table rows."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.text: list[str] = []
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.rows: list[list[str]] = []
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, {k: v or "" for k, v in attrs}))
        if tag == "tr":
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._row is not None and self._cell is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.rows.append(self._row)
            self._row = None

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)

    @property
    def all_text(self) -> str:
        return "".join(self.text)


@pytest.mark.parametrize(("text", "size"), [
    ("all_reduce busbw @ 1 GiB", 2**30),
    ("busbw at 128M (8 ranks)", 2**27),
    ("busbw 8 B", 8),
    ("busbw size_bytes=4096", 4096),
    ("busbw 0.5 MiB", 2**19),
    ("all_reduce busbw 412.0 GB/s", None),
    ("busbw over 8 GPUs", None),
])
def test_legacy_size(text: str, size: int | None) -> None:
    assert legacy_size(text) == size


@pytest.mark.parametrize(("size", "text"), [(8, "8 B"), (2**20, "1 MiB"), (3 * 2**29, "1.5 GiB"),
                                            (2**34, "16 GiB")])
def test_format_size(size: int, text: str) -> None:
    assert format_size(size) == text


def test_bandwidth_curves_from_measurements() -> None:
    curves = {c.label: c for c in bandwidth_curves(*typed(recorded("algo-3")))}
    assert sorted(curves) == ["PF-BW-001 all_reduce", "PF-BW-002 all_reduce"]
    net = curves["PF-BW-002 all_reduce"]
    assert len(net.points) == 12
    assert net.points[0][0] == 8 * 2**20 and net.points[-1] == (16 * 2**30, 123.5)
    assert net.threshold_gb_s == 370.0


def test_bandwidth_curves_from_a_section_and_unsized_values() -> None:
    report = {"checks": [{"id": "PF-BW-009", "measurements": [
        {"what": "all_gather busbw", "value": 101.5, "unit": "GB/s", "op": ">=",
         "threshold": 90.0},
        {"what": "busbw", "value": 3.0, "unit": "Gbps"},
        {"what": "all_gather algbw @ 1 GiB", "value": 77.0, "unit": "GB/s"},  # not busbw
        {"what": "EFA devices", "value": 32, "unit": ""}]}],
        "bandwidth": {"all_reduce": {"rows": [
            {"size_bytes": 2048, "oop": {"busbw_gb_s": 2.0}, "ip": {"busbw_gb_s": 2.5}},
            {"size_bytes": 1024, "ip": {"busbw_gb_s": 1.0}},
            {"size_bytes": 4096},
            "garbage"]}}}
    curves = {c.label: c for c in bandwidth_curves(*typed(report))}
    assert curves["PF-BW-009 all_gather"].unsized == [101.5]
    assert curves["PF-BW-009 all_gather"].peak == (None, 101.5)
    assert curves["PF-BW-009"].unsized == [3.0]
    assert curves["bandwidth all_reduce"].points == [(1024, 1.0), (2048, 2.0)]


@pytest.mark.parametrize(("report", "expected", "healthy"), [
    (recorded("algo-1"), 8, 8),
    (recorded("algo-3"), 8, 7),
    ({"gpus": {"healthy": 6}}, 8, 6),
    ({"checks": []}, None, None),
    ({"checks": [{"id": "PF-GPU-001", "outcome": "fail", "message": "GPU 1 and GPU 2 hot",
                  "measurements": [{"what": "GPU count", "value": 7}]}]}, 8, 5),
    ({"checks": [{"id": "PF-GPU-004", "outcome": "error", "message": "nvidia-smi hung"}]}, 8,
     None),
])
def test_gpus_healthy(report: dict[str, Any], expected: int | None, healthy: int | None) -> None:
    assert gpus_healthy(*typed(report), expected) == healthy


def test_bad_nodes_union_of_cluster_and_own_verdict() -> None:
    reports = [recorded(h) for h in HOSTS]
    bad = bad_nodes(typed(*reports))
    assert [b.host for b in bad] == ["algo-3"]
    assert bad[0].source == "cluster"
    assert bad[0].reasons[0].startswith("pairwise all_reduce: algo-3 with algo-1 112.4 GB/s")
    assert [r.split(":")[0] for r in bad[0].reasons[1:]] == [
        "PF-NET-003", "PF-GPU-003", "PF-BW-002"]  # its own failed checks, each with its reason
    assert bad[0].reasons[3] == ("PF-BW-002: all_reduce busbw at 1 GiB (32 ranks, 4 nodes) "
                                 "109.5 GB/s < 370.0 GB/s required for p5.48xlarge")
    for r in reports:
        r.pop("cluster")
    reports[0]["cluster"] = {"bad_nodes": ["algo-10"]}
    assert [(b.host, b.source) for b in bad_nodes(typed(*reports))] == [
        ("algo-3", "node"), ("algo-10", "cluster")]


def test_load_reports_folder_newest_per_host(tmp_path: Path) -> None:
    shutil.copytree(DATA, tmp_path / "r")
    old = recorded("algo-1")
    old["started_at"] = "2026-11-01T00:00:00+00:00"
    (tmp_path / "r" / "older" / "algo-1").mkdir(parents=True)
    (tmp_path / "r" / "older" / "algo-1" / "report.json").write_text(json.dumps(old))
    (tmp_path / "r" / "junk").mkdir()
    (tmp_path / "r" / "junk" / "report.json").write_text('{"schema": "other"}')
    rs = load_reports(str(tmp_path / "r"))
    assert [r.host for r in rs.reports] == HOSTS
    assert rs.reports[0].started_at.startswith("2026-11-28")
    assert len(rs.problems) == 2
    assert any("older report of algo-1" in p for p in rs.problems)
    assert any("not a gpu-preflight report" in p for p in rs.problems)


def test_load_reports_redacts(tmp_path: Path) -> None:
    report = recorded("algo-1")
    report["environment"]["HF_TOKEN"] = "hf_" + "a" * 34
    (tmp_path / "report.json").write_text(json.dumps(report))
    html = render_html(load_reports(str(tmp_path)))
    assert "hf_aaaa" not in json.dumps([r.to_dict() for r in load_reports(str(tmp_path)).reports])
    assert "hf_aaaa" not in html


def test_load_reports_errors(tmp_path: Path) -> None:
    with pytest.raises(ReportSourceError, match="does not exist"):
        load_reports(str(tmp_path / "nowhere"))
    (tmp_path / "report.json").write_text("{not json")
    with pytest.raises(ReportSourceError, match=r"no gpu-preflight report\.json found"):
        load_reports(str(tmp_path))


def test_page_shows_every_node_check_and_failure() -> None:
    rs = load_reports(str(DATA))
    html = render_html(rs, generated_at="2026-11-28T03:00:00+00:00")
    page = Page(html)
    text = page.all_text
    assert "FAIL: 1 bad of 4 nodes: algo-3" in text
    check_ids = sorted({c["id"] for h in HOSTS for c in recorded(h)["checks"]})
    matrices = [r for r in page.rows if r[:2] == ["host", "own verdict"] and len(r) > 4]
    assert len(matrices) == 2  # the bad nodes' rows, then the passing ones (folded)
    assert matrices[0][2:] == check_ids
    rows = [r for r in page.rows if r and r[0] in HOSTS and len(r) == len(matrices[0])]
    assert [r[0] for r in rows] == ["algo-3", "algo-1", "algo-2", "algo-4"]  # bad node first
    for row in rows:
        outcomes = {c["id"]: c["outcome"] for c in recorded(row[0])["checks"]}
        marks = {"pass": "✓", "warn": "!", "skip": "–", "fail": "✗", "error": "E"}
        assert row[2:] == [marks[outcomes[c]] for c in check_ids]
    # the failures, each with its full message and its remedy
    for c in recorded("algo-3")["checks"]:
        if c["outcome"] == "fail":
            assert f"{c['id']} {c['title']} — failed on 1 of 4 nodes: algo-3" in text
            assert c["message"] in text
            assert f"Remedy: {c['remedy']}" in text
    # the bad-node list, and the slow node flagged in the bandwidth table (at the gate size)
    assert next(r for r in page.rows if r[0] == "algo-3")[:3] == [
        "algo-3", "fail", "cluster verdict, own checks"]
    assert "algo-3" in text.split("e.g. a Slurm exclude list):")[1]
    peaks = [r for r in page.rows if len(r) == 4 and r[-1].endswith("%")]
    assert len(peaks) == 8  # 4 nodes x 2 bandwidth checks
    assert ["algo-3", "1 GiB", "478", "100%"] in peaks  # its NVLink is fine
    assert [r for r in peaks if int(r[-1][:-1]) < 90] == [["algo-3", "1 GiB", "109.5", "26%"]]
    # a warning is listed, and every value is escaped
    assert "NCCL_PROTO=simple is set" in text
    assert "<script" not in html


def test_page_plots_busbw_per_node() -> None:
    page = Page(render_html(load_reports(str(DATA))))
    svgs = [a for t, a in page.tags if t == "svg"]
    assert len(svgs) == 2  # one per bandwidth check
    lines = [a for t, a in page.tags if t == "polyline"]
    assert len(lines) == 8  # 4 nodes x 2 checks
    assert all(len(a["points"].split()) == 12 for a in lines)
    assert sum(a["stroke"] == "#d62728" for a in lines) == 2  # the bad node, in both plots
    assert "floor 370 GB/s @ 1 GiB" in page.all_text
    assert "16 GiB" in page.all_text and "8 MiB" in page.all_text


def test_page_is_self_contained() -> None:
    html = render_html(load_reports(str(DATA)))
    page = Page(html)
    for tag, attrs in page.tags:
        assert tag not in ("script", "link", "img", "iframe", "object", "embed")
        for name in ("src", "href"):
            assert not attrs.get(name, "").startswith(("http:", "https:", "//")), (tag, attrs)
    assert "url(" not in html and "@import" not in html


def test_page_escapes_hostile_text() -> None:
    report = recorded("algo-3")
    report["host"] = "<img src=x onerror=alert(1)>"
    report["checks"][-2]["message"] = "</pre><script>alert(1)</script>"  # PF-BW-002, failed
    html = render_html(ReportSet(source="x", reports=typed(report)))
    assert "<script>" not in html and "<img" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_page_of_passing_nodes_without_bandwidth() -> None:
    reports = []
    for host in HOSTS[:2]:
        r = recorded("algo-1")
        r["host"] = host
        r["checks"] = [c for c in r["checks"] if not c["id"].startswith("PF-BW")]
        r.pop("cluster")
        reports.append(r)
    text = Page(render_html(ReportSet(source="x", reports=typed(*reports)))).all_text
    assert "PASS: 0 bad of 2 nodes" in text
    assert "No node-local check failed." in text
    assert "None: every node passed its own checks and no cluster verdict named one." in text
    assert "No bandwidth was measured" in text


def test_page_with_many_nodes_draws_the_spread_not_a_line_per_node() -> None:
    reports = []
    for i in range(40):
        r = copy.deepcopy(recorded("algo-1"))
        r["host"] = f"node-{i}"
        r.pop("cluster")  # it names algo-3, not in this run
        reports.append(r)
    for r in reports[:10]:
        r["verdict"] = "fail"
        r["checks"][0].update(outcome="fail", message=f"[PF-ENV-001] broken on {r['host']}")
    page = Page(render_html(ReportSet(source="x", reports=typed(*reports))))
    assert "FAIL: 10 bad of 40 nodes" in page.all_text
    assert "every node's message (10)" in page.all_text
    assert all(f"broken on node-{i}" in page.all_text for i in range(10))
    lines = [a for t, a in page.tags if t == "polyline"]
    # per bandwidth check: the median, the 10 bad nodes' own lines, the sorted distribution
    assert len(lines) == 2 * (1 + 10 + 1)
    assert page.all_text.count("min-max of 40 nodes") == 2
    assert "node-0 (bad)" in page.all_text and "node-39" not in page.all_text.split(
        "Bus bandwidth")[1].split("busbw at")[0]  # a healthy node gets no legend entry


def test_cli_report_writes_html(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out" / "cluster.html"
    code = cli.main(["report", str(DATA), "--html", str(out)])
    assert code == EXIT_FAILED  # a node failed
    printed = capsys.readouterr().out
    assert "FAIL: 1 bad of 4 nodes" in printed
    assert ("bad node algo-3 (own checks: fail; named by the cluster verdict and its own "
            "checks): pairwise all_reduce") in printed
    assert Page(out.read_text()).all_text.count("algo-3") >= 4
    assert out.stat().st_mode & 0o777 == 0o644


def test_cli_report_bad_source(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["report", str(tmp_path / "none")]) == EXIT_USAGE
    assert "does not exist" in capsys.readouterr().err


def test_cli_report_from_s3(aws_env: dict[str, str], tmp_path: Path) -> None:
    import boto3

    client = boto3.client("s3")
    client.create_bucket(Bucket="pf-html")
    for host in HOSTS:
        client.put_object(Bucket="pf-html", Key=f"certify/2026-11-28/job-7/{host}/report.json",
                          Body=(DATA / host / "report.json").read_bytes())
    out = tmp_path / "s3.html"
    assert cli.main(["report", "s3://pf-html/certify/2026-11-28/job-7/", "--html",
                     str(out)]) == EXIT_FAILED
    text = Page(out.read_text()).all_text
    assert "s3://pf-html/certify/2026-11-28/job-7/algo-4/report.json" in text
    assert "FAIL: 1 bad of 4 nodes" in text


def test_cli_report_from_unreachable_s3(aws_env: dict[str, str], capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from aws_server import free_port

    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    assert cli.main(["report", "s3://pf-html-none/x/"]) == EXIT_USAGE
    assert "cannot read s3://pf-html-none/x/: EndpointConnectionError" in capsys.readouterr().err


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(_chromium() is None, reason="headless Chromium is not installed "
                    "(apt-get install chromium); the page is checked by parsing instead")
def test_page_renders_in_headless_chromium(tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    page.write_text(render_html(load_reports(str(DATA))))
    shot = tmp_path / "report.png"
    res = subprocess.run(
        [str(_chromium()), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}",
         "--window-size=1280,2200", f"--screenshot={shot}", page.as_uri()],
        capture_output=True, text=True, timeout=120, check=False)
    assert shot.exists(), res.stderr[-2000:]
    data = shot.read_bytes()
    assert data.startswith(b"\x89PNG") and len(data) > 20_000  # not a blank page
