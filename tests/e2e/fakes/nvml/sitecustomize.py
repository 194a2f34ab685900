"""Installs the fake `pynvml` beside this file in every Python process of an end-to-end run
(the folder is on PYTHONPATH). Why not just PYTHONPATH: the check session is pytest with
--rootdir at the installed site-packages, and pytest puts that folder first on sys.path, so the
real nvidia-ml-py would win an ordinary import; a module already in sys.modules wins over any
path (https://docs.python.org/3/library/site.html: sitecustomize runs at start-up)."""

import importlib.util
import sys
from pathlib import Path

_spec = importlib.util.spec_from_file_location("pynvml", Path(__file__).with_name("pynvml.py"))
if _spec is not None and _spec.loader is not None and "pynvml" not in sys.modules:
    _module = importlib.util.module_from_spec(_spec)
    sys.modules["pynvml"] = _module
    _spec.loader.exec_module(_module)
