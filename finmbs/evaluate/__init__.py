"""Evaluation: benchmark loaders, sampling through the gateway, pass@k, compare, and the data audits."""

from finmbs.errors import FinmbsError


class EvalError(FinmbsError, ValueError):
    """Bad eval input (a result file, an option combination), reported in one line."""
