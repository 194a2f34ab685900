"""The report of a multi-node run names the bad node at a glance: synthetic run directories of
1, 4 (one slow node) and 1024 nodes in the shape a real run leaves (tests/synthetic_run.py:
the cluster verdict of harness.cluster added to every node's report), read back as HTML
(parsed) and as `preflight report --json`; screenshots in headless Chromium where installed."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import synthetic_run as synth
from test_html_report import Page

from harness import cli
from harness.commands import EXIT_FAILED, EXIT_OK
from harness.report.html.isolation import round_views
from harness.report.html.plots import MANY_NODES
from harness.report.html.render import ReportSet, load_reports, render_html
from harness.report.verdicts import summarise


def _section(html: str, ident: str) -> str:
    """The HTML from the element with `id` up to the next <h2> outside it."""
    start = html.index(f'id="{ident}"')
    end = html.find("<h2", html.index(">", start) + 1)
    return html[start:] if end < 0 else html[start:end]


@pytest.fixture(scope="module")
def four(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 nodes; node-2's network is at 30% (its own checks pass: only the cluster sees it)."""
    return synth.write_run(tmp_path_factory.mktemp("four"), synth.run(4, slow={2: 0.3}))


@pytest.fixture(scope="module")
def big() -> ReportSet:
    """1024 nodes, node-777 slow."""
    return ReportSet(source="synthetic", reports=synth.run(1024, slow={777: 0.3}))


def test_single_node_run(tmp_path: Path) -> None:
    synth.write_run(tmp_path, synth.run(1))
    html = render_html(load_reports(str(tmp_path)))
    text = Page(html).all_text
    assert "PASS: 0 bad of 1 nodes" in text
    assert 'id="cluster"' not in html  # no cluster band on a single node
    assert "Not run: no cluster verdict in these reports" in text
    lines = [a for t, a in Page(html).tags if t == "polyline"]
    assert len(lines) == 1 and len(lines[0]["points"].split()) == len(synth.SWEEP)


def test_four_nodes_name_the_slow_node(four: Path) -> None:
    html = render_html(load_reports(str(four)))
    page = Page(html)
    assert "FAIL: 1 bad of 4 nodes: node-2" in page.all_text
    # the cluster-wide checks in their band, once; not columns of the node matrix
    band = html[html.index('id="cluster"'):html.index("</div>", html.index('id="cluster"'))]
    assert all(f"PF-CLUSTER-00{i}" in band for i in range(1, 6))
    assert "PF-CLUSTER" not in _section(html, "matrix-bad")
    # every node's own verdict is pass: only node-2, named by the cluster, is marked bad
    matrix = [r for r in page.rows if r and r[0].startswith("node-") and "✓" in r]
    assert [(r[0], r[1]) for r in matrix] == [
        ("node-2", "pass"), ("node-0", "pass"), ("node-1", "pass"), ("node-3", "pass")]
    classes = [a.get("class", "") for t, a in page.tags if t == "tr"]
    assert sum("bad" in c.split() for c in classes) == 3  # its rows: bad nodes, matrix, busbw
    assert not any("n-fail" in c for c in classes)  # no row red for the cluster's failure
    # bad first, the passing nodes folded
    assert html.index('id="matrix-bad"') < html.index('id="matrix-pass"')
    assert re.search(r'<details id="matrix-pass"><summary>3 passing nodes', html)
    # why: the pairwise evidence
    bad = next(r for r in page.rows if r[:2] == ["node-2", "pass"] and len(r) == 4)
    assert bad[2] == "cluster verdict"
    assert bad[3].startswith("pairwise all_reduce below") and "round 1 with node-" in bad[3]


def test_four_nodes_sweep_against_the_floor(four: Path) -> None:
    html = render_html(load_reports(str(four)))
    page = Page(html)
    bandwidth = _section(html, "bandwidth")
    svgs = bandwidth.count("<svg")
    assert svgs == 1  # PF-BW-001; the cluster's one figure is not a per-node curve
    lines = [a for t, a in Page(bandwidth).tags if t == "polyline"]
    assert len(lines) == 4 and all(len(a["points"].split()) == len(synth.SWEEP) for a in lines)
    assert "floor 360 GB/s @ 16 GiB" in page.all_text
    assert "1 MiB" in bandwidth and "16 GiB" in bandwidth  # log x axis labels


def test_four_nodes_isolation_rounds_drawn(four: Path) -> None:
    rs = load_reports(str(four))
    html = render_html(rs)
    iso = _section(html, "isolation")
    summary = summarise(rs.reports)
    rounds = summary.cluster["isolation"]["rounds"]
    assert iso.count("<svg") == len(rounds) >= 2
    bars = [a for t, a in Page(iso).tags if t == "rect" and "fill" in a]
    drawn = [a for a in bars if a["fill"] in ("#d62728", "#66bb6a", "#ef6c00")]
    assert len(drawn) == sum(len(r) for r in rounds)  # one bar per pair per round
    red = [a for a in drawn if a["fill"] == "#d62728"]
    assert red and len(red) == sum(1 for r in rounds for p in r if 2 in (p["a"], p["b"]))
    assert "node-2–node-" in iso  # failed pairs are named
    views = round_views(summary.cluster["isolation"])
    assert views[0].suspects and 2 in views[0].suspects
    assert views[-1].confirmed == (2,) and views[-1].suspects == ()
    assert "Outcome:</b> bad nodes: node-2" in iso


def test_node_failing_its_own_checks_is_red_and_says_why(tmp_path: Path) -> None:
    reports = synth.run(4, faults={1: "xid"})
    page = Page(render_html(ReportSet(source="x", reports=reports)))
    assert "FAIL: 1 bad of 4 nodes: node-1" in page.all_text
    row = next(r for r in page.rows if r[:2] == ["node-1", "fail"] and len(r) == 4)
    assert "cluster verdict" in row[2] and "own checks" in row[2]
    assert "PF-GPU-003: fatal XIDs on node-1: GPU 5: Xid 79, GPU has fallen off the bus" in row[3]


def test_report_json_gives_the_same_facts(four: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = four.parent / "page.html"
    code = cli.main(["report", str(four), "--json", "--html", str(out)])
    assert code == EXIT_FAILED
    captured = capsys.readouterr()
    data = json.loads(captured.out)  # stdout is the JSON document only
    assert "FAIL: 1 bad of 4 nodes" in captured.err
    assert data["verdict"] == "fail" and data["cluster"]["verdict"] == "fail"
    assert data["summary"] == "1 bad of 4 nodes" and data["bad_hosts"] == ["node-2"]
    assert [(n["host"], n["verdict"], n["bad"]) for n in data["nodes"]] == [
        ("node-2", "pass", True), ("node-0", "pass", False), ("node-1", "pass", False),
        ("node-3", "pass", False)]
    assert data["nodes"][0]["why"][0].startswith("pairwise all_reduce below")
    assert data["nodes"][1]["why"] == []
    assert {c["id"]: c["outcome"] for c in data["cluster"]["checks"]}["PF-CLUSTER-005"] == "fail"
    assert data["cluster"]["actions"]["slurm_exclude"] == "node-2"
    html = out.read_text()
    for node in data["nodes"]:  # the page says the same
        assert node["host"] in html
    assert "1 bad of 4 nodes" in html


def test_report_json_of_a_passing_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    synth.write_run(tmp_path, synth.run(4))
    assert cli.main(["report", str(tmp_path), "--json"]) == EXIT_OK
    data = json.loads(capsys.readouterr().out)
    assert data["verdict"] == "pass" and data["num_bad"] == 0 and len(data["nodes"]) == 4
    assert all(n["verdict"] == "pass" and not n["bad"] for n in data["nodes"])


def test_1024_nodes_distribution_not_a_legend(big: ReportSet) -> None:
    assert len(big.reports) > MANY_NODES
    html = render_html(big)
    page = Page(html)
    assert "FAIL: 1 bad of 1024 nodes: node-777" in page.all_text
    bandwidth = _section(html, "bandwidth")
    assert bandwidth.count("<svg") == 2  # the sweep's spread, and the sorted distribution
    lines = [a for t, a in Page(bandwidth).tags if t == "polyline"]
    assert len(lines) == 3  # the median, node-777's own line, the distribution
    assert "min-max of 1024 nodes" in bandwidth and "node-777 (bad)" in bandwidth
    assert "busbw at 16 GiB per node, sorted (1024 nodes)" in bandwidth
    named = re.findall(r"<text[^>]*>(node-\d+)", bandwidth)
    assert 0 < len(named) < 20  # outliers named on the plots, not a legend entry per node
    # the 1023 passing nodes are folded; the bad node's row is first
    assert re.search(r'<details id="matrix-pass"><summary>1023 passing nodes', html)
    assert "node-777" in _section(html, "matrix-bad")
    iso = _section(html, "isolation")
    assert "round 1: 512 pairs, 1 below" in iso
    assert "node-777" in iso.split("Outcome:")[1]


def test_1024_nodes_json(big: ReportSet) -> None:
    data = summarise(big.reports).to_dict()
    assert data["num_nodes"] == 1024 and data["bad_hosts"] == ["node-777"]
    assert data["nodes"][0]["host"] == "node-777" and data["nodes"][0]["bad"]
    assert sum(n["bad"] for n in data["nodes"]) == 1


def test_1024_node_directory_loads(tmp_path: Path) -> None:
    synth.write_run(tmp_path, synth.run(1024, slow={5: 0.3}))
    rs = load_reports(str(tmp_path))
    assert len(rs.reports) == 1024 and rs.reports[1].host == "node-1"
    iso = rs.reports[0].extra["cluster"]["isolation"]
    assert iso is rs.reports[1].extra["cluster"]["isolation"]  # the shared part, redacted once
    assert summarise(rs.reports).bad[0].host == "node-5"


def _chromium() -> str | None:
    return (shutil.which("chromium") or shutil.which("chromium-browser")
            or shutil.which("chromium-headless-shell") or shutil.which("google-chrome"))


def screenshot(html: str, tmp_path: Path, name: str, height: int = 2400) -> bytes:
    """A PNG of the page in headless Chromium (no network: the page needs none)."""
    page = tmp_path / f"{name}.html"
    page.write_text(html, encoding="utf-8")
    shot = tmp_path / f"{name}.png"
    res = subprocess.run(
        [str(_chromium()), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", f"--user-data-dir={tmp_path / ('profile-' + name)}",
         f"--window-size=1280,{height}", f"--screenshot={shot}", page.as_uri()],
        capture_output=True, text=True, timeout=180, check=False)
    assert shot.exists(), res.stderr[-2000:]
    return shot.read_bytes()


@pytest.mark.skipif(_chromium() is None, reason="headless Chromium is not installed "
                    "(apt-get install chromium); the page is checked by parsing instead")
@pytest.mark.parametrize("nodes", [4, 1024])
def test_screenshot_in_headless_chromium(nodes: int, four: Path, big: ReportSet,
                                         tmp_path: Path) -> None:
    rs: Any = load_reports(str(four)) if nodes == 4 else big
    data = screenshot(render_html(rs), tmp_path, f"report-{nodes}")
    assert data.startswith(b"\x89PNG") and len(data) > 50_000  # a drawn page, not a blank one


def test_isolation_with_tiny_values_and_a_pair_without_a_value() -> None:
    """gloo on CPU measures ~0.002 GB/s: the axis fits the values; a null is said, not a crash."""
    reports = synth.run(4, slow={1: 0.3})
    iso = reports[0].extra["cluster"]["isolation"]
    for rnd in iso["rounds"]:
        for p in rnd:
            p["busbw_gb_s"] = p["busbw_gb_s"] / 1e5 if p["busbw_gb_s"] else None
    iso["threshold_gb_s"] = 1e-3
    iso["rounds"][0][0].update(busbw_gb_s=None, error=None)
    html = _section(render_html(ReportSet(source="x", reports=reports)), "isolation")
    ticks = [float(t) for t in re.findall(r'text-anchor="end">([\d.e-]+)</text>', html)]
    assert ticks and max(ticks) < 0.01  # not a 0..1 axis that flattens every bar
    assert "no value" in html


def _seen_text(html: str, tmp_path: Path, name: str) -> str:
    """The page's text as headless Chromium renders it (`innerText`: what a person sees, not
    what the markup holds), read back through --dump-dom; a screenshot is left beside it."""
    probe = html.replace("</body>", "<script>document.body.setAttribute('data-seen', "
                         "document.body.innerText)</script></body>")
    screenshot(html, tmp_path, name)
    page = tmp_path / f"{name}-seen.html"
    page.write_text(probe, encoding="utf-8")
    res = subprocess.run(
        [str(_chromium()), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / ('profile-seen-' + name)}", "--dump-dom",
         page.as_uri()], capture_output=True, text=True, timeout=180, check=False)
    import html as html_mod

    m = re.search(r'<body[^>]*data-seen="([^"]*)"', res.stdout)
    assert m, res.stderr[-2000:]
    return html_mod.unescape(m.group(1))


@pytest.mark.skipif(_chromium() is None, reason="headless Chromium is not installed "
                    "(apt-get install chromium); the page is checked by parsing instead")
def test_a_page_never_says_a_step_passed_that_did_not_run(tmp_path: Path) -> None:
    """8 nodes, node-3 fails its own checks and node-5 is slow. Preflight stops after the
    gather: the page says that the bandwidth and the rounds were not measured and why (it once
    said "the cluster passed before pairwise rounds were needed"). Certify measures the other
    seven: node-3 and node-5 are both named, node-3 as left out of the rounds."""
    pre = synth.run(8, faults={3: "xid"}, slow={5: 0.3}, tier="preflight")
    seen = _seen_text(render_html(ReportSet(source="x", reports=pre)), tmp_path, "preflight")
    assert "passed before pairwise rounds" not in seen
    assert re.search(r"Not run: stopped after node-3 failed its own checks", seen), seen[-3000:]
    assert re.search(r"PF-CLUSTER-004\s+skip", seen) and re.search(r"PF-CLUSTER-005\s+skip", seen)
    assert not re.search(r"PF-CLUSTER-00[45]\s+pass", seen)
    cert = synth.run(8, faults={3: "xid"}, slow={5: 0.3}, tier="certify")
    seen = _seen_text(render_html(ReportSet(source="x", reports=cert)), tmp_path, "certify")
    assert "FAIL: 2 bad of 8 nodes: node-3, node-5" in seen, seen[:2000]
    assert "Not measured (left out of the rounds): node-3: failed its own checks" in seen
    assert re.search(r"PF-CLUSTER-004\s+fail", seen)
