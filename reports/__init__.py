"""Reports over nsys exports: DataFrames in, DataFrames out; rendering lives in reports.render."""
