"""The library version, in a module of its own so that modules inside the package can read it."""

__version__ = "0.1.0"
