"""The one distributed worker: a single torchrun launch per node that runs every torch
measurement of the tier (compute sanity, the all_reduce sweep, the FSDP2 training step) in one
process group, each part bounded by its own timeout and reported as its own JSON line.

- `group`: the only place a process group is created (`init_group`), bounded waits, and the
  FSDP2 imports that differ between torch versions.
- `parts`: the parts and the torchrun entry point (`python -m harness.worker`).
- `launch`: the launcher side (pytest process): the command, the run, one result per part.
- `compute`: compute sanity on this rank's GPU (run by every rank at once).
- `links`: small-message all_reduce latency, then host and peer copies on rank 0.
"""
