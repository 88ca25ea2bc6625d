"""The package version, kept in one place."""

__version__ = "0.3.0"
