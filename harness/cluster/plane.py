"""The control plane: the ONE place that sets up torch.distributed for the cluster step (a c10d
TCPStore served by node rank 0, a gloo process group over it, 2-rank subgroups for pairs).

Results travel through the store, not through collectives: each node sets its own key and
bumps a counter; the master waits on the counter with a deadline and names exactly the ranks
whose keys are missing. A collective (all_gather_object) would fail as a whole when one peer
hangs or dies, without saying which, and leave the group unusable.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from harness.base.jsontypes import JSONValue
from harness.topology.model import Topology

if TYPE_CHECKING:
    import torch
    from torch.distributed import ProcessGroup

__all__ = ["ControlPlane", "PlaneError"]

#: How often a waiting master re-reads a counter, s (1024 nodes x 4 polls/s is nothing).
POLL_S = 0.25
#: Keys per `check`/`multi_get` request when the master reads every node's key.
BATCH = 1024


class PlaneError(RuntimeError):
    """The control plane could not be reached or stopped answering; str() says which."""


def _log(msg: str) -> None:
    print(f"preflight cluster: {msg}", file=sys.stderr, flush=True)


class ControlPlane:
    """This node's handle on the cluster's TCPStore (and, later, the gloo process group)."""

    def __init__(self, topo: Topology, store: Any, env_set: Mapping[str, str | None]) -> None:
        self.topo, self.store = topo, store
        self._env_restore = dict(env_set)
        self.pg_ready = False
        self.members: list[int] = list(range(topo.num_nodes))
        """The job ranks in the process group, by group rank (`init_collectives`)."""

    @classmethod
    def join(cls, topo: Topology, timeout_s: float, env: Mapping[str, str] | None = None
             ) -> ControlPlane:
        """Serve (rank 0) or connect to the store; bounded by `timeout_s`. Raises PlaneError."""
        import torch.distributed as dist

        env = os.environ if env is None else env
        changed = _set_env(_plane_env(topo, env))
        is_master = topo.node_rank == 0 and topo.local_rank == 0
        _log(f"node rank {topo.node_rank}/{topo.num_nodes} ({topo.source}); control plane "
             f"{'serving' if is_master else 'at'} {topo.master_addr}:{topo.port}, "
             f"join timeout {timeout_s:g} s")
        if is_master:
            try:
                _room_for_sockets(topo.num_nodes)
            except PlaneError:
                _restore_env(changed)
                raise
        try:
            store = dist.TCPStore(topo.master_addr, topo.port, None, is_master,
                                  timedelta(seconds=timeout_s), wait_for_workers=False)
        except Exception as exc:  # DistStoreError / RuntimeError: refused, timed out, bad host
            _restore_env(changed)
            what = "serve" if is_master else "reach"
            raise PlaneError(f"could not {what} the control plane at {topo.master_addr}:"
                             f"{topo.port} within {timeout_s:g} s: "
                             f"{type(exc).__name__}: {_short(exc)}") from exc
        store.set_timeout(timedelta(seconds=timeout_s))
        return cls(topo, store, changed)

    # --- the store ---
    def publish(self, key: str, value: object, counter: str | None = None) -> None:
        try:
            self.store.set(key, json.dumps(value, default=str))
            if counter:
                self.store.add(counter, 1)
        except Exception as exc:
            raise PlaneError(f"control plane lost while publishing {key}: {_short(exc)}") from exc

    def count(self, counter: str) -> int:
        try:
            return int(self.store.add(counter, 0))
        except Exception as exc:
            raise PlaneError(f"control plane lost while reading {counter}: "
                             f"{_short(exc)}") from exc

    def bump(self, counter: str) -> None:
        """Add 1 to `counter` (a flag many nodes may raise: one read tells the master)."""
        try:
            self.store.add(counter, 1)
        except Exception as exc:
            raise PlaneError(f"control plane lost while bumping {counter}: "
                             f"{_short(exc)}") from exc

    def gather(self, keys: Mapping[int, str], counter: str, deadline: float,
               enough: Callable[[int], bool] | None = None) -> tuple[dict[int, JSONValue], list[int]]:
        """Wait until every key is set (by its counter), `enough(count)` says to stop early,
        or the deadline; (values, missing). The master's requests do not grow with N per
        poll (one counter read); the keys are then read BATCH at a time (`check` per batch,
        halved down to the missing ones, one `multi_get` per batch), not one by one."""
        want, pause = len(keys), 0.005
        try:
            while time.monotonic() < deadline:
                got = self.store.add(counter, 0)
                if got >= want or (enough is not None and enough(got)):
                    break
                time.sleep(pause)
                pause = min(pause * 2, POLL_S)  # fast when everyone is there, cheap when not
            ranks = sorted(keys)
            present = [r for i in range(0, len(ranks), BATCH)
                       for r in self._present(ranks[i:i + BATCH], keys)]
            found: dict[int, JSONValue] = {}
            for i in range(0, len(present), BATCH):
                chunk = present[i:i + BATCH]
                values = self.store.multi_get([keys[r] for r in chunk])
                found.update((r, json.loads(v)) for r, v in zip(chunk, values, strict=True))
        except Exception as exc:
            raise PlaneError(f"control plane lost while gathering {counter}: "
                             f"{_short(exc)}") from exc
        return found, [r for r in ranks if r not in found]

    def _present(self, ranks: list[int], keys: Mapping[int, str]) -> list[int]:
        """Which of `ranks` have their key set: one `check` when all do, halving otherwise
        (about 2 m log2(BATCH) checks for m missing). `multi_get` would wait for a missing
        key, so only present keys are read."""
        if not ranks or self.store.check([keys[r] for r in ranks]):
            return ranks
        if len(ranks) == 1:
            return []
        mid = len(ranks) // 2
        return self._present(ranks[:mid], keys) + self._present(ranks[mid:], keys)

    def has(self, key: str) -> bool:
        try:
            return bool(self.store.check([key]))
        except Exception:
            return False

    def wait_for(self, key: str, deadline: float) -> JSONValue:
        """The value of `key` once set; PlaneError at the deadline or when the master is gone.
        One `store.wait` until the deadline, not a poll: the master answers when the key is
        set, so N waiting nodes cost it nothing per second (a poll of N nodes at 4/s is
        65,536 requests/s at 16,384 nodes). A master that goes away closes the socket: the
        wait fails at once. c10d logs a warning when a wait times out: once, at the deadline."""
        try:
            if not self.store.check([key]):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise PlaneError(f"no {key!r} from the control-plane master by the deadline")
                try:
                    self.store.wait([key], timedelta(seconds=left))
                except Exception as exc:
                    if time.monotonic() >= deadline - 0.05 and "timeout" in str(exc).lower():
                        raise PlaneError(f"no {key!r} from the control-plane master by the "
                                         "deadline") from exc
                    raise
            return json.loads(self.store.get(key))
        except PlaneError:
            raise
        except Exception as exc:
            raise PlaneError(f"control plane lost while waiting for {key!r}: "
                             f"{_short(exc)}") from exc

    # --- collectives ---
    def init_collectives(self, timeout_s: float, gpus: bool = False,
                         members: Sequence[int] | None = None) -> torch.device:
        """The process group of `members` (job ranks; all nodes when None) over the same store
        (prefix `pg/`): gloo, plus NCCL for CUDA tensors when `gpus` and CUDA is usable. Its
        ranks are the members' positions (nodes left out take no part). Returns the bench's
        device."""
        import torch
        import torch.distributed as dist

        backend, device = "gloo", torch.device("cpu")
        if gpus and torch.cuda.is_available():
            backend, device = "cpu:gloo,cuda:nccl", torch.device("cuda", 0)
            torch.cuda.set_device(device)
        from harness.worker.group import init_group

        self.members = list(range(self.topo.num_nodes) if members is None else members)
        init_group(backend, store=dist.PrefixStore("pg/", self.store),
                   rank=self.members.index(self.topo.node_rank),
                   world_size=len(self.members), timeout_s=timeout_s)
        self.pg_ready = True
        return device

    def pair_groups(self, pairs: Iterable[tuple[int, int]], timeout_s: float
                    ) -> ProcessGroup | None:
        """Create every pair's 2-rank gloo group (all nodes call this with the same pairs, in
        the same order: torch numbers groups by creation order); returns this node's group or
        None. Creating its own group connects to the peer, bounded by `timeout_s`."""
        import torch.distributed as dist

        mine = None
        for a, b in pairs:
            ranks = sorted((a, b))
            group = dist.new_group([self.members.index(r) for r in ranks],
                                   timeout=timedelta(seconds=timeout_s))
            if self.topo.node_rank in ranks:
                mine = group
        return mine

    def member_groups(self, sets: Iterable[Iterable[int]], timeout_s: float
                      ) -> ProcessGroup | None:
        """Create each node set's gloo group (every node calls this with the same sets, in
        the same order); returns the group this node belongs to, or None."""
        import torch.distributed as dist

        mine = None
        for members in sets:
            ranks = sorted(members)
            group = dist.new_group(ranks, timeout=timedelta(seconds=timeout_s))
            if self.topo.node_rank in ranks:
                mine = group
        return mine

    def close(self, clean: bool) -> None:
        """Tear down (a barrier-free destroy when a peer may be hung: a barrier would wait for
        it) and restore every environment variable this module set."""
        if self.pg_ready and clean:
            import torch.distributed as dist

            try:
                dist.destroy_process_group()
            except Exception as exc:
                _log(f"destroy_process_group: {_short(exc)}")
        self.pg_ready = False
        _restore_env(self._env_restore)


#: Descriptors the master needs besides one socket per node (its own files, pipes, gloo, NCCL).
FD_MARGIN = 256


def _room_for_sockets(num_nodes: int) -> None:
    """The master's store holds one socket per node: raise the soft open-files limit to the
    hard one when it is short (as NCCL does: src/os/linux.cc ncclOsSetFilesLimit), and say so
    at once when even the hard limit is (instead of nodes failing to join past ~1,000)."""
    import resource

    need = num_nodes + FD_MARGIN
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < need:
        if hard != resource.RLIM_INFINITY and hard < need:
            raise PlaneError(f"the control-plane master needs {need} open files (one socket "
                             f"per node of {num_nodes}, + {FD_MARGIN}), but the hard limit "
                             f"is {hard}: raise it (ulimit -n, the container's nofile)")
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        _log(f"raised the open-files soft limit from {soft} to {hard} (one socket per node)")


def _plane_env(topo: Topology, env: Mapping[str, str]) -> dict[str, str]:
    """Variables the control plane needs: gloo connects lazily; gloo must use loopback when
    the master is local (its default is the interface of the hostname's address)."""
    wanted = {}
    if "TORCH_GLOO_LAZY_INIT" not in env:
        # gloo connects every pair of ranks when a group is built (N-1 sockets per node, N^2/2
        # connections, every node reading N store keys); lazily, a rank connects to a peer on
        # first use: the ring all_reduce's two neighbours (docs/multinode.md, Scale).
        wanted["TORCH_GLOO_LAZY_INIT"] = "1"
    if env.get("TORCH_DIST_INIT_BARRIER", "0") != "0":
        # A store barrier over all N nodes after each of the N/2 pair groups of a round:
        # N^2/2 store requests a round (torch.distributed.new_group, _store_based_barrier).
        wanted["TORCH_DIST_INIT_BARRIER"] = "0"
    if topo.master_addr in ("127.0.0.1", "localhost", "::1") and not env.get("GLOO_SOCKET_IFNAME"):
        wanted["GLOO_SOCKET_IFNAME"] = "lo"
    return wanted


def _set_env(values: Mapping[str, str]) -> dict[str, str | None]:
    old = {}
    for key, value in values.items():
        old[key] = os.environ.get(key)
        os.environ[key] = value
        _log(f"set {key}={value} (restored before the hand-off)")
    return old


def _restore_env(old: Mapping[str, str | None]) -> None:
    for key, value in old.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def _short(exc: BaseException, limit: int = 300) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
