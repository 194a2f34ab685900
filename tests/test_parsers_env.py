"""Environment dump parser: the formats people paste. What each real job environment under
tests/data/env sets, and its verdict per profile, is in its X.expect.json."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from harness.parsers import ParseError
from harness.parsers.env import inspect_env, parse_env_dump
from harness.profiles.table import get_profile

ENV_DATA = Path(__file__).parent / "data" / "env"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("NCCL_DEBUG=INFO\nFI_PROVIDER=efa\n", {"NCCL_DEBUG": "INFO", "FI_PROVIDER": "efa"}),
        ("NCCL_DEBUG=INFO\r\nEMPTY=\r\n", {"NCCL_DEBUG": "INFO", "EMPTY": ""}),
        ("NCCL_DEBUG=INFO\0MULTI=a\nb\0", {"NCCL_DEBUG": "INFO", "MULTI": "a\nb"}),
        ('declare -x FI_PROVIDER="efa"\ndeclare -x OLDPWD\ndeclare -x Q="a \\"b\\""\n',
         {"FI_PROVIDER": "efa", "Q": 'a "b"'}),
        ("export NCCL_NET='Socket'\nexport X=\"1\"\n", {"NCCL_NET": "Socket", "X": "1"}),
        ("A=1\nBASH_FUNC_f%%=() {  echo\n}\nB=x=y\n", {"A": "1", "B": "x=y"}),
        # plain `env` output keeps a `#` inside a value; a shell script drops a trailing comment
        ("URL=http://h/a#frag\nB=1 # not a comment in env output\n",
         {"URL": "http://h/a#frag", "B": "1 # not a comment in env output"}),
        ("NVIDIA_REQUIRE_CUDA=cuda>=12.4 brand=tesla,driver>=470\nLESSOPEN=| /usr/bin/lesspipe %s\n",
         {"NVIDIA_REQUIRE_CUDA": "cuda>=12.4 brand=tesla,driver>=470", "LESSOPEN": "| /usr/bin/lesspipe %s"}),
        ("export URL=http://h/a#frag B=2 # comment\n", {"URL": "http://h/a#frag", "B": "2"}),
        ('declare -x MULTI="line1\nline2"\ndeclare -x B="2"\n', {"MULTI": "line1\nline2", "B": "2"}),
        ("export A=1\nit's prose with a quote\nexport B=2\n", {"A": "1", "B": "2"}),
        ("export NCCL_DEBUG=INFO\nexport NCCL_DEBUG=WARN\n", {"NCCL_DEBUG": "WARN"}),  # last wins
        ("docker run -e NCCL_DEBUG=INFO --env=FI_PROVIDER=efa img\n",
         {"NCCL_DEBUG": "INFO", "FI_PROVIDER": "efa"}),
        ("srun --export=ALL,NCCL_DEBUG=INFO,FI_PROVIDER=efa app\n",
         {"NCCL_DEBUG": "INFO", "FI_PROVIDER": "efa"}),
        ("ENV NCCL_DEBUG INFO\n", {"NCCL_DEBUG": "INFO"}),  # legacy Dockerfile form
        ("RUN export MAX_JOBS=32 && \\\n    # a comment inside the RUN\n    export X=1 && make\nENV A=1\n",
         {"A": "1"}),
        ("export A=1; B=2 && export C=3 || true\n", {"A": "1", "B": "2", "C": "3"}),
        # parameter expansion: defaults, earlier values, unknown variables left as written
        ("export H=${H:-/w}\nexport C=${C:-$H/hub}\nexport D=${UNSET:-WARN}\nexport L=/x:$LD_LIBRARY_PATH\n",
         {"H": "/w", "C": "/w/hub", "D": "WARN", "L": "/x:$LD_LIBRARY_PATH"}),
        # a pasted terminal: the output of `$ env | grep` is env output (values with spaces whole)
        ("$ env | grep NCCL\nNCCL_NET=AWS Libfabric\nNCCL_DEBUG=INFO\n$ ls\nA=b c\n",
         {"NCCL_NET": "AWS Libfabric", "NCCL_DEBUG": "INFO", "A": "b"}),
        ('$ export -p | grep FI_\ndeclare -x FI_PROVIDER="efa"\n', {"FI_PROVIDER": "efa"}),
        # wrappers: srun -l, mpirun --tag-output (first rank kept), CloudWatch timestamps
        ("0: NCCL_DEBUG=INFO\n1: NCCL_DEBUG=WARN\n0: FI_PROVIDER=efa\n",
         {"NCCL_DEBUG": "INFO", "FI_PROVIDER": "efa"}),
        ("[1,0]<stdout>:NCCL_DEBUG=INFO\n[1,1]<stdout>:NCCL_DEBUG=WARN\n", {"NCCL_DEBUG": "INFO"}),
        ("2024-12-04T07:19:43.478Z\nNCCL_DEBUG=INFO\n2024-12-04T07:19:43.478Z\nFI_PROVIDER=efa\n",
         {"NCCL_DEBUG": "INFO", "FI_PROVIDER": "efa"}),
        # JSON: docker inspect, a bare Env array, a SageMaker/ECS environment map or list
        ('[{"Config": {"Env": ["PATH=/usr/bin", "NCCL_DEBUG=INFO"], "Labels": {"A": "b"}}}]',
         {"PATH": "/usr/bin", "NCCL_DEBUG": "INFO"}),
        ('["NCCL_DEBUG=INFO", "FI_PROVIDER=efa"]', {"NCCL_DEBUG": "INFO", "FI_PROVIDER": "efa"}),
        ('{"NCCL_DEBUG": "INFO", "FI_PROVIDER": "efa"}', {"NCCL_DEBUG": "INFO", "FI_PROVIDER": "efa"}),
        ('{"containerDefinitions": [{"environment": [{"name": "NCCL_DEBUG", "value": "INFO"}]}]}',
         {"NCCL_DEBUG": "INFO"}),
        # a docker inspect cut when pasted: not JSON any more, its Env lines still read
        ('[\n    {\n        "Config": {\n            "Env": [\n                "PATH=/usr/bin",\n'
         '                "NCCL_DEBUG=INFO",\n                "Q=a \\"b\\""\n            ],\n'
         '            "Cmd": [\n                "-x",\n',
         {"PATH": "/usr/bin", "NCCL_DEBUG": "INFO", "Q": 'a "b"'}),
        ('  args: ["-x", "NCCL_DEBUG=INFO"]\n  command:\n  - mpirun\n  - -x\n  - FI_PROVIDER=efa\n'
         '  - ./a NCCL_X=1\n', {"FI_PROVIDER": "efa", "NCCL_DEBUG": "INFO"}),
        # YAML / Python dicts: compose lists and maps, recipe env_vars, estimator environment=
        ("services:\n  t:\n    environment:\n      - NCCL_DEBUG=INFO\n      - FI_PROVIDER=efa\n",
         {"NCCL_DEBUG": "INFO", "FI_PROVIDER": "efa"}),
        ("env_vars:\n  NCCL_DEBUG: WARN  # comment\n  FI_PROVIDER: 'efa'\nmodel:\n  NAME: x\n",
         {"NCCL_DEBUG": "WARN", "FI_PROVIDER": "efa"}),
        ('environment={\n    "NCCL_DEBUG": "INFO",\n    "FI_PROVIDER": "efa",\n}\n',
         {"NCCL_DEBUG": "INFO", "FI_PROVIDER": "efa"}),
        ('    environment={"NCCL_DEBUG": "INFO", "TORCH_DISTRIBUTED_DEBUG": "DETAIL"},\n    role=ROLE,\n',
         {"NCCL_DEBUG": "INFO", "TORCH_DISTRIBUTED_DEBUG": "DETAIL"}),
        ("spec:\n  env: {NCCL_DEBUG: WARN, FI_PROVIDER: 'efa'}\n",
         {"NCCL_DEBUG": "WARN", "FI_PROVIDER": "efa"}),
    ],
)
def test_env_dump_formats(text, expected):
    assert parse_env_dump(text).variables == expected


@pytest.mark.parametrize("text", ["", "\n\n", "hello world\nno assignments here\n", "=x\n", "[]", "{}"])
def test_nothing_recognised(text):
    with pytest.raises(ParseError, match="no environment variable assignments"):
        parse_env_dump(text)


# Values of real environments (tests/data/env) outside `preflight inspect env`'s relevant
# prefixes, hand-read from each file (None: not set there); every other fact and each profile's
# verdict is in the file's X.expect.json (tests/test_parsers_samples.py).
OUTSIDE_INSPECT = {
    "real_sbatch_fsdp_llama2_2025.sh": {"LD_PRELOAD": "/usr/local/cuda-12.4/lib/libnccl.so",
                                        "HF_HUB_ETAG_TIMEOUT": "60"},
    "real_k8s_pytorchjob_llama3_fsdp.yaml": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
                                             "HF_TOKEN": "${HF_TOKEN}", "LOGLEVEL": "DEBUG"},
    "real_k8s_statefulset_inline_env_p5en.yaml": {"SERVE_DP": "16"},
    "real_mpirun_ofi67_p4d_efa_not_enabled.sh": {"OMP_NUM_THREADS": "8"},
    "real_k8s_mpijob_nccl_tests_args.yaml": {"PATH": "$PATH:/opt/amazon/efa/bin:/usr/bin"},
    "real_hyperpod_recipe_values_envvars.yaml": {"NEMO_LAUNCHER_DEBUG": "1", "wandbKey": None,
                                                 "jobName": None},
    "real_serve_sh_defaults_expansion_p5en.sh": {"DP_MASTER_PORT": "29500",
                                                 "DP_MASTER_IP": "${2:?need leader ip}",
                                                 "HUGGINGFACE_HUB_CACHE": "/work/hf/hub"},
    # `RUN export ...` is not image env; Docker expands ${LD_LIBRARY_PATH} with the image's
    # earlier ENV value
    "real_dockerfile_nvcr_pytorch_aws_env.dockerfile": {
        "AWS_OFI_NCCL_VERSION": "1.7.4-aws", "OPAL_PREFIX": "/opt/amazon/openmpi",
        "PMIX_MCA_gds": "^ds12", "MAX_JOBS": None},
}


@pytest.mark.parametrize(("name", "values"), OUTSIDE_INSPECT.items(), ids=list(OUTSIDE_INSPECT))
def test_real_values_inspect_does_not_show(name: str, values: dict):
    variables = parse_env_dump((ENV_DATA / name).read_text()).variables
    assert {var: variables.get(var) for var in values} == values


def _names(findings: list[dict]) -> list[str]:
    return sorted(f"{f['name']}={f['value']}" for f in findings)


def test_inspect_takes_the_plugin_version_an_image_names():
    old = inspect_env(io.StringIO("ENV AWS_OFI_NCCL_VERSION=1.5.0\n"), profile=get_profile("p5.48xlarge"))
    assert old["versions"]["ofi_nccl"] == "1.5.0"
    assert _names(old["required"]) == ["FI_EFA_USE_DEVICE_RDMA=None", "NCCL_PROTO=None"]


@pytest.mark.parametrize(("line", "words"), [
    # bash reads a command substitution as its own quoting context, in double quotes too.
    ("""X="$(python3 -c 'print("a b")' || true)"; Y=1""",
     ["""X=$(python3 -c 'print("a b")' || true)""", ";", "Y=1"]),
    ('A="$(echo "$(date "+%s")")" B=$(hostname) C=$((1+2))',
     ['A=$(echo "$(date "+%s")")', "B=$(hostname)", "C=$((1+2))"]),
    ("bash -c 'echo $(hostname): x'", ["bash", "-c", "echo $(hostname): x"]),  # single quotes
])
def test_a_command_substitution_is_one_piece_of_its_word(line: str, words: list[str]):
    from harness.parsers.shell_words import shell_words as _shell_words

    assert _shell_words(line) == words
    with pytest.raises(ValueError, match="No closing parenthesis"):
        _shell_words('X="$(python3 -c \'import os')  # its command goes on in the next line


def test_the_shell_word_splitter_reads_words_as_shlex_does():
    """The regex splitter used for speed gives shlex's words (or its ValueError) on every line of
    every sample without a `$(` (shlex does not know command substitutions) and on 20,000 seeded
    random lines of quotes, escapes and separators."""
    import random

    from harness.parsers.shell_words import shell_words as _shell_words
    from harness.parsers.shell_words import shlex_words as _shlex_words

    lines = [line for path in sorted(Path(__file__).parent.joinpath("data").rglob("*"))
             if path.is_file() for line in path.read_text(errors="replace").splitlines()
             if "$(" not in line]
    rng = random.Random(13)
    alphabet = "ab \"'\\;&|\t=$#\n\r\x0b\xa0é"
    lines += ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 16)))
              for _ in range(20_000)]

    def words(split, line):
        try:
            return split(line)
        except ValueError:
            return "ValueError"

    assert [line for line in lines if words(_shell_words, line) != words(_shlex_words, line)] == []
