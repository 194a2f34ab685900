"""The API server's own validation rules for what container/k8s/*.yaml and docs/container.md
create, checked here without an API server (none can be had on this machine).

Schema validators (kubernetes-validate, kubeconform) check types and field names; the API
server then runs Go validation that no schema expresses, and refuses the object: a Job whose
pod asks for hugepages with no cpu or memory is refused at creation ("HugePages require cpu or
memory"), so a CronJob applies and then never starts a pod, and a JobSet's Jobs are never
created. Each rule below is one such check, with the function of kubernetes/kubernetes it
comes from (pkg/apis/core/validation/validation.go: CORE; pkg/apis/batch/validation/
validation.go: BATCH) and the API server's message. Pod templates are found anywhere in a
manifest (CronJob, JobSet, PyTorchJob): whatever controller turns them into Jobs and Pods, the
API server judges those by these rules.

Hand-written (no Python port of these rules exists; the Go validation needs an API server).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

CORE = "kubernetes pkg/apis/core/validation/validation.go"
BATCH = "kubernetes pkg/apis/batch/validation/validation.go"

#: Every rule checked: ID -> (the kube source, what the API server says).
RULES: dict[str, tuple[str, str]] = {
    "hugepages-need-cpu-or-memory": (
        f"{CORE} ValidateContainerResourceRequirements", "HugePages require cpu or memory"),
    "request-equals-limit": (
        f"{CORE} ValidateContainerResourceRequirements (helper.IsOvercommitAllowed: only cpu, "
        "memory and ephemeral-storage may be overcommitted)", "must be equal to <name> limit"),
    "request-at-most-limit": (
        f"{CORE} ValidateContainerResourceRequirements", "must be less than or equal to <name> limit"),
    "limit-for-non-overcommitable": (
        f"{CORE} ValidateContainerResourceRequirements",
        "Limit must be set for non overcommitable resources"),
    "integer-resource": (
        f"{CORE} ValidateResourceQuantityValue (helper.IsIntegerResourceName: extended resources)",
        "must be an integer"),
    "quantity": (f"{CORE} ValidateNonnegativeQuantity / resource.ParseQuantity",
                 "quantities must match the regular expression ..., must be >= 0"),
    "resource-name": (f"{CORE} validateContainerResourceName",
                      "must be a standard resource for containers / doesn't follow extended "
                      "resource name standard"),
    "container-name-unique": (f"{CORE} validateContainers / validateInitContainers",
                              "Duplicate value (init and app containers share one name space)"),
    "container-name": (f"{CORE} validateContainerCommon (ValidateDNS1123Label)",
                       "a lowercase RFC 1123 label"),
    "image": (f"{CORE} validateContainers (pods; templates too once a Pod is made)",
              "Required value"),
    "volume-mount-name": (f"{CORE} ValidateVolumeMounts", "Not found: <volume name>"),
    "volume-mount-path-unique": (f"{CORE} ValidateVolumeMounts", "must be unique"),
    "env-name": (f"{CORE} ValidateEnv (validation.IsEnvVarName)",
                 "a valid environment variable name must consist only of printable ASCII "
                 "characters other than '='"),
    "env-field-path": (
        f"{CORE} validateObjectFieldSelector (validEnvDownwardAPIFieldPathExpressions, "
        "metadata.labels['k'] / metadata.annotations['k'])", "Unsupported value"),
    "termination-message-policy": (f"{CORE} validateContainerCommon",
                                   'supported values: "File", "FallbackToLogsOnError"'),
    "restart-policy": (f"{CORE} validateRestartPolicy",
                       'supported values: "Always", "OnFailure", "Never"'),
    "job-restart-policy": (f"{BATCH} validateJobSpec",
                           'spec.template.spec.restartPolicy: Unsupported value: '
                           '"OnFailure", "Never"'),
    "node-selector-values": (f"{CORE} validateNodeSelectorRequirement",
                             "must be specified when `operator` is 'In' or 'NotIn' / may not "
                             "be specified when `operator` is 'Exists' or 'DoesNotExist'"),
    "topology-key": (f"{CORE} validatePodAffinityTerm", "can not be empty"),
    "cronjob-name-length": (f"{BATCH} ValidateCronJobCreate", "must be no more than 52 characters"),
    "cronjob-schedule": (f"{BATCH} validateScheduleFormat (robfig/cron ParseStandard)",
                         "unparseable schedule"),
    "job-counts": (f"{BATCH} validateJobSpec (ValidateNonnegativeField)",
                   "must be greater than or equal to 0"),
}


@dataclass(frozen=True)
class Violation:
    rule: str
    path: str
    detail: str

    def __str__(self) -> str:
        source, message = RULES[self.rule]
        return f"{self.path}: {self.detail} [{self.rule}: {message!r}; {source}]"


_QUANTITY = re.compile(r"([+-]?(?:\d+\.?\d*|\.\d+))(?:(Ki|Mi|Gi|Ti|Pi|Ei)|([numkMGTPE])|[eE]([+-]?\d+))?")
_BINARY = {s: Decimal(1024) ** i for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"), 1)}
_DECIMAL = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "k": Decimal(10**3),
            "M": Decimal(10**6), "G": Decimal(10**9), "T": Decimal(10**12), "P": Decimal(10**15),
            "E": Decimal(10**18)}


def quantity(text: object) -> Decimal | None:
    """A Kubernetes quantity ("5120Mi", "8", "100m", "1e3") as a number; None when it is not one
    (apimachinery resource.ParseQuantity's grammar)."""
    match = _QUANTITY.fullmatch(str(text).strip())
    if match is None:
        return None
    try:
        number = Decimal(match.group(1))
    except InvalidOperation:
        return None
    if match.group(2):
        return number * _BINARY[match.group(2)]
    if match.group(3):
        return number * _DECIMAL[match.group(3)]
    if match.group(4):
        return number * Decimal(10) ** int(match.group(4))
    return number


_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_QUALIFIED = re.compile(r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)/"
                        r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_ENV_NAME = re.compile(r"[^=\x00-\x1f\x7f]+")
_STANDARD = {"cpu", "memory", "ephemeral-storage"}
_OVERCOMMIT = {"cpu", "memory", "ephemeral-storage"}
_FIELD_PATHS = {"metadata.name", "metadata.namespace", "metadata.uid", "spec.nodeName",
                "spec.serviceAccountName", "status.hostIP", "status.hostIPs", "status.podIP",
                "status.podIPs"}
_SUBSCRIPTED = re.compile(r"metadata\.(labels|annotations)\['[^']+'\]")


def _hugepages(name: str) -> bool:
    return name.startswith("hugepages-")


def _resources(res: dict[str, Any], at: str) -> Iterator[Violation]:
    limits = res.get("limits") or {}
    requests = dict(res.get("requests") or {})
    for name in limits.keys() - requests.keys():  # API defaulting: requests = limits
        requests[name] = limits[name]
    cpu_or_memory = False
    huge = False
    for kind, table in (("limits", limits), ("requests", requests)):
        for name, raw in table.items():
            where = f"{at}.{kind}[{name}]"
            value = quantity(raw)
            if value is None or value < 0:
                yield Violation("quantity", where, f"{raw!r} is not a non-negative quantity")
                continue
            if "/" not in name and name not in _STANDARD and not _hugepages(name):
                yield Violation("resource-name", where, f"{name!r} is not a container resource")
            if "/" in name and not _QUALIFIED.fullmatch(name):
                yield Violation("resource-name", where, f"{name!r} is not a qualified name")
            if "/" in name and value != value.to_integral_value():
                yield Violation("integer-resource", where, f"{raw!r} is not a whole number")
            cpu_or_memory |= name in ("cpu", "memory")
            huge |= _hugepages(name)
    for name, raw in (res.get("requests") or {}).items():
        request, limit = quantity(raw), quantity(limits.get(name, ""))
        if request is None:
            continue
        overcommit = name in _OVERCOMMIT
        if limit is None and not overcommit:
            yield Violation("limit-for-non-overcommitable", f"{at}.limits[{name}]",
                            f"request {raw} with no limit")
        elif limit is not None and not overcommit and request != limit:
            yield Violation("request-equals-limit", f"{at}.requests[{name}]",
                            f"request {raw} != limit {limits[name]}")
        elif limit is not None and request > limit:
            yield Violation("request-at-most-limit", f"{at}.requests[{name}]",
                            f"request {raw} > limit {limits[name]}")
    if huge and not cpu_or_memory:
        yield Violation("hugepages-need-cpu-or-memory", at,
                        "hugepages requested with no cpu or memory request or limit")


def _container(c: dict[str, Any], at: str, volumes: set[str]) -> Iterator[Violation]:
    if not _DNS_LABEL.fullmatch(str(c.get("name", ""))) or len(str(c.get("name"))) > 63:
        yield Violation("container-name", f"{at}.name", f"{c.get('name')!r}")
    if not c.get("image"):
        yield Violation("image", f"{at}.image", "no image")
    yield from _resources(c.get("resources") or {}, f"{at}.resources")
    paths: set[str] = set()
    for i, mount in enumerate(c.get("volumeMounts") or []):
        if mount.get("name") not in volumes:
            yield Violation("volume-mount-name", f"{at}.volumeMounts[{i}].name",
                            f"{mount.get('name')!r} is not a volume of the pod")
        if mount.get("mountPath") in paths:
            yield Violation("volume-mount-path-unique", f"{at}.volumeMounts[{i}].mountPath",
                            f"{mount.get('mountPath')!r} twice")
        paths.add(mount.get("mountPath"))
    for i, env in enumerate(c.get("env") or []):
        if not _ENV_NAME.fullmatch(str(env.get("name", ""))):
            yield Violation("env-name", f"{at}.env[{i}].name", f"{env.get('name')!r}")
        field_path = ((env.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
        if field_path is not None and field_path not in _FIELD_PATHS \
                and not _SUBSCRIPTED.fullmatch(field_path):
            yield Violation("env-field-path", f"{at}.env[{i}].valueFrom.fieldRef.fieldPath",
                            f"{field_path!r}")
    policy = c.get("terminationMessagePolicy")
    if policy is not None and policy not in ("File", "FallbackToLogsOnError"):
        yield Violation("termination-message-policy", f"{at}.terminationMessagePolicy", policy)


def pod_spec(spec: dict[str, Any], at: str, *, in_job: bool = False) -> Iterator[Violation]:
    """The rules the API server applies to a Pod made from this spec (and, in_job, to the Job
    that holds it)."""
    volumes = {v.get("name") for v in spec.get("volumes") or []}
    names: set[str] = set()
    for kind in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(kind) or []):
            if c.get("name") in names:
                yield Violation("container-name-unique", f"{at}.{kind}[{i}].name", f"{c['name']!r}")
            names.add(c.get("name"))
            yield from _container(c, f"{at}.{kind}[{i}]", volumes)
    policy = spec.get("restartPolicy", "Always")
    if policy not in ("Always", "OnFailure", "Never"):
        yield Violation("restart-policy", f"{at}.restartPolicy", f"{policy!r}")
    elif in_job and policy not in ("OnFailure", "Never"):
        yield Violation("job-restart-policy", f"{at}.restartPolicy", f"{policy!r} in a Job")
    yield from _affinity(spec.get("affinity") or {}, f"{at}.affinity")


def _affinity(affinity: dict[str, Any], at: str) -> Iterator[Violation]:
    required = (affinity.get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution") or {}
    for t, term in enumerate(required.get("nodeSelectorTerms") or []):
        for e, expr in enumerate(term.get("matchExpressions") or []):
            where = f"{at}.nodeAffinity...nodeSelectorTerms[{t}].matchExpressions[{e}]"
            has_values = bool(expr.get("values"))
            if expr.get("operator") in ("In", "NotIn") and not has_values:
                yield Violation("node-selector-values", where, "no values")
            if expr.get("operator") in ("Exists", "DoesNotExist") and has_values:
                yield Violation("node-selector-values", where, "values given")
    for kind in ("podAffinity", "podAntiAffinity"):
        terms = (affinity.get(kind) or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
        for t, term in enumerate(terms or []):
            if not term.get("topologyKey"):
                yield Violation("topology-key", f"{at}.{kind}[{t}].topologyKey", "empty")


def _job_spec(spec: dict[str, Any], at: str) -> Iterator[Violation]:
    for name in ("parallelism", "completions", "backoffLimit"):
        if name in spec and (not isinstance(spec[name], int) or spec[name] < 0):
            yield Violation("job-counts", f"{at}.{name}", f"{spec[name]!r}")
    yield from pod_spec(spec["template"]["spec"], f"{at}.template.spec", in_job=True)


_CRON_FIELD = re.compile(r"(\*|\d+(-\d+)?)(/\d+)?(,(\*|\d+(-\d+)?)(/\d+)?)*")


def _is_job_spec(node: dict[str, Any]) -> bool:
    template = node.get("template")
    return isinstance(template, dict) and "containers" in (template.get("spec") or {})


def _find(node: object, at: str, wanted: Callable[[dict[str, Any]], bool]
          ) -> Iterator[tuple[dict[str, Any], str]]:
    """Every mapping nested in `node` (a CRD's spec) that is `wanted`, with its path; the
    search does not go inside one that is found."""
    if isinstance(node, dict):
        if wanted(node):
            yield node, at
            return
        for key, value in node.items():
            yield from _find(value, f"{at}.{key}", wanted)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _find(value, f"{at}[{i}]", wanted)


def manifest(doc: dict[str, Any]) -> list[Violation]:
    """Every rule broken by one manifest document (any kind that holds pod templates)."""
    kind = doc.get("kind")
    found: list[Violation] = []
    if kind == "CronJob":
        name = doc["metadata"]["name"]
        if len(name) > 52:
            found.append(Violation("cronjob-name-length", "metadata.name", f"{len(name)} chars"))
        fields = str(doc["spec"].get("schedule", "")).split()
        if len(fields) != 5 or not all(_CRON_FIELD.fullmatch(f) for f in fields):
            found.append(Violation("cronjob-schedule", "spec.schedule", repr(doc["spec"].get("schedule"))))
        found += _job_spec(doc["spec"]["jobTemplate"]["spec"], "spec.jobTemplate.spec")
    elif kind in ("Job", "JobSet"):
        found += (v for spec, at in _find(doc.get("spec"), "spec", _is_job_spec)
                  for v in _job_spec(spec, at))
    elif kind == "Pod":
        found += pod_spec(doc["spec"], "spec")
    else:  # PyTorchJob and other operators' kinds: pod templates under any key
        found += (v for spec, at in _find(doc.get("spec"), "spec", lambda n: "containers" in n)
                  for v in pod_spec(spec, at))
    return found
