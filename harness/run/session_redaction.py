"""Secrets never leave a check session: every report pytest makes (each phase of a test, each
collection) is redacted as it is made, before pytest's junit writer, its terminal
(pytest-output.txt) and xdist's channel read it: the exception's message (before pytest
formats it), then the formatted traceback, the captured output, the user properties, and
each warning a check raises. harness.plugin registers it when it is in force; the
check results and every event of results.jsonl are redacted with the same Redactor."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Generator

import pytest

from harness.base.redact import Redactor

__all__ = ["SessionRedaction", "redact_in_place"]

#: Nesting deeper than this is left as it is (pytest's reprs are a few levels deep).
_DEPTH = 12


def redact_in_place(value: object, redact: Callable[[str], str], _depth: int = 0) -> object:
    """`value` with every string in it redacted: strings and tuples are rebuilt, lists and
    pytest's repr objects (dataclasses, TerminalRepr) changed in place, anything else kept."""
    if isinstance(value, str):
        return redact(value)
    if _depth >= _DEPTH:
        return value
    deeper = _depth + 1
    if isinstance(value, list):
        value[:] = [redact_in_place(v, redact, deeper) for v in value]
    elif isinstance(value, tuple):
        return tuple(redact_in_place(v, redact, deeper) for v in value)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            object.__setattr__(value, f.name,
                               redact_in_place(getattr(value, f.name), redact, deeper))
    elif hasattr(value, "toterminal") and hasattr(value, "__dict__"):
        # pytest's TerminalRepr classes that are not dataclasses (CollectErrorRepr,
        # FixtureLookupErrorRepr): their attributes are strings and lists of them.
        for name, item in list(vars(value).items()):
            setattr(value, name, redact_in_place(item, redact, deeper))
    return value


class SessionRedaction:
    """The plugin object: its wrappers run outermost (tryfirst), after every other plugin has
    made its part of the report, so nothing is added after it."""

    def __init__(self, redactor: Redactor) -> None:
        self.redactor = redactor

    def _report(self, report: pytest.TestReport | pytest.CollectReport) -> None:
        text = self.redactor.text
        report.longrepr = redact_in_place(report.longrepr, text)
        report.sections = [(title, text(content)) for title, content in report.sections]
        if isinstance(report, pytest.TestReport):
            # As a key: a property named like a credential has its value redacted whole.
            report.user_properties = [(name, self.redactor.obj({name: value})[name])
                                      for name, value in report.user_properties]

    def _exception(self, exc: BaseException | None, depth: int = 0) -> None:
        """Its message redacted before pytest formats it: the traceback's `E   ` lines would
        cut a multi-line secret (a PEM block, a YAML line) into pieces no longer recognised.
        pytest's outcomes (skip, fail) keep theirs in `msg`; causes are followed."""
        if exc is None or depth > 5:
            return
        exc.args = tuple(self.redactor.text(a) if isinstance(a, str) else a for a in exc.args)
        if isinstance(getattr(exc, "msg", None), str):
            exc.msg = self.redactor.text(exc.msg)  # type: ignore[attr-defined]
        self._exception(exc.__cause__, depth + 1)
        if not exc.__suppress_context__:
            self._exception(exc.__context__, depth + 1)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_makereport(
        self, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        if call.excinfo is not None:
            self._exception(call.excinfo.value)
        report: pytest.TestReport = yield
        self._report(report)
        return report

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_make_collect_report(self) -> Generator[None, pytest.CollectReport,
                                                      pytest.CollectReport]:
        report: pytest.CollectReport = yield
        self._report(report)
        return report

    @pytest.hookimpl(tryfirst=True)
    def pytest_warning_recorded(self, warning_message: warnings.WarningMessage) -> None:
        """A warning a check raised, before the terminal's warnings summary stores it."""
        text = str(warning_message.message)
        redacted = self.redactor.text(text)
        if redacted != text:
            try:
                warning_message.message = warning_message.category(redacted)
            except Exception:  # a category whose constructor wants more: the text is what counts
                warning_message.message = UserWarning(redacted)
        if warning_message.line:
            warning_message.line = self.redactor.text(warning_message.line)
