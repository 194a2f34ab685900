"""The run: the pytest sessions, what they selected and reported, progress, signals."""
