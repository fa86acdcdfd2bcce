"""Python tests: make test-python (unittest discover -s tests/python -t .)."""
