"""Errors the library raises on purpose. Each message is one line and says what to do."""


class GradalignError(Exception):
    """Base class: the CLI prints these as a one-line error instead of a traceback."""


class ConfigError(GradalignError, ValueError):
    """Bad input (unknown id or preset, a parameter out of range), raised before any compute."""


class DataNotFoundError(GradalignError, FileNotFoundError):
    """A data set is not where we looked; the message says how to get it."""


class DivergenceError(GradalignError, FloatingPointError):
    """A quantity became NaN or Inf during a run."""


class NotRunHereError(GradalignError, RuntimeError):
    """An experiment whose preset is defined and validated but cannot run on this kind of machine (the message
    says what it needs); raised before any compute."""


class BookBuildError(GradalignError, RuntimeError):
    """jupyter-book (Sphinx) reported an error or a warning; its output is printed above the message."""
