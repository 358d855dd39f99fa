"""images stage."""
