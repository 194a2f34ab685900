"""Judges: one module per check family, each judge a function of parsed facts and the
profile that returns a Verdict. No probe, parser, fixture, run or report here."""
