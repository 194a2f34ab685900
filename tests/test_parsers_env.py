"""Environment dump parser: the formats people paste, and real job environments judged per profile."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from harness.parsers import ParseError
from harness.parsers.env import inspect_env, parse_env_dump
from harness.profiles import get_profile

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


def _inspect(name: str, profile: str) -> dict:
    return json.loads(json.dumps(inspect_env(io.StringIO((ENV_DATA / name).read_text()),
                                             profile=get_profile(profile))))


def _names(findings: list[dict]) -> list[str]:
    return sorted(f"{f['name']}={f['value']}" for f in findings)


# Hand-read from each file against domain-facts.md / aws-ofi-nccl doc/efa-env-var.md: the values
# a check judges and the verdict per kind (versions unknown unless the file names them).
REAL = [
    pytest.param(
        "real_sbatch_fsdp_2023_comments.sh", "p4d.24xlarge", "script",
        {"FI_EFA_USE_DEVICE_RDMA": "1", "FI_PROVIDER": "efa", "NCCL_DEBUG": "INFO",
         "FI_EFA_FORK_SAFE": "1", "FI_EFA_SET_CUDA_SYNC_MEMOPS": "0"},
        [], [], ["FI_EFA_FORK_SAFE=1", "FI_EFA_USE_DEVICE_RDMA=1"], [], id="sbatch-2023-comments"),
    pytest.param(
        "real_sbatch_nccl_tests_2023.sh", "p4d.24xlarge", "script",
        {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1", "NCCL_ASYNC_ERROR_HANDLING": "1",
         "FI_EFA_ENABLE_SHM_TRANSFER": "1", "FI_LOG_LEVEL": "1"},
        [], [], ["FI_EFA_ENABLE_SHM_TRANSFER=1", "FI_EFA_FORK_SAFE=1", "FI_EFA_USE_DEVICE_RDMA=1",
                 "NCCL_ASYNC_ERROR_HANDLING=1"], [], id="sbatch-nccl-tests-2023"),
    pytest.param(
        "real_sbatch_fsdp_llama2_2025.sh", "p5.48xlarge", "script",
        {"FI_PROVIDER": "efa", "FI_EFA_USE_HUGE_PAGE": "0", "NCCL_SOCKET_IFNAME": "^docker,lo,veth,eth",
         "LD_PRELOAD": "/usr/local/cuda-12.4/lib/libnccl.so", "HF_HUB_ETAG_TIMEOUT": "60"},
        [], [], [], [], id="sbatch-2025-clean"),
    pytest.param(
        "real_k8s_pytorchjob_llama3_fsdp.yaml", "p5.48xlarge", "yaml",
        {"NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": "^lo", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
         "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "HF_TOKEN": "${HF_TOKEN}",
         "LOGLEVEL": "DEBUG"},
        [], [], [], [], id="k8s-pytorchjob"),
    pytest.param(
        "real_k8s_statefulset_inline_env_p5en.yaml", "p5en.48xlarge", "yaml",
        {"SERVE_DP": "16", "NCCL_GIN_TYPE": "2", "FI_EFA_ENABLE_SHM_TRANSFER": "0",
         "OFI_NCCL_PROTOCOL": "RDMA", "NCCL_DEBUG": "WARN",
         "NCCL_NET_PLUGIN": "/opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so"},
        [], [], ["FI_EFA_FORK_SAFE=1", "FI_EFA_USE_DEVICE_RDMA=1"], [], id="k8s-inline-p5en"),
    pytest.param(
        "real_cmdline_nccl1597_h200_p2p_disabled.txt", "p5e.48xlarge", "script",
        {"NCCL_NET": "AWS Libfabric", "NCCL_P2P_DISABLE": "1", "NCCL_DEBUG": "INFO",
         "NCCL_MIN_NCHANNELS": "8"},
        ["NCCL_P2P_DISABLE=1"], [],
        ["FI_EFA_FORK_SAFE=1", "FI_EFA_USE_DEVICE_RDMA=1", "NCCL_MIN_NCHANNELS=8", "NCCL_SHM_DISABLE=1"],
        [], id="cmdline-h200-p2p-disabled"),
    pytest.param(
        "real_mpirun_ofi67_p4d_efa_not_enabled.sh", "p4d.24xlarge", "script",
        {"FI_PROVIDER": "efa", "RDMAV_FORK_SAFE": "1", "NCCL_SOCKET_IFNAME": "eth", "NCCL_ALGO": "Ring",
         "OMP_NUM_THREADS": "8"},
        ["RDMAV_FORK_SAFE=1"], [],
        ["FI_EFA_USE_DEVICE_RDMA=1", "NCCL_ALGO=Ring", "NCCL_MIN_NCHANNELS=8",
         "NCCL_NSOCKS_PERTHREAD=8", "NCCL_SOCKET_NTHREADS=8"], [], id="mpirun-x-p4d"),
    pytest.param(
        "real_sbatch_nccl_tests_container_2024.sh", "p4de.24xlarge", "script",
        {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1", "NCCL_BUFFSIZE": "8388608",
         "NCCL_P2P_NET_CHUNKSIZE": "524288"},
        [], [], ["FI_EFA_FORK_SAFE=1", "FI_EFA_USE_DEVICE_RDMA=1"], [], id="sbatch-nccl-tests-2024"),
    pytest.param(
        "real_k8s_mpijob_nccl_tests_args.yaml", "p5.48xlarge", "yaml",
        {"FI_PROVIDER": "efa", "FI_EFA_FORK_SAFE": "1", "NCCL_DEBUG": "INFO", "NCCL_BUFFSIZE": "8388608",
         "NCCL_TUNER_PLUGIN": "/opt/aws-ofi-nccl/install/lib/libnccl-ofi-tuner.so",
         "PATH": "$PATH:/opt/amazon/efa/bin:/usr/bin"},
        [], [], ["FI_EFA_FORK_SAFE=1"], [], id="k8s-mpijob-x-args"),
    pytest.param(
        "real_hyperpod_recipe_values_envvars.yaml", "p5.48xlarge", "yaml",
        {"NCCL_DEBUG": "WARN", "NEMO_LAUNCHER_DEBUG": "1", "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7",
         "NCCL_IGNORE_DISABLED_P2P": "1", "NCCL_SOCKET_IFNAME": "^lo,docker0,veth_def_agent"},
        [], [], [], [], id="hyperpod-recipe-envvars"),
    pytest.param(
        "real_serve_sh_defaults_expansion_p5en.sh", "p5en.48xlarge", "script",
        {"NCCL_SOCKET_IFNAME": "^lo,docker,veth", "NCCL_DEBUG": "WARN", "NCCL_GIN_TYPE": "2",
         "FI_EFA_ENABLE_SHM_TRANSFER": "0", "DP_MASTER_PORT": "29500", "DP_MASTER_IP": "${2:?need leader ip}",
         "HUGGINGFACE_HUB_CACHE": "/work/hf/hub", "OFI_NCCL_PROTOCOL": "RDMA"},
        [], [], ["FI_EFA_FORK_SAFE=1", "FI_EFA_USE_DEVICE_RDMA=1"], [], id="serve-sh-defaults"),
    pytest.param(
        "real_sagemaker_estimator_environment.txt", "p4d.24xlarge", "yaml", {"NCCL_DEBUG": "INFO"},
        [], [], [], [], id="sagemaker-estimator"),
    pytest.param(
        "real_dockerfile_nvcr_pytorch_aws_env.dockerfile", "p5.48xlarge", "script",
        {"AWS_OFI_NCCL_VERSION": "1.7.4-aws", "NCCL_SOCKET_IFNAME": "^docker,lo",
         "OPAL_PREFIX": "/opt/amazon/openmpi", "PMIX_MCA_gds": "^ds12",
         # Docker expands ${LD_LIBRARY_PATH} with the image's earlier ENV value
         "LD_LIBRARY_PATH": "/usr/local/lib:/usr/local/cuda/lib64:/opt/amazon/efa/lib:$LD_LIBRARY_PATH"},
        [], [], [], [], id="dockerfile-env"),
]


@pytest.mark.parametrize(("name", "profile", "fmt", "values", "harmful", "required", "warned", "malformed"),
                         REAL)
def test_real_environments(name, profile, fmt, values, harmful, required, warned, malformed):
    dump = parse_env_dump((ENV_DATA / name).read_text())
    assert dump.format == fmt
    for var, value in values.items():
        assert dump.variables[var] == value, var
    result = _inspect(name, profile)
    assert _names(result["harmful"]) == harmful
    assert _names(result["required"]) == required
    assert _names(result["outdated"]) == warned
    assert result["malformed"] == malformed


def test_real_commented_entries_do_not_count():
    variables = parse_env_dump((ENV_DATA / "real_k8s_pytorchjob_llama3_fsdp.yaml").read_text()).variables
    assert not any(name.startswith("FI_") for name in variables)
    assert "NCCL_NVLS_ENABLE" not in variables


def test_real_dockerfile_run_lines_are_not_image_env():
    text = (ENV_DATA / "real_dockerfile_nvcr_pytorch_aws_env.dockerfile").read_text()
    variables = parse_env_dump(text).variables
    assert "MAX_JOBS" not in variables and "TORCH_CUDA_ARCH_LIST" not in variables


def test_inspect_reads_the_plugin_version_an_image_names():
    result = _inspect("real_dockerfile_nvcr_pytorch_aws_env.dockerfile", "p5.48xlarge")
    assert result["versions"] == {"ofi_nccl": "1.7.4-aws", "libfabric": None}
    old = inspect_env(io.StringIO("ENV AWS_OFI_NCCL_VERSION=1.5.0\n"), profile=get_profile("p5.48xlarge"))
    assert _names(old["required"]) == ["FI_EFA_USE_DEVICE_RDMA=None", "NCCL_PROTO=None"]


def test_real_recipe_values_keep_only_the_env_block():
    variables = parse_env_dump((ENV_DATA / "real_hyperpod_recipe_values_envvars.yaml").read_text()).variables
    assert len(variables) == 10 and "wandbKey" not in variables and "jobName" not in variables


def test_the_shell_word_splitter_reads_words_as_shlex_does():
    """The regex splitter used for speed gives shlex's words (or its ValueError) on every line of
    every sample and on 20,000 seeded random lines of quotes, escapes and separators."""
    import random

    from harness.parsers.env_script import _shell_words, _shlex_words

    lines = [line for path in sorted(Path(__file__).parent.joinpath("data").rglob("*"))
             if path.is_file() for line in path.read_text(errors="replace").splitlines()]
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
