"""`preflight launch`: start (or with --dry-run print) a SageMaker job that certifies nodes."""

from __future__ import annotations

import argparse
import json
import sys

from harness.commands import EXIT_HARNESS, EXIT_OK, UsageError
from harness.run.launch import LaunchError, LaunchSpec, build_request, submit

__all__ = ["cmd_launch"]


def cmd_launch(args: argparse.Namespace) -> int:
    env: dict[str, str] = {}
    for item in args.env:
        name, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"--env wants NAME=VALUE, got {item!r}")
        env[name] = value
    try:
        spec = LaunchSpec(
            instance_type=args.instance_type, instance_count=args.instance_count,
            image=args.image, role=args.role, output=args.output, tier=args.tier,
            training_plan=args.training_plan, spot=args.spot, max_wait_s=args.max_wait,
            checkpoint_s3_uri=args.checkpoint_s3_uri, max_runtime_s=args.max_runtime,
            volume_gb=args.volume_gb, job_name=args.job_name, cluster=args.cluster,
            cloudwatch_namespace=args.cloudwatch_namespace, environment=env,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.dry_run:
        print(json.dumps(build_request(spec), indent=2))
        return EXIT_OK
    try:
        name = submit(spec)
    except LaunchError as exc:
        print(f"preflight launch: {exc}", file=sys.stderr)
        return EXIT_HARNESS
    print(f"started training job {name}: {spec.instance_count} x {spec.instance_type}, "
          f"tier {spec.tier}")
    print(f"reports: {spec.reports_uri}<date>/{name}/<host>/report.json; when it ends: "
          f"preflight report {spec.reports_uri}<date>/{name}/ --html report.html")
    return EXIT_OK
