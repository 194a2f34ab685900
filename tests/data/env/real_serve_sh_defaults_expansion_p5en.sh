#!/bin/bash
set -euo pipefail   # -e: preflight failures below must STOP the launch, not fall through to vllm serve
ROLE="${1:?usage: serve.sh leader|worker <leader-ip> [start-rank]}"; DP_MASTER_IP="${2:?need leader ip}"
case "$ROLE" in leader|worker) ;; *) echo "FATAL: unrecognized role '$ROLE' (leader|worker)"; exit 2 ;; esac
DP_MASTER_PORT="${DP_MASTER_PORT:-29500}"

# ---- proxy-Gin + EFA env contract (identical to the measured runs + deploy YAML) ----
# NCCL picks the GIN backend: NCCL_GIN_TYPE=2 is the CPU proxy (the EFA-viable path; 3 would be
# GDAKI). Both are NCCL params (src/gin/gin_host.cc). aws-ofi-nccl 1.21.1 has NO OFI_NCCL_GIN_GDAKI
# or OFI_NCCL_GIN_MAX_REQUESTS parameter (its OFI_NCCL_PARAM table's GIN/GDAKI-related knobs are
# GIN_CQ_PROCESS_MAX_ITER, include/nccl_ofi_param.h:109, and GDAKI_EFA_HW_COUNTER, :398 — a
# hardware-counter override, not a backend switch), so the two knobs earlier revisions exported
# here were inert; gone.
export NCCL_GIN_TYPE=2 NCCL_GIN_ENABLE=1
export NCCL_CUMEM_ENABLE=1 NCCL_NVLS_ENABLE=0 NCCL_IGNORE_DISABLED_P2P=1
export FI_PROVIDER=efa FI_EFA_USE_DEVICE_RDMA=1 FI_EFA_ENABLE_SHM_TRANSFER=0 FI_EFA_FORK_SAFE=1
export OFI_NCCL_PROTOCOL=RDMA   # (no DEEP_EP_BACKEND: nothing in DeepEP or vLLM reads it — the backend is vLLM's --all2all-backend deepep_v2 below)
export NCCL_NET_PLUGIN=/opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so   # bundled by EFA installer >= 1.50.0 (Dockerfile Layer 2)
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-^lo,docker,veth}   # exclusion, never positive selection: EFA nodes expose efa*/enp* and CNI adds bridges; auto-select can pick a non-routing iface -> rendezvous hang. Repo convention (nccl-tests Dockerfile).
# gdrcopy host requirement: GIN needs host gdrcopy/gdrdrv >= 2.5. The forced-PCIe override
# for gdrdrv-2.4 hosts (OFI_NCCL_GDRCOPY_FORCED_PCIE_COPY=1, aws/aws-ofi-nccl#1351) was
# DECLINED upstream (gdrcopy 2.4.x has silent-data-corruption issues) and does not exist in
# the bundled 1.21.1 plugin — on a gdrdrv-2.4 host, upgrade the host driver; do not work around it.
export EP_REUSE_NCCL_COMM=0   # DeepEP creates its own comm; torch's is lazy/null under vLLM (segfault rootcause 2026-08-14)
export NCCL_DEBUG=${SERVE_NCCL_DEBUG:-WARN}

# ---- vLLM PR#41183 (DeepEPV2All2AllManager) envs — V2-native, shim OFF ----
export DEEP_EP_USE_V2_SHIM=0
export VLLM_USE_FLASHINFER_MOE_FP8=0
export VLLM_ENGINE_READY_TIMEOUT_S=${VLLM_ENGINE_READY_TIMEOUT_S:-1800}

# ---- HF cache on the pod-local writable volume (NOT the image layer) ----
export HF_HOME=${HF_HOME:-/work/hf}
export HUGGINGFACE_HUB_CACHE=${HUGGINGFACE_HUB_CACHE:-$HF_HOME/hub}
mkdir -p "$HUGGINGFACE_HUB_CACHE"

# ---- lib path: nvshmem + nccl wheels (namespace-pkg safe) + plugin + efa + cuda ----
NVSHMEM_LIB="$(python3 -c 'import importlib.util,os
s=importlib.util.find_spec("nvidia.nvshmem")
p=(s.submodule_search_locations[0] if s and s.submodule_search_locations else None)
print(os.path.join(p,"lib") if p else "")' 2>/dev/null || true)"
export LD_LIBRARY_PATH="${NVSHMEM_LIB}:${NCCL_LIB}:/opt/amazon/ofi-nccl/lib:/opt/amazon/efa/lib:/usr/local/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export PATH=/opt/amazon/efa/bin:$PATH
