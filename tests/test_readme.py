"""README says what the product does: its profile list is `preflight profiles` (every built-in
profile, by name, with its GPUs, EFA devices and description), and the report.json keys it
names are the keys a report has."""

from __future__ import annotations

import json
import re
from pathlib import Path

from harness.cli import main

README = Path(__file__).resolve().parent.parent / "README.md"
BEGIN, END = "<!-- profiles: begin (preflight profiles --json) -->", "<!-- profiles: end -->"


def profile_table(profiles: dict) -> str:
    """The README block, as `preflight profiles --json` gives the profiles."""
    rows = ["| profile | GPUs | EFA | what |", "|---|---|---|---|"]
    for name, p in profiles.items():
        gpus = ("as many as the machine has" if p["gpus_from_machine"]
                else f"{p['num_gpus']} x {p['gpu_model']}" if p["num_gpus"] else "none")
        rows.append(f"| `{name}` | {gpus} | {p['num_efa_devices']} | "
                    f"{' '.join(str(p['description']).split())} |")
    return "\n".join([BEGIN, *rows, END])


def test_readme_lists_every_profile_preflight_profiles_lists(capsys):
    assert main(["profiles", "--json"]) == 0
    profiles = json.loads(capsys.readouterr().out)
    text = README.read_text(encoding="utf-8")
    block = text[text.index(BEGIN):text.index(END) + len(END)]
    expected = profile_table(profiles)
    assert block == expected, f"README's profile list is stale; it should read:\n{expected}"
    assert len(profiles) > 6


def test_readme_names_only_report_keys_a_report_has(tmp_path):
    """Every `key` README's Reports section names as a report.json key is one."""
    from harness.report.model import Report

    keys = set(Report(host="h", profile="p", profile_source="s", tier="preflight").to_dict())
    keys |= {"cluster", "interrupted"}  # a multi-node run, a signal (cluster.step, interrupted)
    text = README.read_text(encoding="utf-8")
    section = text[text.index("### Reports"):text.index("### `inspect` kinds")]
    said = re.search(r"`report\.json` \(schema `[^`]+`: (.*?)\),\n`junit", section, re.S)
    assert said, "README's Reports section no longer lists the report.json keys"
    named = set(re.findall(r"`([a-z_]+)`", said.group(1)))
    assert named and named <= keys, sorted(named - keys)
    assert "timings" not in said.group(1)
