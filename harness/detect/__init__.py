"""Where are we: the instance type, and a profile derived for a machine no profile names."""
