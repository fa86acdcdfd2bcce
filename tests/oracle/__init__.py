"""The independent NumPy oracle of the golden vectors (tests/oracle/oracle.py)."""
