"""`--profile-file` validated when read (issue 25 item 5): types, units and ranges of every
value; a value that turns off a hardware fact of its base is refused unless the table says why
(`weakened_because`); bytes that are not UTF-8 and invalid TOML name the file and the line; each
is a usage error (exit 2) of `run` with a report still written, never a traceback."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from harness import cli
from harness.commands import EXIT_OK, EXIT_USAGE
from harness.profiles.check import CHOICES, UNSETTABLE, check_value
from harness.profiles.model import ProfileError
from harness.profiles.table import BUILTIN_PROFILES, load_profile_file

P5 = '[profiles."p5.48xlarge"]\n'


def _load(tmp_path: Path, text: str | bytes) -> dict:
    path = tmp_path / "site.toml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return load_profile_file(path)


@pytest.mark.parametrize(("line", "error"), [
    ('num_gpus = "8"', "num_gpus = '8' must be an integer"),
    ("num_gpus = 8.0", "num_gpus = 8.0 must be an integer"),
    ("num_gpus = -1", "num_gpus = -1 must be >= 0"),
    ("gdr_required = 1", "gdr_required = 1 must be true or false"),
    ("net_busbw_gb_s_min = -5.0", "net_busbw_gb_s_min = -5.0 must be >= 0"),
    ('net_busbw_gb_s_min = "400"', "net_busbw_gb_s_min = '400' must be a number (a string is "
                                   "not one)"),
    ("net_busbw_gb_s_min = nan", "net_busbw_gb_s_min = nan must be a number"),
    ('check_timeout_s = { preflight = "ten" }', "check_timeout_s.preflight = 'ten' must be a "
                                               "number"),
    ("check_timeout_s = { preflight = 0 }", "check_timeout_s.preflight = 0 must be > 0 (seconds)"),
    ("run_budget_s = { nightly = 60 }", "must be a table of tiers (preflight, certify, "
                                       "diagnose); nightly is none"),
    ("run_budget_s = 60", "run_budget_s = 60 must be a table"),
    ("dcgm_level = { preflight = 7 }", "dcgm_level.preflight = 7 must be between 0 and 4"),
    ("mount_timeout_s = 0", "mount_timeout_s = 0 must be > 0"),
    ("max_output_used_pct = 150", "max_output_used_pct = 150 must be <= 100"),
    ('fabric = "roce"', "fabric = 'roce' must be one of 'efa', 'ib', ''"),
    ('te_recipe = "fp4"', "te_recipe = 'fp4' must be one of"),
    ('min_driver_version = "latest"', "min_driver_version = 'latest' must be a version"),
    ('estimates = ["net_busbw"]', "must be a list of profile fields; net_busbw is none"),
    ('sku = "H100"', "sku = 'H100' is not a GPU SKU of the built-in data"),
    ('origin = "built-in"', "unknown field 'origin'"),
    ('weakened = []', "unknown field 'weakened'"),
    ('weakened_because = " "', "weakened_because = ' ' must be a sentence saying why"),
    ('not_supported = { bogus = "x" }', "must be a table of GPU fact groups"),
    ('not_supported = { ecc = "" }', "must be a table of sentences"),
])
def test_a_bad_value_names_the_file_table_field_and_value(tmp_path: Path, line: str, error: str):
    with pytest.raises(ProfileError) as exc:
        _load(tmp_path, P5 + line + "\n")
    assert str(exc.value).startswith(f'profile file {tmp_path / "site.toml"}: '
                                     '[profiles."p5.48xlarge"]: '), str(exc.value)
    assert error in str(exc.value)


def test_every_problem_of_the_file_is_named_at_once(tmp_path: Path):
    with pytest.raises(ProfileError) as exc:
        _load(tmp_path, P5 + 'num_gpus = "8"\nnet_busbw_gb_s_min = -1\n\n[profiles."x"]\n'
              'base = "p5.48xlarge"\nnum_efa_devices = 16\n')
    said = str(exc.value)
    assert said.startswith(f"profile file {tmp_path / 'site.toml'}: 2 problems: ")
    assert "num_gpus = '8' must be an integer; net_busbw_gb_s_min = -1 must be >= 0" in said
    assert '[profiles."x"] weakens p5.48xlarge (built-in): num_efa_devices 32 -> 16' in said


#: A table line -> what it turns off of p5.48xlarge (as the error and `weakened` say it).
WEAKENINGS = {
    "num_gpus = 0": "num_gpus 8 -> 0",
    "num_gpus = 4": "num_gpus 8 -> 4",
    "num_efa_devices = 16": "num_efa_devices 32 -> 16",
    "nvlinks_per_gpu = 17": "nvlinks_per_gpu 18 -> 17",
    "nvswitch = false": "nvswitch true -> false",
    "gdr_required = false": "gdr_required true -> false",
    "nvls = false": "nvls true -> false",
    'fabric = ""': "fabric efa -> none",
    "gpus_from_machine = true": "GPU count 8 -> taken from the machine",
    'gpu_model = ""': "gpu_model 'H100' -> '' (any GPU)",
    "net_busbw_gb_s_min = 0": "net_busbw_gb_s_min 370.0 -> 0.0 (judges nothing)",
    "gpu_memory_gib_min = 0": "gpu_memory_gib_min 79.0 -> 0.0 (judges nothing)",
    "min_nofile = 0": "min_nofile 65536 -> 0 (judges nothing)",
    'estimates = ["nvlink_busbw_gb_s_min"]': "nvlink_busbw_gb_s_min made an estimate (a "
                                            "warning, not a failure)",
    "dcgm_level = { preflight = 0 }": "dcgm_level.preflight 1 -> 0",
    'not_supported = { ecc = "a lab rig without ECC" }':
        "not_supported.ecc added (that fact is never judged): a lab rig without ECC",
}


@pytest.mark.parametrize("line", list(WEAKENINGS))
def test_a_weakening_is_refused_unless_the_table_says_why(tmp_path: Path, line: str):
    with pytest.raises(ProfileError) as exc:
        _load(tmp_path, P5 + line + "\n")
    assert (f'[profiles."p5.48xlarge"] weakens p5.48xlarge (built-in): {WEAKENINGS[line]}. A '
            "node missing that hardware would pass. Remove those values, or say why in "
            'weakened_because = "..." in that table') in str(exc.value)
    profile = _load(tmp_path, P5 + line + '\nweakened_because = "a test rig"\n')["p5.48xlarge"]
    assert (profile.weakened, profile.weakened_because) == ((WEAKENINGS[line],), "a test rig")
    assert profile.to_dict()["weakened"] == [WEAKENINGS[line]]  # report.json's profile.resolved


@pytest.mark.parametrize("line", [
    "num_gpus = 8", "num_efa_devices = 32", "net_busbw_gb_s_min = 300.0",
    "net_busbw_gb_s_min = 400", "check_timeout_s = { preflight = 20 }",
    "dcgm_level = { preflight = 2 }", "max_gpu_temp_c = 90", 'min_driver_version = "550.54.15"',
    "estimates = []", "nvls_busbw_gb_s_min = 300.0",
])
def test_tuning_a_threshold_weakens_nothing(tmp_path: Path, line: str):
    profile = _load(tmp_path, P5 + line + "\n")["p5.48xlarge"]
    assert profile.weakened == () and profile.weakened_because is None


def test_a_count_off_another_fabric_is_no_weakening_but_the_fabric_change_is(tmp_path: Path):
    text = ('[profiles."hgx-ib"]\nbase = "p5.48xlarge"\nfabric = "ib"\nnum_efa_devices = 0\n'
            'num_ib_devices = 8\n')
    with pytest.raises(ProfileError, match=r"weakens p5.48xlarge \(built-in\): fabric efa -> ib\."):
        _load(tmp_path, text)


def test_a_new_profile_from_local_cpu_weakens_nothing(tmp_path: Path):
    profile = _load(tmp_path, '[profiles."site-cpu"]\ncpu_busbw_gb_s_min = 0.5\n')["site-cpu"]
    assert profile.weakened == () and profile.origin.startswith("profile file ")


def test_not_utf8_names_the_file_and_the_line(tmp_path: Path):
    with pytest.raises(ProfileError) as exc:
        _load(tmp_path, P5.encode() + b"net_busbw_gb_s_min = 400.0\n# caf\xe9\n")
    assert str(exc.value) == (f"profile file {tmp_path / 'site.toml'}, line 3: not UTF-8 (byte "
                              "0xe9 at offset 57): TOML files are UTF-8")


def test_invalid_toml_names_the_file_and_the_line(tmp_path: Path):
    with pytest.raises(ProfileError) as exc:
        _load(tmp_path, P5 + "num_gpus = 8\nnet_busbw_gb_s_min = \n")
    assert str(exc.value).startswith(f"profile file {tmp_path / 'site.toml'}, line 3: not valid "
                                     "TOML: ")


def test_every_built_in_value_passes_the_file_rules():
    """The rules are the built-ins' own: every field of every built-in profile (the SKU
    thresholds included) is valid as a file value, so a file copying one is accepted."""
    for profile in BUILTIN_PROFILES.values():
        for field in dataclasses.fields(profile):
            value = getattr(profile, field.name)
            if field.name in UNSETTABLE or value is None:
                continue
            if field.name == "fabric" and value is None:
                continue
            check_value(field.name, list(value) if isinstance(value, tuple) else value)


def test_te_recipes_are_the_train_steps():
    from harness.probes.train_step import RECIPES

    assert set(CHOICES["te_recipe"]) == set(RECIPES)


# --- the run: a usage error with a report, never a traceback, never a hand-off ---------------

@pytest.mark.parametrize(("content", "said"), [
    (P5.encode() + b"num_gpus = 0\n", "weakens p5.48xlarge (built-in): num_gpus 8 -> 0"),
    (P5.encode() + b"# \xff\xfe\n", "line 2: not UTF-8 (byte 0xff"),
    (P5.encode() + b"num_gpus = \n", "line 2: not valid TOML"),
    (P5.encode() + b'check_timeout_s = { preflight = "ten" }\n',
     "check_timeout_s.preflight = 'ten' must be a number"),
])
def test_run_with_a_bad_profile_file_is_a_usage_error_with_a_report(
        tmp_path: Path, run_handoffs: list[list[str]], capsys: pytest.CaptureFixture[str],
        content: bytes, said: str):
    path = tmp_path / "site.toml"
    path.write_bytes(content)
    failure = tmp_path / "failure"
    rc = cli.main(["run", "--profile", "p5.48xlarge", "--profile-file", str(path),
                   "--report-dir", str(tmp_path / "r"), "--failure-file", str(failure), "--",
                   "echo", "ok"])
    assert rc == EXIT_USAGE and run_handoffs == []
    err = capsys.readouterr().err
    assert f"preflight: error: profile file {path}" in err and said in err
    assert "Traceback" not in err
    report = json.loads((tmp_path / "r" / "node-a" / "report.json").read_text())
    assert report["exit_code"] == EXIT_USAGE and report["verdict"] == "error"
    assert said in report["harness_errors"][0]
    assert said in failure.read_text()


def test_a_weakened_profile_says_so_in_the_header_and_the_report(
        tmp_path: Path, run_handoffs: list[list[str]], capsys: pytest.CaptureFixture[str]):
    path = tmp_path / "site.toml"
    path.write_text('[profiles."local-cpu"]\ncpu_busbw_gb_s_min = 0\nweakened_because = "the '
                    'gloo figure of this VM is noise"\n')
    rc = cli.main(["run", "--profile-file", str(path), "--report-dir", str(tmp_path / "r"),
                   "-k", "PF-ENV-001"])
    assert rc == EXIT_OK
    assert (f"gpu-preflight: profile local-cpu (profile file {path}) is weaker than the hardware "
            "it derives from, on purpose: cpu_busbw_gb_s_min 0.05 -> 0.0 (judges nothing) "
            "(weakened_because: the gloo figure of this VM is noise)") in capsys.readouterr().out
    resolved = json.loads((tmp_path / "r" / "node-a" / "report.json").read_text())[
        "profile"]["resolved"]
    assert resolved["weakened"] == ["cpu_busbw_gb_s_min 0.05 -> 0.0 (judges nothing)"]
    assert resolved["weakened_because"] == "the gloo figure of this VM is noise"


def test_profiles_command_shows_the_weakening(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    path = tmp_path / "site.toml"
    path.write_text('[profiles."p5-half"]\nbase = "p5.48xlarge"\nnum_gpus = 4\n'
                    'weakened_because = "half a p5 per job"\n')
    assert cli.main(["profiles", "p5-half", "--profile-file", str(path)]) == EXIT_OK
    out = " ".join(capsys.readouterr().out.split())
    assert "is weaker than the hardware it derives from, on purpose: num_gpus 8 -> 4 " \
           "(weakened_because: half a p5 per job)" in out
    assert cli.main(["profiles", "--profile-file", str(path / "nope")]) == EXIT_USAGE


@pytest.mark.parametrize("doc", ["README.md", "docs/profiles.md"])
def test_the_documented_profile_files_load(tmp_path: Path, doc: str):
    """Each ```toml example of the docs is a valid profile file (its weakening says why)."""
    import re

    text = (Path(__file__).resolve().parent.parent / doc).read_text(encoding="utf-8")
    blocks = re.findall(r"```toml\n(.*?)```", text, re.S)
    assert blocks, f"{doc} has no ```toml example"
    for block in blocks:
        profiles = _load(tmp_path, block)
        for name in re.findall(r'^\[profiles\."([^"]+)"\]', block, re.M):
            assert profiles[name].origin.startswith("profile file")
