"""Detection and host probes on trees built from real listings (tests/data/host/SOURCES.md):
DMI on EC2 Nitro and Xen, EFA sysfs/dev trees, /proc/self/limits, efa_installed_packages and
the aws-ofi-nccl library layouts of the EFA installer, NGC images and source builds."""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path

import pytest

from harness.detect import instance as detect
from harness.probes import network
from tests.sample_trees import sysroot_files

HOST = Path(__file__).parent / "data" / "host"
NO_IMDS = {"AWS_EC2_METADATA_DISABLED": "true"}


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: An IMDS endpoint that refuses connections: the real one is never contacted from tests.
_CLOSED = f"http://127.0.0.1:{_closed_port()}"


def _write(path: Path, text: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)


# --- DMI -------------------------------------------------------------------------------------

def _dmi_values(*samples: str) -> dict[str, str]:
    """The DMI attributes the samples show (each has its X.expect.json, kind host-dmi)."""
    return {Path(rel).name: f"{value}\n" for name in samples
            for rel, value in sysroot_files((HOST / name).read_text()).items()}


# c5 (ohai #1082) vendor strings and the asset tag of the AWS docs
NITRO = _dmi_values("real_dmi_c5_nitro_ohai.txt", "real_dmi_board_asset_tag_aws_docs.txt")


def _dmi_tree(root: Path, values: dict[str, str], directory: str = "sys/devices/virtual/dmi/id") -> Path:
    for name, value in values.items():
        _write(root / directory / name, value)
    return root


@pytest.mark.parametrize(("values", "directory", "want"), [
    # aws-crt-python #515: product_name is the instance type on Nitro (p4d.24xlarge, c5n.xlarge)
    ({**NITRO, "product_name": "p4d.24xlarge\n"}, "sys/devices/virtual/dmi/id", "p4d.24xlarge"),
    ({**NITRO, "product_name": "p5en.48xlarge\n"}, "sys/class/dmi/id", "p5en.48xlarge"),
    ({**NITRO, "product_name": "p6-b200.48xlarge\n"}, "sys/class/dmi/id", "p6-b200.48xlarge"),
    # t2.xlarge (Xen): aws-crt reports no instance type; osv #547: BIOS Xen 4.2.amazon
    ({"sys_vendor": "Xen\n", "bios_vendor": "Xen\n", "bios_version": "4.2.amazon\n",
      "product_name": "HVM domU\n"}, "sys/class/dmi/id", None),
    ({"sys_vendor": "QEMU\n", "product_name": "Standard PC (Q35 + ICH9, 2009)\n"},
     "sys/class/dmi/id", None),
    ({"sys_vendor": "Amazon EC2\n", "product_name": "\n"}, "sys/class/dmi/id", None),
])
def test_dmi_instance_type(tmp_path: Path, values: dict[str, str], directory: str, want: str | None):
    assert detect.dmi_instance_type(_dmi_tree(tmp_path, values, directory)) == want


def test_dmi_names_a_gpu_node_whose_gpus_the_container_cannot_see(tmp_path: Path):
    """A p4d container started without --gpus, IMDS unreachable (hop limit 1): it used to be
    detected as local-cpu, where every GPU and EFA check is skipped: a wrong pass."""
    root = _dmi_tree(tmp_path, {**NITRO, "product_name": "p4d.24xlarge\n"})
    env = {"PREFLIGHT_OPT_ML": str(tmp_path / "none"), "AWS_EC2_METADATA_SERVICE_ENDPOINT": _CLOSED}
    assert detect.detect_instance_type(None, env, root) == detect.Detection(
        "p4d.24xlarge", "DMI product_name (EC2 Nitro)")
    # AWS_EC2_METADATA_DISABLED=true turns off both EC2 identity sources (a neutral test host)
    assert detect.detect_instance_type(None, {**env, **NO_IMDS}, root) == detect.Detection(
        "local-cpu", "inspection (no GPU found)")


def test_a_cpu_instance_type_without_a_profile_is_local_cpu(tmp_path: Path):
    """A CI runner on m5.xlarge: DMI names a type no profile covers and no GPU is visible."""
    root = _dmi_tree(tmp_path, {**NITRO, "product_name": "m5.xlarge\n"})
    env = {"PREFLIGHT_OPT_ML": str(tmp_path / "none"), "AWS_EC2_METADATA_SERVICE_ENDPOINT": _CLOSED}
    known = ("local-cpu", "p4d.24xlarge", "p5.48xlarge")
    assert detect.detect_instance_type(None, env, root, known=known) == detect.Detection(
        "local-cpu", "inspection: m5.xlarge (from DMI product_name (EC2 Nitro)) has no profile "
        "and no GPU is visible")
    # Known types stay what DMI says (a p4d container without --gpus must not pass as a CPU).
    p4d = _dmi_tree(tmp_path / "p4d", {**NITRO, "product_name": "p4d.24xlarge\n"})
    assert detect.detect_instance_type(None, env, p4d, known=known).name == "p4d.24xlarge"
    # With a GPU visible, an unknown type is returned as found: the caller names the profiles.
    (root / "dev").mkdir()
    (root / "dev/nvidia0").write_text("")
    assert detect.detect_instance_type(None, env, root, known=known).name == "m5.xlarge"
    # An accelerated family without a profile is never taken for a CPU (its container may just
    # not see the GPUs): the caller fails naming the profiles.
    g5 = _dmi_tree(tmp_path / "g5", {**NITRO, "product_name": "g5.48xlarge\n"})
    assert detect.detect_instance_type(None, env, g5, known=known).name == "g5.48xlarge"
    # An explicit --profile is never replaced.
    assert detect.detect_instance_type("m5.xlarge", env, tmp_path / "p4d", known=known).name == (
        "m5.xlarge")


def test_sagemaker_wins_over_dmi_and_sm_env_is_used_without_the_json(tmp_path: Path):
    root = _dmi_tree(tmp_path, {**NITRO, "product_name": "p4d.24xlarge\n"})
    env = {"PREFLIGHT_OPT_ML": str(tmp_path / "none"), "SM_CURRENT_INSTANCE_TYPE": "ml.p5.48xlarge",
           "AWS_EC2_METADATA_SERVICE_ENDPOINT": _CLOSED}
    assert detect.detect_instance_type(None, env, root) == detect.Detection(
        "p5.48xlarge", "SM_CURRENT_INSTANCE_TYPE")


def test_qemu_is_not_ec2(tmp_path: Path):
    """Xen's `4.2.amazon` BIOS and Nitro's vendor strings: their samples' X.expect.json."""
    assert not detect._on_ec2(_dmi_tree(tmp_path, {"sys_vendor": "QEMU\n"}))


# --- EFA devices -----------------------------------------------------------------------------

def _eks_p5_pairs() -> list[tuple[str, str]]:
    text = (HOST / "real_eks_efa_device_plugin_p5_excerpt.txt").read_text()
    return re.findall(r"\{(rdmap\w+) (uverbs\d+) ", text)


def _efa_tree(root: Path, pairs: list[tuple[str, str]], passed: int | None = None) -> Path:
    for i, (dev, node) in enumerate(pairs):
        _write(root / "sys/class/infiniband" / dev / "device/vendor", "0x1d0f\n")
        _write(root / "sys/class/infiniband" / dev / "ports/1/link_layer", "Unspecified\n")
        _write(root / "sys/class/infiniband_verbs" / node / "ibdev", dev + "\n")
        if passed is None or i < passed:
            _write(root / "dev/infiniband" / node, "")
    return root


def test_efa_devices_of_a_p4de(tmp_path: Path):
    text = (HOST / "real_p4de_fi_info_domains_excerpt.txt").read_text()
    names = re.findall(r"domain: (\w+)-rdm", text)
    pairs = [(name, f"uverbs{i}") for i, name in enumerate(names)]
    found = network.efa_devices(_efa_tree(tmp_path, pairs))
    assert found.sysfs == ("rdmap144s27", "rdmap160s27", "rdmap16s27", "rdmap32s27")
    assert len(found.uverbs) == 4


def test_container_given_some_devices_sees_all_in_sysfs(tmp_path: Path):
    found = network.efa_devices(_efa_tree(tmp_path, _eks_p5_pairs(), passed=4))
    assert (len(found.sysfs), len(found.uverbs)) == (14, 4)


def test_container_without_dev_infiniband(tmp_path: Path):
    root = _efa_tree(tmp_path, _eks_p5_pairs(), passed=0)
    assert network.efa_devices(root).uverbs == ()


def test_uverbs_node_that_cannot_be_opened_is_not_usable(tmp_path: Path):
    """/dev/infiniband bind-mounted without the devices: the node exists, open() fails."""
    root = _efa_tree(tmp_path, _eks_p5_pairs()[:2], passed=1)
    (root / "dev/infiniband/uverbs12").symlink_to("/nonexistent/uverbs12")
    found = network.efa_devices(root)
    assert found.uverbs == ("uverbs11",)
    assert found.unusable == ("uverbs12: No such file or directory",)


def test_p6_b200_ibp_devices_and_their_uverbs_are_not_efa(tmp_path: Path):
    """p6-b200 lists 2 `ibp*` devices beside the 8 EFA `rdmap*` ones; an old EFA device plugin
    passed the ibp nodes to pods as EFA: they must not make up the uverbs count."""
    names = [Path(rel).name for rel in sysroot_files(
        (HOST / "real_p6_b200_infiniband_ibp_and_rdmap.txt").read_text())]
    ibp, efa = names[:2], names[2:]  # which are EFA: the sample's X.expect.json
    root = _efa_tree(tmp_path, [(efa[0], "uverbs2"), (efa[1], "uverbs3")], passed=1)
    for i, dev in enumerate(ibp):
        (root / "sys/class/infiniband" / dev / "ports/1").mkdir(parents=True)
        _write(root / "sys/class/infiniband_verbs" / f"uverbs{i}" / "ibdev", dev + "\n")
        _write(root / "dev/infiniband" / f"uverbs{i}", "")
    assert network.efa_devices(root).uverbs == ("uverbs2",)


def test_uverbs_of_a_mellanox_device_are_not_efa(tmp_path: Path):
    """A host with MLNX OFED and EFA (amzn-drivers #308): the mlx5 node is no EFA node."""
    root = _efa_tree(tmp_path, [("rdmap79s0", "uverbs1")], passed=0)
    _write(root / "sys/class/infiniband/mlx5_0/device/vendor", "0x15b3\n")
    _write(root / "sys/class/infiniband_verbs/uverbs0/ibdev", "mlx5_0\n")
    _write(root / "dev/infiniband/uverbs0", "")
    found = network.efa_devices(root)
    assert (found.sysfs, found.uverbs) == (("rdmap79s0",), ())


def test_driver_link_decides_when_the_vendor_file_is_missing(tmp_path: Path):
    dev = tmp_path / "sys/class/infiniband/rdmap16s27/device"
    dev.mkdir(parents=True)
    (dev / "driver").symlink_to("../../../../bus/pci/drivers/mlx5_core")
    assert network.efa_devices(tmp_path).sysfs == ()
    (dev / "driver").unlink()
    (dev / "driver").symlink_to("../../../../bus/pci/drivers/efa")
    assert network.efa_devices(tmp_path).sysfs == ("rdmap16s27",)


# --- memlock, modules ------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "want"), [
    ("Max locked memory         8388608\n", 8192),                # cut after the soft column
    ("Max locked memory         unlimited            unlimited            bytes\r\n", None),
    ("Max locked memory\n", ValueError("no soft limit in .* line 'Max locked memory'")),
    ("Max locked memory         -1   -1   bytes\n", ValueError("no soft limit")),
    ("Max locked memoryX        1    1    bytes\n", ValueError("no 'Max locked memory' line")),
    ("Limit                     Soft Limit           Hard Limit           Units     \n",
     ValueError("no 'Max locked memory' line")),
])
def test_memlock_from_partial_or_malformed_limits(tmp_path: Path, text: str,
                                                  want: int | ValueError | None):
    _write(tmp_path / "proc/self/limits", text)
    if isinstance(want, ValueError):
        with pytest.raises(ValueError, match=str(want)):
            network.memlock_kib(tmp_path)
    else:
        assert network.memlock_kib(tmp_path) == want


# --- aws-ofi-nccl ----------------------------------------------------------------------------

def _lib(version: str) -> bytes:
    """A stand-in plugin: ELF magic and the log string PACKAGE_STRING is compiled into."""
    return b"\x7fELF\x02\x01\x01\x00" + b"\x00" * 64 + b"NET/OFI Initializing aws-ofi-nccl " \
        + version.encode() + b"\x00NET/OFI Selected provider is %s\x00"


def _strings_line(sample: str) -> bytes:
    """The `NET/OFI Initializing ...` line `strings` printed from a real plugin library."""
    text = (HOST / sample).read_text()
    return re.search(r"^NET/OFI Initializing aws-ofi-nccl \S+$", text, re.M)[0].encode()


@pytest.mark.parametrize(("sample", "directory", "want"), [
    ("real_strings_ofi_1.7.3_dlami_opt_aws-ofi-nccl.txt", "opt/aws-ofi-nccl/lib", "1.7.3-aws"),
    ("real_strings_ofi_1.7.4_container_install_prefix.txt", "opt/aws-ofi-nccl/install/lib",
     "1.7.4-aws"),
])
def test_plugin_found_where_real_images_put_it(tmp_path: Path, sample: str, directory: str,
                                               want: str):
    lib = tmp_path / directory / "libnccl-net.so"
    _write(lib, b"\x7fELF\x00" + _strings_line(sample) + b"\x00")
    assert network.find_ofi_nccl({}, tmp_path) == network.OfiNcclLib(str(lib), want, "library")


def test_conda_env_plugin(tmp_path: Path):
    text = (HOST / "real_conda_libnccl-net_dlerror.txt").read_text()
    seen = re.search(r"required by (/\S+/libnccl-net\.so)", text)[1]
    env_dir = seen.split("/lib/python3")[0]                  # the conda env
    lib = tmp_path / env_dir.lstrip("/") / "lib/libnccl-net.so"
    _write(lib, _lib("1.9.0"))
    assert Path(os.path.normpath(seen)) == Path(env_dir) / "lib/libnccl-net.so"
    found = network.find_ofi_nccl({"CONDA_PREFIX": env_dir}, tmp_path)
    assert found == network.OfiNcclLib(str(lib), "1.9.0", "library")


def test_installer_ld_so_conf_entry(tmp_path: Path):
    text = (HOST / "real_ld_so_conf_100_ofinccl_1.17.1.txt").read_text()
    conf_dir = re.search(r"^(/\S+)$", text, re.M)[1]
    _write(tmp_path / "etc/ld.so.conf", "include /etc/ld.so.conf.d/*.conf\n")
    _write(tmp_path / "etc/ld.so.conf.d/100_ofinccl.conf", conf_dir + "\n")
    lib = tmp_path / conf_dir.lstrip("/") / "libnccl-net.so"
    _write(lib, b"\x7fELF\x00" + _strings_line("real_ld_so_conf_100_ofinccl_1.17.1.txt"))
    assert network.find_ofi_nccl({}, tmp_path) == network.OfiNcclLib(str(lib), "1.17.1", "library")


def test_ngc_image_with_hpcx_plugins_first_on_the_path(tmp_path: Path):
    """An NGC image's plugin inventory: HPC-X's SHARP plugin is also named libnccl-net.so."""
    sharp = tmp_path / "opt/hpcx/nccl_rdma_sharp_plugin/lib"
    _write(sharp / "libnccl-net.so.0", b"\x7fELF NET/IB : Using SHARP plugin\x00")
    _write(sharp / "libnccl-net-ibext.so", b"\x7fELF NET/IB\x00")
    ofi = tmp_path / "opt/amazon/aws-ofi-nccl/lib"
    _write(ofi / "libnccl-net-ofi.so", _lib("1.14.0"))
    env = {"LD_LIBRARY_PATH": "/opt/hpcx/nccl_rdma_sharp_plugin/lib:/usr/local/cuda/lib64"}
    found = network.find_ofi_nccl(env, tmp_path)
    assert found == network.OfiNcclLib(str(ofi / "libnccl-net-ofi.so"), "1.14.0", "library")


def test_ld_so_conf_directory_is_searched(tmp_path: Path):
    _write(tmp_path / "etc/ld.so.conf", "include /etc/ld.so.conf.d/*.conf\n")
    _write(tmp_path / "etc/ld.so.conf.d/000_efa.conf", "/opt/custom/ofi/lib\n")
    _write(tmp_path / "opt/custom/ofi/lib/libnccl-net.so", _lib("1.18.0"))
    found = network.find_ofi_nccl({}, tmp_path)
    assert found is not None and (found.path, found.version) == (
        str(tmp_path / "opt/custom/ofi/lib/libnccl-net.so"), "1.18.0")


def test_relative_ld_so_conf_include(tmp_path: Path):
    _write(tmp_path / "etc/ld.so.conf", "include ld.so.conf.d/*.conf\n# comment\n")
    _write(tmp_path / "etc/ld.so.conf.d/efa.conf", "/opt/amazon/efa/lib  # libfabric\n")
    _write(tmp_path / "etc/ld.so.conf.d/ofi.conf", "/srv/ofi/lib\n")
    _write(tmp_path / "srv/ofi/lib/libnccl-net-ofi.so", _lib("1.17.0"))
    found = network.find_ofi_nccl({}, tmp_path)
    assert found is not None and found.version == "1.17.0"


def test_source_build_does_not_borrow_the_installer_version(tmp_path: Path):
    """A git build prints `aws-ofi-nccl GitHub-dev`: its version is unknown, not the one of the
    installer's package listed in efa_installed_packages."""
    build = tmp_path / "opt/aws-ofi-nccl/install/lib"
    _write(build / "libnccl-net.so", _lib("GitHub-dev"))
    _write(tmp_path / "opt/amazon/efa_installed_packages",
           (HOST / "composed_efa_installed_packages_1.47_ubuntu_libnccl-ofi.txt").read_text())
    found = network.find_ofi_nccl({"LD_LIBRARY_PATH": "/opt/aws-ofi-nccl/install/lib"}, tmp_path)
    assert found == network.OfiNcclLib(str(build / "libnccl-net.so"), None)
