"""The gpu-preflight check suite: plain pytest files, one per area (run by `preflight run`)."""
