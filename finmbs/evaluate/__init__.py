"""Evaluation: benchmark loaders, sampling through the gateway, pass@k, compare, and the data audits."""


class EvalError(ValueError):
    """Bad eval input (a result file, an option combination), reported in one line."""
