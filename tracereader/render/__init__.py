"""Text and JSON of a reading: they format, they compute nothing."""
