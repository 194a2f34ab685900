"""Profiles as data: the Profile record, the built-in table (profiles.toml) and the
checks a profile file passes when it is read."""
