"""The bad-hardware ledger (harness.memory.ledger): is any GPU (by serial) or NIC (by GUID) of this node
open in it? The ledger remembers parts across instances, so a GPU sent for repair that comes
back in another node is named where it failed before."""

from __future__ import annotations

from pathlib import Path

from harness.base.errors import ProbeError
from harness.base.settings import get_str
from harness.checking import check, fail, measure, not_applicable, warn
from harness.profiles.model import Profile


@check(
    "PF-LEDGER-001",
    title="No GPU or NIC of this node is open in the bad-hardware ledger",
    why="A part that failed before (in this instance or another) fails again; the ledger "
        "remembers GPU serials and NIC GUIDs across instance replacement",
    remedy="replace the part, or clear its entry once repaired: "
           "`preflight ledger clear KEY --why '...'`",
    reads=("PREFLIGHT_LEDGER (a folder or s3:// prefix); GPU serials from NVML or nvidia-smi; "
           "NIC GUIDs from /sys/class/infiniband/*/node_guid. An unreadable ledger or GPU list "
           "is an error",),
)
def test_no_ledgered_hardware(profile: Profile, tier: str, environ: dict[str, str],
                              sysroot: Path):
    where = get_str("PREFLIGHT_LEDGER", environ)
    if not where:
        not_applicable("no bad-hardware ledger: PREFLIGHT_LEDGER is not set")
    # Imported where a ledger is set (start-up, issue 28: the stores bring the uploads' modules).
    from harness.memory.identity import gpu_keys, read_gpus, read_nics
    from harness.memory.ledger import Ledger, describe, keys_of
    from harness.memory.store import Store, StoreError

    inv, problem = read_gpus(profile, sysroot)
    if problem and profile.has_gpus:
        raise ProbeError(f"cannot look this node's GPUs up in the ledger: {problem}")
    keys = keys_of(gpu_keys(inv) if inv else [], read_nics(sysroot))
    if not keys:
        not_applicable("no GPU serial or NIC GUID read on this node: nothing the ledger names")
    try:
        seen = Ledger(Store.of(where)).seen(keys)
    except (StoreError, ValueError) as exc:
        raise ProbeError(f"cannot read the bad-hardware ledger: {exc}") from None
    measure("parts looked up in the ledger", len(keys), op="==", threshold=len(keys), ok=True,
            name="ledger_parts_looked_up")
    measure("of them open in the ledger", len(seen), op="==", threshold=0, ok=not seen,
            name="ledger_parts_open")
    if not seen:
        return
    text = (f"{len(seen)} part(s) of this node are open in the bad-hardware ledger {where}: "
            + "; ".join(describe(e) for e in seen))
    if tier == "preflight":
        warn(text)
    else:
        fail(text + f" (tier {tier} certifies no ledgered part until its entry is cleared)")
