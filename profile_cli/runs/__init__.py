"""Runs under nsys: one config, a sweep (locally or on Slurm), its index, and mining the result."""
