"""crossrail: a control plane for training fleets that mix TPUs and GPUs."""

from crossrail.errors import CrossrailError, Problem, SpecError

__version__ = "0.1.0"
API_VERSION = "crossrail/v1"

__all__ = ["API_VERSION", "CrossrailError", "Problem", "SpecError", "__version__"]
