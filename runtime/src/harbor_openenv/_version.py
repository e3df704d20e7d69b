"""The one place the release version is written; copier.yml and hatchling read it from here."""

__version__ = "0.2.0.dev0"
