"""crossrail: a control plane for training fleets that mix TPUs and GPUs."""

from crossrail.client import API_VERSION, Client
from crossrail.errors import CrossrailError, Problem, SpecError

__version__ = "0.1.0"

__all__ = ["API_VERSION", "Client", "CrossrailError", "Problem", "SpecError", "__version__"]
