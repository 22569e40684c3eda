"""Judgements on a trace: the findings ranked by the time at stake (`findings`) and the lessons'
declared expectations checked against it (`expectations`)."""
