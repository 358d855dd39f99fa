"""splits stage."""
