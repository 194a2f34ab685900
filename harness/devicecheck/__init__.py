"""`scripts/device-check`: one bounded run on a machine with NVIDIA GPUs that brings back every
figure the profiles still estimate (the production worker launch with NCCL_DEBUG=INFO, the
training step per recipe and seed with a perturbed run it must catch, nccl-tests at the gate's
settings and NVLS-only, NVLink counters across the run), and `--rehearse`, the same steps
through the same code on a CPU machine (gloo, 2 ranks, the project's fake NVML and tools).

- `record`: a figure, a step's result (a step that printed no figure has failed), the output
  files (figures.json, summary.txt).
- `context`: what a step needs (mode, profile, environment, NVML, the budget's deadline).
- `machine`: versions, NVML beside nvidia-smi, dcgmi, the NVLink counter sampler.
- `launch`: the worker launch (start-up per rank, compute, sdc, links, bandwidth, train, its NCCL
  log) and the training runs (recipes x seeds, the perturbed run).
- `nccl`: nccl-tests at the gate's settings, and the NVLS-only pass.
- `run`: the steps in order within the budget (`main`).
- `patch`: figures.json -> a profile patch whose entries cite where they were measured.
"""
