"""Hascoet et al.'s analyses: controlled factor splits, the correction ladder, the reproduction table."""
