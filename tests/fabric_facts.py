"""Canned InfiniBand and NVLink-domain facts for checks/test_fabric.py. Port values are the real
ones of an H100 node's /sys/class/infiniband (tests/data/ib/SOURCES.md); fabric values are the
real NCCL MNNVL lines of an HGX H200 and a GB200 tray (tests/data/nccl_log/real_mnnvl_h200_gb200.txt)
as NVML reports the same fields."""

from __future__ import annotations

from dataclasses import replace

from harness.probes.fabric import FabricInfo, RdmaDevice, RdmaPort

NDR = RdmaPort(1, "ACTIVE", "LinkUp", 400.0, "400 Gb/sec (4X NDR)", "InfiniBand")
HCAS = [RdmaDevice(f"mlx5_{i}", "ib", "MT4129", "28.41.1000", (NDR,)) for i in range(8)]
GB200_UUID = "3143b15bc2cd192b28cc9b5473fb5b93"
GB200 = [FabricInfo(i, 3, 0, GB200_UUID, 0x7FFE, 0xAA) for i in range(4)]
HGX = [FabricInfo(i, 3, 0, "0" * 32, 0, 0) for i in range(8)]

SCENARIOS: dict[str, dict[str, object]] = {
    "healthy_ib": {"rdma_devices": HCAS, "gdr_peermem": "peermem (/sys/module/nvidia_peermem/version)",
                   "gpu_fabric": HGX, "imex_channels": []},
    "port_polling": {"rdma_devices": [*HCAS[:7], replace(HCAS[7], ports=(replace(
        NDR, state="DOWN", phys_state="Polling", rate_gbps=10.0, rate="10 Gb/sec (4X SDR)"),))],
        "gdr_peermem": None, "gpu_fabric": HGX, "imex_channels": []},
    "half_the_hcas": {"rdma_devices": HCAS[:4], "gdr_peermem": "peermem (/sys/module/"
                      "nvidia_peermem/version)", "gpu_fabric": HGX, "imex_channels": []},
    "slow_rail": {"rdma_devices": [*HCAS[:7], replace(HCAS[7], ports=(replace(
        NDR, rate_gbps=200.0, rate="200 Gb/sec (2X NDR)"),))],
        "gdr_peermem": None, "gpu_fabric": HGX, "imex_channels": []},
    "gb200_healthy": {"rdma_devices": [], "gdr_peermem": None, "gpu_fabric": GB200,
                      "imex_channels": ["channel0"]},
    "gb200_gpu_unregistered": {"rdma_devices": [], "gdr_peermem": None, "imex_channels": [],
                               "gpu_fabric": [*GB200[:3], replace(GB200[3], state=2,
                                                                  cluster_uuid="0" * 32)]},
    # GPU 2's health mask did not come back (the other three read healthy): unknown.
    "gb200_health_unread": {"rdma_devices": [], "gdr_peermem": None,
                            "imex_channels": ["channel0"],
                            "gpu_fabric": [*GB200[:2], replace(GB200[2], health_mask=None),
                                           GB200[3]]},
    "gb200_degraded": {"rdma_devices": [], "gdr_peermem": None, "imex_channels": ["channel0"],
                       "gpu_fabric": [*GB200[:3], replace(GB200[3], health_mask=0xA9)]},
}
