"""The GPU runs behind docs/ (one shell script per lesson or issue, each writing its logs into
OUT_DIR) and `smoke`, every lesson with --strict --bench, run before any change to docs/."""
