"""Stand-in TransformerEngine (tests/fake_te/README.md)."""

__version__ = "2.4.0+fake"
