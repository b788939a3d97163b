"""The files of the model benchmarks: infer's and micro's JSON, CSV, plots and reports."""
