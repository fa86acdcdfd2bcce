"""lacs tests (the C suites are tests/*.c; the Python ones tests/python)."""
