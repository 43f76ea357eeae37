"""ldp-audit."""
