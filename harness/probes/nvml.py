"""NVML (nvidia-ml-py) once per process: `session(nvml)` calls nvmlInit the first time a process
asks and keeps it; `shutdown()` (registered with atexit) calls nvmlShutdown. The inventory and
the two NVLink samples of a check session share one initialisation instead of three.

nvml.h: "A reference count of the number of initializations is maintained, and a corresponding
call to nvmlShutdown() needs to be issued"; what one nvmlInit costs on an 8-GPU node is not
measured (docs/gpu.md). `Reader` runs the queries of one GPU and keeps what went wrong.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
from types import ModuleType
from typing import Any, TypeAlias

from harness.base import deadline as dl

__all__ = ["NvmlHandle", "NvmlStartError", "NvmlUnavailableError", "Reader", "load", "session",
           "shutdown", "text"]

#: An opaque pynvml device handle (c_nvmlDevice_t, from nvmlDeviceGetHandleByIndex/ByUUID):
#: only passed back to NVML calls. nvidia-ml-py has no type stubs, so no narrower type names it.
NvmlHandle: TypeAlias = object


class NvmlUnavailableError(RuntimeError):
    """NVML could not start (no driver, library missing, no permission); str() says why."""


class NvmlStartError(NvmlUnavailableError):
    """nvmlInit itself failed (not a hang, not a later query): `reason` is NVML's error."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"NVML could not start: {reason}")
        self.reason = reason


def load(nvml: ModuleType | None) -> ModuleType:
    """`nvml`, or nvidia-ml-py's pynvml module when None. (`nvml` is pynvml, or a test's
    stand-in with the same attributes.)"""
    if nvml is not None:
        return nvml
    try:
        import pynvml
    except ImportError as exc:  # pragma: no cover - nvidia-ml-py is a dependency
        raise NvmlUnavailableError(f"nvidia-ml-py is not installed ({exc})") from exc
    return pynvml


def text(value: object) -> str:
    """A string NVML returned (older nvidia-ml-py returns bytes)."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


# id(module) -> (module, pid that initialised it). The module is kept so that its id is not
# reused by another object; the pid because a forked child must initialise NVML itself.
_open: dict[int, tuple[ModuleType, int]] = {}
_lock = threading.Lock()


def session(nvml: ModuleType | None = None) -> ModuleType:
    """The NVML module, initialised in this process (nvmlInit once per process and module).
    NvmlUnavailableError when NVML cannot start; a failure is not remembered (the next call
    tries again)."""
    nvml = load(nvml)
    with _lock:
        entry = _open.get(id(nvml))
        if entry is not None and entry[1] == os.getpid():
            return nvml
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        raise NvmlStartError(f"{exc} ({type(exc).__name__})") from exc
    with _lock:
        entry = _open.get(id(nvml))
        if entry is not None and entry[1] == os.getpid():
            # Another thread initialised it meanwhile: give back this reference.
            with contextlib.suppress(nvml.NVMLError):
                nvml.nvmlShutdown()
        else:
            _open[id(nvml)] = (nvml, os.getpid())
    return nvml


def shutdown() -> None:
    """nvmlShutdown for every NVML this process initialised. Skipped for a driver that hung
    earlier in the run: the call would hang the process's exit."""
    with _lock:
        entries = [e for e in _open.values() if e[1] == os.getpid()]
        _open.clear()
    if dl.hung("nvml"):
        return
    for nvml, _pid in entries:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


atexit.register(shutdown)


class Reader:
    """Runs NVML queries for one GPU: a fact the GPU does not support becomes None, a lost GPU
    sets `lost`, any other NVML error is kept in `errors` (and the fact is None)."""

    def __init__(self, nvml: ModuleType) -> None:
        self.nvml = nvml
        self.errors: list[str] = []
        self.lost = False
        self._quiet = {getattr(nvml, n, -1) for n in (
            "NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_FUNCTION_NOT_FOUND",
            "NVML_ERROR_INVALID_ARGUMENT", "NVML_ERROR_NOT_FOUND")}
        self._lost = {getattr(nvml, n, -1) for n in (
            "NVML_ERROR_GPU_IS_LOST", "NVML_ERROR_RESET_REQUIRED")}

    def get(self, name: str, *args: object) -> object:
        """`nvml.<name>(*args)`: what the call returned (an int, str, bytes, a ctypes struct),
        None when it failed or the module has no such call."""
        fn = getattr(self.nvml, name, None)
        if fn is None:
            return None
        try:
            return fn(*args)
        except self.nvml.NVMLError as exc:
            code = getattr(exc, "value", None)
            if code in self._lost:
                self.lost = True
            if code not in self._quiet:
                self.errors.append(f"{name}: {exc}")
            return None

    def fields(self, handle: NvmlHandle,
               ids: list[int] | list[tuple[int, int]]) -> list[int | float | None]:
        """nvmlDeviceGetFieldValues: one value per id (an int, or `(field, scopeId)`: the link
        for NVLink fields), None where that value's own nvmlReturn is not SUCCESS. nvml.h: the
        call "returns NVML_SUCCESS if any values in values were populated. Note that you must
        check the nvmlReturn field of each value for each individual status"."""
        if not ids:
            return []
        values = self.get("nvmlDeviceGetFieldValues", handle, list(ids))
        if not values or len(values) != len(ids):
            return [None] * len(ids)
        return [_field_value(v) if int(v.nvmlReturn) == 0 else None for v in values]


#: nvmlValueType_t -> the member of nvmlValue_t that holds the value.
_VALUE_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal",
                  6: "usVal"}


def _field_value(v: Any) -> int | float | None:
    member = _VALUE_MEMBERS.get(int(getattr(v, "valueType", 1)))
    return None if member is None else getattr(v.value, member)
