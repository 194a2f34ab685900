"""The self-contained HTML report page (`preflight report --html`)."""
