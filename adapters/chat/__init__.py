"""Chat clients."""
