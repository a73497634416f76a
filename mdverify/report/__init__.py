"""The verification report: ``mdverify report`` writes reports/REPORT.md and its plots."""

from mdverify.report.build import build_report

__all__ = ["build_report"]
