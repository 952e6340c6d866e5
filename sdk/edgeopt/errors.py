"""Host-side view of the shared exception hierarchy (defined once, in the agent package)."""
from edgeopt_agent.errors import EdgeoptError, MissingExtraError, UserError, require

__all__ = ["EdgeoptError", "MissingExtraError", "UserError", "require"]
