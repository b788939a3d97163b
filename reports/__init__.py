"""Analyses of nsys exports: ``ExportAnalysis`` (reports.analysis) loads an export once and
answers with ``Report`` values (row dicts in column order, plus notes); rendering lives in
reports.render."""
