"""Root conftest: loads the gpu-preflight pytest plugin and pytester for the harness's own tests."""

pytest_plugins = ["harness.plugin", "pytester"]
