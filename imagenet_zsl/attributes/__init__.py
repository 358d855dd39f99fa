"""attributes stage."""
