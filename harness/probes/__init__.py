"""Probes touch the machine (subprocess, NVML, sysfs, env) and return raw text or small records;
no thresholds, no asserts. Every subprocess goes through `harness.base.proc.run`."""
